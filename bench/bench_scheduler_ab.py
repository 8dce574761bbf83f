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
import subprocess
import sys
from pathlib import Path

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
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for k in [k for k in env if k.startswith("MALLOC_")]:
        env.pop(k)
    r = subprocess.run([python, "-c", _JOB, str(n)], capture_output=True, text=True, env=env, cwd="/tmp",
                       timeout=3600)
    if r.returncode:
        raise SystemExit(f"{python}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_python")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/scheduler_ab_<n>.json)")
    args = ap.parse_args()
    pythons = {"old": args.old_python, "new": sys.executable}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for i in range(args.repeats):
        for tag in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            got = run_once(pythons[tag], args.n)
            runs[tag].append(got)
            print(tag, round(got["end_to_end_s"], 2), round(got["scheduler_graph_s_total"], 2),
                  got["scheduler_modules_imported"], os.getloadavg()[0], file=sys.stderr, flush=True)
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
    path = Path(args.out) if args.out else HERE / "results" / f"scheduler_ab_{args.n}.json"
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
