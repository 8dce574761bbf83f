"""Missing cells clustered, not dropped (issue 33, item 2), printing JSON.

    python bench/bench_missing.py --part quality --n 20000 --seeds 0,1,2
    python bench/bench_missing.py --part cost --n 1000000

``quality``: the customer table of :func:`make_customer_table` (6 segments in 3 pairs: four
numeric columns separate the pairs only, two string columns split each pair, with 10%
noise each; ~4% of the rows miss a numeric cell, ~2% a category), its string columns
one-hot encoded into indicator columns (NaN in all indicators of a missing category), run
through ``mkdist.cluster(..., missing="impute", labels_out=...)`` on a LocalCluster with
two worker processes.  ACC is computed once over all rows (one matching of clusters to
segments, from the labels written out joined by id) and then reported for the complete
rows and for the rows with missing cells.  Three fills: the run's (the mean of the 10
nearest donors, ``mkdist._core._missing.N_NEIGHBORS``), the nearest donor's value
(``N_NEIGHBORS = 1``) and the column mean (``N_NEIGHBORS = 0``); two view layouts: every
column in one view, and the issue's two views (numbers, indicators).  Every run uses
``scale="standard"`` (the columns' units differ).

``cost``: the same run on a table with missing cells (``missing="impute"``) and on the same
table without them (the default, ``missing="refuse"``): seconds per stage.
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
    from mkdist._core import _missing

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-missing-"))
    indicators = [f"{c}={v}" for c, vs in CATEGORIES.items() for v in vs]
    layouts = {"one view": {"all": NUMERIC + indicators}, "two views": {"numbers": NUMERIC, "categories": indicators}}
    fills = {"neighbours": _missing.N_NEIGHBORS, "nearest donor": 1, "column mean": 0}
    cells = []
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
        for seed in args.seeds:
            df = make_customer_table(args.n, seed)
            path = tmp / f"customers-{seed}.parquet"
            with_indicators(df).to_parquet(path, index=False)
            numeric_hole = df[NUMERIC].isna().any(axis=1).to_numpy()
            category_hole = df[list(CATEGORIES)].isna().any(axis=1).to_numpy()
            groups = {"all": np.ones(len(df), bool), "complete": ~(numeric_hole | category_hole),
                      "with missing cells": numeric_hole | category_hole, "missing a number": numeric_hole,
                      "missing a category": category_hole}
            for layout, views in layouts.items():
                for fill, k in fills.items():
                    _missing.N_NEIGHBORS = k
                    store, out = tmp / "run.zarr", tmp / "labels.parquet"
                    t0 = time.perf_counter()
                    res = mkdist.cluster(str(path), str(store), 6, random_state=seed, id_column="customer_id",
                                         views=views, label_column="segment", missing="impute", labels_out=str(out),
                                         scale="standard", overwrite=True)
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
    _missing.N_NEIGHBORS = fills["neighbours"]
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

    tmp = Path(tempfile.mkdtemp(prefix="mkdist-bench-missing-cost-"))
    holes = with_indicators(make_customer_table(args.n, 0))
    full = with_indicators(make_customer_table(args.n, 0, missing_numeric=0.0, missing_category=0.0))
    views = {"all": NUMERIC + [f"{c}={v}" for c, vs in CATEGORIES.items() for v in vs]}
    out = {"part": "cost", "n": args.n, "runs": []}
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
        for repeat in range(args.repeats):
            for name, df, missing in (("refuse, no missing cells", full, "refuse"),
                                      ("impute, 6% rows with missing cells", holes, "impute")):
                path = tmp / f"{missing}.parquet"
                if not path.exists():
                    df.to_parquet(path, index=False, row_group_size=131072)
                store = tmp / "run.zarr"
                t0 = time.perf_counter()
                res = mkdist.cluster(str(path), str(store), 6, random_state=0, id_column="customer_id", views=views,
                                     label_column="segment", missing=missing, scale="standard", overwrite=True)
                out["runs"].append({"repeat": repeat, "run": name, "total_s": round(time.perf_counter() - t0, 2),
                                    "timings": {k: round(v, 2) for k, v in res.timings.items()},
                                    "acc": res.metrics["scores"]["acc"], "missing": res.metrics.get("missing")})
                print(out["runs"][-1], file=sys.stderr, flush=True)
                shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    for name in {r["run"] for r in out["runs"]}:
        runs = [r for r in out["runs"] if r["run"] == name]
        out[f"median total_s, {name}"] = float(np.median([r["total_s"] for r in runs]))
        out[f"median embed_s, {name}"] = float(np.median([r["timings"]["embed_s"] for r in runs]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["quality", "cost"], default="quality")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    result = quality(args) if args.part == "quality" else cost(args)
    emit({**result, "machine": machine()})


if __name__ == "__main__":
    main()
