"""The shape of the code: imports point down (no cycles, function-level imports included), and
the pipeline, flows and CLI ask the method registry instead of naming methods."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mkdist

ROOT = Path(__file__).resolve().parents[1]
#: Source directory of each installed package (see [tool.setuptools.package-dir]).
PACKAGES = {"mkdist": ROOT / "mkdist", "mkdist.storage": ROOT / "storage", "mkdist.flows": ROOT / "flows"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.glob("*.py"):
            out[pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"] = path
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


def test_no_import_cycle():
    graph = import_graph()
    assert "mkdist._mkc" in graph and "mkdist.storage._store" in graph and "mkdist.flows.cluster" in graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


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
ORCHESTRATION = ["mkdist/_stages.py", "mkdist/_config.py", "mkdist/_report.py", "mkdist/pipeline.py",
                 "mkdist/cli.py", "mkdist/_demo.py", "flows/cluster.py", "flows/assign.py", "flows/_runtime.py"]


@pytest.mark.parametrize("relpath", ORCHESTRATION)
def test_no_method_name_in_orchestration_code(relpath):
    names = set(mkdist.available_methods())
    tree = ast.parse((ROOT / relpath).read_text())
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names]
    assert not found, f"{relpath} names methods {found}; ask the registry (mkdist._methods) instead"


# ----------------------------------------------------------------------------- lazy loading
def test_importing_mkdist_loads_no_numerical_stack_and_every_public_name_resolves():
    import subprocess
    import sys

    heavy = ("sklearn", "dask", "distributed", "xarray", "zarr", "prefect", "scipy")
    code = ("import sys, mkdist; print(sorted(m for m in %r if m in sys.modules)); "
            "print(all(hasattr(mkdist, n) for n in mkdist.__all__))" % (heavy,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]", out
    assert out[1] == "True", out


@pytest.mark.parametrize("method", ["mkc", "nystrom", "rff-power", "mv-rff-power", "late-fusion"])
def test_builtin_parameter_tables_are_the_ones_the_classes_check(method):
    """The CLI checks arguments against mkdist._params without importing the class: the table
    there must be exactly what the class collects along its bases (``register`` already checks
    that it names exactly the ``__init__`` parameters)."""
    from mkdist._methods import BUILTIN_PARAMETERS, get_method
    from mkdist._validation import collect_constraints

    cls = get_method(method)
    module, table = BUILTIN_PARAMETERS[method]
    assert cls.__module__ == module
    assert table == collect_constraints(cls, "_param_constraints")


def test_register_refuses_a_table_that_misses_a_parameter():
    from typing import ClassVar

    from mkdist._base import MkdistEstimator
    from mkdist._methods import register

    class Undeclared(MkdistEstimator):
        method: ClassVar[str] = "undeclared"
        state_format: ClassVar[str] = "tests.Undeclared/1"

        def __init__(self, n_clusters: int = 8, *, n_init: int = 3, random_state=None):
            self.n_clusters, self.n_init, self.random_state = n_clusters, n_init, random_state

    with pytest.raises(ValueError, match=r"missing \['n_init'\]"):
        register(Undeclared)
    assert "undeclared" not in mkdist.available_methods()
