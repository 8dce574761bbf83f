"""Missing cells clustered, not dropped (``missing="impute"``): the fill, the run, resume,
assign, labels out, the command line -- and ``missing="refuse"``, which names the option."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mkdist
from mkdist._core._cluster import opaque_graph_dict
from mkdist._core._missing import Imputer, count_missing, donor_indices, fill_views
from mkdist._pipeline._io import InputSource, load_views, open_input, scan_views, views_fingerprint
from mkdist._report._summary import assignment_summary
from mkdist.errors import InputValidationError
from mkdist.metrics import clustering_accuracy
from mkdist.storage import RunStore

from .conftest import make_blobs_views

N_PER_CLUSTER = 150


def _with_holes(seed: int = 0):
    """Blobs (3 clusters, views a0..a4 and b0..b4) with ~8% rows missing one or two cells,
    some a whole view; the truth and the missing cells per row."""
    views, y = make_blobs_views(n_per_cluster=N_PER_CLUSTER, n_clusters=3, seed=seed)
    rng = np.random.default_rng(seed)
    a, b = views[0].copy(), views[1].copy()
    n = y.size
    rows = rng.choice(n, size=n // 12, replace=False)
    a[rows[::2], rng.integers(0, 5, rows[::2].size)] = np.nan
    b[rows[1::2], rng.integers(0, 5, rows[1::2].size)] = np.nan
    b[rows[:4], :] = np.nan  # rows that miss a whole view: filled from the other one
    holes = np.isnan(a).sum(axis=1) + np.isnan(b).sum(axis=1)
    return a, b, y, holes


def _write_table(path, a, b, y, seed: int = 0) -> list[str]:
    """A Parquet table: string ids (shuffled), a0..a4, b0..b4 (NaN written as nulls), truth."""
    ids = [f"C{i:05d}" for i in np.random.default_rng(seed).permutation(y.size)]
    cols = {"customer_id": pa.array(ids)}
    for p, X in (("a", a), ("b", b)):
        cols.update({f"{p}{j}": pa.array(X[:, j], from_pandas=True) for j in range(X.shape[1])})
    cols["segment"] = pa.array(y)
    pq.write_table(pa.table(cols), str(path), row_group_size=150)
    return ids


VIEWS = {"a": "a*", "b": "b*"}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("missing")
    a, b, y, holes = _with_holes()
    ids = _write_table(root / "customers.parquet", a, b, y)
    return {"root": root, "path": str(root / "customers.parquet"), "a": a, "b": b, "y": y, "holes": holes, "ids": ids}


@pytest.fixture(scope="module")
def imputed(table, dask_client):
    """One mkc run of the table with missing="impute", labels out by id (shared by the tests)."""
    store, out = table["root"] / "run.zarr", table["root"] / "labels.parquet"
    res = mkdist.cluster(table["path"], str(store), 3, n_landmarks=120, random_state=0, id_column="customer_id",
                         views=VIEWS, label_column="segment", missing="impute", labels_out=str(out))
    return {"store": store, "labels": out, "result": res}


# ----------------------------------------------------------------------------- the fill
def _brute_fill(rows: np.ndarray, donors: np.ndarray, mean, scale, k: int) -> np.ndarray:
    """Reference: each missing cell, the mean of the k donors with that cell nearest on the
    standardised cells both observe (mean squared difference)."""
    out = rows.copy()
    z, zd = (rows - mean) / scale, (donors - mean) / scale
    for r in range(rows.shape[0]):
        for f in np.flatnonzero(np.isnan(rows[r])):
            cand = np.flatnonzero(~np.isnan(donors[:, f]))
            both = ~np.isnan(z[r]) & ~np.isnan(zd[cand])
            d = np.where(both.any(axis=1), np.nansum(np.where(both, (z[r] - zd[cand]) ** 2, 0), axis=1)
                         / np.maximum(both.sum(axis=1), 1), np.inf)
            out[r, f] = donors[cand[np.argsort(d, kind="stable")[:k]], f].mean()
    return out


@pytest.mark.parametrize("most_rows", [False, True])
def test_the_fill_is_the_mean_of_the_nearest_donors_on_the_observed_cells(most_rows):
    a, b, _, _ = _with_holes(seed=3)
    if most_rows:  # most donors miss cells too (another path of the distances)
        rng = np.random.default_rng(4)
        a[np.flatnonzero(rng.random(a.shape[0]) < 0.7), rng.integers(0, 5)] = np.nan
    donors = donor_indices(a.shape[0], seed=5, n_donors=200)
    imp = Imputer(["a", "b"], [np.nanmean(a, 0), np.nanmean(b, 0)], [np.nanstd(a, 0), np.nanstd(b, 0)],
                  [a[donors], b[donors]], n_neighbors=7)
    assert np.isnan(a[donors]).any() or np.isnan(b[donors]).any()  # donors with holes of their own
    fa, fb = imp.fill([a, b])
    both = np.hstack([a, b])
    expected = _brute_fill(both, both[donors], np.hstack(imp.means), np.hstack(imp.scales), 7)
    np.testing.assert_allclose(np.hstack([fa, fb]), expected, rtol=1e-10)
    assert fa.dtype == a.dtype and not np.isnan(fb).any()
    # Observed cells are never touched; a block without holes is passed through as it is.
    clean = ~np.isnan(a).any(axis=1)
    ac, bc = a[clean], b[clean]
    assert imp.fill_view([ac, bc], 0) is ac
    np.testing.assert_array_equal(fa[~np.isnan(a)], a[~np.isnan(a)])
    # n_neighbors=0: the column mean.
    mean_fill = Imputer(imp.view_names, imp.means, imp.scales, imp.donors, 0).fill([a, b])[0]
    np.testing.assert_allclose(mean_fill[np.isnan(a)], np.broadcast_to(imp.means[0], a.shape)[np.isnan(a)])


def test_the_fill_is_fused_into_the_row_task_and_the_counts_share_its_reads(table):
    views = load_views(table["path"], views=VIEWS, id_column="customer_id", label_column="segment",
                       missing="impute", chunk_rows=100)
    a, b = table["a"], table["b"]
    imp = Imputer(["a", "b"], [np.nanmean(a, 0), np.nanmean(b, 0)], [np.nanstd(a, 0), np.nanstd(b, 0)],
                  [a[:50], b[:50]])
    model = mkdist.MultipleKernelClustering(3, n_landmarks=60, random_state=0).fit(dict(zip("ab", imp.fill([a, b]))))
    chunks = views["a"].numblocks[0]
    plain = len(opaque_graph_dict([model.transform(views)]))
    filled = model.transform(fill_views(views, imp))
    # One task more in all (the fill's state), not one per chunk: the fill runs inside the
    # embedding task of its chunk.
    assert len(opaque_graph_dict([filled])) == plain + 1
    # The counts add one light task per chunk, reading nothing: each piece of the table is
    # read once for both.
    reads = []

    def counting_get(expr, keys, **kwargs):
        graph = dict(expr.__dask_graph__())
        reads.extend(k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("read-parquet"))
        return dask.get(expr, keys, **kwargs)

    with dask.config.set(scheduler=counting_get):
        H, counts = dask.compute(filled, count_missing(views))
    assert len(reads) == chunks
    np.testing.assert_array_equal(counts, table["holes"])
    np.testing.assert_allclose(H, model.transform(dict(zip("ab", imp.fill([a, b])))), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- refuse (the default)
def test_refusals_name_the_option(table, tmp_path):
    with pytest.raises(InputValidationError, match=r"column 'a\d' has \d+ missing values? \(first at row \d+, "
                                                   r"customer_id 'C\d+'\).*or pass --missing impute "
                                                   r"\(missing='impute'\)"):
        open_input(InputSource(table["path"], views=VIEWS, id_column="customer_id", label_column="segment"))
    # NaN in arrays (no null statistics): the scan names the column and the row, and the option.
    a = table["a"]
    first, count = int(np.flatnonzero(np.isnan(a[:, 0]))[0]), int(np.isnan(a[:, 0]).sum())
    with pytest.raises(InputValidationError, match=rf"view 'a', feature 0 holds NaN or infinity in {count} rows?, "
                                                   rf"first at row {first}.*--missing impute \(missing='impute'\)"):
        scan_views({"a": da.from_array(a, chunks=(100, -1))})
    with pytest.raises(InputValidationError, match="missing='drop': choose 'refuse' .* or 'impute'"):
        mkdist.cluster([a], str(tmp_path / "s.zarr"), 3, missing="drop")
    assert not (tmp_path / "s.zarr").exists()
    # An imputing run is another run than a refusing one (its fingerprint says so); runs
    # without the option keep their fingerprints.
    views = load_views([table["b"]])
    assert views_fingerprint(views, "impute") != views_fingerprint(views) == views_fingerprint(views, "refuse")


def test_impute_refuses_infinity_and_rows_or_columns_with_no_value(table):
    a, b = table["a"].copy(), table["b"].copy()
    views = {"a": da.from_array(a, chunks=(100, -1)), "b": da.from_array(b, chunks=(100, -1))}
    stats = scan_views(views, missing="impute")
    assert stats["a"]["missing"] == np.isnan(a).sum(axis=0).tolist()
    np.testing.assert_allclose(stats["a"]["mean"], np.nanmean(a, axis=0))  # over the observed values only
    np.testing.assert_allclose(stats["b"]["std"], np.nanstd(b, axis=0))
    a[7, 1] = np.inf
    with pytest.raises(InputValidationError, match=r"column 'x1' holds infinity in 1 row, first at row 7: infinity "
                                                   "is a value, not a missing one"):
        scan_views({"a": da.from_array(a, chunks=(100, -1))}, missing="impute",
                   feature_names={"a": [f"x{j}" for j in range(5)]})
    a[7, 1] = 0.0
    empty = a.copy()
    empty[:, 3] = np.nan
    with pytest.raises(InputValidationError, match=r"view 'a', feature 3 has no value in any of the 450 rows"):
        scan_views({"a": da.from_array(empty, chunks=(100, -1))}, missing="impute")
    a[[250, 301]], b[[250, 301]] = np.nan, np.nan
    with pytest.raises(InputValidationError, match=r"^2 rows have no value in any view, first at row 250: "
                                                   r"there is nothing to cluster such a row on, imputed or not; "
                                                   r"drop those rows"):
        scan_views({"a": da.from_array(a, chunks=(100, -1)), "b": da.from_array(b, chunks=(100, -1))},
                   missing="impute")


def test_a_row_without_any_value_is_refused_by_id_before_the_store_is_written(table, tmp_path):
    a, b, y = table["a"].copy(), table["b"].copy(), table["y"]
    a[33], b[33] = np.nan, np.nan
    ids = _write_table(tmp_path / "t.parquet", a, b, y)
    with pytest.raises(InputValidationError, match=rf"^1 row has no value in any view, first at row 33 "
                                                   rf"\(customer_id '{ids[33]}'\): "):
        mkdist.cluster(str(tmp_path / "t.parquet"), str(tmp_path / "s.zarr"), 3, n_landmarks=50, random_state=0,
                       id_column="customer_id", views=VIEWS, label_column="segment", missing="impute")
    assert not (tmp_path / "s.zarr").exists()


# ----------------------------------------------------------------------------- a run that imputes
def test_every_row_is_labelled_and_its_missing_cells_counted(table, imputed):
    labels = pd.read_parquet(imputed["labels"])
    assert list(labels.columns) == ["customer_id", "cluster", "distance", "missing_cells"]
    truth = pd.DataFrame({"customer_id": table["ids"], "segment": table["y"], "holes": table["holes"]})
    joined = truth.merge(labels, on="customer_id", how="outer", indicator=True)
    assert (joined["_merge"] == "both").all() and len(joined) == table["y"].size
    np.testing.assert_array_equal(joined["missing_cells"], joined["holes"])
    with_holes = joined["holes"].to_numpy() > 0
    assert clustering_accuracy(joined["segment"].to_numpy(), joined["cluster"].to_numpy()) == 1.0
    summary = imputed["result"].metrics["missing"]
    assert summary["rows"] == int(with_holes.sum()) and summary["cells"] == int(table["holes"].sum())
    assert summary["fill"] == "mean of the 10 nearest of 450 donor rows"
    store = RunStore.open(imputed["store"])
    assert store.attrs["missing"]["columns"]["a0"] == int(np.isnan(table["a"][:, 0]).sum())
    info = mkdist.pipeline.inspect_markdown(mkdist.pipeline.inspect_store(str(imputed["store"])))
    assert f"missing cells: {summary['rows']} rows with missing cells, {summary['cells']} cells imputed" in info
    # The landmarks the model was fitted on are filled too.
    landmarks = store.read_stage("landmarks")
    assert (table["holes"][landmarks["landmark_index"].values] > 0).sum() >= 3
    assert not np.isnan(landmarks["X__a"].values).any() and not np.isnan(landmarks["X__b"].values).any()


def test_a_resumed_run_fills_from_the_store_not_from_a_new_scan(table, imputed, monkeypatch, dask_client):
    store = RunStore.open(imputed["store"], mode="r+")
    before = store.read_stage("labels")["distance"].values
    token = store.stage_token("imputation")
    for stage in ("metrics", "labels", "embedding"):
        store.delete_stage(stage)

    def no_scan(*args, **kwargs):
        raise AssertionError("the input was scanned again")

    monkeypatch.setattr("mkdist._pipeline._stages.scan_views", no_scan)
    res = mkdist.cluster(table["path"], str(imputed["store"]), 3, n_landmarks=120, random_state=0,
                         id_column="customer_id", views=VIEWS, label_column="segment", missing="impute")
    assert res.skipped == ["landmarks", "model"] and store.stage_token("imputation") == token
    np.testing.assert_allclose(res.store.read_stage("labels")["distance"].values, before, rtol=1e-5)


def test_assign_fills_a_batch_with_the_models_fill(table, imputed, tmp_path, dask_client):
    # A batch of the rows with holes only: its own statistics and donors would differ from the
    # model's; the model's fill gives each row exactly the distance it had in the fit.
    holes = np.flatnonzero(table["holes"] > 0)
    a, b, y = table["a"][holes], table["b"][holes], table["y"][holes]
    ids = _write_table(tmp_path / "batch.parquet", a, b, y)
    out = mkdist.pipeline.assign(str(imputed["store"]), str(tmp_path / "batch.parquet"), str(tmp_path / "out.zarr"),
                                 labels_out=str(tmp_path / "batch-labels.parquet"))
    fit = pd.read_parquet(imputed["labels"]).set_index("customer_id")
    got = pd.read_parquet(tmp_path / "batch-labels.parquet").set_index("customer_id")
    original = [table["ids"][i] for i in holes]
    np.testing.assert_array_equal(got.loc[ids, "cluster"].to_numpy(), fit.loc[original, "cluster"].to_numpy())
    np.testing.assert_allclose(got.loc[ids, "distance"].to_numpy(), fit.loc[original, "distance"].to_numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got.loc[ids, "missing_cells"].to_numpy(), table["holes"][holes])
    assert out.attrs["missing"]["rows"] == holes.size
    assert f"Missing cells: {holes.size} rows with missing cells" in assignment_summary(out)["markdown"]


def test_assign_refuses_to_impute_with_a_model_that_did_not(table, tmp_path, dask_client):
    clean = ~np.isnan(table["a"]).any(axis=1) & ~np.isnan(table["b"]).any(axis=1)
    views = [table["a"][clean], table["b"][clean]]
    mkdist.cluster(views, str(tmp_path / "m.zarr"), 3, n_landmarks=60, random_state=0)
    with pytest.raises(InputValidationError, match="has none \\(it ran with missing='refuse'\\): refit it with "
                                                   "--missing impute"):
        mkdist.pipeline.assign(str(tmp_path / "m.zarr"), [table["a"], table["b"]], str(tmp_path / "o.zarr"),
                               missing="impute")


@pytest.mark.parametrize("method", ["nystrom", "mv-rff-power"])
def test_methods_without_landmarks_impute_through_the_same_stages(table, method, tmp_path, dask_client):
    views = [table["a"]] if method == "nystrom" else [table["a"], table["b"]]
    res = mkdist.cluster(views, str(tmp_path / "s.zarr"), 3, random_state=0, method=method, missing="impute",
                         y_true=table["y"])
    holes = (np.isnan(np.hstack(views))).sum(axis=1)
    assert res.metrics["missing"]["rows"] == int((holes > 0).sum())
    np.testing.assert_array_equal(res.store.read_stage("labels")["missing_cells"].values, holes)
    assert res.metrics["scores"]["acc"] >= 0.95


# ----------------------------------------------------------------------------- the command line
def _cli(*args, timeout=600):
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_cli_missing_impute_from_the_config_file_twice_and_a_typo(table, dask_address, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('missing = "impute"\nid_column = "customer_id"\nn_landmarks = 120\n[views]\na = "a*"\nb = "b*"\n')
    args = ["run", "--input", table["path"], "--store", str(tmp_path / "s.zarr"), "--n-clusters", "3", "--config",
            str(config), "--label-key", "segment", "--random-state", "0", "--labels-out", str(tmp_path / "l.parquet"),
            "--dask-address", dask_address, "--quiet"]
    r = _cli(*args)
    rows, cells = int((table["holes"] > 0).sum()), int(table["holes"].sum())
    assert r.returncode == 0, r.stderr
    assert f"; {rows} rows with missing cells clustered ({cells} cells imputed); ACC 1.0000" in r.stdout
    again = _cli(*args)
    assert again.returncode == 0 and again.stdout.startswith("nothing to do:"), again.stdout + again.stderr
    typo = _cli("run", "--input", table["path"], "--store", str(tmp_path / "t.zarr"), "--n-clusters", "3",
                "--missing", "imput")
    assert typo.returncode == 2 and "'imput' is not one of 'refuse', 'impute'" in typo.stderr
    assert not (tmp_path / "t.zarr").exists()


def test_a_dataframe_with_a_categorical_view_and_missing_categories(table, tmp_path, dask_client):
    # The setting: numbers and a categorical view, some numbers and some categories missing.
    a, y = table["a"], table["y"]
    rng = np.random.default_rng(7)
    df = pd.DataFrame({f"a{j}": a[:, j] for j in range(5)})
    df["customer_id"] = table["ids"]
    kind = np.array(["red", "green", "blue"], dtype=object)[y]
    kind[rng.choice(y.size, 15, replace=False)] = None
    df["kind"] = kind
    views = {"numbers": "a*", "kind": ["kind"]}
    with pytest.raises(InputValidationError, match="column 'a0' has .* or pass --missing impute"):
        load_views(df, views=views, id_column="customer_id")
    loaded = load_views(df, views=views, id_column="customer_id", missing="impute")
    assert np.isnan(loaded["kind"].compute()).all(axis=1).sum() == 15  # a missing category: NaN in all indicators
    res = mkdist.cluster(df, str(tmp_path / "s.zarr"), 3, n_landmarks=100, random_state=0, views=views,
                         id_column="customer_id", missing="impute", labels_out=str(tmp_path / "l.parquet"), y_true=y)
    labels = pd.read_parquet(tmp_path / "l.parquet")
    assert len(labels) == y.size and labels["cluster"].notna().all()
    expected = np.isnan(a).sum(axis=1) + pd.isna(kind)  # a missing category is one cell, not its 3 indicators
    np.testing.assert_array_equal(labels.set_index("customer_id").loc[table["ids"], "missing_cells"], expected)
    assert res.metrics["scores"]["acc"] == 1.0
