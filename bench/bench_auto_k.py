"""Choosing K from the landmark spectrum (issue 25): ``mkdist.internals.choose_n_clusters``
against spectralcluster's eigengap and silhouette selection.

    python bench/bench_auto_k.py --part sets      [--datasets a,b] [--seeds 5] [--tag NAME] [--only-ours]
    python bench/bench_auto_k.py --part synthetic [--n 10000] [--seeds 5] [--tag NAME]
    python bench/bench_auto_k.py --part cost      [--n 100000] [--only-ours]
    python bench/bench_auto_k.py --part overhead  [--n 1000000]  (mkdist.cluster, auto vs K given)
    python bench/bench_auto_k.py --part explore   [--seeds 5]   (the variants tried, no fits)
    python bench/bench_auto_k.py --part sets|synthetic --markdown   (tables from stored records)

Per (data set, seed), the landmarks and their preprocessed kernel stack are exactly what
``MultipleKernelClustering(kernels="auto", random_state=seed)`` builds (default landmark
count min(N, 1000)); the K range is [2, min(50, n // 10)].  Columns:

* ``ours``: ``choose_n_clusters`` on the uniform-weight combined kernel (the default);
* ``ours-learned``: SimpleMKKM fitted at ``ours``' K on the same stack, then
  ``choose_n_clusters`` again on the learned combination (the chicken-and-egg check);
* ``sc-affinity``: spectralcluster 0.2.22's eigengap rule as ``SpectralClusterer`` applies it
  with its defaults (no AutoTune, no refinement): ``utils.compute_number_of_clusters`` on the
  descending eigenvalues of the affinity (ratio gap, ``stop_eigenvalue=1e-2``,
  ``max_clusters=k_max``), then ``max(k, min_clusters)``; the affinity is ours (the kNN graph
  of the combined landmark kernel).  Eigenvalues come from ``scipy.linalg.eigh`` (the
  affinity is symmetric; the library calls ``np.linalg.eig``: same values);
* ``sc-graphcut``: the same with ``laplacian_type=GraphCut`` (ratio of consecutive
  eigenvalues of the normalised Laplacian, ascending);
* ``silhouette``: scikit-learn ``KMeans(k, n_init=1)`` on the min-max-scaled concatenation of
  the views (projected on its top ``SIL_DIMS`` = 100 truncated-SVD components when it has
  more features: the text sets) for every k in the range, the k of the largest
  ``silhouette_score`` (on all rows when N <= ``SIL_ROWS`` = 3000, else its documented
  ``sample_size=SIL_ROWS``, seeded).  Real sets: run for seed 0, its K reused for the others.

Then the estimator of ``method="auto"`` (``mkdist.choose_method``) is fitted on all rows with
every distinct K (true K, and each column's) in a forked child, and ACC/NMI recorded.
Records are appended to ``bench/out/auto_k/<tag>-<part>.jsonl`` (an interrupted run resumes).
Prints JSON (the summary; ``--markdown``: the tables of bench/RESULTS.md).
"""

from __future__ import annotations

import os

# One BLAS thread (set before NumPy loads): the machine is shared, children inherit it.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import OUT, emit, load_multiview, machine, multiview_sets, read_jsonl, run_forked  # noqa: E402

RESULTS_DIR = OUT / "auto_k"
#: Rows above which the silhouette is computed on a seeded sample of this many rows.
SIL_ROWS = 3000
#: Features above which KMeans/silhouette run on this many truncated-SVD components (text views:
#: the sweep on ACM's 14,000 raw features ran > 20 min for one seed on this shared machine).
SIL_DIMS = 100
COLUMNS = ("ours", "ours-learned", "sc-affinity", "sc-graphcut", "silhouette")


# ============================================================================ inputs
def landmark_stack(views: list, seed: int):
    """(preprocessed kernel stack (m, n, n), landmark indices, seconds) as the MKC fit builds them."""
    from mkdist import default_n_landmarks
    from mkdist.internals import (
        fit_kernels,
        fit_preprocessing,
        landmark_kernels,
        resolve_kernel_specs,
        sample_landmark_indices,
    )

    t0 = time.perf_counter()
    named = {f"view{i}": v for i, v in enumerate(views)}
    n = default_n_landmarks(views[0].shape[0])
    idx = sample_landmark_indices(named, n, random_state=seed)
    lv = {k: np.asarray(v[idx], dtype=np.float64) for k, v in named.items()}
    fitted = fit_kernels(resolve_kernel_specs("auto", list(lv), lv), lv, random_state=seed)
    stack, _ = fit_preprocessing(landmark_kernels(lv, fitted), True, "diagonal")
    return stack, idx, time.perf_counter() - t0


def minmax_concat(views) -> np.ndarray:
    """The min-max-scaled concatenation of the views (the ``kmeans`` baseline's input in bench_quality)."""
    X = np.hstack([np.asarray(v, dtype=np.float64) for v in views])
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (X - lo) / span


def synthetic(N: int, K: int, separation: float, seed: int):
    """W1-type data (``mkdist.datasets.make_multiview_blobs``, the generator behind ``w1_input``)."""
    from mkdist.datasets import make_multiview_blobs

    views, y = make_multiview_blobs(N, n_clusters=K, separation=separation, random_state=seed, as_dask=False,
                                    chunk_rows=min(N, 50_000))
    return [views[k] for k in sorted(views)], np.asarray(y)


# ============================================================================ the selectors
def timed_cpu(fn, *args, **kwargs):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w0, time.process_time() - c0


def spectralcluster_ks(stack: np.ndarray, k_min: int, k_max: int, n_neighbors: int) -> dict:
    """spectralcluster's eigengap rule (two Laplacian types) on our kNN affinity."""
    import scipy.linalg
    from spectralcluster import laplacian as sc_laplacian, utils as sc_utils

    from mkdist.internals import kernel_sq_distances, knn_graph

    A = knn_graph(kernel_sq_distances(stack.mean(axis=0)), n_neighbors).toarray()
    n = A.shape[0]
    out = {}
    t0 = time.process_time()
    vals = scipy.linalg.eigh(A, eigvals_only=True, subset_by_index=[n - k_max - 1, n - 1])[::-1]
    k, _ = sc_utils.compute_number_of_clusters(vals, max_clusters=k_max, stop_eigenvalue=1e-2,
                                               eigengap_type=sc_utils.EigenGapType.Ratio, descend=True)
    out["sc-affinity"] = {"n_clusters": int(max(k, k_min)), "cpu_s": time.process_time() - t0}
    t0 = time.process_time()
    L = sc_laplacian.compute_laplacian(A, laplacian_type=sc_laplacian.LaplacianType.GraphCut)
    vals = scipy.linalg.eigh((L + L.T) / 2, eigvals_only=True, subset_by_index=[0, k_max])
    k, _ = sc_utils.compute_number_of_clusters(vals, max_clusters=k_max, eigengap_type=sc_utils.EigenGapType.Ratio,
                                               descend=False)
    out["sc-graphcut"] = {"n_clusters": int(max(k, k_min)), "cpu_s": time.process_time() - t0}
    return out


def silhouette_k(views, k_min: int, k_max: int, seed: int, sample_rows: int = SIL_ROWS) -> dict:
    """The k of the largest silhouette of KMeans over [k_min, k_max] (k >= 2)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    w0, c0 = time.perf_counter(), time.process_time()
    X = minmax_concat(views)
    d = X.shape[1]
    if d > SIL_DIMS:
        from sklearn.decomposition import TruncatedSVD

        X = TruncatedSVD(SIL_DIMS, random_state=seed).fit_transform(X)
    N = X.shape[0]
    sample = None if N <= sample_rows else sample_rows
    scores = {}
    for k in range(max(k_min, 2), k_max + 1):
        labels = KMeans(k, n_init=1, random_state=seed).fit(X).labels_
        scores[k] = float(silhouette_score(X, labels, sample_size=sample, random_state=seed)) \
            if np.unique(labels).size > 1 else -1.0
    best = max(scores, key=lambda k: scores[k])
    return {"n_clusters": int(best), "scores": scores, "wall_s": time.perf_counter() - w0,
            "cpu_s": time.process_time() - c0, "silhouette_rows": N if sample is None else sample,
            "features": int(X.shape[1]), "svd": d > SIL_DIMS}


def choose_all(views, y, seed: int, *, silhouette: dict | bool = True, only_ours: bool = False) -> dict:
    """Every column's K for one (data, seed), with timings (``only_ours``: the ``ours`` column alone)."""
    from mkdist import simple_mkkm
    from mkdist.internals import choose_n_clusters, default_k_max

    stack, _, t_stack = landmark_stack(views, seed)
    n = stack.shape[1]
    k_min, k_max = 2, max(default_k_max(n), 2)
    rec: dict = {"N": int(y.shape[0]), "n_landmarks": int(n), "m_kernels": int(stack.shape[0]),
                 "K": int(np.unique(y).size), "k_range": [k_min, k_max], "stack_s": t_stack}
    # The library's default range (k_max=None): since issue 36 it searches min(50, n // 15) and reads
    # to min(50, n // 10) on a clear gap, which an explicit k_max would switch off.
    ours, wall, cpu = timed_cpu(choose_n_clusters, stack, k_min=k_min, random_state=seed)
    rec["k_range"] = list(ours.k_range)
    d = ours.as_dict()
    d.pop("eigenvalues")
    rec["ours"] = {**d, "wall_s": wall, "cpu_s": cpu}
    if only_ours:
        return rec
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "did not converge": the weights are used as they are
        fit = simple_mkkm(stack, ours.n_clusters) if stack.shape[0] > 1 else None
    t_mkkm = time.perf_counter() - t0
    if fit is None:
        rec["ours-learned"] = {**{k: d[k] for k in ("n_clusters", "confidence", "ambiguous", "runner_up")},
                               "simplemkkm_s": 0.0, "note": "one kernel: the same choice"}
    else:
        learned = choose_n_clusters(stack, kernel_weights=fit.kernel_weights, k_min=k_min, k_max=k_max,
                                    random_state=seed)
        rec["ours-learned"] = {"n_clusters": learned.n_clusters, "confidence": learned.confidence,
                               "ambiguous": learned.ambiguous, "runner_up": learned.runner_up,
                               "simplemkkm_s": t_mkkm}
    rec.update(spectralcluster_ks(stack, k_min, k_max, ours.n_neighbors))
    del stack
    if isinstance(silhouette, dict):
        rec["silhouette"] = {**silhouette, "reused_from_seed": silhouette.get("seed", 0)}
    elif silhouette:
        rec["silhouette"] = {**silhouette_k(views, k_min, k_max, seed), "seed": seed}
    return rec


# ============================================================================ fits
def _fit_child(conn, views, y, K, seed):
    import mkdist
    from mkdist.metrics import clustering_scores

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            choice = mkdist.choose_method(views, K)
            est = choice.make_estimator(K, random_state=seed)
            t0 = time.perf_counter()
            est.fit(views)
            rec = {"status": "ok", "method": choice.method, "fit_s": time.perf_counter() - t0,
                   **clustering_scores(y, np.asarray(est.labels_))}
    except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
        rec = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=4)}
    conn.send(rec)
    conn.close()


def fit_scores(views, y, ks: set[int], seed: int, timeout: float) -> dict:
    out = {}
    for K in sorted(ks):
        rec = run_forked(_fit_child, (views, y, int(K), seed), timeout)
        out[str(K)] = {k: rec.get(k) for k in ("status", "method", "fit_s", "acc", "nmi", "error") if k in rec}
    return out


def ks_to_fit(rec: dict) -> set[int]:
    return {rec["K"], *(rec[c]["n_clusters"] for c in COLUMNS if c in rec)}


# ============================================================================ parts
def run_cases(cases, path, seeds: int, timeout: float, only_ours: bool = False) -> None:
    """``cases``: (name, loader) pairs; one record per (name, seed) appended to ``path``.

    The silhouette selection runs once per data set (seed 0) and its K is reused for the
    other seeds: its sweep of KMeans fits over the K range on all rows costs 1-20 min per
    data set on this shared machine (ACM's 14,000 text features), and only the KMeans
    initialisation depends on the seed (the landmarks do not enter it).
    """
    import mkdist  # noqa: F401 - imported once, before the children fork
    from mkdist.internals import blas_threads

    path.parent.mkdir(parents=True, exist_ok=True)
    records = read_jsonl(path)
    done = {(r["dataset"], r["seed"]) for r in records}
    for name, load in cases:
        todo = [s for s in range(seeds) if (name, s) not in done]
        if not todo:
            continue
        views, y = load()
        sil = next((r["silhouette"] for r in records if r["dataset"] == name and r["seed"] == 0), None)
        for seed in todo:
            with blas_threads(1):
                rec = choose_all(views, y, seed, silhouette=sil if sil is not None else True, only_ours=only_ours)
            if sil is None and not only_ours:
                sil = rec["silhouette"]
            rec.update(dataset=name, seed=seed)
            rec["fits"] = fit_scores(views, y, ks_to_fit(rec), seed, timeout)
            with path.open("a") as f:
                f.write(json.dumps(rec, default=float) + "\n")
            cols = " ".join(f"{c}={rec[c]['n_clusters']}" for c in COLUMNS if c in rec)
            print(f"{name:18s} seed {seed}: K={rec['K']:3d} {cols} conf={rec['ours']['confidence']:.2f}"
                  f"{' AMBIGUOUS' if rec['ours']['ambiguous'] else ''} choose={rec['ours']['cpu_s']:.2f}s cpu",
                  flush=True)


def run_synthetic(args, path) -> None:
    """Each (K, separation, seed) is its own data (the generator's seed is the run's seed)."""
    import mkdist  # noqa: F401
    from mkdist.internals import blas_threads

    path.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["dataset"], r["seed"]) for r in read_jsonl(path)}
    for sep in (1.0, 0.4):
        for K in (3, 5, 10, 20, 50):
            name = f"w1-K{K}-sep{sep}"
            for seed in range(args.seeds):
                if (name, seed) in done:
                    continue
                views, y = synthetic(args.n, K, sep, seed)
                with blas_threads(1):
                    rec = choose_all(views, y, seed, only_ours=args.only_ours)
                rec.update(dataset=name, seed=seed, separation=sep)
                rec["fits"] = fit_scores(views, y, ks_to_fit(rec), seed, args.timeout)
                with path.open("a") as f:
                    f.write(json.dumps(rec, default=float) + "\n")
                cols = " ".join(f"{c}={rec[c]['n_clusters']}" for c in COLUMNS if c in rec)
                print(f"{name:18s} seed {seed}: {cols} conf={rec['ours']['confidence']:.2f}", flush=True)


def run_cost(args) -> dict:
    """N rows of W1 (K = 10, separation 0.4): our choice vs silhouette selection, one core."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    from mkdist.internals import blas_threads, choose_n_clusters, default_k_max

    views, _ = synthetic(args.n, 10, 0.4, 0)
    out: dict = {"N": args.n, "machine": machine()}
    with blas_threads(1):
        (stack, _, _), wall, cpu = timed_cpu(landmark_stack, views, 0)
        n = stack.shape[1]
        k_max = default_k_max(n)
        choice, c_wall, c_cpu = timed_cpu(choose_n_clusters, stack, k_max=k_max, random_state=0)
        out["ours"] = {"landmark_stack_wall_s": wall, "landmark_stack_cpu_s": cpu,
                       "choose_wall_s": c_wall, "choose_cpu_s": c_cpu, "n_clusters": choice.n_clusters,
                       "confidence": choice.confidence, "ambiguous": choice.ambiguous,
                       "note": "the landmark stack is computed by every fit anyway; the choice is the added cost"}
        del stack
        if args.only_ours:  # the silhouette sweep does not depend on the rule: its recorded cost stands
            return out
        X = minmax_concat(views)
        ks = range(2, k_max + 1)
        km_cpu = sil_cpu = 0.0
        scores = {}
        labels_10 = None
        w0 = time.perf_counter()
        for k in ks:
            labels, _, c = timed_cpu(lambda k=k: KMeans(k, n_init=1, random_state=0).fit(X).labels_)
            km_cpu += c
            s, _, c = timed_cpu(silhouette_score, X, labels, sample_size=args.sil_sample, random_state=0)
            sil_cpu += c
            scores[k] = float(s)
            if k == 10:
                labels_10 = labels
        sweep_wall = time.perf_counter() - w0
        out["silhouette_sampled"] = {"sample_size": args.sil_sample, "kmeans_cpu_s": km_cpu,
                                     "silhouette_cpu_s": sil_cpu, "total_cpu_s": km_cpu + sil_cpu,
                                     "wall_s": sweep_wall, "n_clusters": max(scores, key=scores.get),
                                     "k_values": len(ks)}
        # silhouette_score on all N rows (O(N^2) distances) for one k, and the sweep it implies.
        _, w, c = timed_cpu(silhouette_score, X, labels_10)
        out["silhouette_all_rows_one_k"] = {"k": 10, "wall_s": w, "cpu_s": c}
        out["silhouette_all_rows_sweep_cpu_s_estimate"] = km_cpu + c * len(ks)
    ours_cpu = out["ours"]["choose_cpu_s"]
    out["ratio_sampled_vs_ours"] = out["silhouette_sampled"]["total_cpu_s"] / ours_cpu
    out["ratio_all_rows_vs_ours"] = out["silhouette_all_rows_sweep_cpu_s_estimate"] / ours_cpu
    out["ours_share_of_12s_1M_run"] = ours_cpu / 12.0
    return out


def run_overhead(args) -> dict:
    """W1 at N rows through ``mkdist.cluster`` (``_common.run_pipeline``: a fresh 2-worker
    cluster, end to end from Zarr), once with ``n_clusters="auto"`` and once with K = 10 given,
    alternating order is not attempted (one run each: the 1M run takes minutes on this shared
    machine).  The overhead of "auto" is measured two ways: the end-to-end difference (noisy:
    the machine is shared) and the K choice's own seconds recorded by the fit
    (``choose_k_s``), against the run's end-to-end time.  With K given, the model stage runs the
    rule once for the report's hint (``k_hint_s``)."""
    import json as _json

    from _common import run_pipeline

    from mkdist.storage import RunStore

    out: dict = {"N": args.n, "machine": machine()}
    for label, k in (("auto", "auto"), ("given", 10)):
        store = RESULTS_DIR / f"overhead-{label}.zarr"
        rec = run_pipeline(args.n, store, n_clusters=k)
        model = RunStore.open(str(store), mode="r").read_stage("model")
        timings = _json.loads(model.attrs["timings"]) if isinstance(model.attrs["timings"], str) \
            else dict(model.attrs["timings"])
        # With K given, the rule no longer runs in the fit (the report computes its hint on
        # demand): no choice is stored.
        raw_choice = model.attrs.get("n_clusters_choice")
        choice = (_json.loads(raw_choice) if isinstance(raw_choice, str) else raw_choice) or {}
        out[label] = {"end_to_end_s": rec["end_to_end_s"], "stages": rec["stages"], "model_timings": timings,
                      "n_clusters": int(model.attrs["n_clusters"]), "scores": rec["scores"],
                      "choice": {key: choice.get(key) for key in ("n_clusters", "confidence", "runner_up",
                                                                  "ambiguous", "chosen_by_fit")}}
        print(label, _json.dumps(out[label], default=float), flush=True)
    choose = out["auto"]["model_timings"].get("choose_k_s", float("nan"))
    out["choose_k_share_of_auto_run"] = choose / out["auto"]["end_to_end_s"]
    out["end_to_end_difference_share"] = (out["auto"]["end_to_end_s"] - out["given"]["end_to_end_s"]) \
        / out["given"]["end_to_end_s"]
    hint = out["given"]["model_timings"].get("k_hint_s", float("nan"))
    out["hint_share_of_given_run"] = hint / out["given"]["end_to_end_s"]
    return out


# ============================================================================ exploration
def explore_variants(Kc: np.ndarray, k_max: int) -> dict[str, int]:
    """Plain picks (largest gap in [2, k_max]) of the affinity / gap variants that were tried."""
    import scipy.linalg

    from mkdist.internals import kernel_sq_distances, knn_graph

    n = Kc.shape[0]
    D2 = kernel_sq_distances(Kc)
    finite = np.where(np.isfinite(D2), D2, 0.0)
    srt = np.sort(np.where(np.isfinite(D2), D2, np.inf), axis=1)

    def spectrum(A):
        deg = np.maximum(A.sum(axis=1), 1e-300)
        r = 1.0 / np.sqrt(deg)
        S = A * r[:, None] * r[None, :]
        return scipy.linalg.eigh(S, eigvals_only=True, subset_by_index=[n - k_max - 1, n - 1])[::-1]

    def pick(mu, kind="gap"):
        lam = np.clip(1.0 - mu, 0.0, None)
        if kind == "gap":
            s = mu[1:k_max] - mu[2:k_max + 1]                         # k = 2..k_max
        else:                                                         # ratio of Laplacian eigenvalues
            s = (lam[2:k_max + 1] + 1e-9) / (lam[1:k_max] + 1e-9)
        return int(np.argmax(s)) + 2

    out = {}
    kernel = np.clip(Kc, 0.0, None)
    np.fill_diagonal(kernel, 0.0)
    vals = scipy.linalg.eigh(Kc, eigvals_only=True, subset_by_index=[n - k_max - 1, n - 1])[::-1]
    out["kernel-eigs-ratio (the report's)"] = int(np.argmax(vals[1:k_max] / np.maximum(vals[2:k_max + 1], 1e-300))) + 2
    out["D^-1/2 K+ D^-1/2, gap"] = pick(spectrum(kernel))
    gauss = np.exp(-finite / finite.mean())
    np.fill_diagonal(gauss, 0.0)
    out["dense Gaussian (mean d^2), gap"] = pick(spectrum(gauss))
    s7 = np.sqrt(np.maximum(srt[:, min(7, n - 1) - 1], 1e-300))
    st = np.exp(-finite / (s7[:, None] * s7[None, :]))
    np.fill_diagonal(st, 0.0)
    mu_st = spectrum(st)
    out["self-tuning (ZP, 7th nb), gap"] = pick(mu_st)
    out["self-tuning (ZP, 7th nb), ratio"] = pick(mu_st, "ratio")
    for k in (5, 10, 20, max(5, round(np.sqrt(n) / 2))):
        mu = spectrum(knn_graph(D2, k).toarray())
        label = "sqrt(n)/2" if k == max(5, round(np.sqrt(n) / 2)) and k not in (5, 10, 20) else str(k)
        out[f"kNN {label}, gap"] = pick(mu)
        if k == 10:
            out["kNN 10, ratio"] = pick(mu, "ratio")
    return out


def run_explore(args) -> dict:
    from mkdist.internals import blas_threads, choose_n_clusters, default_k_max

    rows = []
    cases = [(name, (lambda p=path: load_multiview(p))) for name, path in multiview_sets().items()]
    cases += [(f"w1-K{K}-sep{sep}", (lambda K=K, sep=sep: None)) for sep in (1.0, 0.4) for K in (3, 5, 10, 20, 50)]
    for name, load in cases:
        for seed in range(args.seeds):
            if name.startswith("w1-"):
                K, sep = int(name.split("-K")[1].split("-")[0]), float(name.split("sep")[1])
                views, y = synthetic(args.n, K, sep, seed)
            else:
                views, y = load()
            with blas_threads(1):
                stack, _, _ = landmark_stack(views, seed)
                n = stack.shape[1]
                k_max = max(default_k_max(n), 2)
                Kc = stack.mean(axis=0)
                picks = explore_variants(Kc, k_max)
                for sub in (0.5, 0.8):
                    c = choose_n_clusters(Kc, k_max=k_max, subsample=sub, random_state=seed)
                    picks[f"ours, subsample {sub}"] = c.n_clusters
                    picks[f"ours, subsample {sub}: exact-or-ambiguous-runner-up"] = (
                        c.runner_up if c.ambiguous else c.n_clusters)
            rows.append({"dataset": name, "seed": seed, "K": int(np.unique(y).size), "picks": picks})
            print(f"{name:18s} seed {seed}: K={rows[-1]['K']:3d} " +
                  " ".join(f"{v}" for v in picks.values()), flush=True)
    variants = list(rows[0]["picks"])
    summary = {}
    for group, sel in (("real", lambda r: not r["dataset"].startswith("w1-")),
                       ("synthetic separated", lambda r: r["dataset"].endswith("sep1.0")),
                       ("synthetic W1 (sep 0.4)", lambda r: r["dataset"].endswith("sep0.4"))):
        rs = [r for r in rows if sel(r)]
        summary[group] = {v: {"exact": sum(r["picks"][v] == r["K"] for r in rs), "of": len(rs)} for v in variants
                          if not v.endswith("runner-up")}
        for sub in (0.5, 0.8):
            key = f"ours, subsample {sub}"
            summary[group][key]["exact_or_ambiguous_with_runner_up"] = sum(
                r["picks"][key] == r["K"] or r["picks"][f"{key}: exact-or-ambiguous-runner-up"] == r["K"] for r in rs)
    return {"part": "explore", "seeds": args.seeds, "summary": summary, "rows": rows}


# ============================================================================ summaries
def _exact(rec, col):
    return rec[col]["n_clusters"] == rec["K"]


def summarise(records: list[dict]) -> dict:
    """Per column: exact / +-1 / 20% counts (over data set x seed), ambiguity, and ACC/NMI."""
    out: dict = {"cells": len(records)}
    for col in COLUMNS:
        rs = [r for r in records if col in r]
        if not rs:
            continue
        s = {"n": len(rs), "exact": sum(_exact(r, col) for r in rs),
             "within_1": sum(abs(r[col]["n_clusters"] - r["K"]) <= 1 for r in rs),
             "within_20pct": sum(abs(r[col]["n_clusters"] - r["K"]) <= 0.2 * r["K"] for r in rs)}
        if "ambiguous" in rs[0][col]:
            amb = [r for r in rs if r[col]["ambiguous"]]
            s["ambiguous"] = len(amb)
            s["ambiguous_true_K_runner_up"] = sum(r[col]["runner_up"] == r["K"] for r in amb)
            s["exact_or_ambiguous_runner_up"] = sum(
                _exact(r, col) or (r[col]["ambiguous"] and r[col]["runner_up"] == r["K"]) for r in rs)
            conf = [r for r in rs if not r[col]["ambiguous"]]
            s["not_ambiguous_exact"] = f"{sum(_exact(r, col) for r in conf)}/{len(conf)}"
        acc, nmi, acc_t, nmi_t = [], [], [], []
        for r in rs:
            f, t = r["fits"].get(str(r[col]["n_clusters"]), {}), r["fits"].get(str(r["K"]), {})
            if f.get("status") == "ok" and t.get("status") == "ok":
                acc.append(f["acc"]), nmi.append(f["nmi"]), acc_t.append(t["acc"]), nmi_t.append(t["nmi"])
        if acc:
            s.update(acc=float(np.mean(acc)), nmi=float(np.mean(nmi)), acc_true_K=float(np.mean(acc_t)),
                     nmi_true_K=float(np.mean(nmi_t)), nmi_ratio=float(np.mean(nmi) / np.mean(nmi_t)),
                     fits_compared=len(acc))
        out[col] = s
    # Per data set: a column is "exact" on a set when its K is exact on the majority of seeds.
    by_set: dict = {}
    for r in records:
        by_set.setdefault(r["dataset"], []).append(r)
    sets = {}
    for col in COLUMNS:
        ok = exact = 0
        for rs in by_set.values():
            if col not in rs[0]:
                continue
            exact += sum(_exact(r, col) for r in rs) * 2 > len(rs)
            if "ambiguous" in rs[0][col]:
                ok += sum(_exact(r, col) or (r[col]["ambiguous"] and r[col]["runner_up"] == r["K"])
                          for r in rs) * 2 > len(rs)
        sets[col] = {"sets": len(by_set), "exact_majority_of_seeds": exact}
        if col in ("ours", "ours-learned") and ok:
            sets[col]["exact_or_ambiguous_runner_up_majority"] = ok
    out["per_data_set"] = sets
    times = [r["ours"]["cpu_s"] for r in records]
    out["ours_cpu_s"] = {"median": float(np.median(times)), "max": float(np.max(times))}
    sil = [r["silhouette"]["cpu_s"] for r in records if "silhouette" in r]
    if sil:
        out["silhouette_cpu_s"] = {"median": float(np.median(sil)), "max": float(np.max(sil))}
    return out


def markdown(records: list[dict]) -> str:
    by_set: dict = {}
    for r in records:
        by_set.setdefault(r["dataset"], []).append(r)
    head = ("| data set | n | K | ours: K per seed (confidence) | ours-learned | sc-affinity | sc-graphcut | "
            "silhouette | NMI ours / true K | NMI sc-aff. / sil. |")
    lines = [head, "|" + "---|" * 10]
    for name, rs in by_set.items():
        rs = sorted(rs, key=lambda r: r["seed"])

        def ks(col, rs=rs):
            return ",".join(str(r[col]["n_clusters"]) for r in rs) if col in rs[0] else ""

        ours = ", ".join(f"{r['ours']['n_clusters']}{'?' if r['ours']['ambiguous'] else ''} "
                         f"({r['ours']['confidence']:.2f})" for r in rs)

        def nmi(col, rs=rs):
            v = [r["fits"].get(str(r[col]["n_clusters"]), {}).get("nmi") for r in rs if col in r]
            v = [x for x in v if x is not None]
            return f"{np.mean(v):.3f}" if v else "-"

        true = [r["fits"].get(str(r["K"]), {}).get("nmi") for r in rs]
        true = [x for x in true if x is not None]
        lines.append(f"| {name} | {rs[0]['N']} | {rs[0]['K']} | {ours} | {ks('ours-learned')} | {ks('sc-affinity')} | "
                     f"{ks('sc-graphcut')} | {ks('silhouette')} | {nmi('ours')} / {np.mean(true):.3f} | "
                     f"{nmi('sc-affinity')} / {nmi('silhouette')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("sets", "synthetic", "cost", "overhead", "explore"), required=True)
    ap.add_argument("--datasets", default="all")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--n", type=int, default=None, help="rows: synthetic 10000, cost 100000, explore 10000")
    ap.add_argument("--sil-sample", type=int, default=10_000, help="cost part: silhouette_score sample_size")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--tag", default="current")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only-ours", action="store_true",
                    help="sets/synthetic: the ours column alone (no ours-learned, spectralcluster, silhouette), "
                         "so fits run only at the true K and ours' K")
    args = ap.parse_args()
    if args.n is None:
        args.n = {"cost": 100_000, "overhead": 1_000_000}.get(args.part, 10_000)
    if args.part == "cost":
        emit({"part": "cost", **run_cost(args)})
        return
    if args.part == "overhead":
        emit({"part": "overhead", **run_overhead(args)})
        return
    if args.part == "explore":
        res = run_explore(args)
        path = RESULTS_DIR / f"{args.tag}-explore.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, default=float))
        emit({k: v for k, v in res.items() if k != "rows"})
        return
    path = RESULTS_DIR / f"{args.tag}-{args.part}.jsonl"
    if not args.markdown:
        if args.part == "sets":
            sets = multiview_sets()
            names = list(sets) if args.datasets == "all" else args.datasets.split(",")
            run_cases([(nm, (lambda p=sets[nm]: load_multiview(p))) for nm in names], path, args.seeds, args.timeout,
                      args.only_ours)
        else:
            run_synthetic(args, path)
    records = read_jsonl(path)
    if args.markdown:
        print(markdown(records))
        return
    emit({"part": args.part, "tag": args.tag, "machine": machine(), "summary": summarise(records)})


if __name__ == "__main__":
    main()
