"""Issue 23: what a fresh ``dask scheduler`` costs a run, with this checkout and an older one.

W1 at N rows through ``mkdist.cluster`` on plain ``dask scheduler`` + 2 ``dask worker``
processes (each run its own fresh cluster; the workers import the library before the clock,
the scheduler does not, as a data engineer's long-running scheduler would not have either),
alternating old/new, ``--repeats`` runs each.  Per run: end to end, the stage timings, the
scheduler's own seconds per graph it received (``update-graph`` events: deserialize +
materialize), the modules it imported for the run, and a hash of the labels.

``PYTHONPATH=bench python bench/bench_scheduler_ab.py OLD_PYTHON [--n 1000000] [--repeats 3] [--out PATH]``
(OLD_PYTHON: the interpreter of a checkout of the older commit, with that checkout installed
in it).  Prints JSON, also written to ``bench/results/scheduler_ab_<n>.json``.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

from _common import alternate, one_blas_thread_env, run_job, write_result

HERE = Path(__file__).resolve().parent

_JOB = r"""
import hashlib, json, sys, time
import numpy as np
import _common as C
import mkdist

def modules():
    import sys
    return len(sys.modules)

if __name__ == "__main__":
    n = int(sys.argv[1])
    src = C.w1_input(n)
    store = C.OUT / "stores" / f"scheduler-ab-{n}.zarr"
    import shutil
    shutil.rmtree(store, ignore_errors=True)
    workers, client = C.local_cluster(cluster="dask-worker")
    try:
        client.run(C.import_library)
        before = client.run_on_scheduler(modules)
        t0 = time.time()
        res = mkdist.cluster(str(src), str(store), random_state=0, **C.W1)
        total = time.time() - t0
        after = client.run_on_scheduler(modules)
        graphs = [m.get("metrics", m) for ts, m in client.get_events("scheduler")
                  if isinstance(m, dict) and m.get("action") == "update-graph" and ts >= t0]
        seconds = [g.get("duration_seconds", 0.0) for g in graphs]
    finally:
        client.close()
        workers.close()
    labels = np.asarray(res.labels.compute(scheduler="threads"))
    shutil.rmtree(store, ignore_errors=True)
    print(json.dumps({"end_to_end_s": total, "stages": res.timings, "graphs": len(graphs),
                      "scheduler_graph_s_total": sum(seconds),
                      "scheduler_graph_s_top": sorted(seconds, reverse=True)[:3],
                      "scheduler_modules_imported": after - before,
                      "labels_sha1": hashlib.sha1(labels.astype("<i8").tobytes()).hexdigest(),
                      "mkdist": mkdist.__file__}))
"""


def run_once(python: str, n: int) -> dict:
    # The job imports this checkout's _common; no MALLOC_* variable, as in an operator's shell.
    env = {k: v for k, v in one_blas_thread_env(PYTHONPATH=str(HERE)).items() if not k.startswith("MALLOC_")}
    return run_job(python, _JOB, n, env=env)


def _progress(got: dict) -> str:
    return (f"{got['end_to_end_s']:.2f} s, scheduler {got['scheduler_graph_s_total']:.2f} s, "
            f"{got['scheduler_modules_imported']} modules")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_python")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/scheduler_ab_<n>.json)")
    args = ap.parse_args()
    runs, _ = alternate({"old": args.old_python, "new": sys.executable}, args.repeats,
                        lambda _, python: run_once(python, args.n), progress=_progress)
    med = {tag: {k: statistics.median(r[k] for r in rs)
                 for k in ("end_to_end_s", "scheduler_graph_s_total", "scheduler_modules_imported")}
           | {f"{s}_median": statistics.median(r["stages"][s] for r in rs) for s in ("fit_s", "embed_s", "kmeans_s")}
           for tag, rs in runs.items()}
    hashes = {r["labels_sha1"] for rs in runs.values() for r in rs}
    out = {"N": args.n, "cluster": "dask scheduler + 2 dask worker (fresh per run)", "runs": runs, "median": med,
           "identical_labels": len(hashes) == 1,
           "load_1min_after": os.getloadavg()[0],
           "labels_digest": hashlib.sha1("".join(sorted(hashes)).encode()).hexdigest()[:12]}
    print(json.dumps(out))
    write_result(out, f"scheduler_ab_{args.n}", args.out)


if __name__ == "__main__":
    main()
