"""RFF kernel power k-means (RFF-KPKM) and its improved possibilistic multi-view variant.

Algorithm 1 (RFF-KPKM) and Algorithm 2 (IP-RFF-MKPKM, eq. 20-31) of the RFF power k-means
seed (``seeds/rff-kernel-power-kmeans.txt``; see ``docs/algorithms.md`` section 4).

Every iteration is one pass over the rows.  A row block recomputes its random Fourier
features from the stored frequencies (they are never stored for Dask input), evaluates
the power-mean weights and returns k x (L 2D + ...) partial sums; NumPy input walks the
same block function over ``chunk_size`` row blocks, Dask input runs it as one task per
row chunk and adds the partials with a tree reduction (one ``compute`` per iteration).
So NumPy and Dask input give the same numbers up to summation order.

Notation: N points, L views (view l has d_l features), k clusters, D frequencies per
view (2D features: a sine and a cosine per frequency), phi_l the feature map of view l,
theta_{j,l} (2D,) the centroid of cluster j in view l's feature space, s < 0 the power.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._dask import align_row_chunks, check_chunk_finite
from ._sampling import gather_rows
from ._validation import as_views, check_finite, check_int, check_real, is_dask_array
from .errors import InputValidationError

__all__ = ["RFFKernelPowerKMeans", "MultiViewRFFPowerKMeans", "default_n_components"]

#: Rows drawn uniformly (without replacement; all rows when N is smaller) to estimate the
#: feature scaling, the bandwidths, the k-means start, the typicality eta and the default
#: s0.  Estimates are means or medians over this many rows: ~1% relative error.
INIT_SAMPLE_SIZE = 20_000

#: Rows of that sample whose pairwise distances give the median bandwidth (~500k pairs).
BANDWIDTH_PAIR_ROWS = 1_000

#: Squared RFF distances lie in [0, 4] (||phi|| = 1); the floor keeps log(0) out of the
#: weights when a point sits on a centroid (duplicates), far below any real distance.
DISTANCE_FLOOR = 1e-12

#: Weights with log w below this are set to 0: exp(-600) ~ 1e-261 is 0 for every purpose,
#: and the subnormal floats that smaller weights become made the BLAS products ~100x slower.
LOG_WEIGHT_FLOOR = -600.0

#: NumPy input: the RFF features of all rows are kept between iterations when they take at
#: most this many bytes (float64); above it every iteration recomputes them block by block.
FEATURE_CACHE_BYTES = 256 * 2**20

#: s0="auto" is -S0_GAP_FACTOR / median_i(log C_i(2) - log C_i(1)), with C_i(1) <= C_i(2)
#: the two smallest assignment costs of point i at the k-means start (see Notes).
S0_GAP_FACTOR = 1.0

#: Clusters count as merged when two centroids are closer (squared, view-weighted) than
#: this fraction of the mean squared distance of a point to its nearest centroid.
MERGE_TOL = 1e-2
# lam="auto": lambda per data point, the paper's lambda = 100 on its ~2,000-point data sets.
LAM_PER_POINT = 100.0 / 2000.0

#: Fan-in of the tree reduction of partial sums (Dask input).
SPLIT_EVERY = 16

_STATE_FORMAT = {
    "RFFKernelPowerKMeans": "mkdist.RFFKernelPowerKMeans/1",
    "MultiViewRFFPowerKMeans": "mkdist.MultiViewRFFPowerKMeans/1",
}

_BANDWIDTH_RULES = ("median", "mean")
_SCALINGS = (None, "standard", "minmax")
_D_RULES = ("main", "appendix")


def default_n_components(n_clusters: int, rule: str = "main") -> int:
    """Number D of random frequencies per view for ``n_components=None``.

    Parameters
    ----------
    n_clusters : int
        k.
    rule : {"main", "appendix"}, default="main"
        "main": ceil(4 ln^3(2k)), the main text's recommendation after Theorem 3
        (108 for k = 10).  "appendix": ceil(4 ln^3(k / delta) / eps^2) with
        eps = delta = 0.5, i.e. ceil(16 ln^3(2k)) (431 for k = 10), section B.1.

    Returns
    -------
    int
        D >= 1 (each view then has 2D features).
    """
    if rule not in _D_RULES:
        raise InputValidationError(f"D rule {rule!r}; choose one of {_D_RULES}.")
    factor = 4.0 if rule == "main" else 16.0
    return max(1, math.ceil(factor * math.log(2 * n_clusters) ** 3))


# ----------------------------------------------------------------------------- block functions
@dataclasses.dataclass(frozen=True, eq=False)
class _FeatureMap:
    """phi_l(x) = sqrt(1/D) [sin(z), cos(z)], z = x @ projections[l] + offsets[l], per view.

    ``projections[l]`` (d_l, D) is W_l / scale_l (scaling folded into the frequencies) and
    ``offsets[l]`` (D,) is -(center_l / scale_l) @ W_l, so no scaled copy of X is made.
    """

    projections: tuple[np.ndarray, ...]
    offsets: tuple[np.ndarray, ...]

    def __call__(self, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Features of one row block of every view, each (b, 2D) float64."""
        out = []
        for X, P, b in zip(blocks, self.projections, self.offsets):
            z = np.asarray(X, dtype=np.float64) @ P
            z += b
            D = P.shape[1]
            phi = np.empty((z.shape[0], 2 * D))
            np.sin(z, out=phi[:, :D])
            np.cos(z, out=phi[:, D:])
            phi *= math.sqrt(1.0 / D)
            out.append(phi)
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class _Model:
    """What a row block needs for one iteration or for prediction; ONE Dask graph key.

    ``typicality`` is None for plain power k-means (u = 1, so d~ = d).
    """

    features: _FeatureMap
    centroids: np.ndarray            # (L, k, 2D)
    view_weights: np.ndarray         # (L,), alpha
    s: float
    typicality: np.ndarray | None    # (k, L), eta
    fuzzifier: float = 2.0

    @property
    def n_clusters(self) -> int:
        return self.centroids.shape[1]

    @property
    def n_views(self) -> int:
        return self.centroids.shape[0]


def _sq_distances(phis: Sequence[np.ndarray], centroids: np.ndarray) -> np.ndarray:
    """||phi_l(x_i) - theta_{j,l}||^2 for every point, cluster and view, (b, k, L), >= 0."""
    b = phis[0].shape[0] if phis else 0
    L, k, _ = centroids.shape
    d = np.empty((b, k, L))
    for v, (phi, theta) in enumerate(zip(phis, centroids)):
        dv = np.einsum("ij,ij->i", phi, phi)[:, None] + np.einsum("jf,jf->j", theta, theta)[None, :]
        dv -= 2.0 * (phi @ theta.T)
        # ||phi||^2 + ||theta||^2 - 2 phi.theta cancels to tiny negatives for phi ~ theta.
        np.maximum(dv, 0.0, out=dv)
        d[:, :, v] = dv
    return d


def _costs(phis: Sequence[np.ndarray], model: _Model):
    """Assignment costs C_ij = sum_l alpha_l d~_ij,l and their parts.

    Returns ``(costs (b, k), d_tilde (b, k, L), u_m (b, k) or None, A (b, k))``, where
    A_ij = sum_l alpha_l d_ij,l; for the possibilistic model u_ij is eq. 26 at the current
    centroids and d~ is eq. 23, else d~ = d and costs = A.
    """
    d = _sq_distances(phis, model.centroids)
    A = d @ model.view_weights                                          # (b, k)
    if model.typicality is None:
        return A, d, None, A
    eta = model.typicality
    B = np.maximum(eta @ model.view_weights, np.finfo(np.float64).tiny)  # (k,)
    m = model.fuzzifier
    u = 1.0 / (1.0 + (A / B[None, :]) ** (1.0 / (m - 1.0)))
    u_m = u**m
    v_m = (1.0 - u) ** m
    d_tilde = u_m[:, :, None] * d + v_m[:, :, None] * eta[None, :, :]
    return d_tilde @ model.view_weights, d_tilde, u_m, A


def _power_mean_weights(costs: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of the power mean, w_ij = dM_s(C_i)/dC_ij (eq. 4 / eq. 22), in log space.

    Returns ``(w (b, k), log_M (b,))`` with M_s(C_i) = ((1/k) sum_j C_ij^s)^(1/s).  With
    a_ij = s log C_ij and l_i = logsumexp_j a_ij:

        log w_ij = a_ij - l_i + log M_s(C_i) - log C_ij,   log M_s(C_i) = (l_i - log k) / s,

    which is finite for any s < 0 (tested at s = -1000) and for C_ij = 0 (floored).
    Weights below exp(LOG_WEIGHT_FLOOR) are returned as exact zeros (no subnormals).
    """
    k = costs.shape[1]
    log_c = np.log(np.maximum(costs, DISTANCE_FLOOR))
    a = s * log_c
    a_max = a.max(axis=1, keepdims=True) if a.shape[0] else np.zeros((0, 1))
    lse = a_max[:, 0] + np.log(np.exp(a - a_max).sum(axis=1))
    log_mean = (lse - math.log(k)) / s
    log_w = a - lse[:, None] + log_mean[:, None] - log_c
    w = np.exp(log_w, where=log_w >= LOG_WEIGHT_FLOOR, out=np.zeros_like(log_w))
    return w, log_mean


def _stat_layout(L: int, k: int, F: int) -> dict[str, slice]:
    """Where each partial sum sits in the flat vector a block returns (F = 2D)."""
    sizes = {"sums": L * k * F, "mass": k, "counts": k, "view_cost": L, "objective": 1,
             "inertia": 1}
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = slice(start, start + size)
        start += size
    out["width"] = start
    return out


def _iteration_stats(phis: Sequence[np.ndarray], model: _Model) -> np.ndarray:
    """Partial sums of one iteration over a row block, flat (width,), see ``_stat_layout``.

    sums[l, j] = sum_i g_ij phi_l(x_i) and mass[j] = sum_i g_ij with g = w (plain) or
    g = w u^m (eq. 28); counts[j] = #points whose smallest cost is j; view_cost[l] =
    sum_ij w_ij d~_ij,l (eq. 31); objective = sum_i M_s(C_i); inertia = sum_i min_j A_ij.
    """
    L, k, F = model.centroids.shape
    layout = _stat_layout(L, k, F)
    out = np.zeros(layout["width"])
    costs, d_tilde, u_m, A = _costs(phis, model)
    w, log_mean = _power_mean_weights(costs, model.s)
    g = w if u_m is None else w * u_m
    out[layout["sums"]] = np.stack([g.T @ phi for phi in phis]).ravel()
    out[layout["mass"]] = g.sum(axis=0)
    out[layout["counts"]] = np.bincount(np.argmin(costs, axis=1), minlength=k)
    out[layout["view_cost"]] = np.einsum("ij,ijl->l", w, d_tilde)
    out[layout["objective"]] = np.exp(log_mean).sum()
    out[layout["inertia"]] = A.min(axis=1).sum() if A.shape[0] else 0.0
    return out


def _row_costs(phis: Sequence[np.ndarray], model: _Model) -> np.ndarray:
    return _costs(phis, model)[0]


def _row_labels(phis: Sequence[np.ndarray], model: _Model) -> np.ndarray:
    return np.argmin(_costs(phis, model)[0], axis=1).astype(np.int64)


def _reduce_rows(blocks: Sequence[np.ndarray], model: _Model, fn, chunk_size: int,
                 cache: list | None = None) -> np.ndarray:
    """Sum of ``fn(features, model)`` over ``chunk_size`` row blocks (features from ``cache``
    when given, one entry per block)."""
    n = blocks[0].shape[0]
    total = None
    for i, start in enumerate(range(0, n, chunk_size)):
        phis = cache[i] if cache is not None else model.features([b[start:start + chunk_size]
                                                                  for b in blocks])
        part = fn(phis, model)
        total = part if total is None else total + part
    if total is None:  # an empty chunk
        total = fn(model.features([b[:0] for b in blocks]), model)
    return total


def _map_rows(blocks: Sequence[np.ndarray], model: _Model, fn, chunk_size: int) -> np.ndarray:
    n = blocks[0].shape[0]
    parts = [fn(model.features([b[start:start + chunk_size] for b in blocks]), model)
             for start in range(0, n, chunk_size)]
    return np.concatenate(parts) if parts else fn(model.features([b[:0] for b in blocks]), model)


def _check_task_block(blocks, view_names, block_info) -> None:
    """In a Dask task: raise on NaN/inf naming the view, chunk and row (no extra pass)."""
    if block_info is not None:
        loc = block_info[0]
        check_chunk_finite(view_names, blocks, loc["chunk-location"][0], loc["array-location"][0][0])


def _reduce_task(*args, fn, chunk_size, view_names, block_info=None):
    *blocks, model = args
    _check_task_block(blocks, view_names, block_info)
    return _reduce_rows(blocks, model, fn, chunk_size)[None, :]


def _map_task(*args, fn, chunk_size, view_names, block_info=None):
    *blocks, model = args
    _check_task_block(blocks, view_names, block_info)
    return _map_rows(blocks, model, fn, chunk_size)


# ----------------------------------------------------------------------------- row access
class _Rows:
    """The views of one fit or predict call, NumPy or row-chunked Dask.

    NumPy: block functions walk ``chunk_size`` row blocks; the RFF features are cached
    across iterations when they fit in ``FEATURE_CACHE_BYTES``.  Dask: one task per row
    chunk recomputes the features from the frequencies; partials are tree-summed.
    """

    def __init__(self, views: dict[str, Any], chunk_size: int):
        self.names = list(views)
        arrays = list(views.values())
        self.is_dask = any(is_dask_array(v) for v in arrays)
        if self.is_dask:
            import dask.array as da

            row_chunks = next(v for v in arrays if is_dask_array(v)).chunks[0]
            arrays = [v if is_dask_array(v) else da.from_array(v, chunks=(row_chunks, -1))
                      for v in arrays]
            arrays = align_row_chunks(arrays, self.names)
        self.arrays = arrays
        self.n_samples = int(arrays[0].shape[0])
        self.chunk_size = chunk_size
        self._cache: list | None = None

    def cache_features(self, features: _FeatureMap, width: int) -> None:
        """NumPy input: compute the features of every block once, if they fit."""
        if self.is_dask or self.n_samples * width * 8 > FEATURE_CACHE_BYTES:
            return
        n, c = self.n_samples, self.chunk_size
        self._cache = [features([a[start:start + c] for a in self.arrays])
                       for start in range(0, n, c)]

    def reduce(self, fn, model: _Model, width: int) -> np.ndarray:
        """Sum of ``fn`` over all rows, (width,) in memory: ONE compute for Dask input."""
        if not self.is_dask:
            return _reduce_rows(self.arrays, model, fn, self.chunk_size, self._cache)
        import dask
        import dask.array as da

        key = dask.delayed(model, pure=True, traverse=False)
        nb = self.arrays[0].numblocks[0]
        partials = da.map_blocks(
            _reduce_task, *self.arrays, key, fn=fn, chunk_size=self.chunk_size,
            view_names=self.names, chunks=((1,) * nb, (width,)), dtype=np.float64,
            meta=np.empty((0, width)), token="mkdist-rffpkm-stats")
        return np.asarray(partials.sum(axis=0, split_every=SPLIT_EVERY).compute())

    def map(self, fn, model: _Model, n_cols: int | None, dtype):
        """``fn`` on every row block: NumPy -> ndarray, Dask -> lazy Dask array."""
        if not self.is_dask:
            return _map_rows(self.arrays, model, fn, self.chunk_size)
        import dask
        import dask.array as da

        key = dask.delayed(model, pure=True, traverse=False)
        row_chunks = self.arrays[0].chunks[0]
        if n_cols is None:
            chunks, meta, extra = (row_chunks,), np.empty((0,), dtype=dtype), {"drop_axis": 1}
        else:
            chunks, meta, extra = (row_chunks, (n_cols,)), np.empty((0, n_cols), dtype=dtype), {}
        return da.map_blocks(_map_task, *self.arrays, key, fn=fn, chunk_size=self.chunk_size,
                             view_names=self.names, chunks=chunks, dtype=dtype, meta=meta,
                             token=f"mkdist-rffpkm-{fn.__name__.strip('_').replace('_', '-')}",
                             **extra)


# ----------------------------------------------------------------------------- fit helpers
def _scaling(sample: np.ndarray, how: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(center, scale) per feature so that (x - center) / scale is the scaled feature.

    Constant features get scale 1: they carry no distance either way, and 0 would divide.
    """
    d = sample.shape[1]
    if how is None:
        return np.zeros(d), np.ones(d)
    if how == "standard":
        center, scale = sample.mean(axis=0), sample.std(axis=0)
    else:  # "minmax"
        center, scale = sample.min(axis=0), np.ptp(sample, axis=0)
    return center, np.where(scale > 0, scale, 1.0)


def _estimate_bandwidth(scaled: np.ndarray, rule: str, rng: np.random.RandomState) -> float:
    """sigma from a sample of scaled rows: the median pairwise distance of
    ``BANDWIDTH_PAIR_ROWS`` random rows ("median"), or sqrt(mean squared pairwise distance)
    = sqrt(2 sum_f var_f) over the whole sample ("mean")."""
    if rule == "mean":
        return float(math.sqrt(2.0 * scaled.var(axis=0).sum()))
    n = scaled.shape[0]
    idx = rng.choice(n, BANDWIDTH_PAIR_ROWS, replace=False) if n > BANDWIDTH_PAIR_ROWS else np.arange(n)
    if idx.size < 2:
        return 0.0
    return float(np.median(pdist(scaled[idx])))


def _log_gap(costs: np.ndarray) -> float:
    """median_i (log C_i(2) - log C_i(1)): how far, in log cost, the second-best cluster is."""
    if costs.shape[1] < 2:
        return float("nan")
    two = np.partition(np.maximum(costs, DISTANCE_FLOOR), 1, axis=1)[:, :2]
    return float(np.median(np.log(two[:, 1]) - np.log(two[:, 0])))


def _auto_s0(costs: np.ndarray) -> float:
    """s0 = -S0_GAP_FACTOR / median log gap, within [-1000, -0.1] (see the class Notes)."""
    gap = _log_gap(costs)
    if not (gap > 0 and np.isfinite(gap)):
        return -1.0  # k = 1 or every point tied: s has no effect on the partition
    return float(np.clip(-S0_GAP_FACTOR / gap, -1000.0, -0.1))


def _min_centroid_sq_distance(centroids: np.ndarray, view_weights: np.ndarray) -> float:
    L, k, _ = centroids.shape
    if k < 2:
        return float("inf")
    d = sum(a * ((c[:, None, :] - c[None, :, :]) ** 2).sum(-1) for a, c in zip(view_weights, centroids))
    return float(d[~np.eye(k, dtype=bool)].min())


def _reseed(centroids: np.ndarray, vanished: np.ndarray, pool: Sequence[np.ndarray],
            model: _Model) -> np.ndarray:
    """Centroids of ``vanished`` clusters moved onto the pool rows of largest cost (one each)."""
    costs = _costs(pool, model)[3].min(axis=1)
    order = np.argsort(costs)[::-1]
    out = centroids.copy()
    for j, i in zip(np.flatnonzero(vanished), order):
        for v, phi in enumerate(pool):
            out[v, j] = phi[i]
    return out


def _fit_loop(rows: _Rows, model: _Model, *, s0: float, annealing: float, anneal_every: int,
              max_iter: int, tol: float, lam: float | None, reseed_pool: Sequence[np.ndarray],
              trace: list | None = None) -> dict[str, Any]:
    """Power k-means iterations (Algorithm 1, or Algorithm 2 when ``model.typicality`` is set).

    Prior validation is assumed.  One pass over the rows per iteration gives, at the
    current (theta, alpha, s): u (eq. 26), d~ (eq. 23), w (eq. 22), and the sums for the
    new theta (eq. 28) and alpha (eq. 31).  ``reseed_pool`` (the features of the init
    sample) supplies new centroids for clusters whose weight mass vanished.
    Returns the final model, the histories and the guard counters.
    """
    L, k, F = model.centroids.shape
    layout = _stat_layout(L, k, F)
    N = rows.n_samples
    s = float(s0)
    s_hist, obj_hist = [], []
    n_merged = n_reseeded = 0
    merged = False
    converged = False
    n_iter = 0
    for it in range(max_iter):
        model = dataclasses.replace(model, s=s)
        stats = rows.reduce(_iteration_stats, model, layout["width"])
        sums = stats[layout["sums"]].reshape(L, k, F)
        mass = stats[layout["mass"]]
        view_cost = stats[layout["view_cost"]]
        objective = float(stats[layout["objective"]][0])
        inertia = float(stats[layout["inertia"]][0])
        if lam is not None:
            alpha = model.view_weights
            objective += lam * float(np.sum(alpha * np.log(np.maximum(alpha, 1e-300))))
        n_iter = it + 1
        s_hist.append(s)
        obj_hist.append(objective)
        separation = _min_centroid_sq_distance(model.centroids, model.view_weights)
        merged = separation < MERGE_TOL * inertia / N
        n_merged += int(merged)
        if trace is not None:
            trace.append({"s": s, "objective": objective, "inertia": inertia,
                          "counts": stats[layout["counts"]].copy(), "mass": mass.copy(),
                          "separation": separation})
        vanished = mass <= 0.0
        new = np.where(vanished[None, :, None], model.centroids,
                       sums / np.where(vanished, 1.0, mass)[None, :, None])
        if vanished.any():
            n_reseeded += int(vanished.sum())
            new = _reseed(new, vanished, reseed_pool, model)
        shift = float(np.max(np.einsum("l,ljf->j", model.view_weights, (new - model.centroids) ** 2)))
        alpha = model.view_weights
        if lam is not None:
            logits = -view_cost / lam
            alpha = np.exp(logits - logits.max())
            alpha /= alpha.sum()
        model = dataclasses.replace(model, centroids=new, view_weights=alpha)
        if (it + 1) % anneal_every == 0:
            s *= annealing
        # Merged centroids are a transient of annealing (they split again as s falls), and
        # they barely move: the shift test would stop the fit right there.
        if shift <= tol and not merged and not vanished.any():
            converged = True
            break
    return {"model": model, "s_history": np.asarray(s_hist), "objective_history": np.asarray(obj_hist),
            "n_iter": n_iter, "n_merged_iterations": n_merged, "merged_at_end": bool(merged),
            "n_reseeded": n_reseeded, "converged": converged}


def _feature_peps(phis: Sequence[np.ndarray], view_weights: np.ndarray, k: int) -> dict[str, Any]:
    """PEP (t = k) of each view's RFF kernel and of the alpha-weighted sum, from the factors.

    K_l = Phi_l Phi_l^T and sum_l alpha_l K_l = [sqrt(alpha_l) Phi_l]_l [..]^T, so both come
    from the (b x 2DL) factors without forming a b x b kernel.
    """
    from ._pep import principal_eigenvalue_proportion

    t = min(k, phis[0].shape[0])
    base = [principal_eigenvalue_proportion(phi, t, factor=True) for phi in phis]
    combined = np.hstack([math.sqrt(a) * phi for a, phi in zip(view_weights, phis)])
    return {"t": int(t), "base": [float(b) for b in base],
            "combined": float(principal_eigenvalue_proportion(combined, t, factor=True))}


def _json_param(value: Any) -> Any:
    """Parameter value for the JSON attrs (a RandomState instance cannot be stored: None)."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return None


# ----------------------------------------------------------------------------- estimators
class _RFFPowerKMeansBase(ClusterMixin, TransformerMixin, BaseEstimator):
    """Shared fit / predict / state code; subclasses set ``_possibilistic``."""

    _possibilistic = False

    # ------------------------------------------------------------------ validation
    def _check_views(self, X) -> dict[str, Any]:
        if getattr(X, "ndim", None) == 1:
            raise InputValidationError(
                f"Expected a 2-D array (n_samples, n_features), got a 1-D array of shape {X.shape}. "
                "Reshape your data either using array.reshape(-1, 1) if it has a single feature or "
                "array.reshape(1, -1) if it is a single sample.")
        views = as_views(X)
        check_finite(views)
        return views

    def _validate_params(self, n_samples: int, n_views: int) -> dict[str, Any]:
        """Check every parameter (before any pass over the data); return resolved values."""
        k = check_int("n_clusters", self.n_clusters, low=1)
        if n_samples < 2:
            raise InputValidationError(
                f"n_samples={n_samples} is too few: at least 2 samples are required.")
        if k > n_samples:
            raise InputValidationError(f"n_samples={n_samples} should be >= n_clusters={k}.")
        if isinstance(self.n_components, str):
            if self.n_components not in _D_RULES:
                raise InputValidationError(
                    f"`n_components`={self.n_components!r} must be a positive integer, None or one of "
                    f"{_D_RULES}.")
            D = default_n_components(k, self.n_components)
        elif self.n_components is None:
            D = default_n_components(k, "main")
        else:
            D = check_int("n_components", self.n_components, low=1)
        if isinstance(self.s0, str):
            if self.s0 != "auto":
                raise InputValidationError(f"`s0`={self.s0!r} must be 'auto' or a negative number.")
            s0 = "auto"
        else:
            s0 = check_real("s0", self.s0)
            if s0 >= 0:
                raise InputValidationError(
                    f"`s0`={s0} must be < 0: power k-means anneals s towards -infinity from a "
                    "negative start (s >= 0 does not approximate k-means). Use s0='auto' or e.g. s0=-3.")
        annealing = check_real("annealing", self.annealing, low=1.0)
        anneal_every = check_int("anneal_every", self.anneal_every, low=1)
        max_iter = check_int("max_iter", self.max_iter, low=1)
        tol = check_real("tol", self.tol, low=0.0)
        if self.scale not in _SCALINGS:
            raise InputValidationError(f"`scale`={self.scale!r} must be one of {_SCALINGS}.")
        n_init = check_int("n_init", self.n_init, low=1)
        chunk_size = check_int("chunk_size", self.chunk_size, low=1)
        bw = self.bandwidth
        if isinstance(bw, str):
            if bw not in _BANDWIDTH_RULES:
                raise InputValidationError(
                    f"`bandwidth`={bw!r} must be one of {_BANDWIDTH_RULES}, a positive number or one "
                    "positive number per view.")
            bandwidths: list = [bw] * n_views
        elif isinstance(bw, Real) and not isinstance(bw, bool):
            bandwidths = [check_real("bandwidth", bw, low=0.0, low_inclusive=False)] * n_views
        elif isinstance(bw, (Sequence, np.ndarray)) and not isinstance(bw, str):
            if len(bw) != n_views:
                raise InputValidationError(
                    f"`bandwidth` has {len(bw)} values but the input has {n_views} view(s).")
            bandwidths = [b if isinstance(b, str) and b in _BANDWIDTH_RULES else
                          check_real(f"bandwidth[{i}]", b, low=0.0, low_inclusive=False)
                          for i, b in enumerate(bw)]
        else:
            raise InputValidationError(
                f"`bandwidth`={bw!r} must be one of {_BANDWIDTH_RULES}, a positive number or one "
                "positive number per view.")
        out = {"k": k, "D": D, "s0": s0, "annealing": annealing, "anneal_every": anneal_every,
               "max_iter": max_iter, "tol": tol, "n_init": n_init, "chunk_size": chunk_size,
               "bandwidths": bandwidths, "lam": None, "fuzzifier": 2.0}
        if self._possibilistic:
            if isinstance(self.lam, str):
                if self.lam != "auto":
                    raise InputValidationError(f"`lam`={self.lam!r} must be 'auto' or a positive number.")
                out["lam"] = LAM_PER_POINT * n_samples
            else:
                out["lam"] = check_real("lam", self.lam, low=0.0, low_inclusive=False)
            out["fuzzifier"] = check_real("fuzzifier", self.fuzzifier, low=1.0, low_inclusive=False)
        return out

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None):
        """Cluster the rows of X.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (N, d), or a list / dict of L such views
            Views share their rows.  Dask views must share their row chunks (NumPy views
            mixed with Dask ones are chunked like them).  NaN/inf is rejected (for Dask input
            in the first pass that reaches the bad chunk).
        y : ignored

        Returns
        -------
        self
        """
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        views = self._check_views(X)
        p = self._validate_params(int(next(iter(views.values())).shape[0]), len(views))
        rows = _Rows(views, p["chunk_size"])
        N, L, k, D = rows.n_samples, len(views), p["k"], p["D"]
        rng = check_random_state(self.random_state)

        # One read of the sample rows: scaling, bandwidths, k-means start, eta, s0.
        sample_idx = (np.arange(N) if N <= INIT_SAMPLE_SIZE
                      else np.sort(rng.choice(N, INIT_SAMPLE_SIZE, replace=False)))
        if rows.is_dask or N > INIT_SAMPLE_SIZE:
            sample = gather_rows(dict(zip(rows.names, rows.arrays)), sample_idx)
        else:
            sample = dict(zip(rows.names, rows.arrays))
        sample = {name: np.asarray(v, dtype=np.float64) for name, v in sample.items()}
        if rows.is_dask:
            for name, v in sample.items():
                if not np.isfinite(v).all():
                    row = int(sample_idx[np.argmax(~np.isfinite(v).all(axis=1))])
                    raise InputValidationError(
                        f"Input contains NaN or infinity: view {name!r}, row {row}.")
        centers, scales, sigmas, frequencies = [], [], [], []
        for (name, v), rule in zip(sample.items(), p["bandwidths"]):
            c, sc = _scaling(v, self.scale)
            scaled = (v - c) / sc
            sigma = _estimate_bandwidth(scaled, rule, rng) if isinstance(rule, str) else float(rule)
            if not sigma > 0:
                where = "all rows" if N <= INIT_SAMPLE_SIZE else f"{sample_idx.size} sampled rows"
                raise InputValidationError(
                    f"view {name!r} has zero spread on {where} (bandwidth {rule!r} = {sigma}): its "
                    "points are (mostly) identical, so a Gaussian kernel on it has bandwidth 0. Drop "
                    "the view or pass `bandwidth` explicitly.")
            centers.append(c)
            scales.append(sc)
            sigmas.append(sigma)
            # W ~ N(0, sigma^-2 I) in the scaled coordinates (Gaussian kernel, bandwidth sigma).
            frequencies.append(rng.standard_normal((v.shape[1], D)) / sigma)
        self.n_features_per_view_ = [int(v.shape[1]) for v in views.values()]
        self.n_features_in_ = int(sum(self.n_features_per_view_))
        self.view_names_ = list(rows.names)
        self.feature_centers_ = centers
        self.feature_scales_ = scales
        self.bandwidths_ = np.asarray(sigmas)
        self.rff_frequencies_ = frequencies
        self.n_components_ = D
        features = self._feature_map()
        timings["sample_s"] = time.perf_counter() - t0

        # k-means on the (view-averaged) RFF features of the sample.
        t0 = time.perf_counter()
        phis = features(list(sample.values()))
        stacked = np.hstack(phis) * math.sqrt(1.0 / L)
        km = KMeans(k, n_init=p["n_init"], random_state=rng.randint(np.iinfo(np.int32).max))
        with warnings.catch_warnings():
            # Fewer distinct points than k is handled below (duplicate centroids are legal).
            warnings.simplefilter("ignore", ConvergenceWarning)
            km.fit(stacked)
        centroids = np.stack(np.split(km.cluster_centers_ / math.sqrt(1.0 / L), L, axis=1))
        alpha = np.full(L, 1.0 / L)
        eta = None
        if self._possibilistic:
            # eta_{j,l} = mean_i ||phi_l(x_i) - theta_{j,l}||^2 at the start, kept fixed
            # (re-estimating it every iteration cost 5 ACC points on mfeat).
            eta = _sq_distances(phis, centroids).mean(axis=0)
        model = _Model(features, centroids, alpha, float("nan"), eta, p["fuzzifier"])
        start_costs = _costs(phis, model)[0]
        s0 = _auto_s0(start_costs) if p["s0"] == "auto" else p["s0"]
        timings["init_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        rows.cache_features(features, L * 2 * D)
        result = _fit_loop(rows, model, s0=s0, annealing=p["annealing"],
                           anneal_every=p["anneal_every"], max_iter=p["max_iter"], tol=p["tol"],
                           lam=p["lam"], reseed_pool=phis, trace=getattr(self, "_trace", None))
        timings["iterations_s"] = time.perf_counter() - t0
        final = result["model"]
        self.s0_ = float(s0)
        self.s_ = float(result["s_history"][-1])
        self.s_history_ = result["s_history"]
        self.objective_history_ = result["objective_history"]
        self.n_iter_ = int(result["n_iter"])
        self.centroids_ = final.centroids
        self.cluster_centers_ = np.hstack(list(final.centroids))
        self.view_weights_ = final.view_weights
        if self._possibilistic:
            self.typicality_ = final.typicality
            self.lam_ = float(p["lam"])
        self.diagnostics_ = {key: result[key] for key in
                             ("converged", "n_merged_iterations", "merged_at_end", "n_reseeded")}
        self.diagnostics_["timings"] = timings
        self.diagnostics_["pep"] = _feature_peps(phis, final.view_weights, k)
        if result["merged_at_end"]:
            warnings.warn(
                f"{type(self).__name__}: after max_iter={p['max_iter']} iterations two centroids "
                f"still coincide (s={self.s_:.3g}): the partition has fewer than {k} distinct "
                "clusters. Raise max_iter, or start from a more negative s0.",
                ConvergenceWarning, stacklevel=2)
        self.labels_ = rows.map(_row_labels, self._model(), None, np.int64)
        return self

    def fit_predict(self, X, y=None, **kwargs):
        """Fit and return ``labels_`` (a lazy Dask array for Dask input)."""
        return self.fit(X).labels_

    def _feature_map(self) -> _FeatureMap:
        projections, offsets = [], []
        for W, c, sc in zip(self.rff_frequencies_, self.feature_centers_, self.feature_scales_):
            P = W / sc[:, None]
            projections.append(np.ascontiguousarray(P))
            offsets.append(-(c @ P))
        return _FeatureMap(tuple(projections), tuple(offsets))

    def _model(self) -> _Model:
        return _Model(self._feature_map(), self.centroids_, self.view_weights_, self.s_,
                      getattr(self, "typicality_", None),
                      float(getattr(self, "fuzzifier", 2.0)))

    # ------------------------------------------------------------------ inference
    def _check_predict_input(self, X) -> _Rows:
        check_is_fitted(self, "centroids_")
        views = self._check_views(X)
        got = [int(v.shape[1]) for v in views.values()]
        if len(got) != len(self.n_features_per_view_):
            raise InputValidationError(
                f"X has {len(got)} view(s), but {type(self).__name__} was fitted on "
                f"{len(self.n_features_per_view_)} view(s) {self.view_names_}.")
        for name, n_got, n_fit in zip(views, got, self.n_features_per_view_):
            if n_got != n_fit:
                raise InputValidationError(
                    f"X has {n_got} features, but {type(self).__name__} is expecting {n_fit} "
                    f"features as input (view {name!r}).")
        return _Rows(views, int(self.chunk_size))

    def transform(self, X):
        """Assignment costs of every point to every cluster (not the RFF features).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, d), or a list / dict of views

        Returns
        -------
        costs : ndarray or lazy dask.array.Array of shape (n, n_clusters), float64
            C_ij = sum_l alpha_l d~_ij,l, the argument of the power mean (squared RFF
            distances averaged over views for plain power k-means; see the class Notes).
            ``predict`` is its row-wise argmin.
        """
        rows = self._check_predict_input(X)
        return rows.map(_row_costs, self._model(), int(self.centroids_.shape[1]), np.float64)

    def predict(self, X):
        """Cluster of smallest assignment cost for every point.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, d), or a list / dict of views

        Returns
        -------
        labels : ndarray of shape (n,), int64 (lazy Dask array for Dask input)
        """
        rows = self._check_predict_input(X)
        return rows.map(_row_labels, self._model(), None, np.int64)

    def rff_features(self, X) -> list:
        """The random Fourier features phi_l(x) of every view, as used by the fit.

        Returns
        -------
        list of L ndarrays or lazy Dask arrays of shape (n, 2 n_components_), float64
        """
        rows = self._check_predict_input(X)
        F = 2 * self.n_components_
        return [rows.map(_ViewFeatures(l), self._model(), F, np.float64)
                for l in range(len(self.view_names_))]

    # ------------------------------------------------------------------ state without pickle
    def _model_state(self) -> dict[str, Any]:
        """Everything ``predict``/``transform`` need, without pickle.

        Returns ``{"attrs": JSON-able dict, "arrays": {name: (dims tuple, ndarray)}}``.
        Per-view arrays are named ``<array>_<view index>`` (no "/": Zarr would read it as a sub-group) with dims ``feature_<index>``;
        the other dims are "view", "cluster", "frequency", "rff_feature" and "iteration".
        ``labels_`` (N values) is not part of the model; store it with the run.
        """
        check_is_fitted(self, "centroids_")
        name = type(self).__name__
        attrs = {
            "format": _STATE_FORMAT[name],
            "params": {key: _json_param(v) for key, v in self.get_params(deep=False).items()},
            "view_names": list(self.view_names_),
            "n_features_per_view": [int(n) for n in self.n_features_per_view_],
            "n_components": int(self.n_components_),
            "s0": float(self.s0_),
            "lam": float(self.lam_) if self._possibilistic else None,
            "s": float(self.s_),
            "n_iter": int(self.n_iter_),
            "diagnostics": {key: (bool(v) if isinstance(v, (bool, np.bool_)) else
                                  v if key == "pep" else int(v))
                            for key, v in self.diagnostics_.items() if key != "timings"},
        }
        json.dumps(attrs)  # fail here, not in the store, if something is not JSON
        arrays: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
            "centroids": (("view", "cluster", "rff_feature"), self.centroids_),
            "view_weights": (("view",), self.view_weights_),
            "bandwidths": (("view",), self.bandwidths_),
            "s_history": (("iteration",), self.s_history_),
            "objective_history": (("iteration",), self.objective_history_),
        }
        if self._possibilistic:
            arrays["typicality"] = (("cluster", "view"), self.typicality_)
        for i, (W, c, sc) in enumerate(zip(self.rff_frequencies_, self.feature_centers_,
                                           self.feature_scales_)):
            arrays[f"rff_frequencies_{i}"] = ((f"feature_{i}", "frequency"), W)
            arrays[f"feature_centers_{i}"] = ((f"feature_{i}",), c)
            arrays[f"feature_scales_{i}"] = ((f"feature_{i}",), sc)
        return {"attrs": attrs, "arrays": arrays}

    @classmethod
    def _from_model_state(cls, state):
        """A fitted estimator (without ``labels_``) that predicts exactly like the saved one."""
        attrs, arrays = state["attrs"], state["arrays"]
        expected = _STATE_FORMAT[cls.__name__]
        if attrs.get("format") != expected:
            raise InputValidationError(
                f"model state format {attrs.get('format')!r} is not {expected!r}; it was not "
                f"written by {cls.__name__}._model_state.")

        def get(key):
            value = arrays[key]
            return np.asarray(value[1] if isinstance(value, tuple) else value)

        est = cls(**attrs["params"])
        L = len(attrs["view_names"])
        est.view_names_ = list(attrs["view_names"])
        est.n_features_per_view_ = [int(n) for n in attrs["n_features_per_view"]]
        est.n_features_in_ = int(sum(est.n_features_per_view_))
        est.n_components_ = int(attrs["n_components"])
        est.s0_ = float(attrs["s0"])
        if est._possibilistic and attrs.get("lam") is not None:
            est.lam_ = float(attrs["lam"])
        est.s_ = float(attrs["s"])
        est.n_iter_ = int(attrs["n_iter"])
        est.diagnostics_ = {**attrs["diagnostics"], "timings": {}}
        est.centroids_ = get("centroids").astype(np.float64)
        est.cluster_centers_ = np.hstack(list(est.centroids_))
        est.view_weights_ = get("view_weights").astype(np.float64)
        est.bandwidths_ = get("bandwidths").astype(np.float64)
        est.s_history_ = get("s_history")
        est.objective_history_ = get("objective_history")
        if cls._possibilistic:
            est.typicality_ = get("typicality").astype(np.float64)
        est.rff_frequencies_ = [get(f"rff_frequencies_{i}") for i in range(L)]
        est.feature_centers_ = [get(f"feature_centers_{i}") for i in range(L)]
        est.feature_scales_ = [get(f"feature_scales_{i}") for i in range(L)]
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags


@dataclasses.dataclass(frozen=True)
class _ViewFeatures:
    """Row function returning the features of one view (for ``rff_features``)."""

    view: int

    def __call__(self, phis, model):
        return phis[self.view]

    @property
    def __name__(self) -> str:
        return f"features-{self.view}"


class RFFKernelPowerKMeans(_RFFPowerKMeansBase):
    """Kernel power k-means on random Fourier features (RFF-KPKM, Algorithm 1).

    Power k-means (Xu and Lange 2019) minimises the power mean M_s of each point's
    squared distances to the k centroids, annealing s towards -infinity so that the
    objective moves from a smooth surrogate to the k-means objective; here the distances
    are in the random-Fourier-feature space of a Gaussian kernel, so it is kernel k-means
    at O(N k D) per iteration (RFF power k-means seed, ``docs/algorithms.md`` section 4).
    Several views are allowed: their features are concatenated with equal weights 1/L
    (the RFF-MKPKM baseline of the paper); :class:`MultiViewRFFPowerKMeans` learns them.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of clusters (>= 1; at most the number of samples).
    n_components : int, "main", "appendix" or None, default=None
        D, random frequencies per view (each view then has 2D features, a sine and a
        cosine per frequency).  None / "main": ceil(4 ln^3(2k)), the paper's main-text
        rule (108 for k = 10); "appendix": ceil(16 ln^3(2k)) (431 for k = 10).  See
        :func:`default_n_components`.
    bandwidth : "median", "mean", float or sequence, default="median"
        Gaussian bandwidth sigma per view, estimated once on the (scaled) init sample:
        "median" is the median pairwise distance of up to 1,000 sample rows, "mean" the
        root mean squared pairwise distance (the bipartite-spectral paper's rule).  A number
        applies to every view; a sequence gives one rule or number per view.  The paper's
        fixed sigma = 1000 on raw features leaves the views' RFF distances ~1000x apart
        (algorithms.md section 4); a per-view rule avoids it.
    s0 : "auto" or float < 0, default="auto"
        Initial power.  The paper's grid {5, ..., 25} read literally (s0 > 0) does not
        approximate k-means at all; the useful range (about [-6, -2.5] on mfeat) moves
        with the bandwidth and the scaling, so "auto" ties it to the data (see Notes).
    annealing : float >= 1, default=1.04
        s <- annealing * s every ``anneal_every`` iterations (Algorithm 1, appendix C).
    anneal_every : int >= 1, default=2
        Iterations between annealing steps (every 2 measured better than every 1).
    max_iter : int, default=300
        Maximum number of passes over the data.
    tol : float >= 0, default=1e-6
        Stop when no centroid moves more than this (squared, view-weighted RFF distance),
        unless two centroids coincide or a cluster vanished in that iteration.
    scale : None, "standard" or "minmax", default=None
        Feature scaling per view, estimated on the init sample and folded into the
        frequencies (no scaled copy of X is made).  None uses the features as given.
    n_init : int, default=10
        k-means restarts for the initial centroids (scikit-learn ``KMeans`` on the RFF
        features of the init sample).
    random_state : int, RandomState or None, default=None
        Seeds the init sample, the frequencies and the k-means start.
    chunk_size : int, default=8192
        Rows per block for NumPy input (Dask input keeps its own row chunks).

    Attributes
    ----------
    labels_ : ndarray of shape (N,) or lazy dask.array.Array, int64
        Cluster of every training point (lazy for Dask input: computing it is one more
        pass over the data).
    centroids_ : ndarray of shape (L, n_clusters, 2 * n_components_)
        theta_{j,l}, the centroids in each view's RFF feature space.
    cluster_centers_ : ndarray of shape (n_clusters, L * 2 * n_components_)
        ``centroids_`` with the views side by side.
    view_weights_ : ndarray of shape (L,)
        alpha_l on the simplex.
    rff_frequencies_ : list of L ndarrays of shape (d_l, n_components_)
        W_l ~ N(0, sigma_l^-2 I) in the scaled coordinates.
    feature_centers_, feature_scales_ : lists of L ndarrays of shape (d_l,)
        The scaling x -> (x - center) / scale (zeros and ones when ``scale=None``).
    bandwidths_ : ndarray of shape (L,)
        sigma_l used for each view.
    n_components_ : int
        D.
    s0_ : float
        Initial power actually used (resolved from "auto").
    s_ : float
        Power at the last iteration.
    s_history_ : ndarray of shape (n_iter_,)
        s per iteration.
    objective_history_ : ndarray of shape (n_iter_,)
        Objective per iteration (sum of power means of the assignment costs; for the
        multi-view model plus lambda times the view-weight entropy term).
    n_iter_ : int
        Passes over the data.
    view_names_ : list of str
    n_features_per_view_ : list of int
    n_features_in_ : int
        Total number of features over the views.
    diagnostics_ : dict
        ``converged``, ``n_merged_iterations`` (iterations in which two centroids
        coincided, a transient of annealing), ``merged_at_end``, ``n_reseeded`` (clusters
        whose weight mass vanished and were re-seeded from the init sample), ``timings``
        (seconds per stage) and ``pep``: the principal eigenvalue proportion (t = k, see
        :func:`mkdist.principal_eigenvalue_proportion`) of each view's RFF kernel
        Phi_l Phi_l^T (``base``) and of the combined kernel sum_l alpha_l Phi_l Phi_l^T
        (``combined``), on the init sample (up to 20,000 rows) from the 2D-wide side.

    Notes
    -----
    *Weights in log space.*  w_ij = (sum_l C_il^s)^(1/s - 1) C_ij^(s - 1) over- or
    underflows for s far below 0; mkdist evaluates log w_ij with a log-sum-exp, so the fit
    stays finite down to s = -1000 and with duplicate points (distances are floored at
    1e-12), and sets weights below exp(-600) to 0 (subnormal floats slowed BLAS ~100x).

    *s0="auto".*  At the k-means start let g_i = log C_i(2) - log C_i(1) be the log gap
    between point i's two cheapest clusters.  The weight ratio of those clusters is about
    exp((1 - s) g_i), so s0 = -1 / median_i g_i (clipped to [-1000, -0.1]) makes the
    typical point's second cluster matter (ratio ~e) without being uniform across
    clusters, which is the regime where power k-means escapes the k-means start's local
    minima; s0 >= -2 on mfeat collapsed clusters, s0 = -15 left the start unchanged.

    *Collapse guard.*  A cluster whose total weight vanishes is re-seeded at the init
    sample's worst-served point; merged centroids are counted and warned about at the end.

    *Scale.*  Each iteration is one pass over the rows: a block recomputes its features
    from the stored frequencies (never stored for Dask input) and returns k x (2DL + ...)
    partial sums, added by a tree reduction.  Memory per task is O(chunk x 2DL).

    Examples
    --------
    >>> from mkdist import RFFKernelPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(2000, n_clusters=3, random_state=0)[:2]
    >>> labels = RFFKernelPowerKMeans(3, random_state=0).fit_predict(views["view0"])
    >>> labels.shape
    (2000,)
    """

    _possibilistic = False

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 annealing: float = 1.04, anneal_every: int = 2, max_iter: int = 300,
                 tol: float = 1e-6, scale=None, n_init: int = 10, random_state=None,
                 chunk_size: int = 8192):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.s0 = s0
        self.annealing = annealing
        self.anneal_every = anneal_every
        self.max_iter = max_iter
        self.tol = tol
        self.scale = scale
        self.n_init = n_init
        self.random_state = random_state
        self.chunk_size = chunk_size


class MultiViewRFFPowerKMeans(_RFFPowerKMeansBase):
    """Improved possibilistic multi-view RFF kernel power k-means (IP-RFF-MKPKM).

    Algorithm 2 of the RFF power k-means seed (eq. 20-31): one Gaussian RFF map per
    view, possibilistic memberships u_ij (fuzzifier m) with typicality eta_{j,l}, the
    distances d~_ij,l = u_ij^m ||phi_l(x_i) - theta_{j,l}||^2 + (1 - u_ij)^m eta_{j,l},
    power-mean weights w_ij (eq. 22), centroids theta (eq. 28) and view weights alpha by
    an entropy-regularised softmax (eq. 31).  Every step is a sum over points, run as a
    map-reduce over the row chunks of the Dask arrays.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of clusters (>= 1; at most the number of samples).
    n_components : int, "main", "appendix" or None, default=None
        D, random frequencies per view (each view then has 2D features, a sine and a
        cosine per frequency).  None / "main": ceil(4 ln^3(2k)), the paper's main-text
        rule (108 for k = 10); "appendix": ceil(16 ln^3(2k)) (431 for k = 10).  See
        :func:`default_n_components`.
    bandwidth : "median", "mean", float or sequence, default="median"
        Gaussian bandwidth sigma per view, estimated once on the (scaled) init sample:
        "median" is the median pairwise distance of up to 1,000 sample rows, "mean" the
        root mean squared pairwise distance (the bipartite-spectral paper's rule).  A number
        applies to every view; a sequence gives one rule or number per view.  The paper's
        fixed sigma = 1000 on raw features leaves the views' RFF distances ~1000x apart
        (algorithms.md section 4); a per-view rule avoids it.
    s0 : "auto" or float < 0, default="auto"
        Initial power.  The paper's grid {5, ..., 25} read literally (s0 > 0) does not
        approximate k-means at all; the useful range (about [-6, -2.5] on mfeat) moves
        with the bandwidth and the scaling, so "auto" ties it to the data (see Notes).
    lam : "auto" or float > 0, default="auto"
        lambda of the view-weight entropy term (eq. 31): alpha = softmax(-cost_l / lambda).
        Small values put all weight on the cheapest view, large ones keep alpha uniform;
        the paper uses 100 (searching [1, 1000]) on data sets of about 2,000 points.
        cost_l sums over the N points, so a fixed lambda turns into a hard choice of one
        view as N grows: "auto" is lambda = 0.05 N, the paper's 100 at N = 2,000 (measured on
        W1 at N = 1,000,000: lambda = 100 gave weights (1e-124, 1) and ACC 0.44, "auto" gave
        (0.43, 0.57) and ACC 0.78; bench/RESULTS.md).  The value used is ``lam_``.
    fuzzifier : float > 1, default=2.0
        m of the possibilistic memberships (the paper's value).
    annealing : float >= 1, default=1.04
        s <- annealing * s every ``anneal_every`` iterations (Algorithm 1, appendix C).
    anneal_every : int >= 1, default=2
        Iterations between annealing steps (every 2 measured better than every 1).
    max_iter : int, default=300
        Maximum number of passes over the data.
    tol : float >= 0, default=1e-6
        Stop when no centroid moves more than this (squared, view-weighted RFF distance),
        unless two centroids coincide or a cluster vanished in that iteration.
    scale : None, "standard" or "minmax", default=None
        Feature scaling per view, estimated on the init sample and folded into the
        frequencies (no scaled copy of X is made).  None uses the features as given.
    n_init : int, default=10
        k-means restarts for the initial centroids (scikit-learn ``KMeans`` on the RFF
        features of the init sample).
    random_state : int, RandomState or None, default=None
        Seeds the init sample, the frequencies and the k-means start.
    chunk_size : int, default=8192
        Rows per block for NumPy input (Dask input keeps its own row chunks).

    Attributes
    ----------
    labels_ : ndarray of shape (N,) or lazy dask.array.Array, int64
        Cluster of every training point (lazy for Dask input: computing it is one more
        pass over the data).
    centroids_ : ndarray of shape (L, n_clusters, 2 * n_components_)
        theta_{j,l}, the centroids in each view's RFF feature space.
    cluster_centers_ : ndarray of shape (n_clusters, L * 2 * n_components_)
        ``centroids_`` with the views side by side.
    view_weights_ : ndarray of shape (L,)
        alpha_l on the simplex.
    rff_frequencies_ : list of L ndarrays of shape (d_l, n_components_)
        W_l ~ N(0, sigma_l^-2 I) in the scaled coordinates.
    feature_centers_, feature_scales_ : lists of L ndarrays of shape (d_l,)
        The scaling x -> (x - center) / scale (zeros and ones when ``scale=None``).
    bandwidths_ : ndarray of shape (L,)
        sigma_l used for each view.
    n_components_ : int
        D.
    s0_ : float
        Initial power actually used (resolved from "auto").
    lam_ : float
        lambda actually used (resolved from "auto").
    s_ : float
        Power at the last iteration.
    s_history_ : ndarray of shape (n_iter_,)
        s per iteration.
    objective_history_ : ndarray of shape (n_iter_,)
        Objective per iteration (sum of power means of the assignment costs; for the
        multi-view model plus lambda times the view-weight entropy term).
    n_iter_ : int
        Passes over the data.
    view_names_ : list of str
    n_features_per_view_ : list of int
    n_features_in_ : int
        Total number of features over the views.
    diagnostics_ : dict
        ``converged``, ``n_merged_iterations`` (iterations in which two centroids
        coincided, a transient of annealing), ``merged_at_end``, ``n_reseeded`` (clusters
        whose weight mass vanished and were re-seeded from the init sample), ``timings``
        (seconds per stage) and ``pep``: the principal eigenvalue proportion (t = k, see
        :func:`mkdist.principal_eigenvalue_proportion`) of each view's RFF kernel
        Phi_l Phi_l^T (``base``) and of the combined kernel sum_l alpha_l Phi_l Phi_l^T
        (``combined``), on the init sample (up to 20,000 rows) from the 2D-wide side.
    typicality_ : ndarray of shape (n_clusters, L)
        eta_{j,l} = mean_i ||phi_l(x_i) - theta_{j,l}||^2 at the start, kept fixed
        (re-estimating it every iteration cost 5 ACC points on mfeat).

    Notes
    -----
    *Weights in log space.*  w_ij = (sum_l C_il^s)^(1/s - 1) C_ij^(s - 1) over- or
    underflows for s far below 0; mkdist evaluates log w_ij with a log-sum-exp, so the fit
    stays finite down to s = -1000 and with duplicate points (distances are floored at
    1e-12), and sets weights below exp(-600) to 0 (subnormal floats slowed BLAS ~100x).

    *s0="auto".*  At the k-means start let g_i = log C_i(2) - log C_i(1) be the log gap
    between point i's two cheapest clusters.  The weight ratio of those clusters is about
    exp((1 - s) g_i), so s0 = -1 / median_i g_i (clipped to [-1000, -0.1]) makes the
    typical point's second cluster matter (ratio ~e) without being uniform across
    clusters, which is the regime where power k-means escapes the k-means start's local
    minima; s0 >= -2 on mfeat collapsed clusters, s0 = -15 left the start unchanged.

    *Collapse guard.*  A cluster whose total weight vanishes is re-seeded at the init
    sample's worst-served point; merged centroids are counted and warned about at the end.

    *Scale.*  Each iteration is one pass over the rows: a block recomputes its features
    from the stored frequencies (never stored for Dask input) and returns k x (2DL + ...)
    partial sums, added by a tree reduction.  Memory per task is O(chunk x 2DL).

    Examples
    --------
    >>> from mkdist import MultiViewRFFPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(2000, n_clusters=3, random_state=0)[:2]
    >>> est = MultiViewRFFPowerKMeans(3, random_state=0).fit(views)
    >>> est.view_weights_.shape
    (2,)
    """

    _possibilistic = True

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 lam="auto", fuzzifier: float = 2.0, annealing: float = 1.04,
                 anneal_every: int = 2, max_iter: int = 300, tol: float = 1e-6, scale=None,
                 n_init: int = 10, random_state=None, chunk_size: int = 8192):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.s0 = s0
        self.lam = lam
        self.fuzzifier = fuzzifier
        self.annealing = annealing
        self.anneal_every = anneal_every
        self.max_iter = max_iter
        self.tol = tol
        self.scale = scale
        self.n_init = n_init
        self.random_state = random_state
        self.chunk_size = chunk_size
