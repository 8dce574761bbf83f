"""Readers of array inputs: in-memory arrays, xarray Datasets, .npy/.npz files and Zarr groups as
row-chunked Dask views, their shapes from metadata only, and a location's file listing (tables:
:mod:`._tables`; DataFrames: :mod:`._frames`)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mkdist.storage._remote import options_for

from .._core._blocks import align_row_chunks
from .._core._validation import as_views, is_dask_array
from ..errors import InputValidationError

#: Target bytes per row chunk of the widest view when mkdist chooses the chunking
#: (NumPy input, .npy/.npz files): big enough to amortise task overhead, small enough
#: that a worker holds a handful at once.
DEFAULT_CHUNK_BYTES = 32 * 2**20


#: Names never treated as views in .npz files / datasets (labels shipped beside the data).
LABEL_NAMES = ("y", "labels", "y5", "cat")


#: What ``zarr.open_group`` raises for a location that holds no Zarr group: nothing there
#: (GroupNotFoundError is a FileNotFoundError), a file, or metadata that is not Zarr's (zarr's
#: errors and JSONDecodeError are ValueErrors).  Any other error -- the network, a permission --
#: is not "not a Zarr group" and is raised as it is.
NOT_A_ZARR_GROUP = (ValueError, FileNotFoundError, NotADirectoryError)


def _rows_per_chunk(views: Mapping[str, Any], chunk_rows: int | None) -> int:
    if chunk_rows is not None:
        return int(chunk_rows)
    width = sum(int(v.shape[1]) * np.dtype(v.dtype).itemsize for v in views.values())
    return int(max(1024, DEFAULT_CHUNK_BYTES // max(width, 1)))


def _from_arrays(views: Mapping[str, Any], chunk_rows: int | None):
    import dask.array as da

    rows = _rows_per_chunk(views, chunk_rows)
    out = {}
    for name, v in views.items():
        if is_dask_array(v):
            out[name] = v if chunk_rows is None else v.rechunk({0: rows})
        else:
            out[name] = da.from_array(v, chunks=(rows, -1), name=_memmap_name(v))
    return out


def _memmap_name(v) -> str | None:
    """A stable Dask name for a memory-mapped .npy (file, size, mtime) instead of hashing GBs."""
    filename = getattr(v, "filename", None)
    if not isinstance(v, np.memmap) or filename is None:
        return None  # from_array hashes the content
    from dask.base import tokenize

    st = os.stat(filename)
    return "npy-" + tokenize(str(filename), st.st_size, st.st_mtime_ns, v.shape, str(v.dtype))


def _from_dataset(ds, names: Sequence[str] | None) -> dict:
    # Coordinates (dimension or not) are never views, nor are labels or other 1-D variables.
    variables = ([k for k in ds.data_vars if k not in LABEL_NAMES and ds[k].ndim == 2] if names is None
                 else list(names))
    missing = [k for k in variables if k not in ds.data_vars]
    if missing:
        raise InputValidationError(f"views {missing} not in the dataset; it has {list(ds.data_vars)}.")
    dims = {ds[k].dims[0] for k in variables}
    if len(dims) != 1:
        raise InputValidationError(f"views must share their first (sample) dimension, got {sorted(dims)}.")
    return {k: ds[k].data for k in variables}


def _from_path(path: str, names, storage_options=None):
    """The views of a .npz / .npy file or a Zarr group (tables: :mod:`mkdist._pipeline._tables`)."""
    import fsspec

    lower = path.rstrip("/").lower()
    options = options_for(path, storage_options)
    if lower.endswith(".npz"):
        with fsspec.open(path, "rb", **options) as f, np.load(f, allow_pickle=False) as d:
            keys = [k for k in d.files if k not in LABEL_NAMES] if names is None else list(names)
            missing = [k for k in keys if k not in d.files]
            if missing:
                raise InputValidationError(f"views {missing} not in {path}; it has {d.files}")
            return {k: d[k] for k in keys}
    if lower.endswith(".npy"):
        if "://" in path and not path.startswith("file://"):
            with fsspec.open(path, "rb", **options) as f:
                return {"view0": np.load(f, allow_pickle=False)}
        return {"view0": np.load(path, mmap_mode="r", allow_pickle=False)}
    # A Zarr store (xarray layout if it has dimension names, else plain arrays).
    import xarray as xr
    import zarr

    try:
        group = zarr.open_group(path, mode="r", storage_options=options or None)
    except NOT_A_ZARR_GROUP as exc:  # any other error (the network, a permission) is raised as it is
        raise InputValidationError(
            f"cannot read input {path!r}: not .npy/.npz/Parquet and not a Zarr group ({exc}).") from exc
    arrays = {k: a for k, a in group.arrays()}
    if not arrays:
        raise InputValidationError(f"Zarr group {path!r} holds no arrays.")
    try:
        ds = xr.open_zarr(path, consolidated=False, storage_options=options or None)
    except KeyError:  # not an xarray-style group (no dimension names): plain 2-D arrays
        # Only that: a network error here took the plain-array path, which orders and filters
        # the views differently, and the run went on with another reading of the same input.
        ds = None
    if ds is not None:
        if names is None:
            # Zarr lists members in no guaranteed order: sort, so the same store always gives
            # the same view order (and the same fingerprint).
            names = sorted(k for k in ds.data_vars if k not in LABEL_NAMES and ds[k].ndim == 2)
        return _from_dataset(ds, names)
    import dask.array as da

    if names is None:
        names = sorted(k for k, a in arrays.items() if k not in LABEL_NAMES and a.ndim == 2)
    missing = [k for k in names if k not in arrays]
    if missing:
        raise InputValidationError(f"views {missing} not in {path}; it has {sorted(arrays)}")
    return {k: da.from_zarr(arrays[k]) for k in names}


def _aligned(raw: Mapping[str, Any], chunk_rows: int | None) -> dict[str, Any]:
    checked = as_views(raw)
    out = _from_arrays(checked, chunk_rows)
    arrays = align_row_chunks(list(out.values()), list(out))
    return dict(zip(out, arrays))


def _npy_shape(f) -> tuple[int, ...]:
    """The shape in a .npy header (the file positioned at its start)."""
    major, _ = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    return tuple(read(f)[0])


def _array_shapes(location: str, kind: str, names, storage_options) -> dict[str, tuple[int, int]]:
    """The shape of every view of a Zarr / .npz / .npy input, from metadata (no xarray)."""
    import fsspec

    options = options_for(location, storage_options)
    if kind == "npy":
        with fsspec.open(location, "rb", **options) as f:
            arrays = {"view0": _npy_shape(f)}
    elif kind == "npz":
        import zipfile

        with fsspec.open(location, "rb", **options) as f, zipfile.ZipFile(f) as z:
            arrays = {}
            for member in z.namelist():
                with z.open(member) as m:
                    arrays[member.removesuffix(".npy")] = _npy_shape(m)
    else:
        import zarr

        try:
            group = zarr.open_group(location, mode="r", storage_options=options or None)
        except NOT_A_ZARR_GROUP as exc:  # any other error (the network, a permission) is raised as it is
            raise InputValidationError(f"cannot read input {location!r} as a Zarr group ({exc})") from None
        arrays = {k: a.shape for k, a in group.arrays()}
        if not arrays:
            raise InputValidationError(f"Zarr group {location!r} holds no arrays")
    if names is None:
        names = sorted(k for k, s in arrays.items() if k not in LABEL_NAMES and len(s) == 2) if kind == "zarr" \
            else [k for k, s in arrays.items() if k not in LABEL_NAMES and len(s) == 2]
    missing = [k for k in names if k not in arrays]
    if missing:
        raise InputValidationError(f"views {missing} not in {location}; it has {sorted(arrays)}")
    bad = {k: arrays[k] for k in names if len(arrays[k]) != 2}
    if bad:
        raise InputValidationError(f"views must be 2-D (rows, features); in {location}: {bad}")
    if not names:
        raise InputValidationError(f"{location} holds no 2-D array to cluster; it has {sorted(arrays)}")
    return {k: tuple(int(x) for x in arrays[k]) for k in names}


def _listing(location: str, storage_options) -> list:
    """(relative path, size, modification time) of every file under a location."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(location, **options_for(location, storage_options))
    if not fs.isdir(path):
        info = fs.info(path)
        return [[posixpath.basename(path), info.get("size"), info.get("mtime") or info.get("LastModified")]]
    out = []
    for p, info in sorted(fs.find(path, detail=True).items()):
        out.append([p[len(path):], info.get("size"), info.get("mtime") or info.get("LastModified")])
    return out
