"""Missing cells clustered, not dropped (issue 33, item 2), printing JSON.

    python bench/bench_missing.py --part quality --n 20000 --seeds 0,1,2
    python bench/bench_missing.py --part cost --n 1000000 --repeats 3
    python bench/bench_missing.py --part cpu --n 1000000

``quality``: the customer table of :func:`make_customer_table` (6 segments in 3 pairs: four
numeric columns separate the pairs only, two string columns split each pair, with 10%
noise each; ~4% of the rows miss a numeric cell, ~2% a category), run through
``mkdist.cluster(..., missing="impute", labels_out=...)`` on a LocalCluster with two worker
processes.  ACC is computed once over all rows (one matching of clusters to
segments, from the labels written out joined by id) and then reported for the complete
rows and for the rows with missing cells.  Three fills: the run's (the mean of the 10
nearest donors, ``mkdist.internals.IMPUTATION_NEIGHBORS``), the nearest donor's value
(``N_NEIGHBORS = 1``) and the column mean (``N_NEIGHBORS = 0``); two view layouts: the
issue's, a numeric view and a categorical view of the two string columns (one-hot encoded by
the table layer, a missing category NaN in all its indicators), and one view of the numbers
with indicator columns written into the table (:func:`with_indicators`).  Every run uses
``scale="standard"`` (the columns' units differ).

``cost``: the same run on the table without missing cells (the default, ``missing="refuse"``)
and with them (``missing="impute"``, filled with the column mean and with the 10
neighbours' mean), interleaved, ``--repeats`` times: seconds per stage, medians.

``cpu``: CPU seconds of the fill, of the per-row counts and of the embedding of the same row
chunks, in one process (see :func:`cpu`); on the bench table and with a hole in every row.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import emit, machine

NUMERIC = ["monthly_spend", "visits", "tenure_months", "basket"]
CATEGORIES = {"plan": ("basic", "premium"), "channel": ("web", "store")}


def make_customer_table(n: int, seed: int = 0, *, noise: float = 0.1, missing_numeric: float = 0.04,
                        missing_category: float = 0.02) -> pd.DataFrame:
    """A customer table whose segments need both its numbers and its categories.

    Six segments in three pairs: the numeric columns (spend, visits, tenure, basket size:
    per pair a mean, within a pair the same distribution) separate the pairs only; the
    string columns ``plan`` and ``channel`` split each pair (the first segment of a pair is
    mostly "basic" / "web", the second "premium" / "store"), each flipped with probability
    ``noise``.  A share ``missing_numeric`` of the rows miss one numeric cell (NaN), a share
    ``missing_category`` one of the two categories (None).

    Parameters
    ----------
    n : int
    seed : int, default=0

    Returns
    -------
    pandas.DataFrame
        ``customer_id`` (string, shuffled), the numeric columns (float64), ``plan`` and
        ``channel`` (string, None where missing), ``segment`` (int, the truth).
    """
    rng = np.random.default_rng(seed)
    segment = rng.integers(0, 6, n)
    pair, side = segment // 2, segment % 2
    centers = np.array([[40.0, 3.0, 12.0, 20.0], [90.0, 6.0, 30.0, 35.0], [160.0, 10.0, 50.0, 55.0]])
    spread = np.array([20.0, 1.5, 8.0, 7.0])
    numbers = centers[pair] + rng.normal(size=(n, len(NUMERIC))) * spread
    holes = rng.random(n) < missing_numeric
    numbers[holes, rng.integers(0, len(NUMERIC), int(holes.sum()))] = np.nan
    table = {"customer_id": [f"C{i:08d}" for i in rng.permutation(n)]}
    table.update({c: numbers[:, j] for j, c in enumerate(NUMERIC)})
    lacking = rng.random(n) < missing_category
    which = rng.integers(0, len(CATEGORIES), n)
    for k, (column, levels) in enumerate(CATEGORIES.items()):
        value = np.asarray(levels, dtype=object)[side ^ (rng.random(n) < noise)]
        value[lacking & (which == k)] = None
        table[column] = value
    table["segment"] = segment
    return pd.DataFrame(table)


def with_indicators(df: pd.DataFrame) -> pd.DataFrame:
    """The string columns one-hot encoded (``plan=basic``, ...; float, NaN in every indicator of
    a missing category), until the table layer encodes categories itself."""
    out = df.drop(columns=list(CATEGORIES))
    for column, levels in CATEGORIES.items():
        for level in levels:
            out[f"{column}={level}"] = np.where(df[column].isna(), np.nan, (df[column] == level).astype(float))
    return out


def _acc_by_group(y: np.ndarray, labels: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, float]:
    from scipy.optimize import linear_sum_assignment

    k = int(max(y.max(), labels.max())) + 1
    counts = np.zeros((k, k))
    np.add.at(counts, (labels, y), 1)
    rows, cols = linear_sum_assignment(-counts)
    mapping = np.zeros(k, dtype=int)
    mapping[rows] = cols
    hit = mapping[labels] == y
    return {name: round(float(hit[mask].mean()), 4) for name, mask in groups.items()}


def quality(args) -> dict:
    import mkdist
    from mkdist.internals import IMPUTATION_NEIGHBORS, imputation_neighbors

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-missing-"))
    indicators = [f"{c}={v}" for c, vs in CATEGORIES.items() for v in vs]
    # (views, whether the table has the string columns or their indicator columns)
    layouts = {"numbers + categorical view": ({"usage": NUMERIC, "profile": list(CATEGORIES)}, False),
               "one view, indicator columns": ({"all": NUMERIC + indicators}, True)}
    fills = {"neighbours": IMPUTATION_NEIGHBORS, "nearest donor": 1, "column mean": 0}
    cells = []
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
        for seed in args.seeds:
            df = make_customer_table(args.n, seed)
            paths = {False: tmp / f"customers-{seed}.parquet", True: tmp / f"indicators-{seed}.parquet"}
            df.to_parquet(paths[False], index=False)
            with_indicators(df).to_parquet(paths[True], index=False)
            numeric_hole = df[NUMERIC].isna().any(axis=1).to_numpy()
            category_hole = df[list(CATEGORIES)].isna().any(axis=1).to_numpy()
            groups = {"all": np.ones(len(df), bool), "complete": ~(numeric_hole | category_hole),
                      "with missing cells": numeric_hole | category_hole, "missing a number": numeric_hole,
                      "missing a category": category_hole}
            for layout, (views, indicator_columns) in layouts.items():
                for fill, k in fills.items():
                    store, out = tmp / "run.zarr", tmp / "labels.parquet"
                    t0 = time.perf_counter()
                    with imputation_neighbors(k):
                        res = mkdist.cluster(str(paths[indicator_columns]), str(store), 6, random_state=seed,
                                             id_column="customer_id", views=views, label_column="segment",
                                             missing="impute", labels_out=str(out), scale="standard", overwrite=True)
                    seconds = time.perf_counter() - t0
                    got = pd.read_parquet(out).merge(df[["customer_id", "segment"]], on="customer_id", how="right")
                    assert got["cluster"].notna().all() and len(got) == len(df), "a row without a label"
                    order = df.set_index("customer_id").index
                    got = got.set_index("customer_id").loc[order]
                    expected = df[NUMERIC].isna().sum(axis=1) + 2 * df[list(CATEGORIES)].isna().sum(axis=1)
                    assert (got["missing_cells"].to_numpy() == expected.to_numpy()).all()
                    acc = _acc_by_group(df["segment"].to_numpy(), got["cluster"].to_numpy(int), groups)
                    cells.append({"seed": seed, "layout": layout, "fill": fill, "acc": acc,
                                  "gap": round(acc["complete"] - acc["with missing cells"], 4),
                                  "rows": {g: int(m.sum()) for g, m in groups.items()},
                                  "summary_missing": res.metrics.get("missing"), "seconds": round(seconds, 1)})
                    print(cells[-1], file=sys.stderr, flush=True)
                    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    table = {}
    for layout in layouts:
        for fill in fills:
            got = [c for c in cells if c["layout"] == layout and c["fill"] == fill]
            table[f"{layout}, {fill}"] = {
                g: round(float(np.mean([c["acc"][g] for c in got])), 4)
                for g in ("all", "complete", "with missing cells", "missing a number", "missing a category")}
            table[f"{layout}, {fill}"]["gap (complete - missing)"] = round(float(np.mean([c["gap"] for c in got])), 4)
            table[f"{layout}, {fill}"]["worst gap"] = round(float(np.max([c["gap"] for c in got])), 4)
    return {"part": "quality", "n": args.n, "seeds": args.seeds, "mean_over_seeds": table, "cells": cells}


def cost(args) -> dict:
    import mkdist
    from mkdist.internals import IMPUTATION_NEIGHBORS, imputation_neighbors

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-missing-cost-"))
    tables = {"holes": with_indicators(make_customer_table(args.n, 0)),
              "full": with_indicators(make_customer_table(args.n, 0, missing_numeric=0.0, missing_category=0.0))}
    views = {"all": NUMERIC + [f"{c}={v}" for c, vs in CATEGORIES.items() for v in vs]}
    # The middle arm separates the fill's neighbour search from what reading a table with
    # nulls and filling a cell at all cost.
    arms = (("refuse, no missing cells", "full", "refuse", IMPUTATION_NEIGHBORS),
            ("impute, column mean", "holes", "impute", 0),
            ("impute, 10 neighbours", "holes", "impute", IMPUTATION_NEIGHBORS))
    out = {"part": "cost", "n": args.n, "runs": []}
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
        for repeat in range(args.repeats):
            for name, table, missing, k in arms:
                path = tmp / f"{table}.parquet"
                if not path.exists():
                    tables[table].to_parquet(path, index=False, row_group_size=131072)
                store = tmp / "run.zarr"
                t0 = time.perf_counter()
                with imputation_neighbors(k):
                    res = mkdist.cluster(str(path), str(store), 6, random_state=0, id_column="customer_id",
                                         views=views, label_column="segment", missing=missing, scale="standard",
                                         overwrite=True)
                out["runs"].append({"repeat": repeat, "run": name, "total_s": round(time.perf_counter() - t0, 2),
                                    "timings": {k: round(v, 2) for k, v in res.timings.items()},
                                    "acc": res.metrics["scores"]["acc"], "missing": res.metrics.get("missing")})
                print(out["runs"][-1], file=sys.stderr, flush=True)
                shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    out["medians"] = {}
    for name, *_ in arms:
        runs = [r for r in out["runs"] if r["run"] == name]
        out["medians"][name] = {"total_s": float(np.median([r["total_s"] for r in runs])),
                                "embed_s": float(np.median([r["timings"]["embed_s"] for r in runs]))}
    base = [r for r in out["runs"] if r["run"] == arms[0][0]]
    for name, *_ in arms[1:]:
        runs = [r for r in out["runs"] if r["run"] == name]
        out["medians"][name]["embed_ratio_to_refuse (paired by repeat)"] = float(np.median(
            [r["timings"]["embed_s"] / b["timings"]["embed_s"] for r, b in zip(runs, base)]))
    return out


def cpu(args) -> dict:
    """CPU seconds of the fill against the embedding it is fused with, in this one process
    (``time.process_time``: a busy machine slows the wall clock of both alike, not the CPU
    time of either), per row chunk of the table as a run reads it."""
    from mkdist import MultipleKernelClustering
    from mkdist.internals import Imputer, donor_indices, missing_per_row

    out = {"part": "cpu", "n": args.n, "cases": {}}
    cols = NUMERIC + [f"{c}={v}" for c, vs in CATEGORIES.items() for v in vs]
    for case, share in (("6% of rows with a missing cell (the bench table)", None), ("every row misses a cell", 1.0)):
        X = with_indicators(make_customer_table(args.n, 0))[cols].to_numpy(np.float32)
        if share is not None:
            rng = np.random.default_rng(1)
            X[np.arange(args.n), rng.integers(0, len(NUMERIC), args.n)] = np.nan
        donors = donor_indices(args.n, 0)
        imp = Imputer(["all"], [np.nanmean(X, 0)], [np.nanstd(X, 0)], [X[donors]])
        landmarks = np.sort(np.random.default_rng(2).choice(args.n, 1000, replace=False))
        model = MultipleKernelClustering(6, n_landmarks=1000, random_state=0, scale="standard").fit(
            {"all": imp.fill([X[landmarks]])[0]})
        chunks = [X[i:i + 131072] for i in range(0, args.n, 131072)]
        t = {"fill": 0.0, "count": 0.0, "embed": 0.0}
        for chunk in chunks:
            t0 = time.process_time()
            filled = imp.fill_view([chunk], 0)
            t1 = time.process_time()
            missing_per_row([chunk])
            t2 = time.process_time()
            model.transform({"all": filled})
            t3 = time.process_time()
            t["fill"] += t1 - t0
            t["count"] += t2 - t1
            t["embed"] += t3 - t2
        holes = int(np.isnan(X).any(axis=1).sum())
        out["cases"][case] = {"rows with missing cells": holes, **{f"{k}_cpu_s": round(v, 2) for k, v in t.items()},
                              "fill / embed": round(t["fill"] / t["embed"], 3),
                              "fill us per row with missing cells": round(1e6 * t["fill"] / max(holes, 1), 1)}
        print(case, out["cases"][case], file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["quality", "cost", "cpu"], default="quality")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    result = {"quality": quality, "cost": cost, "cpu": cpu}[args.part](args)
    emit({**result, "machine": machine()})


if __name__ == "__main__":
    main()
