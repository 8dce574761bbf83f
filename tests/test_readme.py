"""The README's Python examples run as written, from a directory that holds nothing but them
(a fresh clone has no ``../shared``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    """The README's fenced ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert python_blocks(README.read_text()), "no ```python block found: the test below would pass on nothing"


def test_readme_python_examples_run_from_an_empty_directory(tmp_path):
    blocks = python_blocks(README.read_text())
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
    # The run store the last line writes, relative to where the reader is.
    assert (tmp_path / "runs" / "blobs.zarr" / "zarr.json").is_file()
