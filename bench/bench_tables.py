"""Tables as they come (issue 33): categorical views, missing cells, DataFrames in; prints JSON.

    python bench/bench_tables.py --part customers --n 20000 --seeds 0,1,2
    python bench/bench_tables.py --part diagnose --n 10000 --seeds 0,1,2
    python bench/bench_tables.py --part penguins --seeds 0,1,2,3,4
    python bench/bench_tables.py --part cost --n 1000000
    python bench/bench_tables.py --part embed-cpu --n 200000 --rounds 5
    python bench/bench_tables.py --part identical --n 20000

``customers``: the customer table of ``bench_missing.make_customer_table`` (six segments in
three pairs; four numeric columns separate the pairs only, the string columns ``plan`` and
``channel`` split each pair with 10% noise; ~4% of the rows miss a numeric cell, ~2% a
category).  mkdist gets it as a pandas DataFrame with two views, ``usage`` (the numbers) and
``profile`` (the two string columns: a categorical view), ``missing="impute"``,
``scale="standard"``; against numbers alone (mkdist, same options), one-hot + k-means
(scikit-learn: numbers standardised, column means for missing numbers, a missing category
all-zero), and k-prototypes (the ``kmodes`` package, Huang init, numbers standardised, the
mean / mode for missing cells) with the same K.  ACC over every row, then for the complete
rows and the rows with missing cells (one matching of clusters to segments).

``diagnose``: where mkdist loses to one-hot + k-means on the customer table: per seed and per
variant of mkc (the defaults; the geometry before issue 33's second round, ``normalize="diagonal"``,
unit rows and 2K columns; each of the three alone; 4K columns; 30 k-means restarts; uniform
weights; a linear or cosine kernel on the categorical view; the categorical view unscaled) ACC
over all, complete and incomplete rows, the share of rows in the right pair of segments (what
the numbers tell), ACC within the rows of a right pair (what the categories tell), the learned
kernel weights and the embedding's width; one-hot + k-means beside them.  ``--scale none``: no
``scale`` given, so mkdist's default (mkc's "auto": "standard" with a categorical view; before
it, the columns as they are), one-hot + k-means standardised as ever.

``penguins``: Palmer penguins (344 rows, 2 with no measurement, 11 without ``sex``): views
``body`` (the four measurements) and ``place`` (``island``, ``sex``), K = 3, species NMI and the
wall time of ``mkdist.cluster`` from the DataFrame, against k-means (standardised + one-hot,
mean/mode fill) and k-prototypes.

``cost``: a table of N rows with the customer numbers and three categorical columns (2, 2
and 50 categories): the embed stage with the numeric view alone and with the categorical view
beside it, on a LocalCluster(2 x 1); the categorical view's cost per row is the difference.
A third run has the categorical run's geometry before issue 33's second round (diagonal
kernels, unit rows, 2K columns).  ``embed-cpu``: the CPU seconds of embedding N such rows in
this process with the two geometries' models, alternating (the cost of the change alone).

``identical``: the same table as a pandas DataFrame, a dask DataFrame and a Parquet file:
labels compared.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from _common import emit, machine
from bench_missing import NUMERIC, _acc_by_group as _acc, make_customer_table

CATEGORICAL = ["plan", "channel"]


def _baseline_matrices(df: pd.DataFrame, numeric: list[str], categorical: list[str]):
    """Standardised numbers (column means for missing ones), one-hot categories (a missing one
    all zero), and the categories as strings with the mode for a missing one (k-prototypes)."""
    X = df[numeric].to_numpy(float)
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    onehot = pd.get_dummies(df[categorical].astype("string"), dummy_na=False).to_numpy(float)
    cats = df[categorical].astype(object)
    cats = cats.fillna({c: cats[c].mode()[0] for c in categorical}).to_numpy(str)
    return X, onehot, cats


def _kmeans(X, k, seed):
    from sklearn.cluster import KMeans

    return KMeans(k, n_init=10, random_state=seed).fit_predict(X)


def _kprototypes(X, cats, k, seed):
    from kmodes.kprototypes import KPrototypes

    data = np.concatenate([X.astype(object), cats], axis=1)
    return np.asarray(KPrototypes(n_clusters=k, init="Huang", n_init=3, random_state=seed, n_jobs=1).fit_predict(
        data, categorical=list(range(X.shape[1], data.shape[1]))))


def customers(args) -> dict:
    import mkdist

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-tables-"))
    cells = []
    for seed in args.seeds:
        df = make_customer_table(args.n, seed)
        y = df["segment"].to_numpy()
        number_hole = df[NUMERIC].isna().any(axis=1).to_numpy()
        category_hole = df[CATEGORICAL].isna().any(axis=1).to_numpy()
        groups = {"all": np.ones(len(df), bool), "complete": ~(number_hole | category_hole),
                  "with missing cells": number_hole | category_hole}
        runs = {"mkdist: usage + profile (categorical)": {"usage": NUMERIC, "profile": CATEGORICAL},
                "mkdist: numbers alone": {"usage": NUMERIC}}
        for name, views in runs.items():
            t0 = time.perf_counter()
            res = mkdist.cluster(df, tmp / "run.zarr", 6, views=views, id_column="customer_id", missing="impute",
                                 scale="standard", random_state=seed, overwrite=True)
            seconds = time.perf_counter() - t0
            cells.append({"seed": seed, "method": name, "seconds": round(seconds, 2),
                          **_acc(y, np.asarray(res.labels), groups)})
        X, onehot, cats = _baseline_matrices(df, NUMERIC, CATEGORICAL)
        for name, fit in (("one-hot + k-means", lambda X=X, onehot=onehot, seed=seed: _kmeans(
                              np.hstack([X, onehot]), 6, seed)),
                          ("k-prototypes (kmodes)", lambda X=X, cats=cats, seed=seed: _kprototypes(X, cats, 6, seed))):
            t0 = time.perf_counter()
            labels = fit()
            cells.append({"seed": seed, "method": name, "seconds": round(time.perf_counter() - t0, 2),
                          **_acc(y, labels, groups)})
        print(pd.DataFrame([c for c in cells if c["seed"] == seed]).to_string(), file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    table = pd.DataFrame(cells).groupby("method")[["all", "complete", "with missing cells", "seconds"]].mean()
    return {"part": "customers", "n": args.n, "seeds": args.seeds, "cells": cells,
            "mean": {m: {k: round(float(v), 4) for k, v in row.items()} for m, row in table.iterrows()}}


#: mkc variants of ``--part diagnose``: parameters of ``mkdist.cluster`` beside the run's own.
_PROFILE_KERNEL = {kind: [{"view": "usage", "kind": "rbf", "multiplier": m} for m in (0.5, 1.0, 2.0)]
                   + [{"view": "profile", "kind": kind}] for kind in ("linear", "cosine")}
DIAGNOSE_VARIANTS = {
    "defaults": {},
    "before: diagonal kernels, unit rows, 2K": {"normalize": "diagonal", "normalize_embedding": True,
                                                "embedding_dim": 12},
    "diagonal kernels only": {"normalize": "diagonal"},
    "unit rows only": {"normalize_embedding": True},
    "embedding_dim 2K": {"embedding_dim": 12},
    "embedding_dim 4K": {"embedding_dim": 24},
    "n_init 30": {"n_init": 30},
    "uniform weights": {"weights": "uniform"},
    "profile: linear kernel": {"kernels": _PROFILE_KERNEL["linear"]},
    "profile: cosine kernel": {"kernels": _PROFILE_KERNEL["cosine"]},
}


def _pairs_and_sides(y: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Share of rows in the right pair of segments (one matching of clusters to segments), and
    ACC among those rows (the side within the pair)."""
    from scipy.optimize import linear_sum_assignment

    counts = np.zeros((int(labels.max()) + 1, int(y.max()) + 1))
    np.add.at(counts, (labels, y), 1)
    rows, cols = linear_sum_assignment(-counts)
    mapping = np.zeros(counts.shape[0], dtype=int)
    mapping[rows] = cols
    matched = mapping[labels]
    right_pair = matched // 2 == y // 2
    return {"pair": round(float(right_pair.mean()), 4),
            "side given pair": round(float((matched == y)[right_pair].mean()), 4)}


def diagnose(args) -> dict:
    import mkdist

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-diagnose-"))
    cells = []
    variants = {k: v for k, v in DIAGNOSE_VARIANTS.items() if not args.variants or k in args.variants}
    for seed in args.seeds:
        df = make_customer_table(args.n, seed)
        y = df["segment"].to_numpy()
        hole = (df[NUMERIC].isna().any(axis=1) | df[CATEGORICAL].isna().any(axis=1)).to_numpy()
        groups = {"all": np.ones(len(df), bool), "complete": ~hole, "with missing cells": hole}
        for name, params in variants.items():
            t0 = time.perf_counter()
            res = mkdist.cluster(df, tmp / "run.zarr", 6, views={"usage": NUMERIC, "profile": CATEGORICAL},
                                 id_column="customer_id", missing="impute", scale=args.scale, random_state=seed,
                                 overwrite=True, **params)
            labels = np.asarray(res.labels)
            est = res.model
            cells.append({"seed": seed, "method": name, "seconds": round(time.perf_counter() - t0, 2),
                          **_acc(y, labels, groups), **_pairs_and_sides(y, labels),
                          "kernel_weights": dict(zip([k.name for k in est.kernels_],
                                                     np.round(est.kernel_weights_, 3).tolist())),
                          "embedding_dim": int(est.model_.n_components),
                          "geometry": [est.model_.preprocessing.normalize, bool(est.model_.normalize_embedding),
                                       est.model_.embedding_scale]})
        X, onehot, _ = _baseline_matrices(df, NUMERIC, CATEGORICAL)
        labels = _kmeans(np.hstack([X, onehot]), 6, seed)
        cells.append({"seed": seed, "method": "one-hot + k-means", **_acc(y, labels, groups),
                      **_pairs_and_sides(y, labels)})
        print(pd.DataFrame([c for c in cells if c["seed"] == seed]).drop(
            columns=["kernel_weights", "geometry"], errors="ignore").to_string(), file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    columns = ["all", "complete", "with missing cells", "pair", "side given pair"]
    table = pd.DataFrame(cells).groupby("method", sort=False)[columns].mean()
    print(table.round(4).to_string(), file=sys.stderr)
    return {"part": "diagnose", "n": args.n, "seeds": args.seeds, "scale": args.scale, "cells": cells,
            "mean": {m: {k: round(float(v), 4) for k, v in row.items()} for m, row in table.iterrows()}}


def penguins(args) -> dict:
    import palmerpenguins

    import mkdist

    df = palmerpenguins.load_penguins()
    df.insert(0, "penguin", [f"P{i:03d}" for i in range(len(df))])
    y = df["species"].astype("category").cat.codes.to_numpy()
    numeric, categorical = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"], ["island", "sex"]
    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-penguins-"))
    cells = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        res = mkdist.cluster(df, tmp / "run.zarr", 3, views={"body": numeric, "place": categorical},
                             id_column="penguin", missing="impute", scale="standard", random_state=seed,
                             overwrite=True)
        seconds = time.perf_counter() - t0
        cells.append({"seed": seed, "method": "mkdist (body + place, impute)", "seconds": round(seconds, 2),
                      "nmi": round(mkdist.nmi(y, np.asarray(res.labels)), 4)})
        # The numbers alone: the 2 penguins with no measurement have nothing to cluster on (mkdist
        # refuses such rows, naming them), so this run leaves them out.
        measured = df[numeric].notna().any(axis=1).to_numpy()
        res = mkdist.cluster(df[measured], tmp / "run.zarr", 3, views={"body": numeric}, id_column="penguin",
                             missing="impute", scale="standard", random_state=seed, overwrite=True)
        cells.append({"seed": seed, "method": "mkdist (body, impute; 342 measured rows)",
                      "nmi": round(mkdist.nmi(y[measured], np.asarray(res.labels)), 4)})
        X, onehot, cats = _baseline_matrices(df, numeric, categorical)
        cells.append({"seed": seed, "method": "k-means (standardised + one-hot)",
                      "nmi": round(mkdist.nmi(y, _kmeans(np.hstack([X, onehot]), 3, seed)), 4)})
        cells.append({"seed": seed, "method": "k-means (standardised numbers)",
                      "nmi": round(mkdist.nmi(y, _kmeans(X, 3, seed)), 4)})
        cells.append({"seed": seed, "method": "k-prototypes (kmodes)",
                      "nmi": round(mkdist.nmi(y, _kprototypes(X, cats, 3, seed)), 4)})
    shutil.rmtree(tmp, ignore_errors=True)
    table = pd.DataFrame(cells).groupby("method")[["nmi", "seconds"]].agg(["mean", "min", "max"])
    print(table.to_string(), file=sys.stderr)
    return {"part": "penguins", "rows": len(df), "seeds": args.seeds, "cells": cells,
            "mean_nmi": {m: round(float(v), 4) for m, v in table[("nmi", "mean")].items()},
            "median_seconds_mkdist": float(np.median([c["seconds"] for c in cells if "seconds" in c]))}


def _cost_table(n: int, seed: int = 0) -> pd.DataFrame:
    df = make_customer_table(n, seed, missing_numeric=0.0, missing_category=0.0)
    rng = np.random.default_rng(seed)
    df["region"] = np.asarray([f"R{i:02d}" for i in range(50)], dtype=object)[rng.integers(0, 50, n)]
    return df


def cost(args) -> dict:
    from distributed import Client, LocalCluster

    import mkdist

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-cost-"))
    path = tmp / "mixed.parquet"
    _cost_table(args.n).to_parquet(path, index=False, row_group_size=200_000)
    mixed = {"usage": NUMERIC, "profile": CATEGORICAL + ["region"]}
    # (views, parameters): the last run is the categorical run's geometry before issue 33's
    # second round (diagonal kernels, unit rows, 2K columns), for the cost of the change.
    runs = {"numeric view": ({"usage": NUMERIC}, {}), "numeric + categorical view": (mixed, {}),
            "numeric + categorical view, geometry before": (mixed, {"normalize": "diagonal",
                                                                    "normalize_embedding": True, "embedding_dim": 12})}
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
        for _ in range(args.rounds):
            for name, (views, params) in runs.items():
                t0 = time.perf_counter()
                res = mkdist.cluster(str(path), str(tmp / "run.zarr"), 6, views=views, id_column="customer_id",
                                     scale="standard", random_state=0, overwrite=True, **params)
                wall = time.perf_counter() - t0
                out.setdefault(name, []).append({"wall_s": round(wall, 2), **{k: round(v, 2) for k, v in
                                                                             res.timings.items()}})
    shutil.rmtree(tmp, ignore_errors=True)
    med = {name: {k: float(np.median([r[k] for r in rs])) for k in rs[0]} for name, rs in out.items()}
    embed = {name: m["embed_s"] for name, m in med.items()}
    extra = embed["numeric + categorical view"] - embed["numeric view"]
    return {"part": "cost", "n": args.n, "rounds": args.rounds, "runs": out, "median": med,
            "embed_us_per_row": {k: round(1e6 * v / args.n, 3) for k, v in embed.items()},
            "categorical_view_us_per_row": round(1e6 * extra / args.n, 3),
            "note": "the categorical view: 3 columns, 54 indicator features, 3 RBF kernels"}


def embed_cpu(args) -> dict:
    """CPU seconds of the embedding of N rows of the cost table, in this process (one thread), by
    a model with today's categorical geometry and one with the geometry before, alternating."""
    import mkdist

    df = _cost_table(args.n)
    views = {"usage": df[NUMERIC], "profile": df[CATEGORICAL + ["region"]]}
    fit_rows = {k: v.iloc[:20_000] for k, v in views.items()}
    models = {"kernel k-means (today)": {},
              "geometry before": {"normalize": "diagonal", "normalize_embedding": True, "embedding_dim": 12}}
    fitted = {name: mkdist.MultipleKernelClustering(6, scale="standard", random_state=0, **p).fit(fit_rows)
              for name, p in models.items()}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, est in fitted.items():
            t0 = time.process_time()
            est.transform(views)
            seconds[name].append(round(time.process_time() - t0, 3))
    return {"part": "embed-cpu", "n": args.n, "rounds": args.rounds, "cpu_s": seconds,
            "median_us_per_row": {k: round(1e6 * float(np.median(v)) / args.n, 3) for k, v in seconds.items()}}


def identical(args) -> dict:
    import dask.dataframe as dd

    import mkdist

    df = make_customer_table(args.n, 0)
    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-identical-"))
    df.to_parquet(tmp / "t.parquet", index=False)
    kwargs = dict(views={"usage": NUMERIC, "profile": CATEGORICAL}, id_column="customer_id", missing="impute",
                  random_state=0)
    labels = {}
    for name, source in (("pandas", df), ("dask", dd.from_pandas(df, npartitions=4)), ("parquet", tmp / "t.parquet")):
        labels[name] = np.asarray(mkdist.cluster(source, tmp / f"{name}.zarr", 6, **kwargs).labels)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"part": "identical", "n": args.n,
            "pandas == parquet": bool(np.array_equal(labels["pandas"], labels["parquet"])),
            "dask == parquet": bool(np.array_equal(labels["dask"], labels["parquet"])),
            "dask vs parquet ARI": round(float(mkdist.ari(labels["dask"], labels["parquet"])), 6)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["customers", "diagnose", "penguins", "cost", "embed-cpu", "identical"],
                        required=True)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=lambda s: None if s == "none" else s, default="standard",
                        help="--part diagnose: mkdist's scale ('none': not given, the method's default)")
    parser.add_argument("--variants", type=lambda s: s.split(";"), default=None,
                        help="--part diagnose: the variants to run, ';'-separated (default: all)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    result = {"customers": customers, "diagnose": diagnose, "penguins": penguins, "cost": cost,
              "embed-cpu": embed_cpu, "identical": identical}[args.part](args)
    emit({**result, "machine": machine()})


if __name__ == "__main__":
    main()
