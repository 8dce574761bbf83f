"""The labels output: every row's id, cluster and distance written as Parquet in parallel, marked
with the run that wrote it, and the check of what is already there before any work."""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Mapping
from typing import Any

import numpy as np

from mkdist.storage._remote import options_for

from ..errors import StoreExistsError

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
