"""k-means over a row-chunked Dask array: k-means++ on a sample, then Lloyd as tree reductions.

Written here rather than taken from dask-ml: dask-ml's KMeans runs one pass per init and
per iteration and combines partial sums with a linear ``sum(to_delayed())``; here every
Lloyd iteration advances all ``n_init`` runs in ONE pass over the (persisted) embedding,
partial sums are combined by a tree reduction, and only n_init x k x (K + 2) numbers
reach the client per iteration.  (bench/bench_pipeline.py compares it with dask-ml.)
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from sklearn.cluster import KMeans

from ._validation import is_dask_array

__all__ = ["KMeansResult", "kmeans", "lloyd_partials"]

logger = logging.getLogger("mkdist")


@dataclasses.dataclass
class KMeansResult:
    """Result of :func:`kmeans`.

    Attributes
    ----------
    centers : ndarray of shape (k, K)
    labels : ndarray or dask.array.Array of shape (N,), int64 (lazy for Dask input)
    inertia : float
        Sum of squared distances to the nearest centre (of the best run).
    n_iter : int
        Lloyd iterations of the best run.
    """

    centers: np.ndarray
    labels: object
    inertia: float
    n_iter: int


def _nearest(H: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = (H * H).sum(axis=1)[:, None] - 2.0 * (H @ centers.T) + (centers * centers).sum(axis=1)[None, :]
    labels = np.argmin(d, axis=1)
    return labels, np.maximum(d[np.arange(H.shape[0]), labels], 0.0)


def lloyd_partials(H: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Per-block Lloyd statistics for several runs at once.

    Parameters
    ----------
    H : ndarray of shape (b, K)
    centers : ndarray of shape (r, k, K)
        Current centres of r runs.

    Returns
    -------
    ndarray of shape (1, r, k, K + 2)
        For every run and cluster: the sum of member rows, the member count, and the
        sum of squared distances (inertia contribution).
    """
    H = np.asarray(H, dtype=np.float64)
    r, k, K = centers.shape
    out = np.zeros((1, r, k, K + 2))
    for run in range(r):
        labels, dist = _nearest(H, centers[run])
        onehot = np.zeros((H.shape[0], k))
        onehot[np.arange(H.shape[0]), labels] = 1.0
        out[0, run, :, :K] = onehot.T @ H
        out[0, run, :, K] = onehot.sum(axis=0)
        out[0, run, :, K + 1] = onehot.T @ dist
    return out


def _assign(H: np.ndarray, centers: np.ndarray) -> np.ndarray:
    return _nearest(np.asarray(H, dtype=np.float64), centers)[0].astype(np.int64)


def _sample_rows(H, size: int, rng: np.random.RandomState) -> np.ndarray:
    N = H.shape[0]
    if N <= size:
        return np.asarray(H.compute() if is_dask_array(H) else H, dtype=np.float64)
    idx = np.sort(rng.choice(N, size=size, replace=False))
    sample = H[idx]
    return np.asarray(sample.compute() if is_dask_array(sample) else sample, dtype=np.float64)


def kmeans(H, n_clusters: int, *, n_init: int = 3, max_iter: int = 100, tol: float = 1e-4,
           init_sample_size: int = 50_000, random_state=None, split_every: int = 16) -> KMeansResult:
    """k-means on the rows of H, in memory (scikit-learn) or across a Dask cluster.

    Parameters
    ----------
    H : ndarray or dask.array.Array of shape (N, K)
        For Dask input persist H first if it is expensive to recompute: every Lloyd
        iteration is one pass over it.
    n_clusters : int
    n_init : int, default=3
        Independent runs; the one with the lowest inertia wins.  For Dask input all runs
        share each pass over the data.
    max_iter : int, default=100
    tol : float, default=1e-4
        Stop a run when the squared centre shift is <= tol * (mean per-feature variance of
        the sample), scikit-learn's rule.
    init_sample_size : int, default=50000
        Rows sampled uniformly for the k-means++ initialisation (each run a different seed).
    random_state : int, RandomState or None
    split_every : int, default=16
        Fan-in of the tree reduction of partial sums.

    Returns
    -------
    KMeansResult
    """
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    if not is_dask_array(H):
        km = KMeans(n_clusters, n_init=n_init, max_iter=max_iter, tol=tol,
                    random_state=rng.randint(np.iinfo(np.int32).max)).fit(H)
        return KMeansResult(km.cluster_centers_, km.labels_.astype(np.int64), float(km.inertia_), int(km.n_iter_))

    import dask.array as da

    if H.numblocks[1] != 1:
        H = H.rechunk({1: -1})
    sample = _sample_rows(H, init_sample_size, rng)
    # k-means++ plus a few Lloyd steps on the sample: a far better start than k-means++
    # alone, at the cost of one small in-memory fit per run.
    centers = np.stack([
        KMeans(n_clusters, n_init=1, max_iter=20, random_state=rng.randint(np.iinfo(np.int32).max))
        .fit(sample).cluster_centers_ for _ in range(n_init)
    ])
    threshold = tol * float(np.mean(np.var(sample, axis=0)))
    active = np.ones(n_init, dtype=bool)
    n_iter = np.zeros(n_init, dtype=int)
    inertia = np.full(n_init, np.inf)
    K = H.shape[1]
    for _ in range(max_iter):
        current = centers[active]
        partials = da.map_blocks(lloyd_partials, H, current, chunks=((1,) * H.numblocks[0],
                                 (current.shape[0],), (n_clusters,), (K + 2,)),
                                 new_axis=[2, 3], dtype=np.float64)
        stats = partials.sum(axis=0, split_every=split_every).compute()
        sums, counts, sse = stats[..., :K], stats[..., K], stats[..., K + 1]
        # An empty cluster keeps its centre rather than becoming NaN.
        new = np.where(counts[..., None] > 0, sums / np.maximum(counts, 1)[..., None], current)
        shift = ((new - current) ** 2).sum(axis=(1, 2))
        idx = np.flatnonzero(active)
        inertia[idx] = sse.sum(axis=1)  # inertia w.r.t. the centres used in this pass
        centers[idx] = new
        n_iter[idx] += 1
        active[idx[shift <= threshold]] = False
        if not active.any():
            break
    best = int(np.argmin(inertia))
    labels = H.map_blocks(_assign, centers[best], drop_axis=1, dtype=np.int64)
    return KMeansResult(centers[best], labels, float(inertia[best]), int(n_iter[best]))
