"""Input views from NumPy, Dask, xarray, Zarr, Parquet or .npy/.npz, as row-chunked Dask arrays."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._blocks import RowBlocks, align_row_chunks
from ._validation import as_views, check_finite, is_dask_array
from .errors import InputValidationError, StoreExistsError

__all__ = ["load_views", "views_fingerprint", "scan_views", "load_ids", "write_labels_parquet",
           "check_labels_out", "DEFAULT_CHUNK_BYTES"]

#: Target bytes per row chunk of the widest view when mkdist chooses the chunking
#: (NumPy input, .npy/.npz files): big enough to amortise task overhead, small enough
#: that a worker holds a handful at once.
DEFAULT_CHUNK_BYTES = 32 * 2**20
#: Names never treated as views in .npz files / datasets (labels shipped beside the data).
LABEL_NAMES = ("y", "labels", "y5", "cat")


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
    import os

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


def _from_path(path: str, names, columns: Mapping[str, Sequence[str]] | None):
    lower = path.rstrip("/").lower()
    if lower.endswith(".npz"):
        with np.load(path, allow_pickle=False) as d:
            keys = [k for k in d.files if k not in LABEL_NAMES] if names is None else list(names)
            return {k: d[k] for k in keys}
    if lower.endswith(".npy"):
        return {"view0": np.load(path, mmap_mode="r", allow_pickle=False)}
    if lower.endswith(".parquet") or lower.endswith(".pq") or _is_parquet_dir(path):
        import dask.dataframe as dd

        ddf = dd.read_parquet(path)
        if columns is None:
            numeric = [c for c, t in ddf.dtypes.items() if np.issubdtype(t, np.number) and c not in LABEL_NAMES]
            columns = {"view0": numeric}
        out = {}
        for view, cols in columns.items():
            missing = [c for c in cols if c not in ddf.columns]
            if missing:
                raise InputValidationError(f"view {view!r}: columns {missing} not in {path}.")
            out[view] = ddf[list(cols)].to_dask_array(lengths=True)
        return out
    # Anything else: a Zarr store (xarray layout if it has dimension names, else plain arrays).
    import xarray as xr
    import zarr

    try:
        group = zarr.open_group(path, mode="r")
    except Exception as exc:
        raise InputValidationError(f"cannot read input {path!r}: not .npy/.npz/Parquet and not a Zarr group ({exc}).") from exc
    arrays = {k: a for k, a in group.arrays()}
    if not arrays:
        raise InputValidationError(f"Zarr group {path!r} holds no arrays.")
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except Exception:  # not an xarray-style group (no dimension names): plain 2-D arrays
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
    return {k: da.from_zarr(arrays[k]) for k in names}


def _is_parquet_dir(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and any(p.glob("*.parquet"))


def load_views(source: Any, *, views: Sequence[str] | None = None,
               columns: Mapping[str, Sequence[str]] | None = None,
               chunk_rows: int | None = None) -> dict[str, Any]:
    """Read the input as an ordered ``{view: dask.array}`` with aligned row chunks.

    Parameters
    ----------
    source : array, list/tuple/dict of arrays, xarray.Dataset, or str/Path
        NumPy or Dask arrays (one per view); an xarray Dataset (one variable per view, a
        shared sample dimension); a path or URL to a Zarr group (xarray layout or plain 2-D
        arrays), a Parquet file or directory, or a .npy/.npz file.  Variables named
        ``y``/``labels`` are labels, not views.
    views : list of str, optional
        Which variables/arrays to use (default: all but labels).
    columns : dict of str to list of str, optional
        Parquet only: the columns of each view (default: one view of all numeric columns).
    chunk_rows : int, optional
        Rows per chunk; default keeps Dask/Zarr/Parquet chunking and gives NumPy input
        chunks of about 32 MiB.

    Returns
    -------
    dict of str to dask.array.Array of shape (N, d_v)

    Notes
    -----
    Metadata only: shapes, dtypes, row counts and chunk alignment are checked here without
    reading data; NaN/inf are found by the first pass over the data (the embedding stage),
    which names the view and the chunk.
    """
    import xarray as xr

    if isinstance(source, (str, Path)):
        raw = _from_path(str(source), views, columns)
    elif isinstance(source, xr.Dataset):
        raw = _from_dataset(source, views)
    else:
        raw = source
    checked = as_views(raw)
    out = _from_arrays(checked, chunk_rows)
    arrays = align_row_chunks(list(out.values()), list(out))
    return dict(zip(out, arrays))


def views_fingerprint(views: Mapping[str, Any]) -> str:
    """A short hash identifying the input: view names, shapes, dtypes, chunks and Dask keys.

    Dask names of arrays built from NumPy (``from_array``) hash their content, and those of
    Zarr/Parquet arrays their path, so the same input gives the same fingerprint in a later
    process and a run store can tell whether it holds this input's run.
    """
    desc = [{"view": k, "shape": list(v.shape), "dtype": str(v.dtype), "chunks": [list(c) for c in v.chunks],
             "name": v.name} for k, v in views.items()]
    return "sha256:" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:32]


def _moments(blocks: list, shifts: list) -> np.ndarray:
    """Per view and column: sum of (x - s), of (x - s)^2 and of |x - s|, shape (3 sum(d),)."""
    parts = []
    for X, s in zip(blocks, shifts):
        Z = np.asarray(X, dtype=np.float64) - s
        with np.errstate(over="ignore", invalid="ignore"):
            parts += [Z.sum(axis=0), (Z * Z).sum(axis=0), np.abs(Z).sum(axis=0)]
    return np.concatenate(parts)


def scan_views(views: Mapping[str, Any], gather: np.ndarray | None = None):
    """One pass over the input before anything is stored: refuse what no method can cluster.

    Raises (``InputValidationError``, naming the view) on NaN/inf (and its chunk and first
    row), on values whose squared deviations overflow float64 (around 1e154 and beyond), on
    values that differ only at a scale where they underflow (around 1e-154), and on constant
    views (every row the same, which includes input of duplicate rows only).

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
    gather : ndarray of shape (n,), optional
        Sorted row indices to read in the same pass (e.g. the landmarks): each chunk is read
        once for both.

    Returns
    -------
    stats : dict of str to dict
        Per view: ``n_rows``, ``n_features``, per-feature ``mean`` and ``std`` (population),
        the statistics of the data a model was fitted on (kept in the run store).
    rows : dict of str to ndarray of shape (n, d_v)
        Only with ``gather``: those rows of every view.
    """
    check_finite(views)  # NumPy views; Dask views are checked inside the pass below
    rows = RowBlocks(views)
    # Deviations from a reference row keep the moments accurate for data far from 0.
    first = _first_rows(rows)
    widths = [int(a.shape[1]) for a in rows.arrays]
    sums = rows.reduce(_moments, first, width=3 * sum(widths), name="scan-input", take=gather)
    if gather is not None:
        sums, picked = sums
    N = rows.n_samples
    out: dict[str, dict] = {}
    start = 0
    for name, d, s in zip(rows.names, widths, first):
        s1, s2, sa = (sums[start + i * d:start + (i + 1) * d] for i in range(3))
        start += 3 * d
        if not np.all(np.isfinite(s2)):
            raise InputValidationError(
                f"view {name!r} holds values whose squared deviations overflow float64 (magnitudes around "
                "1e154 or larger): no distance-based kernel can be computed on it; rescale the view (divide "
                "it by a constant) before clustering.")
        mean = s + s1 / N
        var = np.maximum(s2 / N - (s1 / N) ** 2, 0.0)
        if np.all(var == 0) and np.any(sa > 0):
            raise InputValidationError(
                f"view {name!r} varies only at a scale where squared deviations underflow float64 (largest "
                f"mean absolute deviation {float(np.max(sa) / N):.3g}): rescale the view (multiply it by a "
                "constant) before clustering.")
        if np.all(sa == 0):
            raise InputValidationError(
                f"view {name!r} is constant: all {N} rows are the same, so it carries nothing to cluster; "
                + ("drop it from the input." if len(views) > 1 else "there is nothing to cluster."))
        out[name] = {"n_rows": N, "n_features": d, "mean": mean.tolist(), "std": np.sqrt(var).tolist()}
    if gather is not None:
        return out, dict(zip(rows.names, picked))
    return out


def _first_rows(rows: RowBlocks) -> list[np.ndarray]:
    """The first row of every view, float64 (one small read)."""
    return [np.asarray(a[:1].compute() if hasattr(a, "compute") else a[:1], dtype=np.float64)[0]
            for a in rows.arrays]


def load_ids(source: Any, id_column: str | None, views: Mapping[str, Any]):
    """The id of every row: a column / coordinate / variable of the input, or the row position.

    Parameters
    ----------
    source : path/URL (Parquet, Zarr/xarray, .npz) or xarray.Dataset
        Where ``id_column`` is read from.
    id_column : str or None
        None: the row position (0 .. N-1) is the id.
    views : dict of str to dask.array.Array
        The loaded views; the ids get their row chunks.

    Returns
    -------
    dask.array.Array of shape (N,)

    Raises
    ------
    InputValidationError
        The column does not exist, has another length, or the input carries no columns.
    """
    import dask.array as da

    first = next(iter(views.values()))
    N, chunks = int(first.shape[0]), first.chunks[0]
    if id_column is None:
        return da.arange(N, chunks=(chunks,), dtype=np.int64)
    ids = None
    if isinstance(source, (str, Path)):
        path = str(source)
        lower = path.rstrip("/").lower()
        if lower.endswith(".npz"):
            with np.load(path, allow_pickle=False) as d:
                if id_column in d.files:
                    ids = da.from_array(np.asarray(d[id_column]), chunks=(chunks,))
        elif lower.endswith((".parquet", ".pq")) or _is_parquet_dir(path):
            import dask.dataframe as dd

            ddf = dd.read_parquet(path)
            if id_column in ddf.columns:
                ids = ddf[id_column].to_dask_array(lengths=True)
        elif not lower.endswith(".npy"):
            import xarray as xr

            ds = xr.open_zarr(path, consolidated=False)
            if id_column in ds.variables:
                ids = ds[id_column].data
    elif hasattr(source, "variables"):
        if id_column in source.variables:
            ids = source[id_column].data
    else:
        raise InputValidationError(
            f"id_column={id_column!r} names a column of the input, but the input is in memory; pass a "
            "Parquet/Zarr/xarray input, or leave id_column out (the row position is then the id).")
    if ids is None:
        raise InputValidationError(f"id_column {id_column!r} is not a column, coordinate or variable of {source}.")
    ids = da.asarray(ids)
    if ids.ndim != 1 or int(ids.shape[0]) != N:
        raise InputValidationError(f"id_column {id_column!r} has shape {ids.shape}, not ({N},) like the views.")
    return ids.rechunk((chunks,))


def _labels_frame(ids, labels, distance, id_name):
    import pandas as pd

    return pd.DataFrame({id_name: np.asarray(ids), "cluster": np.asarray(labels, dtype=np.int32),
                         "distance": np.asarray(distance, dtype=np.float32)})


def check_labels_out(path: Any, overwrite: bool) -> None:
    """Refuse an existing labels output unless ``overwrite`` (before any work)."""
    import fsspec

    fs, p = fsspec.core.url_to_fs(str(path))
    if fs.exists(p) and not overwrite:
        raise StoreExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it.")


def write_labels_parquet(path: Any, labels, distance, ids, *, id_name: str = "id", overwrite: bool = False) -> str:
    """Every row's cluster (and squared distance to its centre), keyed by its id, as Parquet.

    Written by Dask in parallel (one file per row chunk) into a temporary directory, then
    renamed into place, so a reader never sees half a result; an existing output is replaced
    only with ``overwrite``.

    Parameters
    ----------
    path : str or Path
        Output directory (``labels.parquet``); local or fsspec URL.
    labels, distance, ids : dask.array.Array of shape (N,), same row chunks
    id_name : str, default="id"
        Name of the id column.

    Returns
    -------
    str
        The written location.
    """
    import uuid

    import dask
    import dask.dataframe as dd
    import fsspec
    import pandas as pd

    check_labels_out(path, overwrite)
    fs, p = fsspec.core.url_to_fs(str(path))
    parts = [dask.delayed(_labels_frame)(i, lab, d, id_name)
             for i, lab, d in zip(ids.to_delayed(), labels.to_delayed(), distance.to_delayed())]
    meta = pd.DataFrame({id_name: np.asarray([], dtype=ids.dtype), "cluster": np.asarray([], dtype=np.int32),
                         "distance": np.asarray([], dtype=np.float32)})
    tmp = f"{p.rstrip('/')}.partial-{uuid.uuid4().hex}"
    target = tmp if "://" not in str(path) else f"{str(path).split('://')[0]}://{tmp}"
    try:
        dd.from_delayed(parts, meta=meta, verify_meta=False).to_parquet(target, write_index=False)
        if fs.exists(p):
            fs.rm(p, recursive=True)
        fs.mv(tmp, p, recursive=True)
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)
        raise
    return str(path)
