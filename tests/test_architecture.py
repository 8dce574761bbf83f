"""The shape of the code: every module sits in a layer, imports point down the layers (function-level
imports included, no cycle inside a layer), and the pipeline, flows and CLI ask the method registry
instead of naming methods."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import mkdist

ROOT = Path(__file__).resolve().parents[1]
#: Source directory of each installed package (see [tool.setuptools.package-dir]).
PACKAGES = {"mkdist": ROOT / "mkdist", "mkdist.storage": ROOT / "storage", "mkdist.flows": ROOT / "flows"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[0] in ("storage", "flows") and pkg == "mkdist":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = path
    return out


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its body (functions included)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.stem == "__init__"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node.level, node.module)
                # "from . import x" / "from mkdist import storage" may name submodules
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                # the longest project module that the imported name is, or lies in
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != module:
                    graph[module].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (cycle := visit(m)):
                return cycle
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


#: The layers, lowest first.  A module imports modules of its own layer and of the layers below
#: it only; each layer is a folder (or a few public modules), so the tree shows the layering.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("mkdist.errors", "mkdist.metrics", "mkdist.datasets")),
    ("core", ("mkdist._core",)),          # row engine, validation, kernels, graphs, k-means, K rule
    ("storage", ("mkdist.storage",)),     # run stores (Zarr), leases, remote locations
    ("methods", ("mkdist._methods",)),    # registry, parameter tables, base classes, the methods
    ("pipeline", ("mkdist._pipeline",)),  # configuration, inputs, stages, drift, Dask runtime
    ("report", ("mkdist._report",)),      # summaries, inspect, figures, the page
    ("run", ("mkdist._run",)),            # mkdist.cluster / assign end to end, the demo
    ("facade", ("mkdist.pipeline", "mkdist.internals")),  # the public pipeline; the benchmarks' building blocks
    ("flows", ("mkdist.flows",)),         # Prefect flows over the facade
    ("front", ("mkdist.cli", "mkdist._cli", "mkdist")),  # the CLI (its helpers in _cli/), the lazy public names
]


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of a module: its folder's, or its own for a public module."""
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if module == m or (m != "mkdist" and module.startswith(m + ".")):
                return i
    return None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up the layers, and every module outside them."""
    out = [f"{m} is in no layer" for m in graph if layer_of(m) is None]
    for module, deps in graph.items():
        here = layer_of(module)
        for d in sorted(deps):
            there = layer_of(d)
            if here is not None and there is not None and there > here:
                out.append(f"{module} ({LAYERS[here][0]}) imports {d} ({LAYERS[there][0]})")
    return out


def test_imports_point_down_the_layers():
    graph = import_graph()
    assert "mkdist._methods._mkc" in graph and "mkdist.storage._store" in graph and "mkdist.flows.cluster" in graph
    assert layer_violations(graph) == []
    cycle = find_cycle(graph)  # inside a layer
    assert cycle is None, " -> ".join(cycle)


def test_no_method_module_imports_another():
    """What two methods share lives in the base classes (mkdist._methods._base) or below, so a
    method's module can change without touching another's."""
    from mkdist._methods._registry import BUILTIN_PARAMETERS

    method_modules = {module for module, _ in BUILTIN_PARAMETERS.values()}
    graph = import_graph()
    assert {m: sorted(graph[m] & method_modules) for m in method_modules} == {m: [] for m in method_modules}


def test_layer_rule_finds_an_upward_import_and_a_module_outside_the_layers():
    graph = {"mkdist._core._kmeans": {"mkdist._methods._base"}, "mkdist._methods._base": {"mkdist._core._kmeans"},
             "mkdist._helpers": set()}
    assert layer_violations(graph) == ["mkdist._helpers is in no layer",
                                       "mkdist._core._kmeans (core) imports mkdist._methods._base (methods)"]


def test_no_private_module_outside_a_layer_folder():
    stray = sorted(p.name for p in (ROOT / "mkdist").glob("_*.py") if p.name != "__init__.py")
    assert stray == [], f"private modules belong in a layer folder (mkdist/_core, _methods, ...): {stray}"


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_storage_and_flows_depend_on_the_library_only_through_its_public_layer():
    graph = import_graph()
    for module, deps in graph.items():
        if module.startswith("mkdist.storage"):
            assert deps <= {d for d in graph if d.startswith("mkdist.storage")} | {"mkdist.errors"}, module
        if module.startswith("mkdist.flows"):
            allowed = {d for d in graph if d.startswith("mkdist.flows")} | {"mkdist.pipeline", "mkdist.errors"}
            assert deps <= allowed, (module, deps - allowed)


#: Code that orchestrates runs; it must not know any method by name.
ORCHESTRATION = ["mkdist/_pipeline/_stages.py", "mkdist/_pipeline/_assign.py", "mkdist/_pipeline/_run_store.py",
                 "mkdist/_pipeline/_run_input.py", "mkdist/_pipeline/_passes.py", "mkdist/_pipeline/_config.py",
                 "mkdist/_report/_summary.py", "mkdist/pipeline.py",
                 "mkdist/cli.py", "mkdist/_cli/_errors.py", "mkdist/_cli/_options.py", "mkdist/_cli/_output.py",
                 "mkdist/_run/_demo.py", "flows/cluster.py", "flows/assign.py", "flows/_runtime.py"]


@pytest.mark.parametrize("relpath", ORCHESTRATION)
def test_no_method_name_in_orchestration_code(relpath):
    names = set(mkdist.available_methods())
    tree = ast.parse((ROOT / relpath).read_text())
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names]
    assert not found, f"{relpath} names methods {found}; ask the registry (mkdist._methods._registry) instead"


def test_bench_scripts_import_mkdist_through_public_modules_only():
    """bench/ uses mkdist's public names and the documented building blocks (mkdist.internals):
    a private module renamed or split breaks a test here, not a benchmark months later."""
    found = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{path.name}: {n}" for n in names
                      if n.startswith("mkdist.") and any(part.startswith("_") for part in n.split("."))]
    assert found == []


def test_every_building_block_resolves_and_the_hooks_run():
    import mkdist.internals as internals

    missing = [n for n in internals.__all__ if not hasattr(internals, n)]
    assert missing == []
    with internals.k_rule_constants(MIN_VOTES=0.25):
        from mkdist._core import _nclusters

        assert _nclusters.MIN_VOTES == 0.25
    assert _nclusters.MIN_VOTES == internals.MIN_VOTES != 0.25
    with pytest.raises(AttributeError):
        with internals.k_rule_constants(NO_SUCH_CONSTANT=1.0):
            pass
    from mkdist._methods import _base

    real = _base.kmeans
    with internals.kmeans_failing_once():
        with pytest.raises(RuntimeError, match="injected"):
            _base.kmeans(np.zeros((4, 1)), 2)
        assert _base.kmeans(np.arange(4.0)[:, None], 2, random_state=0).labels.shape == (4,)
    assert _base.kmeans is real


# ----------------------------------------------------------------------------- lazy loading
HEAVY = ("sklearn", "dask", "distributed", "xarray", "zarr", "prefect", "scipy")


def _fresh_python(code: str) -> list[str]:
    """The output lines of ``code`` run in a new interpreter (nothing imported beforehand)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")


def test_importing_mkdist_loads_no_numerical_stack_and_every_public_name_resolves():
    out = _fresh_python("import sys, mkdist; print(sorted(m for m in %r if m in sys.modules)); "
                        "print(all(hasattr(mkdist, n) for n in mkdist.__all__))" % (HEAVY,))
    assert out[0] == "[]", out
    assert out[1] == "True", out


def test_importing_the_pipeline_loads_no_numerical_stack():
    # What the CLI imports before it refuses bad input: a refusal answers in well under a second.
    out = _fresh_python("import sys, mkdist.pipeline; print(sorted(m for m in %r if m in sys.modules))" % (HEAVY,))
    assert out[0] == "[]", out


@pytest.mark.parametrize("method", ["mkc", "nystrom", "rff-power", "mv-rff-power", "late-fusion"])
def test_builtin_parameter_tables_are_the_ones_the_classes_check(method):
    """The CLI checks arguments against mkdist._methods._params without importing the class: the table
    there must be exactly what the class collects along its bases (``register`` already checks
    that it names exactly the ``__init__`` parameters)."""
    from mkdist._core._validation import collect_constraints
    from mkdist._methods._registry import BUILTIN_PARAMETERS, get_method

    cls = get_method(method)
    module, table = BUILTIN_PARAMETERS[method]
    assert cls.__module__ == module
    assert table == collect_constraints(cls, "_param_constraints")


def test_register_refuses_a_table_that_misses_a_parameter():
    from typing import ClassVar

    from mkdist._methods._base import MkdistEstimator
    from mkdist._methods._registry import register

    class Undeclared(MkdistEstimator):
        method: ClassVar[str] = "undeclared"
        state_format: ClassVar[str] = "tests.Undeclared/1"

        def __init__(self, n_clusters: int = 8, *, n_init: int = 3, random_state=None):
            self.n_clusters, self.n_init, self.random_state = n_clusters, n_init, random_state

    with pytest.raises(ValueError, match=r"missing \['n_init'\]"):
        register(Undeclared)
    assert "undeclared" not in mkdist.available_methods()


def test_the_code_is_lint_clean():
    """ruff with the project's rules (pyflakes, pycodestyle, isort, bugbear; [tool.ruff] in pyproject.toml)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
