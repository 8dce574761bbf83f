"""Input views from NumPy, Dask, xarray, Zarr, Parquet or .npy/.npz, as row-chunked Dask arrays.

This module's job is the input source: where the rows come from (:class:`InputSource`), its
metadata read and checked (:func:`open_input`), its views (:func:`load_views`), fingerprint and
ids.  The readers of each kind of input, the scan, the labels output and the location checks are
modules of their own (:mod:`._readers`, :mod:`._tables`, :mod:`._frames`, :mod:`._scan`,
:mod:`._labels_out`, :mod:`._locations`); the names other modules import from here are
re-exported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from mkdist.storage._remote import options_for

from ..errors import InputValidationError
from ._frames import _frame_views, frame_input
from ._labels_out import check_labels_out, labels_mark, labels_out_owner, write_labels_parquet
from ._locations import refuse_file_store, refuse_overlap
from ._readers import DEFAULT_CHUNK_BYTES, _aligned, _array_shapes, _from_dataset, _from_path, _listing
from ._scan import (
    _MOMENT_ROWS as _MOMENT_ROWS,  # the scan's partial, re-exported for its test (tests/test_io.py)
    MISSING_OPTIONS,
    InputScan,
    _moments as _moments,
    check_missing,
    scan_views,
)
from ._tables import is_table_source

__all__ = ["load_views", "views_fingerprint", "scan_views", "InputScan", "load_ids", "write_labels_parquet",
           "check_labels_out", "labels_mark", "check_missing", "DEFAULT_CHUNK_BYTES", "MISSING_OPTIONS",
           # re-exported from the modules they moved to, for the modules that import them from here
           "frame_input", "labels_out_owner", "refuse_file_store", "refuse_overlap"]


# ----------------------------------------------------------------------------- input sources
@dataclasses.dataclass(frozen=True)
class InputSource:
    """Where a run's rows come from and how to read them: a location and its view declaration.

    What the stages, the flows and the command line pass around instead of arrays (JSON-able,
    so it travels as a Prefect parameter): every stage reads the same views from it.

    Parameters
    ----------
    location : str
        A path or fsspec URL: Parquet (a file, a directory of files, a glob), a Zarr group
        (xarray layout or plain 2-D arrays), or a .npy/.npz file.
    views : mapping or sequence of str, optional
        Tables: view name -> column names or ``fnmatch`` patterns (default: one view of every
        numeric column).  Zarr/xarray/.npz: the variables that are views (default: every
        2-D variable but labels).
    id_column : str, optional
        The rows' ids (a column, coordinate or variable): never a feature, keys the labels out.
    label_column : str, optional
        True labels (for scores): never a feature.
    chunk_rows : int, optional
        Rows per chunk (default: the source's own chunking, or about 32 MiB per chunk).
    storage_options : dict, optional
        fsspec options for remote locations (credentials, endpoint).
    categories : dict of str to list, optional
        Tables: column -> its categories, fixed (a fitted model's, so that a new batch is
        encoded as the data it was fitted on); default: read from the table.
    missing : {"refuse", "impute"}, optional
        Missing cells (a table's nulls, NaN): "refuse" (None means it) stops the run before any
        work, naming the column and the first row; "impute" clusters every row, its missing
        cells filled from the rows most like it (see ``mkdist.cluster``).
    """

    location: str
    views: Any = None
    id_column: str | None = None
    label_column: str | None = None
    chunk_rows: int | None = None
    storage_options: dict | None = None
    categories: dict | None = None
    missing: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "location", os.fspath(self.location))
        if self.missing is not None:
            object.__setattr__(self, "missing", check_missing(self.missing))
        if isinstance(self.views, Mapping):
            object.__setattr__(self, "views", {str(k): (v if isinstance(v, str) else list(v))
                                               for k, v in self.views.items()})
        elif self.views is not None:
            object.__setattr__(self, "views", [self.views] if isinstance(self.views, str) else list(self.views))

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InputSource:
        return cls(**dict(data))

    @property
    def is_table(self) -> bool:
        return is_table_source(self.location, self.storage_options)

    def open(self) -> OpenedInput:
        """Read the source's metadata and check it (:func:`open_input`)."""
        return open_input(self)


def as_input(source: Any, *, views: Any = None, id_column: str | None = None, label_column: str | None = None,
             chunk_rows: int | None = None, storage_options: dict | None = None, missing: str | None = None) -> Any:
    """``source`` as an :class:`InputSource` when it is a location (str, PathLike or the JSON
    of one); in-memory inputs (arrays, xarray) are returned as they are (``missing`` is then
    checked, and applies to the run: see ``mkdist.cluster``)."""
    if isinstance(source, InputSource):
        changes = {k: v for k, v in dict(views=views, id_column=id_column, label_column=label_column,
                                         chunk_rows=chunk_rows, storage_options=storage_options,
                                         missing=missing).items()
                   if v is not None}
        return dataclasses.replace(source, **changes) if changes else source
    if isinstance(source, Mapping) and "location" in source:
        return as_input(InputSource.from_json(source), views=views, id_column=id_column, label_column=label_column,
                        chunk_rows=chunk_rows, storage_options=storage_options, missing=missing)
    if isinstance(source, (str, os.PathLike)):
        return InputSource(os.fspath(source), views, id_column, label_column, chunk_rows, storage_options,
                           missing=missing)
    check_missing(missing)
    return source


@dataclasses.dataclass
class OpenedInput:
    """An :class:`InputSource` whose metadata was read and checked (nothing else).

    Attributes
    ----------
    source : InputSource
    kind : {"table", "zarr", "npz", "npy"}
    n_rows : int
    shapes : dict of str to int
        Features per view.
    feature_names : dict of str to list of str
        The columns (or feature labels) of each view, for messages.
    plan : ViewPlan or None
        Tables: which columns form which view, and what was ignored.
    table : ParquetTable or None
    fingerprint : str
        Identifies the source's content from its metadata (files, sizes, modification times):
        what a re-run compares without reading the data.
    """

    source: InputSource
    kind: str
    n_rows: int
    shapes: dict[str, int]
    feature_names: dict[str, list[str]]
    fingerprint: str
    plan: Any = None
    table: Any = None

    def message(self) -> str | None:
        """The one line about the input's columns (tables), else None."""
        if self.plan is None:
            return None
        from ._tables import split_row_groups_note

        note = split_row_groups_note(self.table, self.plan, self.source.chunk_rows) if self.table is not None else None
        return self.plan.message() + (f"; {note}" if note else "")

    def load(self) -> dict[str, Any]:
        """The views as aligned, row-chunked Dask arrays."""
        if self.kind == "table":
            from ._tables import table_views

            raw = table_views(self.table, self.plan, self.source.chunk_rows)
            return _aligned(raw, None)
        names = self.source.views
        raw = _from_path(self.source.location, names, self.source.storage_options)
        return _aligned(raw, self.source.chunk_rows)

    def describe_row(self, row: int) -> str:
        """'row 17' or, with an id column of a table, "row 17 (customer_id 'C17')"."""
        if self.kind == "table" and self.source.id_column:
            from .._core._columns import _id_suffix

            suffix = _id_suffix(self.table, self.source.id_column, row, "")
            return f"row {row} ({suffix.lstrip(', ')})" if suffix else f"row {row}"
        return f"row {row}"


def path_kind(location: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """What a location holds: "table", "npz", "npy" or "zarr"; refuses what is none of them.

    Reads a listing and, for a file of unknown extension, its first bytes: no data.

    Raises
    ------
    InputValidationError
        "not found: PATH" (with a close match when there is one), an empty file, a file or
        directory that is no input mkdist reads.
    """
    import fsspec

    from ._tables import _suggest

    if is_table_source(location, storage_options):
        return "table"
    fs, path = fsspec.core.url_to_fs(location, **options_for(location, storage_options))
    if not fs.exists(path):
        raise InputValidationError(f"not found: {location}{_suggest(fs, path)}")
    lower = path.rstrip("/").lower()
    if fs.isdir(path):
        if fs.exists(f"{path.rstrip('/')}/zarr.json") or fs.exists(f"{path.rstrip('/')}/.zgroup"):
            return "zarr"
        raise InputValidationError(f"{location} is a directory but neither a Zarr group (no zarr.json) nor a "
                                   "directory of Parquet files")
    if int(fs.info(path).get("size") or 0) == 0:
        raise InputValidationError(f"{location} is empty (0 bytes)")
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith(".npy"):
        return "npy"
    with fs.open(path, "rb") as f:
        head = f.read(6)
    if head[:4] == b"PAR1":
        return "table"
    if head == b"\x93NUMPY":
        return "npy"
    if head[:2] == b"PK":
        return "npz"
    if lower.endswith((".csv", ".tsv", ".json", ".jsonl")):
        raise InputValidationError(f"{location}: mkdist reads Parquet, Zarr, .npy and .npz; convert the "
                                   f"{lower.rsplit('.', 1)[-1].upper()} file to Parquet first")
    raise InputValidationError(f"{location} is not an input mkdist reads (Parquet, a Zarr group, .npy or .npz)")


def open_input(source: InputSource) -> OpenedInput:
    """Read and check the metadata of an input source: rows, views, columns; no data pass.

    Tables are checked in full here (:func:`mkdist._pipeline._tables.plan_views`: unknown columns,
    non-numeric features, nulls from the statistics, row ids clustered as features).

    Raises
    ------
    InputValidationError
        Naming the location, the column or the variable.
    """
    kind = path_kind(source.location, source.storage_options)
    if kind == "table":
        from ._tables import ParquetTable, plan_views

        table = ParquetTable.open(source.location, source.storage_options)
        plan = plan_views(table, source.views, id_column=source.id_column, label_column=source.label_column,
                          categories=source.categories, missing=source.missing)
        fingerprint = _hash({"table": table.fingerprint, "plan": plan.to_json(), "chunk_rows": source.chunk_rows,
                             **_missing_key(source.missing)})
        return OpenedInput(source, kind, table.n_rows, plan.widths(), plan.feature_names(), fingerprint, plan, table)
    if source.views is not None and isinstance(source.views, Mapping):
        raise InputValidationError(f"views by columns apply to tables (Parquet); {source.location} is {kind}: "
                                   "name its variables instead, e.g. views=['pix', 'fac']")
    shapes = _array_shapes(source.location, kind, source.views, source.storage_options)
    for name in (source.id_column, source.label_column):
        if name is not None and name in shapes:
            raise InputValidationError(f"{name!r} is both a view and the id/label variable of {source.location}")
    rows = {s[0] for s in shapes.values()}
    if len(rows) != 1:
        raise InputValidationError(f"the views of {source.location} have different row counts: "
                                   f"{ {k: s[0] for k, s in shapes.items()} }")
    return OpenedInput(source, kind, rows.pop(), {k: int(s[1]) for k, s in shapes.items()},
                       {k: [str(j) for j in range(int(s[1]))] for k, s in shapes.items()},
                       _hash({"listing": _listing(source.location, source.storage_options),
                              "views": source.views, "chunk_rows": source.chunk_rows, **_missing_key(source.missing)}))


def _missing_key(missing: str | None) -> dict[str, str]:
    """What ``missing`` adds to an input's fingerprint: nothing for the default, so the
    fingerprints of inputs read without the option stay what they were."""
    return {"missing": missing} if check_missing(missing) != "refuse" else {}


def _hash(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:32]


def load_views(source: Any, *, views: Any = None, chunk_rows: int | None = None,
               id_column: str | None = None, label_column: str | None = None,
               storage_options: dict | None = None, missing: str | None = None) -> dict[str, Any]:
    """Read the input as an ordered ``{view: dask.array}`` with aligned row chunks.

    Parameters
    ----------
    source : array, list/tuple/dict of arrays, DataFrame, xarray.Dataset, str/Path or InputSource
        NumPy or Dask arrays (one per view); a pandas or dask DataFrame (read by column like a
        Parquet table: ``views``, ``id_column``, categories; a dask DataFrame lazily, one task
        per partition); an xarray Dataset (one variable per view, a
        shared sample dimension); a path or fsspec URL to Parquet (a file, a directory of
        files or a glob), a Zarr group (xarray layout or plain 2-D arrays), or a .npy/.npz
        file.  Variables named ``y``/``labels`` in Zarr/xarray/.npz inputs are labels, not
        views.
    views : mapping or list of str, optional
        Tables: ``{view: columns}``, each a list of column names or ``fnmatch`` patterns
        (``{"a": "a*", "b": ["b0", "b1"]}``); default one view of every numeric column that
        is not the id.  Zarr/xarray/.npz: which variables are views (default all but labels).
    chunk_rows : int, optional
        Rows per chunk; default keeps Dask/Zarr chunking and gives NumPy and Parquet input
        chunks of about 32 MiB.
    id_column, label_column : str, optional
        Tables: columns that are never features (the ids, the true labels).
    storage_options : dict, optional
        fsspec options of a remote location.
    missing : {"refuse", "impute"}, optional
        Tables: "impute" reads features with nulls (as NaN) instead of refusing them
        (default "refuse").  The cells stay NaN here: a run fills them from its input scan
        (``mkdist.cluster(..., missing="impute")``); the estimators refuse NaN.

    Returns
    -------
    dict of str to dask.array.Array of shape (N, d_v)

    Notes
    -----
    Metadata only: shapes, dtypes, row counts and chunk alignment are checked here without
    reading data (a table's nulls from its column statistics); NaN/inf are found by the
    first pass over the data, which names the view, the column and the row.
    """
    import xarray as xr

    from .._core._columns import is_frame

    if is_frame(source):
        return _frame_views(source, views=views, id_column=id_column, label_column=label_column, missing=missing,
                            chunk_rows=chunk_rows)
    source = as_input(source, views=views, id_column=id_column, label_column=label_column,
                      chunk_rows=chunk_rows, storage_options=storage_options, missing=missing)
    if isinstance(source, InputSource):
        return open_input(source).load()
    if isinstance(source, xr.Dataset):
        raw = _from_dataset(source, views)
    else:
        raw = source
    return _aligned(raw, chunk_rows)


def views_fingerprint(views: Mapping[str, Any], missing: str | None = None) -> str:
    """A short hash identifying the input: view names, shapes, dtypes, chunks and Dask keys.

    Dask names of arrays built from NumPy (``from_array``) hash their content, and those of
    Zarr/Parquet arrays their path, so the same input gives the same fingerprint in a later
    process and a run store can tell whether it holds this input's run.  ``missing="impute"``
    is part of it (its runs cluster rows a refusing run never sees); the default is not, so
    fingerprints of runs without the option stay what they were.
    """
    desc = [{"view": k, "shape": list(v.shape), "dtype": str(v.dtype), "chunks": [list(c) for c in v.chunks],
             "name": v.name} for k, v in views.items()]
    if check_missing(missing) != "refuse":
        desc.append({"missing": missing})
    return "sha256:" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:32]


def load_ids(source: Any, id_column: str | None, views: Mapping[str, Any]):
    """The id of every row: a column / coordinate / variable of the input, or the row position.

    Parameters
    ----------
    source : InputSource, path/URL (Parquet, Zarr/xarray, .npz) or xarray.Dataset
        Where ``id_column`` is read from.
    id_column : str or None
        None: the row position (0 .. N-1) is the id.
    views : dict of str to dask.array.Array
        The loaded views; the ids get their row chunks.

    Returns
    -------
    list of chunk ids, one per row chunk of the views
        Each a Delayed (or Dask array block) of the ids of that chunk: an Arrow array for a
        table (strings, timestamps and dictionaries keep their type), else a NumPy array.

    Raises
    ------
    InputValidationError
        The column does not exist, has another length, or the input carries no columns.
    """
    import dask.array as da

    first = next(iter(views.values()))
    N, chunks = int(first.shape[0]), first.chunks[0]
    if id_column is None:
        return list(da.arange(N, chunks=(chunks,), dtype=np.int64).to_delayed())
    ids = None
    source = as_input(source)
    if isinstance(source, InputSource):
        path = source.location
        kind = path_kind(path, source.storage_options)
        if kind == "table":
            from ._tables import table_ids

            opened = open_input(dataclasses.replace(source, id_column=id_column))
            parts = table_ids(opened.table, opened.plan, id_column, source.chunk_rows)
            if len(parts) != len(chunks):
                raise InputValidationError(f"the ids of {path} are not chunked like its views ({len(parts)} vs "
                                           f"{len(chunks)} chunks): read both with the same chunk_rows")
            return parts
        if kind == "npz":
            import fsspec

            with fsspec.open(path, "rb", **options_for(path, source.storage_options)) as f, \
                    np.load(f, allow_pickle=False) as d:
                if id_column in d.files:
                    ids = da.from_array(np.asarray(d[id_column]), chunks=(chunks,))
        elif kind == "zarr":
            import xarray as xr

            ds = xr.open_zarr(path, consolidated=False,
                              storage_options=options_for(path, source.storage_options) or None)
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
        where = source.location if isinstance(source, InputSource) else "the input"
        raise InputValidationError(f"id_column {id_column!r} is not a column, coordinate or variable of {where}.")
    ids = da.asarray(ids)
    if ids.ndim != 1 or int(ids.shape[0]) != N:
        raise InputValidationError(f"id_column {id_column!r} has shape {ids.shape}, not ({N},) like the views.")
    return list(ids.rechunk((chunks,)).to_delayed())


# ----------------------------------------------------------------------------- locations
