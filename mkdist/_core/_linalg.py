"""Small dense algebra on one node: partial symmetric eigensolvers and the BLAS thread budget.

The landmark fits (SimpleMKKM's repeated top-K eigenproblems, late fusion's base partitions,
PEP) need the top eigenpairs of n x n matrices with n in the hundreds to thousands and K
small.  Measured on this machine (one BLAS thread, centred Gaussian kernel, K = 11):

    n      full eigh   LAPACK subset (syevr)   Lanczos (ARPACK eigsh, tol 1e-10)
    300    0.036 s     0.014 s                 0.003 s
    1000   0.49 s      0.18 s                  0.03 s
    2000   3.4 s       1.6 s                   0.26 s

with eigenvalues equal to 1e-15 relative, so Lanczos is used whenever it applies; LAPACK's
subset driver for tiny matrices or many eigenpairs.  A fit is many such small calls, on
which OpenBLAS's second thread costs more than it gives: the W1 landmark fit (6 kernels,
K = 10) took 0.21 / 1.3 / 19-22 s on one thread against 0.38-0.55 / 3.3-3.9 / 18-22 s on
two at n = 300 / 1000 / 3000 on an idle machine, and two threads slow ~10x more when another
process keeps the second core busy (a 1000 x 1000 eigh: 0.19 s on one thread, 2.5 s on two
under load).  So a fit runs on one BLAS thread (:func:`blas_threads`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import scipy.linalg
import scipy.sparse.linalg

__all__ = ["top_eigenpairs", "top_eigenvalue_sum", "unit_rows", "largest_entry_signs", "blas_threads"]

#: Below this size LAPACK's subset driver is as fast as Lanczos and has no start vector.
LANCZOS_MIN_N = 64
#: Lanczos needs k well below n (ARPACK's subspace is max(2k + 1, 20) vectors).
LANCZOS_MAX_K_FRACTION = 0.25


def _start_vector(n: int) -> np.ndarray:
    # Fixed and random-looking: deterministic results, and never the constant vector, which
    # a centred kernel maps to 0 (Lanczos would break down at once).
    return np.random.default_rng(0).standard_normal(n)


def top_eigenpairs(K: np.ndarray, k: int, *, vectors: bool = True):
    """Top-k eigenpairs of a symmetric matrix, eigenvalues decreasing.

    Parameters
    ----------
    K : ndarray of shape (n, n), symmetric
    k : int
    vectors : bool, default=True

    Returns
    -------
    values : ndarray of shape (k,)
    vectors : ndarray of shape (n, k), C-contiguous (only with ``vectors=True``)

    Notes
    -----
    Lanczos (ARPACK, ``which="LA"``, tol 1e-10, fixed start vector) when n >= 64 and
    k <= n / 4; otherwise, or when ARPACK does not converge, LAPACK ``syevr`` through
    ``eigh(subset_by_index=...)``, whose count is checked because it can return fewer
    pairs on ties (then the full solver, as when syevr fails outright on a degenerate spectrum).
    """
    n = K.shape[0]
    k = min(k, n)
    if n >= LANCZOS_MIN_N and k <= LANCZOS_MAX_K_FRACTION * n:
        try:
            out = scipy.sparse.linalg.eigsh(K, k=k, which="LA", tol=1e-10, v0=_start_vector(n),
                                            return_eigenvectors=vectors)
            values = out[0] if vectors else out
            if values.shape[0] == k and np.isfinite(values).all():
                order = np.argsort(values)[::-1]
                if not vectors:
                    return values[order]
                return values[order], np.ascontiguousarray(out[1][:, order])
        except scipy.sparse.linalg.ArpackNoConvergence:
            pass
    if k >= n:
        res = scipy.linalg.eigh(K, eigvals_only=not vectors, check_finite=False)
    else:
        try:
            res = scipy.linalg.eigh(K, eigvals_only=not vectors, subset_by_index=[n - k, n - 1],
                                    check_finite=False)
            count = (res if not vectors else res[0]).shape[0]
        except np.linalg.LinAlgError:
            # syevr stops with "Internal Error" on some massively degenerate spectra (a centred
            # kernel of identical off-diagonal entries: n - 1 equal eigenvalues); the full
            # divide-and-conquer solver handles them.
            count = -1
        if count != k:
            res = scipy.linalg.eigh(K, eigvals_only=not vectors, check_finite=False)
    if not vectors:
        return np.asarray(res)[::-1][:k]
    values, vecs = res
    return values[::-1][:k], np.ascontiguousarray(vecs[:, ::-1][:, :k])


def top_eigenvalue_sum(K: np.ndarray, t: int) -> float:
    """Sum of the t largest eigenvalues of a symmetric matrix."""
    if t >= K.shape[0]:
        return float(np.trace(K))
    return float(np.sum(top_eigenpairs(K, t, vectors=False)))


def largest_entry_signs(V: np.ndarray) -> np.ndarray:
    """The sign of the largest-magnitude entry of every column of V (+1 for a zero column).

    Eigenvectors and singular vectors come with arbitrary signs; multiplying columns by these
    signs makes them a function of the data (NumPy and Dask fits, and repeated fits, agree).

    Parameters
    ----------
    V : ndarray of shape (n, d)

    Returns
    -------
    ndarray of shape (d,), V's dtype, entries +1 or -1
    """
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(V.shape[1])])
    signs[signs == 0] = 1.0
    return signs


def unit_rows(Z: np.ndarray) -> np.ndarray:
    """Rows of Z scaled to unit Euclidean length, in Z's precision; a zero row stays zero.

    The row normalisation of spectral clustering (Ng, Jordan & Weiss) that MKC and late fusion
    apply to their embeddings.  The floor is the smallest normal number of Z's own dtype: the
    float64 floor rounded to 0 in float32 and turned a zero float32 row into NaN.

    Parameters
    ----------
    Z : ndarray of shape (n, d), floating

    Returns
    -------
    ndarray of shape (n, d), Z's dtype
    """
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.maximum(norms, np.finfo(Z.dtype).tiny)


@contextlib.contextmanager
def blas_threads(n: int = 1) -> Iterator[int]:
    """Limit BLAS to ``n`` threads for the block (default one: see the module docstring); yields the limit."""
    from threadpoolctl import threadpool_limits

    limit = max(1, int(n))
    with threadpool_limits(limits=limit, user_api="blas"):
        yield limit
