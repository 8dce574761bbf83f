"""Distributed pipeline benchmarks (issue 3), printing JSON.

    python bench/bench_pipeline.py --part floor   --n 1000000     # pipeline vs one-process NumPy floor
    python bench/bench_pipeline.py --part scaling --ns 100000,300000,1000000
    python bench/bench_pipeline.py --part peers   --n 1000000     # dask-ml KMeans, Nystroem+MiniBatchKMeans
    python bench/bench_pipeline.py --part approx  --n 20000       # landmarks vs SimpleMKKM on all points (MNIST)
    python bench/bench_pipeline.py --part landmarks               # ACC vs number of landmarks (MNIST 60k)

Workload W1: Gaussian mixture, two views of 32 float32 features, 10 clusters, 3 RBF kernels
per view (bandwidth grid), n = 1000 landmarks, K = 10, LocalCluster with 2 worker processes
(1 thread each).  Input is written once to Zarr under bench/out/data and read by every run.
"""

from __future__ import annotations

import argparse
import os
import time

# One BLAS thread per worker process: two workers on two cores must not oversubscribe.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _common import OUT, SHARED_DATA, W1, emit, local_cluster, machine, run_pipeline, timed, w1_input, worker_peak_rss  # noqa: E402

# local_cluster and worker_peak_rss are imported from here by other bench scripts.
__all__ = ["local_cluster", "worker_peak_rss"]



def floor(N: int, n_passes: int, n_init: int) -> dict:
    """The same arithmetic in one process with plain NumPy on in-memory float32 arrays."""
    import xarray as xr

    from mkdist.internals import embed_chunk, fit_landmark_model

    ds = xr.open_zarr(w1_input(N), consolidated=False)
    views = {k: np.ascontiguousarray(ds[k].values) for k in ("view0", "view1")}
    t_all = time.perf_counter()
    rng = np.random.RandomState(0)
    idx = np.sort(rng.choice(N, W1["n_landmarks"], replace=False))
    rows = {k: v[idx] for k, v in views.items()}
    model, _ = fit_landmark_model(rows, idx, n_clusters=10, kernels=W1["kernels"], dtype="float32")
    t_fit = time.perf_counter() - t_all
    t0 = time.perf_counter()
    H = np.empty((N, 10), dtype=np.float32)
    for s in range(0, N, 8192):
        H[s:s + 8192] = embed_chunk(model, views["view0"][s:s + 8192], views["view1"][s:s + 8192])
    t_embed = time.perf_counter() - t0
    t0 = time.perf_counter()
    centers = H[rng.choice(N, 10, replace=False)].astype(np.float64)
    Hd = H.astype(np.float64)
    for _ in range(n_passes * n_init):  # the pipeline's Lloyd passes x runs
        d = (Hd**2).sum(1)[:, None] - 2 * Hd @ centers.T + (centers**2).sum(1)[None]
        lab = d.argmin(1)
        sums = np.zeros_like(centers)
        np.add.at(sums, lab, Hd)
        counts = np.bincount(lab, minlength=10)
        centers = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centers)
    t_km = time.perf_counter() - t0
    return {"fit_s": t_fit, "embed_s": t_embed, "kmeans_s": t_km, "total_s": time.perf_counter() - t_all,
            "lloyd_passes": n_passes * n_init}


def part_floor(args):
    store_root = OUT / "stores"
    pipe = run_pipeline(args.n, store_root / f"run-{args.n}.zarr")
    passes = pipe["kmeans"]["n_iter"] if pipe["kmeans"] else 20
    fl = floor(args.n, passes, n_init=3)
    return {"pipeline": pipe, "floor": fl, "ratio_pipeline_over_floor": pipe["end_to_end_s"] / fl["total_s"],
            "target": "<= 2"}


def part_scaling(args):
    ns = [int(x) for x in args.ns.split(",")]
    runs = [run_pipeline(N, OUT / "stores" / f"run-{N}.zarr") for N in ns]
    base = runs[0]["end_to_end_s"]
    return {"runs": runs, "time_ratio_vs_first": {r["N"]: r["end_to_end_s"] / base for r in runs},
            "target": "time(1M)/time(100k) <= 11; worker peak RSS <= 2 GiB and flat in N"}


def part_peers(args):
    import dask.array as da
    import xarray as xr
    from dask_ml.cluster import KMeans as DaskKMeans
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.kernel_approximation import Nystroem

    import mkdist

    src = w1_input(args.n)
    ds = xr.open_zarr(src, consolidated=False)
    y = ds["y"].values
    out = {"mkdist": run_pipeline(args.n, OUT / "stores" / f"run-{args.n}.zarr")}
    cluster, client = local_cluster()
    try:
        X = da.concatenate([ds["view0"].data, ds["view1"].data], axis=1).rechunk({1: -1}).persist()
        km, t = timed(DaskKMeans(n_clusters=10, random_state=0).fit, X)
        out["dask_ml_kmeans"] = {"time_s": t, "scores": mkdist.clustering_scores(y, np.asarray(km.labels_))}
    finally:
        client.close()
        cluster.close()
    Xn = np.hstack([ds["view0"].values, ds["view1"].values])

    def nystroem_mbk():
        sigma2 = 2 * Xn[:5000].var(axis=0).sum()
        Z = Nystroem(gamma=1 / sigma2, n_components=1000, random_state=0).fit_transform(Xn)
        return MiniBatchKMeans(10, random_state=0, n_init=3).fit_predict(Z)

    labels, t = timed(nystroem_mbk)
    out["sklearn_nystroem1000_minibatchkmeans"] = {"time_s": t, "scores": mkdist.clustering_scores(y, labels)}
    return out


def _mnist(n: int | None = None):
    d = np.load(SHARED_DATA / "mnist.npz")
    X, y = d["X"][:60000].astype(np.float32) / 255, d["y"][:60000]
    return (X[:n], y[:n]) if n else (X, y)


def part_approx(args):
    import mkdist

    X, y = _mnist(args.n)
    out = {"data": f"MNIST train, first {args.n} rows, 784 pixels", "kernels": "rbf-grid"}
    for label, n in (("landmarks_1000", 1000), ("all_points", args.n)):
        m, t = timed(mkdist.MultipleKernelClustering(10, n_landmarks=n, random_state=0, n_init=3).fit, X)
        out[label] = {"time_s": t, "scores": mkdist.clustering_scores(y, m.labels_), "n_iter": m.n_iter_,
                      "timings": m.diagnostics_["timings"]}
    out["speedup"] = out["all_points"]["time_s"] / out["landmarks_1000"]["time_s"]
    return out


def part_landmarks(args):
    import mkdist

    X, y = _mnist()
    rows = []
    for n in (250, 500, 1000, 2000, 4000):
        for seed in range(3):
            m, t = timed(mkdist.MultipleKernelClustering(10, n_landmarks=n, random_state=seed, n_init=3).fit, X)
            rows.append({"n_landmarks": n, "seed": seed, "time_s": t, **mkdist.clustering_scores(y, m.labels_)})
    summary = {}
    for n in sorted({r["n_landmarks"] for r in rows}):
        sel = [r for r in rows if r["n_landmarks"] == n]
        summary[n] = {k: float(np.median([r[k] for r in sel])) for k in ("acc", "nmi", "time_s")}
    return {"data": "MNIST train 60k", "rows": rows, "median": summary}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True, choices=["floor", "scaling", "peers", "approx", "landmarks"])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--ns", default="100000,300000,1000000")
    args = ap.parse_args()
    result = globals()[f"part_{args.part}"](args)
    emit({"bench": f"pipeline/{args.part}", "machine": machine(), "workload": W1, **result})


if __name__ == "__main__":
    main()
