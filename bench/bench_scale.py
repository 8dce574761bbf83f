"""How the pipeline's overheads grow with chunks and workers (issue 23), printing JSON.

    python bench/bench_scale.py --n 2000000 --chunks 200,2000,20000 --workers 2
    python bench/bench_scale.py --n 2000000 --chunks 2000 --workers 2,4,8,16

Each configuration runs W1-type data (two 32-feature float32 views, 10 clusters, generated on
the workers chunk by chunk: no input file, so chunk count is free and the I/O of a real input is
left to the projection's formula) through ``mkdist.cluster`` on a fresh plain
``LocalCluster(n_workers=w, threads_per_worker=1)``; more workers than cores is oversubscription
on purpose: the scheduler and client costs grow with workers and tasks, not with cores.

Per graph the client sends (a *pass*: one ``compute``/``persist`` of the pipeline), recorded by a
scheduler plugin and a timer around the client's ``_graph_to_futures``:

* ``tasks``: tasks the scheduler received;
* ``client_submit_s``: client time to turn the collections into a graph and send it;
* ``scheduler_cpu_s``: the scheduler process's CPU time from this pass's arrival to the next
  (it includes materialising the graph, which distributed does on the scheduler);
* ``client_peak_rss_mib``: the client process's peak RSS during the pass (sampled every 20 ms);
* ``bytes_moved``: bytes the workers sent each other during the pass.

Summaries per configuration: totals, ``scheduler_cpu_per_task_ms`` (median over passes with at
least 100 tasks), and the stage timings of ``mkdist.cluster``.  The projection to 1B rows is in
bench/RESULTS.md, built from these figures (formula there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time

from _common import OUT, DaskProcesses, emit, machine, median
from distributed.diagnostics.plugin import SchedulerPlugin

W1 = dict(n_clusters=10, kernels="rbf-grid", n_landmarks=1000)


class _PassRecorder(SchedulerPlugin):
    """A scheduler plugin: each ``update_graph`` (one pass) with its task count, arrival time and
    the scheduler process's CPU time then (so CPU per pass = the difference to the next)."""

    name = "mkdist-bench-passes"

    def __init__(self):
        self.passes = []

    async def start(self, scheduler):
        self.scheduler = scheduler

    def update_graph(self, scheduler, *, keys, tasks, **kwargs):
        import psutil

        cpu = psutil.Process().cpu_times()
        self.passes.append({"t": time.time(), "tasks": len(tasks), "cpu": cpu.user + cpu.system})


def _scheduler_passes(dask_scheduler=None):
    import psutil

    plugin = dask_scheduler.plugins["mkdist-bench-passes"]
    cpu = psutil.Process().cpu_times()
    return {"passes": plugin.passes, "cpu_now": cpu.user + cpu.system, "t_now": time.time()}


def _bytes_sent(dask_worker=None):
    return int(getattr(dask_worker, "transfer_outgoing_bytes_total", 0))


class _ClientSampler:
    """Peak RSS of this (client) process, and the time spent in ``Client._graph_to_futures``."""

    def __init__(self):
        import psutil
        from distributed import Client

        self.proc = psutil.Process()
        self.samples: list[tuple[float, int]] = []
        self.submits: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._orig = Client._graph_to_futures
        sampler = self

        def timed(client, *args, **kwargs):
            t0 = time.time()
            try:
                return sampler._orig(client, *args, **kwargs)
            finally:
                sampler.submits.append((t0, time.time() - t0))

        Client._graph_to_futures = timed
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), self.proc.memory_info().rss))
            time.sleep(0.02)

    def close(self):
        from distributed import Client

        self._stop.set()
        self.thread.join()
        Client._graph_to_futures = self._orig

    def peak_between(self, t0: float, t1: float) -> int:
        inside = [r for t, r in self.samples if t0 <= t <= t1]
        return max(inside) if inside else 0


def run_config(n: int, chunks: int, workers: int, n_landmarks: int) -> dict:
    import numpy as np
    from distributed import Client

    import mkdist
    from mkdist.datasets import make_multiview_blobs

    chunk_rows = -(-n // chunks)
    store = OUT / "scale" / f"n{n}-c{chunks}-w{workers}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    store.parent.mkdir(parents=True, exist_ok=True)
    # The scheduler in its own process (``dask scheduler``), as on a real cluster: a LocalCluster
    # runs it inside the client, whose fit and report would count as scheduler time.
    procs = DaskProcesses(workers)
    with Client(procs.scheduler_address) as client:
        client.wait_for_workers(workers, timeout=300)
        client.register_plugin(_PassRecorder())
        views, y = make_multiview_blobs(n, chunk_rows=chunk_rows, random_state=0)
        sampler = _ClientSampler()
        sent0 = sum(client.run(_bytes_sent).values())
        t0 = time.time()
        try:
            res = mkdist.cluster(views, str(store), **{**W1, "n_landmarks": n_landmarks}, random_state=0,
                                 progress=False, report=False)
        finally:
            t_end = time.time()
            sampler.close()
        sent = sum(client.run(_bytes_sent).values()) - sent0
        sched = client.run_on_scheduler(_scheduler_passes)
        labels = np.asarray(res.labels.compute()) if hasattr(res.labels, "compute") else np.asarray(res.labels)
        ys = np.asarray(y.compute()) if hasattr(y, "compute") else np.asarray(y)
    procs.close()
    shutil.rmtree(store, ignore_errors=True)

    passes = [p for p in sched["passes"] if p["t"] >= t0 - 1]
    rows = []
    for i, p in enumerate(passes):
        t_next, cpu_next = ((passes[i + 1]["t"], passes[i + 1]["cpu"]) if i + 1 < len(passes)
                            else (t_end, sched["cpu_now"]))
        submit = [d for (ts, d) in sampler.submits if ts <= p["t"] and ts >= (passes[i - 1]["t"] if i else t0 - 1)]
        rows.append({"tasks": p["tasks"], "wall_s": round(t_next - p["t"], 4),
                     "client_submit_s": round(submit[-1], 4) if submit else None,
                     "scheduler_cpu_s": round(cpu_next - p["cpu"], 4),
                     "client_peak_rss_mib": round(sampler.peak_between(p["t"] - 0.05, t_next) / 2**20, 1)})
    big = [r for r in rows if r["tasks"] >= 100]
    tasks = sum(r["tasks"] for r in rows)
    sched_cpu = sum(r["scheduler_cpu_s"] for r in rows)
    return {
        "n": n, "chunks": chunks, "chunk_rows": chunk_rows, "workers": workers, "n_landmarks": n_landmarks,
        "end_to_end_s": round(t_end - t0, 3), "stages": res.timings,
        "acc": round(float(mkdist.clustering_scores(ys, labels)["acc"]), 4),
        "passes": len(rows), "tasks": tasks,
        "client_submit_s": round(sum(d for _, d in sampler.submits), 3),
        "scheduler_cpu_s": round(sched_cpu, 3),
        "scheduler_cpu_per_task_ms": round(1e3 * median([r["scheduler_cpu_s"] / r["tasks"] for r in big]), 4)
        if big else None,
        "client_submit_per_task_ms": round(1e3 * median([r["client_submit_s"] / r["tasks"] for r in big
                                                          if r["client_submit_s"] is not None]), 4) if big else None,
        "client_peak_rss_mib": round(max(r for _, r in sampler.samples) / 2**20, 1),
        "client_rss_before_mib": round(sampler.samples[0][1] / 2**20, 1),
        "bytes_moved": int(sent), "bytes_moved_per_task": round(sent / max(tasks, 1), 1),
        "largest_passes": sorted(rows, key=lambda r: -r["tasks"])[:5],
        "per_pass": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--chunks", default="200,2000,20000")
    ap.add_argument("--workers", default="2")
    ap.add_argument("--n-landmarks", type=int, default=1000)
    ap.add_argument("--jsonl", help="also append each configuration's result to this file as it finishes")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.time()
    configs = []
    for w in [int(x) for x in args.workers.split(",")]:
        for c in [int(x) for x in args.chunks.split(",")]:
            configs.append(run_config(args.n, c, w, args.n_landmarks))
            if args.jsonl:  # each configuration as it finishes: a long sweep stopped midway keeps its rows
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(configs[-1], default=float) + "\n")
            shown = ("chunks", "workers", "end_to_end_s", "passes", "tasks", "scheduler_cpu_per_task_ms",
                     "client_peak_rss_mib")
            print({k: configs[-1][k] for k in shown}, file=sys.stderr, flush=True)
    emit({"bench": "scale", "machine": machine(), "args": vars(args), "wall_s": time.time() - t0,
          "result": configs})


if __name__ == "__main__":
    main()
