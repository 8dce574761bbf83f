"""RFF kernel power k-means (RFF-KPKM) and its improved possibilistic multi-view variant.

Algorithm 1 (RFF-KPKM) and Algorithm 2 (IP-RFF-MKPKM, eq. 20-31) of the RFF power k-means
seed (``seeds/rff-kernel-power-kmeans.txt``; see ``docs/algorithms.md`` section 4).

A fit runs ``n_init`` restarts in memory on the init sample (each its own random frequencies,
k-means start and annealing), makes one run of them (``restart_selection``: by default
continued from the consensus of their partitions) and, when the sample is not all rows,
refines it by passes over all rows from its final centroids and power, as the
MKC k-means does (``mkdist._core._kmeans``): restarts cost no pass over the data.

Every iteration is one pass over the rows through the row engine (:class:`RowBlocks`).  A
row block's random Fourier features are computed once and kept between passes when they fit
a memory budget: NumPy input within ``FEATURE_CACHE_BYTES``; Dask input as a persisted Dask
array of features on the workers, up to ``FEATURE_PERSIST_FRACTION`` of the cluster's worker
memory (chunks beyond it are recomputed from the stored frequencies in every pass).  The row
function evaluates the power-mean weights and returns k x (L 2D + ...) partial sums; Dask
input runs it as one task per row chunk and adds the partials with a tree reduction (one
``compute`` per iteration).  So NumPy and Dask input give the same numbers up to summation
order.  The passes hold the features in ``FEATURE_DTYPE`` (float32: the feature products and
distances in single precision, the weights and every sum across blocks in float64); the
k-means start, the typicality and s0 use float64 features of the init sample.

Notation: N points, L views (view l has d_l features), k clusters, D frequencies per
view (2D features: a sine and a cosine per frequency), phi_l the feature map of view l,
theta_{j,l} (2D,) the centroid of cluster j in view l's feature space, s < 0 the power.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Sequence
from numbers import Real
from typing import Any, ClassVar

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._core._blocks import RowBlocks
from .._core._cluster import active_client, persist_and_wait
from .._core._distances import bandwidth_statistic, check_bandwidth, sq_distances
from .._core._pep import principal_eigenvalue_proportion
from .._core._sampling import gather_rows
from .._core._scaling import FeatureScaling
from .._core._state import StateArrays
from .._core._validation import Interval, Options, is_dask_array, validate_params
from ..errors import InputValidationError
from . import _params
from ._base import MkdistEstimator, resolve_seed
from ._registry import register

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

#: Precision of the RFF features in the passes over the rows.  float32 halves the memory of
#: the kept features and the GEMM time, and NumPy's float32 sin / cos are ~7x faster than
#: float64 (8192 x 108: 2.0 vs 14 ms).  Rounding (~1e-7) is far below the RFF approximation
#: error (~1/sqrt(D) = 0.1) and the fit's tolerances: on mfeat and W1 the labels and the
#: objective match float64 within noise (bench/RESULTS.md).  Products whose result leaves
#: the block (the weights, their logs, every partial sum) stay float64.
FEATURE_DTYPE = np.float32

#: NumPy input (and Dask input on a local scheduler): the RFF features of all rows are kept
#: between iterations when they take at most this many bytes; above it every iteration
#: recomputes them block by block.
FEATURE_CACHE_BYTES = 256 * 2**20

#: Dask input on a distributed cluster: the features of the first row chunks are persisted on
#: the workers while they take at most this fraction of the cluster's worker memory
#: (n_workers x the smallest worker's ``memory_limit``), the rest recomputed in every pass.
#: 0.25 stays far below Dask's spill threshold (0.6 of the limit) and leaves the tasks'
#: temporaries room; W1 at N = 1M (2 x 216 float32 features, 1.7 GB) fits on 2 workers of
#: 8 GiB, with a peak worker RSS of about 1.3 GiB (bench/RESULTS.md).
FEATURE_PERSIST_FRACTION = 0.25

#: s_t = s_{t-1} (a pass that did not anneal) and f_s fell by at most this fraction of |f_s|:
#: the MM iterations at this s have converged, so the fit stops (unless centroids coincide
#: or a cluster vanished).  See ``_fit_loop``.
OBJECTIVE_RTOL = 1e-5

#: k-means++ runs (scikit-learn ``KMeans`` n_init) behind the start of each power k-means
#: restart, at most (see ``START_WORK``); the restarts themselves are the estimator's ``n_init``.
START_KMEANS_N_INIT = 10

#: The work of one pass of a restart is n k F products (n sample rows, k clusters, F = 2 D L
#: features): a pass is two GEMMs of that size (the distances and the centroid sums), a
#: restart 100-200 passes.  ``n_init="auto"`` runs as many restarts as fit RESTART_WORK
#: products a pass, within [MIN_AUTO_RESTARTS, MAX_AUTO_RESTARTS]: 10 on every shared
#: multi-view set with n k F <= 1e8 (hw2sources, mfeat: 8.6e6) and on the 1M run (20,000
#: sample rows, k = 10: 8.6e7); 6 on ccv (n = 6773, K = 20: 1.6e8) and 3 on leaves100
#: (K = 100, D = 595: 5.7e8), where 10 restarts took 110 s and ~4 minutes (bench/RESULTS.md).
#: Three is the fewest partitions the consensus can vote with.
RESTART_WORK = 1e9
MIN_AUTO_RESTARTS = 3
MAX_AUTO_RESTARTS = 10

#: A restart's k-means start runs as many k-means++ inits (1 to START_KMEANS_N_INIT) as fit
#: START_WORK products n_start k F (n_start = min(n, START_SAMPLE_SIZE)).  At K = 100 one
#: init took 1.3 s (leaves100: 13 of a restart's 21 s), on ccv (no cluster structure) each
#: Lloyd run ~0.6 s; and the start hardly decides the partition: restarts that shared the
#: frequencies but not the start reached nearly the same ACC (bench/RESULTS.md, "Restarts
#: and the seed").  Sets with n_start k F <= 2.5e7 keep 10 inits (hw2sources, mfeat, hdigit,
#: the 1M run); ccv (2.4e8) and leaves100 (5.7e8) run one.
START_WORK = 2.5e8

#: Rows of the init sample (all when it has fewer) that the k-means of a restart's start
#: runs on: best-of-10 k-means on all 20,000 rows was 80% of a restart's time (11 of 14 s on
#: W1), and a start needs centroids, not a partition of the sample (500 rows per cluster at
#: k = 10).  The typicality and s0 are then taken over the whole sample.
START_SAMPLE_SIZE = 5_000

#: s0="auto" is -S0_GAP_FACTOR / median_i(log C_i(2) - log C_i(1)), with C_i(1) <= C_i(2)
#: the two smallest assignment costs of point i at the k-means start (see Notes).
S0_GAP_FACTOR = 1.0

#: Clusters count as merged when two centroids are closer (squared, view-weighted) than
#: this fraction of the mean squared distance of a point to its nearest centroid.
MERGE_TOL = 1e-2
# lam="auto": lambda per data point, the paper's lambda = 100 on its ~2,000-point data sets.
LAM_PER_POINT = 100.0 / 2000.0


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
    if rule not in _params.D_RULES:
        raise InputValidationError(f"D rule {rule!r}; choose one of {_params.D_RULES}.")
    factor = 4.0 if rule == "main" else 16.0
    return max(1, math.ceil(factor * math.log(2 * n_clusters) ** 3))


# ----------------------------------------------------------------------------- row functions
@dataclasses.dataclass(frozen=True, eq=False)
class _FeatureMap:
    """phi_l(x) = sqrt(1/D) [sin(z), cos(z)], z = x @ projections[l] + offsets[l], per view.

    ``projections[l]`` (d_l, D) is W_l / scale_l (scaling folded into the frequencies) and
    ``offsets[l]`` (D,) is -(center_l / scale_l) @ W_l, so no scaled copy of X is made.
    z is computed in float64; sin and cos in ``dtype``.
    """

    projections: tuple[np.ndarray, ...]
    offsets: tuple[np.ndarray, ...]
    dtype: Any = FEATURE_DTYPE

    def __call__(self, blocks: Sequence[np.ndarray], dtype=None) -> list[np.ndarray]:
        """Features of one row block of every view, each (b, 2D), in ``dtype`` (default: the map's)."""
        dtype = np.dtype(self.dtype if dtype is None else dtype)
        out = []
        for X, P, b in zip(blocks, self.projections, self.offsets):
            z = np.asarray(X, dtype=np.float64) @ P
            z += b
            z = z.astype(dtype, copy=False)
            D = P.shape[1]
            phi = np.empty((z.shape[0], 2 * D), dtype=dtype)
            np.sin(z, out=phi[:, :D])
            np.cos(z, out=phi[:, D:])
            phi *= dtype.type(math.sqrt(1.0 / D))
            out.append(phi)
        return out

    def select(self, view: int) -> _FeatureMap:
        """The feature map of view ``view`` alone."""
        return _FeatureMap((self.projections[view],), (self.offsets[view],), self.dtype)

    def width(self, view: int) -> int:
        """2D, the number of features of view ``view``."""
        return 2 * self.projections[view].shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class _Model:
    """What a row block needs for one iteration or for prediction; ONE Dask graph key.

    ``features`` None means the rows are the RFF features already (the NumPy feature
    cache).  ``typicality`` is None for plain power k-means (u = 1, so d~ = d).
    """

    features: _FeatureMap | None
    centroids: np.ndarray            # (L, k, 2D)
    view_weights: np.ndarray         # (L,), alpha
    s: float
    typicality: np.ndarray | None    # (k, L), eta
    fuzzifier: float = 2.0
    #: Precision of the distance GEMM; None: the features' (the fit's passes).  What leaves
    #: the estimator (labels_, predict, transform) uses float64: OpenBLAS picks its SGEMM
    #: kernel by the block's row count, so float32 costs of one row differed by ~1e-7 between
    #: a 50-row Dask chunk and the whole array (AMD EPYC, OpenBLAS 0.3.31), and an output
    #: must not depend on how the rows were chunked.
    distance_dtype: Any = None

    def phis(self, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The RFF features of one row block of every view."""
        return list(blocks) if self.features is None else self.features(blocks)


def _sq_distances(phis: Sequence[np.ndarray], centroids: np.ndarray, dtype=None) -> list[np.ndarray]:
    """||phi_l(x_i) - theta_{j,l}||^2 for every point and cluster, one (b, k) float64 array
    per view l, >= 0.  The GEMM runs in ``dtype`` (default: the features' precision; the
    centroids rounded to it); ||phi_l(x)||^2 = (1/D) sum (sin^2 + cos^2) = 1 exactly, so it
    is not summed per row.
    """
    out = []
    for phi, theta in zip(phis, centroids):
        dt = phi.dtype if dtype is None else np.dtype(dtype)
        phi = phi.astype(dt, copy=False)
        d = sq_distances(phi, theta.astype(dt, copy=False), a_sq=np.ones(phi.shape[0], dtype=dt))
        out.append(d.astype(np.float64, copy=False))
    return out


@dataclasses.dataclass
class _Costs:
    """Assignment costs of a row block and their parts (see ``_costs``)."""

    costs: np.ndarray              # (b, k), C_ij = sum_l alpha_l d~_ij,l
    d: list[np.ndarray]            # L x (b, k), d_ij,l
    A: np.ndarray                  # (b, k), sum_l alpha_l d_ij,l
    u_m: np.ndarray | None = None  # (b, k), u_ij^m (possibilistic model only)
    v_m: np.ndarray | None = None  # (b, k), (1 - u_ij)^m


def _costs(phis: Sequence[np.ndarray], model: _Model) -> _Costs:
    """Assignment costs C_ij = sum_l alpha_l d~_ij,l and their parts.

    For the possibilistic model u_ij is eq. 26 at the current centroids and d~ is eq. 23,
    d~_ij,l = u^m d_ij,l + (1 - u)^m eta_jl, so C_ij = u^m A_ij + (1 - u)^m B_j with
    B = eta alpha: d~ itself (b x k x L) is never formed.  Else d~ = d and C = A.
    """
    d = _sq_distances(phis, model.centroids, model.distance_dtype)
    A = model.view_weights[0] * d[0] if d else np.zeros((0, model.centroids.shape[1]))
    for a, dl in zip(model.view_weights[1:], d[1:]):
        A += a * dl
    if model.typicality is None:
        return _Costs(A, d, A)
    Bc = model.typicality @ model.view_weights                          # (k,)
    B = np.maximum(Bc, np.finfo(np.float64).tiny)
    m = model.fuzzifier
    u = 1.0 / (1.0 + (A / B[None, :]) ** (1.0 / (m - 1.0)))
    u_m = u**m
    v_m = (1.0 - u) ** m
    return _Costs(u_m * A + v_m * Bc[None, :], d, A, u_m, v_m)


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


def _iteration_stats(blocks: list, model: _Model) -> np.ndarray:
    """Partial sums of one iteration over a row block, flat (width,), see ``_stat_layout``.

    sums[l, j] = sum_i g_ij phi_l(x_i) and mass[j] = sum_i g_ij with g = w (plain) or
    g = w u^m (eq. 28); counts[j] = #points whose smallest cost is j; view_cost[l] =
    sum_ij w_ij d~_ij,l = sum_ij g_ij d_ij,l + sum_j (sum_i w_ij (1 - u_ij)^m) eta_jl
    (eq. 31); objective = sum_i M_s(C_i); inertia = sum_i min_j A_ij.
    """
    phis = model.phis(blocks)
    L, k, F = model.centroids.shape
    layout = _stat_layout(L, k, F)
    out = np.zeros(layout["width"])
    c = _costs(phis, model)
    w, log_mean = _power_mean_weights(c.costs, model.s)
    g = w if c.u_m is None else w * c.u_m
    gt = g.T.astype(phis[0].dtype) if phis else g.T  # (k, b): the GEMM in the features' precision
    out[layout["sums"]] = np.stack([gt @ phi for phi in phis]).ravel()
    out[layout["mass"]] = g.sum(axis=0)
    out[layout["counts"]] = np.bincount(np.argmin(c.costs, axis=1), minlength=k)
    view_cost = np.array([np.vdot(g, dl) for dl in c.d])
    if c.v_m is not None:
        view_cost += (w * c.v_m).sum(axis=0) @ model.typicality
    out[layout["view_cost"]] = view_cost
    out[layout["objective"]] = np.exp(log_mean).sum()
    out[layout["inertia"]] = c.A.min(axis=1).sum() if c.A.shape[0] else 0.0
    return out


def _row_costs(blocks: list, model: _Model) -> np.ndarray:
    return _costs(model.phis(blocks), model).costs


def _row_labels(blocks: list, model: _Model) -> np.ndarray:
    return np.argmin(_costs(model.phis(blocks), model).costs, axis=1).astype(np.int64)


def _row_features(blocks: list, features: _FeatureMap) -> np.ndarray:
    """The features of the one view a ``RowBlocks`` holds (``features`` of that view)."""
    return features(blocks)[0]


# ----------------------------------------------------------------------------- fit helpers
def _feature_map_of(frequencies: Sequence[np.ndarray], centers: Sequence[np.ndarray],
                    scales: Sequence[np.ndarray]) -> _FeatureMap:
    """The passes' feature map of frequencies W_l (d_l, D) in the scaled coordinates
    x -> (x - center) / scale, the scaling folded into the projections."""
    projections, offsets = [], []
    for W, c, sc in zip(frequencies, centers, scales):
        P = W / sc[:, None]
        projections.append(np.ascontiguousarray(P))
        offsets.append(-(c @ P))
    return _FeatureMap(tuple(projections), tuple(offsets), FEATURE_DTYPE)


def _view_features(rows: RowBlocks, features: _FeatureMap) -> list:
    """phi_l of every row in ``features.dtype``, one map per view over that view's rows only
    (NumPy or lazy Dask; a Dask map checks its chunks for NaN/inf)."""
    views = dict(zip(rows.names, rows.arrays))
    return [RowBlocks(views, [name], block_rows=rows.block_rows).map(
                _row_features, features.select(v), n_cols=features.width(v), dtype=features.dtype,
                name="rff-features")
            for v, name in enumerate(rows.names)]


def _feature_budget(client) -> float:
    """Bytes of RFF features a fit may keep between passes (see ``FEATURE_PERSIST_FRACTION``).

    On a distributed ``client``: FEATURE_PERSIST_FRACTION x n_workers x the smallest worker
    ``memory_limit`` (a worker without a limit counts as this machine's physical memory).
    Any other scheduler keeps the features in this process: ``FEATURE_CACHE_BYTES``, as for
    NumPy input.
    """
    if client is None:
        return float(FEATURE_CACHE_BYTES)
    workers = list(client.scheduler_info(n_workers=-1)["workers"].values())
    if not workers:
        return 0.0
    physical = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    smallest = min(float(w.get("memory_limit") or physical) for w in workers)
    return FEATURE_PERSIST_FRACTION * len(workers) * smallest


def _feature_rows(rows: RowBlocks, features: _FeatureMap) -> RowBlocks | None:
    """The features of every row as the views of a ``RowBlocks`` (same row chunks and
    blocks), which a model without a feature map reads; None when none fit the budget.

    NumPy input: computed once when they fit in ``FEATURE_CACHE_BYTES``.  Dask input: a Dask
    array of features per view (a ``RowBlocks`` map, which also checks the raw chunks for
    NaN/inf), persisted for the first row chunks that fit ``_feature_budget``; later chunks
    stay lazy, so every pass recomputes them from the raw rows, in the same tasks' arithmetic.
    The persisted chunks are computed before this returns; an error in them (e.g. NaN in a
    chunk) is raised here.
    """
    row_bytes = sum(features.width(v) for v in range(len(rows.names))) * np.dtype(features.dtype).itemsize
    if not rows.is_dask:
        if rows.n_samples * row_bytes > FEATURE_CACHE_BYTES:
            return None
        return RowBlocks(dict(zip(rows.names, _view_features(rows, features))), block_rows=rows.block_rows)
    import dask.array as da

    chunks = rows.row_chunks
    n_kept = int(np.searchsorted(np.cumsum(chunks) * row_bytes, _feature_budget(active_client()), side="right"))
    if n_kept == 0:
        return None
    phis = _view_features(rows, features)
    stop = int(sum(chunks[:n_kept]))
    kept = persist_and_wait([phi[:stop] for phi in phis])
    if n_kept < len(chunks):
        kept = [da.concatenate([k, phi[stop:]]) for k, phi in zip(kept, phis)]
    return RowBlocks(dict(zip(rows.names, kept)), block_rows=rows.block_rows)


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
    d = sum(a * sq_distances(c, c) for a, c in zip(view_weights, centroids))
    return float(d[~np.eye(k, dtype=bool)].min())


def _reseed(centroids: np.ndarray, vanished: np.ndarray, pool: Sequence[np.ndarray],
            model: _Model) -> np.ndarray:
    """Centroids of ``vanished`` clusters moved onto the pool rows of largest cost (one each)."""
    costs = _costs(pool, model).A.min(axis=1)
    order = np.argsort(costs)[::-1]
    out = centroids.copy()
    for j, i in zip(np.flatnonzero(vanished), order):
        for v, phi in enumerate(pool):
            out[v, j] = phi[i]
    return out


def _fit_loop(rows: RowBlocks, model: _Model, *, s0: float, annealing: float, anneal_every: int,
              max_iter: int, tol: float, lam: float | None, reseed_pool: Sequence[np.ndarray],
              trace: list | None = None) -> dict[str, Any]:
    """Power k-means iterations (Algorithm 1, or Algorithm 2 when ``model.typicality`` is set).

    Prior validation is assumed.  One pass over the rows per iteration gives, at the
    current (theta, alpha, s): u (eq. 26), d~ (eq. 23), w (eq. 22), and the sums for the
    new theta (eq. 28) and alpha (eq. 31).  ``reseed_pool`` (the features of the init
    sample) supplies new centroids for clusters whose weight mass vanished.  The first
    pass checks Dask chunks for NaN/inf.  Returns the final model, the histories and the
    guard counters.

    The fit stops ("until convergence", Algorithms 1 and 2) when no centroid moved more than
    ``tol``, or when a pass at the same s as the previous one lowered the objective by at most
    ``OBJECTIVE_RTOL`` of its value: each pass is an MM step that never raises f_s at fixed s
    (the paper's monotone objective), so a vanishing decrease at fixed s is its convergence,
    while across an annealing step f_s moves with s alone.  Neither test applies in a pass
    where two centroids coincide or a cluster vanished (transients of annealing); ``tol=0``
    turns the objective test off (the fit then runs to an exact fixed point or ``max_iter``).
    """
    L, k, F = model.centroids.shape
    layout = _stat_layout(L, k, F)
    N = rows.n_samples
    s = float(s0)
    s_hist, obj_hist = [], []
    prev_s = prev_objective = None
    n_merged = n_reseeded = 0
    merged = False
    converged = False
    n_iter = 0
    for it in range(max_iter):
        model = dataclasses.replace(model, s=s)
        stats = rows.reduce(_iteration_stats, model, width=layout["width"], check_finite=it == 0,
                            name="rff-power-iteration")
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
        stalled = (prev_s == s_hist[-1]
                   and prev_objective - objective <= OBJECTIVE_RTOL * abs(prev_objective))
        prev_s, prev_objective = s_hist[-1], objective
        if (shift <= tol or (stalled and tol > 0)) and not merged and not vanished.any():
            converged = True
            break
    return {"model": model, "s_next": s, "s_history": np.asarray(s_hist),
            "objective_history": np.asarray(obj_hist), "n_iter": n_iter, "n_merged_iterations": n_merged,
            "merged_at_end": bool(merged),
            "n_reseeded": n_reseeded, "converged": converged}


def _start(phis: Sequence[np.ndarray], k: int, rs: np.random.RandomState, *, possibilistic: bool,
           fuzzifier: float, n_init: int = START_KMEANS_N_INIT) -> _Model:
    """One restart's start: k-means (k-means++, ``n_init`` runs) on the view-averaged
    RFF features ``phis`` (float64, the init sample; START_SAMPLE_SIZE of its rows drawn by
    ``rs`` when it has more), uniform view weights and, for the possibilistic model, the
    typicality at these centroids over all of ``phis``.  The model reads feature rows."""
    # sklearn.cluster and sklearn.metrics are imported where they are used in this module:
    # `import mkdist` (and so every CLI refusal) does not pay for them.
    from sklearn.cluster import KMeans

    L, n = len(phis), phis[0].shape[0]
    rows = np.sort(rs.choice(n, START_SAMPLE_SIZE, replace=False)) if n > START_SAMPLE_SIZE else slice(None)
    stacked = np.hstack([phi[rows] for phi in phis]) * math.sqrt(1.0 / L)
    km = KMeans(k, n_init=n_init, random_state=rs.randint(np.iinfo(np.int32).max))
    with warnings.catch_warnings():
        # Fewer distinct points than k is handled by the fit (duplicate centroids are legal).
        warnings.simplefilter("ignore", ConvergenceWarning)
        km.fit(stacked)
    centroids = np.stack(np.split(km.cluster_centers_ / math.sqrt(1.0 / L), L, axis=1))
    return _model_at(phis, centroids, np.full(L, 1.0 / L), possibilistic=possibilistic, fuzzifier=fuzzifier)


def _model_at(phis: Sequence[np.ndarray], centroids: np.ndarray, view_weights: np.ndarray, *,
              possibilistic: bool, fuzzifier: float) -> _Model:
    """A run's starting model at ``centroids`` (L, k, 2D): for the possibilistic model the
    typicality there over all rows ``phis``.  The model reads feature rows."""
    eta = None
    if possibilistic:
        # eta_{j,l} = mean_i ||phi_l(x_i) - theta_{j,l}||^2 at the start, kept fixed
        # (re-estimating it every iteration cost 5 ACC points on mfeat).
        eta = np.stack([d.mean(axis=0) for d in _sq_distances(phis, centroids)], axis=1)
    return _Model(None, centroids, np.asarray(view_weights, dtype=np.float64), float("nan"), eta, fuzzifier)


def _consensus_labels(labels: Sequence[np.ndarray], k: int, seed: int) -> np.ndarray:
    """The consensus of the restarts' partitions: k-means (k-means++, START_KMEANS_N_INIT
    runs) on their stacked one-hot memberships, a sparse (n, R k) matrix with R ones a row.

    Its k-means objective is, up to constants, minus the summed category utility of the
    partition with the R partitions (Topchy, Jain and Punch 2005, "Clustering ensembles:
    models of consensus and weak partitions"; Wu et al. 2015, K-means-based consensus
    clustering): two points end up together as often as the restarts put them together,
    pair by pair, so errors the restarts do not share are voted out.
    """
    from scipy import sparse
    from sklearn.cluster import KMeans

    R, n = len(labels), labels[0].size
    cols = (np.stack(labels, axis=1) + k * np.arange(R)).ravel()
    H = sparse.csr_matrix((np.ones(n * R), cols, np.arange(0, n * R + 1, R)), shape=(n, R * k))
    km = KMeans(k, n_init=START_KMEANS_N_INIT, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return km.fit(H).labels_.astype(np.int64)


def _partition_centroids(phis: Sequence[np.ndarray], labels: np.ndarray, k: int) -> np.ndarray:
    """The means of each cluster of ``labels`` in every view's features, (L, k, 2D); an empty
    cluster sits at the mean of all rows."""
    from scipy import sparse

    n = labels.size
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    M = sparse.csr_matrix((1.0 / counts[labels], (labels, np.arange(n))), shape=(k, n))
    out = np.stack([np.asarray(M @ phi) for phi in phis])
    empty = counts == 0
    if empty.any():
        out[:, empty] = np.stack([phi.mean(axis=0) for phi in phis])[:, None, :]
    return out


def _final_objective(phis: Sequence[np.ndarray], model: _Model, lam: float | None) -> float:
    """The objective a run anneals towards, at its final parameters, on rows ``phis``:
    sum_i min_j C_ij (+ lam sum_l alpha_l log alpha_l for the multi-view model).

    min_j C_ij is the limit of the power mean M_s(C_i) as s -> -infinity, so runs that
    stopped at different s are compared on one function, the k-means objective of the model
    (for the possibilistic model with d~, i.e. at the memberships u of eq. 26).
    """
    value = float(_costs(phis, model).costs.min(axis=1).sum())
    if lam is not None:
        alpha = model.view_weights
        value += lam * float(np.sum(alpha * np.log(np.maximum(alpha, 1e-300))))
    return value


def _select_restart(runs: Sequence[dict], rule: str) -> tuple[int, list[float]]:
    """Index of the kept restart and each restart's agreement with the others.

    ``agreement[r]`` is the mean adjusted Rand index of restart r's partition of the sample
    with those of the other restarts (1.0 for a single restart).  "agreement" keeps the most
    agreeing restart, the medoid of the partitions (ties, e.g. two restarts: the lower final
    objective); "objective" the lowest ``final_objective``.
    """
    from sklearn.metrics import adjusted_rand_score

    R = len(runs)
    ari = np.ones((R, R))
    for a in range(R):
        for b in range(a + 1, R):
            ari[a, b] = ari[b, a] = adjusted_rand_score(runs[a]["labels"], runs[b]["labels"])
    agreement = ((ari.sum(axis=1) - 1.0) / max(R - 1, 1)).tolist()
    objective = np.array([r["final_objective"] for r in runs])
    if rule == "objective" or R < 3:
        return int(np.argmin(objective)), agreement
    return int(np.lexsort((objective, -np.asarray(agreement)))[0]), agreement


@dataclasses.dataclass
class _Restarter:
    """One restart on the init sample from one integer seed: its own frequencies W_l (drawn
    from the seed at the fit's bandwidths), its own k-means start, its own annealing."""

    sample: list            # L arrays (n, d_l), float64
    names: list
    centers: list
    scales: list
    sigmas: list
    D: int
    k: int
    possibilistic: bool
    fuzzifier: float
    s0: Any                 # "auto" or a float
    block_rows: int
    lam: float | None       # lambda for the sample's n rows
    loop: dict
    start_n_init: int = START_KMEANS_N_INIT

    def features(self, frequencies: list) -> tuple[list[np.ndarray], RowBlocks]:
        """float64 features of the sample (start, eta, s0, reseeding, objective) and its
        passes' features (``FEATURE_DTYPE``, block by block as over all rows)."""
        fmap = _feature_map_of(frequencies, self.centers, self.scales)
        phis = fmap(self.sample, dtype=np.float64)
        raw = RowBlocks(dict(zip(self.names, self.sample)), block_rows=self.block_rows)
        return phis, RowBlocks(dict(zip(self.names, _view_features(raw, fmap))), block_rows=self.block_rows)

    def __call__(self, seed: int) -> dict[str, Any]:
        rs = np.random.RandomState(seed)
        # W ~ N(0, sigma^-2 I) in the scaled coordinates (Gaussian kernel, bandwidth sigma).
        frequencies = [rs.standard_normal((v.shape[1], self.D)) / sigma
                       for v, sigma in zip(self.sample, self.sigmas)]
        phis, rows = self.features(frequencies)
        model = _start(phis, self.k, rs, possibilistic=self.possibilistic, fuzzifier=self.fuzzifier,
                       n_init=self.start_n_init)
        s0 = _auto_s0(_costs(phis, model).costs) if self.s0 == "auto" else float(self.s0)
        return self._run(phis, rows, model, s0, seed=int(seed), s0=s0, frequencies=frequencies)

    def _run(self, phis: list, rows: RowBlocks, model: _Model, s: float, **info) -> dict[str, Any]:
        """The iterations on the sample from ``model`` at power ``s``, with ``info`` and the
        run's final objective and partition of the sample."""
        out = _fit_loop(rows, model, s0=s, lam=self.lam, reseed_pool=phis, **self.loop)
        out.update(info, final_objective=_final_objective(phis, out["model"], self.lam),
                   labels=rows.map(_row_labels, out["model"], n_cols=None, dtype=np.int64))
        return out

    def from_consensus(self, runs: Sequence[dict], seed: int) -> tuple[int, dict[str, Any], list[float]]:
        """The run continued from the restarts' consensus partition (``_consensus_labels``).

        The restart whose partition agrees best with the consensus (adjusted Rand index)
        lends its frequencies, view weights and final power; its centroids are moved to the
        consensus clusters' means (the typicality taken there) and the iterations go on from
        its final s.  Returns that restart's index, the run and every restart's ARI with the
        consensus.
        """
        from sklearn.metrics import adjusted_rand_score

        consensus = _consensus_labels([r["labels"] for r in runs], self.k, seed)
        ari = [float(adjusted_rand_score(consensus, r["labels"])) for r in runs]
        best = int(np.argmax(ari))
        base = runs[best]
        phis, rows = self.features(base["frequencies"])
        model = _model_at(phis, _partition_centroids(phis, consensus, self.k), base["model"].view_weights,
                          possibilistic=self.possibilistic, fuzzifier=self.fuzzifier)
        run = self._run(phis, rows, model, base["s_next"], seed=base["seed"], s0=base["s0"],
                        frequencies=base["frequencies"])
        return best, run, ari


def _run_restarts(restart: _Restarter, seeds: Sequence[int], *, on_cluster: bool) -> list[dict[str, Any]]:
    """``restart(seed)`` for every seed: with ``on_cluster`` (Dask input) as tasks on the
    workers of a distributed cluster when one is the scheduler (the sample is shipped once; a
    restart is seconds of in-memory work), else one after the other in this process.  The same
    function either way.  NumPy input stays in this process, as it does for every mkdist
    estimator, whether or not a Client happens to be the default scheduler."""
    client = active_client() if on_cluster else None
    if client is None or len(seeds) < 2:
        return [restart(seed) for seed in seeds]
    remote = client.scatter(dataclasses.replace(restart, loop={**restart.loop, "trace": None}),
                            broadcast=True, hash=False)
    return client.gather(client.map(_call_restart, [remote] * len(seeds), seeds, pure=False))


def _call_restart(restart: _Restarter, seed: int) -> dict[str, Any]:
    return restart(seed)


def _feature_peps(phis: Sequence[np.ndarray], view_weights: np.ndarray, k: int) -> dict[str, Any]:
    """PEP (t = k) of each view's RFF kernel and of the alpha-weighted sum, from the factors.

    K_l = Phi_l Phi_l^T and sum_l alpha_l K_l = [sqrt(alpha_l) Phi_l]_l [..]^T, so both come
    from the (b x 2DL) factors without forming a b x b kernel.
    """
    t = min(k, phis[0].shape[0])
    base = [principal_eigenvalue_proportion(phi, t, factor=True) for phi in phis]
    combined = np.hstack([math.sqrt(a) * phi for a, phi in zip(view_weights, phis)])
    return {"t": int(t), "base": [float(b) for b in base],
            "combined": float(principal_eigenvalue_proportion(combined, t, factor=True))}


# ----------------------------------------------------------------------------- estimators
class _RFFPowerKMeansBase(MkdistEstimator):
    """Shared fit / predict / state code; subclasses set ``_possibilistic``."""

    _possibilistic: ClassVar[bool] = False
    _fitted_attr: ClassVar[str] = "centroids_"
    _param_constraints: ClassVar[dict[str, list]] = _params.RFF_POWER_KMEANS

    # ------------------------------------------------------------------ validation
    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        """n_clusters <= N, D from its rule, one bandwidth rule or value per view; ``lam``
        (None: fixed view weights) and ``fuzzifier`` for the fit."""
        super()._check_params_vs_input(n_samples, views)
        D = self.n_components
        if D is None or isinstance(D, str):
            D = default_n_components(self.n_clusters, D or "main")
        bw, n_views = self.bandwidth, len(views)
        if isinstance(bw, (list, tuple, np.ndarray)):
            if len(bw) != n_views:
                raise InputValidationError(
                    f"`bandwidth` has {len(bw)} values but the input has {n_views} view(s).")
            bw = [b.item() if isinstance(b, np.generic) else b for b in bw]  # np.str_ -> str
            rule = [Options(*_params.POWER_BANDWIDTH_RULES), Interval(Real, 0, None, closed="neither")]
            validate_params({f"bandwidth[{i}]": rule for i in range(n_views)},
                            {f"bandwidth[{i}]": b for i, b in enumerate(bw)})
            bandwidths = [b if isinstance(b, str) else float(b) for b in bw]
        else:
            bandwidths = [bw if isinstance(bw, str) else float(bw)] * n_views
        return {"D": int(D), "bandwidths": bandwidths, "lam": None, "fuzzifier": 2.0}

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
        views = self._fit_views(X)
        N = int(next(iter(views.values())).shape[0])
        p = self._fit_checks
        rows = RowBlocks(views, block_rows=int(self.chunk_size))
        L, k, D = len(views), int(self.n_clusters), p["D"]
        # One RandomState for the fit's draws, in this order (it fixes what a seed gives): the
        # sample, per view the median bandwidth's rows, one seed per restart.  A restart draws
        # its frequencies and its k-means seed from its own seed (see ``_Restarter.__call__``).
        rng = np.random.RandomState(resolve_seed(self.random_state))

        # One read of the sample rows: scaling, bandwidths, the restarts.
        sample_idx = (np.arange(N) if N <= INIT_SAMPLE_SIZE
                      else np.sort(rng.choice(N, INIT_SAMPLE_SIZE, replace=False)))
        arrays = dict(zip(rows.names, rows.arrays))
        sample = gather_rows(arrays, sample_idx) if rows.is_dask or N > INIT_SAMPLE_SIZE else arrays
        sample = {name: np.asarray(v, dtype=np.float64) for name, v in sample.items()}
        if rows.is_dask:
            for name, v in sample.items():
                if not np.isfinite(v).all():
                    row = int(sample_idx[np.argmax(~np.isfinite(v).all(axis=1))])
                    raise InputValidationError(
                        f"Input contains NaN or infinity: view {name!r}, row {row}.")
        scaling = FeatureScaling.fit(self.scale, sample)
        where = "all rows" if N <= INIT_SAMPLE_SIZE else f"{sample_idx.size} sampled rows"
        centers, scales, sigmas = [], [], []
        for (name, v), rule in zip(sample.items(), p["bandwidths"]):
            c = np.zeros(v.shape[1]) if scaling is None else scaling.offset[name]
            sc = np.ones(v.shape[1]) if scaling is None else scaling.scale[name]
            if isinstance(rule, str):
                scaled = v if scaling is None else (v - c) / sc
                sigma = bandwidth_statistic(scaled, rule, rng=rng, pair_rows=BANDWIDTH_PAIR_ROWS)
                check_bandwidth(sigma, name, f"the {rule!r} bandwidth on {where}")
            else:
                sigma = rule
            centers.append(c)
            scales.append(sc)
            sigmas.append(sigma)
        self._set_fitted_views(views)
        self.feature_centers_ = centers
        self.feature_scales_ = scales
        self.bandwidths_ = np.asarray(sigmas)
        self.n_components_ = D
        timings["sample_s"] = time.perf_counter() - t0

        # The restarts on the sample, each with its own frequencies, k-means start and annealing.
        t0 = time.perf_counter()
        n = sample_idx.size
        lam = p["lam"]
        pass_work = n * k * 2 * D * L
        self.n_init_ = (int(self.n_init) if self.n_init != "auto"
                        else int(np.clip(RESTART_WORK // pass_work, MIN_AUTO_RESTARTS, MAX_AUTO_RESTARTS)))
        start_n_init = int(np.clip(START_WORK // (min(n, START_SAMPLE_SIZE) * k * 2 * D * L),
                                   1, START_KMEANS_N_INIT))
        restart = _Restarter(
            sample=list(sample.values()), names=rows.names, centers=centers, scales=scales,
            sigmas=sigmas, D=D, k=k, possibilistic=self._possibilistic, fuzzifier=p["fuzzifier"],
            s0=self.s0, block_rows=int(self.chunk_size),
            # lambda per point is the model's: eq. 31 sums the view costs over the rows it sees.
            lam=None if lam is None else lam * n / N,
            loop=dict(annealing=float(self.annealing), anneal_every=int(self.anneal_every),
                      max_iter=int(self.max_iter), tol=float(self.tol),
                      trace=getattr(self, "_trace", None)),
            start_n_init=start_n_init)
        runs = _run_restarts(restart, [int(seed) for seed in rng.randint(np.iinfo(np.int32).max,
                                                                         size=self.n_init_)],
                             on_cluster=rows.is_dask)
        best, agreement = _select_restart(runs, self.restart_selection)
        run = runs[best]
        consensus_ari = None
        if self.restart_selection == "consensus" and len(runs) > 1:
            best, run, consensus_ari = restart.from_consensus(runs, int(rng.randint(np.iinfo(np.int32).max)))
        result = run
        self.rff_frequencies_ = run["frequencies"]
        features = self._feature_map()
        phis, sample_rows = restart.features(run["frequencies"])
        timings["restarts_s"] = time.perf_counter() - t0

        # The winner refined over all rows, from its final centroids and s, when the sample is
        # not all of them.  Its features are kept between passes when they fit the budget.
        t0 = time.perf_counter()
        refine = N > n
        data_rows = rows
        if refine:
            cached = _feature_rows(rows, features)
            model = dataclasses.replace(run["model"], features=features)
            if cached is not None:
                rows, model = cached, dataclasses.replace(model, features=None)
            timings["features_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = {**_fit_loop(rows, model, s0=run["s_next"], lam=lam, reseed_pool=phis,
                                  **restart.loop), "s0": run["s0"]}
        timings["refine_s"] = time.perf_counter() - t0
        s0 = result["s0"]
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
        self.diagnostics_["restarts"] = {
            "rows": int(n), "selection": self.restart_selection, "best": best,
            "start_n_init": start_n_init,
            "consensus_ari": consensus_ari,
            "consensus_final_objective": None if consensus_ari is None else run["final_objective"],
            "final_objective": [r["final_objective"] for r in runs], "agreement": agreement,
            "seed": [r["seed"] for r in runs], "s0": [r["s0"] for r in runs],
            "s_final": [float(r["s_history"][-1]) for r in runs],
            "n_iter": [int(r["n_iter"]) for r in runs],
            "converged": [bool(r["converged"]) for r in runs]}
        self.diagnostics_["timings"] = timings
        self.diagnostics_["pep"] = _feature_peps(phis, final.view_weights, k)
        if result["merged_at_end"]:
            warnings.warn(
                f"{type(self).__name__}: after max_iter={self.max_iter} iterations two centroids "
                f"still coincide (s={self.s_:.3g}): the partition has fewer than {k} distinct "
                "clusters. Raise max_iter, or start from a more negative s0.",
                ConvergenceWarning, stacklevel=2)
        # NumPy input: the rows of the last pass (the cached features).  Dask input: the raw
        # rows, so that the lazy labels_ holds no reference to the persisted features (their
        # memory is released with the fit) -- the same features, recomputed by the same map.
        # Without a refinement the last passes walked the sample, i.e. all rows in order.
        # The data was checked by the first pass (or with the sample).
        if not refine:
            rows = sample_rows
        if data_rows.is_dask:
            rows, final = data_rows, dataclasses.replace(final, features=features)
        final = dataclasses.replace(final, distance_dtype=np.float64)  # as predict: see _Model
        self.labels_ = rows.map(_row_labels, final, n_cols=None, dtype=np.int64,
                                name="rff-power-labels", check_finite=False)
        return self

    def _feature_map(self) -> _FeatureMap:
        return _feature_map_of(self.rff_frequencies_, self.feature_centers_, self.feature_scales_)

    def _model(self) -> _Model:
        return _Model(self._feature_map(), self.centroids_, self.view_weights_, self.s_,
                      getattr(self, "typicality_", None),
                      float(getattr(self, "fuzzifier", 2.0)), distance_dtype=np.float64)

    # ------------------------------------------------------------------ inference
    def _rows(self, X) -> RowBlocks:
        return RowBlocks(self._predict_views(X), block_rows=int(self.chunk_size))

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
        rows = self._rows(X)
        return rows.map(_row_costs, self._model(), n_cols=int(self.centroids_.shape[1]),
                        dtype=np.float64, name="rff-power-costs")

    def predict(self, X):
        """Cluster of smallest assignment cost for every point.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, d), or a list / dict of views

        Returns
        -------
        labels : ndarray of shape (n,), int64 (lazy Dask array for Dask input)
        """
        rows = self._rows(X)
        return rows.map(_row_labels, self._model(), n_cols=None, dtype=np.int64,
                        name="rff-power-labels")

    def rff_features(self, X) -> list:
        """The random Fourier features phi_l(x) of every view, as used by the fit.

        Returns
        -------
        list of L ndarrays or lazy Dask arrays of shape (n, 2 n_components_), float64
            (the passes of the fit use them rounded to ``FEATURE_DTYPE``)
        """
        return _view_features(self._rows(X), dataclasses.replace(self._feature_map(), dtype=np.float64))

    def assign_with_distance(self, X):
        """Cluster of smallest assignment cost and that cost (what drift monitoring compares).

        Returns
        -------
        labels : ndarray or lazy dask.array.Array of shape (n,), int64
        cost : ndarray or lazy dask.array.Array of shape (n,), float64
        """
        costs = self.transform(X)
        return costs.argmin(axis=1).astype(np.int64), costs.min(axis=1)

    def report_embedding(self, X):
        """The views' RFF features side by side, each scaled by sqrt(view weight): the space the
        centroids live in, as a report draws it, shape (n, L * 2 n_components_)."""
        parts = [f * np.sqrt(a) for f, a in zip(self.rff_features(X), self.view_weights_)]
        if is_dask_array(parts[0]):
            import dask.array as da

            return da.concatenate(parts, axis=1)
        return np.hstack(parts)

    # ------------------------------------------------------------------ state and summary
    def _state(self) -> tuple[dict, dict]:
        """Per-view arrays are named ``<array>__<view>`` with dims ``feature__<view>``; the
        other dims are "view", "cluster", "frequency", "rff_feature" and "iteration"."""
        attrs = {"n_components": int(self.n_components_), "s0": float(self.s0_),
                 "lam": float(self.lam_) if self._possibilistic else None, "s": float(self.s_),
                 "n_iter": int(self.n_iter_)}
        arrays: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
            "centroids": (("view", "cluster", "rff_feature"), self.centroids_),
            "view_weights": (("view",), self.view_weights_),
            "bandwidths": (("view",), self.bandwidths_),
            "s_history": (("iteration",), self.s_history_),
            "objective_history": (("iteration",), self.objective_history_),
        }
        if self._possibilistic:
            arrays["typicality"] = (("cluster", "view"), self.typicality_)
        names = self.view_names_
        for name, W in zip(names, self.rff_frequencies_):
            arrays[f"rff_frequencies__{name}"] = ((f"feature__{name}", "frequency"), W)
        if self.scale is not None:
            arrays.update(FeatureScaling(self.scale, dict(zip(names, self.feature_centers_)),
                                         dict(zip(names, self.feature_scales_))).state_arrays())
        return attrs, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        names = self.view_names_
        self.n_components_ = int(attrs["n_components"])
        self.s0_ = float(attrs["s0"])
        if self._possibilistic and attrs.get("lam") is not None:
            self.lam_ = float(attrs["lam"])
        self.s_ = float(attrs["s"])
        self.n_iter_ = int(attrs["n_iter"])
        self.centroids_ = get("centroids", np.float64)
        self.cluster_centers_ = np.hstack(list(self.centroids_))
        self.view_weights_ = get("view_weights", np.float64)
        self.bandwidths_ = get("bandwidths", np.float64)
        self.s_history_ = get("s_history")
        self.objective_history_ = get("objective_history")
        if self._possibilistic:
            self.typicality_ = get("typicality", np.float64)
        self.rff_frequencies_ = [get(f"rff_frequencies__{n}") for n in names]
        scaling = FeatureScaling.from_state(self.scale, names, get)
        d = self.n_features_per_view_
        if scaling is None:
            self.feature_centers_ = [np.zeros(d[n]) for n in names]
            self.feature_scales_ = [np.ones(d[n]) for n in names]
        else:
            self.feature_centers_ = [scaling.offset[n] for n in names]
            self.feature_scales_ = [scaling.scale[n] for n in names]

    def _summary_fields(self) -> dict[str, Any]:
        """``n_components`` is D (frequencies per view, each view has 2D features); one
        Gaussian RFF kernel per view."""
        views = list(self.view_names_)
        names = [f"{v}:rff-gaussian(sigma={s:.4g})" for v, s in zip(views, self.bandwidths_)]
        pep = self.diagnostics_.get("pep")
        if pep:
            pep = {**pep, "base": dict(zip(names, pep["base"]))}  # {"t", "base", "combined"}
        return {
            "n_components": int(self.n_components_), "kernel_names": names,
            "weights": [{"name": "view weights", "labels": views,
                         "values": np.asarray(self.view_weights_).tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(),
            "n_iter": int(self.n_iter_), "converged": bool(self.diagnostics_.get("converged")),
            "pep": pep or None,
        }


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
        Stop when no centroid moves more than this (squared, view-weighted RFF distance), or
        when an iteration at an unchanged s lowers the objective by at most
        ``OBJECTIVE_RTOL`` (1e-5) of its value -- unless two centroids coincide or a cluster
        vanished in that iteration.  0 runs to an exact fixed point or ``max_iter``.
    scale : None, "standard" or "minmax", default=None
        Feature scaling per view, estimated on the init sample and folded into the
        frequencies (no scaled copy of X is made).  None uses the features as given.
    n_init : int >= 1 or "auto", default="auto"
        Restarts of the whole power k-means on the init sample, each with its own
        frequencies, k-means start and annealing; "auto": 3 to 10 by the cost of a pass
        (see :class:`MultiViewRFFPowerKMeans`).  The number run is ``n_init_``.
    restart_selection : {"agreement", "consensus", "objective"}, default="agreement"
        How the restarts give the fit: the medoid of their partitions, the run continued
        from the consensus of their partitions, or the lowest final objective (see
        :class:`MultiViewRFFPowerKMeans`).  Not "consensus" as for the multi-view model:
        for this plain model it lowered ACC on hw2sources (0.897, std 0.025, vs 0.903,
        0.010 over seeds 0-9) and on mfeat pix standardised (0.791 vs 0.838, seeds 0-4),
        bench/RESULTS.md, "Consensus of the restarts".
    random_state : int, RandomState or None, default=None
        Seeds the init sample, the bandwidth sample and one seed per restart, from which a
        restart draws its frequencies and its k-means start (one integer seed per fit: None
        or a RandomState gives one draw, see ``mkdist._methods._base.resolve_seed``).
    chunk_size : int, default=8192
        Rows per block: NumPy input is walked in blocks of this many rows, and a Dask task
        walks its row chunk in blocks of this many rows (Dask input keeps its own chunks).

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
        Passes over all rows of the kept run: its passes over the sample when the sample
        is all rows (with "consensus": of the run continued from the consensus), else the
        passes that refined it over all rows.
    n_init_ : int
        Restarts run (``n_init``, or the number "auto" chose).
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
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
        ``restarts``: ``rows`` (of the sample they ran on), ``selection``, ``best`` (index
        of the kept restart; with "consensus" the one whose features the run continued in),
        ``start_n_init`` (k-means++ inits of each start), ``consensus_ari`` (each restart's
        adjusted Rand index with the consensus; None unless "consensus" ran) and
        ``consensus_final_objective``, and per restart ``seed``, ``final_objective``,
        ``agreement``, ``s0``, ``s_final``, ``n_iter``, ``converged``.

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

    *Scale.*  The restarts run in memory on the init sample (20,000 rows at most), so
    they cost the same at any N.  When N is larger, the kept run is refined by passes over
    all rows from its final centroids and s (a few passes: the annealing is done).  A pass
    is one map over the row chunks (features kept between passes within the memory budget,
    else recomputed from the stored frequencies) returning k x (2DL + ...) partial sums,
    added by a tree reduction.  Memory per task is O(chunk x 2DL).

    Examples
    --------
    >>> from mkdist import RFFKernelPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(2000, n_clusters=3, random_state=0)[:2]
    >>> labels = RFFKernelPowerKMeans(3, random_state=0).fit_predict(views["view0"])
    >>> labels.shape
    (2000,)
    """

    method: ClassVar[str] = "rff-power"
    state_format: ClassVar[str] = "mkdist.RFFKernelPowerKMeans/2"

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 annealing: float = 1.04, anneal_every: int = 2, max_iter: int = 300,
                 tol: float = 1e-6, scale=None, n_init="auto", restart_selection: str = "agreement",
                 random_state=None, chunk_size: int = 8192):
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
        self.restart_selection = restart_selection
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
        Stop when no centroid moves more than this (squared, view-weighted RFF distance), or
        when an iteration at an unchanged s lowers the objective by at most
        ``OBJECTIVE_RTOL`` (1e-5) of its value -- unless two centroids coincide or a cluster
        vanished in that iteration.  0 runs to an exact fixed point or ``max_iter``.
    scale : None, "standard" or "minmax", default=None
        Feature scaling per view, estimated on the init sample and folded into the
        frequencies (no scaled copy of X is made).  None uses the features as given.
    n_init : int >= 1 or "auto", default="auto"
        Restarts of the whole power k-means on the init sample (all rows when N <= 20,000),
        each with its own random frequencies, its own k-means start (best of up to
        ``START_KMEANS_N_INIT`` = 10 k-means++ runs on its features, fewer when a run is
        expensive: ``START_WORK``) and its own annealing; ``restart_selection`` makes one
        run of them and, when the sample is not all rows, it is refined by passes over all
        rows.  Restarts cost no pass over the data.  ``n_init=1`` is one run.  Restarts that
        shared the frequencies reached nearly the same partition, while other frequencies
        moved ACC by up to 0.2 (hw2sources), so each restart redraws them (bench/RESULTS.md,
        "Seeds").  "auto": 10 restarts, fewer (at least 3) when one pass over the sample
        costs more than ``RESTART_WORK`` / 10 products n k 2D L -- 6 on ccv (N = 6773,
        K = 20), 3 on leaves100 (K = 100), where 10 took 110 s and ~4 minutes; 10 on the
        other shared multi-view sets and on the 1M run.  The number run is ``n_init_``.
    restart_selection : {"consensus", "agreement", "objective"}, default="consensus"
        How the restarts make the fit.  "consensus": the consensus of their partitions of
        the sample (k-means on their stacked one-hot memberships, which maximises the
        summed category utility with them: points end up together as often as the restarts
        put them together), then the run continued from the means of the consensus clusters
        in the features of the restart that agrees best with it (its frequencies, view
        weights and final s).  "agreement": the restart whose partition agrees best with the
        others' (highest mean adjusted Rand index: the medoid of the partitions; between two
        restarts the lower objective).  "objective": the lowest final objective,
        sum_i min_j C_ij (+ lambda sum_l alpha_l log alpha_l for the multi-view model) --
        the function every run anneals towards (s -> -infinity).  The objective hardly
        tracks the partitions' accuracy across restarts (rank correlation 0.05 on
        hw2sources, negative on mfeat).  Over seeds 0-9 the consensus gave ACC 0.841 (std
        0.017) on hw2sources and 0.681 (0.010) on mfeat HW2, the agreement 0.856 (0.044)
        and 0.681 (0.009): a higher mean on hw2sources, but two seeds of ten kept a minority
        partition (bench/RESULTS.md, "Consensus of the restarts").
    random_state : int, RandomState or None, default=None
        Seeds the init sample, the bandwidth sample and one seed per restart, from which a
        restart draws its frequencies and its k-means start (one integer seed per fit: None
        or a RandomState gives one draw, see ``mkdist._methods._base.resolve_seed``).
    chunk_size : int, default=8192
        Rows per block: NumPy input is walked in blocks of this many rows, and a Dask task
        walks its row chunk in blocks of this many rows (Dask input keeps its own chunks).

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
        Passes over all rows of the kept run: its passes over the sample when the sample
        is all rows (with "consensus": of the run continued from the consensus), else the
        passes that refined it over all rows.
    n_init_ : int
        Restarts run (``n_init``, or the number "auto" chose).
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
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
        ``restarts``: ``rows`` (of the sample they ran on), ``selection``, ``best`` (index
        of the kept restart; with "consensus" the one whose features the run continued in),
        ``start_n_init`` (k-means++ inits of each start), ``consensus_ari`` (each restart's
        adjusted Rand index with the consensus; None unless "consensus" ran) and
        ``consensus_final_objective``, and per restart ``seed``, ``final_objective``,
        ``agreement``, ``s0``, ``s_final``, ``n_iter``, ``converged``.
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

    *Scale.*  The restarts run in memory on the init sample (20,000 rows at most), so
    they cost the same at any N.  When N is larger, the kept run is refined by passes over
    all rows from its final centroids and s (a few passes: the annealing is done).  A pass
    is one map over the row chunks (features kept between passes within the memory budget,
    else recomputed from the stored frequencies) returning k x (2DL + ...) partial sums,
    added by a tree reduction.  Memory per task is O(chunk x 2DL).

    Examples
    --------
    >>> from mkdist import MultiViewRFFPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(2000, n_clusters=3, random_state=0)[:2]
    >>> est = MultiViewRFFPowerKMeans(3, random_state=0).fit(views)
    >>> est.view_weights_.shape
    (2,)
    """

    method: ClassVar[str] = "mv-rff-power"
    state_format: ClassVar[str] = "mkdist.MultiViewRFFPowerKMeans/2"
    _possibilistic: ClassVar[bool] = True
    _param_constraints: ClassVar[dict[str, list]] = _params.MV_RFF_POWER_KMEANS

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 lam="auto", fuzzifier: float = 2.0, annealing: float = 1.04,
                 anneal_every: int = 2, max_iter: int = 300, tol: float = 1e-6, scale=None,
                 n_init="auto", restart_selection: str = "consensus", random_state=None,
                 chunk_size: int = 8192):
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
        self.restart_selection = restart_selection
        self.random_state = random_state
        self.chunk_size = chunk_size

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        out = super()._check_params_vs_input(n_samples, views)
        out["lam"] = LAM_PER_POINT * n_samples if isinstance(self.lam, str) else float(self.lam)
        out["fuzzifier"] = float(self.fuzzifier)
        return out


register(RFFKernelPowerKMeans)
register(MultiViewRFFPowerKMeans)
