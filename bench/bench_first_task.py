"""The first embed task of a fresh `dask worker`: how long it waits for the compiled step (issue 45).

    python bench/bench_first_task.py --n 400000 --rounds 3

Each round starts ``dask scheduler`` + ``dask worker --nworkers 2 --nthreads 1`` twice, with
``NUMBA_CACHE_DIR`` naming a new, empty directory (*cold*: numba compiles the embedding's loops
on each worker, as on the first run after ``pip install`` or in a container whose cache was
not filled when the image was built), then again with the directory the cold run filled (*warm*:
every later run, or an image built with its cache filled: deploy/Dockerfile).  Both run W1
(generated on the workers, 50,000-row chunks) through ``mkdist.cluster`` with W1's settings and
the task stream on; per worker: the compute time of its first ``mkdist-embed-scan`` task, the
median of its others, and the difference (what the first task waited for numba's import, the
cached code's load, or its compilation, beyond the load the model's fit overlaps).  Cold and
warm alternate in order (cold, warm; warm, cold; ...) so that a drifting load weighs on both.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

from _common import W1, DaskWorkerCommand, emit, machine


def one_run(n: int, cache_dir: str) -> dict:
    from distributed import Client, get_task_stream

    import mkdist
    from mkdist.datasets import make_multiview_blobs

    cluster = DaskWorkerCommand(2, env={"NUMBA_CACHE_DIR": cache_dir})
    store = tempfile.mkdtemp(prefix="mkdist-first-task-")
    load = os.getloadavg()[0]
    try:
        with Client(cluster.address) as client:
            views, _ = make_multiview_blobs(n, chunk_rows=50_000, random_state=0)
            t0 = time.perf_counter()
            with get_task_stream(client) as ts:
                res = mkdist.cluster(views, f"{store}/run.zarr", **W1, random_state=0, progress=False, report=False)
            wall = time.perf_counter() - t0
            tasks = ts.data
    finally:
        cluster.close()
        shutil.rmtree(store, ignore_errors=True)
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for t in tasks:
        name = t["key"][0] if isinstance(t["key"], tuple) else str(t["key"])
        # the embed task itself, not the "-embedding" / "-scan" pieces taken out of its result
        if not re.fullmatch(r"mkdist-embed-scan-[0-9a-f]+", name):
            continue
        for s in t["startstops"]:
            if s["action"] == "compute":
                by_worker.setdefault(t["worker"], []).append((s["start"], s["stop"] - s["start"]))
    workers = []
    for _worker, runs in sorted(by_worker.items()):
        runs.sort()
        rest = [d for _, d in runs[1:]]
        median = statistics.median(rest) if rest else float("nan")
        workers.append({"first_s": round(runs[0][1], 3), "median_others_s": round(median, 3),
                        "first_minus_median_s": round(runs[0][1] - median, 3), "tasks": len(runs)})
    return {"wall_s": round(wall, 2), "stages": {k: round(float(v), 2) for k, v in res.timings.items()},
            "workers": workers, "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list] = {"cold": [], "warm": []}
    filled = None  # a cache directory a cold run filled
    try:
        for i in range(args.rounds):
            # cold then warm on the directory it filled; the next round warm first (on that one), then cold
            for kind in (("cold", "warm") if i % 2 == 0 or filled is None else ("warm", "cold")):
                if kind == "cold":
                    fresh = tempfile.mkdtemp(prefix="mkdist-numba-cache-")
                    runs["cold"].append(one_run(args.n, fresh))
                    if filled is not None:
                        shutil.rmtree(filled, ignore_errors=True)
                    filled = fresh
                else:
                    runs["warm"].append(one_run(args.n, filled))
                print(kind, runs[kind][-1], file=sys.stderr, flush=True)
    finally:
        if filled is not None:
            shutil.rmtree(filled, ignore_errors=True)
    summary = {kind: {"first_minus_median_s": statistics.median(w["first_minus_median_s"] for r in rs
                                                                 for w in r["workers"]),
                      "wall_s": statistics.median(r["wall_s"] for r in rs)}
               for kind, rs in runs.items() if rs}
    emit({"bench": "first_task", "machine": machine(), "args": vars(args), "median": summary, "runs": runs})


if __name__ == "__main__":
    main()
