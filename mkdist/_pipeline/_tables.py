"""Tables as input: Parquet files -- one file, a directory, a glob or an fsspec URL -- read
with pyarrow, their columns sorted into views, their ids kept for the labels.

A data engineer's table has an id column, string and categorical columns, timestamps and
nulls beside the numbers to cluster.  This module decides, from the files' metadata alone
(schema, row counts, column statistics: no data pass), what every column is:

* the id column (``id_column``) is never a feature; it keys the labels written out;
* numeric columns (integers, floats, decimals) are features; booleans are features only
  when a view names them (as 0/1);
* strings, categoricals (dictionary columns), timestamps, dates and anything else are never
  features: undeclared they are ignored and named, declared they are refused with what to do;
* views are declared as column lists or ``fnmatch`` patterns (``{"a": "a*", "b": ["b0",
  "b1"]}``); with no declaration every numeric non-id column forms one view, and the run
  says so in one line;
* an undeclared integer column that looks like a row id (unique and monotone) is refused,
  naming it: clustered as a feature, it splits the rows into id ranges;
* nulls in a feature (from the column statistics) and in the id column are refused before
  any work, naming the column, the count and the first row; with ``missing="impute"`` the
  features' nulls pass (as NaN, which the run fills), the id column's never do.

Only ``pyarrow`` and ``fsspec`` are imported here (no Dask, xarray or scikit-learn), so the
command line runs every one of these checks in well under a second.  :func:`table_views`
then builds the row-chunked Dask views: one read task per piece of the table (whole row
groups, or slices of a large one), each reading the columns of every view once.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import operator
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError

__all__ = ["ParquetTable", "ViewPlan", "Column", "is_table_source", "plan_views", "table_views", "table_ids",
           "parse_view_option", "TABLE_SUFFIXES", "DEFAULT_VIEW"]

#: File name endings read as Parquet.
TABLE_SUFFIXES = (".parquet", ".pq", ".parq")
#: Name of the one view formed by every numeric column when no view is declared.
DEFAULT_VIEW = "features"
#: Integer columns with one of these names (or ending in ``_id``) are checked for uniqueness
#: in any order, not only for monotone values.
_ID_LIKE_NAMES = ("id", "index", "key", "uuid", "row", "rowid", "row_id", "row_number")
_GLOB_CHARS = "*?["
#: What every refusal of missing values offers (``missing="impute"``: the run fills them).
MISSING_HINT = "pass --missing impute (missing='impute') to cluster those rows too, their missing cells imputed"
#: Bytes of a row chunk of the views (as for NumPy input): big enough to amortise task
#: overhead, small enough that a worker holds a handful at once.
_CHUNK_BYTES = 32 * 2**20


# ----------------------------------------------------------------------------- columns
@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a table: its name, what it is to mkdist, its Arrow type and nulls.

    ``kind`` is one of "numeric", "integer" (numeric too), "boolean", "string",
    "categorical", "temporal", "other"; ``nulls`` is None when the files carry no statistics.
    """

    name: str
    kind: str
    arrow_type: str
    nulls: int | None

    @property
    def is_numeric(self) -> bool:
        return self.kind in ("numeric", "integer")


def _kind(arrow_type) -> str:
    import pyarrow.types as t

    if t.is_integer(arrow_type):
        return "integer"
    if t.is_floating(arrow_type) or t.is_decimal(arrow_type):
        return "numeric"
    if t.is_boolean(arrow_type):
        return "boolean"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type) or getattr(t, "is_string_view", lambda _: False)(
            arrow_type):
        return "string"
    if t.is_dictionary(arrow_type):
        return "categorical"
    if t.is_temporal(arrow_type):
        return "temporal"
    return "other"


def _describe(kind: str, arrow_type: str) -> str:
    """How a column is named in messages: 'string', 'categorical', 'timestamp[us]', ..."""
    return arrow_type if kind in ("temporal", "other") else kind


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
class ParquetTable:
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
        self.source, self.fs, self.files, self.schema = source, fs, files, schema
        self.row_groups = row_groups
        self.n_rows = int(sum(sum(r) for r in row_groups))
        self._stats = stats  # per column: list over (file, row group) of (min, max, nulls) or None
        self.columns = {f.name: Column(f.name, _kind(f.type), str(f.type), nulls.get(f.name)) for f in schema}
        pandas_meta = schema.pandas_metadata or {}
        self.pandas_index = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]
        self.fingerprint = "sha256:" + hashlib.sha256(json.dumps(
            {"files": identity, "schema": schema.to_string(show_schema_metadata=False)}, sort_keys=True,
            default=str).encode()).hexdigest()[:32]

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
    def pieces(self, target_rows: int, exact: bool = False) -> list[tuple[int, int]]:
        """The table cut into row ranges ``(first row, rows)`` of one size (the last shorter).

        One size, because a Zarr array (the embedding, the labels) has uniform chunks and each
        range becomes one chunk of them.  The size is the row groups' own when they are close
        to ``target_rows`` (or an even share of them when they are much larger), so that ranges
        fall on row-group boundaries and no row group is decoded twice; a range may span row
        groups and files.
        """
        sizes = [n for groups in self.row_groups for n in groups]
        common = max(set(sizes), key=sizes.count) if sizes else target_rows
        if exact:
            size = target_rows
        elif target_rows / 2 <= common <= 2 * target_rows:
            size = common
        elif common > 2 * target_rows:
            size = -(-common // round(common / target_rows))
        else:
            size = target_rows
        size = max(1, int(size))
        return [(start, min(size, self.n_rows - start)) for start in range(0, self.n_rows, size)]

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

    def read_rows(self, rows: Sequence[int], column: str) -> list:
        """Values of ``column`` at a few rows (as Python objects), reading their row groups."""
        return [self.read((int(r), 1), [column]).column(0)[0].as_py() for r in rows]

    def first_null(self, column: str) -> int | None:
        """The first row where ``column`` is null (reads only row groups that may hold one)."""
        import pyarrow.compute as pc

        stats = self._stats.get(column) or []
        k = offset = 0
        for groups in self.row_groups:
            for n in groups:
                st = stats[k] if k < len(stats) else None
                k += 1
                if st is None or st[2] is None or st[2] > 0:
                    values = self.read((offset, n), [column]).column(0)
                    hit = pc.index(pc.is_null(values), True).as_py()
                    if hit is not None and hit >= 0:
                        return offset + hit
                offset += n
        return None

    def monotone_unique(self, column: str) -> tuple[bool, Any, Any]:
        """Whether an integer column is strictly increasing or decreasing (so unique), with its
        first and last value; the row-group statistics rule most columns out without a read."""
        import pyarrow.compute as pc

        st = self._stats.get(column) or []
        if st and all(s is not None and s[0] is not None for s in st):
            lows, highs = [s[0] for s in st], [s[1] for s in st]
            up = all(h < lo2 for h, lo2 in zip(highs[:-1], lows[1:]))
            down = all(lo > h2 for lo, h2 in zip(lows[:-1], highs[1:]))
            span = max(highs) - min(lows)
            if not (up or down) or span < self.n_rows - 1:
                return False, None, None
        values = self._whole_column(column)
        if pc.count(values, mode="only_null").as_py():
            return False, None, None
        x = values.to_numpy()
        d = np.diff(x)
        return bool(x.size > 1 and (np.all(d > 0) or np.all(d < 0))), x[0], x[-1]

    def unique(self, column: str) -> bool:
        """Whether a column's values are all distinct (one column read)."""
        import pyarrow.compute as pc

        values = self._whole_column(column)
        return pc.count_distinct(values, mode="all").as_py() == self.n_rows

    def _whole_column(self, column: str):
        return self.read((0, self.n_rows), [column]).column(0)


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


# ----------------------------------------------------------------------------- views
@dataclasses.dataclass
class ViewPlan:
    """Which columns of a table form which view, and which are left out and why.

    Attributes
    ----------
    views : dict of str to list of str
        View name -> its columns, in table order within a pattern, in the given order across.
    ignored : list of (str, str)
        (column, why) for every column that is not a feature.
    declared : bool
        Whether the views were declared (else one view of every numeric non-id column).
    id_column, label_column : str or None
    """

    views: dict[str, list[str]]
    ignored: list[tuple[str, str]]
    declared: bool
    id_column: str | None = None
    label_column: str | None = None

    def message(self) -> str:
        """The one line a run prints about its input's columns."""
        def cols(names: list[str]) -> str:
            return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {names[-1]}"

        if self.declared:
            head = "views: " + "; ".join(f"{v} = {cols(c)} ({len(c)} columns)" for v, c in self.views.items())
        else:
            (name, columns), = self.views.items()
            head = (f"one view {name!r} of all {len(columns)} numeric columns ({cols(columns)}); declare views "
                    "with --view NAME=COLUMNS")
        if self.ignored:
            by_reason: dict[str, list[str]] = {}
            for c, why in self.ignored:
                by_reason.setdefault(why, []).append(c)
            head += "; ignored: " + ", ".join(f"{cols(c)} ({why})" for why, c in by_reason.items())
        return head

    def to_json(self) -> dict[str, Any]:
        return {"views": self.views, "ignored": [list(x) for x in self.ignored], "declared": self.declared,
                "id_column": self.id_column, "label_column": self.label_column}


def parse_view_option(values: Sequence[str]) -> dict[str, list[str]]:
    """``["a=a*", "b=b0,b1,b2"]`` (the ``--view`` option) -> ``{"a": ["a*"], "b": ["b0", "b1", "b2"]}``."""
    out: dict[str, list[str]] = {}
    for item in values:
        name, sep, spec = item.partition("=")
        name, spec = name.strip(), spec.strip().strip("'\"")
        if not sep or not name or not spec:
            raise InputValidationError(f"--view {item!r}: write NAME=COLUMNS, e.g. --view a='a*' or --view "
                                       "b=b0,b1,b2")
        if name in out:
            raise InputValidationError(f"view {name!r} is declared twice")
        out[name] = [c.strip() for c in spec.split(",") if c.strip()]
    return out


def _normalise_declaration(views: Any) -> dict[str, list[str]] | None:
    if views is None:
        return None
    if isinstance(views, Mapping):
        out = {}
        for name, spec in views.items():
            items = [spec] if isinstance(spec, str) else list(spec)
            cols = [c.strip() for item in items for c in str(item).split(",") if c.strip()]
            if not cols:
                raise InputValidationError(f"view {name!r} names no column")
            out[str(name)] = cols
        if not out:
            raise InputValidationError("views={} declares no view")
        return out
    raise InputValidationError(
        f"views={views!r}: for a table, declare views as a mapping of view name to columns or patterns, "
        "e.g. {'a': 'a*', 'b': ['b0', 'b1']}")


def plan_views(table: ParquetTable, views: Any = None, *, id_column: str | None = None,
               label_column: str | None = None, missing: str | None = None) -> ViewPlan:
    """Sort a table's columns into views; refuse what cannot be clustered, naming it.

    Parameters
    ----------
    table : ParquetTable
    views : mapping of str to str or list of str, optional
        View name -> column names or ``fnmatch`` patterns (a string may list several,
        comma-separated).  None: one view (``"features"``) of every numeric column.
    id_column : str, optional
        The rows' ids: never a feature.
    label_column : str, optional
        True labels (for scores): never a feature.
    missing : {"refuse", "impute"}, optional
        "impute" lets nulls in the features through (the run fills them); nulls in the id
        column are refused either way.  Default "refuse".

    Returns
    -------
    ViewPlan

    Raises
    ------
    InputValidationError
        An unknown column (the available ones listed), a pattern matching nothing, the id
        column in a view, a declared column that is not a number, a feature with nulls, an id
        column with nulls, an undeclared integer column that looks like a row id, a table
        with no numeric column.
    """
    columns = table.columns
    available = ", ".join(f"{c.name} ({_describe(c.kind, c.arrow_type)})" for c in columns.values())
    for what, name in (("id_column", id_column), ("label column", label_column)):
        if name is not None and name not in columns:
            raise InputValidationError(f"{what} {name!r} is not a column of {table.source}; its columns are: "
                                       f"{available}")
    reserved = {c: why for c, why in ((id_column, "id"), (label_column, "labels")) if c is not None}
    declared = _normalise_declaration(views)
    ignored: list[tuple[str, str]] = []
    if declared is None:
        features = []
        for c in columns.values():
            if c.name in reserved:
                ignored.append((c.name, reserved[c.name]))
            elif c.name in table.pandas_index:
                ignored.append((c.name, "pandas index"))
            elif c.is_numeric:
                features.append(c.name)
            else:
                ignored.append((c.name, _describe(c.kind, c.arrow_type)))
        if not features:
            raise InputValidationError(f"{table.source} has no numeric column to cluster; its columns are: {available}")
        plan = ViewPlan({DEFAULT_VIEW: features}, ignored, False, id_column, label_column)
        _refuse_row_id_features(table, features, explicit=set())
    else:
        chosen: dict[str, list[str]] = {}
        explicit: set[str] = set()
        for view, specs in declared.items():
            cols: list[str] = []
            for spec in specs:
                if any(ch in spec for ch in _GLOB_CHARS):
                    hits = [c for c in columns if fnmatch.fnmatchcase(c, spec) and c not in reserved
                            and c not in table.pandas_index]
                    if not hits:
                        raise InputValidationError(f"view {view!r}: pattern {spec!r} matches no column of "
                                                   f"{table.source}; its columns are: {available}")
                    # A pattern takes the numbers it matches; what else it matches is named as ignored.
                    for c in hits:
                        if columns[c].is_numeric:
                            cols.append(c)
                        elif (c, _describe(columns[c].kind, columns[c].arrow_type)) not in ignored:
                            ignored.append((c, _describe(columns[c].kind, columns[c].arrow_type)))
                    if not any(columns[c].is_numeric for c in hits):
                        raise InputValidationError(f"view {view!r}: pattern {spec!r} matches no numeric column "
                                                   f"(only {', '.join(hits)})")
                else:
                    if spec not in columns:
                        raise InputValidationError(f"view {view!r}: column {spec!r} is not in {table.source}; its "
                                                   f"columns are: {available}")
                    if spec in reserved:
                        raise InputValidationError(f"view {view!r}: column {spec!r} is the {reserved[spec]} column, "
                                                   "which is never a feature")
                    _check_declared(view, columns[spec])
                    cols.append(spec)
                    explicit.add(spec)
            duplicates = sorted({c for c in cols if cols.count(c) > 1})
            if duplicates:
                raise InputValidationError(f"view {view!r} names {duplicates} more than once")
            chosen[view] = cols
        used = {c for cols in chosen.values() for c in cols}
        ignored[:0] = [(c, why) for c, why in reserved.items()]
        for c in columns.values():
            if c.name in reserved:
                continue
            elif c.name not in used and all(c.name != i[0] for i in ignored):
                ignored.append((c.name, "not in a view" if c.is_numeric or c.kind == "boolean"
                                else _describe(c.kind, c.arrow_type)))
        plan = ViewPlan(chosen, ignored, True, id_column, label_column)
        _refuse_row_id_features(table, [c for cols in chosen.values() for c in cols], explicit)
    features = [c for cols in plan.views.values() for c in cols] if missing != "impute" else []
    _refuse_nulls(table, features, id_column)
    return plan


def _check_declared(view: str, column: Column) -> None:
    if column.is_numeric or column.kind == "boolean":
        return
    fix = {"string": "encode it as numbers first (e.g. one-hot) or leave it out of the view",
           "categorical": "one-hot encode its categories first, or leave it out of the view",
           "temporal": "turn it into a number first (e.g. days since a date), or leave it out of the view"}
    raise InputValidationError(f"view {view!r}: column {column.name!r} is {_describe(column.kind, column.arrow_type)}, "
                               f"not a number; {fix.get(column.kind, 'leave it out of the view')}")


def _looks_like_id_name(name: str) -> bool:
    lower = name.lower()
    return lower in _ID_LIKE_NAMES or lower.endswith(("_id", "_key", "_no", "_number")) or lower.endswith("id")


def _refuse_row_id_features(table: ParquetTable, features: Sequence[str], explicit: set[str]) -> None:
    """An integer feature nobody named explicitly that is unique and monotone (or unique with
    an id-like name) is a row id: clustered, it splits the rows into id ranges."""
    if table.n_rows < 3:
        return
    for name in features:
        if name in explicit or table.columns[name].kind != "integer":
            continue
        monotone, first, last = table.monotone_unique(name)
        if monotone or (_looks_like_id_name(name) and table.unique(name)):
            shape = f"unique, monotone integers {first} .. {last}" if monotone else "unique integers"
            raise InputValidationError(
                f"column {name!r} looks like a row id ({shape}): clustered as a feature it splits the rows into "
                f"id ranges; pass --id-column {name} (id_column={name!r}), or name it in a view to cluster it anyway")


def _refuse_nulls(table: ParquetTable, features: Sequence[str], id_column: str | None) -> None:
    """Nulls known from the statistics, in the features or the ids: refused before any work."""
    with_nulls = [c for c in dict.fromkeys(list(features) + ([id_column] if id_column else []))
                  if table.columns[c].nulls]
    if not with_nulls:
        return
    name = with_nulls[0]
    n = table.columns[name].nulls
    row = table.first_null(name)
    where = f"first at row {row}" + _id_suffix(table, id_column, row, name)
    if name == id_column:
        raise InputValidationError(f"id column {name!r} has {n} null{'s' * (n > 1)} ({where}): a row without an id "
                                   "cannot be joined back; fill them or drop those rows")
    others = f" (also: {', '.join(f'{c} {table.columns[c].nulls}' for c in with_nulls[1:])})" if with_nulls[1:] else ""
    raise InputValidationError(f"column {name!r} has {n} missing value{'s' * (n > 1)} ({where}){others}: fill or "
                               f"drop them, leave the column out of the views, or {MISSING_HINT}")


def _id_suffix(table: ParquetTable, id_column: str | None, row: int | None, column: str) -> str:
    if row is None or id_column is None or id_column == column:
        return ""
    try:
        value = table.read_rows([row], id_column)[0]
    except Exception:  # noqa: BLE001 - the id only decorates the message
        return ""
    return f", {id_column} {value!r}"


def describe_row(table: ParquetTable, id_column: str | None):
    """A function row -> 'row 17, customer_id 'C17'' for messages about single rows."""
    def describe(row: int) -> str:
        return f"row {row}" + _id_suffix(table, id_column, row, "")

    return describe


# ----------------------------------------------------------------------------- Dask views
def _view_dtype(table: ParquetTable, columns: Sequence[str]) -> np.dtype:
    """float32, the row engine's working precision, whatever the columns' Arrow types.

    A float64 column is rounded to 7 significant digits: kernel values move by about 1e-7
    relative, far below what changes a clustering, and the row tasks run 2.5x faster
    (embed of 200k rows x 2 views: 2.7 s float32 vs 6.7 s float64, measured).  A value beyond
    float32's range (3.4e38) becomes infinity, which the input scan refuses naming the column.
    """
    return np.dtype(np.float32)


def _column_values(column, dtype) -> np.ndarray:
    """One Arrow column as floats; nulls become NaN, which the input scan names."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_decimal(column.type) or pa.types.is_boolean(column.type) or column.null_count:
        column = pc.cast(column, pa.float64())
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _read_views(table: ParquetTable, piece, layout: tuple[tuple[str, tuple[str, ...], str], ...]) -> dict:
    """Every view's rows of one piece: one read of the union of their columns."""
    needed = list(dict.fromkeys(c for _, cols, _ in layout for c in cols))
    data = table.read(piece, needed)
    out = {}
    for view, cols, dtype in layout:
        block = np.empty((data.num_rows, len(cols)), dtype=dtype)
        for j, c in enumerate(cols):
            block[:, j] = _column_values(data.column(c), dtype)
        out[view] = block
    return out


def _rows_per_piece(table: ParquetTable, plan: ViewPlan, chunk_rows: int | None) -> int:
    if chunk_rows is not None:
        return int(chunk_rows)
    width = sum(len(c) * _view_dtype(table, c).itemsize for c in plan.views.values())
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
    layout = tuple((v, tuple(cols), _view_dtype(table, cols).str) for v, cols in plan.views.items())
    token = tokenize(table, layout, pieces)
    read = f"read-parquet-{token}"
    graph = {read: {(read, i): (_read_views, table, piece, layout) for i, piece in enumerate(pieces)}}
    deps: dict[str, set] = {read: set()}
    rows = tuple(p[1] for p in pieces)
    out = {}
    for view, cols, dtype in layout:
        name = f"{view}-{token}"
        graph[name] = {(name, i, 0): (operator.getitem, (read, i), view) for i in range(len(pieces))}
        deps[name] = {read}
        out[view] = (name, len(cols), np.dtype(dtype))
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
