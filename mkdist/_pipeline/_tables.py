"""Tables as input: Parquet files -- one file, a directory, a glob or an fsspec URL -- read
with pyarrow, their columns sorted into views, their ids kept for the labels.

What every column is, which columns form which view, how categories are encoded and what is
refused is decided in :mod:`mkdist._core._columns` (shared with in-memory DataFrames); this
module finds and opens the files (:class:`ParquetTable`: schema, row groups and column
statistics from the footers, no data pass) and builds the row-chunked Dask views
(:func:`table_views`): one read task per piece of the table (whole row groups, or slices of a
large one), each reading the columns of every view once.

Only ``pyarrow`` and ``fsspec`` are imported here (no Dask, xarray or scikit-learn until the
views are built), so the command line runs every check in well under a second.
"""

from __future__ import annotations

import operator
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._core._columns import (
    _GLOB_CHARS,
    DEFAULT_VIEW,
    MAX_CATEGORIES,
    Column,
    Table,
    ViewPlan,
    _view_dtype,
    describe_row,
    encode_categories,
    encode_views,
    parse_view_option,
    plan_views,
    view_layout,
)
from ..errors import InputValidationError

__all__ = ["ParquetTable", "ViewPlan", "Column", "is_table_source", "plan_views", "table_views", "table_ids",
           "parse_view_option", "encode_categories", "encode_views", "describe_row", "TABLE_SUFFIXES",
           "DEFAULT_VIEW", "MAX_CATEGORIES"]

#: File name endings read as Parquet.
TABLE_SUFFIXES = (".parquet", ".pq", ".parq")
#: Bytes of a row chunk of the views (as for NumPy input): big enough to amortise task
#: overhead, small enough that a worker holds a handful at once.
_CHUNK_BYTES = 32 * 2**20


# ----------------------------------------------------------------------------- locating files
def _suggest(fs, path: str) -> str:
    """' (did you mean X?)' for a missing local path with a close sibling, else ''."""
    import difflib

    parent, name = posixpath.split(path.rstrip("/"))
    try:
        siblings = [posixpath.basename(p.rstrip("/")) for p in fs.ls(parent or ".", detail=False)]
    except (OSError, ValueError):
        return ""
    close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.75)
    if not close:
        return ""
    # Named as the user would type it again: with its protocol (s3://...) for an object store.
    found = posixpath.join(parent, close[0])
    return f" (did you mean {fs.unstrip_protocol(found) if _is_remote_fs(fs) else found}?)"


def _is_remote_fs(fs) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return not isinstance(fs, LocalFileSystem)


def _url_to_fs(source: str, storage_options: Mapping[str, Any] | None):
    import fsspec

    from mkdist.storage._remote import options_for

    return fsspec.core.url_to_fs(source, **options_for(source, storage_options))


def is_table_source(source: Any, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether a path / URL names Parquet: a ``.parquet``/``.pq`` path, a glob, or a directory
    holding Parquet files and no ``zarr.json``.  Reads a directory listing at most."""
    if not isinstance(source, str):
        import os

        if not isinstance(source, os.PathLike):
            return False
        source = os.fspath(source)
    lower = source.rstrip("/").lower()
    if lower.endswith(TABLE_SUFFIXES):
        return True
    if lower.endswith((".npy", ".npz", ".zarr")):
        return False
    if any(c in source for c in _GLOB_CHARS):
        return True
    try:
        fs, path = _url_to_fs(source, storage_options)
        if not fs.isdir(path) or fs.exists(posixpath.join(path, "zarr.json")):
            return False
        return bool(_parquet_files_under(fs, path))
    except (OSError, ValueError):
        return False


def _is_data_file(path: str) -> bool:
    # Spark/Hive/Dask write _SUCCESS, _metadata, _common_metadata and .crc files beside the data.
    return not any(part.startswith(("_", ".")) for part in path.split("/")[-1:])


def _parquet_files_under(fs, path: str) -> list[str]:
    """Parquet files of a table directory: at its top, or in Hive-style partition directories
    (``year=2026/``) below it; nothing else is searched (a directory that merely contains a
    table somewhere deep is not a table)."""
    files, partitions = [], []
    for entry in fs.ls(path, detail=True):
        name = entry["name"].rstrip("/")
        base = posixpath.basename(name)
        if entry["type"] == "directory":
            if "=" in base and _is_data_file(name):
                partitions.append(name)
        elif _is_data_file(name) and base.lower().endswith(TABLE_SUFFIXES):
            files.append(name)
    for sub in partitions:
        files += _parquet_files_under(fs, sub)
    return sorted(files)


def _resolve_files(source: str, storage_options) -> tuple[Any, list[str]]:
    """The filesystem and the sorted Parquet files a source names; 'not found' when none."""
    fs, path = _url_to_fs(source, storage_options)
    if any(c in path for c in _GLOB_CHARS):
        files = sorted(p for p in fs.glob(path) if fs.isfile(p))
        if not files:
            raise InputValidationError(f"not found: no file matches {source}")
        return fs, files
    if not fs.exists(path):
        raise InputValidationError(f"not found: {source}{_suggest(fs, path)}")
    if fs.isdir(path):
        files = _parquet_files_under(fs, path)
        if not files:
            raise InputValidationError(f"{source} is a directory without Parquet files (*.parquet)")
        return fs, files
    return fs, [path]


# ----------------------------------------------------------------------------- the table
class ParquetTable(Table):
    """A Parquet table as mkdist reads it: files, schema, row groups, column statistics.

    Opened from metadata only (each file's footer).  Use :meth:`open`.

    Attributes
    ----------
    source : str
        As given.
    files : list of str
        Every data file, sorted (the table's row order).
    n_rows : int
    schema : pyarrow.Schema
    row_groups : list of tuple of int
        Rows of every row group, per file.
    columns : dict of str to Column
    pandas_index : list of str
        Columns that are a pandas index written beside the data.
    fingerprint : str
        Identifies the files' contents as their listing shows them (path, size, modification
        time or ETag) and the schema: the same table gives the same fingerprint in any process.
    """

    def __init__(self, source: str, fs, files: list[str], schema, row_groups, nulls, stats, identity):
        self.fs, self.files = fs, files
        super().__init__(source, schema, row_groups, nulls, stats, identity)

    def __repr__(self) -> str:
        return f"ParquetTable({self.source!r}, files={len(self.files)}, rows={self.n_rows})"

    def __dask_tokenize__(self):
        return ("mkdist-parquet-table", self.fingerprint)

    def __getstate__(self):
        # What a worker needs to read pieces: the statistics stay on the client.
        state = dict(self.__dict__)
        state["_stats"] = {}
        return state

    @classmethod
    def open(cls, source: Any, storage_options: Mapping[str, Any] | None = None) -> ParquetTable:
        """Read the footers of every file of ``source``; refuse what is not a usable table.

        Raises
        ------
        InputValidationError
            "not found: PATH" (with a close match when there is one), an empty (0-byte) or
            corrupt file, files whose schemas differ, a table without rows.
        """
        import os

        import pyarrow as pa
        import pyarrow.parquet as pq

        source = os.fspath(source)
        fs, files = _resolve_files(source, storage_options)
        schema, row_groups, identity = None, [], []
        nulls: dict[str, int | None] = {}
        stats: dict[str, list] = {}
        for path in files:
            info = fs.info(path)
            if int(info.get("size") or 0) == 0:
                raise InputValidationError(f"{_shown(source, path)} is empty (0 bytes), not a Parquet file")
            try:
                with fs.open(path, "rb") as f:
                    meta = pq.ParquetFile(f).metadata
                    file_schema = meta.schema.to_arrow_schema()
            except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
                raise InputValidationError(f"{_shown(source, path)} is not a readable Parquet file ({exc})") from None
            if schema is None:
                schema = file_schema
            elif not file_schema.remove_metadata().equals(schema.remove_metadata()):
                raise InputValidationError(
                    f"{_shown(source, path)} has other columns or types than {_shown(source, files[0])}: "
                    f"{_schema_difference(schema, file_schema)}; every file of a table must share one schema")
            identity.append([path, info.get("size"), info.get("mtime") or info.get("LastModified") or
                             info.get("ETag") or info.get("etag") or info.get("created")])
            row_groups.append(tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)))
            for j, field in enumerate(file_schema):
                per_group = []
                for i in range(meta.num_row_groups):
                    st = meta.row_group(i).column(j).statistics
                    per_group.append(None if st is None else (
                        st.min if st.has_min_max else None, st.max if st.has_min_max else None,
                        st.null_count if st.has_null_count else None))
                stats.setdefault(field.name, []).extend(per_group)
        for name, per_group in stats.items():
            counts = [None if g is None else g[2] for g in per_group]
            # None: some row group has no null count, so nulls are found by the scan (as NaN).
            nulls[name] = None if None in counts else int(sum(counts))
        table = cls(source, fs, files, schema, row_groups, nulls, stats, identity)
        if table.n_rows == 0:
            raise InputValidationError(f"{source} holds no rows")
        return table

    # ------------------------------------------------------------------ reading
    def _segments(self, start: int, rows: int) -> list[tuple[int, list[int], int, int]]:
        """(file, row groups, first row in them, rows) of one file each covering a row range."""
        out: list[tuple[int, list[int], int, int]] = []
        offset, stop = 0, start + rows
        for f, groups in enumerate(self.row_groups):
            for g, n in enumerate(groups):
                lo, hi = max(start, offset), min(stop, offset + n)
                if lo < hi:
                    if out and out[-1][0] == f and out[-1][1][-1] == g - 1:
                        out[-1][1].append(g)
                        out[-1] = (f, out[-1][1], out[-1][2], out[-1][3] + hi - lo)
                    else:
                        out.append((f, [g], lo - offset, hi - lo))
                offset += n
                if offset >= stop:
                    return out
        return out

    def read(self, piece: tuple[int, int], columns: Sequence[str]):
        """The rows of one range (see :meth:`pieces`), those columns, as a pyarrow Table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        parts = []
        for f, groups, first, rows in self._segments(*piece):
            with self.fs.open(self.files[f], "rb") as fh:
                # One thread: a Dask worker thread is one core's worth of work.
                table = pq.ParquetFile(fh).read_row_groups(groups, columns=list(columns), use_threads=False)
            parts.append(table.slice(first, rows) if (first or rows != table.num_rows) else table)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _shown(source: str, path: str) -> str:
    return source if path.rstrip("/").endswith(source.rstrip("/").split("://")[-1]) else path


def _schema_difference(a, b) -> str:
    an, bn = {f.name: str(f.type) for f in a}, {f.name: str(f.type) for f in b}
    parts = []
    if set(an) - set(bn):
        parts.append(f"missing {sorted(set(an) - set(bn))}")
    if set(bn) - set(an):
        parts.append(f"extra {sorted(set(bn) - set(an))}")
    changed = [f"{k}: {an[k]} -> {bn[k]}" for k in an if k in bn and an[k] != bn[k]]
    if changed:
        parts.append("types " + ", ".join(changed))
    return "; ".join(parts) or "column order differs"


# ----------------------------------------------------------------------------- Dask views
def _read_views(table: ParquetTable, piece, layout: tuple) -> dict:
    """Every view's rows of one piece: one read of the union of their columns."""
    needed = list(dict.fromkeys(c for _, cols, _, _ in layout for c in cols))
    return encode_views(table.read(piece, needed), layout)


def _rows_per_piece(table: ParquetTable, plan: ViewPlan, chunk_rows: int | None) -> int:
    if chunk_rows is not None:
        return int(chunk_rows)
    width = sum(n * _view_dtype(table, plan.views[v]).itemsize for v, n in plan.widths().items())
    # At most ~32 MiB a chunk, and at least 8 chunks from 128k rows up, so that a few workers
    # share even a narrow table.  A large row group is cut into slices whose tasks each decode
    # it (0.15-0.45 s for 1M rows x 16 float64 columns): 8 slices cost about 1 CPU second a pass.
    return int(max(1024, min(_CHUNK_BYTES // max(width, 1), max(16384, -(-table.n_rows // 8)))))


def split_row_groups_note(table: ParquetTable, plan: ViewPlan, chunk_rows: int | None = None) -> str | None:
    """A note when the table's row groups are larger than a chunk, so that several read tasks
    decode the same row group in every pass (pandas and pyarrow write 1M-row groups)."""
    target = _rows_per_piece(table, plan, chunk_rows)
    size = table.pieces(target, exact=chunk_rows is not None)[0][1] if table.n_rows else 0
    largest = max((n for groups in table.row_groups for n in groups), default=0)
    if not size or largest < 2 * size:
        return None
    return (f"row groups of up to {largest:,} rows are read in slices of {size:,} rows, each decoding its whole "
            f"row group; written with row_group_size={size}, every pass would decode the table once instead of "
            f"{-(-largest // size)} times")


def table_views(table: ParquetTable, plan: ViewPlan, chunk_rows: int | None = None) -> dict[str, Any]:
    """The views of a plan as row-chunked Dask arrays, one read task per piece of the table.

    Returns
    -------
    dict of str to dask.array.Array of shape (N, d_v)
        float32 where every column of the view fits it exactly, else float64; the Dask names
        derive from the table's fingerprint, so the same table gives the same names (and the
        same run fingerprint) in every process.
    """
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    pieces = table.pieces(_rows_per_piece(table, plan, chunk_rows), exact=chunk_rows is not None)
    layout = view_layout(table, plan)
    token = tokenize(table, layout, pieces)
    read = f"read-parquet-{token}"
    graph = {read: {(read, i): (_read_views, table, piece, layout) for i, piece in enumerate(pieces)}}
    deps: dict[str, set] = {read: set()}
    rows = tuple(p[1] for p in pieces)
    out = {}
    widths = plan.widths()
    for view, _, dtype, _ in layout:
        name = f"{view}-{token}"
        graph[name] = {(name, i, 0): (operator.getitem, (read, i), view) for i in range(len(pieces))}
        deps[name] = {read}
        out[view] = (name, widths[view], np.dtype(dtype))
    hlg = HighLevelGraph(graph, deps)
    return {view: da.Array(hlg, name, chunks=(rows, (d,)), dtype=dtype) for view, (name, d, dtype) in out.items()}


def _read_ids(table: ParquetTable, piece, column: str):
    return table.read(piece, [column]).column(0).combine_chunks()


def table_ids(table: ParquetTable, plan: ViewPlan, id_column: str, chunk_rows: int | None = None) -> list:
    """The ids of every row chunk of :func:`table_views` (same arguments), as lazy Arrow arrays
    (one Delayed per chunk): strings, timestamps and dictionaries keep their Arrow type."""
    import dask

    read = dask.delayed(_read_ids, pure=True)
    pieces = table.pieces(_rows_per_piece(table, plan, chunk_rows), exact=chunk_rows is not None)
    return [read(table, piece, id_column) for piece in pieces]


# ----------------------------------------------------------------------------- dask DataFrames
class DaskFrameTable(Table):
    """A dask DataFrame as a table: its schema from the frame's metadata, its partitions as the
    row groups; the partition lengths and null counts are computed in one pass, and the checks
    that need a column's values run as dask reductions (the frame is never collected).

    The frame's index is not read (``preserve_index=False``): an id belongs in a column
    (``reset_index()``, then ``id_column``).
    """

    def __init__(self, frame):
        import dask
        import pyarrow as pa
        from dask.base import tokenize

        self.frame = frame
        try:
            schema = pa.Schema.from_pandas(frame._meta, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputValidationError(f"the dask DataFrame cannot be read as a table: {exc}") from None
        lengths, nulls = dask.compute(frame.map_partitions(len), frame.isna().sum())
        super().__init__("the dask DataFrame", schema, [tuple(int(n) for n in lengths)],
                         {str(k): int(v) for k, v in nulls.items()}, {}, tokenize(frame))
        self._offsets = np.concatenate([[0], np.cumsum(self.row_groups[0])])

    def __repr__(self) -> str:
        return f"DaskFrameTable(partitions={len(self.row_groups[0])}, rows={self.n_rows})"

    def read(self, piece: tuple[int, int], columns: Sequence[str]):
        import pyarrow as pa

        start, rows = piece
        first = int(np.searchsorted(self._offsets, start, side="right") - 1)
        last = int(np.searchsorted(self._offsets, start + rows, side="left"))
        part = self.frame[list(columns)].partitions[first:max(last, first + 1)].compute()
        offset = start - int(self._offsets[first])
        return pa.Table.from_pandas(part, preserve_index=False).slice(offset, rows)

    def distinct_values(self, column: str, limit: int) -> list | None:
        values = self.frame[column].dropna().unique().compute()
        if len(values) > limit:
            return None
        return sorted(v.item() if hasattr(v, "item") else v for v in values)

    def unique(self, column: str) -> bool:
        return int(self.frame[column].nunique(dropna=False).compute()) == self.n_rows

    def monotone_unique(self, column: str) -> tuple[bool, Any, Any]:
        import dask

        s = self.frame[column]
        up, down, distinct, low, high = dask.compute(s.is_monotonic_increasing, s.is_monotonic_decreasing,
                                                     s.nunique(dropna=False), s.min(), s.max())
        if distinct != self.n_rows or not (up or down) or self.n_rows < 2:
            return False, None, None
        return True, (low if up else high), (high if up else low)


def _encode_partition(part, layout: tuple) -> dict[str, np.ndarray]:
    import pyarrow as pa

    return encode_views(pa.Table.from_pandas(part, preserve_index=False), layout)


def dask_frame_views(table: DaskFrameTable, plan: ViewPlan, chunk_rows: int | None = None) -> dict[str, Any]:
    """The views of a dask DataFrame: one encoding task per partition, then row chunks of one
    size (a Zarr array of the run has uniform chunks, as for :func:`table_views`).

    Returns
    -------
    dict of str to dask.array.Array of shape (N, d_v)
    """
    import dask
    import dask.array as da

    layout = view_layout(table, plan)
    columns = list(dict.fromkeys(c for _, cols, _, _ in layout for c in cols))
    encode = dask.delayed(_encode_partition, pure=True)
    parts = [(encode(p, layout), n) for p, n in zip(table.frame[columns].to_delayed(), table.row_groups[0])]
    widths = plan.widths()
    size = _rows_per_piece(table, plan, chunk_rows)
    out = {}
    for view, _, dtype, _ in layout:
        blocks = [da.from_delayed(dask.delayed(operator.getitem, pure=True)(p, view), shape=(n, widths[view]),
                                  dtype=dtype) for p, n in parts if n]
        out[view] = da.concatenate(blocks).rechunk((size, widths[view]))
    return out
