"""Principal eigenvalue proportion (PEP) of a kernel matrix or of a low-rank factor.

Definition 2 of the GMLKM seed (after Liu et al. 2017): for a kernel matrix K with
eigenvalues lambda_1 >= lambda_2 >= ... >= 0,

    beta(K, t) = (lambda_1 + ... + lambda_t) / tr(K),

the share of the spectrum in its top t eigenvalues.  A kernel with cluster structure
concentrates its spectrum (beta(K, k) near 1 for k clusters); a kernel without any, such
as the identity, spreads it evenly (beta(I_n, t) = t / n).  The 1/n of the seed's
normalised kernel cancels in the ratio.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputValidationError
from ._linalg import top_eigenvalue_sum
from ._validation import is_dask_array

__all__ = ["principal_eigenvalue_proportion"]

#: Excess-PEP share of the best kernel's below which a base kernel counts as degenerate
#: (near the identity): LateFusionClustering's default ``min_pep_ratio`` and the
#: warning threshold of MultipleKernelClustering.
DEGENERATE_PEP_RATIO = 0.1


def excess_pep(pep, chance: float):
    """(beta - t/n) / (1 - t/n): 0 for a structureless (identity-like) kernel, 1 for rank t."""
    return (np.asarray(pep, dtype=np.float64) - chance) / max(1.0 - chance, np.finfo(np.float64).eps)


def principal_eigenvalue_proportion(K: Any, t: int, *, factor: bool | None = None) -> float:
    """Share of a kernel's spectrum in its top ``t`` eigenvalues (PEP, Definition 2).

    Parameters
    ----------
    K : array-like of shape (n, n) or (n, r)
        Either a dense symmetric positive semi-definite kernel matrix, or a factor H
        of the kernel K = H H^T (for instance a spectral embedding, or the filtered
        late-fusion embedding of :class:`mkdist.LateFusionClustering`).
    t : int
        Number of leading eigenvalues, 1 <= t <= n.
    factor : bool or None, default=None
        How to read ``K``.  ``None``: a non-square array is a factor, a square one a
        kernel matrix.  ``True``: ``K`` is a factor even if square (K = H H^T is never
        formed).  ``False``: ``K`` is a kernel matrix and must be square and symmetric.

    Returns
    -------
    beta : float in [t/n, 1] for a PSD kernel
        (lambda_1 + ... + lambda_t) / tr(K).

    Raises
    ------
    InputValidationError
        If ``t`` is not an integer in [1, n], the array is not 2-D, holds NaN/inf, a
        "kernel" is not square or not symmetric, or the trace is not positive.

    Notes
    -----
    * Kernel matrix: the top-t eigenvalues come from a partial symmetric eigensolver
      (``mkdist._core._linalg.top_eigenpairs``: Lanczos, or LAPACK's subset driver for tiny
      matrices), the trace from the diagonal.
    * Factor H (n x r): the non-zero eigenvalues of H H^T are the squared singular values
      of H, and tr(H H^T) = ||H||_F^2, so beta = (s_1^2 + ... + s_t^2) / sum_i s_i^2,
      computed from the small side in O(n r min(n, r)) without forming the n x n kernel.
      For t >= rank the result is 1.

    The seed uses t = k (the number of clusters) as a clusterability diagnostic and
    argues that low-pass graph filtering raises it.

    Examples
    --------
    >>> import numpy as np
    >>> principal_eigenvalue_proportion(np.eye(4), 1)
    0.25
    >>> H = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])   # K = H H^T, eigenvalues 2, 1, 0
    >>> round(principal_eigenvalue_proportion(H, 1), 4)
    0.6667
    """
    if is_dask_array(K):
        raise InputValidationError(
            "principal_eigenvalue_proportion takes an in-memory array; for a Dask factor H "
            "compute the small Gram matrix H.T @ H first and pass its square root, or call .compute()."
        )
    A = np.asarray(K)
    if A.ndim != 2:
        raise InputValidationError(f"K must be 2-D (a kernel matrix or a factor), got shape {A.shape}.")
    if not np.issubdtype(A.dtype, np.number) or np.issubdtype(A.dtype, np.complexfloating):
        raise InputValidationError(f"K must be real-valued, got dtype {A.dtype}.")
    A = A.astype(np.float64, copy=False)
    if not np.isfinite(A).all():
        raise InputValidationError("K contains NaN or infinity.")
    if factor is None:
        factor = A.shape[0] != A.shape[1]
    n = A.shape[0]
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
        raise InputValidationError(f"`t` must be an integer, got {t!r}.")
    t = int(t)
    if not 1 <= t <= n:
        raise InputValidationError(f"`t`={t} must be in [1, n={n}].")
    if factor:
        return _pep_factor(A, t)
    if A.shape[0] != A.shape[1]:
        raise InputValidationError(
            f"K has shape {A.shape}: a kernel matrix must be square; pass factor=True if it is a "
            "factor H of K = H H^T."
        )
    scale = max(float(np.abs(A).max()), np.finfo(np.float64).tiny)
    if not np.allclose(A, A.T, rtol=1e-8, atol=1e-10 * scale):
        raise InputValidationError(
            "K is square but not symmetric: a kernel matrix must be symmetric; pass factor=True "
            "if it is a square factor H of K = H H^T."
        )
    return _pep_kernel(A, t)


def _pep_factor(H: np.ndarray, t: int) -> float:
    """PEP of H H^T from the smaller of H H^T and H^T H (they share their non-zero
    eigenvalues): its top t eigenvalues, not all singular values of H.  H finite, float64,
    2-D.  A full SVD of a 1600 x 3570 factor took ~2 s, most of the power k-means
    diagnostics at K = 100 (leaves100, bench/RESULTS.md)."""
    G = H.T @ H if H.shape[1] < H.shape[0] else H @ H.T
    total = float(np.trace(G))
    if not total > 0:
        raise InputValidationError("the factor H is zero: tr(H H^T) = 0, so the PEP is undefined.")
    return float(min(top_eigenvalue_sum(G, t) / total, 1.0))


def _pep_kernel(K: np.ndarray, t: int) -> float:
    """PEP of a dense symmetric kernel; K finite, float64, square, symmetric."""
    trace = float(np.trace(K))
    if not trace > 0:
        raise InputValidationError(
            f"tr(K) = {trace:.3g} is not positive: the PEP is defined for positive semi-definite kernels."
        )
    return min(top_eigenvalue_sum(K, t) / trace, 1.0)
