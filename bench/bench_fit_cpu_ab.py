"""Issue 35: CPU seconds of three fits with this checkout and with an older one, alternating.

The fits whose code moved (the kernel set-up now in ``_core``, late fusion and power k-means
split into sub-packages): ``MultipleKernelClustering(10)``, ``LateFusionClustering(10)`` and
``RFFKernelPowerKMeans(10, n_init=3)`` on mfeat (2000 x 6 views, NumPy, ``random_state=0``), one
BLAS thread.  CPU seconds of the process (``time.process_time``), which a busy shared machine
disturbs far less than wall time; wall seconds alongside.

``python bench/bench_fit_cpu_ab.py OLD_PYTHON [--rounds 3] [--out PATH]`` (OLD_PYTHON: the interpreter of a checkout of
the older commit, with that checkout installed in it).  Prints JSON, also written to
``bench/results/fit_cpu_ab_mfeat.json``.
"""

import argparse
import json
import sys

from _common import SHARED_DATA, alternate, median, run_job, write_result

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/fit_cpu_ab_mfeat.json)")
    args = ap.parse_args()
    runs, loads = alternate({"old": args.old_python, "new": sys.executable}, args.rounds,
                            lambda _, python: run_job(python, _JOB, SHARED_DATA / "mfeat.npz", timeout=1800))
    medians = {tag: {fit: {k: round(median([r[fit][k] for r in rs]), 2) for k in ("cpu_s", "wall_s")}
                     for fit in rs[0]} for tag, rs in runs.items()}
    out = {"data": "mfeat", "rounds": args.rounds, "median": medians, "runs": runs,
           "load_1min": [round(x, 1) for x in loads]}
    print(json.dumps(out, indent=1))
    write_result(out, "fit_cpu_ab_mfeat", args.out)


if __name__ == "__main__":
    main()
