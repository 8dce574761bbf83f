"""Reproducible landmark sampling over NumPy or row-chunked Dask views."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

from ..errors import InputValidationError
from ._blocks import RowBlocks
from ._validation import is_dask_array

__all__ = ["sample_landmark_indices", "gather_rows", "LANDMARK_METHODS"]

#: How landmarks are drawn (the ``landmark_method`` parameter of the landmark methods).
LANDMARK_METHODS = ("uniform", "kmeans++")


def gather_rows(views: Mapping, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The rows ``indices`` (sorted) of every view, in memory.

    For Dask views only the chunks holding those rows are read, in one compute.
    """
    lazy = [name for name, v in views.items() if is_dask_array(v)]
    out = {name: np.asarray(v[indices]) for name, v in views.items() if name not in lazy}
    if lazy:
        # One task per chunk, fused with its read (a Dask fancy index of scattered rows is a
        # shuffle: 4 tasks per chunk).
        out.update(zip(lazy, RowBlocks({name: views[name] for name in lazy}).take(np.asarray(indices))))
    return {name: out[name] for name in views}


def sample_landmark_indices(views: Mapping, n_landmarks: int, *, method: str = "uniform",
                            random_state=None, presample_factor: int = 10) -> np.ndarray:
    """Row indices of n landmarks, sorted; the same seed gives the same rows for any chunking.

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
    n_landmarks : int
    method : {"uniform", "kmeans++"}, default="uniform"
        "uniform": without replacement over all N rows.  "kmeans++": D^2 sampling
        (k-means++ seeding, Arthur & Vassilvitskii 2007) of n rows from a uniform pre-sample of
        ``presample_factor * n`` rows, on the concatenated, per-view standardised features:
        landmarks that spread over the data instead of following its density (a missing
        cell, NaN, counts as its feature's mean).
    random_state : int, RandomState or None

    Returns
    -------
    ndarray of shape (n_landmarks,), int64
    """
    if method not in LANDMARK_METHODS:
        raise InputValidationError(f"landmark method {method!r}; choose one of {LANDMARK_METHODS}.")
    from sklearn.utils import check_random_state  # here: the parameter tables import this module

    rng = check_random_state(random_state)
    N = next(iter(views.values())).shape[0]
    if n_landmarks > N:
        raise InputValidationError(f"n_landmarks={n_landmarks} must be <= n_samples={N}.")
    if method == "uniform" or n_landmarks == N:
        return np.sort(rng.choice(N, size=n_landmarks, replace=False)).astype(np.int64)
    m = min(N, presample_factor * n_landmarks)
    pre = np.sort(rng.choice(N, size=m, replace=False))
    rows = gather_rows(views, pre)
    feats = []
    for v in rows.values():
        v = np.asarray(v, dtype=np.float64)
        if np.isnan(v).any():
            # Over the observed values: a run that imputes draws its landmarks before its fill
            # is known (in the input scan's pass); a missing cell counts as the feature's mean.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a feature with no value in the pre-sample
                mu, sd = np.nan_to_num(np.nanmean(v, axis=0)), np.nanstd(v, axis=0)
            v = np.where(np.isnan(v), mu, v)
        else:
            mu, sd = v.mean(axis=0), v.std(axis=0)
        feats.append((v - mu) / np.where(sd > 0, sd, 1.0) / np.sqrt(v.shape[1]))
    Z = np.hstack(feats)
    chosen = np.empty(n_landmarks, dtype=np.int64)
    chosen[0] = rng.randint(m)
    d2 = ((Z - Z[chosen[0]]) ** 2).sum(axis=1)
    for i in range(1, n_landmarks):
        total = d2.sum()
        j = rng.randint(m) if total <= 0 else int(np.searchsorted(np.cumsum(d2), rng.uniform(0, total)))
        j = min(j, m - 1)
        chosen[i] = j
        d2 = np.minimum(d2, ((Z - Z[j]) ** 2).sum(axis=1))
    return np.sort(pre[chosen]).astype(np.int64)
