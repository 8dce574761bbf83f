"""Results where data engineers want them: xarray inputs with coordinates, labels as Parquet
keyed by the input's ids, drift of new batches against the fit."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import mkdist
from mkdist._pipeline._drift import DEFAULT_THRESHOLDS, drift_statistics
from mkdist._pipeline._io import load_ids
from mkdist.errors import InputValidationError, StoreExistsError
from mkdist.storage import RunStore

from .conftest import make_blobs_views


def _dataset(views, y, ids):
    """As an xarray user writes it: a dimension coordinate, a non-dimension coordinate,
    attributes, a label variable."""
    return xr.Dataset(
        {"pix": (("sample", "f_pix"), views[0]), "fac": (("sample", "f_fac"), views[1]), "y": (("sample",), y)},
        coords={"sample": ids, "site": ("sample", np.array(["a", "b"])[np.arange(len(ids)) % 2]),
                "f_pix": np.arange(views[0].shape[1])},
        attrs={"source": "test", "version": 2})


def test_coordinates_are_never_views(tmp_path):
    views, y = make_blobs_views(n_per_cluster=20, n_clusters=3, seed=1)
    ds = _dataset(views, y, ids=np.arange(1000, 1060))
    for source in (ds, ds.chunk({"sample": 25})):
        got = mkdist.load_views(source)
        assert list(got) == ["pix", "fac"]
    path = tmp_path / "in.zarr"
    ds.chunk({"sample": 25}).to_zarr(path, consolidated=False, zarr_format=3)
    got = mkdist.load_views(str(path))
    assert sorted(got) == ["fac", "pix"]
    np.testing.assert_array_equal(got["pix"].compute(), views[0])
    ids = load_ids(str(path), "sample", got)  # one lazy block per row chunk
    np.testing.assert_array_equal(np.concatenate(dask.compute(*ids)), np.arange(1000, 1060))
    with pytest.raises(InputValidationError, match="'shop' is not a column"):
        load_ids(str(path), "shop", got)


@pytest.fixture(scope="module")
def fitted_run(dask_client, tmp_path_factory):
    """A finished run on a Zarr dataset whose rows carry ids (a 'sample' coordinate)."""
    views, y = make_blobs_views(n_per_cluster=300, n_clusters=3, seed=3, dtype=np.float32)
    root = tmp_path_factory.mktemp("outputs")
    src = root / "train.zarr"
    _dataset(views, y, ids=np.arange(5000, 5900)).chunk({"sample": 250}).to_zarr(src, consolidated=False,
                                                                                  zarr_format=3)
    store = root / "run.zarr"
    out = root / "labels.parquet"
    res = mkdist.cluster(str(src), str(store), 3, n_landmarks=200, random_state=0, labels_out=str(out),
                         id_column="sample")
    return {"root": root, "src": src, "store": store, "labels_out": out, "views": views, "y": y, "res": res}


def test_labels_out_round_trips_with_the_input_ids(fitted_run):
    out, res = fitted_run["labels_out"], fitted_run["res"]
    labels = res.labels.compute()
    for frame in (pd.read_parquet(out), dd.read_parquet(out).compute()):
        frame = frame.reset_index(drop=True)
        assert list(frame.columns) == ["sample", "cluster", "distance"]
        np.testing.assert_array_equal(frame["sample"], np.arange(5000, 5900))
        np.testing.assert_array_equal(frame["cluster"], labels)
        assert (frame["distance"] >= 0).all()
    # Written by this run: asked again, it is left as it is (not refused, not rewritten).
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    assert mkdist.pipeline.write_labels_out(fitted_run["store"], out, str(fitted_run["src"]),
                                            id_column="sample") == str(out)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before
    assert not list(fitted_run["root"].glob("*.partial-*"))


def test_labels_out_of_another_run_or_file_is_refused_unless_overwrite(fitted_run, tmp_path):
    other = tmp_path / "labels.parquet"
    pd.DataFrame({"x": [1, 2]}).to_parquet(other)
    with pytest.raises(StoreExistsError, match="holds a file mkdist did not write; pass --overwrite"):
        mkdist.pipeline.write_labels_out(fitted_run["store"], other, str(fitted_run["src"]), id_column="sample")
    assert list(pd.read_parquet(other).columns) == ["x"]
    mkdist.pipeline.write_labels_out(fitted_run["store"], other, str(fitted_run["src"]), id_column="sample",
                                     overwrite=True)
    assert list(pd.read_parquet(other).columns) == ["sample", "cluster", "distance"]


def test_labels_out_without_an_id_column_keys_rows_by_position(fitted_run, tmp_path):
    out = tmp_path / "by_row.parquet"
    mkdist.pipeline.write_labels_out(fitted_run["store"], out, str(fitted_run["src"]))
    frame = pd.read_parquet(out)
    np.testing.assert_array_equal(frame["row"], np.arange(900))


def _batch(views, y, *, shift_view=None, proportions=None, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.arange(len(y))
    if proportions is not None:  # resample the rows so clusters have these shares
        idx = np.concatenate([rng.choice(np.flatnonzero(y == c), int(p * len(y))) for c, p in enumerate(proportions)])
    out = [v[idx].copy() for v in views]
    if shift_view is not None:
        out[shift_view] = out[shift_view] + out[shift_view].std(axis=0)  # every feature moved by 1 sd
    return {"pix": out[0], "fac": out[1]}


def test_drift_is_near_zero_for_a_like_batch_and_raised_for_shifted_ones(fitted_run, tmp_path):
    # New rows of the fit's distribution: the same cluster centres (seed 3), other noise draws.
    views, y = make_blobs_views(n_per_cluster=600, n_clusters=3, seed=3, dtype=np.float32)
    views, y = [v[900:] for v in views], y[900:]
    store = str(fitted_run["store"])
    like = mkdist.assign(store, _batch(views, y), str(tmp_path / "like.zarr"), labels_out=tmp_path / "like.pq")
    d = like.attrs["drift"]
    assert not d["drifted"], d["reasons"]
    assert d["share_beyond_fit_p99"] < 0.03 and d["cluster_tv"] < 0.05
    assert all(v["mean_shift_sd"] < 0.1 and abs(v["scale_ratio"] - 1) < 0.1 for v in d["views"].values())
    shifted = mkdist.assign(store, _batch(views, y, shift_view=0), str(tmp_path / "shift.zarr")).attrs["drift"]
    assert shifted["drifted"] and shifted["views"]["pix"]["mean_shift_sd"] == pytest.approx(1.0, abs=0.1)
    assert any("view 'pix'" in r for r in shifted["reasons"])
    swapped = mkdist.assign(store, _batch(views, y, proportions=(0.7, 0.2, 0.1)),
                            str(tmp_path / "swap.zarr")).attrs["drift"]
    assert swapped["drifted"] and swapped["cluster_tv"] > 0.3 and swapped["cluster_psi"] > 0.2
    stored = RunStore.open(str(tmp_path / "like.zarr")).read_stage("labels")
    assert set(stored.data_vars) == {"labels", "distance"}
    # The assignment report: distances against the fit's p99, the cluster shift, the drift table.
    page = (tmp_path / "swap.zarr.report.html")
    mkdist.pipeline.write_report(str(tmp_path / "swap.zarr"))
    html = page.read_text()
    assert html.count('src="data:image/png;base64,') >= 3 and "DRIFT" in html and "total variation" in html


def test_drift_statistics_by_hand():
    fit = {"v": {"mean": [0.0, 0.0], "std": [1.0, 2.0]}}
    batch = {"v": {"mean": [1.0, 1.0], "std": [1.0, 2.0]}}
    d = drift_statistics(fit_stats=fit, batch_stats=batch, fitted_sizes=[50, 50], batch_sizes=[50, 50],
                         share_beyond_fit_p99=0.01)
    assert d["views"]["v"]["mean_shift_sd"] == pytest.approx(0.75) and d["cluster_tv"] == 0.0
    assert d["drifted"] and d["thresholds"] == DEFAULT_THRESHOLDS
    d = drift_statistics(fit_stats=fit, batch_stats=fit, fitted_sizes=[50, 50], batch_sizes=[90, 10],
                         share_beyond_fit_p99=0.0, thresholds={"cluster_tv": 0.5})
    assert d["cluster_tv"] == pytest.approx(0.4) and not any("total variation" in r for r in d["reasons"])
    with pytest.raises(InputValidationError, match="unknown drift threshold 'tv'"):
        drift_statistics(fit_stats=fit, batch_stats=fit, fitted_sizes=[1], batch_sizes=[1],
                         share_beyond_fit_p99=0.0, thresholds={"tv": 1})
