"""k-means on the rows of an embedding, NumPy or Dask, through the one row engine.

k-means++ with a few Lloyd steps on a uniform sample starts every restart; then every
Lloyd iteration advances ALL ``n_init`` restarts in ONE pass over the rows, partial sums
are tree-reduced and only n_init x k x (K + 2) numbers reach the client per iteration.
NumPy and Dask input run the same code (the same sample, the same passes), so they give
the same labels.  Written here rather than taken from dask-ml: dask-ml's KMeans runs one
pass per restart and per iteration and sums partials linearly (``sum(to_delayed())``);
``bench/bench_pipeline.py`` compares the two.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ._blocks import RowBlocks
from ._kernels import nearest_center
from ._validation import is_dask_array

__all__ = ["KMeansResult", "kmeans", "assign_labels"]


@dataclasses.dataclass
class KMeansResult:
    """Result of :func:`kmeans`.

    Attributes
    ----------
    centers : ndarray of shape (k, K)
    labels : ndarray or dask.array.Array of shape (N,), int64 (lazy for Dask input)
    inertia : float
        Sum of squared distances to the nearest centre (of the best run, at its last pass).
    n_iter : int
        Lloyd passes of the best run.
    """

    centers: np.ndarray
    labels: object
    inertia: float
    n_iter: int


def _lloyd_partials(blocks, centers: np.ndarray) -> np.ndarray:
    """Lloyd statistics of one row block for r runs at once, flat (r * k * (K + 2),).

    For every run and cluster: the sum of member rows, the member count and the sum of
    squared distances (the inertia contribution).  ``centers`` has shape (r, k, K).
    """
    H = np.asarray(blocks[0], dtype=np.float64)
    r, k, K = centers.shape
    out = np.zeros((r, k, K + 2))
    for run in range(r):
        labels, dist = nearest_center(H, centers[run], return_distance=True)
        onehot = np.zeros((H.shape[0], k))
        onehot[np.arange(H.shape[0]), labels] = 1.0
        out[run, :, :K] = onehot.T @ H
        out[run, :, K] = onehot.sum(axis=0)
        out[run, :, K + 1] = onehot.T @ dist
    return out.ravel()


def _assign_rows(blocks, centers: np.ndarray) -> np.ndarray:
    return nearest_center(blocks[0], centers)


def assign_labels(H, centers: np.ndarray):
    """Nearest centre of every row of H, int64 (NumPy in -> NumPy out, Dask in -> lazy Dask out)."""
    return RowBlocks({"embedding": H}).map(_assign_rows, np.asarray(centers, dtype=np.float64), n_cols=None,
                                           dtype=np.int64, name="assign", check_finite=False)


def _sample_rows(H, size: int, rng: np.random.RandomState) -> np.ndarray:
    N = H.shape[0]
    if N <= size:
        return np.asarray(H.compute() if is_dask_array(H) else H, dtype=np.float64)
    idx = np.sort(rng.choice(N, size=size, replace=False))
    sample = H[idx]
    return np.asarray(sample.compute() if is_dask_array(sample) else sample, dtype=np.float64)


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
        Independent runs; the one with the lowest inertia wins.  All runs share each pass.
    max_iter : int, default=100
    tol : float, default=1e-4
        Stop a run when the squared centre shift is <= tol * (mean per-feature variance of
        the sample), scikit-learn's rule.
    init_sample_size : int, default=50000
        Rows sampled uniformly for the k-means++ initialisation (each run a different seed).
    random_state : int, RandomState or None

    Returns
    -------
    KMeansResult
        Labels are lazy for Dask input.
    """
    rng = check_random_state(random_state)
    rows = RowBlocks({"embedding": H})
    sample = _sample_rows(H, init_sample_size, rng)
    # k-means++ plus a few Lloyd steps on the sample: a far better start than k-means++
    # alone, at the cost of one small in-memory fit per run.
    with warnings.catch_warnings():
        # Fewer distinct sample rows than clusters: duplicate centres are legal here.
        warnings.simplefilter("ignore", ConvergenceWarning)
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
        stats = rows.reduce(_lloyd_partials, current, width=current.size // K * (K + 2),
                            name="lloyd", check_finite=False)
        stats = stats.reshape(current.shape[0], n_clusters, K + 2)
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
    # Restarts that reach the same partition have inertias equal up to summation order, which
    # differs between NumPy and Dask input: take the first run within rounding of the best, so
    # both inputs pick the same run (and the same label order).
    best = int(np.flatnonzero(inertia <= inertia.min() * (1.0 + 1e-9) + 1e-300)[0])
    labels = assign_labels(H, centers[best])
    return KMeansResult(centers[best], labels, float(inertia[best]), int(n_iter[best]))
