"""One store test suite, run against a local directory and an fsspec memory:// store."""

import uuid

import dask
import dask.array as da
import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr

from mkdist.errors import IncompleteStageError, SchemaVersionError, StoreExistsError, StoreNotFoundError
from mkdist.storage import SCHEMA_VERSION, RunStore


def _ds(n=10, chunk=4):
    return xr.Dataset({
        "embedding": (("sample", "component"), da.arange(n * 3, chunks=chunk * 3).reshape(n, 3).astype(np.float32)),
        "labels": (("sample",), np.arange(n, dtype=np.int64) % 3),
    })


class StoreSuite:
    @pytest.fixture
    def url(self):
        raise NotImplementedError

    def test_create_reopen_and_refuse(self, url):
        s = RunStore.create(url, fingerprint="fp1", params={"k": 3})
        assert s.attrs["schema_version"] == SCHEMA_VERSION and s.params == {"k": 3}
        s.write_stage("landmarks", _ds())
        again = RunStore.create(url, fingerprint="fp1", params={"k": 3})
        assert again.is_complete("landmarks")  # same run: resumed, nothing deleted
        with pytest.raises(StoreExistsError, match=r"k: 3 -> 4"):
            RunStore.create(url, fingerprint="fp1", params={"k": 4})
        with pytest.raises(StoreExistsError, match="fingerprint"):
            RunStore.create(url, fingerprint="fp2", params={"k": 3})
        fresh = RunStore.create(url, fingerprint="fp2", params={"k": 3}, overwrite=True)
        assert fresh.stage_status()["landmarks"] == "missing"

    def test_round_trip_named_dims_and_chunks(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        ds = _ds()
        s.write_stage("embedding", ds)
        back = s.read_stage("embedding")
        assert back["embedding"].dims == ("sample", "component")
        np.testing.assert_array_equal(back["embedding"].values, ds["embedding"].values)
        np.testing.assert_array_equal(back["labels"].values, ds["labels"].values)
        assert back["embedding"].encoding["chunks"] == (4, 3)
        assert back["embedding"].dtype == np.float32

    def test_stage_exists_and_overwrite(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        s.write_stage("model", _ds())
        with pytest.raises(StoreExistsError, match="complete"):
            s.write_stage("model", _ds())
        s.write_stage("model", _ds(n=6), overwrite=True)
        assert s.read_stage("model").sizes["sample"] == 6
        assert s.clean_partials() == []

    def test_crash_inside_write_leaves_no_stage(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        s.write_stage("model", _ds())

        def boom(block):
            raise RuntimeError("block failed")

        bad = xr.Dataset({"embedding": (("sample", "component"),
                                        da.ones((10, 3), chunks=(4, 3)).map_blocks(boom, dtype=float))})
        with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="block failed"):
            s.write_stage("embedding", bad)
        assert s.stage_status()["embedding"] == "missing"
        assert s.is_complete("model")
        assert s.clean_partials() == []

    def test_incomplete_and_missing_stages(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        # A writer that died after writing data but before the marker: a group without it.
        _ds().to_zarr(s._zarr_url, group="labels.partial-dead", mode="w", consolidated=False, zarr_format=3)
        _ds().to_zarr(s._zarr_url, group="embedding", mode="w", consolidated=False, zarr_format=3)
        status = s.stage_status()
        assert status["labels"] == "incomplete" and status["embedding"] == "incomplete"
        with pytest.raises(IncompleteStageError, match="did not finish"):
            s.read_stage("embedding")
        with pytest.raises(StoreNotFoundError, match="metrics"):
            s.read_stage("metrics")
        assert s.clean_partials() == ["labels.partial-dead"]
        assert s.stage_status()["labels"] == "missing"

    def test_nested_stage_names(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        s.write_stage("assignments/2026-11-22", _ds())
        assert s.stage_status()["assignments/2026-11-22"] == "complete"
        assert s.read_stage("assignments/2026-11-22").sizes["sample"] == 10

    def test_newer_schema_refused(self, url):
        s = RunStore.create(url, fingerprint="fp", params={})
        zarr.open_group(s._zarr_url, mode="r+").attrs["schema_version"] = SCHEMA_VERSION + 1
        with pytest.raises(SchemaVersionError, match="upgrade mkdist"):
            RunStore.open(url)
        with pytest.raises(SchemaVersionError):
            RunStore.create(url, fingerprint="fp", params={})

    def test_open_missing_and_read_only(self, url):
        with pytest.raises(StoreNotFoundError):
            RunStore.open(url)
        RunStore.create(url, fingerprint="fp", params={})
        with pytest.raises(Exception, match="read-only"):
            RunStore.open(url, mode="r").write_stage("x", _ds())

    def test_foreign_directory_refused(self, url):
        fs, path = fsspec.core.url_to_fs(url)
        fs.mkdirs(path, exist_ok=True)
        fs.pipe_file(path + "/precious.txt", b"do not delete")
        with pytest.raises(StoreExistsError, match="not an mkdist store"):
            RunStore.create(url, fingerprint="fp", params={})
        assert fs.cat_file(path + "/precious.txt") == b"do not delete"


class TestLocalStore(StoreSuite):
    @pytest.fixture
    def url(self, tmp_path):
        return str(tmp_path / "run.zarr")


class TestMemoryStore(StoreSuite):
    @pytest.fixture
    def url(self):
        url = f"memory://mkdist-tests/{uuid.uuid4().hex}.zarr"
        yield url
        fs, path = fsspec.core.url_to_fs(url)
        if fs.exists(path):
            fs.rm(path, recursive=True)
