"""Squared Euclidean distances, nearest centres and the Gaussian bandwidth heuristics.

:func:`sq_distances` is the one formula every method uses for distances (kernel blocks, k-means,
nearest neighbours, random Fourier features): one GEMM, then the squared row norms added in
place.  :func:`bandwidth_statistic` is the one definition of the bandwidth heuristics ("mean",
"median", "max") and :func:`check_bandwidth` refuses a heuristic of 0 or inf, naming the view.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InputValidationError

__all__ = ["row_sq_norms", "sq_distances", "nearest_center", "bandwidth_statistic", "check_bandwidth"]

#: Rows used to estimate the median / max heuristics (pairwise distances are O(n^2)).
_HEURISTIC_SAMPLE = 2000


def row_sq_norms(X: np.ndarray) -> np.ndarray:
    """||x_i||^2 for every row, shape (n,)."""
    return np.einsum("ij,ij->i", X, X)


def sq_distances(A: np.ndarray, B: np.ndarray, *, a_sq: np.ndarray | None = None,
                 b_sq: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between the rows of A (a, d) and B (b, d), shape (a, b).

    One GEMM, then ``-2 A B^T + ||a||^2 + ||b||^2`` in place (in the GEMM's dtype), clipped
    at 0: the cancellation of that formula leaves tiny negatives for nearly equal rows.
    ``a_sq`` / ``b_sq`` are precomputed squared row norms; ``out`` a buffer of shape (a, b).
    The one formula every method uses (kernel blocks, k-means, nearest neighbours, RFF).
    """
    if a_sq is None:
        a_sq = row_sq_norms(A)
    if b_sq is None:
        b_sq = row_sq_norms(B)
    return _sq_from_gram(np.matmul(A, B.T, out=out), a_sq, b_sq)


def _sq_from_gram(gram: np.ndarray, a_sq: np.ndarray, b_sq: np.ndarray) -> np.ndarray:
    """gram <- max(||a||^2 + ||b||^2 - 2 gram, 0), in place."""
    gram *= -2.0
    gram += a_sq[:, None]
    gram += b_sq[None, :]
    return np.maximum(gram, 0.0, out=gram)


def nearest_center(X: np.ndarray, centers: np.ndarray, *, return_distance: bool = False):
    """Index of the nearest centre for every row of X, in float64 whatever X's dtype.

    Parameters
    ----------
    X : ndarray of shape (b, K)
    centers : ndarray of shape (k, K)
    return_distance : bool, default=False
        Also return the squared distance to that centre.

    Returns
    -------
    labels : ndarray of shape (b,), int64
    sqdist : ndarray of shape (b,), float64
        Only with ``return_distance``.
    """
    X = np.asarray(X, dtype=np.float64)
    d = sq_distances(X, np.asarray(centers, dtype=np.float64))
    labels = np.argmin(d, axis=1) if d.shape[1] else np.zeros(X.shape[0], dtype=np.int64)
    labels = labels.astype(np.int64, copy=False)
    if return_distance:
        return labels, d[np.arange(X.shape[0]), labels]
    return labels


def bandwidth_statistic(X: np.ndarray, rule: str, *, rng: Any = None,
                        pair_rows: int = _HEURISTIC_SAMPLE) -> float:
    """A Gaussian bandwidth heuristic of the rows of X (the one definition every method uses).

    Parameters
    ----------
    X : ndarray of shape (n, d)
    rule : {"mean", "median", "max"}
        "mean": sqrt of the mean squared distance over pairs i != j, from O(n d) moments
        (mean_{i != j} ||x_i - x_j||^2 = 2n/(n-1) (mean ||x||^2 - ||mean x||^2));
        "median" / "max": median / largest distance over the pairs of at most ``pair_rows``
        rows drawn without replacement.
    rng : numpy Generator or RandomState
        Draws the rows of the pairwise rules when n > ``pair_rows``.

    Returns
    -------
    float
        sigma of k(x, y) = exp(-||x - y||^2 / (2 sigma^2)) before any multiplier; 0 for a
        constant sample, inf when the distances overflow float64.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if rule == "mean":
        mu = X.mean(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            msq = 2.0 * n / max(n - 1, 1) * (np.einsum("ij,ij->", X, X) / n - mu @ mu)
        if not np.isfinite(msq):
            return float("inf")
        return float(math.sqrt(max(msq, 0.0)))
    if n > pair_rows:
        rng = np.random.default_rng(0) if rng is None else rng
        X = X[np.sort(rng.choice(n, pair_rows, replace=False))]
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.sqrt(sq_distances(X, X)[np.triu_indices(X.shape[0], k=1)])
    if not d.size:
        return 0.0
    if not np.isfinite(d).all():
        return float("inf")
    return float(np.median(d)) if rule == "median" else float(d.max())


def check_bandwidth(sigma: float, view: str, what: str) -> None:
    """Refuse a bandwidth heuristic of 0 (constant view) or inf (overflowing values), saying which."""
    if sigma > 0 and np.isfinite(sigma):
        return
    if not np.isfinite(sigma):
        raise InputValidationError(
            f"view {view!r}: {what} is {sigma} because squared distances overflow float64 (values around "
            "1e154 or larger); rescale the view (e.g. scale='standard', or divide it by a constant).")
    if "median" in what:
        # A zero median needs only half of the pairs to coincide, not a constant view (e.g. the
        # shared ACM set's view4: 99.4% of its rows are one and the same row).
        raise InputValidationError(
            f"view {view!r} is constant or nearly so ({what} is 0: at least half of the pairs of points "
            "are identical in this view), so a bandwidth from it would be 0; drop the view, give an "
            "explicit bandwidth, or use the 'mean' rule.")
    raise InputValidationError(
        f"view {view!r} is constant ({what} is 0): every point is the same, so a distance-based "
        "kernel on it carries nothing to cluster; drop the view or give an explicit bandwidth.")
