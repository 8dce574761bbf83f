"""Cluster profiles in the pipeline: the partials in the labels pass (a run's and an
assignment's), the ``profiles`` stage, and the long table out (``--profiles-out``).

The accumulators and what is read from them are :mod:`mkdist._core._profiles` and
:mod:`mkdist._core._profile_tables`; this module builds them on the run's Dask graph: one
partial per row chunk, from the chunk's labels and its rows as read (the run's views before
imputation: a missing cell is counted, not filled), merged by a tree of ``SPLIT_EVERY``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core._cluster import compute
from .._core._kmeans import merge_tree
from .._core._profile_tables import ClusterProfiles, profiles_from_dataset, profiles_to_dataset
from .._core._profiles import ProfileLayout, ProfileSums, profile_partial
from ..errors import InputValidationError, StoreExistsError

__all__ = ["PROFILES_STAGE", "profile_layout", "profile_accumulator", "profile_blocks", "merge_blocks",
           "write_profiles", "read_profiles", "stage_profiles", "check_profiles_out", "write_profiles_out",
           "profiles_mark", "profiles_enabled"]

#: The stage that holds a run's (or an assignment's) profiles.
PROFILES_STAGE = "profiles"
#: Key of the long table's metadata that says which run wrote it (as ``--labels-out`` marks its files).
_MARK_KEY = b"mkdist.profiles"


def profile_layout(store, views: Mapping[str, Any]) -> ProfileLayout:
    """The profile's columns for a run's views: a table's own columns and categories (from
    the store's input record), else ``view:index`` per feature."""
    record = store.attrs.get("input") or {}
    widths = {name: int(v.shape[1]) for name, v in views.items()}
    return ProfileLayout.of_views(widths, record.get("views"), record.get("categories"))


def _chunk(labels, *blocks, layout=None, n_clusters=0):
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = profile_partial(np.asarray(labels).ravel(), [np.asarray(b) for b in blocks], layout, n_clusters)
    return out


def profiles_enabled() -> bool:
    """Whether runs compute profiles: ``MKDIST_PROFILES=0`` turns them off (the labels pass
    without them, for A/B measurements of their cost, ``bench/bench_profiles.py``)."""
    return os.environ.get("MKDIST_PROFILES", "1").strip() != "0"


def profile_blocks(labels, views: Mapping[str, Any], layout: ProfileLayout, n_clusters: int):
    """One profile partial per row chunk of ``labels`` (lazy, shape (n_chunks, 1), objects);
    None when profiles are off (:func:`profiles_enabled`).

    Parameters
    ----------
    labels : dask.array.Array of shape (N,)
    views : dict of str to dask.array.Array of shape (N, d_v)
        The rows as read (not filled); rechunked to the labels' row chunks if they differ.
    """
    import dask.array as da

    if not profiles_enabled():
        return None
    chunks = labels.chunks[0]
    arrays = [_aligned(views[name], chunks) for name in layout.views]
    nb = len(chunks)
    return da.map_blocks(_chunk, labels[:, None], *arrays, layout=layout, n_clusters=int(n_clusters),
                         chunks=((1,) * nb, (1,)), dtype=object, meta=np.empty((0, 0), dtype=object),
                         name="mkdist-profile-partials")


def _aligned(view, chunks):
    """A view with these row chunks and one column chunk (rechunked only when it differs)."""
    import dask.array as da

    if not hasattr(view, "dask"):  # an in-memory view
        return da.from_array(np.asarray(view), chunks=(chunks, -1))
    return view if view.chunks[0] == chunks and view.numblocks[1] == 1 else view.rechunk((chunks, -1))


def profile_accumulator(views: Mapping[str, Any], layout: ProfileLayout, n_clusters: int, chunks: tuple):
    """What the labels pass (``_core._kmeans.labels_pass``) accumulates for the profiles: the
    views as read (in ``chunks`` of rows), a chunk's partial, their merge; None when off."""
    if not profiles_enabled():
        return None
    arrays = [_aligned(views[name], chunks) for name in layout.views]
    return arrays, functools.partial(profile_partial, layout=layout, n_clusters=int(n_clusters)), ProfileSums.merge


def merge_blocks(blocks) -> ProfileSums | None:
    """The profile of every row from the partials of :func:`profile_blocks` (persisted or lazy):
    a tree merge on the workers, ``SPLIT_EVERY`` partials a node (the labels pass's tree); one
    total reaches here."""
    if blocks is None:
        return None
    return compute(merge_tree(blocks, ProfileSums.merge))[0]


def write_profiles(store, sums: ProfileSums | None, layout: ProfileLayout) -> None:
    """The ``profiles`` stage of ``store`` (replacing an older one); nothing when ``sums`` is None."""
    if sums is None:
        return
    store.write_stage(PROFILES_STAGE, profiles_to_dataset(sums, layout), overwrite=True, compute=compute)


def read_profiles(store) -> ClusterProfiles | None:
    """The profiles a store holds (a run's or an assignment's), or None when it has none."""
    if not store.is_complete(PROFILES_STAGE):
        return None
    # A few small arrays, read here (as ``compute_here`` reads a model): through the cluster
    # every read would be a round trip, and a fresh `dask scheduler` would import the store's
    # reader and with it zarr, xarray and pandas (tests/test_cluster.py).
    return profiles_from_dataset(store.read_stage(PROFILES_STAGE).load(scheduler="threads"))


def stage_profiles(store, views: Mapping[str, Any], n_clusters: int, *, persist=None, columns_of=None) -> bool:
    """Profiles from the stored labels, when the labels stage is complete and the profiles are
    not (a store written before profiles existed, or whose profiles stage was damaged): one
    pass over the input.  ``columns_of``: the store whose input record names the columns (an
    assignment's are its model's run; default ``store``).  Returns whether it computed them."""
    if not profiles_enabled() or not store.is_complete("labels") or store.is_complete(PROFILES_STAGE):
        return False
    labels = store.read_stage("labels")["labels"].data
    first = next(iter(views.values()))
    if first.chunks[0] != labels.chunks[0]:
        labels = labels.rechunk((first.chunks[0],))
    layout = profile_layout(store if columns_of is None else columns_of, views)
    blocks = profile_blocks(labels, views, layout, n_clusters)
    if persist is not None:
        blocks = persist(blocks)
    write_profiles(store, merge_blocks(blocks), layout)
    return True


# ----------------------------------------------------------------------------- the long table out
def profiles_mark(store) -> dict[str, Any]:
    """What a long table written from ``store`` records: the store, its fingerprint and its
    profiles stage's token (an output whose mark matches is that store's current profiles)."""
    return {"store": str(store.url), "fingerprint": store.fingerprint,
            "profiles": store.stage_token(PROFILES_STAGE)}


def _format(path: Any) -> str:
    name = os.fspath(path).lower().rstrip("/")
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq", ".parq")):
        return "parquet"
    raise InputValidationError(f"--profiles-out {os.fspath(path)}: name the file .parquet (or .pq) or .csv, the "
                               "format of the long table")


def _owner(path: Any, fmt: str) -> dict | None | bool:
    """Who wrote the table at ``path``: its mark; False when something mkdist did not write
    is there; None when nothing is."""
    import fsspec

    from mkdist.storage._remote import options_for

    raw = os.fspath(path)
    fs, p = fsspec.core.url_to_fs(raw, **options_for(raw))
    if not fs.exists(p):
        return None
    if fs.isdir(p):
        return False
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with fs.open(p, "rb") as f:
                meta = pq.read_schema(f).metadata or {}
            return json.loads(meta[_MARK_KEY]) if _MARK_KEY in meta else False
        if not fs.exists(_sidecar(p)):
            return False
        with fs.open(_sidecar(p), "r") as f:
            return json.load(f)
    except (OSError, ValueError, KeyError):
        return False


def _sidecar(path: str) -> str:
    return f"{path}.mkdist.json"


def check_profiles_out(path: Any, overwrite: bool, mark: Mapping[str, Any] | None = None, *,
                       store: Any = None) -> str:
    """What to do with a profiles output before any work: "write", "skip" (this run's
    profiles are there already) or "replace"; a file of another run or one mkdist did not
    write is refused unless ``overwrite`` (as a labels output is).  ``store``: the run's
    store before it has profiles (its own older table is replaced once it has)."""
    fmt = _format(path)
    owner = _owner(path, fmt)
    if owner is None:
        return "write"
    if owner and mark is not None and all(owner.get(k) == v for k, v in mark.items()):
        return "skip"
    ours = {str(mark.get("store"))} if mark is not None else set()
    if store is not None:
        raw = str(getattr(store, "url", store)).rstrip("/")
        ours |= {raw, raw if "://" in raw else os.path.abspath(raw)}
    if overwrite or (owner and str(owner.get("store")).rstrip("/") in ours):
        return "replace"
    who = f"the profiles of the run in {owner['store']}" if owner else "a file mkdist did not write"
    raise StoreExistsError(f"{os.fspath(path)} exists and holds {who}; pass --overwrite (overwrite=True) to replace "
                           "it, or choose another profiles output")


def write_profiles_out(path: Any, store, *, overwrite: bool = False) -> str:
    """The store's profiles as the tidy long table (:meth:`ClusterProfiles.long_table`),
    Parquet or CSV by the path's extension, marked as the store's; written to a temporary
    file, then moved into place."""
    import fsspec
    import pyarrow as pa

    from mkdist.storage._remote import options_for

    mark = profiles_mark(store)
    if check_profiles_out(path, overwrite, mark) == "skip":
        return os.fspath(path)
    profiles = read_profiles(store)
    if profiles is None:
        raise InputValidationError(f"{store.url} holds no profiles: re-run it to compute them")
    table = profiles.long_table()
    raw = os.fspath(path)
    fs, p = fsspec.core.url_to_fs(raw, **options_for(raw))
    tmp = f"{p}.tmp-{os.getpid()}"
    if _format(path) == "parquet":
        import pyarrow.parquet as pq

        arrow = pa.Table.from_pandas(table, preserve_index=False)
        arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), _MARK_KEY: json.dumps(mark)})
        with fs.open(tmp, "wb") as f:
            pq.write_table(arrow, f)
    else:
        with fs.open(tmp, "w") as f:
            table.to_csv(f, index=False)
    fs.mv(tmp, p)
    if _format(path) == "csv":
        # A CSV has no metadata a BI tool would skip: the mark is a file beside it.
        with fs.open(_sidecar(p), "w") as f:
            json.dump(mark, f)
    return raw
