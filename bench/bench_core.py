"""Single-node core (issue 2): SimpleMKKM vs average-kernel k-means vs single best view on UCI
mfeat, landmarks + out-of-sample vs all-landmark fit, and SimpleMKKM fit time.

    python bench/bench_core.py [--seeds 5] [--repeats 3]

Prints JSON.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import emit, load_mfeat, machine, median, timed

from mkdist import MultipleKernelClustering, clustering_scores, simple_mkkm
from mkdist.internals import fit_kernels, fit_preprocessing, landmark_kernels, resolve_kernel_specs


def scores_over_seeds(make, views, y, seeds):
    rows = []
    for s in seeds:
        model, t = timed(make(s).fit, views)
        rows.append({**clustering_scores(y, model.labels_), "time_s": t})
    return {k: {"mean": float(np.mean([r[k] for r in rows])), "std": float(np.std([r[k] for r in rows]))}
            for k in rows[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    views, y = load_mfeat()
    seeds = range(args.seeds)
    out = {"bench": "core", "machine": machine(), "data": "UCI mfeat, 2000 x 6 views, 10 classes", "configs": {}}
    for kernels, scale in [("rbf-grid", None), ("rbf", "standard")]:
        cfg = {}
        for weights in ("simplemkkm", "uniform"):
            cfg[weights] = scores_over_seeds(
                lambda s, kernels=kernels, scale=scale, weights=weights: MultipleKernelClustering(
                    10, kernels=kernels, scale=scale, weights=weights, n_landmarks=2000, random_state=s),
                views, y, seeds)
        per_view = {}
        for v in range(6):
            per_view[f"view{v}"] = scores_over_seeds(
                lambda s, kernels=kernels, scale=scale: MultipleKernelClustering(
                    10, kernels=kernels, scale=scale, n_landmarks=2000, random_state=s), [views[v]], y, seeds)
        best = max(per_view, key=lambda k: per_view[k]["acc"]["mean"])
        cfg["single_best_view"] = {"view": best, **per_view[best]}
        cfg["landmarks_500_out_of_sample"] = scores_over_seeds(
            lambda s, kernels=kernels, scale=scale: MultipleKernelClustering(
                10, kernels=kernels, scale=scale, n_landmarks=500, random_state=s), views, y, seeds)
        out["configs"][f"kernels={kernels},scale={scale}"] = cfg

    # Fit time at n = 2000 landmarks, m = 6 kernels (one RBF per view), K = 10.
    lv = {f"view{i}": v.astype(np.float64) for i, v in enumerate(views)}
    specs = resolve_kernel_specs("rbf", list(lv))
    stack = fit_preprocessing(landmark_kernels(lv, fit_kernels(specs, lv)), True, "diagonal")[0]
    times, iters = [], []
    for _ in range(args.repeats):
        r, t = timed(simple_mkkm, stack, 10)
        times.append(t)
        iters.append(r.n_iter)
    est_times = [timed(MultipleKernelClustering(10, kernels="rbf", n_landmarks=2000, random_state=0).fit, views)[1]
                 for _ in range(args.repeats)]
    out["fit_time"] = {"n": 2000, "m": 6, "K": 10, "simple_mkkm_s_median": median(times), "n_iter": iters,
                       "estimator_fit_s_median": median(est_times), "repeats": args.repeats}
    out["paper"] = {"SimpleMKKM": {"acc": 0.903, "nmi": 0.833}}
    emit(out)


if __name__ == "__main__":
    main()
