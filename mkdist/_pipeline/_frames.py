"""pandas and dask DataFrames as input: their views by the same column rules as a Parquet
table, and the Parquet copy beside a run store that a run reads instead of the frame."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from mkdist.storage._remote import options_for

from ._readers import _aligned
from ._scan import check_missing


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
