"""Nystrom bipartite spectral clustering on MNIST (seed section 5): Algorithm 2 vs Algorithm 1
on the test set, and NMI against the number of anchors m around sqrt(N).

    python bench/bench_nystrom_mnist.py [--seeds 5] [--factors 0.25,0.5,1,2,4] [--repeats 3] [--no-dask]

MNIST 60k train / 10k test, X / 255 as float32, k = 10, NumPy input.

* ``alg2_vs_alg1``: fit on the 60k training rows with m = ceil(sqrt(60000)) = 245, then
  - Algorithm 2: ``predict`` on the 10k test rows (embedding + nearest training centroid);
  - Algorithm 2 + k-means: ``transform`` the test rows, then a fresh k-means on that
    embedding (the other reading of the paper's "clustering obtained from the embeddings");
  - Algorithm 1 re-run on the 10k test rows alone, m = ceil(sqrt(10000)) = 100.
  Test NMI and wall time of each (paper, Table 2: 0.483 vs 0.487, Algorithm 2 4.5x faster).
* ``nmi_vs_m``: m = ceil(c sqrt(60000)) for each factor c; training NMI (Algorithm 1),
  test NMI (Algorithm 2) and fit time.
* ``dask_parity_seed0``: the m = 245 fit again on a Dask array (10k-row chunks, threads).

Medians over seeds (per-seed values alongside); the Algorithm 2 / Algorithm 1 timings are the
best of ``--repeats`` runs each.  The machine is shared: see ``load_avg_*``.  Prints JSON.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
from _common import SHARED_DATA, emit, machine, median, timed

from mkdist import NystromSpectralClustering, kmeans
from mkdist.metrics import nmi

K = 10


def load_mnist():
    d = np.load(SHARED_DATA / "mnist.npz")
    X = d["X"].astype(np.float32) / 255
    y = d["y"]
    return X[:60000], y[:60000], X[60000:], y[60000:]


def best_of(repeats: int, fn, *args, **kwargs):
    runs = [timed(fn, *args, **kwargs) for _ in range(repeats)]
    return runs[-1][0], min(t for _, t in runs)


def summarize(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if k != "seed" and isinstance(rows[0][k], (int, float))]
    return {**{k: median([r[k] for r in rows]) for k in keys}, "per_seed": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--factors", default="0.25,0.5,1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask parity run")
    args = ap.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    Xtr, ytr, Xte, yte = load_mnist()
    N = len(Xtr)
    out = {
        "bench": "nystrom_mnist", "machine": machine(), "load_avg_start": os.getloadavg(),
        "data": "MNIST, 60000 train / 10000 test x 784, X/255 float32, k=10, numpy input",
        "paper_table2": {"alg2_nmi": 0.4827, "alg1_nmi": 0.4872, "speedup": 4.52,
                         "note": "paper splits MNIST60K 50k/10k, 30 repeats; here official 60k/10k"},
    }

    # Warm-up (BLAS and k-means thread pools, imports) so the first timed fit is not penalised.
    NystromSpectralClustering(K, random_state=0).fit(Xtr[:3000])
    fits: dict[float, list] = {}
    cmp_rows = []
    for seed in range(args.seeds):
        est, fit_s = timed(NystromSpectralClustering(K, random_state=seed).fit, Xtr)
        fits.setdefault(1.0, []).append((est, fit_s))
        # Each timing is the minimum over --repeats runs (deterministic: same seed, same result):
        # the machine is shared, and the minimum is the least disturbed estimate.
        pred, alg2_s = best_of(args.repeats, est.predict, Xte)
        H_te, tr_s = best_of(args.repeats, est.transform, Xte)
        km, km_s = best_of(args.repeats, kmeans, H_te, K, n_init=10, random_state=seed)
        alg1, alg1_s = best_of(args.repeats, NystromSpectralClustering(K, random_state=seed).fit, Xte)
        cmp_rows.append({
            "seed": seed, "m_train": est.n_anchors_, "m_test_refit": alg1.n_anchors_,
            "train_fit_s": fit_s, "train_nmi": nmi(ytr, est.labels_),
            "alg2_predict_nmi": nmi(yte, pred), "alg2_predict_s": alg2_s,
            "alg2_kmeans_nmi": nmi(yte, km.labels), "alg2_kmeans_s": tr_s + km_s,
            "alg1_test_nmi": nmi(yte, alg1.labels_), "alg1_test_s": alg1_s,
            "speedup_predict": alg1_s / alg2_s, "speedup_kmeans": alg1_s / (tr_s + km_s),
        })
    out["alg2_vs_alg1"] = summarize(cmp_rows)

    grid = []
    for c in factors:
        rows = []
        for seed in range(args.seeds):
            if c == 1.0:
                est, fit_s = fits[1.0][seed]
            else:
                est, fit_s = timed(NystromSpectralClustering(K, anchor_factor=c, random_state=seed).fit, Xtr)
            rows.append({"seed": seed, "fit_s": fit_s, "train_nmi_alg1": nmi(ytr, est.labels_),
                         "test_nmi_alg2": nmi(yte, est.predict(Xte)), "kernel_rank": est.kernel_rank_,
                         **{k: v for k, v in est.diagnostics_["timings"].items()}})
        grid.append({"factor": c, "m": math.ceil(c * math.sqrt(N)), **summarize(rows)})
    out["nmi_vs_m"] = grid
    if not args.no_dask:
        # Same fit on a row-chunked Dask array (threaded scheduler, no cluster): it must give
        # the numpy model and, up to k-means (sklearn vs distributed Lloyd), the same labels.
        import dask.array as da

        ref, ref_s = timed(NystromSpectralClustering(K, random_state=0).fit, Xtr)
        est, fit_s = timed(NystromSpectralClustering(K, random_state=0).fit,
                           da.from_array(Xtr, chunks=(10_000, -1)))
        labels, lab_s = timed(est.labels_.compute)
        out["dask_parity_seed0"] = {
            "chunks_rows": 10_000, "fit_s": fit_s + lab_s, "numpy_fit_s": ref_s,
            "train_nmi": nmi(ytr, labels), "numpy_train_nmi": nmi(ytr, ref.labels_),
            "nmi_dask_vs_numpy_labels": nmi(ref.labels_, labels),
            "max_abs_diff_embedding_projection": float(
                np.abs(est.embedding_projection_ - ref.embedding_projection_).max()),
            "max_rel_diff_singular_values": float(
                np.abs(est.singular_values_ / ref.singular_values_ - 1).max()),
        }
    out["load_avg_end"] = os.getloadavg()
    emit(out)


if __name__ == "__main__":
    main()
