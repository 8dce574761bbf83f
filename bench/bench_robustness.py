"""How fast the CLI refuses bad input (issue 13), printing JSON.

    python bench/bench_robustness.py --repeats 5

Each case is a fresh ``mkdist run`` process with one bad argument; the time is the process's
wall time from start to exit code 2.  The same run times the imports every refusal pays (the
interpreter alone, ``import sklearn.base``, ``import mkdist.cli``), so a slow machine shows up
as a slow floor rather than as a slow mkdist.  Tests assert that refusals happen before
Prefect or Dask start (tests/test_robustness.py); the seconds are measured here.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import emit, machine, median


def _wall(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-cli-"))
    rng = np.random.default_rng(0)
    src = tmp / "in.npz"
    np.savez(src, a=rng.normal(size=(30_000, 8)).astype(np.float32), b=rng.normal(size=(30_000, 8)).astype(np.float32))
    bad_toml = tmp / "bad.toml"
    bad_toml.write_text("n_clusters = 3\nkernels = [unclosed\n")
    unknown = tmp / "unknown.json"
    unknown.write_text(json.dumps({"n_clusters": 3, "bogus_option": 1}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    run = [sys.executable, "-m", "mkdist.cli", "run", "--input", str(src), "--store", str(tmp / "s.zarr")]
    cases = {
        "n_clusters=1": ["--n-clusters", "1"],
        "unknown method": ["--n-clusters", "3", "--method", "spectral"],
        "n_workers=-1": ["--n-clusters", "3", "--n-workers", "-1"],
        "malformed TOML config": ["--config", str(bad_toml)],
        "unknown config key": ["--config", str(unknown)],
        "parameter the method does not use": ["--n-clusters", "3", "--n-landmarks", "10", "--method", "rff-power"],
    }
    floors = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import sklearn.base": [sys.executable, "-c", "import sklearn.base"],
        "import mkdist.cli": [sys.executable, "-c", "import mkdist.cli"],
    }
    out: dict = {"machine": machine(), "repeats": args.repeats, "refusal_s": {}, "import_s": {}}
    for name, cmd in floors.items():
        out["import_s"][name] = median([_wall(cmd)[0] for _ in range(args.repeats)])
    per_case_medians = []
    for name, extra in cases.items():
        times = []
        for _ in range(args.repeats):
            seconds, r = _wall(run + extra)
            if r.returncode != 2 or r.stderr.strip().count("\n"):
                raise SystemExit(f"case {name!r}: exit {r.returncode}, stderr {r.stderr!r}")
            times.append(seconds)
        out["refusal_s"][name] = {"median": median(times), "max": max(times), "message": r.stderr.strip()}
        per_case_medians.append(median(times))
    out["refusal_median_of_cases_s"] = median(per_case_medians)
    seconds, r = _wall(run + ["--n-clusters", "3", "--dask-address", f"tcp://127.0.0.1:{free_port}",
                              "--connect-timeout", "2", "--quiet"])
    out["unreachable_scheduler"] = {"connect_timeout_s": 2, "wall_s": seconds, "exit_code": r.returncode,
                                    "message": r.stderr.strip()}
    emit(out)


if __name__ == "__main__":
    main()
