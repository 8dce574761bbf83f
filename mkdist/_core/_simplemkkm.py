"""SimpleMKKM (Liu et al., TPAMI 2022) on a precomputed stack of base kernels.

    min_{gamma in simplex} J(gamma),  J(gamma) = max_{H'H = I_K} Tr(K_gamma H H'),
    K_gamma = sum_p gamma_p^2 K_p.

J is the sum of the top-K eigenvalues of K_gamma and is convex in gamma
(Theorem 2), so reduced-gradient descent reaches the global minimum from any start.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ..errors import InputValidationError
from ._linalg import top_eigenpairs

__all__ = ["SimpleMKKMResult", "simple_mkkm", "average_kernel_kmeans", "top_eigenpairs", "combine_kernels"]


@dataclasses.dataclass
class SimpleMKKMResult:
    """What :func:`simple_mkkm` learns.

    Attributes
    ----------
    kernel_weights : ndarray of shape (m,)
        gamma on the simplex; the combined kernel is sum_p gamma_p^2 K_p.
    H : ndarray of shape (n, K)
        Top-K eigenvectors of K_gamma, by decreasing eigenvalue.
    eigenvalues : ndarray of shape (K + 1,)
        Top K + 1 eigenvalues of K_gamma, decreasing (the extra one gives the K-th eigen-gap).
    objective_history : ndarray of shape (n_iter + 1,)
        J(gamma) at the start and after every accepted step; non-increasing.
    n_iter : int
        Accepted descent steps.
    converged : bool
        Stopped on the tolerance (or on a zero reduced gradient) rather than ``max_iter``.
    """

    kernel_weights: np.ndarray
    H: np.ndarray
    eigenvalues: np.ndarray
    objective_history: np.ndarray
    n_iter: int
    converged: bool


def combine_kernels(kernels: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """K_gamma = sum_p gamma_p^2 K_p, shape (n, n)."""
    return np.tensordot(gamma**2, kernels, axes=1)


def _objective(kernels, gamma, n_clusters):
    values, H = top_eigenpairs(combine_kernels(kernels, gamma), n_clusters)
    return float(values.sum()), H


def _check_stack(kernels: np.ndarray, n_clusters: int) -> np.ndarray:
    kernels = np.asarray(kernels)
    if kernels.ndim != 3 or kernels.shape[1] != kernels.shape[2]:
        raise InputValidationError(f"`kernels` must have shape (m, n, n), got {kernels.shape}.")
    if not np.issubdtype(kernels.dtype, np.floating):
        kernels = kernels.astype(np.float64)
    if not np.isfinite(kernels).all():
        raise InputValidationError("`kernels` contains NaN or infinity.")
    n = kernels.shape[1]
    if not 2 <= n_clusters <= n:
        raise InputValidationError(f"n_clusters={n_clusters} must be in [2, n={n}].")
    return kernels


def simple_mkkm(kernels: np.ndarray, n_clusters: int, *, max_iter: int = 200, tol: float = 1e-4,
                init_weights: np.ndarray | None = None, armijo: float = 1e-4,
                max_backtracks: int = 30) -> SimpleMKKMResult:
    """Learn kernel weights and the spectral embedding with SimpleMKKM.

    Parameters
    ----------
    kernels : ndarray of shape (m, n, n)
        Preprocessed, symmetric base kernels on the same n points.
    n_clusters : int
        K, the number of clusters (and of eigenvectors).
    max_iter : int, default=200
        Maximum number of descent steps.
    tol : float, default=1e-4
        Stop when max_p |gamma_new - gamma_old| <= tol (the paper's rule).
    init_weights : ndarray of shape (m,), default=None
        Starting gamma (projected to the simplex); uniform 1/m by default.
    armijo : float, default=1e-4
        Sufficient-decrease constant of the backtracking line search.
    max_backtracks : int, default=30
        Halvings of the step before declaring that no step decreases J (converged).

    Returns
    -------
    SimpleMKKMResult

    Notes
    -----
    Gradient (Theorem 1): dJ/dgamma_p = 2 gamma_p Tr(H' K_p H).  With u = argmax gamma the
    reduced gradient is g_p = dJ_p - dJ_u (p != u), g_u = sum_{p != u} (dJ_u - dJ_p) (eq. 9-10)
    and the descent direction (eq. 11) d_p = -g_p, except d_p = 0 where gamma_p = 0 and
    g_p > 0.  After that zeroing d_u is recomputed as -sum_{p != u} d_p so that gamma stays on
    the simplex (the paper's d_u = -g_u equals it when nothing is zeroed).
    Like the authors' code the gradient is scaled to unit 2-norm, so the step is measured in
    units of gamma.  Step: the largest feasible step t_max = min_{d_p < 0} -gamma_p / d_p, then
    Armijo backtracking until J(gamma + t d) <= J + c t <grad, d>, starting from t_max (or twice
    the previous step if smaller) and shrinking by safeguarded quadratic interpolation.  A step
    is accepted only if it lowers J, which makes the objective history monotone.
    """
    kernels = _check_stack(kernels, n_clusters)
    m = kernels.shape[0]
    if init_weights is None:
        gamma = np.full(m, 1.0 / m)
    else:
        gamma = np.clip(np.asarray(init_weights, dtype=np.float64).ravel(), 0.0, None)
        if gamma.shape != (m,) or gamma.sum() <= 0:
            raise InputValidationError(f"init_weights must be {m} non-negative numbers with a positive sum.")
        gamma = gamma / gamma.sum()

    J, H = _objective(kernels, gamma, n_clusters)
    history = [J]
    converged = m == 1
    n_iter = 0
    last_step: float | None = None
    while not converged and n_iter < max_iter:
        # tr(H' K_p H) for every p in one pass over the stack.
        traces = np.einsum("pij,jk,ik->p", kernels, H, H, optimize=True)
        grad = 2.0 * gamma * traces
        norm = np.linalg.norm(grad)
        if norm == 0:
            converged = True
            break
        grad = grad / norm
        u = int(np.argmax(gamma))
        reduced = grad - grad[u]
        reduced[u] = np.sum(grad[u] - np.delete(grad, u))
        d = -reduced
        d[(gamma <= 0) & (reduced > 0)] = 0.0
        d[u] = 0.0
        d[u] = -d.sum()
        if np.max(np.abs(d)) <= 1e-12:
            converged = True
            break
        slope = float(grad @ d) * norm  # directional derivative dJ/dt along d: negative
        neg = d < 0
        t_max = float(np.min(-gamma[neg] / d[neg]))
        # First trial: the largest feasible step, or twice the last accepted one when that is
        # smaller (steps shrink near the optimum; starting at t_max there wastes eigensolves).
        t = t_max if last_step is None else min(t_max, 2.0 * last_step)
        accepted = False
        for _ in range(max_backtracks):
            candidate = np.clip(gamma + t * d, 0.0, None)
            candidate /= candidate.sum()
            J_new, H_new = _objective(kernels, candidate, n_clusters)
            if J_new <= J + armijo * t * slope and J_new < J:
                accepted = True
                break
            # Safeguarded quadratic interpolation (J is convex along the line): the minimiser
            # of the parabola through J, its slope and J(t), kept within [0.1 t, 0.5 t].
            curvature = J_new - J - slope * t
            t_quad = -slope * t * t / (2.0 * curvature) if curvature > 0 else 0.5 * t
            t = min(max(t_quad, 0.1 * t), 0.5 * t)
        if not accepted:
            converged = True  # no step lowers J: a (global, by convexity) minimum up to precision
            break
        last_step = t
        step = np.max(np.abs(candidate - gamma))
        gamma, J, H = candidate, J_new, H_new
        history.append(J)
        n_iter += 1
        if step <= tol:
            converged = True
    if not converged:
        warnings.warn(f"SimpleMKKM did not converge in max_iter={max_iter} steps.", RuntimeWarning, stacklevel=2)
    values, H = top_eigenpairs(combine_kernels(kernels, gamma), n_clusters + 1) if n_clusters < kernels.shape[1] \
        else top_eigenpairs(combine_kernels(kernels, gamma), n_clusters)
    return SimpleMKKMResult(gamma, H[:, :n_clusters].copy(), values, np.asarray(history), n_iter, converged)


def average_kernel_kmeans(kernels: np.ndarray, n_clusters: int) -> SimpleMKKMResult:
    """The uniform-weight baseline: gamma = 1/m, H = top-K eigenvectors of the average kernel.

    Same return type as :func:`simple_mkkm` (``n_iter=0``).
    """
    kernels = _check_stack(kernels, n_clusters)
    m, n, _ = kernels.shape
    gamma = np.full(m, 1.0 / m)
    k = n_clusters + 1 if n_clusters < n else n_clusters
    values, H = top_eigenpairs(combine_kernels(kernels, gamma), k)
    return SimpleMKKMResult(gamma, H[:, :n_clusters].copy(), values, np.asarray([values[:n_clusters].sum()]), 0, True)
