"""Input views from NumPy, Dask, xarray, Zarr, Parquet or .npy/.npz, as row-chunked Dask arrays."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mkdist.storage._remote import options_for

from .._core._blocks import RowBlocks, align_row_chunks
from .._core._cluster import compute
from .._core._columns import MISSING_HINT
from .._core._missing import all_missing_rows
from .._core._validation import as_views, is_dask_array
from ..errors import InputValidationError, StoreExistsError
from ._tables import is_table_source

__all__ = ["load_views", "views_fingerprint", "scan_views", "InputScan", "load_ids", "write_labels_parquet",
           "check_labels_out", "labels_mark", "check_missing", "DEFAULT_CHUNK_BYTES", "MISSING_OPTIONS"]

#: Target bytes per row chunk of the widest view when mkdist chooses the chunking
#: (NumPy input, .npy/.npz files): big enough to amortise task overhead, small enough
#: that a worker holds a handful at once.
DEFAULT_CHUNK_BYTES = 32 * 2**20
#: Names never treated as views in .npz files / datasets (labels shipped beside the data).
LABEL_NAMES = ("y", "labels", "y5", "cat")
#: What a run does with missing cells (nulls, NaN): refuse the input (the default), or
#: cluster every row with its missing cells imputed (:mod:`mkdist._core._missing`).
MISSING_OPTIONS = ("refuse", "impute")
#: What ``zarr.open_group`` raises for a location that holds no Zarr group: nothing there
#: (GroupNotFoundError is a FileNotFoundError), a file, or metadata that is not Zarr's (zarr's
#: errors and JSONDecodeError are ValueErrors).  Any other error -- the network, a permission --
#: is not "not a Zarr group" and is raised as it is.
NOT_A_ZARR_GROUP = (ValueError, FileNotFoundError, NotADirectoryError)


def check_missing(value: Any, default: str = "refuse") -> str:
    """The ``missing`` option checked: "refuse" or "impute" (None: ``default``).

    Raises
    ------
    InputValidationError
        Any other value, naming the two.
    """
    if value is None:
        return default
    if value not in MISSING_OPTIONS:
        raise InputValidationError(
            f"missing={value!r}: choose 'refuse' (a missing cell stops the run, naming it; the default) or 'impute' "
            "(every row is clustered, its missing cells filled from the rows most like it)")
    return str(value)


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


def _aligned(raw: Mapping[str, Any], chunk_rows: int | None) -> dict[str, Any]:
    checked = as_views(raw)
    out = _from_arrays(checked, chunk_rows)
    arrays = align_row_chunks(list(out.values()), list(out))
    return dict(zip(out, arrays))


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


# ----------------------------------------------------------------------------- DataFrames
def _frame_views(frame: Any, *, views: Any, id_column: str | None, label_column: str | None,
                 chunk_rows: int | None, categories: Mapping | None = None,
                 missing: str | None = None) -> dict[str, Any]:
    """A pandas DataFrame's views (in memory, encoded once) or a dask DataFrame's (lazily, one
    encoding task per partition), by the same column rules as a Parquet table."""
    from .._core._columns import ArrowTable, encode_views, frame_to_arrow, plan_views, view_layout

    if type(frame).__module__.split(".")[0] == "pandas":
        table = ArrowTable(frame_to_arrow(frame))
        plan = plan_views(table, views, id_column=id_column, label_column=label_column, categories=categories,
                          missing=check_missing(missing))
        columns = list(dict.fromkeys(c for cols in plan.views.values() for c in cols))
        return _aligned(encode_views(table.read((0, table.n_rows), columns), view_layout(table, plan)), chunk_rows)
    from ._tables import DaskFrameTable, dask_frame_views

    table = DaskFrameTable(frame)
    plan = plan_views(table, views, id_column=id_column, label_column=label_column, categories=categories,
                      missing=check_missing(missing))
    return _aligned(dask_frame_views(table, plan, chunk_rows), None)


def frame_input(frame: Any, store: Any, *, storage_options: Mapping[str, Any] | None = None) -> str:
    """Write a DataFrame as Parquet beside a run store, once, and return its location.

    A run reads its input again at every stage, on every worker, and on resume: a frame in
    this process's memory serves none of them.  It is written to ``<store>.input/`` under a
    name derived from its content (pandas: a hash of its Arrow buffers; dask: its graph's
    token), so the same frame is written once and a re-run finds (and resumes from) the same
    file; another frame never replaces one a stored run was made from.  A dask DataFrame is
    written by the workers (``to_parquet``), never collected.

    Returns
    -------
    str
        The Parquet file (pandas) or directory (dask), read as any table.
    """
    import fsspec

    base = f"{os.fspath(store).rstrip('/')}.input"
    fs, root = fsspec.core.url_to_fs(base, **options_for(base, storage_options))
    if type(frame).__module__.split(".")[0] == "pandas":
        import pyarrow.parquet as pq

        from .._core._columns import ArrowTable, frame_to_arrow

        data = frame_to_arrow(frame)
        name = f"frame-{ArrowTable(data).fingerprint.split(':')[-1][:24]}.parquet"
        target = posixpath.join(root, name)
        if not fs.exists(target):
            fs.makedirs(root, exist_ok=True)
            tmp = posixpath.join(root, f".{name}.tmp-{os.getpid()}")
            with fs.open(tmp, "wb") as f:
                pq.write_table(data, f)
            fs.mv(tmp, target)
    else:
        from dask.base import tokenize

        name = f"frame-{tokenize(frame)[:24]}"
        target = posixpath.join(root, name)
        if not fs.exists(target):
            tmp = posixpath.join(root, f".{name}.tmp-{os.getpid()}")
            frame.to_parquet(fs.unstrip_protocol(tmp), storage_options=options_for(base, storage_options) or None)
            fs.invalidate_cache(root)
            fs.mv(tmp, target, recursive=True)
    return fs.unstrip_protocol(target) if fs.protocol not in ("file", ("file", "local")) else target


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


#: Rows of one step of the scan's sums: (rows, d) float64 temporaries stay in the L2 cache.
_MOMENT_ROWS = 2048


def _moments(blocks: list, shifts: list) -> np.ndarray:
    """Per view and column: sum of (x - s), of (x - s)^2 and of |x - s| over the finite values,
    the count of NaN and of +-inf values; then the rows whose every cell is NaN.  Shape
    (5 sum(d) + 1,).

    The sums run over cache-sized row steps, and the NaN/inf masks are only built for a view
    whose sums come out non-finite: a NaN or an inf in a column makes its sum NaN or inf, so
    finite sums prove there is none.  It is the embed task's scan, 1.15 us a W1 row as
    whole-chunk passes with five masks and float64 copies of the chunk (4x less this way).
    """
    parts = []
    clean = False  # a view without NaN: then no row is missing everywhere
    for X, s in zip(blocks, shifts):
        sums = _finite_moments(X, s)
        if sums is None:
            Z = np.asarray(X, dtype=np.float64) - s
            nan, inf = np.isnan(Z), np.isinf(Z)
            Z = np.where(nan | inf, 0.0, Z)
            with np.errstate(over="ignore", invalid="ignore"):
                sums = [Z.sum(axis=0), (Z * Z).sum(axis=0), np.abs(Z).sum(axis=0), nan.sum(axis=0), inf.sum(axis=0)]
        else:
            clean = True
        parts += sums
    parts.append([0.0 if clean else float(all_missing_rows(blocks).sum())])
    return np.concatenate(parts)


def _finite_moments(X, s) -> list | None:
    """The five sums of one view when it holds no NaN or inf (counts 0), else None."""
    n, d = X.shape
    s1, s2, s3 = np.zeros(d), np.zeros(d), np.zeros(d)
    # one buffer for every step: a fresh 0.5 MB temporary per step would be an mmap (and its
    # page faults) wherever a nanny pinned malloc's thresholds
    buffer = np.empty((min(n, _MOMENT_ROWS), d))
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, _MOMENT_ROWS):
            Z = buffer[:min(_MOMENT_ROWS, n - start)]
            np.subtract(X[start:start + _MOMENT_ROWS], s, out=Z)
            s1 += Z.sum(axis=0)
            s2 += np.einsum("ij,ij->j", Z, Z)
            np.abs(Z, out=Z)
            s3 += Z.sum(axis=0)
    if not (np.isfinite(s1).all() and np.isfinite(s2).all()):
        return None
    return [s1, s2, s3, np.zeros(d), np.zeros(d)]


def _bad_rows(blocks: list, where: tuple[int | None, str]) -> np.ndarray:
    """Per row: whether column ``where[0]`` of the (one) view holds NaN or inf (``where[1]``
    "bad") or inf ("inf"); with column None, whether every cell of every view is NaN."""
    column, what = where
    if column is None:
        return all_missing_rows(blocks)
    x = blocks[0][:, column]
    return np.isinf(x) if what == "inf" else ~np.isfinite(x)


def _first_row(rows: RowBlocks, view: str | None, column: int | None, what: str = "bad") -> int:
    """The first row a refusal names: found by a second pass over that column (over every
    view for a row with no value at all), on the error path only."""
    arrays = {view: rows.arrays[rows.names.index(view)]} if view is not None else dict(zip(rows.names, rows.arrays))
    mask = RowBlocks(arrays).map(_bad_rows, (column, what), n_cols=None, dtype=bool, check_finite=False)
    return int(compute(mask.argmax())[0])


def _column_namer(feature_names):
    def column(view: str, j: int) -> str:
        names = (feature_names or {}).get(view)
        return f"column {names[j]!r}" if names else f"view {view!r}, feature {j}"

    return column


def _refuse_non_finite(rows: RowBlocks, counts: dict[str, np.ndarray], feature_names, describe_row, *,
                       what: str = "bad") -> None:
    """The NaN/inf found by the scan, in one message: the first column with its count and first
    row (found by a second pass over that column, on this error path only), then the others.

    ``what``: "bad" (NaN or infinity, ``missing="refuse"``) or "inf" (infinity, which
    ``missing="impute"`` does not fill: it is a value, not a missing one)."""
    bad = [(view, j, int(c)) for view in rows.names for j, c in enumerate(counts[view]) if c > 0]
    if not bad:
        return
    column = _column_namer(feature_names)
    view, j, n = bad[0]
    first = _first_row(rows, view, j, what)
    where = describe_row(first) if describe_row is not None else f"row {first}"
    others = "; also " + ", ".join(f"{column(v, k).removeprefix('column ')} ({c})" for v, k, c in bad[1:4]) \
        + (f" and {len(bad) - 4} more columns" if len(bad) > 4 else "") if len(bad) > 1 else ""
    if what == "inf":
        raise InputValidationError(
            f"{column(view, j)} holds infinity in {n} row{'s' * (n > 1)}, first at {where}{others}: infinity is a "
            "value, not a missing one, so missing='impute' does not fill it; replace it (by a finite value, or by "
            "NaN to have it imputed), drop those rows, or leave the column out of the views")
    raise InputValidationError(
        f"{column(view, j)} holds NaN or infinity in {n} row{'s' * (n > 1)}, first at {where}{others}: fill or "
        f"drop those rows, leave the column out of the views, or {MISSING_HINT}")


def _refuse_empty(rows: RowBlocks, parts: dict, n_empty_rows: int, feature_names, describe_row) -> None:
    """``missing="impute"``: a column with no value at all, or rows with no value at all,
    cannot be filled from what they show: refused, naming them."""
    column = _column_namer(feature_names)
    N = rows.n_samples
    for view in rows.names:
        empty = np.flatnonzero(parts[view][3] + parts[view][4] >= N)
        if empty.size:
            raise InputValidationError(
                f"{column(view, int(empty[0]))} has no value in any of the {N} rows: nothing to impute it from; "
                "leave it out of the views")
    if n_empty_rows:
        first = _first_row(rows, None, None)
        where = describe_row(first) if describe_row is not None else f"row {first}"
        raise InputValidationError(
            f"{n_empty_rows} row{'s have' if n_empty_rows > 1 else ' has'} no value in any view, first at {where}: "
            "there is nothing to cluster such a row on, imputed or not; drop those rows")


def scan_views(views: Mapping[str, Any], gather: np.ndarray | None = None, *,
               feature_names: Mapping[str, Sequence[str]] | None = None, describe_row=None,
               missing: str = "refuse"):
    """One pass over the input before anything is stored: refuse what no method can cluster.

    Raises (``InputValidationError``, naming the view) on NaN/inf (naming the column, the
    number of bad values and the first row), on values whose squared deviations overflow
    float64 (around 1e154 and beyond), on values that differ only at a scale where they
    underflow (around 1e-154), and on constant views (every row the same, which includes
    input of duplicate rows only).  With ``missing="impute"`` NaN cells are counted instead
    (they are filled later, :class:`mkdist._core._missing.Imputer`), and refused are only
    infinity, a column without any value and a row without any value.

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
    gather : ndarray of shape (n,), optional
        Sorted row indices to read in the same pass (e.g. the landmarks): each chunk is read
        once for both.
    feature_names : dict of str to list of str, optional
        The column names of each view, for the messages.
    describe_row : callable, optional
        ``describe_row(row) -> str`` for the messages (e.g. with the row's id).
    missing : {"refuse", "impute"}, default="refuse"

    Returns
    -------
    stats : dict of str to dict
        Per view: ``n_rows``, ``n_features``, per-feature ``mean`` and ``std`` (population,
        over the finite values), the statistics of the data a model was fitted on (kept in
        the run store); with missing cells, ``missing``: the NaN count per feature.
    rows : dict of str to ndarray of shape (n, d_v)
        Only with ``gather``: those rows of every view.
    """
    missing = check_missing(missing)
    scan = InputScan(views, feature_names=feature_names, describe_row=describe_row, missing=missing)
    # NaN/inf are counted in this pass (not raised at the first bad chunk), so the message can
    # say how many rows are bad.
    sums = scan.rows.reduce(_moments, scan.shifts, width=scan.width, name="scan-input", take=gather,
                            check_finite=False)
    if gather is not None:
        sums, picked = sums
        return scan.finish(sums), dict(zip(scan.rows.names, picked))
    return scan.finish(sums)


class InputScan:
    """The input scan as a partial sum per row block, so that another pass can carry it (the
    embedding's: the input read once), and what the scan concludes from the total.

    Parameters
    ----------
    views, feature_names, describe_row, missing
        As :func:`scan_views`.

    Attributes
    ----------
    rows : RowBlocks
    first : list of ndarray of shape (1, d_v)
        The first row of every view, as read.
    shifts : list of ndarray of shape (d_v,)
        The same, float64 and NaN/inf as 0: the moments are of deviations from it.
    width : int
        Length of a partial, ``5 sum(d_v) + 1``.
    """

    def __init__(self, views: Mapping[str, Any], *, feature_names=None, describe_row=None, missing: str = "refuse"):
        self.rows = RowBlocks(views)
        self.missing = check_missing(missing)
        self.feature_names, self.describe_row = feature_names, describe_row
        #: The first row of every view, shape (1, d_v), as read.
        self.first = [np.asarray(compute(a[:1])[0]) for a in self.rows.arrays]
        # Deviations from a reference row keep the moments accurate for data far from 0.
        self.shifts = [np.nan_to_num(np.asarray(r, dtype=np.float64)[0], nan=0.0, posinf=0.0, neginf=0.0)
                       for r in self.first]
        self.widths = [int(a.shape[1]) for a in self.rows.arrays]
        self.width = 5 * sum(self.widths) + 1

    def partial(self, blocks: list) -> np.ndarray:
        """The partial of one row block of every view (in ``rows.names`` order), shape (width,)."""
        return _moments(blocks, self.shifts)

    def finish(self, sums: np.ndarray) -> dict[str, dict]:
        """The per-view statistics of :func:`scan_views` from the summed partials; raises what
        it refuses (a second pass over one column finds the first bad row, on that path only)."""
        rows, feature_names, describe_row = self.rows, self.feature_names, self.describe_row
        views = rows.names
        widths, first = self.widths, self.shifts
        N = rows.n_samples
        parts: dict[str, tuple[np.ndarray, ...]] = {}
        start = 0
        for name, d in zip(rows.names, widths):
            parts[name] = tuple(sums[start + i * d:start + (i + 1) * d] for i in range(5))
            start += 5 * d
        if self.missing == "impute":
            _refuse_non_finite(rows, {name: p[4] for name, p in parts.items()}, feature_names, describe_row,
                               what="inf")
            _refuse_empty(rows, parts, int(round(sums[-1])), feature_names, describe_row)
        else:
            _refuse_non_finite(rows, {name: p[3] + p[4] for name, p in parts.items()}, feature_names, describe_row)
        out: dict[str, dict] = {}
        for (name, (s1, s2, sa, nan, inf)), d, s in zip(parts.items(), widths, first):
            if not np.all(np.isfinite(s2)):
                raise InputValidationError(
                    f"view {name!r} holds values whose squared deviations overflow float64 (magnitudes around "
                    "1e154 or larger): no distance-based kernel can be computed on it; rescale the view (divide "
                    "it by a constant) before clustering.")
            n = N - nan - inf  # the finite values of each column: all N unless missing="impute"
            mean = s + s1 / n
            var = np.maximum(s2 / n - (s1 / n) ** 2, 0.0)
            if np.all(var == 0) and np.any(sa > 0):
                raise InputValidationError(
                    f"view {name!r} varies only at a scale where squared deviations underflow float64 (largest "
                    f"mean absolute deviation {float(np.max(sa / n)):.3g}): rescale the view (multiply it by a "
                    "constant) before clustering.")
            if np.all(sa == 0):
                raise InputValidationError(
                    f"view {name!r} is constant: all {N} rows are the same, so it carries nothing to cluster; "
                    + ("drop it from the input." if len(views) > 1 else "there is nothing to cluster."))
            out[name] = {"n_rows": N, "n_features": d, "mean": mean.tolist(), "std": np.sqrt(var).tolist()}
            if nan.any():
                out[name]["missing"] = [int(c) for c in nan]
        return out


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


#: Key of the Parquet schema metadata that says which run wrote a labels output.
LABELS_MARK = b"mkdist"


def _labels_part(ids, labels, distance, missing_cells, id_name: str, mark: str, fs, path: str) -> int:
    """Write one row chunk of the labels output as one Parquet file; returns its rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(ids))
    columns = {id_name: ids, "cluster": pa.array(np.asarray(labels, dtype=np.int32)),
               "distance": pa.array(np.asarray(distance, dtype=np.float32))}
    if missing_cells is not None:
        columns["missing_cells"] = pa.array(np.asarray(missing_cells, dtype=np.int32))
    table = pa.table(columns)
    table = table.replace_schema_metadata({LABELS_MARK: mark})
    with fs.open(path, "wb") as f:
        pq.write_table(table, f)
    return table.num_rows


def labels_out_owner(path: Any, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Which run wrote the labels output at ``path`` (its mark: store, run fingerprint, labels
    token), ``{}`` for Parquet without a mark, None when nothing is there."""
    import fsspec
    import pyarrow.parquet as pq

    fs, p = fsspec.core.url_to_fs(str(path), **options_for(path, storage_options))
    if not fs.exists(p):
        return None
    files = sorted(f for f in fs.find(p) if f.endswith(".parquet")) if fs.isdir(p) else [p]
    if not files:
        return {}
    try:
        with fs.open(files[0], "rb") as f:
            meta = pq.ParquetFile(f).schema_arrow.metadata or {}
        return json.loads(meta.get(LABELS_MARK, b"{}"))
    except ValueError:  # not Parquet (pyarrow's ArrowInvalid), or a mark that is not JSON: nobody's labels
        # Only that: an error reading the file (the network, a permission) is raised, not
        # taken for "a file mkdist did not write", which --overwrite would then replace.
        return {}


def labels_mark(store: Any) -> dict[str, Any]:
    """What a labels output written from ``store`` (a RunStore whose labels stage is stored)
    records about it: the store, its run's fingerprint and its labels stage's token.  An output
    whose mark matches a store's is that store's current labels (:func:`check_labels_out`)."""
    return {"store": str(store.url), "fingerprint": store.fingerprint, "labels": store.stage_token("labels")}


def check_labels_out(path: Any, overwrite: bool, mark: Mapping[str, Any] | None = None,
                     storage_options: Mapping[str, Any] | None = None, *, store: Any = None) -> str:
    """What to do with a labels output before any work: "write", "skip" (already written by
    this run: ``mark`` matches) or "replace"; refuses an output of another run (or any other
    file) unless ``overwrite``.  ``store``: the run's store, when the run is not finished (no
    ``mark`` yet): its own older labels are replaced once it finishes."""
    owner = labels_out_owner(path, storage_options)
    if owner is None:
        return "write"
    if mark is not None and owner and all(owner.get(k) == v for k, v in mark.items()):
        return "skip"
    if overwrite:
        return "replace"
    if owner and mark is not None and owner.get("store") == mark.get("store"):
        return "replace"  # our own store's older labels (its labels stage was recomputed)
    if owner and store is not None and owner.get("store") == str(store):
        return "replace"  # a resumed run's own labels, written before its later stages were lost
    who = f"the labels of the run in {owner['store']}" if owner.get("store") else "a file mkdist did not write"
    raise StoreExistsError(f"{path} exists and holds {who}; pass --overwrite (overwrite=True) to replace it, or "
                           "choose another labels output")


def write_labels_parquet(path: Any, labels, distance, ids, *, id_name: str = "id", overwrite: bool = False,
                         mark: Mapping[str, Any] | None = None, storage_options: Mapping[str, Any] | None = None,
                         compute=None, missing_cells=None) -> str:
    """Every row's cluster (and squared distance to its centre), keyed by its id, as Parquet.

    Written in parallel (one file per row chunk, by the task that holds the chunk's labels)
    into a temporary directory, then renamed into place, so a reader never sees half a result;
    an existing output is replaced only with ``overwrite`` (or when it is an older output of
    the same run store).  Each file's schema metadata says which run wrote it (``mark``), so
    a re-run knows its own output.

    Parameters
    ----------
    path : str or Path
        Output directory (``labels.parquet``); local or fsspec URL.
    labels, distance : dask.array.Array of shape (N,), same row chunks
    ids : list of chunk ids
        One per row chunk (:func:`load_ids`).
    id_name : str, default="id"
        Name of the id column.
    mark : dict, optional
        Who wrote it (``{"store", "fingerprint", "labels"}``).
    compute : callable, optional
        Computes the list of Delayed writes (default ``dask.compute``): the pipeline passes
        its progress-reporting compute.
    missing_cells : dask.array.Array of shape (N,), optional
        Imputed cells per row (a run with ``missing="impute"``): written as column
        ``missing_cells`` (int32).

    Returns
    -------
    str
        The written location.
    """
    import uuid

    import dask
    import fsspec

    if check_labels_out(path, overwrite, mark, storage_options) == "skip":
        return str(path)
    # The options travel with `fs` into each write task (pickled): the workers write the labels
    # with the driver's credentials.
    fs, p = fsspec.core.url_to_fs(str(path), **options_for(path, storage_options))
    tmp = f"{p.rstrip('/')}.partial-{uuid.uuid4().hex}"
    text = json.dumps(dict(mark or {}), sort_keys=True)
    write = dask.delayed(_labels_part, pure=False)
    try:
        fs.makedirs(tmp, exist_ok=True)
        counts = [None] * len(ids) if missing_cells is None else list(missing_cells.to_delayed().ravel())
        parts = [write(i, lab, d, c, id_name, text, fs, f"{tmp}/part-{k:05d}.parquet")
                 for k, (i, lab, d, c) in enumerate(zip(ids, labels.to_delayed().ravel(), distance.to_delayed().ravel(),
                                                        counts))]
        (compute or dask.compute)(parts)
        fs.invalidate_cache(tmp)  # the workers wrote the parts: a cached listing would miss them
        if fs.exists(p):
            fs.rm(p, recursive=True)
        if fs.protocol == "file" or "file" in fs.protocol:
            fs.mv(tmp, p, recursive=True)
        else:
            # Object stores have no rename: each part is copied server-side (a reader may see the
            # output partly copied until the last one lands), then the temporary prefix goes.
            # Copied by name, not as a "directory", whose semantics differ between backends.
            for part in sorted(fs.find(tmp)):
                fs.copy(part, f"{p.rstrip('/')}/{posixpath.basename(part)}")
            fs.rm(tmp, recursive=True)
            fs.invalidate_cache(p)
    except BaseException:
        # Best effort: the error that failed the write is the one raised, not the cleanup's.
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
        raise
    return str(path)


# ----------------------------------------------------------------------------- locations
def _location(url: Any) -> tuple[str, str] | None:
    """(protocol, normalised path) of a store or input location; None for in-memory objects."""
    if hasattr(url, "url"):  # a RunStore
        url = url.url
    if not isinstance(url, (str, os.PathLike)):
        return None
    raw = os.fspath(url)
    if "://" not in raw or raw.startswith("file://"):
        return "file", os.path.realpath(os.path.expanduser(raw.removeprefix("file://")))
    protocol, _, path = raw.partition("://")
    return protocol, "/" + path.strip("/")


def refuse_overlap(target: Any, **inputs: Any) -> None:
    """Refuse an output location that is, contains or lies inside one of the inputs.

    Writing a store there (or overwriting it) could destroy the input, e.g. ``assign`` onto
    its own model store.

    Raises
    ------
    InputValidationError
        Naming the output and the input it would overlap.
    """
    out = _location(target)
    if out is None:
        return
    for what, given in inputs.items():
        other = _location(given)
        if other is None or other[0] != out[0]:
            continue
        if out[1] == other[1]:
            relation = "is"
        elif out[1].startswith(other[1].rstrip("/") + "/"):
            relation = "lies inside"
        elif other[1].startswith(out[1].rstrip("/") + "/"):
            relation = "contains"
        else:
            continue
        raise InputValidationError(
            f"the output {target} {relation} the {what.replace('_', ' ')} {given}: writing it could destroy "
            "that input; choose another output location.")


def refuse_file_store(store: Any) -> None:
    """A store location that is a regular file is refused before anything else reads it."""
    import fsspec

    raw = store.url if hasattr(store, "url") else store
    if not isinstance(raw, (str, os.PathLike)):
        return
    raw = os.fspath(raw)
    fs, path = fsspec.core.url_to_fs(raw, **options_for(raw))
    if fs.isfile(path):
        raise InputValidationError(f"the store {raw} is a file; a run store is a directory (give a new path, "
                                   "e.g. runs/customers.zarr)")
