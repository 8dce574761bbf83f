"""A table as mkdist reads it, before any view is planned: its columns (name, kind, Arrow type,
nulls) and its rows, in memory (:class:`ArrowTable`, a pandas DataFrame's) or in Parquet files
(``mkdist._pipeline._tables.ParquetTable``), and whether an object is a DataFrame.  Only
``pyarrow`` and NumPy are imported here."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError


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


class Table:
    """A table as mkdist reads it: its columns (name, kind, type, nulls), row count, row groups,
    and the reads that the view checks need.  :class:`ArrowTable` holds one in memory (a
    pandas DataFrame's); ``mkdist._pipeline._tables.ParquetTable`` reads Parquet files.

    Attributes
    ----------
    source : str
        What the table was opened from, for messages.
    n_rows : int
    schema : pyarrow.Schema
    row_groups : list of tuple of int
        Rows of every row group, per file (one group for an in-memory table).
    columns : dict of str to Column
    pandas_index : list of str
        Columns that are a pandas index written beside the data.
    fingerprint : str
        Identifies the table's content (see the subclasses): the same table gives the same
        fingerprint in any process.
    """

    def __init__(self, source: str, schema, row_groups, nulls, stats, identity):
        self.source, self.schema = source, schema
        self.row_groups = row_groups
        self.n_rows = int(sum(sum(r) for r in row_groups))
        self._stats = stats  # per column: list over (file, row group) of (min, max, nulls) or None
        self.columns = {f.name: Column(f.name, _kind(f.type), str(f.type), nulls.get(f.name)) for f in schema}
        pandas_meta = schema.pandas_metadata or {}
        self.pandas_index = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]
        self.fingerprint = "sha256:" + hashlib.sha256(json.dumps(
            {"files": identity, "schema": schema.to_string(show_schema_metadata=False)}, sort_keys=True,
            default=str).encode()).hexdigest()[:32]

    def read(self, piece: tuple[int, int], columns: Sequence[str]):
        """The rows of one range ``(first row, rows)``, those columns, as a pyarrow Table."""
        raise NotImplementedError

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

    def distinct_values(self, column: str, limit: int) -> list | None:
        """The distinct non-null values of a column, sorted, or None when there are more than
        ``limit`` (one column read; a dictionary column's values, not its codes)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = self._whole_column(column)
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        distinct = pc.unique(values).drop_null()
        if len(distinct) > limit:
            return None
        return sorted(distinct.to_pylist())

    def _whole_column(self, column: str):
        return self.read((0, self.n_rows), [column]).column(0)


class ArrowTable(Table):
    """A table held in memory (a pyarrow Table, e.g. from a pandas DataFrame): the same column
    kinds, views, checks and encoding as a Parquet table's.

    Its fingerprint hashes the data's buffers, so the same frame gives the same fingerprint
    in any process (what a re-run compares).
    """

    def __init__(self, data, source: str = "the DataFrame"):
        self.data = data
        nulls = {name: int(data.column(name).null_count) for name in data.column_names}
        digest = hashlib.sha256()
        for column in data.columns:
            for chunk in column.chunks:
                for buffer in chunk.buffers():
                    if buffer is not None:
                        digest.update(memoryview(buffer))
        super().__init__(source, data.schema, [(data.num_rows,)], nulls, {}, digest.hexdigest())

    def __repr__(self) -> str:
        return f"ArrowTable(rows={self.n_rows}, columns={len(self.columns)})"

    def read(self, piece: tuple[int, int], columns: Sequence[str]):
        return self.data.select(list(columns)).slice(*piece)


def frame_to_arrow(frame: Any):
    """A pandas DataFrame as a pyarrow Table, as ``DataFrame.to_parquet`` would store it (a
    RangeIndex as metadata, any other index as a column named in the pandas metadata)."""
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(frame)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InputValidationError(f"the DataFrame cannot be read as a table: {exc} (give each column one type, "
                                   "e.g. df[col] = df[col].astype('string'))") from None


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is a pandas or dask DataFrame (checked without importing either)."""
    module = type(obj).__module__
    return type(obj).__name__ == "DataFrame" and module.split(".")[0] in ("pandas", "dask", "dask_expr")
