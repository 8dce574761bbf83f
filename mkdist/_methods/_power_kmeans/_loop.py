"""The power k-means iterations (Algorithm 1, or Algorithm 2 with the typicality): :func:`fit_loop`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._core._blocks import RowBlocks
from ..._core._distances import sq_distances
from ._passes import DISTANCE_FLOOR, PassModel, assignment_costs, iteration_stats, stat_layout

__all__ = ["MERGE_TOL", "OBJECTIVE_RTOL", "S0_GAP_FACTOR", "auto_s0", "fit_loop", "log_gap"]

#: s_t = s_{t-1} (a pass that did not anneal) and f_s fell by at most this fraction of |f_s|:
#: the MM iterations at this s have converged, so the fit stops (unless centroids coincide
#: or a cluster vanished).  See ``fit_loop``.
OBJECTIVE_RTOL = 1e-5


#: s0="auto" is -S0_GAP_FACTOR / median_i(log C_i(2) - log C_i(1)), with C_i(1) <= C_i(2)
#: the two smallest assignment costs of point i at the k-means start (see Notes).
S0_GAP_FACTOR = 1.0

#: Clusters count as merged when two centroids are closer (squared, view-weighted) than
#: this fraction of the mean squared distance of a point to its nearest centroid.
MERGE_TOL = 1e-2


def log_gap(costs: np.ndarray) -> float:
    """median_i (log C_i(2) - log C_i(1)): how far, in log cost, the second-best cluster is."""
    if costs.shape[1] < 2:
        return float("nan")
    two = np.partition(np.maximum(costs, DISTANCE_FLOOR), 1, axis=1)[:, :2]
    return float(np.median(np.log(two[:, 1]) - np.log(two[:, 0])))


def auto_s0(costs: np.ndarray) -> float:
    """s0 = -S0_GAP_FACTOR / median log gap, within [-1000, -0.1] (see the class Notes)."""
    gap = log_gap(costs)
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
            model: PassModel) -> np.ndarray:
    """Centroids of ``vanished`` clusters moved onto the pool rows of largest cost (one each)."""
    costs = assignment_costs(pool, model).A.min(axis=1)
    order = np.argsort(costs)[::-1]
    out = centroids.copy()
    for j, i in zip(np.flatnonzero(vanished), order):
        for v, phi in enumerate(pool):
            out[v, j] = phi[i]
    return out


def fit_loop(rows: RowBlocks, model: PassModel, *, s0: float, annealing: float, anneal_every: int,
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
    layout = stat_layout(L, k, F)
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
        stats = rows.reduce(iteration_stats, model, width=layout["width"], check_finite=it == 0,
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
