"""Issue 35: CPU seconds of three fits with this checkout and with an older one, alternating.

The fits whose code moved (the kernel set-up now in ``_core``, late fusion and power k-means
split into sub-packages): ``MultipleKernelClustering(10)``, ``LateFusionClustering(10)`` and
``RFFKernelPowerKMeans(10, n_init=3)`` on mfeat (2000 x 6 views, NumPy, ``random_state=0``), one
BLAS thread.  CPU seconds of the process (``time.process_time``), which a busy shared machine
disturbs far less than wall time; wall seconds alongside.

``python bench/bench_fit_cpu_ab.py OLD_PYTHON [--rounds 3]``.  Prints JSON, also written to
``bench/results/fit_cpu_ab_mfeat.json``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("MKDIST_SHARED_DATA", HERE.parents[1] / "shared" / "data"))

_JOB = r"""
import json, sys, time
import numpy as np
import mkdist

d = np.load(sys.argv[1])
views = [d[f"view{i}"] for i in range(6)]
fits = {"mkc": lambda: mkdist.MultipleKernelClustering(10, random_state=0),
        "late-fusion": lambda: mkdist.LateFusionClustering(10, random_state=0),
        "rff-power": lambda: mkdist.RFFKernelPowerKMeans(10, n_init=3, random_state=0)}
out = {}
for name, make in fits.items():
    make().fit([v[:200] for v in views])  # imports and first-call costs outside the clock
    c0, t0 = time.process_time(), time.perf_counter()
    make().fit(views)
    out[name] = {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}
print(json.dumps(out))
"""


def run(python: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([python, "-c", _JOB, str(DATA / "mfeat.npz")], capture_output=True, text=True, env=env,
                       cwd="/tmp", timeout=1800)
    if r.returncode:
        raise SystemExit(f"{python}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_python")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    pythons = {"old": args.old_python, "new": sys.executable}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    loads = []
    for i in range(args.rounds):
        for tag in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            runs[tag].append(run(pythons[tag]))
            loads.append(os.getloadavg()[0])
            print(tag, json.dumps(runs[tag][-1]), file=sys.stderr, flush=True)
    median = {tag: {fit: {k: round(statistics.median(r[fit][k] for r in rs), 2) for k in ("cpu_s", "wall_s")}
                    for fit in rs[0]} for tag, rs in runs.items()}
    out = {"data": "mfeat", "rounds": args.rounds, "median": median, "runs": runs,
           "load_1min": [round(x, 1) for x in loads]}
    print(json.dumps(out, indent=1))
    (HERE / "results").mkdir(exist_ok=True)
    with open(HERE / "results" / "fit_cpu_ab_mfeat.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
