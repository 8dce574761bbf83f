"""RFF kernel power k-means (seeds/rff-kernel-power-kmeans.txt, docs/algorithms.md section 4):
``MultiViewRFFPowerKMeans`` (IP-RFF-MKPKM) and ``RFFKernelPowerKMeans`` (RFF-KPKM), printing JSON.

    python bench/bench_power_kmeans.py --part mfeat [--seeds 10] [--quick]
    python bench/bench_power_kmeans.py --part seeds [--seeds 10] [--data hw2sources,...] [--settings ...]
    python bench/bench_power_kmeans.py --part scale [--n 1000000] [--variants]   # --n 100000: quick
    python bench/bench_power_kmeans.py --part timing [--seeds 1] [--data leaves100,ccv,...]

``mfeat``: UCI multiple features, the paper's HW2 setting (2000 points, 10 classes, two views
of 240 and 216 features): view3 = pix (240) and view1 = fac (216) of ``mfeat.npz``, raw
features as stored.  Scores (ACC, NMI, ARI: mean/std/min/max over seeds) and fit time of

* ``headline``, every estimator with its DEFAULT parameters:
  - IP-RFF-MKPKM: ``MultiViewRFFPowerKMeans(10)`` on [pix, fac];
  - RFF-MKPKM: the paper's Table 2 row is IP-RFF-MKPKM with d~ replaced by d (seed, Results:
    "replacing d~_ij in IP-RFF-MKPKM with d_ij"), i.e. still multi-view, one RFF map per view.
    Run three ways: ``RFFKernelPowerKMeans(10)`` on the view list [pix, fac] (one RFF map and
    bandwidth per view, view weights fixed at 1/2: the public estimator has no eq. 31), the
    exact ablation (same, plus the entropy-regularised view weights of eq. 31 with the
    multi-view default lambda; a bench-local subclass, see ``PlainMultiKernel``), and on the
    two views concatenated into one 456-feature view (one RFF map, one bandwidth);
  - RFF-KPKM on pix alone;
  - ``MultipleKernelClustering(10)`` on [pix, fac], default kernels, all 2000 points as
    landmarks.
  Paper numbers (HW2, mean of 20 runs): IP-RFF-MKPKM ACC 90.15 / NMI 81.56, RFF-MKPKM ACC 83.00.
* ``kmeans_on_rff_features``: scikit-learn k-means (n_init=10) on the RFF features of the
  fitted IP-RFF-MKPKM (its own start is k-means on those features): what the power-mean
  iterations add.
* ``sensitivity``: IP-RFF-MKPKM for n_components D in {default = ceil(4 ln^3(2k)) = 108, 2x, 4x}
  x ``scale`` in {None (default), "standard", "minmax"}.
* ``investigation``: why the defaults are below the paper: s0 grid x scale, lambda grid,
  bandwidth rule, the baselines with feature scaling, and the best IP setting found (highest
  mean ACC over all IP configurations run; chosen on the labels, as the paper's grid search).

``seeds``: how much the seed decides.  ACC mean / std / min / max over ``--seeds`` seeds on
``SEED_SETS`` (mfeat HW2 = pix + fac as above, and the shared multi-view files hw2sources,
uci_digit3, scene15, mnist4, wikipedia, ccv; k = their number of classes) for the settings
"mv defaults" (``MultiViewRFFPowerKMeans(k)``), "mv scale='standard'", "mv
restart_selection='objective'" (keep the lowest-objective restart), "mv n_init=1" (one
run, no restart), "mv n_init=1 scale='standard'" (one run each: the scaling's effect at a
tenth of the cost) and "plain defaults" (``RFFKernelPowerKMeans(k)`` on the view list).

``scale``: workload W1 of ``bench_pipeline.py`` (its Zarr input, its ``w1_input``), two
workers x 1 thread on ``LocalCluster(host="127.0.0.1")``, a fresh cluster per estimator (peak
worker RSS is over the worker's life, as ``bench_pipeline.worker_peak_rss``).  For
``MultiViewRFFPowerKMeans(10, random_state=0)`` and ``MultipleKernelClustering(10,
n_landmarks=1000, random_state=0)`` (default kernels): ``fit`` on the lazy Zarr-backed views
(read from disk on every pass, nothing persisted), then ``predict(views).compute()``; wall
times, scores against the generating clusters, peak RSS per worker and of this (client)
process, and the Dask tasks the fit ran (per key prefix and per worker: the map-reduce check).
``--variants`` adds, on the same setup, IP-RFF-MKPKM with the paper's fixed lambda = 100 (eq. 31
sums view costs over N points, so a fixed lambda turns the view weights into a hard one-view
choice at large N; the default lam="auto" = 0.05 N keeps mfeat's lambda per point) and
RFF-MKPKM with view weights 1/2.

One BLAS thread per process (as bench_pipeline.py).  Timings are single runs on a shared
2-core machine (``load_avg_*``): read them as orders of magnitude.  Run from the repo root or
from ``bench/``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings
from collections import Counter

# One BLAS thread per process: two workers on two cores must not oversubscribe.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from _common import emit, load_mfeat, load_multiview, machine, multiview_sets, timed  # noqa: E402
from sklearn.cluster import KMeans  # noqa: E402

from mkdist import (  # noqa: E402
    MultipleKernelClustering,  # noqa: E402
    MultiViewRFFPowerKMeans,
    RFFKernelPowerKMeans,
)
from mkdist.internals import default_n_components  # noqa: E402
from mkdist.metrics import ari, clustering_accuracy, nmi  # noqa: E402

K = 10
PAPER_HW2 = {"IP-RFF-MKPKM": {"acc": 0.9015, "nmi": 0.8156},
             "RFF-MKPKM": {"acc": 0.8300},
             "note": "seed Table 1 / Table 2, HW2 (2000 x 240/216, 10 classes), mean of 20 runs, "
                     "lambda and s0 tuned per dataset on a grid, sigma = 1000"}


class PlainMultiKernel(RFFKernelPowerKMeans):
    """The paper's RFF-MKPKM ablation: IP-RFF-MKPKM with d~ replaced by d.

    ``RFFKernelPowerKMeans`` on a view list keeps the view weights at 1/L; this subclass turns
    on the eq. 31 update (entropy-regularised softmax, ``lam``) through the base class's
    resolved parameters (private hook, bench only).
    """

    def __init__(self, n_clusters=8, *, lam=100.0, **kwargs):
        super().__init__(n_clusters, **kwargs)
        self.lam = lam

    @classmethod
    def _get_param_names(cls):
        return sorted(set(RFFKernelPowerKMeans._get_param_names()) | {"lam"})

    def _check_params_vs_input(self, n_samples, views):
        return {**super()._check_params_vs_input(n_samples, views), "lam": float(self.lam)}


# ----------------------------------------------------------------------------- mfeat
def stats(xs) -> dict:
    xs = np.asarray(xs, dtype=float)
    return {"mean": float(xs.mean()), "std": float(xs.std()), "min": float(xs.min()), "max": float(xs.max())}


def evaluate(make, X, y, seeds, extra=None) -> dict:
    """Fit ``make(seed)`` on X for every seed: score stats, fit time, per-seed rows."""
    rows = []
    for s in seeds:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est, t = timed(make(s).fit, X)
        labels = np.asarray(est.labels_)
        row = {"seed": s, "acc": clustering_accuracy(y, labels), "nmi": nmi(y, labels),
               "ari": ari(y, labels), "fit_s": t, "n_warnings": len(caught)}
        if caught:
            row["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})
        if hasattr(est, "s0_"):  # the power k-means estimators
            row.update(n_iter=est.n_iter_, s0=est.s0_, s_final=est.s_,
                       view_weights=[float(a) for a in est.view_weights_],
                       bandwidths=[float(b) for b in est.bandwidths_],
                       converged=bool(est.diagnostics_["converged"]),
                       n_reseeded=int(est.diagnostics_["n_reseeded"]))
        elif hasattr(est, "kernel_weights_"):
            row.update(n_iter=int(est.n_iter_))
        if extra is not None:
            row.update(extra(est, s))
        rows.append(row)
    out = {k: stats([r[k] for r in rows]) for k in ("acc", "nmi", "ari")}
    out["fit_s"] = {"median": float(np.median([r["fit_s"] for r in rows])),
                    "mean": float(np.mean([r["fit_s"] for r in rows]))}
    if "view_weights" in rows[0]:
        out["view_weights_mean"] = np.mean([r["view_weights"] for r in rows], axis=0).tolist()
        out["n_iter_median"] = float(np.median([r["n_iter"] for r in rows]))
        out["s0_median"] = float(np.median([r["s0"] for r in rows]))
        out["n_converged"] = int(sum(r["converged"] for r in rows))
    out["n_warnings"] = int(sum(r["n_warnings"] for r in rows))
    out["per_seed"] = rows
    return out


def brief(res: dict) -> dict:
    """The summary of an ``evaluate`` result without the per-seed rows."""
    return {k: v for k, v in res.items() if k != "per_seed"}


def part_mfeat(args) -> dict:
    views, y = load_mfeat()
    pix, fac = views[3], views[1]
    mv = [pix, fac]
    concat = np.hstack(mv)
    seeds = list(range(args.seeds))
    D0 = default_n_components(K)
    out = {
        "data": "UCI mfeat.npz, 2000 points, 10 classes; views [view3 = pix (240 features), view1 = fac "
                "(216 features)] = the paper's HW2 (240/216); raw features (no scaling unless stated)",
        "seeds": seeds, "paper_hw2": PAPER_HW2,
        "feature_std_range": {"pix": [float(pix.std(0).min()), float(pix.std(0).max())],
                              "fac": [float(fac.std(0).min()), float(fac.std(0).max())]},
    }

    # Warm-up (imports, thread pools) so the first timed fit is not penalised.
    MultiViewRFFPowerKMeans(K, random_state=0).fit(mv)

    cache: dict = {}

    def ip(**kw):
        """IP-RFF-MKPKM with parameters ``kw`` over all seeds (memoised)."""
        key = tuple(sorted((k, repr(v)) for k, v in kw.items()))
        if key not in cache:
            res = evaluate(lambda s: MultiViewRFFPowerKMeans(K, random_state=s, **kw), mv, y, seeds)
            cache[key] = (dict(kw), res)
            print(f"[mfeat] IP {kw}: acc {res['acc']['mean']:.3f}", file=sys.stderr, flush=True)
        return cache[key][1]

    head = {}
    head["IP-RFF-MKPKM [pix, fac]"] = ip()
    head["RFF-MKPKM [pix, fac], alpha fixed 1/2 (RFFKernelPowerKMeans on the view list)"] = evaluate(
        lambda s: RFFKernelPowerKMeans(K, random_state=s), mv, y, seeds)
    head["RFF-MKPKM [pix, fac], alpha by eq. 31, lambda 100 (paper's ablation, bench subclass)"] = evaluate(
        lambda s: PlainMultiKernel(K, random_state=s), mv, y, seeds)
    head["RFF-KPKM on concatenated [pix | fac] (456 features, one RFF map)"] = evaluate(
        lambda s: RFFKernelPowerKMeans(K, random_state=s), concat, y, seeds)
    head["RFF-KPKM on pix"] = evaluate(lambda s: RFFKernelPowerKMeans(K, random_state=s), pix, y, seeds)
    if not args.quick:
        head["MultipleKernelClustering [pix, fac], default kernels, n_landmarks=2000"] = evaluate(
            lambda s: MultipleKernelClustering(K, n_landmarks=2000, random_state=s), mv, y, seeds)
    print("[mfeat] headline done", file=sys.stderr, flush=True)
    out["headline"] = head
    out["headline_table"] = [
        {"method": name, "acc": r["acc"]["mean"], "acc_std": r["acc"]["std"], "nmi": r["nmi"]["mean"],
         "ari": r["ari"]["mean"], "fit_s_median": r["fit_s"]["median"]} for name, r in head.items()]

    # What the power-mean iterations add over k-means on the same RFF features.
    km = {}
    for scale in () if args.quick else (None, "standard"):
        rows = []
        for s in seeds:
            est = MultiViewRFFPowerKMeans(K, random_state=s, scale=scale).fit(mv)
            Z = np.hstack(est.rff_features(mv))
            lab = KMeans(K, n_init=10, random_state=s).fit(Z).labels_
            rows.append({"seed": s, "acc": clustering_accuracy(y, lab), "nmi": nmi(y, lab),
                         "ip_acc": clustering_accuracy(y, est.labels_)})
        km[f"scale={scale}"] = {"kmeans_acc": stats([r["acc"] for r in rows]),
                                "kmeans_nmi": stats([r["nmi"] for r in rows]),
                                "ip_rff_mkpkm_acc": stats([r["ip_acc"] for r in rows]), "per_seed": rows}
    out["kmeans_on_rff_features"] = km

    # Sensitivity the paper exposes: D (Theorem 3 / appendix B.1) and the feature scaling.
    sens = []
    for scale in (None, "standard", "minmax"):
        for D in (None, 2 * D0, 4 * D0):
            kw = {} if scale is None else {"scale": scale}
            if D is not None:
                kw["n_components"] = D
            sens.append({"n_components": D or D0, "scale": scale, **brief(ip(**kw))})
    out["sensitivity"] = sens

    # Investigation: s0 x scale, lambda, bandwidth rule; baselines with scaling.
    inv = {}
    # --quick: only the power k-means rows of the RESULTS tables (headline, D x scale, baselines).
    s0_grid = [] if args.quick else ["auto", -1.0, -2.0, -3.0, -4.0, -6.0, -15.0]
    inv["s0_x_scale"] = [
        {"scale": scale, "s0": s0,
         **{k: v for k, v in brief(ip(**({} if scale is None else {"scale": scale}),
                                      **({} if s0 == "auto" else {"s0": s0}))).items()
            if k in ("acc", "nmi", "fit_s", "s0_median", "n_iter_median", "view_weights_mean", "n_warnings")}}
        for scale in (None, "standard", "minmax") for s0 in s0_grid]
    inv["lambda_x_scale"] = [
        {"scale": scale, "lam": lam,
         **{k: v for k, v in brief(ip(**({} if scale is None else {"scale": scale}),
                                      **({} if lam == 100.0 else {"lam": lam}))).items()
            if k in ("acc", "nmi", "view_weights_mean", "n_warnings")}}
        for scale in (None, "standard") for lam in (() if args.quick else (0.1, 1.0, 10.0, 100.0, 1000.0))]
    inv["bandwidth_rule"] = [
        {"scale": scale, "bandwidth": bw,
         **{k: v for k, v in brief(ip(**({} if scale is None else {"scale": scale}),
                                      **({} if bw == "median" else {"bandwidth": bw}))).items()
            if k in ("acc", "nmi", "n_warnings")}}
        for scale in (None, "standard") for bw in (() if args.quick else ("median", "mean"))]
    print("[mfeat] IP grids done", file=sys.stderr, flush=True)
    base = {}
    for scale in ("standard", "minmax"):
        base[f"RFF-MKPKM [pix, fac] alpha 1/2, scale={scale}"] = brief(evaluate(
            lambda s, scale=scale: RFFKernelPowerKMeans(K, random_state=s, scale=scale), mv, y, seeds))
        base[f"RFF-MKPKM [pix, fac] eq. 31, scale={scale}"] = brief(evaluate(
            lambda s, scale=scale: PlainMultiKernel(K, random_state=s, scale=scale), mv, y, seeds))
        base[f"RFF-KPKM concatenated, scale={scale}"] = brief(evaluate(
            lambda s, scale=scale: RFFKernelPowerKMeans(K, random_state=s, scale=scale), concat, y, seeds))
        base[f"RFF-KPKM pix, scale={scale}"] = brief(evaluate(
            lambda s, scale=scale: RFFKernelPowerKMeans(K, random_state=s, scale=scale), pix, y, seeds))
    inv["baselines_with_scaling"] = {k: {m: v[m] for m in ("acc", "nmi", "fit_s")} for k, v in base.items()}

    results = list(cache.values())
    best_kw, best = max(results, key=lambda kr: kr[1]["acc"]["mean"])
    default = head["IP-RFF-MKPKM [pix, fac]"]
    std_default = ip(scale="standard")
    inv["best_ip_setting"] = {"params": best_kw, "n_configs_searched": len(results),
                              **{k: best[k] for k in ("acc", "nmi", "ari", "fit_s", "view_weights_mean")}}
    inv["summary"] = {
        "default_acc": default["acc"]["mean"],
        "scale_standard_acc": std_default["acc"]["mean"],
        "best_acc": best["acc"]["mean"],
        "paper_acc": PAPER_HW2["IP-RFF-MKPKM"]["acc"],
        "default_bandwidths_mean": np.mean([r["bandwidths"] for r in default["per_seed"]], axis=0).tolist(),
        "standard_bandwidths_mean": np.mean([r["bandwidths"] for r in std_default["per_seed"]], axis=0).tolist(),
        "reading": "Compare s0_x_scale rows at fixed scale (s0 effect) with rows at fixed s0 (scaling "
                   "effect): fac features have standard deviations spanning two orders of magnitude "
                   "(feature_std_range), so on raw features a few fac features set its distances and "
                   "its median bandwidth; per-feature standardisation is what moves the accuracy, "
                   "while D, s0 and lambda move it less (see the grids).",
    }
    out["investigation"] = inv
    return out


# ----------------------------------------------------------------------------- seeds
#: The multi-view sets of ``--part seeds``: mfeat's HW2 pair and the shared multi-view files
#: with dense, not-too-wide views (n from 2,000 to 6,773, 2-3 views, k from 4 to 20).
SEED_SETS = ("mfeat-hw2", "hw2sources", "uci_digit3", "scene15", "mnist4", "wikipedia", "ccv")


def load_views(name: str):
    """The views (list of float64 arrays) and labels of a ``SEED_SETS`` entry."""
    if name == "mfeat-hw2":
        views, y = load_mfeat()
        return [views[3], views[1]], y
    views, y = load_multiview(multiview_sets()[name])
    return [np.asarray(v, dtype=np.float64) for v in views], y


def part_seeds(args) -> dict:
    """Mean / std of ACC over seeds: MultiViewRFFPowerKMeans with its defaults, standardised,
    with one run (``n_init=1``, no restart), with the other restart selections;
    RFFKernelPowerKMeans with its defaults and with the agreement selection."""
    seeds = list(range(args.seeds))
    names = args.data.split(",") if args.data else list(SEED_SETS)
    settings = {
        "mv defaults": lambda k, s: MultiViewRFFPowerKMeans(k, random_state=s),
        "mv scale='standard'": lambda k, s: MultiViewRFFPowerKMeans(k, scale="standard", random_state=s),
        "mv restart_selection='objective'": lambda k, s: MultiViewRFFPowerKMeans(
            k, restart_selection="objective", random_state=s),
        "mv restart_selection='agreement'": lambda k, s: MultiViewRFFPowerKMeans(
            k, restart_selection="agreement", random_state=s),
        "plain restart_selection='agreement'": lambda k, s: RFFKernelPowerKMeans(
            k, restart_selection="agreement", random_state=s),
        "mv n_init=1": lambda k, s: MultiViewRFFPowerKMeans(k, n_init=1, random_state=s),
        "mv n_init=1 scale='standard'": lambda k, s: MultiViewRFFPowerKMeans(k, n_init=1, scale="standard",
                                                                             random_state=s),
        "plain defaults": lambda k, s: RFFKernelPowerKMeans(k, random_state=s),
    }
    chosen = args.settings.split(",") if args.settings else list(settings)
    out = {"seeds": seeds, "settings": chosen, "data": {}}
    for name in names:
        X, y = load_views(name)
        k = int(y.max()) + 1
        res = {"n": int(len(y)), "k": k, "view_dims": [int(v.shape[1]) for v in X]}
        for setting in chosen:
            r = evaluate(lambda s, setting=setting, k=k: settings[setting](k, s), X, y, seeds)
            res[setting] = {"acc_mean": r["acc"]["mean"], "acc_std": r["acc"]["std"],
                            "acc_min": r["acc"]["min"], "acc_max": r["acc"]["max"],
                            "nmi_mean": r["nmi"]["mean"], "fit_s_median": r["fit_s"]["median"],
                            "acc_per_seed": [round(row["acc"], 4) for row in r["per_seed"]]}
            print(f"[seeds] {name} {setting}: acc {r['acc']['mean']:.3f} ({r['acc']['std']:.3f})",
                  file=sys.stderr, flush=True)
        out["data"][name] = res
    out["table"] = [{"data": name, "setting": setting, "acc_mean": round(v[setting]["acc_mean"], 3),
                     "acc_std": round(v[setting]["acc_std"], 3)}
                    for name, v in out["data"].items() for setting in chosen]
    return out


# ----------------------------------------------------------------------------- timing
#: The shared multi-view sets whose default power k-means fits were the slowest (issue 15:
#: leaves100 K = 100, ccv N = 6773 K = 20) and the two the seeds table measures.
TIMING_SETS = ("leaves100", "ccv", "hw2sources", "mfeat-hw2")


def part_timing(args) -> dict:
    """Fit time of both estimators' defaults (issue 15: < 60 s on every shared set), with the
    number of restarts and start inits they chose, the stage timings and the load."""
    seeds = list(range(args.seeds))
    names = args.data.split(",") if args.data else list(TIMING_SETS)
    out = {"seeds": seeds, "data": {}}
    for name in names:
        X, y = load_views(name)
        k = int(y.max()) + 1
        res = {"n": int(len(y)), "k": k, "view_dims": [int(v.shape[1]) for v in X]}
        for cls in (RFFKernelPowerKMeans, MultiViewRFFPowerKMeans):
            load = os.getloadavg()[0]
            r = evaluate(lambda s, cls=cls, k=k: cls(k, random_state=s), X, y, seeds, extra=lambda est, s: {
                "n_init": est.n_init_, "start_n_init": est.diagnostics_["restarts"]["start_n_init"],
                "timings": est.diagnostics_["timings"]})
            res[cls.__name__] = {"fit_s_max": max(row["fit_s"] for row in r["per_seed"]),
                                 "fit_s_median": r["fit_s"]["median"], "acc_mean": r["acc"]["mean"],
                                 "nmi_mean": r["nmi"]["mean"], "load_avg_1min_before": load,
                                 "per_seed": [{key: row[key] for key in
                                               ("seed", "acc", "fit_s", "n_init", "start_n_init", "timings")}
                                              for row in r["per_seed"]]}
            print(f"[timing] {name} {cls.__name__}: fit {res[cls.__name__]['fit_s_max']:.1f} s "
                  f"acc {r['acc']['mean']:.3f} (load {load:.1f})", file=sys.stderr, flush=True)
        out["data"][name] = res
    out["max_fit_s"] = max(v[c]["fit_s_max"] for v in out["data"].values()
                           for c in ("RFFKernelPowerKMeans", "MultiViewRFFPowerKMeans"))
    return out


# ----------------------------------------------------------------------------- scale
def task_summary(records) -> dict:
    from dask.utils import key_split

    prefixes = Counter(key_split(r["key"]) for r in records)
    workers = Counter(r["worker"] for r in records)
    return {"n_tasks": len(records), "by_prefix": dict(prefixes.most_common()), "by_worker": dict(workers),
            "note": "Dask fuses each row chunk's Zarr read, the block function and the first sum into "
                    "one task named after its last op ('sum'); 'sum-aggregate' is the tree reduction, "
                    "'finalize-*' one per compute() call (one per iteration for the power k-means fit)"}


def run_dask(make, src, y) -> dict:
    import xarray as xr
    from bench_pipeline import worker_peak_rss
    from distributed import Client, LocalCluster, get_task_stream

    from mkdist.internals import is_dask_array

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=":0", memory_limit="8GiB")
    client = Client(cluster)
    try:
        ds = xr.open_zarr(src, consolidated=False)
        views = [ds["view0"].data, ds["view1"].data]
        est = make()
        with warnings.catch_warnings(record=True) as caught, get_task_stream(client) as ts:
            warnings.simplefilter("always")
            est, fit_s = timed(est.fit, views)
        fit_tasks = task_summary(ts.data)
        labels_lazy = is_dask_array(est.labels_)
        labels, predict_s = timed(lambda: np.asarray(est.predict(views).compute()))
        peaks = worker_peak_rss(client)
    finally:
        client.close()
        cluster.close()
    out = {"estimator": repr(est), "fit_s": fit_s, "predict_s": predict_s, "fit_plus_predict_s": fit_s + predict_s,
           "acc": clustering_accuracy(y, labels), "nmi": nmi(y, labels), "ari": ari(y, labels),
           "worker_peak_rss_gib": peaks, "max_worker_peak_rss_gib": max(peaks.values()),
           "labels_attr_is_lazy_dask": bool(labels_lazy), "fit_tasks": fit_tasks,
           "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})}
    if hasattr(est, "s0_"):
        out.update(n_iter=est.n_iter_, s0=est.s0_, s_final=est.s_, converged=bool(est.diagnostics_["converged"]),
                   view_weights=[float(a) for a in est.view_weights_],
                   bandwidths=[float(b) for b in est.bandwidths_], n_components=est.n_components_,
                   timings=est.diagnostics_["timings"],
                   restarts={key: est.diagnostics_["restarts"][key]
                             for key in ("rows", "selection", "best", "n_iter", "agreement", "final_objective")})
    else:
        out.update(n_iter=int(est.n_iter_), timings=est.diagnostics_["timings"])
    return out


def part_scale(args) -> dict:
    import xarray as xr
    from bench_pipeline import w1_input

    src = w1_input(args.n)
    ds = xr.open_zarr(src, consolidated=False)
    y = ds["y"].values
    out = {"N": args.n, "input": str(src), "chunks_rows": list(ds["view0"].data.chunks[0][:1]),
           "views": {k: list(ds[k].shape) for k in ("view0", "view1")},
           "cluster": "LocalCluster(n_workers=2, threads_per_worker=1, host=127.0.0.1), fresh per estimator; "
                      "views passed as lazy Zarr-backed Dask arrays (not persisted)"}
    out["ip_rff_mkpkm"] = run_dask(lambda: MultiViewRFFPowerKMeans(K, random_state=0), src, y)
    print("[scale] rff done", file=sys.stderr, flush=True)
    out["mkc"] = run_dask(lambda: MultipleKernelClustering(K, n_landmarks=1000, random_state=0), src, y)
    if args.variants:
        # eq. 31 sums the view costs over all N points, so a fixed lambda selects one view
        # ever harder as N grows; the default lam="auto" (0.05 N) keeps the paper's lambda
        # per point, the variant is the paper's fixed lambda = 100.
        out["variants"] = {
            "IP-RFF-MKPKM lam=100 (the paper's fixed value)": run_dask(
                lambda: MultiViewRFFPowerKMeans(K, lam=100.0, random_state=0), src, y),
            "RFF-MKPKM alpha fixed 1/2 (RFFKernelPowerKMeans on the two views)": run_dask(
                lambda: RFFKernelPowerKMeans(K, random_state=0), src, y)}
    out["client_peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30, 3)
    out["ratio_fit_plus_predict_rff_over_mkc"] = (out["ip_rff_mkpkm"]["fit_plus_predict_s"]
                                                  / out["mkc"]["fit_plus_predict_s"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True, choices=["mfeat", "seeds", "scale", "timing"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true",
                    help="mfeat: skip MKC, k-means on the RFF features and the s0 / lambda / bandwidth grids")
    ap.add_argument("--data", default="",
                    help="seeds / timing: comma-separated sets (default: SEED_SETS / TIMING_SETS)")
    ap.add_argument("--settings", default="", help="seeds: comma-separated settings (default: all)")
    ap.add_argument("--variants", action="store_true",
                    help="scale: also IP-RFF-MKPKM with lambda scaled to N and RFF-MKPKM with alpha 1/2")
    args = ap.parse_args()
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    result = globals()[f"part_{args.part}"](args)
    emit({"bench": f"power_kmeans/{args.part}", "machine": machine(), "load_avg_start": load_start,
          **result, "load_avg_end": os.getloadavg(), "total_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
