"""Tests for mkdist.storage: one abstract suite, run on a local directory and on memory://."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
import zlib
from datetime import datetime

import dask
import dask.array as da
import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr
from fsspec.implementations.memory import MemoryFileSystem

import mkdist
from mkdist.errors import (
    DamagedStageError,
    DamagedStoreError,
    IncompleteStageError,
    SchemaVersionError,
    StoreError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
)
from mkdist.storage import GENERATION_GRACE_S, SCHEMA_VERSION, STANDARD_STAGES, RunStore
from mkdist.storage._lease import host_id, process_start

FP = "sha256:" + "0" * 64
PARAMS = {"n_clusters": 3, "kernels": [{"view": 0, "kind": "rbf"}], "tol": 1e-4, "seed": None}


class _ClockAt:
    """The ``time`` module as a module sees it, with its clock at ``unix`` (and ticking) when
    that is later than now: a test moves a store past a deadline instead of sleeping until it."""

    def __init__(self, unix: float):
        self.offset = max(0.0, unix - time.time())

    def time(self) -> float:
        return time.time() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


def _dataset(n=10, k=3, dtype=np.float64, chunks=None, seed=0):
    rng = np.random.default_rng(seed)
    H = (rng.normal(size=(n, k)) * 100).astype(dtype)
    labels = rng.integers(0, k, size=n).astype(np.int32)
    if chunks:
        H, labels = da.from_array(H, chunks=(chunks, k)), da.from_array(labels, chunks=chunks)
    return xr.Dataset({"embedding": (("sample", "component"), H), "labels": (("sample",), labels)},
                      attrs={"note": "test", "sizes": [1, 2]})


def _version(v, n=240, chunks=40):
    """Version ``v`` of a stage: every value of each of its arrays is ``v``, as is its attribute."""
    return xr.Dataset({"a": (("sample", "component"),
                             da.full((n, 3), v, dtype=np.float32, chunks=(chunks, 3))),
                       "b": (("sample",), da.full((n,), v, dtype=np.int32, chunks=chunks))},
                      attrs={"version": v})


def _poll(url, name, writing, seed=0):
    """Read stage ``name`` until ``writing()`` is false (then once more): the version of each
    whole read, and each failed or mixed read.  Each read computes its lazy arrays a little
    after opening them, so that commits fall between the two."""
    rng = np.random.default_rng(seed)
    store = RunStore.open(url)
    seen, failures = [], []
    while True:
        last = not writing()
        try:
            ds = store.read_stage(name)
            time.sleep(rng.uniform(0, 0.02))
            values = ds.compute()
            versions = {ds.attrs["version"], *np.unique(values["a"].values).tolist(),
                        *np.unique(values["b"].values).tolist()}
        except Exception as e:  # noqa: BLE001 -- every failed read is counted, whatever it raised
            failures.append(f"{type(e).__name__}: {e}")
        else:
            if len(versions) == 1:
                seen.append(int(versions.pop()))
            else:
                failures.append(f"one read mixed versions {sorted(versions)}")
        if last:
            return seen, failures


def _failing(n=12, chunks=4, bad_block=1):
    """A Dask array whose block ``bad_block`` raises when computed (a crashing worker)."""
    def block(x, block_info=None):
        if block_info[0]["chunk-location"][0] == bad_block:
            raise RuntimeError("simulated worker crash")
        return x
    return da.zeros((n,), chunks=chunks).map_blocks(block, dtype=float)


def _stage_group(store, name):
    """The group holding stage ``name``: the stage's own (local disk), or the generation its
    pointer names (other stores)."""
    fs, path = fsspec.core.url_to_fs(store.url)
    pointer = f"{path}/{name}.gen-current.json"
    if fs.exists(pointer):
        return json.loads(fs.cat_file(pointer))["generation"]
    return name


def _uncommitted(store):
    """Generations in the store that no pointer names, as current or as retired."""
    fs, path = fsspec.core.url_to_fs(store.url)
    named = set()
    found = [f[len(path) + 1:] for f in fs.find(path, withdirs=True)]
    for pointer in (f for f in found if f.endswith(".gen-current.json")):
        body = json.loads(fs.cat_file(f"{path}/{pointer}"))
        named |= {body["generation"], *(r["generation"] for r in body.get("retired", []))}
    return sorted(f for f in found if re.fullmatch(r".+\.gen-[0-9a-f]{32}", f) and f not in named)


def _wait_for(condition, timeout=5.0):
    """Poll ``condition`` until it holds (threads and processes act in the background)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


class StoreSuite:
    """Behaviour every location type must have; subclasses provide the ``url`` fixture."""

    @pytest.fixture
    def url(self):
        raise NotImplementedError

    @pytest.fixture
    def store(self, url):
        return RunStore.create(url, fingerprint=FP, params=PARAMS)

    @staticmethod
    def _files(store):
        fs, path = fsspec.core.url_to_fs(store.url)
        return [f[len(path) + 1:] for f in fs.find(path, withdirs=True) if f != path]

    # ----------------------------------------------------------- create / open
    def test_create_writes_provenance(self, store, url):
        attrs = store.attrs
        assert attrs["schema_version"] == SCHEMA_VERSION == 3
        assert attrs["layout"] == "generations"  # on local disk too
        assert attrs["mkdist_version"] == mkdist.__version__
        assert datetime.fromisoformat(attrs["created"]).utcoffset().total_seconds() == 0
        assert store.fingerprint == FP and store.params == PARAMS
        assert zarr.open_group(store.url, mode="r").metadata.zarr_format == 3
        assert RunStore.open(url).attrs == attrs

    def test_create_same_run_resumes(self, store, url):
        store.write_stage("landmarks", _dataset())
        # JSON-equal params (numpy scalar, tuple) are the same run.
        params = dict(PARAMS, n_clusters=np.int64(3), kernels=({"view": 0, "kind": "rbf"},))
        again = RunStore.create(url, fingerprint=FP, params=params)
        assert again.stage_status()["landmarks"] == "complete"
        assert again.attrs["created"] == store.attrs["created"]

    @pytest.mark.parametrize("change, match", [
        ({"fingerprint": "sha256:other"},
         r"fingerprint \(stored 'sha256:0+', given 'sha256:other'\)"),
        ({"params": dict(PARAMS, n_clusters=4)}, r"params n_clusters \(stored 3, given 4\)"),
        ({"params": dict(PARAMS, extra=1)}, r"params extra \(stored '<unset>', given 1\)"),
    ])
    def test_create_refuses_a_different_run_unless_overwrite(self, store, url, change, match):
        store.write_stage("landmarks", _dataset())
        new = {"fingerprint": FP, "params": PARAMS, **change}
        with pytest.raises(StoreExistsError, match=match):
            RunStore.create(url, **new)
        assert RunStore.open(url).stage_status()["landmarks"] == "complete"
        fresh = RunStore.create(url, **new, overwrite=True)
        assert fresh.stage_status()["landmarks"] == "missing"
        assert (fresh.fingerprint, fresh.params) == (new["fingerprint"], new["params"])

    def test_create_refuses_foreign_content(self, url):
        zarr.create_array(str(url) + "/data", shape=(3,), dtype="i4", zarr_format=3)
        with pytest.raises(StoreExistsError, match="not an mkdist run store"):
            RunStore.create(url, fingerprint=FP, params=PARAMS)
        with pytest.raises(StoreNotFoundError, match="no mkdist run store"):
            RunStore.open(url)
        store = RunStore.create(url, fingerprint=FP, params=PARAMS, overwrite=True)
        assert self._files(store) == ["zarr.json"]

    def test_newer_schema_is_refused(self, store, url):
        zarr.open_group(store.url, mode="r+").attrs["schema_version"] = SCHEMA_VERSION + 1
        for call in (lambda: RunStore.open(url),
                     lambda: RunStore.create(url, fingerprint=FP, params=PARAMS)):
            with pytest.raises(SchemaVersionError,
                               match=f"schema_version={SCHEMA_VERSION + 1}.*upgrade mkdist"):
                call()

    def test_open_missing_store(self, url):
        with pytest.raises(StoreNotFoundError, match="no mkdist run store"):
            RunStore.open(url)

    def test_read_only_store_refuses_writes(self, store, url):
        ro = RunStore.open(url, mode="r")
        for call in (lambda: ro.write_stage("labels", _dataset()), lambda: ro.update_attrs(a=1),
                     lambda: ro.clean_partials(), lambda: ro.delete_stage("labels")):
            with pytest.raises(StoreError, match="read-only"):
                call()

    # -------------------------------------------------------------- round trip
    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
    @pytest.mark.parametrize("chunks", [None, 4], ids=["numpy", "dask"])
    def test_roundtrip_is_exact(self, store, dtype, chunks):
        ds = _dataset(dtype=dtype, chunks=chunks)
        store.write_stage("embedding", ds)
        back = store.read_stage("embedding")
        xr.testing.assert_identical(back.compute(), ds.compute())
        assert back["embedding"].dtype == dtype and back["labels"].dtype == np.int32
        # What other tools see: named dimensions, no mkdist bookkeeping besides the marker.
        raw = xr.open_zarr(store.url, group=_stage_group(store, "embedding"), consolidated=False)
        assert raw["embedding"].dims == ("sample", "component")
        assert raw["labels"].dims == ("sample",)

    def test_dask_chunks_are_stored(self, store):
        ds = _dataset(n=11, chunks=4)
        ds["embedding"].encoding["chunks"] = (5, 3)  # stale encoding must not win
        store.write_stage("embedding", ds)
        arr = zarr.open_array(store.url, path=f"{_stage_group(store, 'embedding')}/embedding",
                              mode="r")
        assert arr.chunks == (4, 3)
        assert arr.metadata.dimension_names == ("sample", "component")
        assert store.read_stage("embedding")["embedding"].chunks == ((4, 4, 3), (3,))
        assert ds["embedding"].encoding == {"chunks": (5, 3)}  # input left untouched

    def test_rewrite_of_a_stage_read_back(self, store):
        store.write_stage("embedding", _dataset(chunks=4))
        back = store.read_stage("embedding")
        back.attrs["note"] = "copied"
        store.write_stage("copy", back)
        assert store.read_stage("copy").attrs == {"note": "copied", "sizes": [1, 2]}

    # ------------------------------------------------------------------ stages
    def test_stage_status(self, store):
        assert store.stage_status() == dict.fromkeys(STANDARD_STAGES, "missing")
        store.write_stage("model", _dataset())
        store.write_stage("assignments/b1", _dataset())
        _dataset().to_zarr(store.url, group=f"labels.gen-{uuid.uuid4().hex}", mode="w",
                           consolidated=False, zarr_format=3)
        status = store.stage_status()
        assert list(status) == [*STANDARD_STAGES, "assignments/b1"]
        assert (status["model"], status["labels"], status["assignments/b1"]) == (
            "complete", "incomplete", "complete")
        assert store.is_complete("model") and not store.is_complete("labels")

    def test_read_missing_stage_lists_what_exists(self, store):
        store.write_stage("model", _dataset())
        with pytest.raises(StoreNotFoundError,
                           match=r"'labels' does not exist.*model \(complete\)"):
            store.read_stage("labels")

    def test_read_unmarked_stage(self, store):
        # A writer that died after writing data but before setting the marker and pointer.
        _dataset().to_zarr(store.url, group=f"labels.gen-{uuid.uuid4().hex}", mode="w",
                           consolidated=False, zarr_format=3)
        with pytest.raises(IncompleteStageError,
                           match="did not finish.*Re-running the pipeline resumes"):
            store.read_stage("labels")

    def test_crash_during_write_leaves_nothing(self, store):
        store.write_stage("model", _dataset())
        ds = xr.Dataset({"embedding": (("sample",), _failing())})
        # The synchronous scheduler makes "nothing left behind" deterministic: with a pool,
        # blocks still running when one fails can write after the cleanup (see clean_partials).
        with dask.config.set(scheduler="synchronous"), \
                pytest.raises(RuntimeError, match="simulated"):
            store.write_stage("embedding", ds)
        assert store.stage_status()["embedding"] == "missing"
        assert _uncommitted(store) == []
        xr.testing.assert_identical(store.read_stage("model").compute(), _dataset())

    def test_existing_stage_needs_overwrite(self, store):
        store.write_stage("labels", _dataset(seed=0))
        with pytest.raises(StoreExistsError, match="'labels' is already complete.*overwrite=True"):
            store.write_stage("labels", _dataset(seed=1))
        store.write_stage("labels", _dataset(seed=1), overwrite=True)
        xr.testing.assert_identical(store.read_stage("labels").compute(), _dataset(seed=1))
        assert _uncommitted(store) == []

    def test_overwrite_with_data_read_from_the_old_stage(self, store):
        store.write_stage("model", _dataset(chunks=4))
        old = store.read_stage("model")
        store.write_stage("model", old.assign(embedding=old["embedding"] * 2), overwrite=True)
        np.testing.assert_array_equal(store.read_stage("model")["embedding"].values,
                                      _dataset()["embedding"].values * 2)

    def test_nested_stage_names(self, store):
        store.write_stage("assignments/batch-2026-11-22", _dataset(seed=0))
        store.write_stage("assignments/batch-2026-11-23", _dataset(seed=1))
        xr.testing.assert_identical(store.read_stage("assignments/batch-2026-11-23").compute(),
                                    _dataset(seed=1))
        assert store.stage_status()["assignments/batch-2026-11-22"] == "complete"
        assert "assignments" not in store.stage_status()
        with pytest.raises(StoreExistsError, match="a group of stages"):
            store.write_stage("assignments", _dataset())
        with pytest.raises(StoreExistsError, match="inside stage 'assignments/batch-2026-11-22'"):
            store.write_stage("assignments/batch-2026-11-22/x", _dataset())
        store.delete_stage("assignments/batch-2026-11-22")
        assert [n for n in store.stage_status() if n.startswith("assignments/")] == [
            "assignments/batch-2026-11-23"]

    @pytest.mark.parametrize("name", ["", "/labels", "labels/", "a//b", "..", "a/../b", ".hidden",
                                      "with space", "labels.gen-x", 3])
    def test_invalid_stage_names(self, store, name):
        with pytest.raises(ValueError, match="invalid stage name"):
            store.write_stage(name, _dataset())

    def test_delete_stage(self, store):
        store.write_stage("labels", _dataset())
        _dataset().to_zarr(store.url, group=f"labels.gen-{uuid.uuid4().hex}", mode="w",
                           consolidated=False, zarr_format=3)
        store.delete_stage("labels")
        assert store.stage_status()["labels"] == "missing"
        with pytest.raises(StoreNotFoundError, match="'labels' does not exist"):
            store.delete_stage("labels")
        store.delete_stage("labels", missing_ok=True)

    def test_clean_partials(self, store):
        store.write_stage("model", _dataset())
        pending = store.write_stage_lazy("embedding", _dataset(chunks=4))  # never computed
        assert store.stage_status()["embedding"] == "incomplete"
        assert store.clean_partials() == [pending.partial]
        assert store.stage_status()["embedding"] == "missing"
        assert store.clean_partials() == []
        assert store.is_complete("model")

    def test_clean_removes_leftovers_outside_stages(self, store):
        store.write_stage("model", _dataset())
        store.write_stage("assignments/b1", _dataset())
        fs, path = self._fs(store)
        leftovers = [f"labels.gen-{uuid.uuid4().hex}", "orphan",  # a group whose marker is lost
                     "stray", "assignments/junk.bin", f"model.gen-{uuid.uuid4().hex}"]
        for group in (leftovers[0], leftovers[1], leftovers[4]):
            _dataset().to_zarr(store.url, group=group, mode="w", consolidated=False,
                               zarr_format=3)
        zarr.create_array(f"{store.url}/stray", shape=(3,), dtype="i4", zarr_format=3)[:] = 1
        fs.pipe_file(f"{path}/assignments/junk.bin", b"x")
        assert store.stage_status()["labels"] == "incomplete"
        assert store.clean_partials() == sorted(leftovers)  # sorted as strings, like paths
        assert store.stage_status() == dict(
            dict.fromkeys(STANDARD_STAGES, "missing"), model="complete",
            **{"assignments/b1": "complete"})
        assert store.clean_partials() == []
        assert store.verify_stage("model", full=True) == []
        assert store.verify_stage("assignments/b1", full=True) == []

    def test_write_stage_lazy(self, store):
        a = store.write_stage_lazy("embedding", _dataset(chunks=4, seed=0))
        b = store.write_stage_lazy("assignments/x", _dataset(chunks=5, seed=1))
        dask.compute(a.delayed, b.delayed)  # both stages in one computation
        assert not store.is_complete("embedding")
        a.finalize(), b.finalize()
        xr.testing.assert_identical(store.read_stage("assignments/x").compute(), _dataset(seed=1))
        c = store.write_stage_lazy("labels", _dataset(chunks=4))
        c.abort()
        assert store.stage_status()["labels"] == "missing"

    def test_update_attrs(self, store, url):
        store.update_attrs(summary={"N": np.int64(10), "sizes": np.array([4, 6])})
        store.update_attrs(note="x")
        attrs = RunStore.open(url).attrs
        assert attrs["summary"] == {"N": 10, "sizes": [4, 6]} and attrs["note"] == "x"
        assert attrs["fingerprint"] == FP
        with pytest.raises(ValueError, match=r"provenance \['params'\]"):
            store.update_attrs(params={})
        with pytest.raises(TypeError, match="JSON-serialisable"):
            store.update_attrs(bad=object())

    # -------------------------------------------------------- verified stages
    @staticmethod
    def _fs(store):
        return fsspec.core.url_to_fs(store.url)

    @classmethod
    def _group(cls, store, name):
        """Absolute path of the group holding stage ``name``'s committed data."""
        return f"{cls._fs(store)[1]}/{_stage_group(store, name)}"

    def test_marker_records_what_the_stage_holds(self, store):
        store.write_stage("embedding", _dataset(n=11, chunks=4))
        fs, _ = self._fs(store)
        marker = json.loads(fs.cat_file(self._group(store, "embedding") + "/zarr.json"))[
            "attributes"]["mkdist_stage"]
        emb = marker["arrays"]["embedding"]
        assert (emb["shape"], emb["data_type"], emb["chunk_shape"], emb["n_chunks"]) == (
            [11, 3], "float64", [4, 3], 3)
        H = _dataset(n=11)["embedding"].values
        assert emb["crc32"] == [zlib.crc32(np.ascontiguousarray(H[i:i + 4]).tobytes())
                                for i in (0, 4, 8)]
        assert marker["checksum"] == "crc32" and marker["digest"].startswith("sha256:")
        assert set(marker["arrays"]) == {"embedding", "labels"}
        assert store.verify_stage("embedding", full=True) == []

    def test_checksums_cost_no_extra_pass(self, store):
        calls = []

        def block(x):
            calls.append(x.shape)
            return x

        computes = []

        def counting(dsk, keys, **kwargs):
            computes.append(1)
            return dask.threaded.get(dsk, keys, **kwargs)

        ds = _dataset(n=12, chunks=4)
        ds["embedding"] = ds["embedding"].copy(data=ds["embedding"].data.map_blocks(
            block, meta=np.empty((0, 0))))
        with dask.config.set(scheduler=counting):
            store.write_stage("embedding", ds)
        assert (len(computes), len(calls)) == (1, 3)  # one compute, each block computed once
        assert store.verify_stage("embedding", full=True) == []

    def test_roundtrip_of_encoded_variables(self, store):
        # Variables xarray encodes (times, booleans, strings, a dtype encoding, a non-index
        # coordinate): the checksums cover the stored values, and reading decodes them.
        ds = xr.Dataset(
            {"t": (("sample",), np.arange("2026-01-01", "2026-01-05", dtype="datetime64[D]")
                   .astype("datetime64[ns]")),
             "flag": (("sample",), da.from_array(np.array([True, False, True, True]), chunks=2)),
             "x": (("sample",), np.array([1.0, np.nan, 3.0, 4.0]))},
            coords={"kernel": ["rbf", "lin"], "row": (("sample",), np.arange(4) * 10)})
        ds["x"].encoding = {"dtype": "float32"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr: fixed-length strings are not in the v3 spec
            store.write_stage("model", ds)
            back = store.read_stage("model")
            xr.testing.assert_identical(back.compute(), ds)
            assert store.verify_stage("model", full=True) == []

    def test_stage_token_names_the_stored_content(self, store):
        assert store.stage_token("labels") is None
        store.write_stage("labels", _dataset(n=12, chunks=4))
        token = store.stage_token("labels")
        assert token is not None and token == RunStore.open(store.url).stage_token("labels")
        store.write_stage("labels", _dataset(n=12, chunks=4, seed=1), overwrite=True)
        rewritten = store.stage_token("labels")
        assert rewritten not in (None, token)
        fs, _ = self._fs(store)
        fs.rm_file(self._group(store, "labels") + "/labels/c/1")
        assert store.stage_token("labels") is None  # damaged: nothing read under a token is reused

    def test_deleted_chunk(self, store):
        store.write_stage("labels", _dataset(n=12, chunks=4))
        fs, _ = self._fs(store)
        fs.rm_file(self._group(store, "labels") + "/labels/c/1")
        assert store.stage_status()["labels"] == "damaged"
        assert store.stage_status(verify=None)["labels"] == "complete"
        assert not store.is_complete("labels")
        assert store.verify_stage("labels") == [
            f"stage 'labels' in {store.url}: array 'labels': 1 of 3 chunks missing: (1,)"]
        with pytest.raises(DamagedStageError, match=r"stage 'labels' in .* is damaged: array "
                                                    r"'labels': 1 of 3 chunks missing: \(1,\)"):
            store.read_stage("labels")
        # A damaged stage holds nothing worth keeping: a re-run rewrites it without overwrite.
        store.write_stage("labels", _dataset(n=12, chunks=4))
        assert store.stage_status()["labels"] == "complete"
        xr.testing.assert_identical(store.read_stage("labels").compute(), _dataset(n=12))

    @pytest.mark.parametrize("compressed, problem", [
        (True, "cannot be decoded (RuntimeError"),  # a zstd frame with a broken header
        (False, "checksum mismatch"),  # raw little-endian bytes: a changed value
    ], ids=["zstd-header", "raw-value"])
    def test_flipped_byte_in_a_chunk(self, store, compressed, problem):
        ds = _dataset(n=12, chunks=4)
        if not compressed:
            ds["embedding"].encoding["compressors"] = None
        store.write_stage("embedding", ds)
        fs, _ = self._fs(store)
        chunk = self._group(store, "embedding") + "/embedding/c/2/0"
        raw = bytearray(fs.cat_file(chunk))
        raw[0 if compressed else len(raw) // 2] ^= 0xFF
        fs.pipe_file(chunk, bytes(raw))
        assert store.stage_status()["embedding"] == "complete"  # the quick check reads no chunk
        assert store.stage_status(verify="full")["embedding"] == "damaged"
        [found] = store.verify_stage("embedding", full=True)
        assert found.startswith(f"stage 'embedding' in {store.url}: array 'embedding': "
                                  "1 of 3 chunks damaged (")
        assert found.endswith("): (2, 0)") and problem in found
        back = store.read_stage("embedding")
        np.testing.assert_array_equal(back["labels"].values, ds["labels"].values)
        np.testing.assert_array_equal(back["embedding"][:8].values, ds["embedding"][:8].values)
        with pytest.raises(DamagedStageError, match=r"stage 'embedding' in .*: array 'embedding'"
                                                    r", chunk \(2, 0\): "):
            _ = back["embedding"].values

    def test_missing_array_metadata(self, store):
        store.write_stage("model", _dataset())
        fs, _ = self._fs(store)
        fs.rm_file(self._group(store, "model") + "/embedding/zarr.json")
        assert store.stage_status()["model"] == "damaged"
        with pytest.raises(DamagedStageError, match=r"stage 'model' in .* is damaged: array "
                                                    r"'embedding': its zarr.json is missing"):
            store.read_stage("model")

    def test_metadata_rewritten_after_a_read_is_caught(self, store):
        # Reads reuse the zarr.json documents they already read while the object is unchanged
        # (same ETag, or size and mtime): an edited one is read again and checked.
        store.write_stage("model", _dataset(n=12))
        assert store.read_stage("model")["labels"].shape == (12,)
        fs, _ = self._fs(store)
        meta = self._group(store, "model") + "/labels/zarr.json"
        edited = fs.cat_file(meta).replace(b"[\n    12\n  ]", b"[\n    13\n  ]").replace(b"[12]", b"[13]")
        assert edited != fs.cat_file(meta)
        fs.pipe_file(meta, edited)
        with pytest.raises(DamagedStageError, match=r"array 'labels': shape is \[13\], the marker recorded \[12\]"):
            store.read_stage("model")

    def test_truncated_stage_metadata(self, store):
        store.write_stage("model", _dataset())
        fs, _ = self._fs(store)
        meta = self._group(store, "model") + "/labels/zarr.json"
        fs.pipe_file(meta, fs.cat_file(meta)[:40])
        with pytest.raises(DamagedStageError, match=r"stage 'model' in .*: array 'labels': its "
                                                    r"zarr.json is unreadable \(JSONDecodeError"):
            store.read_stage("model")

    def test_truncated_root_metadata(self, store, url):
        store.write_stage("model", _dataset())
        fs, path = self._fs(store)
        fs.pipe_file(f"{path}/zarr.json", fs.cat_file(f"{path}/zarr.json")[:30])
        match = rf"{re.escape(store.url)}/zarr.json, the run store's root metadata, is unreadable"
        for call in (lambda: RunStore.open(url),
                     lambda: RunStore.create(url, fingerprint=FP, params=PARAMS)):
            with pytest.raises(DamagedStoreError, match=match):
                call()
        fresh = RunStore.create(url, fingerprint=FP, params=PARAMS, overwrite=True)
        assert fresh.stage_status()["model"] == "missing"

    # ----------------------------------------------------------- snapshot reads
    def _overwriter(self, url, name, versions):
        """Start overwriting stage ``name`` with ``_version(v)`` for each v in ``versions``
        in the background; returns a callable telling whether it still writes."""
        raise NotImplementedError

    def test_reader_polling_during_overwrites_reads_whole_versions(self, store, url):
        # Issue 23: a reader polling a stage while another writer overwrites it 10 times.
        store.write_stage("model", _version(0))
        writing = self._overwriter(store.url, "model", range(1, 11))
        seen, failures = _poll(store.url, "model", writing)
        assert failures == []
        assert len(seen) >= 5 and seen[-1] == 10 and len(set(seen)) >= 2, seen
        assert seen == sorted(seen)  # the pointer only moves forward: no read goes back
        assert _uncommitted(store) == []

    def test_a_reader_keeps_the_version_it_opened(self, store, monkeypatch):
        store.write_stage("model", _version(1))
        opened = store.read_stage("model")  # lazy: nothing read yet
        group = store.stage_group("model")
        store.write_stage("model", _version(2), overwrite=True)
        assert store.read_stage("model").attrs["version"] == 2
        # Computed after the commit: still the version it opened, whole.
        assert (opened["a"].values == 1).all() and (opened["b"].values == 1).all()
        assert store.clean_partials() == []  # within the grace period: kept for such readers
        assert (opened["a"].values == 1).all()
        # Past the grace period a writer's cleanup removes it; the reader is told why.
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "0")
        assert store.clean_partials() == [group]
        with pytest.raises(StoreNotFoundError, match=(
                r"stage 'model' in .*: array 'a', chunk \(\d+, 0\): the version of the stage this "
                r"read opened was replaced by a writer and removed after its grace period")):
            _ = opened["a"].values
        assert (store.read_stage("model")["a"].values == 2).all()

    def test_commits_remove_generations_retired_past_the_grace_period(self, store, monkeypatch):
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "3")
        groups, fs, path = [], *self._fs(store)
        for v in (1, 2, 3):
            store.write_stage("model", _version(v, n=8, chunks=4), overwrite=True)
            groups.append(store.stage_group("model"))
        pointer = json.loads(fs.cat_file(f"{path}/model.gen-current.json"))
        retired = {r["generation"]: r["retired_unix"] for r in pointer["retired"]}
        assert pointer["generation"] == groups[2] and list(retired) == [groups[1], groups[0]]
        assert store.clean_partials() == [] and all(fs.exists(f"{path}/{g}") for g in groups)
        # Until 3 s after the later retirement; then the next commit removes both.  The store's
        # clock is moved past that instead of waiting for it.
        import mkdist.storage._generations as generations

        later = retired[groups[1]] + 3.05
        monkeypatch.setattr(generations, "time", _ClockAt(later))
        store.write_stage("model", _version(4, n=8, chunks=4), overwrite=True)
        assert [fs.exists(f"{path}/{g}") for g in groups] == [False, False, True]
        pointer = json.loads(fs.cat_file(f"{path}/model.gen-current.json"))
        assert [r["generation"] for r in pointer["retired"]] == [groups[2]]
        assert _uncommitted(store) == []

    def test_grace_period_setting(self, store, monkeypatch):
        assert GENERATION_GRACE_S == 600
        store.write_stage("model", _version(1, n=8, chunks=4))
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "ten minutes")
        with pytest.raises(ValueError, match=r"MKDIST_GENERATION_GRACE_S='ten minutes' is not a "
                                             r"number of seconds >= 0 \(e\.g\. 600\)"):
            store.write_stage("model", _version(2, n=8, chunks=4), overwrite=True)
        assert store.read_stage("model").attrs["version"] == 1

    def test_stage_group_is_for_other_tools(self, store):
        with pytest.raises(StoreNotFoundError, match="'model' does not exist"):
            store.stage_group("model")
        store.write_stage("model", _dataset(chunks=4))
        group = store.stage_group("model")
        assert re.fullmatch(r"model\.gen-[0-9a-f]{32}", group)
        raw = xr.open_zarr(store.url, group=group, consolidated=False)
        xr.testing.assert_equal(raw.drop_attrs().compute(), _dataset().drop_attrs())

    # ------------------------------------------------------- older schema versions
    @pytest.mark.parametrize("version", [1, 2])
    def test_older_schema_is_refused_and_left_untouched(self, store, url, version):
        # Version 2 (stages committed by directory renames) and 1 were written only by
        # development versions of mkdist: refused, never read, never migrated.
        store.write_stage("model", _dataset(chunks=4))
        zarr.open_group(store.url, mode="r+").attrs["schema_version"] = version
        fs, path = self._fs(store)

        def contents():
            return {f: fs.cat_file(f"{path}/{f}") for f in self._files(store)
                    if fs.isfile(f"{path}/{f}")}

        before = contents()
        for call in (lambda: RunStore.open(url), lambda: RunStore.open(url, mode="r+"),
                     lambda: RunStore.create(url, fingerprint=FP, params=PARAMS)):
            with pytest.raises(SchemaVersionError, match=(
                    rf"^{re.escape(store.url)} has store schema_version={version}, written by an "
                    rf"older mkdist; mkdist \S+ reads schema version {SCHEMA_VERSION} only: "
                    r"re-create the run with RunStore\.create\(\.\.\., overwrite=True\) "
                    r"\(`mkdist run --overwrite`\), or use another location\.$")):
                call()
        assert contents() == before  # nothing written, nothing deleted
        with RunStore(url, mode="r+").lease(owner="re-create"):  # the way out, under the lease
            fresh = RunStore.create(url, fingerprint=FP, params=PARAMS, overwrite=True)
        assert fresh.attrs["schema_version"] == SCHEMA_VERSION
        assert fresh.stage_status()["model"] == "missing"

    # -------------------------------------------------------------------- lease
    @classmethod
    def _put_lease(cls, store, age, **fields):
        """Write the lease of a run of another process, last heartbeat ``age`` seconds ago."""
        fs, path = cls._fs(store)
        lease = {"host": "elsewhere", "pid": 4242, "owner": "other run", "command": "mkdist run",
                 "token": uuid.uuid4().hex, "started": "2026-11-23T10:00:00+00:00",
                 "heartbeat_unix": time.time() - age, "ttl_s": 60.0, **fields}
        fs.pipe_file(f"{path}/.mkdist-lease.json", json.dumps(lease).encode())

    def test_lease_is_exclusive(self, store, url):
        with store.lease(owner="run A") as lease:
            assert lease.held and store.lease_holder().owner == "run A"
            other = RunStore.open(url, mode="r+")
            with pytest.raises(StoreLockedError, match=(
                    rf"in use by another live run: 'run A' on host "
                    rf"{re.escape(socket.gethostname())}"
                    rf" \(pid {os.getpid()}\), running since \S+, last heartbeat 0 s ago\. Taking "
                    r"its lease was refused.*Wait for that run to finish")):
                other.lease(owner="run B")
            other.write_stage("labels", _dataset())  # the holder's process writes, via any RunStore
        assert store.lease_holder() is None and not lease.held
        with store.lease(owner="run B"):  # released: free again
            pass
        assert ".mkdist-lease.json" not in self._files(store)

    def test_live_lease_of_another_process_refuses_writes(self, store, url):
        store.write_stage("labels", _dataset())
        self._put_lease(store, age=5)
        for what, call in [
            (r"RunStore\.create\(\.\.\., overwrite=True\)",
             lambda: RunStore.create(url, fingerprint=FP, params=PARAMS, overwrite=True)),
            (r"write_stage\('model'\)", lambda: store.write_stage("model", _dataset())),
            (r"delete_stage\('labels'\)", lambda: store.delete_stage("labels")),
            (r"clean_partials\(\)", lambda: store.clean_partials()),
            (r"update_attrs\(\)", lambda: store.update_attrs(note="x")),
            ("Taking its lease", lambda: store.lease()),
        ]:
            with pytest.raises(StoreLockedError, match=(
                    r"in use by another live run: 'other run' on host elsewhere \(pid 4242\), "
                    r"running since 2026-11-23T10:00:00\+00:00, last heartbeat 5 s ago\. "
                    rf"{what} was refused: one store has one writer\..*expires 55 s from now")):
                call()
        assert store.stage_status()["labels"] == "complete"
        assert RunStore.create(url, fingerprint=FP, params=PARAMS).is_complete("labels")  # resume

    def test_stale_lease_is_taken_over(self, store, url, caplog):
        self._put_lease(store, age=120)
        assert store.lease_holder() is None
        with caplog.at_level(logging.WARNING, logger="mkdist.storage"), store.lease(owner="new"):
            assert store.lease_holder().owner == "new"
            RunStore.create(url, fingerprint=FP, params=PARAMS, overwrite=True)
            assert store.lease_holder().owner == "new"  # overwrite keeps the holder's lease
        assert re.search(r"taking over the stale lease of 'other run' on host elsewhere "
                         r"\(pid 4242\), .*last heartbeat 120 s ago \(TTL 60 s\)", caplog.text)

    def test_lease_heartbeat_and_loss(self, store):
        with store.lease(ttl=30, heartbeat=0.05) as lease:
            first = store.lease_holder().heartbeat
            _wait_for(lambda: store.lease_holder().heartbeat > first)
            # Another process took the lease over (this one stalled beyond the TTL): the next
            # heartbeat notices, and this process's writes are refused from then on.
            self._put_lease(store, age=0, owner="thief")
            _wait_for(lambda: lease.lost is not None)
            assert "taken over by 'thief' on host elsewhere" in lease.lost and not lease.held
            with pytest.raises(StoreLockedError, match="'thief'"):
                store.write_stage("labels", _dataset())
        assert store.lease_holder().owner == "thief"  # releasing a lost lease leaves the new one

    @pytest.mark.parametrize("ttl, heartbeat", [(0, None), (10, 10), (10, -1)])
    def test_lease_timing_is_checked(self, store, ttl, heartbeat):
        with pytest.raises(ValueError, match="0 < heartbeat < ttl"):
            store.lease(ttl=ttl, heartbeat=heartbeat)


class TestLocalStore(StoreSuite):
    @pytest.fixture
    def url(self, tmp_path):
        return tmp_path / "run.zarr"

    def test_url_forms(self, tmp_path):
        RunStore.create(str(tmp_path / "run.zarr"), fingerprint=FP, params=PARAMS).write_stage(
            "labels", _dataset())
        for form in (tmp_path / "run.zarr", f"file://{tmp_path}/run.zarr"):
            store = RunStore.open(form)
            assert store.url == str(tmp_path / "run.zarr")
            xr.testing.assert_identical(store.read_stage("labels").compute(), _dataset())

    def test_empty_directory_is_usable(self, tmp_path):
        RunStore.create(tmp_path, fingerprint=FP, params=PARAMS)
        assert RunStore.open(tmp_path).fingerprint == FP

    def test_lease_of_a_live_then_killed_process(self, store, url, caplog):
        # A run killed with SIGKILL (a crash, the OOM killer) on this host: the next run takes
        # its lease over at once, not after the TTL (60 s here, as in `mkdist run`).
        store.write_stage("labels", _dataset())
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import time
            from mkdist.storage import RunStore
            lease = RunStore.open({str(url)!r}, mode="r+").lease("child run", ttl=60)
            print("held", flush=True)
            time.sleep(600)
            """)], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline() == "held\n"
            locked = (rf"'child run' on host \S+ \(pid {child.pid}\), running since \S+.* was "
                      rf"refused: .*Wait for that run to finish, or stop it \(process {child.pid}\)")
            for call in (lambda: RunStore.create(url, fingerprint=FP, params=PARAMS,
                                                 overwrite=True),
                         lambda: store.write_stage("labels", _dataset(seed=1), overwrite=True),
                         lambda: store.clean_partials(), lambda: store.lease()):
                with pytest.raises(StoreLockedError, match=locked):
                    call()
            child.send_signal(signal.SIGKILL)
            child.wait()
            t0 = time.monotonic()
            assert store.lease_holder() is None  # its last heartbeat is seconds old, yet it is dead
            with caplog.at_level(logging.WARNING, logger="mkdist.storage"), store.lease():
                store.write_stage("labels", _dataset(seed=1), overwrite=True)
            assert time.monotonic() - t0 < 10  # far below the 60 s TTL
            assert re.search(rf"taking over the lease of 'child run' on host \S+ \(pid {child.pid}"
                             rf"\), .*: its process \(pid {child.pid}\) is gone on this host",
                             caplog.text)
            xr.testing.assert_identical(store.read_stage("labels").compute(), _dataset(seed=1))
        finally:
            child.kill()
            child.wait()

    def test_lease_of_a_reused_pid_is_taken_over(self, store, caplog):
        # The holder's pid now runs another process (this one): its start time differs.
        self._put_lease(store, age=0, host="here", pid=os.getpid(), host_id=host_id(),
                        pid_start=str(int(process_start(os.getpid())) + 1))
        assert store.lease_holder() is None
        with caplog.at_level(logging.WARNING, logger="mkdist.storage"), store.lease():
            store.write_stage("labels", _dataset())
        assert f"its pid {os.getpid()} now belongs to another process" in caplog.text

    def test_lease_of_a_dead_process_on_another_host_waits_for_the_ttl(self, store):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        # Same pid space for all we know from the host name, but another kernel (boot id):
        # its pid says nothing here, and only the TTL frees the store.
        self._put_lease(store, age=5, pid=gone.pid, host_id="elsewhere/other-boot/pid:[1]",
                        pid_start="1")
        with pytest.raises(StoreLockedError, match=r"\(pid \d+\).*expires 55 s from now"):
            store.lease()
        self._put_lease(store, age=120, pid=gone.pid, host_id="elsewhere/other-boot/pid:[1]",
                        pid_start="1")
        with store.lease():
            pass

    def _overwriter(self, url, name, versions):
        # A real second process, as a scheduled `assign` reading while a refit writes.
        script = textwrap.dedent(f"""
            import time
            from mkdist.storage import RunStore
            from tests.test_storage import _version
            store = RunStore.open({url!r}, mode="r+")
            for v in {list(versions)!r}:
                store.write_stage({name!r}, _version(v), overwrite=True)
                time.sleep(0.05)
            """)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        writer = subprocess.Popen([sys.executable, "-c", script], cwd=root,
                                  env={**os.environ, "DASK_SCHEDULER": "threads"})
        self._processes.append(writer)
        return lambda: writer.poll() is None

    @pytest.fixture(autouse=True)
    def _reap(self):
        self._processes = []
        yield
        for proc in self._processes:
            proc.kill()
            proc.wait()
            assert proc.returncode in (0, -signal.SIGKILL)

    def test_a_removed_version_is_named_on_a_distributed_cluster(self, dask_client, store,
                                                                 monkeypatch):
        # The worker process that finds the version gone raises StoreNotFoundError; the
        # client must get that error, not a bare Exception holding its text.
        store.write_stage("model", _version(1))
        opened = store.read_stage("model")
        store.write_stage("model", _version(2), overwrite=True)
        assert (opened["b"].values == 1).all()  # read by the workers, within the grace period
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "0")
        store.clean_partials()
        with pytest.raises(StoreNotFoundError, match="replaced by a writer and removed"):
            _ = opened["b"].values

    def test_write_on_distributed_cluster(self, dask_client, store):
        ds = _dataset(n=40, chunks=10)
        store.write_stage("embedding", ds)
        xr.testing.assert_identical(store.read_stage("embedding").compute(), ds.compute())


class TestMemoryStore(StoreSuite):
    @pytest.fixture
    def url(self):
        url = f"memory://mkdist-tests/{uuid.uuid4().hex}/run.zarr"
        # memory:// lives in this process: keep Dask off a session-wide distributed client,
        # whose worker processes would write to (and read from) their own memory.
        with dask.config.set(scheduler="threads"):
            yield url
        fs, path = fsspec.core.url_to_fs(url)
        if fs.exists(path):
            fs.rm(path, recursive=True)

    def _overwriter(self, url, name, versions):
        def write():
            store = RunStore.open(url, mode="r+")
            for v in versions:
                store.write_stage(name, _version(v), overwrite=True)
                time.sleep(0.05)
        writer = threading.Thread(target=write)
        writer.start()
        return writer.is_alive

    @pytest.fixture
    def flaky_url(self):
        fsspec.register_implementation("flakymem", _FlakyMemoryFileSystem, clobber=True)
        url = f"flakymem://mkdist-tests/{uuid.uuid4().hex}/run.zarr"
        with dask.config.set(scheduler="threads"):
            yield url
        _FlakyMemoryFileSystem.budget = None
        fs, path = fsspec.core.url_to_fs(url)
        fs.rm(path, recursive=True)

    def test_failure_at_any_point_of_a_commit_keeps_the_previous_generation(self, flaky_url,
                                                                            monkeypatch):
        # No grace period: the commit also deletes the generation it replaces, and the store
        # going down during that deletion is one of the points covered.
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "0")
        store = RunStore.create(flaky_url, fingerprint=FP, params=PARAMS)
        old, new = _dataset(n=12, chunks=4, seed=0), _dataset(n=12, chunks=4, seed=1)
        store.write_stage("model", old)
        committed = self._files(store)
        # The store goes down after `budget` more writes (deletes fail too, as they would on
        # an unreachable store), then comes back: at every point of an overwrite.
        for budget in range(40):
            _FlakyMemoryFileSystem.budget = budget
            try:
                store.write_stage("model", new, overwrite=True)
            except OSError as e:
                assert "injected failure" in str(e)
            else:
                break
            finally:
                _FlakyMemoryFileSystem.budget = None
            assert store.stage_status(verify="full")["model"] == "complete"
            xr.testing.assert_identical(store.read_stage("model").compute(), old)
            store.clean_partials()
            assert self._files(store) == committed  # leftovers gone, old generation untouched
        else:
            pytest.fail("the write never succeeded")
        assert budget > 10  # the loop went through the data writes, the marker and the pointer
        xr.testing.assert_identical(store.read_stage("model").compute(), new)
        store.clean_partials()  # the old generation, if the store went down deleting it
        top = [f for f in self._files(store) if "/" not in f]
        assert sorted(top) == sorted([_stage_group(store, "model"), "model.gen-current.json",
                                      "zarr.json"])

    @pytest.mark.parametrize("overwrite", [True, False])
    def test_concurrent_commits_never_mix_writers(self, store, overwrite, monkeypatch):
        monkeypatch.setenv("MKDIST_GENERATION_GRACE_S", "0")  # keep no replaced generation
        if overwrite:
            store.write_stage("labels", _dataset(n=12, chunks=4, seed=9))
        both_writing = threading.Barrier(2, timeout=10)

        def writer(seed):
            def block(x):
                both_writing.wait()  # each writer's first block waits for the other's
                return x
            ds = _dataset(n=12, chunks=12, seed=seed)
            ds["labels"] = ds["labels"].copy(data=ds["labels"].data.map_blocks(
                block, meta=np.empty((0,), np.int32)))
            try:
                RunStore.open(store.url, mode="r+").write_stage("labels", ds, overwrite=overwrite)
                return seed
            except StoreExistsError as e:
                return e

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(writer, [1, 2]))
        winners = [r for r in results if isinstance(r, int)]
        if not overwrite:  # creating a stage: one writer wins, the other is told
            [loser] = [r for r in results if isinstance(r, Exception)]
            assert re.search("committed .* by another writer|already complete", str(loser))
        back = store.read_stage("labels").compute()
        assert any(back.identical(_dataset(n=12, seed=s)) for s in winners)
        assert store.verify_stage("labels", full=True) == []
        store.clean_partials()
        top = [f for f in self._files(store) if "/" not in f]
        assert sorted(top) == sorted([_stage_group(store, "labels"), "labels.gen-current.json",
                                      "zarr.json"])


class _FlakyMemoryFileSystem(MemoryFileSystem):
    """memory:// that goes down after ``budget`` more writes: every write and delete fails
    until ``budget`` is reset to None.  Shares memory://'s storage."""

    protocol = "flakymem"
    budget: int | None = None

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("flakymem://"))

    @classmethod
    def _check(cls, writing):
        if cls.budget is not None:
            if cls.budget <= 0:
                raise OSError("injected failure: the store is unreachable")
            cls.budget -= writing

    def _open(self, path, mode="rb", **kwargs):
        if set(mode) & set("wxa"):
            self._check(True)
        return super()._open(path, mode, **kwargs)

    def rm_file(self, path):
        self._check(False)
        return super().rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        self._check(False)
        return super().rm(path, recursive, maxdepth)


def test_a_stage_the_network_fails_for_is_not_called_damaged(unreachable):
    """A chunk read that fails to reach the storage raises that error: the stage is not
    reported damaged (a run would drop and recompute it, a person would delete it), neither by
    a verified read nor by a full verification."""
    with dask.config.set(scheduler="synchronous"):  # this process's memory: no worker process reaches it
        store = RunStore.create("flaky://s/run.zarr", fingerprint=FP, params=PARAMS)
        store.write_stage("labels", xr.Dataset({"labels": ("sample", da.arange(30, chunks=10))}))
        assert RunStore.open("flaky://s/run.zarr").stage_status(verify="full")["labels"] == "complete"
        unreachable.fail("/labels/c/1")
        with pytest.raises(ConnectionError, match="connection reset by peer"):
            RunStore.open("flaky://s/run.zarr").read_stage("labels")["labels"].load()
        with pytest.raises(ConnectionError, match="connection reset by peer"):
            RunStore.open("flaky://s/run.zarr").stage_status(verify="full")
        unreachable.rules.clear()  # the network back: the stage was never damaged
        got = RunStore.open("flaky://s/run.zarr").read_stage("labels")["labels"].values
    np.testing.assert_array_equal(got, np.arange(30))


def test_reaching_the_storage_failed_is_told_through_the_causes():
    from mkdist.storage._faults import reaching_storage_failed

    try:
        try:
            raise TimeoutError("read timed out")
        except TimeoutError as e:
            raise RuntimeError("zarr could not get the chunk") from e
    except RuntimeError as wrapped:
        assert reaching_storage_failed(wrapped)
    assert reaching_storage_failed(PermissionError("denied"))
    assert not reaching_storage_failed(ValueError("not a codec"))
    assert not reaching_storage_failed(FileNotFoundError("gone"))
