"""k-means on the rows of an embedding, NumPy or Dask, through the one row engine.

The restarts run in memory on a uniform sample of the rows (scikit-learn's k-means++ and
Lloyd, ``n_init`` times, to convergence); the best of them on the sample is then refined by
Lloyd passes over all rows, each pass ONE tree-reduced map over the row chunks (only
k x (K + 2) numbers reach the client).  Choosing the restart on a 50,000-row sample costs
no pass over the data, where running every restart over all rows multiplied each pass's
work by ``n_init`` (measured on W1 at 300k rows: 34 passes of 3 runs before, a handful of
passes of one run after).  When the data fit in the sample this is exactly scikit-learn's
``KMeans``.  NumPy and Dask input run the same code, so they give the same labels.
Written here rather than taken from dask-ml, whose KMeans makes one pass per restart and
per iteration and sums partials linearly (``bench/bench_pipeline.py`` compares the two).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ._blocks import RowBlocks
from ._cluster import compute
from ._distances import nearest_center

__all__ = ["KMeansResult", "kmeans", "assign_labels", "assign_with_distance", "merge_tree"]


@dataclasses.dataclass
class KMeansResult:
    """Result of :func:`kmeans`.

    Attributes
    ----------
    centers : ndarray of shape (k, K)
    labels : ndarray or dask.array.Array of shape (N,), int64 (lazy for Dask input)
    inertia : float
        Sum of squared distances to the nearest centre, at the last pass.
    n_iter : int
        Lloyd passes over all rows (after the restarts on the sample).
    """

    centers: np.ndarray
    labels: object
    inertia: float
    n_iter: int


def _lloyd_partials(blocks, centers: np.ndarray) -> np.ndarray:
    """Lloyd statistics of one row block, flat (k * (K + 2),).

    For every cluster: the sum of member rows, the member count and the sum of squared
    distances (the inertia contribution).  ``centers`` has shape (k, K).
    """
    H = np.asarray(blocks[0], dtype=np.float64)
    k, K = centers.shape
    labels, dist = nearest_center(H, centers, return_distance=True)
    onehot = np.zeros((H.shape[0], k))
    onehot[np.arange(H.shape[0]), labels] = 1.0
    out = np.empty((k, K + 2))
    out[:, :K] = onehot.T @ H
    out[:, K] = onehot.sum(axis=0)
    out[:, K + 1] = onehot.T @ dist
    return out.ravel()


def _assign_rows(blocks, centers: np.ndarray) -> np.ndarray:
    return nearest_center(blocks[0], centers)


def assign_labels(H, centers: np.ndarray):
    """Nearest centre of every row of H, int64 (NumPy in -> NumPy out, Dask in -> lazy Dask out)."""
    return RowBlocks({"embedding": H}).map(_assign_rows, np.asarray(centers, dtype=np.float64), n_cols=None,
                                           dtype=np.int64, name="assign", check_finite=False)


def _label_and_distance(blocks, centers: np.ndarray) -> np.ndarray:
    labels, dist = nearest_center(blocks[0], centers, return_distance=True)
    return np.stack([labels.astype(np.float64), dist], axis=1)


def assign_with_distance(H, centers: np.ndarray):
    """Nearest centre of every row of H and the squared distance to it (lazy for Dask input).

    Returns
    -------
    labels : ndarray or dask.array.Array of shape (N,), int64
    distance : ndarray or dask.array.Array of shape (N,), float64
    """
    both = RowBlocks({"embedding": H}).map(_label_and_distance, np.asarray(centers, dtype=np.float64), n_cols=2,
                                           dtype=np.float64, name="assign-distance", check_finite=False)
    return both[:, 0].astype(np.int64), both[:, 1]


def _labels_chunk(block, centers, report_index, n_clusters, block_rows, block_info=None):
    """Everything the labels stage keeps of one embedding chunk, as a (1, 1) object block:
    labels (int32), squared distances (float32), the cluster sizes and the chunk's rows among
    ``report_index`` (embedding rows, labels, distances)."""
    from ._blocks import _map_rows

    start, stop = block_info[0]["array-location"][0]
    # The same function over the same sub-blocks as assign_with_distance: the same numbers.
    both = _map_rows([block], centers, _label_and_distance, block_rows, np.float64)
    labels, distance = both[:, 0].astype(np.int64).astype(np.int32), both[:, 1].astype(np.float32)
    local = report_index[np.searchsorted(report_index, start):np.searchsorted(report_index, stop)] - start
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (labels, distance, np.bincount(labels, minlength=n_clusters),
                 (np.asarray(block[local]), labels[local], distance[local]))
    return out


def _accumulate_chunk(part, *blocks, chunk_fn=None):
    """``chunk_fn`` of a chunk's labels (from its labels task's output) and its ``blocks``."""
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = chunk_fn(part[0, 0][0], [np.asarray(b) for b in blocks])
    return out


def _part(block, i):
    return block[0, 0][i]


def labels_pass(H, centers: np.ndarray, report_index: np.ndarray, *, persist: Callable[[Any], Any],
                n_clusters: int, accumulate: tuple | None = None):
    """The labels of every row of a Dask H in ONE pass: one task per chunk computes the labels,
    the distances, the chunk's cluster sizes and its report rows (and whatever ``accumulate``
    sums over the rows' labels).

    Parameters
    ----------
    H : dask.array.Array of shape (N, K)
    centers : ndarray of shape (k, K)
    report_index : ndarray of shape (n,)
        Sorted rows whose embedding, label and distance are returned in memory.
    persist : callable
        Persists the per-chunk results (e.g. with a progress line); they stay on the workers.
    n_clusters : int
    accumulate : (arrays, chunk_fn, merge_fn), optional
        More row-chunked arrays (H's row chunks, one column chunk each), ``chunk_fn(labels,
        blocks)`` giving a chunk's partial from its persisted labels and those blocks, and
        ``merge_fn(partials)`` merging them (on the workers, a tree of ``SPLIT_EVERY``; the
        cluster profiles).  The partials are tasks of their own whose merged total is persisted
        with the labels: a partial is freed once merged, not held with the labels until the
        store write (at 100M rows, 763 W1 partials of ~3 MB would have been).

    Returns
    -------
    labels : dask.array.Array of shape (N,), int32
        Lazy getters of the persisted results (each fuses into the task that consumes it,
        such as a store write).
    distance : dask.array.Array of shape (N,), float32
    sizes : ndarray of shape (k,), int64
    report : tuple of ndarrays (rows (n, K), labels (n,), distances (n,))
    total : the merged partials of ``accumulate`` (only with it)
    """
    import dask.array as da
    from dask.base import tokenize

    rows = RowBlocks({"embedding": H})
    centers = np.asarray(centers, dtype=np.float64)
    report_index = np.asarray(report_index, dtype=np.int64)
    name = f"mkdist-labels-{tokenize(H, centers, report_index, n_clusters, rows.block_rows)}"
    nb = len(rows.row_chunks)
    parts = da.map_blocks(_labels_chunk, rows.arrays[0], centers, report_index, n_clusters, rows.block_rows,
                          chunks=((1,) * nb, (1,)), dtype=object, meta=np.empty((0, 0), dtype=object), name=name)
    total = None
    if accumulate is not None:
        extra, chunk_fn, merge_fn = accumulate
        # Block (i, 0) of the labels tasks beside block (i, 0) of each array (one column chunk
        # each, H's row chunks): no getter task between them.  Persisted with the labels (one
        # phase: the partials' input reads run beside the labels tasks) as their merged total
        # only: a partial is freed once merged.
        partials = da.blockwise(_accumulate_chunk, "ij", parts, "ij", *[a for x in extra for a in (x, "ij")],
                                chunk_fn=chunk_fn, align_arrays=False, concatenate=False, dtype=object,
                                meta=np.empty((0, 0), dtype=object),
                                name=f"{name}-accumulate-{tokenize(*extra, chunk_fn)}")
        parts, total = persist((parts, merge_tree(partials, merge_fn)))
    else:
        parts = persist(parts)
    kw = dict(chunks=(rows.row_chunks,), drop_axis=1)
    labels = parts.map_blocks(_part, 0, dtype=np.int32, meta=np.empty((0,), np.int32), name=f"{name}-labels", **kw)
    distance = parts.map_blocks(_part, 1, dtype=np.float32, meta=np.empty((0,), np.float32),
                                name=f"{name}-distance", **kw)
    small = parts.map_blocks(_small_parts, dtype=object, meta=np.empty((0, 0), dtype=object), name=f"{name}-small")
    if accumulate is None:
        small = np.asarray(compute(small)[0]).ravel()
    else:
        small, total = compute(small, total)
        small = np.asarray(small).ravel()
    sizes = np.sum([s[0] for s in small], axis=0).astype(np.int64)
    report = tuple(np.concatenate([s[1][j] for s in small]) for j in range(3))
    if accumulate is None:
        return labels, distance, sizes, report
    return labels, distance, sizes, report, total


def merge_tree(parts, merge_fn):
    """``merge_fn`` over the (1, 1) object blocks of ``parts`` (one partial each) by a tree of
    ``SPLIT_EVERY`` a node on the workers (Delayed): the labels pass's and the profiles' merge."""
    import dask

    from ._blocks import SPLIT_EVERY

    level = list(parts.to_delayed().ravel())
    merge = dask.delayed(_merge_level, pure=True)
    while True:
        level = [merge(merge_fn, *level[i:i + SPLIT_EVERY]) for i in range(0, len(level), SPLIT_EVERY)]
        if len(level) == 1:
            return level[0]


def _merge_level(merge_fn, *items):
    return merge_fn([item[0, 0] if isinstance(item, np.ndarray) else item for item in items])


def _small_parts(block):
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (block[0, 0][2], block[0, 0][3])
    return out


def _sample_rows(H, size: int, rng: np.random.RandomState) -> np.ndarray:
    N = H.shape[0]
    if N <= size:
        return np.asarray(compute(H)[0], dtype=np.float64)
    idx = np.sort(rng.choice(N, size=size, replace=False))
    return np.asarray(RowBlocks({"embedding": H}).take(idx)[0], dtype=np.float64)


def kmeans(H, n_clusters: int, *, n_init: int = 3, max_iter: int = 100, tol: float = 1e-4,
           init_sample_size: int = 50_000, random_state=None) -> KMeansResult:
    """k-means on the rows of H, in memory or across a Dask cluster (one code path).

    Parameters
    ----------
    H : ndarray or dask.array.Array of shape (N, K)
        For Dask input persist H first if it is expensive to recompute: every Lloyd
        iteration is one pass over it.
    n_clusters : int
    n_init : int, default=3
        k-means++ restarts, run on the sample; the one with the lowest sample inertia is
        refined over all rows.
    max_iter : int, default=100
        Lloyd iterations (on the sample per restart, and over all rows).
    tol : float, default=1e-4
        Stop when the squared centre shift is <= tol * (mean per-feature variance of the
        sample), scikit-learn's rule.
    init_sample_size : int, default=50000
        Rows sampled uniformly for the restarts (all rows when N is smaller).
    random_state : int, RandomState or None

    Returns
    -------
    KMeansResult
        Labels are lazy for Dask input.
    """
    # Imported here, with KMeans below: importing scikit-learn costs ~2 s (it loads much of
    # SciPy), which every command that only reads a store or refuses its input would pay.
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    rows = RowBlocks({"embedding": H})
    sample = _sample_rows(H, init_sample_size, rng)
    with warnings.catch_warnings():
        # Fewer distinct sample rows than clusters: duplicate centres are legal here.
        warnings.simplefilter("ignore", ConvergenceWarning)
        from sklearn.cluster import KMeans

        start = KMeans(n_clusters, n_init=n_init, max_iter=max_iter, tol=tol,
                       random_state=rng.randint(np.iinfo(np.int32).max)).fit(sample)
    centers = np.asarray(start.cluster_centers_, dtype=np.float64)
    threshold = tol * float(np.mean(np.var(sample, axis=0)))
    K = H.shape[1]
    inertia, n_iter = float(start.inertia_), 0
    for _ in range(max_iter):
        stats = rows.reduce(_lloyd_partials, centers, width=n_clusters * (K + 2), name="lloyd",
                            check_finite=False).reshape(n_clusters, K + 2)
        sums, counts, sse = stats[:, :K], stats[:, K], stats[:, K + 1]
        # An empty cluster keeps its centre rather than becoming NaN.
        new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centers)
        shift = float(((new - centers) ** 2).sum())
        inertia = float(sse.sum())  # w.r.t. the centres used in this pass
        centers = new
        n_iter += 1
        if shift <= threshold:
            break
    return KMeansResult(centers, assign_labels(H, centers), inertia, n_iter)
