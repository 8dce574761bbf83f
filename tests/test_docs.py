"""The documentation as a reader gets it: the site builds with warnings as errors (its gallery
executed), and every docstring example of the package runs as a doctest."""

from __future__ import annotations

import doctest
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Where each installed package's source lives (storage/ and flows/ install inside mkdist).
PACKAGES = {"mkdist": ROOT / "mkdist", "mkdist.storage": ROOT / "storage", "mkdist.flows": ROOT / "flows"}


def modules_with_examples() -> list[str]:
    """Every module of the package whose source holds a docstring example (``>>>``)."""
    found = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            if ">>>" in path.read_text():
                parts = path.relative_to(folder).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                found.append(".".join((package, *parts)))
    return found


def test_the_package_has_docstring_examples():
    assert len(modules_with_examples()) >= 10, "the doctest below would run on (almost) nothing"


@pytest.mark.parametrize("module", modules_with_examples())
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    # An example may write a store or a report: into a folder of its own.
    monkeypatch.chdir(tmp_path)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(importlib.import_module(module), optionflags=flags, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {module} failed (above)"


@pytest.mark.slow
def test_the_docs_build_with_warnings_as_errors(tmp_path):
    """What `make docs` runs, into a temporary folder: the gallery's examples are executed, and a
    broken cross-reference, docstring markup or example fails it."""
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
                        "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    html = tmp_path / "html"
    assert (html / "api.html").is_file() and (html / "generated" / "mkdist.MultipleKernelClustering.html").is_file()
    figures = sorted((html / "_images").glob("sphx_glr_plot_*_001.png"))
    assert len(figures) >= 5, [f.name for f in figures]
