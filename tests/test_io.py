import collections

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask.core import get_dependencies

from mkdist._pipeline._io import load_views, scan_views, views_fingerprint
from mkdist.errors import InputValidationError


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(100, 3)).astype(np.float32), rng.normal(size=(100, 2)).astype(np.float32)


def _check(views, names, a, b):
    assert list(views) == names
    for v in views.values():
        assert isinstance(v, da.Array) and v.numblocks[1] == 1
    chunks = {v.chunks[0] for v in views.values()}
    assert len(chunks) == 1
    np.testing.assert_array_equal(views[names[0]].compute(), a)
    np.testing.assert_array_equal(views[names[1]].compute(), b)


def test_numpy_and_dask_inputs(arrays):
    a, b = arrays
    _check(load_views([a, b], chunk_rows=30), ["view0", "view1"], a, b)
    _check(load_views({"x": da.from_array(a, chunks=(25, 2)), "z": da.from_array(b, chunks=(25, 2))}), ["x", "z"], a, b)


def test_xarray_zarr_npz_npy_parquet(arrays, tmp_path):
    a, b = arrays
    ds = xr.Dataset({"x": (("sample", "fx"), a), "z": (("sample", "fz"), b), "y": (("sample",), np.arange(100))})
    _check(load_views(ds), ["x", "z"], a, b)
    ds.chunk({"sample": 40}).to_zarr(tmp_path / "in.zarr", consolidated=False, zarr_format=3)
    v = load_views(str(tmp_path / "in.zarr"))
    _check(v, ["x", "z"], a, b)
    assert v["x"].chunks[0] == (40, 40, 20)
    np.savez(tmp_path / "in.npz", x=a, z=b, y=np.arange(100))
    _check(load_views(str(tmp_path / "in.npz")), ["x", "z"], a, b)
    np.save(tmp_path / "in.npy", a)
    assert load_views(str(tmp_path / "in.npy"))["view0"].shape == (100, 3)
    df = pd.DataFrame(np.c_[a, b], columns=["a0", "a1", "a2", "b0", "b1"])
    df.to_parquet(tmp_path / "in.parquet")
    views = {"x": ["a0", "a1", "a2"], "z": ["b0", "b1"]}
    _check(load_views(str(tmp_path / "in.parquet"), views=views), ["x", "z"], a, b)


def test_fingerprint_is_stable_and_content_sensitive(arrays):
    a, b = arrays
    f1 = views_fingerprint(load_views([a, b], chunk_rows=30))
    assert f1 == views_fingerprint(load_views([a.copy(), b.copy()], chunk_rows=30))
    c = a.copy()
    c[0, 0] += 1
    assert f1 != views_fingerprint(load_views([c, b], chunk_rows=30))


def test_scan_reads_the_landmark_rows_in_the_task_of_their_chunk(arrays, tmp_path):
    # A gather computed beside the scan made every chunk holding a landmark a task with two
    # consumers, and the scheduler ran the gather after the whole pass: the workers held
    # every input chunk until the end (at 10M W1 rows, 1.2 GiB per worker).
    a, b = arrays
    xr.Dataset({"x": (("sample", "fx"), a), "z": (("sample", "fz"), b)}).chunk({"sample": 10}).to_zarr(
        tmp_path / "in.zarr", consolidated=False, zarr_format=3)
    views = load_views(str(tmp_path / "in.zarr"))
    graphs = []

    def recording_get(expr, keys, **kwargs):
        graphs.append(dict(expr.__dask_graph__()))
        return dask.get(expr, keys, **kwargs)

    idx = np.array([3, 5, 9, 55, 95, 99])  # some chunks hold none
    with dask.config.set(scheduler=recording_get):
        stats, rows = scan_views(views, gather=idx)
    graph = graphs[-1]
    consumers = collections.Counter(d for k in graph for d in get_dependencies(graph, k))
    inputs = {v.name for v in views.values()}
    assert not [k for k, n in consumers.items() if isinstance(k, tuple) and k[0] in inputs and n > 1]
    np.testing.assert_array_equal(rows["x"], a[idx])
    np.testing.assert_array_equal(rows["z"], b[idx])
    assert rows["x"].dtype == a.dtype
    assert stats == scan_views(views)  # the same statistics as a scan without landmarks
    np.testing.assert_allclose(stats["x"]["mean"], a.astype(np.float64).mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(stats["z"]["std"], b.astype(np.float64).std(axis=0), rtol=1e-9)


def test_mismatched_chunking_is_refused(arrays):
    a, b = arrays
    with pytest.raises(InputValidationError, match="chunked"):
        load_views([da.from_array(a, chunks=(30, -1)), da.from_array(b, chunks=(40, -1))])


def test_bad_paths(tmp_path):
    with pytest.raises(InputValidationError, match="not found: .*missing.zarr"):
        load_views(str(tmp_path / "missing.zarr"))


def test_a_labels_output_is_replaced_only_by_the_run_whose_store_wrote_it(tmp_path):
    """A resumed run (not finished: no mark to match yet) replaces the labels its own store wrote
    before its later stages were lost; another store's labels are refused."""
    from mkdist._pipeline._io import check_labels_out, write_labels_parquet
    from mkdist.errors import StoreExistsError

    out = tmp_path / "labels.parquet"
    mark = {"store": str(tmp_path / "run.zarr"), "fingerprint": "sha256:0", "labels": "t0"}
    labels, distance = da.zeros(4, chunks=2, dtype=np.int32), da.zeros(4, chunks=2)
    write_labels_parquet(out, labels, distance, list(da.arange(4, chunks=2).to_delayed()), mark=mark,
                         compute=lambda parts: dask.compute(parts, scheduler="sync"))
    assert check_labels_out(out, False, mark) == "skip"
    assert check_labels_out(out, False, None, store=tmp_path / "run.zarr") == "replace"
    with pytest.raises(StoreExistsError, match="holds the labels of the run in"):
        check_labels_out(out, False, None, store=tmp_path / "other.zarr")


def test_scan_moments_equal_the_whole_chunk_sums_with_and_without_nan():
    """The scan's partial (sums over cache-sized steps, masks only for a view whose sums are not
    finite) equals the definition: sums over the finite cells, NaN and inf counts per column,
    rows missing in every view."""
    from mkdist._pipeline import _io

    rng = np.random.default_rng(0)
    n = 2 * _io._MOMENT_ROWS + 37  # three steps, the last one short
    clean = [rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, 2))]
    dirty = [clean[0].copy(), clean[1].copy()]
    dirty[0][5, 1] = np.nan
    dirty[1][n - 1, 0] = np.inf
    dirty[1][7, 1] = -np.inf
    dirty[0][9], dirty[1][9] = np.nan, np.nan  # a row with no value anywhere
    dirty[0][11, :] = np.nan  # missing in one view only

    def definition(blocks, shifts):
        parts = []
        for X, s in zip(blocks, shifts):
            Z = X.astype(np.float64) - s
            finite = np.isfinite(Z)
            Zf = np.where(finite, Z, 0.0)
            parts += [Zf.sum(0), (Zf**2).sum(0), np.abs(Zf).sum(0), np.isnan(Z).sum(0), np.isinf(Z).sum(0)]
        everywhere = np.all(np.isnan(blocks[0]), axis=1) & np.all(np.isnan(blocks[1]), axis=1)
        return np.concatenate(parts + [[everywhere.sum()]])

    for blocks in (clean, dirty, [dirty[0], clean[1]]):
        shifts = [np.nan_to_num(b[0].astype(np.float64)) for b in blocks]
        np.testing.assert_allclose(_io._moments(blocks, shifts), definition(blocks, shifts), rtol=1e-12, atol=1e-9)
    got = _io._moments(dirty, [np.zeros(3), np.zeros(2)])
    assert got[-1] == 1 and got[3 * 3:4 * 3].tolist() == [2, 3, 2]  # rows 9 and 11, and (5, 1): NaN per column


def _plain_zarr(url: str) -> None:
    """A Zarr group of plain 2-D arrays (no dimension names): the plain-array reading."""
    import zarr

    group = zarr.open_group(url, mode="w")
    group.create_array("a", data=np.ones((10, 3), np.float32))
    group.create_array("b", data=np.zeros((10, 2), np.float32))


def test_a_zarr_input_the_network_fails_for_raises_that_error_not_another_formats(unreachable):
    """A connection error while a Zarr input is opened is that error: not "not a Zarr group"
    (opening the group, reading its metadata before work) and not the plain-array reading
    (xarray's open, which took any error for "no dimension names")."""
    from mkdist._pipeline._io import InputSource

    _plain_zarr("flaky://plain")
    assert list(load_views("flaky://plain")) == ["a", "b"]  # readable, as plain arrays
    assert InputSource("flaky://plain").open().shapes == {"a": 3, "b": 2}
    for first in (1, 2):  # the group's open; xarray's, after the group opened
        unreachable.fail("plain/zarr.json", from_read=first)
        with pytest.raises(ConnectionError, match="connection reset by peer"):
            load_views("flaky://plain")
    unreachable.fail("plain/zarr.json", from_read=1)
    with pytest.raises(ConnectionError, match="connection reset by peer"):
        InputSource("flaky://plain").open()


def test_what_is_not_a_zarr_group_is_still_refused_as_one(tmp_path):
    from mkdist._pipeline._io import InputSource

    (tmp_path / "notes.zarr").mkdir()
    (tmp_path / "notes.zarr" / "zarr.json").write_text("{not json")
    for path in (tmp_path / "empty.zarr", tmp_path / "notes.zarr"):
        path.mkdir(exist_ok=True)
        with pytest.raises(InputValidationError, match="Zarr group"):
            load_views(str(path))
        with pytest.raises(InputValidationError, match="Zarr group"):
            InputSource(str(path)).open()


def test_a_labels_output_the_network_fails_for_is_not_taken_for_another_file(unreachable):
    """Which run wrote a labels output: a read that fails is raised (it was "a file mkdist did
    not write", which --overwrite replaces); a file that is not Parquet is still nobody's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mkdist._pipeline._io import labels_out_owner

    with unreachable.fs.open("/out/labels.parquet", "wb") as f:
        pq.write_table(pa.table({"id": [1]}).replace_schema_metadata({"mkdist": "{\"store\": \"s\"}"}), f)
    unreachable.fs.pipe("/out/notes.parquet", b"not parquet")
    assert labels_out_owner("flaky://out/notes.parquet") == {}
    assert labels_out_owner("flaky://out/labels.parquet") == {"store": "s"}
    unreachable.fail("labels.parquet")
    with pytest.raises(ConnectionError, match="connection reset by peer"):
        labels_out_owner("flaky://out/labels.parquet")
