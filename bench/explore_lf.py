"""Exploration of late-fusion discretisations on the landmarks (issue 15): not a benchmark of record.

    python bench/explore_lf.py SET[,SET...] [SEEDS, e.g. 0,1] [none]    # prints one JSON line per set/seed

For one set and seed: the base partitions as ``LateFusionClustering``'s defaults build them on
its landmarks (``kernels="auto"``, d = 2k|k, ``min_pep_ratio=0.02``, ``scale="minmax"``, or
none with a third argument ``none``), then Algorithm 1 (order 3, learned mu) from ``restarts``
fusion seeds, and the ACC of the landmarks' labels (all rows when N <= 2000) for:
``first`` Algorithm 1's labels, first fusion seed (the old discretisation); ``bestJ`` the
fusion seed with the lowest J; ``*_rn`` k-means (10 restarts) on the row-normalised H~
instead; ``mean*`` means over the fusion seeds (``mean_km``: k-means on the raw H~);
``singles`` each kept partition alone; ``avgproj_rn`` k-means on the row-normalised top-k
singular vectors of the top-k partitions side by side.  ``VARIANTS`` adds fusion variants
(the 13-set screen of bench/RESULTS.md also ran ``{"rn_base": True}``, every H_p
row-normalised before the graphs, and ``{"order": 0}``).  The seed-0 figures in bench/RESULTS.md
("Late-fusion defaults, continued") are from commit ab2c160; since then ``fit_base_partitions`` drops
near-constant views, so ACM's row differs.
"""
from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np
from _common import load_multiview, multiview_sets
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from mkdist.internals import (
    build_graph,
    default_embedding_dim,
    fit_base_partitions,
    fit_fusion,
    late_fusion_seeds,
    partition_copies,
    sample_landmark_indices,
)
from mkdist.metrics import clustering_accuracy


def rownorm(Z):
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-300)


def fusion_variants(base, yl, k, s_fus, restarts, rn_base, order=3, learn_mu=True):
    kept = base.kept
    Hs = [rownorm(base.H[p]) if rn_base else base.H[p] for p in kept]
    H_cat = np.hstack(Hs)
    col = np.repeat(np.arange(kept.size), [h.shape[1] for h in Hs])
    graphs = [build_graph(h, 5) for h in Hs]
    copies = partition_copies(base.kernel_group, kept.size)
    res = []
    rng = np.random.RandomState(s_fus)
    for r in range(restarts):
        sd = s_fus if r == 0 else int(rng.randint(2**31 - 1))
        f = fit_fusion(H_cat, col, graphs, copies, n_clusters=k, order=order, learn_mu=learn_mu, n_init=10,
                       max_iter=30, tol=1e-6, random_state=sd)
        acc = clustering_accuracy(yl, f.labels)
        acc_rn = clustering_accuracy(yl, KMeans(k, n_init=10, random_state=0).fit_predict(rownorm(f.embedding)))
        acc_km = clustering_accuracy(yl, KMeans(k, n_init=10, random_state=sd).fit_predict(f.embedding))
        res.append((float(f.objective_history[-1]), acc, acc_rn, acc_km))
    res = np.array(res)
    b = int(np.argmin(res[:, 0]))
    return {"first": round(res[0, 1], 3), "first_rn": round(res[0, 2], 3), "bestJ": round(res[b, 1], 3),
            "bestJ_rn": round(res[b, 2], 3), "mean": round(res[:, 1].mean(), 3), "mean_rn": round(res[:, 2].mean(), 3),
            "mean_km": round(res[:, 3].mean(), 3)}


VARIANTS = [("o3", {})]


def run(name, seed, scale="minmax", kernels="auto", restarts=4, dim=None):
    views, y = load_multiview(multiview_sets()[name])
    views = {f"view{i}": v for i, v in enumerate(views)}
    k = int(np.unique(y).size)
    N = y.size
    n = min(N, 2000)
    s_lm, s_base, s_fus = late_fusion_seeds(seed)
    idx = sample_landmark_indices(views, n, random_state=s_lm)
    lv = {kk: np.asarray(v[idx]) for kk, v in views.items()}
    yl = y[idx]
    d = default_embedding_dim(k, n) if dim is None else dim * k
    out = {"set": name, "seed": seed, "scale": scale}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = fit_base_partitions(lv, n_clusters=k, embedding_dim=d, kernels=kernels, center=True,
                                   normalize="diagonal", scale=scale, min_pep_ratio=0.02, random_state=s_base)
    kept = base.kept
    out["kept"] = len(kept)
    singles = []
    for p in kept:
        lab = KMeans(k, n_init=10, random_state=0).fit_predict(rownorm(base.H[p][:, :k]))
        singles.append(round(clustering_accuracy(yl, lab), 2))
    out["singles"] = singles
    # average of the kept kernels' projections H_p H_p^T (k-dim): top-k eigvecs of sum_p H_p[:, :k] H_p[:, :k]^T
    Hk = np.hstack([base.H[p][:, :k] for p in kept])
    U, s, _ = np.linalg.svd(Hk, full_matrices=False)
    km = KMeans(k, n_init=10, random_state=0)
    out["avgproj_rn"] = round(clustering_accuracy(yl, km.fit_predict(rownorm(U[:, :k]))), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tag, kw in VARIANTS:
            kw.setdefault("rn_base", False)
            out[tag] = fusion_variants(base, yl, k, s_fus, restarts, **kw)
    return out


if __name__ == "__main__":
    names = sys.argv[1].split(",")
    seeds = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0]
    scale = None if len(sys.argv) > 3 and sys.argv[3] == "none" else "minmax"
    with threadpool_limits(1):
        for name in names:
            for seed in seeds:
                t0 = time.perf_counter()
                o = run(name, seed, scale=scale)
                o["s"] = round(time.perf_counter() - t0, 1)
                print(json.dumps(o), flush=True)
