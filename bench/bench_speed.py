"""Speed at the hardware's limit (issue 14), printing JSON.

    python bench/bench_speed.py --part floor --n 1000000   # pipeline vs the tight floor vs dask-ml KMeans
    python bench/bench_speed.py --part embed --n 300000    # embed stage: 1 vs 2 workers vs one thread / 2
    python bench/bench_speed.py --part fit                 # landmark fit vs one full eigh, quiet and busy
    python bench/bench_speed.py --part scale --ns 1000000,10000000   # end to end and worker memory vs N
    python bench/bench_speed.py --part report --n 1000000 --repeats 3   # the run report's cost to a run
    python bench/bench_speed.py --part labels --n 300000 --reference-python OLD/.venv/bin/python
                                     # same seed, same labels as an older checkout's pipeline?
    python bench/bench_speed.py --part plain --n 1000000 --repeats 3
                                     # clusters with distributed's defaults vs the floor (issue 23)
    python bench/bench_speed.py --part passes --n 1000000 --repeats 3
                                     # tasks per chunk, passes, time outside the named stages (issue 34.2)

``--cluster`` (floor, scale, report, pipeline_once) says how the pipeline's workers start
(``_common.CLUSTERS``): ``tuned`` (default; mkdist's own malloc settings at start), ``plain``
(a LocalCluster with distributed's defaults), ``unfixed`` (glibc's 128 KiB mmap threshold kept,
the state of nanny workers before issue 23) or ``dask-worker`` (plain ``dask worker`` processes).

Workload W1 (``_common.w1_input``): two 32-feature float32 views, 10 clusters, ``rbf-grid``
kernels, 1000 landmarks, read from Zarr; LocalCluster of 2 worker processes x 1 thread.

The floor is the same job written as tightly as NumPy allows, with no Dask, no store and the
data already in memory: the same landmarks (read from the pipeline's store) and kernels fitted
by the same ``fit_landmarks``, then, in 2 processes with one BLAS thread each on half the rows,
the embedding over row blocks into preallocated buffers (one ``exp`` per view and squarings /
square roots, as the library does) and 20 Lloyd passes whose partial sums the parent adds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time

import numpy as np
from _common import (
    CLUSTERS,
    OUT,
    W1,
    drop_malloc_environ,
    emit,
    import_library,
    local_cluster,
    machine,
    median,
    run_job,
    run_pipeline,
    w1_input,
)

N_LLOYD = 20


# ----------------------------------------------------------------------------- the floor
def _floor_embed(model, views: dict, block_rows: int) -> np.ndarray:
    """The embedding of every row: the library's arithmetic in preallocated buffers."""
    from mkdist.internals import power_families

    proj = model.projected_kernels
    dtype = np.dtype(model.dtype)
    N, n, K = next(iter(views.values())).shape[0], model.n_landmarks, model.n_components
    H = np.empty((N, K), dtype=dtype)
    gram = np.empty((block_rows, n), dtype=dtype)
    base = np.empty_like(gram)
    work = np.empty_like(gram)
    prep = proj.prep
    w2 = model.kernel_weights ** 2
    by_view = {}
    for j, k in enumerate(proj.kernels):
        by_view.setdefault(k.view, []).append(j)
    ll = {v: np.einsum("ij,ij->i", proj.landmarks[v], proj.landmarks[v]) for v in by_view}
    LT = {v: np.ascontiguousarray(proj.landmarks[v].T) for v in by_view}
    fams = {v: power_families([proj.kernels[j] for j in js]) for v, js in by_view.items()}
    acc = np.empty((block_rows, K))
    for start in range(0, N, block_rows):
        b = min(block_rows, N - start)
        acc[:b] = 0.0
        for v, js in by_view.items():
            Xb = views[v][start:start + b]
            g = np.matmul(Xb, LT[v], out=gram[:b])
            g *= -2.0
            g += np.einsum("ij,ij->i", Xb, Xb)[:, None]
            g += ll[v][None, :]
            np.maximum(g, 0.0, out=g)
            done_base = None
            for local, j in enumerate(js):
                bj, p = fams[v][local]
                if done_base != bj:
                    np.multiply(g, -0.5 / proj.kernels[js[bj]].sigma ** 2, out=base[:b])
                    np.exp(base[:b], out=base[:b])
                    done_base = bj
                blk = work[:b]
                np.copyto(blk, base[:b])
                for _ in range(abs(p)):
                    np.multiply(blk, blk, out=blk) if p > 0 else np.sqrt(blk, out=blk)
                dlQ, u, vv = proj.terms[j]
                G = (blk @ dlQ).astype(np.float64)
                G, m = G[:, :-1], G[:, -1]
                s = prep.grand_means[proj.index[j]]
                G -= (m - s)[:, None] * u[None, :] + vv[None, :]
                G *= (1.0 / np.sqrt(np.maximum(1.0 - 2.0 * m + s, 1e-12)))[:, None]
                acc[:b] += w2[proj.index[j]] * G
        a = acc[:b]
        a /= np.maximum(np.linalg.norm(a, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        H[start:start + b] = a
    return H


def _floor_lloyd_partials(H: np.ndarray, centers: np.ndarray) -> np.ndarray:
    k, K = centers.shape
    d = -2.0 * (H @ centers.T)
    d += (centers * centers).sum(axis=1)[None, :]
    labels = d.argmin(axis=1)
    out = np.empty((k, K + 1))
    for j in range(K):
        out[:, j] = np.bincount(labels, weights=H[:, j], minlength=k)
    out[:, K] = np.bincount(labels, minlength=k)
    return out


def _floor_worker(src: str, lo: int, hi: int, model, block_rows: int, conn) -> None:
    import xarray as xr

    ds = xr.open_zarr(src, consolidated=False)
    views = {v: np.ascontiguousarray(ds[v].values[lo:hi]) for v in model.view_names}  # untimed: data in RAM
    conn.send("ready")
    conn.recv()  # go
    t0 = time.perf_counter()
    H = _floor_embed(model, views, block_rows).astype(np.float64)
    t_embed = time.perf_counter() - t0
    centers = conn.recv()
    for _ in range(N_LLOYD):
        conn.send(_floor_lloyd_partials(H, centers))
        centers = conn.recv()
    conn.send({"embed_s": t_embed, "lloyd_s": time.perf_counter() - t0 - t_embed})


def floor(N: int, pipeline_store: str, block_rows: int, n_procs: int = 2) -> dict:
    """fit + embed + 20 Lloyd passes: fit in this process, the rest in ``n_procs`` single-thread
    processes on equal shares of the rows."""
    import xarray as xr

    from mkdist import MultipleKernelClustering
    from mkdist.storage import RunStore

    src = str(w1_input(N))
    ds = xr.open_zarr(src, consolidated=False)
    lm = RunStore.open(pipeline_store).read_stage("landmarks")  # the pipeline's own landmarks
    idx = np.asarray(lm["landmark_index"].values)
    rows = {v: np.asarray(ds[v].values[idx]) for v in ("view0", "view1")}
    ctx = mp.get_context("spawn")
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({k: "1" for k in saved})  # the children's BLAS: one thread each
    # ... and glibc's defaults, not a nanny's leftovers (they would send its 2 MiB temporaries to mmap)
    saved.update(drop_malloc_environ())
    est = MultipleKernelClustering(10, kernels=W1["kernels"], n_landmarks=W1["n_landmarks"], random_state=0)
    t0 = time.perf_counter()
    est.fit_landmarks(rows, idx, 0)
    t_fit = time.perf_counter() - t0
    pipes, procs = [], []
    bounds = np.linspace(0, N, n_procs + 1).astype(int)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_floor_worker, args=(src, lo, hi, est.model_, block_rows, child))
        p.start()
        pipes.append(parent)
        procs.append(p)
    for k, v in saved.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    for c in pipes:
        assert c.recv() == "ready"
    t0 = time.perf_counter()
    for c in pipes:
        c.send("go")
    centers = np.random.default_rng(0).normal(size=(10, est.model_.n_components))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    for c in pipes:
        c.send(centers)
    for _ in range(N_LLOYD):
        stats = sum(c.recv() for c in pipes)
        counts = stats[:, -1]
        centers = np.where(counts[:, None] > 0, stats[:, :-1] / np.maximum(counts, 1)[:, None], centers)
        for c in pipes:
            c.send(centers)
    parts = [c.recv() for c in pipes]
    t_rest = time.perf_counter() - t0
    for p in procs:
        p.join()
    return {"block_rows": block_rows, "n_procs": n_procs, "fit_s": t_fit, "embed_s": max(p["embed_s"] for p in parts),
            "lloyd_s": max(p["lloyd_s"] for p in parts), "total_s": t_fit + t_rest, "lloyd_passes": N_LLOYD}


def dask_ml_kmeans(N: int) -> dict:
    import dask.array as da
    import xarray as xr
    from dask_ml.cluster import KMeans as DaskKMeans

    import mkdist

    ds = xr.open_zarr(w1_input(N), consolidated=False)
    y = ds["y"].values
    cluster, client = local_cluster()
    try:
        t0 = time.perf_counter()
        X = da.concatenate([ds["view0"].data, ds["view1"].data], axis=1).rechunk({1: -1}).persist()
        t_read = time.perf_counter() - t0
        km = DaskKMeans(n_clusters=10, random_state=0).fit(X)
        total = time.perf_counter() - t0
        labels = np.asarray(km.labels_)
    finally:
        client.close()
        cluster.close()
    return {"read_persist_s": t_read, "fit_s": total - t_read, "total_s": total,
            "scores": mkdist.clustering_scores(y, labels)}


def part_floor(args):
    # Pipeline and floor alternate, --repeats times: one run of each moved by 20-25% between
    # runs on this machine, so the ratio is the median of the per-round ratios.
    rounds = []
    for _ in range(args.repeats):
        # the report: --part report
        pipe = run_pipeline(args.n, OUT / "stores" / f"speed-{args.n}.zarr", cluster=args.cluster)
        floors = [floor(args.n, pipe["store"], b) for b in (8192, 512)]
        best = min(floors, key=lambda f: f["total_s"])
        rounds.append({"pipeline": pipe, "floor": floors, "ratio": pipe["end_to_end_s"] / best["total_s"]})
    pipe_s = median([r["pipeline"]["end_to_end_s"] for r in rounds])
    peer = dask_ml_kmeans(args.n)
    return {"rounds": rounds, "dask_ml_kmeans": peer,
            "pipeline_end_to_end_s_median": pipe_s,
            "best_floor_s_median": median([min(f["total_s"] for f in r["floor"]) for r in rounds]),
            "ratio_pipeline_over_floor_per_round": [r["ratio"] for r in rounds],
            "ratio_pipeline_over_floor": median([r["ratio"] for r in rounds]),
            "ratio_pipeline_over_dask_ml": pipe_s / peer["total_s"],
            "target": "pipeline <= 1.5 x floor and faster than dask-ml KMeans"}


# ----------------------------------------------------------------------------- embed stage
def part_embed(args):
    import xarray as xr

    import mkdist
    from mkdist import pipeline as P
    from mkdist.storage import RunStore

    src = str(w1_input(args.n))
    base = run_pipeline(args.n, OUT / "stores" / f"embed-base-{args.n}.zarr")  # a stored model to embed with
    out = {"N": args.n}
    for n_workers in (1, 2):
        store = OUT / "stores" / f"embed-{n_workers}.zarr"
        if store.exists():
            shutil.rmtree(store)
        shutil.copytree(base["store"], store)
        cluster, client = local_cluster(n_workers)
        try:
            client.run(import_library)
            times = []
            for _ in range(args.repeats):
                with P.writer_lease(str(store)):
                    run = RunStore.open(str(store), mode="r+")
                    run.delete_stage("embedding", missing_ok=True)
                    # A context of its own per repeat, as a fresh process builds it: nothing is
                    # carried from one timed stage to the next.
                    times.append(P.stage_embedding(P.run_context(run, src)))
        finally:
            client.close()
            cluster.close()
        out[f"workers_{n_workers}"] = {"embed_s_median": median([t["embed_s"] for t in times]),
                                       "write_s_median": median([t["write_s"] for t in times]),
                                       "runs": times}
    # The arithmetic alone: every row through the library's embed in this process, one thread.
    from threadpoolctl import threadpool_limits

    est = mkdist.load_estimator(base["store"])
    ds = xr.open_zarr(src, consolidated=False)
    views = {v: np.ascontiguousarray(ds[v].values) for v in est.view_names_}
    with threadpool_limits(1):
        t0 = time.perf_counter()
        mkdist.embed(views, est.model_)
        one_thread = time.perf_counter() - t0
    w1, w2 = out["workers_1"]["embed_s_median"], out["workers_2"]["embed_s_median"]
    out.update(one_thread_embed_s=one_thread, two_over_one_worker=w2 / w1,
               two_workers_over_one_thread_half=w2 / (one_thread / 2),
               target="2 workers <= 0.65 x 1 worker, and <= 1.3 x one-thread time / 2")
    return out


# ----------------------------------------------------------------------------- landmark fit
def part_fit(args):
    import scipy.linalg
    import xarray as xr

    from mkdist import MultipleKernelClustering

    ds = xr.open_zarr(w1_input(100_000), consolidated=False)
    idx = np.sort(np.random.default_rng(0).choice(100_000, 1000, replace=False))
    rows = {v: np.asarray(ds[v].values[idx]) for v in ("view0", "view1")}
    A = np.random.default_rng(0).normal(size=(1000, 1000))
    A = A @ A.T

    def fit_s():
        est = MultipleKernelClustering(10, kernels="rbf-grid", random_state=0)
        t0 = time.perf_counter()
        est.fit_landmarks(rows, idx, 0)
        return time.perf_counter() - t0, len(est.kernels_)

    def eigh_s():
        t0 = time.perf_counter()
        scipy.linalg.eigh(A)
        return time.perf_counter() - t0

    out = {"n": 1000, "K": 10}
    for condition in ("quiet", "one_core_busy"):
        busy = None
        if condition == "one_core_busy":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            fits = [fit_s() for _ in range(args.repeats)]
            eighs = [eigh_s() for _ in range(args.repeats)]
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        out[condition] = {"fit_s_median": median([f[0] for f in fits]), "m_kernels": fits[0][1],
                          "full_eigh_s_median": median(eighs)}
    q, b = out["quiet"], out["one_core_busy"]
    out.update(quiet_fit_over_eigh=q["fit_s_median"] / q["full_eigh_s_median"],
               busy_over_quiet_fit=b["fit_s_median"] / q["fit_s_median"],
               target="quiet fit <= 10 x one full eigh; busy fit <= 2 x quiet fit")
    return out


# ----------------------------------------------------------------------------- same labels
#: Run by each interpreter in a fresh process: W1 through mkdist.cluster on a 2 x 1
#: LocalCluster, labels saved to argv[3].  Only API that every mkdist version has.
_LABELS_JOB = """
import json, sys, time
import numpy as np
from distributed import Client, LocalCluster
import mkdist
src, store, out, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c, Client(c):
        t0 = time.perf_counter()
        res = mkdist.cluster(src, store, random_state=0, **params)
        np.save(out, np.asarray(res.labels.compute()))
        print(json.dumps({"seconds": time.perf_counter() - t0, "version": mkdist.__file__}))
"""


def _labels_with(python: str, N: int, tag: str, params: dict) -> tuple[np.ndarray, dict]:
    src = w1_input(N)
    store = OUT / "stores" / f"labels-{tag}-{N}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    out = OUT / f"labels-{tag}-{N}.npy"
    info = run_job(python, _LABELS_JOB, src, store, out, json.dumps(params), cwd=OUT)
    shutil.rmtree(store, ignore_errors=True)
    return np.load(out), info


def part_labels(args):
    import xarray as xr

    import mkdist

    if not args.reference_python:
        raise SystemExit("--part labels needs --reference-python (the interpreter of an older checkout)")
    y = xr.open_zarr(w1_input(args.n), consolidated=False)["y"].values
    ref, ref_info = _labels_with(args.reference_python, args.n, "reference", W1)
    out = {"N": args.n, "reference": {**ref_info, "scores": mkdist.clustering_scores(y, ref)}}
    # The same arithmetic as the reference (K embedding columns, its default then), and this
    # version's defaults.
    for name, params in (("same_arithmetic", {**W1, "embedding_dim": W1["n_clusters"]}), ("defaults", W1)):
        lab, info = _labels_with(sys.executable, args.n, name, params)
        matched = mkdist.clustering_accuracy(ref, lab)  # share of rows with the same label, up to renaming
        out[name] = {**info, "params": params, "scores": mkdist.clustering_scores(y, lab),
                     "identical_labels": bool(np.array_equal(lab, ref)), "share_same_up_to_renaming": matched,
                     "ari_vs_reference": mkdist.ari(ref, lab)}
    return out


# ----------------------------------------------------------------------------- run report
def part_report(args):
    """The run report's cost at N rows: runs with and without the report alternate, each in a
    fresh process, so each pays the matplotlib import as every `mkdist run` does."""
    rounds = []
    for _ in range(args.repeats):
        for report in (True, False):
            cmd = [sys.executable, __file__, "--part", "pipeline_once", "--n", str(args.n), "--cluster", args.cluster]
            done = subprocess.run(cmd + (["--report"] if report else []), capture_output=True, text=True,
                                  check=True, cwd=os.path.dirname(os.path.abspath(__file__)))
            rounds.append(json.loads(done.stdout))
    with_report = [r for r in rounds if r.get("report")]
    without = [r for r in rounds if not r.get("report")]
    run_s = median([r["end_to_end_s"] for r in without])
    return {"rounds": rounds,
            "report_tail_s_median": median([r["report_tail_s"] for r in with_report]),
            "report_foreground_s_median": median([r["report_foreground_s"] for r in with_report]),
            "report_background_cpu_s_median": median([r["report_background_cpu_s"] for r in with_report]),
            "report_background_busy_cpu_s_median": median([r["report_background_busy_cpu_s"] for r in with_report]),
            "report_s_median": median([r["report_s"] for r in with_report]),
            "report_share_of_run_median": median([r["report_share_of_run"] for r in with_report]),
            "report_share_of_run_upper_median": median([r["report_share_of_run_upper"] for r in with_report]),
            "end_to_end_with_report_s_median": median([r["end_to_end_s"] for r in with_report]),
            "end_to_end_without_report_s_median": run_s,
            "target": "report build time < 5% of the run's time at N = 1M (W1)"}


def part_pipeline_once(args):
    out = run_pipeline(args.n, OUT / "stores" / f"report-{args.n}.zarr", report=args.report, cluster=args.cluster)
    shutil.rmtree(out["store"], ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- scale
def part_scale(args):
    ns = [int(x) for x in args.ns.split(",")]
    runs = [run_pipeline(N, OUT / "stores" / f"scale-{N}.zarr", cluster=args.cluster) for N in ns]
    for r in runs:
        shutil.rmtree(r["store"], ignore_errors=True)
    return {"runs": runs, "time_ratio_vs_first": {r["N"]: r["end_to_end_s"] / runs[0]["end_to_end_s"] for r in runs},
            "target": "10M end to end <= 11 x 1M; peak worker RSS <= 2 GiB and flat"}


# ----------------------------------------------------------------------------- default clusters
def part_plain(args):
    """W1 end to end on clusters started with distributed's defaults, against the floor (issue 23).

    Each round runs, in an order that rotates by one every round: the pipeline on a plain
    LocalCluster created from Python, on plain ``dask scheduler`` + ``dask worker --nthreads 1``
    processes, and on a LocalCluster whose workers keep the slow glibc state (``unfixed``), and
    the tight floor on 512-row blocks (which beat 8192-row blocks in every round of ``--part
    floor``).  Every pipeline run is the first run of a fresh cluster.  The floor reads the
    landmarks of the plain run's store (the same seed gives the same landmarks in every run).
    """
    # "tuned" (mkdist's own LocalCluster, malloc settings at start) is the reference the plain
    # clusters should match: under load every kind stretches, and only the same run compares.
    kinds = ["plain", "dask-worker", "unfixed", "tuned", "floor"]
    stores = {k: OUT / "stores" / f"plain-{k}-{args.n}.zarr" for k in kinds[:4]}
    rounds = []
    for r in range(args.repeats):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        if r == 0 or not (stores["plain"] / "zarr.json").exists():
            order = [k for k in order if k != "floor"] + ["floor"]  # the floor needs a store first
        got, load = {}, {}
        for kind in order:
            load[kind] = os.getloadavg()[0]
            got[kind] = (floor(args.n, str(stores["plain"]), 512) if kind == "floor"
                         else run_pipeline(args.n, stores[kind], cluster=kind))
        fl = got["floor"]["total_s"]
        rounds.append({"order": order, "load_1min_before": load, **got,
                       "ratio_over_floor": {k: got[k]["end_to_end_s"] / fl for k in kinds[:4]},
                       "embed_unfixed_over_plain":
                           got["unfixed"]["stages"]["embed_s"] / got["plain"]["stages"]["embed_s"],
                       "embed_unfixed_over_dask_worker":
                           got["unfixed"]["stages"]["embed_s"] / got["dask-worker"]["stages"]["embed_s"]})

    def med(f):
        return median([f(r) for r in rounds])
    return {"rounds": rounds,
            "end_to_end_s_median": {k: med(lambda r, k=k: r[k]["end_to_end_s"]) for k in kinds[:4]},
            "embed_s_median": {k: med(lambda r, k=k: r[k]["stages"]["embed_s"]) for k in kinds[:4]},
            "floor_s_median": med(lambda r: r["floor"]["total_s"]),
            "floor_embed_s_median": med(lambda r: r["floor"]["embed_s"]),
            "ratio_over_floor_median": {k: med(lambda r, k=k: r["ratio_over_floor"][k]) for k in kinds[:4]},
            "embed_unfixed_over_plain_median": med(lambda r: r["embed_unfixed_over_plain"]),
            "embed_unfixed_over_dask_worker_median": med(lambda r: r["embed_unfixed_over_dask_worker"]),
            "max_worker_peak_rss_gib": {k: max(r[k]["max_worker_peak_rss_gib"] for r in rounds) for k in kinds[:4]},
            "target": "plain LocalCluster and dask-worker end to end <= 1.5 x floor, first run of a fresh cluster"}


# ----------------------------------------------------------------------------- passes and tasks
class TaskLog:
    """A scheduler plugin: every graph sent (time, its keys) and every task a worker computed
    (time, key): real counts, not estimates."""

    name = "mkdist-bench-tasklog"

    def __init__(self):
        self.graphs: list = []
        self.done: list = []

    def update_graph(self, scheduler, *, keys=None, tasks=None, **kwargs):
        self.graphs.append((time.time(), list(tasks or ())))

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "processing" and finish == "memory":
            compute_s = sum(ss["stop"] - ss["start"] for ss in kwargs.get("startstops") or ()
                            if ss.get("action") == "compute")
            self.done.append((time.time(), key, compute_s))

    # The rest of the SchedulerPlugin interface, as no-ops (distributed calls them if present).
    async def start(self, scheduler):
        return None


def _log_of(dask_scheduler=None):
    plugin = dask_scheduler.plugins[TaskLog.name]
    return plugin.graphs, plugin.done


def _key_name(key) -> str:
    import re

    name = key[0] if isinstance(key, tuple) else str(key)
    return re.sub(r"-[0-9a-f]{32}$", "", name)


#: What each graph of a W1 run is, by the names of its tasks (first match).
_PASS_NAMES = [("-small", "labels pass results gathered (in memory)"),
               ("scan-input", "input scan + landmark rows (a pass over the input)"),
               ("write-embedding", "embedding: read, embed, write (a pass over the input)"),
               ("mkdist-take", "row gather"),
               ("lloyd", "Lloyd pass (a pass over the embedding)"),
               ("shuffle", "row gather by shuffle (a pass over the embedding)"),
               ("write-labels", "labels written"),
               ("mkdist-labels", "labels, distances, sizes, report rows (a pass over the embedding)"),
               ("assign", "labels (a pass over the embedding)")]


def _passes_once(N: int, store) -> dict:
    """One W1 run through ``mkdist.cluster`` on a plain LocalCluster(2 x 1), its tasks logged."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    import mkdist

    src = w1_input(N)
    shutil.rmtree(store, ignore_errors=True)
    workers, client = local_cluster(2, cluster="plain")
    try:
        client.run(import_library)
        log = type("TaskLogPlugin", (TaskLog, SchedulerPlugin), {})()
        client.register_plugin(log)
        t0 = time.time()
        res = mkdist.cluster(str(src), str(store), random_state=0, **W1)
        total = time.time() - t0
        # The scheduler holds its own (unpickled) copy of the plugin.
        graphs, done = client.run_on_scheduler(_log_of)
        chunks = len(xr_chunks(src))
    finally:
        client.close()
        workers.close()
    owner = {}
    for i, (_, keys) in enumerate(graphs):
        for k in keys:
            owner.setdefault(k, i)
    per_graph = [[] for _ in graphs]
    for _, k, _ in done:
        if k in owner:
            per_graph[owner[k]].append(_key_name(k))
    compute_s: dict = {}
    for _, k, c in done:
        compute_s[_key_name(k)] = compute_s.get(_key_name(k), 0.0) + c
    rows, passes = [], {}
    for (t, _), names in zip(graphs, per_graph):
        if not names:
            continue
        what = next((label for pat, label in _PASS_NAMES if any(pat in n for n in names)),
                    "other (small reads, commits)")
        if what == "row gather":  # before the embedding: the landmarks'; after: the k-means sample's
            what = ("k-means sample rows (a pass over the embedding)" if any("embedding" in r["what"] for r in rows)
                    else "landmark rows (a pass over the input chunks that hold landmarks)")
        rows.append({"t_s": round(t - t0, 2), "what": what, "tasks": len(names)})
        if "a pass over" in what:
            passes[what] = passes.get(what, 0) + 1
    stages = res.timings
    named = sum(stages[k] for k in ("sample_s", "fit_s", "embed_s", "kmeans_s", "write_s"))
    import collections

    return {"N": N, "chunks": chunks, "end_to_end_s": total, "stages": stages, "named_stages_s": named,
            "outside_named_s": total - named, "outside_share": (total - named) / total,
            "tasks": len(done), "tasks_per_chunk": len(done) / chunks, "graphs": rows,
            "full_passes": passes, "n_full_passes": sum(passes.values()),
            "tasks_by_name": dict(collections.Counter(_key_name(k) for _, k, _ in done).most_common()),
            "task_compute_s": dict(sorted(compute_s.items(), key=lambda kv: -kv[1])),
            "worker_compute_us_per_row": 1e6 * sum(compute_s.values()) / N,
            "scores": mkdist.clustering_scores(_w1_y(src), res.labels.compute()), "store": str(store)}


def xr_chunks(src) -> tuple:
    import xarray as xr

    return xr.open_zarr(src, consolidated=False)["view0"].chunks[0]


def _w1_y(src):
    import xarray as xr

    return xr.open_zarr(src, consolidated=False)["y"].values


def part_passes(args):
    """Tasks and passes of W1 end to end on a plain LocalCluster(2 x 1), and the 2-process NumPy
    floor in the same rounds (run and floor alternate in order each round)."""
    store = OUT / "stores" / f"passes-{args.n}.zarr"
    rounds = []
    for r in range(args.repeats):
        order = ["run", "floor"] if r % 2 == 0 or not (store / "zarr.json").exists() else ["floor", "run"]
        got = {}
        for kind in order:
            if kind == "floor" and args.no_floor:
                continue
            got[kind] = floor(args.n, str(store), 512) if kind == "floor" else _passes_once(args.n, store)
        if not args.no_floor:
            got["ratio_over_floor"] = got["run"]["end_to_end_s"] / got["floor"]["total_s"]
        got["load_1min"] = os.getloadavg()[0]
        rounds.append(got)

    def med(f):
        return median([f(r) for r in rounds])
    return {"rounds": rounds, "numba": _has_numba(),
            "end_to_end_s_median": med(lambda r: r["run"]["end_to_end_s"]),
            "floor_s_median": None if args.no_floor else med(lambda r: r["floor"]["total_s"]),
            "ratio_over_floor_median": None if args.no_floor else med(lambda r: r["ratio_over_floor"]),
            "outside_share_median": med(lambda r: r["run"]["outside_share"]),
            "tasks_per_chunk": rounds[0]["run"]["tasks_per_chunk"],
            "n_full_passes": rounds[0]["run"]["n_full_passes"],
            "target": "<= 16 tasks per chunk; outside the named stages <= 10%; end to end <= 1.0 x floor"}


def _has_numba() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba") is not None and os.environ.get("MKDIST_NUMBA") != "0"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True,
                    choices=["floor", "embed", "fit", "scale", "labels", "report", "pipeline_once", "plain", "passes"])
    ap.add_argument("--cluster", choices=CLUSTERS, default="tuned",
                    help="floor, scale, report, pipeline_once: how the pipeline's workers start")
    ap.add_argument("--report", action="store_true", help="--part pipeline_once: write the run report")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--ns", default="1000000,10000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-floor", action="store_true", help="--part passes: the run alone (tasks, passes, stages)")
    ap.add_argument("--reference-python", help="--part labels: the Python of an older mkdist checkout")
    args = ap.parse_args()
    emit({"bench": f"speed/{args.part}", "machine": machine(), "workload": W1, **globals()[f"part_{args.part}"](args)})


if __name__ == "__main__":
    main()
