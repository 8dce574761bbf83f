"""A K you can trust (issue 36): how often a choice that is not flagged ambiguous is exact.

    python bench/bench_auto_k_trust.py --part evidence   # the rule's evidence per cell (~5 min, resumes)
    python bench/bench_auto_k_trust.py --part calibrate  # calibration tables from the stored evidence (seconds)
    python bench/bench_auto_k_trust.py --part small      # small tables: ours vs HDBSCAN vs a silhouette sweep (fits)
    python bench/bench_auto_k_trust.py --part kmeans-cost [--n 200000] [--runs 3]
        # mkdist.cluster's k-means with the estimator's defaults (10 restarts, 300 iterations) against
        # the former run defaults (3, 100), W1 in memory, alternated runs

Cells (every one a data set x seed, choices on the uniform combined landmark kernel exactly as
``MultipleKernelClustering(kernels="auto", random_state=seed)`` builds it, K range from the
library's defaults):

* ``shared``: the 28 shared multi-view sets x seeds 0-4 (bench_auto_k_screen's cache);
* ``w1-sep1.0`` / ``w1-sep0.4``: W1-type data (``bench_auto_k.synthetic(10000, K, separation,
  seed)``), K in 3, 5, 10, 20, 50, seeds 0-4 (the same cache); separation 1.0 is the separated
  family that must stay exact and unflagged;
* ``small``: standardised tables shipped with scikit-learn and palmerpenguins (iris 150 rows, wine
  178, penguins 333, breast cancer 569, digits 1797), 300-row W1 samples (K = 3, 5, 10,
  separation 1.0) and 200-row random samples of mfeat (K = 10, 20 rows per class), seeds 0-4.

``--part evidence`` stores, per cell, what the rule reads off the landmark graph
(``mkdist.internals.Evidence``: the spectra at the three neighbourhood sizes and of the
resamples, the modularity and coverage curves) for the widest K range the rule may read, so that
``--part calibrate`` can replay decisions on it: ``mkdist.internals.decide`` (the library's
decision, whatever the checkout holds) and the variants below.  Rows:
``bench/out/auto_k_trust/evidence-<graph>.jsonl`` (``--graph library``: the checkout's graph and
range; ``--graph round4``: the fourth round's, k_max = min(50, n // 10) and its neighbours).

Calibration: per confidence bin, the choices' count, the share that are exact (K = the labels'
K) and the share more than twice the labels' K, for the choices not flagged ambiguous and for all;
on every cell, on the "choose" half and on the "report" half (split by data set: every other
shared set in name order, the other half of the W1 Ks and of the small tables, so that no set
is in both halves).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from _common import OUT, emit, machine, read_jsonl  # noqa: E402

HERE = OUT / "auto_k_trust"
CACHE = HERE / "cache"
SCREEN_CACHE = OUT / "auto_k_screen" / "cache"
SEEDS = 5
SMALL_W1 = (3, 5, 10)


# ============================================================================ cells
def _standardised(X):
    X = np.asarray(X, dtype=np.float64)
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def small_tables() -> dict:
    """name -> (loader of (views, y)) for the small tables."""
    from sklearn import datasets

    def sk(fn):
        def load():
            X, y = fn(return_X_y=True)
            return [_standardised(X)], np.asarray(y)
        return load

    def penguins():
        from palmerpenguins import load_penguins

        d = load_penguins().dropna(subset=["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"])
        X = d[["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]].to_numpy(float)
        return [_standardised(X)], d["species"].astype("category").cat.codes.to_numpy()

    return {"iris": sk(datasets.load_iris), "wine": sk(datasets.load_wine), "penguins": penguins,
            "breast_cancer": sk(datasets.load_breast_cancer), "digits": sk(datasets.load_digits)}


def small_cell(name: str, seed: int):
    """(views, y) of a small cell: a table, a 300-row W1 sample or a 200-row mfeat sample."""
    from _common import load_mfeat
    from bench_auto_k import synthetic

    if name.startswith("w1small-K"):
        return synthetic(300, int(name.split("K")[1]), 1.0, seed)
    if name == "mfeat200":
        views, y = load_mfeat()
        idx = np.sort(np.random.default_rng(seed).choice(y.size, 200, replace=False))
        return [v[idx] for v in views], y[idx]
    return small_tables()[name]()


SMALL = ("iris", "wine", "penguins", "breast_cancer", "digits", *(f"w1small-K{k}" for k in SMALL_W1), "mfeat200")


def build_cache() -> None:
    """The small cells' landmark kernels (the shared and W1 cells are bench_auto_k_screen's)."""
    from bench_auto_k import landmark_stack

    from mkdist.internals import blas_threads

    if not any(SCREEN_CACHE.glob("*.npz")):
        raise SystemExit("run `python bench/bench_auto_k_screen.py --round cache` first (the shared and W1 cells)")
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in SMALL:
        for seed in range(SEEDS):
            f = CACHE / f"{name}__{seed}.npz"
            if f.exists():
                continue
            views, y = small_cell(name, seed)
            with blas_threads(1):
                stack, idx, _ = landmark_stack(views, seed)
            np.savez(f, Kc=stack.mean(axis=0), y=np.asarray(y)[idx], K=np.unique(y).size)


def family(name: str) -> str:
    """shared, small, w1-sep1.0 or w1-sep0.4 (``name``: a cell's data set)."""
    if name.startswith("w1-"):
        return "w1-" + name.split("-")[-1]
    return "small" if name in SMALL else "shared"


def cells():
    for f in sorted(SCREEN_CACHE.glob("*.npz")) + sorted(CACHE.glob("*.npz")):
        name, seed = f.stem.rsplit("__", 1)
        yield name, int(seed), f


# ============================================================================ evidence
def evidence_of(Kc: np.ndarray, seed: int, graph: str) -> tuple[dict, dict]:
    """(the evidence for the widest range the rule reads, the library's settings) on one kernel."""
    from mkdist import internals as nc

    n = Kc.shape[0]
    if graph == "round4":
        k_max = max(min(nc.K_MAX_CAP, n // 10), 2)
        nn = max(5, min(round(np.sqrt(n) / 2), n // (2 * k_max)))
    else:
        k_max, nn = nc.default_search(n, 2)[1:]
    K = nc.combined_kernel(Kc, None)
    ev = nc.evidence(K, 2, k_max, nn, 10, 0.8, seed)
    return ev.as_dict(), {"k_max": k_max, "n_neighbors": nn}


def run_evidence(graph: str) -> None:
    from mkdist.internals import blas_threads

    build_cache()
    path = HERE / f"evidence-{graph}.jsonl"
    done = {(r["dataset"], r["seed"]) for r in read_jsonl(path)}
    for name, seed, f in cells():
        if (name, seed) in done:
            continue
        d = np.load(f)
        if graph == "round4" and d["Kc"].shape[0] >= 750:
            continue   # the same graph and range as the library's at 750 landmarks and more
        c0 = time.process_time()
        with blas_threads(1):
            ev, settings = evidence_of(d["Kc"], seed, graph)
        row = {"dataset": name, "seed": seed, "family": family(name), "K": int(d["K"]),
               "n": int(d["Kc"].shape[0]), "cpu_s": time.process_time() - c0, "settings": settings, "evidence": ev}
        with path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{name:18s} {seed} K={row['K']:3d} n={row['n']} {row['cpu_s']:.2f}s", flush=True)


def load_rows(graph: str) -> list[dict]:
    """The stored evidence rows of a graph (round4: the library's rows at >= 750 landmarks)."""
    rows = [{**r, "family": family(r["dataset"])}
            for r in map(json.loads, (HERE / f"evidence-{graph}.jsonl").read_text().splitlines())]
    if graph == "round4":
        rows += [r for r in load_rows("library") if r["n"] >= 750]
    return sorted(rows, key=lambda r: (r["family"], r["dataset"], r["seed"]))


# ============================================================================ calibration
def half(row: dict) -> str:
    """"choose" or "report": every other shared set in name order, W1 K in (3, 10, 50) against (5, 20),
    every other small table in ``SMALL``'s order; all seeds of a data set in the same half."""
    name, fam = row["dataset"], row["family"]
    if fam == "shared":
        names = sorted({r for r in _SHARED_NAMES})
        return "choose" if names.index(name) % 2 == 0 else "report"
    if fam.startswith("w1-"):
        return "choose" if int(name.split("-K")[1].split("-")[0]) in (3, 10, 50) else "report"
    return "choose" if SMALL.index(name) % 2 == 0 else "report"


_SHARED_NAMES: set = set()


def replay(rows: list[dict], graph: str) -> list[dict]:
    """The library's choice on every row's evidence (``graph``: the graph and range it was read
    with; round4 rows are decided on the fourth round's range, and its confidence and ambiguity are
    the fourth round's: the votes, ambiguous below 1/2 or when modularity chose)."""
    from mkdist import internals as nc

    out = []
    for r in rows:
        ev = nc.Evidence.from_dict(r["evidence"])
        if graph == "round4":
            c = nc.decide(ev, nc.TRUSTED_CONFIDENCE)
            conf, amb = c.votes, c.votes < 0.5 or c.criterion == "modularity"
        else:
            c = nc.decide_range(ev, nc.TRUSTED_CONFIDENCE, nc.default_search(r["n"], 2)[0])
            conf, amb = c.confidence, c.ambiguous
        out.append({"dataset": r["dataset"], "seed": r["seed"], "family": r["family"], "K": r["K"], "n": r["n"],
                    "k": c.n_clusters, "confidence": conf, "ambiguous": bool(amb), "evidence": c.evidence,
                    "k_range": list(c.k_range), "half": half(r)})
    return out


def _stats(cs: list[dict]) -> dict:
    n = len(cs)
    return {"count": n, "exact": sum(c["k"] == c["K"] for c in cs),
            "exact_share": round(sum(c["k"] == c["K"] for c in cs) / n, 3) if n else None,
            "over_2x": sum(c["k"] > 2 * c["K"] for c in cs)}


def calibration(cs: list[dict], bins=(0.0, 0.25, 0.5, 0.75, 0.9, 1.0001)) -> dict:
    """Per confidence bin: count, exact share, choices > 2x the labels' K; then the non-ambiguous."""
    table = {}
    for lo, hi in zip(bins[:-1], bins[1:]):
        table[f"[{lo:.2f}, {min(hi, 1.0):.2f}{']' if hi > 1 else ')'}"] = _stats(
            [c for c in cs if lo <= c["confidence"] < hi])
    return {"bins": table, "not_ambiguous": _stats([c for c in cs if not c["ambiguous"]]),
            "ambiguous": _stats([c for c in cs if c["ambiguous"]]), "all": _stats(cs)}


def run_calibrate() -> dict:
    from mkdist import internals as nc

    result: dict = {"part": "calibrate", "library_evidence_confidence": nc.EVIDENCE_CONFIDENCE,
                    "clear_gap_coverage": nc.CLEAR_GAP_COVERAGE, "min_votes": nc.MIN_VOTES}
    for graph in ("round4", "library"):
        rows = load_rows(graph)
        _SHARED_NAMES.update(r["dataset"] for r in rows if r["family"] == "shared")
        cs = replay(rows, graph)
        res: dict = {"cells": len(cs)}
        for part in ("choose", "report", "all"):
            sel = [c for c in cs if part == "all" or c["half"] == part]
            res[part] = calibration(sel)
            res[part]["by_family"] = {f: {"not_ambiguous": _stats([c for c in sel if c["family"] == f
                                                                   and not c["ambiguous"]]),
                                          "all": _stats([c for c in sel if c["family"] == f])}
                                      for f in ("shared", "small", "w1-sep1.0", "w1-sep0.4")}
            res[part]["by_evidence"] = {e: _stats([c for c in sel if c["evidence"] == e])
                                        for e in nc.EVIDENCE_CONFIDENCE}
        sep = [c for c in cs if c["family"] == "w1-sep1.0"]
        res["separated_exact_and_unflagged"] = sum(c["k"] == c["K"] and not c["ambiguous"] for c in sep)
        res["separated_exact"] = sum(c["k"] == c["K"] for c in sep)
        res["per_set"] = {}
        for c in cs:
            res["per_set"].setdefault(f"{c['dataset']} (K={c['K']}, n={c['n']})", []).append(
                f"{c['k']}{'?' if c['ambiguous'] else ''} ({c['confidence']:.2f})")
        result[graph] = res
    # The confidence each kind of evidence earns on the choose half (what the library's table holds):
    # Laplace's rule of succession, (exact + 1) / (count + 2), so that 27 of 27 does not claim certainty.
    choose = [c for c in replay(load_rows("library"), "library") if c["half"] == "choose"]
    result["measured_on_choose_half"] = {}
    for e in nc.EVIDENCE_CONFIDENCE:
        st = _stats([c for c in choose if c["evidence"] == e])
        result["measured_on_choose_half"][e] = {**st, "laplace": round((st["exact"] + 1) / (st["count"] + 2), 2)}
    return result


# ============================================================================ small tables: fits
def hdbscan_k(views, y, min_cluster_size: int) -> dict:
    """scikit-learn's HDBSCAN on the min-max-scaled concatenation: clusters found (noise apart), NMI
    with the noise points as one more label, share of noise."""
    from bench_auto_k import minmax_concat
    from sklearn.cluster import HDBSCAN
    from sklearn.metrics import normalized_mutual_info_score

    labels = HDBSCAN(min_cluster_size=min_cluster_size).fit(minmax_concat(views)).labels_
    return {"k": int(np.unique(labels[labels >= 0]).size), "nmi": float(normalized_mutual_info_score(y, labels)),
            "noise": float(np.mean(labels < 0))}


def run_small(seeds: int) -> dict:
    """Per small table and seed: ours (``n_clusters="auto"``, the estimator's own fit) with its NMI and
    the NMI at the labels' K; HDBSCAN (min_cluster_size 5, its default, and 15); the silhouette sweep
    (bench_auto_k.silhouette_k: KMeans on the min-max-scaled concatenation, k in 2..ours' k_max)."""
    import warnings

    from bench_auto_k import minmax_concat, silhouette_k
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from mkdist import choose_method, get_method
    from mkdist.errors import AmbiguousNClustersWarning

    out = []
    for name in SMALL:
        for seed in range(seeds):
            views, y = small_cell(name, seed)
            K = int(np.unique(y).size)
            method = choose_method(views, K)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", AmbiguousNClustersWarning)
                c0 = time.process_time()
                est = get_method(method.method)(n_clusters="auto", random_state=seed, **method.params).fit(views)
                cpu = time.process_time() - c0
            c = est.n_clusters_choice_
            at_k = get_method(method.method)(n_clusters=K, random_state=seed, **method.params).fit(views)
            sil = silhouette_k(views, 2, c.k_range[1], seed)
            sil_labels = KMeans(sil["n_clusters"], n_init=1, random_state=seed).fit(minmax_concat(views)).labels_
            row = {"table": name, "seed": seed, "n": int(y.size), "K": K, "method": method.method,
                   "ours": {"k": c.n_clusters, "ambiguous": c.ambiguous, "confidence": c.confidence,
                            "evidence": c.evidence, "k_range": list(c.k_range),
                            "nmi": float(nmi(y, np.asarray(est.labels_))), "cpu_s": cpu, "verdict": c.verdict()},
                   "ours_true_k_nmi": float(nmi(y, np.asarray(at_k.labels_))),
                   "hdbscan5": hdbscan_k(views, y, 5), "hdbscan15": hdbscan_k(views, y, 15),
                   "silhouette": {"k": sil["n_clusters"], "nmi": float(nmi(y, sil_labels)), "cpu_s": sil["cpu_s"]}}
            out.append(row)
            print(f"{name:14s} {seed} K={K}: ours {c.n_clusters}{'?' if c.ambiguous else ''} "
                  f"hdbscan {row['hdbscan5']['k']}/{row['hdbscan15']['k']} silhouette {sil['n_clusters']}", flush=True)
    return {"part": "small", "machine": machine(), "rows": out}


# ============================================================================ k-means cost of the same labels
def run_kmeans_cost(n: int, runs: int) -> dict:
    """The labels stage (k-means on the stored embedding) of ``mkdist.cluster`` on W1 (10 clusters,
    two 32-feature views, in memory) with the estimator's k-means defaults and with the former run
    defaults; runs alternate, medians reported."""
    import tempfile

    from bench_auto_k import synthetic

    import mkdist

    views, y = synthetic(n, 10, 0.4, 0)
    settings = {"estimator defaults (n_init=10, kmeans_max_iter=300)": {},
                "former run defaults (n_init=3, kmeans_max_iter=100)": {"n_init": 3, "kmeans_max_iter": 100}}
    times: dict = {k: {"kmeans_s": [], "total_s": []} for k in settings}
    for _ in range(runs):
        for name, params in settings.items():
            with tempfile.TemporaryDirectory() as d:
                res = mkdist.cluster(views, f"{d}/s.zarr", 10, random_state=0, n_landmarks=1000, **params)
                times[name]["kmeans_s"].append(float(res.timings["kmeans_s"]))
                times[name]["total_s"].append(float(res.timings["total_s"]))
    return {"part": "kmeans-cost", "n": n, "runs": runs, "machine": machine(),
            "median": {k: {m: float(np.median(v)) for m, v in t.items()} for k, t in times.items()}, "runs_s": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("evidence", "calibrate", "small", "kmeans-cost"), required=True)
    ap.add_argument("--n", type=int, default=200_000, help="--part kmeans-cost: rows")
    ap.add_argument("--runs", type=int, default=3, help="--part kmeans-cost: runs per setting")
    ap.add_argument("--graph", choices=("library", "round4"), default="library")
    ap.add_argument("--seeds", type=int, default=3, help="--part small: seeds per table")
    args = ap.parse_args()
    if args.part == "evidence":
        HERE.mkdir(parents=True, exist_ok=True)
        run_evidence(args.graph)
        rows = load_rows(args.graph)
        emit({"part": "evidence", "graph": args.graph, "cells": len(rows), "machine": machine(),
              "cpu_s_median": float(np.median([r["cpu_s"] for r in rows]))})
    elif args.part == "calibrate":
        emit(run_calibrate())
    elif args.part == "small":
        emit(run_small(args.seeds))
    else:
        emit(run_kmeans_cost(args.n, args.runs))


if __name__ == "__main__":
    main()
