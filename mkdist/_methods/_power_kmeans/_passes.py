"""One pass of power k-means over the rows: RFF feature maps, assignment costs, power-mean weights.

Every iteration is one pass over the rows through the row engine (:class:`RowBlocks`): the
row function (:func:`iteration_stats`) evaluates the power-mean weights of a row block and
returns its k x (L 2D + ...) partial sums.  A row block's random Fourier features are kept
between passes when they fit a memory budget (:func:`feature_rows`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._core._blocks import RowBlocks
from ..._core._cluster import active_client, persist_and_wait
from ..._core._distances import sq_distances

__all__ = ["FEATURE_DTYPE", "Costs", "FeatureMap", "PassModel", "assignment_costs", "feature_map_of", "feature_rows",
           "iteration_stats", "power_mean_weights", "row_costs", "row_labels", "sq_feature_distances", "stat_layout",
           "view_features"]

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


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureMap:
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

    def select(self, view: int) -> FeatureMap:
        """The feature map of view ``view`` alone."""
        return FeatureMap((self.projections[view],), (self.offsets[view],), self.dtype)

    def width(self, view: int) -> int:
        """2D, the number of features of view ``view``."""
        return 2 * self.projections[view].shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class PassModel:
    """What a row block needs for one iteration or for prediction; ONE Dask graph key.

    ``features`` None means the rows are the RFF features already (the NumPy feature
    cache).  ``typicality`` is None for plain power k-means (u = 1, so d~ = d).
    """

    features: FeatureMap | None
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


def sq_feature_distances(phis: Sequence[np.ndarray], centroids: np.ndarray, dtype=None) -> list[np.ndarray]:
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
class Costs:
    """Assignment costs of a row block and their parts (see ``assignment_costs``)."""

    costs: np.ndarray              # (b, k), C_ij = sum_l alpha_l d~_ij,l
    d: list[np.ndarray]            # L x (b, k), d_ij,l
    A: np.ndarray                  # (b, k), sum_l alpha_l d_ij,l
    u_m: np.ndarray | None = None  # (b, k), u_ij^m (possibilistic model only)
    v_m: np.ndarray | None = None  # (b, k), (1 - u_ij)^m


def assignment_costs(phis: Sequence[np.ndarray], model: PassModel) -> Costs:
    """Assignment costs C_ij = sum_l alpha_l d~_ij,l and their parts.

    For the possibilistic model u_ij is eq. 26 at the current centroids and d~ is eq. 23,
    d~_ij,l = u^m d_ij,l + (1 - u)^m eta_jl, so C_ij = u^m A_ij + (1 - u)^m B_j with
    B = eta alpha: d~ itself (b x k x L) is never formed.  Else d~ = d and C = A.
    """
    d = sq_feature_distances(phis, model.centroids, model.distance_dtype)
    A = model.view_weights[0] * d[0] if d else np.zeros((0, model.centroids.shape[1]))
    for a, dl in zip(model.view_weights[1:], d[1:]):
        A += a * dl
    if model.typicality is None:
        return Costs(A, d, A)
    Bc = model.typicality @ model.view_weights                          # (k,)
    B = np.maximum(Bc, np.finfo(np.float64).tiny)
    m = model.fuzzifier
    u = 1.0 / (1.0 + (A / B[None, :]) ** (1.0 / (m - 1.0)))
    u_m = u**m
    v_m = (1.0 - u) ** m
    return Costs(u_m * A + v_m * Bc[None, :], d, A, u_m, v_m)


def power_mean_weights(costs: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
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


def stat_layout(L: int, k: int, F: int) -> dict[str, slice]:
    """Where each partial sum sits in the flat vector a block returns (F = 2D)."""
    sizes = {"sums": L * k * F, "mass": k, "counts": k, "view_cost": L, "objective": 1,
             "inertia": 1}
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = slice(start, start + size)
        start += size
    out["width"] = start
    return out


def iteration_stats(blocks: list, model: PassModel) -> np.ndarray:
    """Partial sums of one iteration over a row block, flat (width,), see ``stat_layout``.

    sums[l, j] = sum_i g_ij phi_l(x_i) and mass[j] = sum_i g_ij with g = w (plain) or
    g = w u^m (eq. 28); counts[j] = #points whose smallest cost is j; view_cost[l] =
    sum_ij w_ij d~_ij,l = sum_ij g_ij d_ij,l + sum_j (sum_i w_ij (1 - u_ij)^m) eta_jl
    (eq. 31); objective = sum_i M_s(C_i); inertia = sum_i min_j A_ij.
    """
    phis = model.phis(blocks)
    L, k, F = model.centroids.shape
    layout = stat_layout(L, k, F)
    out = np.zeros(layout["width"])
    c = assignment_costs(phis, model)
    w, log_mean = power_mean_weights(c.costs, model.s)
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


def row_costs(blocks: list, model: PassModel) -> np.ndarray:
    return assignment_costs(model.phis(blocks), model).costs


def row_labels(blocks: list, model: PassModel) -> np.ndarray:
    return np.argmin(assignment_costs(model.phis(blocks), model).costs, axis=1).astype(np.int64)


def _row_features(blocks: list, features: FeatureMap) -> np.ndarray:
    """The features of the one view a ``RowBlocks`` holds (``features`` of that view)."""
    return features(blocks)[0]


def feature_map_of(frequencies: Sequence[np.ndarray], centers: Sequence[np.ndarray],
                    scales: Sequence[np.ndarray]) -> FeatureMap:
    """The passes' feature map of frequencies W_l (d_l, D) in the scaled coordinates
    x -> (x - center) / scale, the scaling folded into the projections."""
    projections, offsets = [], []
    for W, c, sc in zip(frequencies, centers, scales):
        P = W / sc[:, None]
        projections.append(np.ascontiguousarray(P))
        offsets.append(-(c @ P))
    return FeatureMap(tuple(projections), tuple(offsets), FEATURE_DTYPE)


def view_features(rows: RowBlocks, features: FeatureMap) -> list:
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


def feature_rows(rows: RowBlocks, features: FeatureMap) -> RowBlocks | None:
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
        return RowBlocks(dict(zip(rows.names, view_features(rows, features))), block_rows=rows.block_rows)
    import dask.array as da

    chunks = rows.row_chunks
    n_kept = int(np.searchsorted(np.cumsum(chunks) * row_bytes, _feature_budget(active_client()), side="right"))
    if n_kept == 0:
        return None
    phis = view_features(rows, features)
    stop = int(sum(chunks[:n_kept]))
    kept = persist_and_wait([phi[:stop] for phi in phis])
    if n_kept < len(chunks):
        kept = [da.concatenate([k, phi[stop:]]) for k, phi in zip(kept, phis)]
    return RowBlocks(dict(zip(rows.names, kept)), block_rows=rows.block_rows)
