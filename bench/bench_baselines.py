"""mkdist against what users try first, on the same rows (issue 41): one table, printed as JSON.

    python bench/bench_baselines.py [--sets shared,sklearn,w1] [--datasets a,b] [--seeds 3]
                                    [--methods mkdist,auto,...] [--tag NAME] [--timeout 300]
                                    [--noise] [--markdown]

Data sets: the 28 shared sets (``shared/data/multiview`` and UCI mfeat), scikit-learn's iris,
wine, breast_cancer and digits (one view each), and W1 at 200k rows (``make_multiview_blobs``,
two 32-feature views, 10 overlapping clusters).  True K, seeds 0..``--seeds``-1.

Columns (``--methods``):

* ``mkdist``: ``MultipleKernelClustering(K)`` with every default (what ``mkdist.cluster`` runs);
* ``auto``: ``method="auto"`` (``mkdist.choose_method``), and ``mkc``, ``nystrom``,
  ``rff-power``, ``mv-rff-power``, ``late-fusion``: every method with its defaults
  (single-view methods get the standardised concatenation, what their refusal tells a user);
* the baselines, all on the ``StandardScaler``-ed concatenation of the views:
  ``kmeans`` (``KMeans(n_init=10)``), ``gmm`` (``GaussianMixture``: full covariances up to
  64 columns, diagonal ones above, where full ones are singular on n < d rows), ``spectral``
  (``SpectralClustering(affinity="nearest_neighbors")``) and ``ward``
  (``AgglomerativeClustering(linkage="ward")``); spectral and ward are O(n^2) and run up to
  ``BIG_N`` rows only.

``--noise``: the noise-view study instead: wine's 13 columns as two views (7 + 6) and
``make_multiview_blobs`` (5,000 rows), each with and without a third view of 10 columns of
N(0, 1); prints the noise kernels' weight share and each method's ACC with and without it.

Every fit runs in a forked child (one BLAS thread) with a hard ``--timeout``.  Records are
appended to ``bench/out/baselines/<tag>.jsonl`` (baselines to ``baselines.jsonl``, which no
mkdist change invalidates); cells already there are skipped, so a run resumes, and a new
``--tag`` re-measures the mkdist columns only.

Summary (``summary``): over every data set where both columns ran, mkdist's mean ACC against
standardised k-means (``beats``: strictly higher; ``worst_gap``: the largest deficit), and the
share of sets where it is within 0.02 of the best baseline; ``auto`` against the best single
mkdist method.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import OUT, emit, load_multiview, machine, multiview_sets, read_jsonl, run_forked  # noqa: E402

RESULTS_DIR = OUT / "baselines"
BASELINES = ("kmeans", "gmm", "spectral", "ward")
MKDIST_METHODS = ("mkc", "nystrom", "rff-power", "mv-rff-power", "late-fusion")
DEFAULT_METHODS = ("mkdist", "auto", *MKDIST_METHODS, *BASELINES)
#: spectral clustering and Ward need n x n memory or a k-NN graph eigensolve: above this, not run.
BIG_N = 20_000
#: GaussianMixture with full covariances up to this many columns (diagonal above).
GMM_FULL_MAX_DIM = 64
W1_N = 200_000
SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")


def dataset_names(sets: list[str]) -> list[str]:
    names = []
    if "shared" in sets:
        names += list(multiview_sets())
    if "sklearn" in sets:
        names += list(SKLEARN_SETS)
    if "w1" in sets:
        names.append("w1-200k")
    return names


def load_dataset(name: str) -> tuple[list[np.ndarray], np.ndarray]:
    if name in SKLEARN_SETS:
        import sklearn.datasets as skd

        X, y = getattr(skd, f"load_{name}")(return_X_y=True)
        return [np.asarray(X, dtype=np.float64)], np.asarray(y)
    if name == "w1-200k":
        from mkdist.datasets import make_multiview_blobs

        views, y = make_multiview_blobs(W1_N, random_state=0, view_dims=(32, 32), as_dask=False)
        return list(views.values()), np.asarray(y)
    return load_multiview(multiview_sets()[name])


def noise_sets() -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """The noise-view study's inputs: name -> (views, y), each with and without a noise view."""
    import sklearn.datasets as skd

    from mkdist.datasets import make_multiview_blobs

    X, y = skd.load_wine(return_X_y=True)
    wine = [X[:, :7], X[:, 7:]]
    views, yb = make_multiview_blobs(5000, random_state=0, as_dask=False)
    blobs = [np.asarray(v) for v in views.values()]
    out = {}
    for name, vs, labels in (("wine2", wine, y), ("blobs5k", blobs, np.asarray(yb))):
        noise = np.random.default_rng(12345).standard_normal((labels.shape[0], 10)).astype(vs[0].dtype)
        out[name] = (vs, labels)
        out[f"{name}+noise"] = (vs + [noise], labels)
    return out


def describe(views, y) -> dict:
    return {"n": int(y.shape[0]), "views": len(views), "dims": [int(v.shape[1]) for v in views],
            "K": int(np.unique(y).size)}


def standardized_concat(views) -> np.ndarray:
    from sklearn.preprocessing import StandardScaler

    return StandardScaler().fit_transform(np.hstack([np.asarray(v, dtype=np.float64) for v in views]))


def fit_one(method: str, views, K: int, seed: int) -> tuple[np.ndarray, dict]:
    """Labels of one column on one data set, and facts to record beside them."""
    import mkdist

    extra: dict = {}
    n = views[0].shape[0]
    if method in BASELINES:
        X = standardized_concat(views)
        if method in ("spectral", "ward") and n > BIG_N:
            raise _NotRun(f"n = {n} > {BIG_N}: O(n^2)")
        if method == "kmeans":
            from sklearn.cluster import KMeans

            return KMeans(K, n_init=10, random_state=seed).fit(X).labels_, extra
        if method == "gmm":
            from sklearn.mixture import GaussianMixture

            cov = "full" if X.shape[1] <= GMM_FULL_MAX_DIM else "diag"
            extra["covariance_type"] = cov
            return GaussianMixture(K, covariance_type=cov, random_state=seed, reg_covar=1e-4).fit_predict(X), extra
        if method == "spectral":
            from sklearn.cluster import SpectralClustering

            return SpectralClustering(K, affinity="nearest_neighbors", random_state=seed).fit(X).labels_, extra
        from sklearn.cluster import AgglomerativeClustering

        return AgglomerativeClustering(K, linkage="ward").fit(X).labels_, extra
    if method == "mkdist":
        est = mkdist.MultipleKernelClustering(K, random_state=seed)
    elif method == "auto":
        choice = mkdist.choose_method(views, K)
        extra["auto"] = {"method": choice.method, "params": choice.params}
        est = choice.make_estimator(K, random_state=seed)
    else:
        est = mkdist.get_method(method)(K, random_state=seed)
    X = views if type(est).multi_view else [standardized_concat(views)]
    est.fit(X)
    if hasattr(est, "kernel_weights_"):
        w2 = np.asarray(est.kernel_weights_, dtype=np.float64) ** 2
        names = [k.name for k in est.kernels_]
        extra["weight_share_by_view"] = {}
        for name, w in zip(names, w2 / w2.sum()):
            view = name.split(":")[0]
            extra["weight_share_by_view"][view] = extra["weight_share_by_view"].get(view, 0.0) + float(w)
    return np.asarray(est.labels_), extra


class _NotRun(Exception):
    pass


def _child(conn, method, views, y, seed):
    from mkdist.errors import MkdistError
    from mkdist.metrics import clustering_scores

    rec: dict = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            labels, extra = fit_one(method, views, int(np.unique(y).size), seed)
            rec["fit_s"] = time.perf_counter() - t0
        rec.update(status="ok", **clustering_scores(y, labels), **extra)
    except _NotRun as exc:
        rec = {"status": "not-run", "error": str(exc)}
    except MkdistError as exc:
        rec = {"status": "refused", "error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # noqa: BLE001 - recorded: the table says which cell failed and why
        rec = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc(limit=6)[-3000:]}
    conn.send(rec)
    conn.close()


def _path(method: str, tag: str):
    return RESULTS_DIR / ("baselines.jsonl" if method in BASELINES else f"{tag}.jsonl")


def run(datasets: list[str], methods: list[str], seeds: int, tag: str, timeout: float, loader=load_dataset) -> None:
    import mkdist  # noqa: F401 - imported once, before the children fork

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    done = {(r["dataset"], r["method"], r["seed"]) for m in methods for r in read_jsonl(_path(m, tag))}
    for ds in datasets:
        todo = [(m, s) for m in methods for s in range(seeds) if (ds, m, s) not in done]
        if not todo:
            continue
        views, y = loader(ds)
        info = describe(views, y)
        stopped: set[str] = set()
        for method, seed in todo:
            if method in stopped:
                rec = {"status": "not-run", "error": "an earlier seed did not finish"}
            else:
                rec = run_forked(_child, (method, views, y, seed), timeout)
                if rec["status"] in ("timeout", "not-run"):
                    stopped.add(method)
            rec.update(dataset=ds, method=method, seed=seed, **info)
            with _path(method, tag).open("a") as f:
                f.write(json.dumps(rec, default=float) + "\n")
            print(f"{ds:18s} {method:14s} seed {seed}: {rec['status']:8s} acc={rec.get('acc', float('nan')):.3f} "
                  f"nmi={rec.get('nmi', float('nan')):.3f} fit={rec.get('fit_s', float('nan')):.1f}s",
                  file=sys.stderr, flush=True)


def cells(records: list[dict], seeds: int) -> dict[tuple[str, str], dict]:
    """(dataset, method) -> mean ACC / NMI over the seeds, median fit time; None where a seed failed."""
    by: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if r["seed"] < seeds:
            by.setdefault((r["dataset"], r["method"]), []).append(r)
    out = {}
    for key, rs in by.items():
        ok = [r for r in rs if r["status"] == "ok"]
        if len(ok) < len(rs) or not ok:
            out[key] = {"status": next(r["status"] for r in rs if r["status"] != "ok"),
                        "error": next(r.get("error") for r in rs if r["status"] != "ok")}
            continue
        cell = {"status": "ok", "seeds": len(ok), "fit_s": float(np.median([r["fit_s"] for r in ok]))}
        for k in ("acc", "nmi"):
            v = np.array([r[k] for r in ok])
            cell[k], cell[f"{k}_min"] = float(v.mean()), float(v.min())
        if "weight_share_by_view" in ok[0]:
            views = ok[0]["weight_share_by_view"]
            cell["weight_share_by_view"] = {v: float(np.mean([r["weight_share_by_view"].get(v, 0.0) for r in ok]))
                                            for v in views}
        if "auto" in ok[0]:
            cell["auto"] = ok[0]["auto"]["method"]
        out[key] = cell
    return out


def _acc(c, key):
    cell = c.get(key)
    return cell["acc"] if cell and cell["status"] == "ok" else None


def summary(c: dict, datasets: list[str]) -> dict:
    """mkdist against standardised k-means and the best baseline; auto against the best mkdist method."""
    vs_kmeans, vs_best, auto_vs = [], [], []
    for ds in datasets:
        mk, km = _acc(c, (ds, "mkdist")), _acc(c, (ds, "kmeans"))
        if mk is not None and km is not None:
            vs_kmeans.append((ds, mk - km))
        base = [a for a in (_acc(c, (ds, b)) for b in BASELINES) if a is not None]
        if mk is not None and base:
            vs_best.append((ds, mk - max(base)))
        auto = _acc(c, (ds, "auto"))
        singles = [a for a in (_acc(c, (ds, m)) for m in MKDIST_METHODS) if a is not None]
        if auto is not None and singles:
            auto_vs.append((ds, auto - max(singles)))
    out = {}
    if vs_kmeans:
        gaps = np.array([g for _, g in vs_kmeans])
        out["mkdist_vs_kmeans"] = {
            "sets": len(gaps), "beats": int((gaps > 0).sum()), "beats_share": float((gaps > 0).mean()),
            "ties_within_0.005": int((np.abs(gaps) <= 0.005).sum()),
            "worst_gap": float(gaps.min()), "worst_set": vs_kmeans[int(gaps.argmin())][0],
            "more_than_0.03_below": [ds for ds, g in vs_kmeans if g < -0.03], "mean_gap": float(gaps.mean())}
    if vs_best:
        gaps = np.array([g for _, g in vs_best])
        out["mkdist_vs_best_baseline"] = {
            "sets": len(gaps), "within_0.02": int((gaps >= -0.02).sum()),
            "within_0.02_share": float((gaps >= -0.02).mean()), "mean_gap": float(gaps.mean())}
    if auto_vs:
        gaps = np.array([g for _, g in auto_vs])
        out["auto_vs_best_single_method"] = {
            "sets": len(gaps), "at_least_as_good": int((gaps >= -0.005).sum()),
            "share": float((gaps >= -0.005).mean()), "mean_gap": float(gaps.mean())}
    return out


def markdown(c: dict, datasets: list[str], methods: list[str]) -> str:
    lines = ["| set | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for ds in datasets:
        row = []
        for m in methods:
            cell = c.get((ds, m))
            row.append("" if cell is None else (f"{cell['acc']:.3f} / {cell['nmi']:.3f}" if cell["status"] == "ok"
                                               else cell["status"]))
        lines.append(f"| {ds} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def noise_study(seeds: int, tag: str, timeout: float, methods: list[str]) -> dict:
    sets = noise_sets()
    names = list(sets)
    run(names, methods, seeds, f"{tag}-noise", timeout, loader=lambda ds: sets[ds])
    recs = [r for m in methods for r in read_jsonl(_path(m, f"{tag}-noise"))]
    out = {}
    for base in ("wine2", "blobs5k"):
        row = {}
        for m in methods:
            per_seed = {}
            for r in recs:
                if r["method"] == m and r["seed"] < seeds and r["dataset"] in (base, f"{base}+noise"):
                    per_seed.setdefault(r["seed"], {})[r["dataset"]] = r
            moves, shares = [], []
            for _seed, pair in sorted(per_seed.items()):
                if len(pair) == 2 and all(p["status"] == "ok" for p in pair.values()):
                    moves.append(pair[f"{base}+noise"]["acc"] - pair[base]["acc"])
                    share = pair[f"{base}+noise"].get("weight_share_by_view", {})
                    if share:
                        shares.append(share.get("view2", 0.0))
            row[m] = {"acc_move_per_seed": moves,
                      "worst_acc_move": float(max(moves, key=abs)) if moves else float("nan"),
                      **({"noise_weight_share_per_seed": shares, "max_noise_share": float(max(shares))}
                         if shares else {})}
        out[base] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="shared,sklearn,w1")
    ap.add_argument("--datasets", default=None, help="comma-separated subset of the sets' data sets")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tag", default="current")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--noise", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    methods = args.methods.split(",")
    if args.noise:
        emit({"bench": "baselines-noise", "machine": machine(),
              "noise": noise_study(args.seeds, args.tag, args.timeout, [m for m in methods if m in
                                                                        ("mkdist", "kmeans", "auto", "mkc")])})
        return
    datasets = args.datasets.split(",") if args.datasets else dataset_names(args.sets.split(","))
    run(datasets, methods, args.seeds, args.tag, args.timeout)
    recs = [r for m in set(methods) for r in read_jsonl(_path(m, args.tag))]
    recs = [r for r in recs if r["dataset"] in datasets]
    # one path per method group: a method's records read once
    seen, uniq = set(), []
    for r in recs:
        key = (r["dataset"], r["method"], r["seed"])
        if key not in seen:
            seen.add(key)
            uniq.append(r)
    c = cells(uniq, args.seeds)
    if args.markdown:
        print(markdown(c, datasets, methods))
        print(json.dumps(summary(c, datasets), indent=1))
        return
    emit({"bench": "baselines", "machine": machine(), "tag": args.tag, "seeds": args.seeds,
          "summary": summary(c, datasets),
          "cells": {f"{ds}/{m}": cell for (ds, m), cell in sorted(c.items()) if m in methods}})


if __name__ == "__main__":
    main()
