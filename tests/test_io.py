import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from mkdist._io import load_views, views_fingerprint
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
    _check(load_views(str(tmp_path / "in.parquet"), columns={"x": ["a0", "a1", "a2"], "z": ["b0", "b1"]}), ["x", "z"], a, b)


def test_fingerprint_is_stable_and_content_sensitive(arrays):
    a, b = arrays
    f1 = views_fingerprint(load_views([a, b], chunk_rows=30))
    assert f1 == views_fingerprint(load_views([a.copy(), b.copy()], chunk_rows=30))
    c = a.copy()
    c[0, 0] += 1
    assert f1 != views_fingerprint(load_views([c, b], chunk_rows=30))


def test_mismatched_chunking_is_refused(arrays):
    a, b = arrays
    with pytest.raises(InputValidationError, match="chunked"):
        load_views([da.from_array(a, chunks=(30, -1)), da.from_array(b, chunks=(40, -1))])


def test_bad_paths(tmp_path):
    with pytest.raises(InputValidationError, match="cannot read input"):
        load_views(str(tmp_path / "missing.zarr"))
