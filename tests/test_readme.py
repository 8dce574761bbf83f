"""The README as a new user reads it: its Python examples run as written from a directory that
holds nothing but them (a fresh clone has no ``../shared``), the commands it names exist with
the options it gives them, its links stay inside the repository, and it stays short."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()


def fenced_blocks(text: str, language: str) -> list[str]:
    """The README's fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def shell_commands(text: str) -> list[list[str]]:
    """Every command of the ```sh blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in fenced_blocks(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_readme_has_python_examples_and_commands():
    assert fenced_blocks(TEXT, "python"), "no ```python block found: the test below would pass on nothing"
    assert any(c[0] == "mkdist" for c in shell_commands(TEXT)), "no mkdist command found: a test below checks them"


def test_the_readme_is_short():
    assert len(TEXT.splitlines()) <= 150, "the manual lives in docs/; the README: what, install, first steps"


@pytest.mark.slow  # two whole runs in a fresh interpreter
def test_readme_python_examples_run_from_an_empty_directory(tmp_path):
    blocks = fenced_blocks(TEXT, "python")
    script = tmp_path / "readme_examples.py"
    # One script, in order, as a reader pastes them: a later block may use an earlier one's names.
    script.write_text("\n\n".join(blocks))
    env = {k: v for k, v in os.environ.items() if k not in ("MKDIST_SHARED_DATA", "MKDIST_DASK_ADDRESS")}
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # What the example says it prints: the scores first.
    scores = r.stdout.splitlines()[0]
    assert "'acc'" in scores and "'nmi'" in scores, r.stdout
    # The run store the ten lines write, relative to where the reader is.
    assert (tmp_path / "runs" / "blobs.zarr" / "zarr.json").is_file()
    # The table example: labels out keyed by the table's string id, one row per customer.
    labels = pq.read_table(tmp_path / "runs" / "c-labels.parquet").to_pandas()
    table = pq.read_table(tmp_path / "customers.parquet", columns=["customer_id"]).to_pandas()
    assert {"customer_id", "cluster", "distance"} <= set(labels.columns)
    assert sorted(labels["customer_id"]) == sorted(table["customer_id"])
    assert labels["cluster"].nunique() == 5


def test_readme_commands_exist_with_the_options_given():
    from mkdist.cli import main

    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    made = {c[1] for c in shell_commands(TEXT) if c[0] == "make"}
    # make targets named in prose too (`make test-fast`)
    made |= set(re.findall(r"`make ([\w-]+)`", TEXT))
    assert made and made <= targets, f"README names make targets the Makefile lacks: {sorted(made - targets)}"

    named = set(re.findall(r"`mkdist ([a-z]+)", TEXT)) | {c[1] for c in shell_commands(TEXT) if c[0] == "mkdist"}
    assert named and named <= set(main.commands), f"README names mkdist commands that do not exist: {named}"
    for words in (c for c in shell_commands(TEXT) if c[0] == "mkdist"):
        command = main.commands[words[1]]
        known = {opt for p in command.params for opt in p.opts}
        given = {w.split("=")[0] for w in words[2:] if w.startswith("--")}
        assert given <= known, f"`mkdist {words[1]}` has no option {sorted(given - known)}"


def test_readme_links_stay_in_the_repository():
    links = re.findall(r"\]\(([^)\s]+)\)", TEXT)
    assert links, "no links found: the README should point into the docs"
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target = (ROOT / link.split("#")[0]).resolve()
        assert target.is_relative_to(ROOT), f"{link} leaves the repository (a clone has nothing there)"
        assert target.exists(), f"{link} does not exist"
