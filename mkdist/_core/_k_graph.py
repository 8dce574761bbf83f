"""The landmark graph the K rule reads (:mod:`._nclusters`): the views' landmark kernels
averaged, kNN graphs over the kernel distance, their spectra (top eigenvalues), spectral partitions
and their modularity curve, and the largest relative eigengap.  Computations only: the rule's
constants and its decision stay in :mod:`._nclusters`."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph
import scipy.sparse.linalg

from ..errors import InputValidationError

#: Below this many landmarks (or above this share of eigenvalues) dense LAPACK is used.
_LANCZOS_MIN_N = 100
_LANCZOS_MAX_FRACTION = 0.25


def _combined_kernel(kernel: Any, kernel_weights: Any) -> np.ndarray:
    """The (n, n) float64 kernel from an (n, n) kernel or an (m, n, n) stack and weights gamma."""
    K = np.asarray(kernel)
    if not np.issubdtype(K.dtype, np.number) or np.issubdtype(K.dtype, np.complexfloating):
        raise InputValidationError(f"`kernel` must be real-valued, got dtype {K.dtype}.")
    if K.ndim == 2:
        if kernel_weights is not None:
            raise InputValidationError("`kernel_weights` apply to a stack of shape (m, n, n); got one (n, n) kernel.")
        K = K[None]
    if K.ndim != 3 or K.shape[1] != K.shape[2]:
        raise InputValidationError(
            f"`kernel` must have shape (n, n) or (m, n, n) (a stack of base kernels), got {K.shape}.")
    m = K.shape[0]
    if kernel_weights is None:
        w2 = np.full(m, 1.0 / m)
    else:
        gamma = np.asarray(kernel_weights, dtype=np.float64).ravel()
        if gamma.shape != (m,) or not np.isfinite(gamma).all() or (gamma < 0).any() or not gamma.sum() > 0:
            raise InputValidationError(
                f"`kernel_weights` must be {m} finite non-negative numbers with a positive sum "
                f"(gamma; the kernel is sum_p gamma_p^2 K_p), got {kernel_weights!r}.")
        w2 = gamma**2 / np.sum(gamma**2)
    K = np.tensordot(w2, K.astype(np.float64, copy=False), axes=1)
    if not np.isfinite(K).all():
        raise InputValidationError("`kernel` contains NaN or infinity.")
    scale = max(float(np.abs(K).max()), np.finfo(np.float64).tiny)
    if not np.allclose(K, K.T, rtol=1e-6, atol=1e-8 * scale):
        raise InputValidationError("`kernel` is not symmetric: pass a kernel matrix of the landmarks.")
    return K


def average_landmark_kernel(landmarks: Any, kernels: Any, center: bool, normalize: str | None) -> np.ndarray:
    """The uniform combination (1/m) sum_p K_p of the preprocessed base kernels on the landmarks, (n, n).

    The kernel the K choice reads for methods that never hold the (m, n, n) stack (late
    fusion, a fitted model rebuilt from its state): the kernels are formed and preprocessed
    one at a time (centred and normalised on the landmarks, exactly as the fits do), so memory
    is two n x n arrays.

    Parameters
    ----------
    landmarks : dict of str to ndarray of shape (n, d_v)
        The landmark rows of every view, scaled as the kernels expect them.
    kernels : list of FittedKernel, length m
    center, normalize
        The preprocessing of the fit (``mkdist._core._kernels.fit_preprocessing``).
    """
    from ._kernels import fit_preprocessing, kernel_blocks

    lv = {k: np.asarray(v, dtype=np.float64) for k, v in landmarks.items()}
    n = next(iter(lv.values())).shape[0]
    out = np.zeros((n, n))
    for _, block in kernel_blocks(lv, lv, list(kernels), reuse=True):
        out += fit_preprocessing(block[None].copy(), center, normalize)[0][0]
    return out / max(len(kernels), 1)


def _kernel_sq_distances(K: np.ndarray) -> np.ndarray:
    """d(i, j)^2 = K_ii + K_jj - 2 K_ij, +inf on the diagonal (no self-neighbour).

    Values within rounding of 0 (1e-12 of the largest |K_ii|, e.g. identical rows of a
    centred kernel) are set to exactly 0: the graph treats them as the same point.
    """
    d = np.diag(K)
    D2 = d[:, None] + d[None, :] - 2.0 * K
    D2[D2 <= 1e-12 * max(float(np.abs(d).max()), np.finfo(np.float64).tiny)] = 0.0
    np.fill_diagonal(D2, np.inf)
    return D2


def _knn_graph(D2: np.ndarray, n_neighbors: int) -> scipy.sparse.csr_matrix:
    """Symmetric binary kNN graph: i ~ j when j is among i's ``n_neighbors`` nearest or i among j's.

    Identical landmarks (distance 0; duplicated rows are common in sparse or discrete data)
    are joined to each other and do not count as neighbours: with three copies of every row
    and 5 neighbours, the copies of the two nearest points filled every list and split the
    clusters into islands (46 "clusters" for 4, tests/test_nclusters.py).  The diagonal of
    D2 is +inf.
    """
    n = D2.shape[0]
    point = _distinct_points(D2)
    n_distinct = int(point.max()) + 1
    if n_distinct == n:
        return _knn_adjacency(D2, n_neighbors)
    # Neighbours are searched among distinct points (else the copies of the nearest point fill
    # the list); every copy then gets its point's edges, and the copies of a point are joined.
    if n_distinct == 1:
        return scipy.sparse.csr_matrix(np.ones((n, n)) - np.eye(n))
    first = np.unique(point, return_index=True)[1]
    G = _knn_adjacency(D2[np.ix_(first, first)], n_neighbors) + scipy.sparse.eye(n_distinct)
    P = scipy.sparse.csr_matrix((np.ones(n), (np.arange(n), point)), shape=(n, n_distinct))
    A = (P @ G @ P.T).tocsr()
    A.setdiag(0.0)
    A.eliminate_zeros()
    A.data[:] = 1.0
    return A


def _distinct_points(D2: np.ndarray) -> np.ndarray:
    """Label of every landmark's distinct position (landmarks at distance 0 share one), 0..p-1."""
    n = D2.shape[0]
    rows, cols = np.nonzero(D2 == 0.0)
    if rows.size == 0:
        return np.arange(n)
    same = scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    return scipy.sparse.csgraph.connected_components(same, directed=False)[1]


def _knn_adjacency(D2: np.ndarray, n_neighbors: int) -> scipy.sparse.csr_matrix:
    """Symmetric binary kNN adjacency of points at distinct positions (diagonal of D2 +inf)."""
    n = D2.shape[0]
    k = min(n_neighbors, n - 1)
    # argpartition picks exactly k neighbours even when distances tie.
    nb = np.argpartition(D2, k - 1, axis=1)[:, :k]
    A = scipy.sparse.csr_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), nb.ravel())), shape=(n, n))
    return A.maximum(A.T).tocsr()


def _top_eigenvalues(S: scipy.sparse.csr_matrix, n_values: int) -> np.ndarray:
    """Top ``n_values`` eigenvalues (any order) of the normalised affinity of a connected graph.

    Lanczos on the sparse matrix when it is large enough, else (or when ARPACK fails) dense
    LAPACK's subset driver.  The graph being connected, its top eigenvalue 1 is simple, and
    Lanczos does not have to find copies of a repeated eigenvalue.
    """
    n = S.shape[0]
    n_values = min(n_values, n)
    if n >= _LANCZOS_MIN_N and n_values <= _LANCZOS_MAX_FRACTION * n:
        try:
            mu = scipy.sparse.linalg.eigsh(S, k=n_values, which="LA", tol=1e-10, return_eigenvectors=False,
                                           v0=np.random.default_rng(0).standard_normal(n))
            if np.isfinite(mu).all() and np.sum(mu > 1.0 - 1e-8) <= 1:
                return mu
        except scipy.sparse.linalg.ArpackError:
            pass
    return scipy.linalg.eigh(S.toarray(), eigvals_only=True, subset_by_index=[n - n_values, n - 1],
                             check_finite=False)


def _knn_spectrum(D2: np.ndarray, n_neighbors: int, n_values: int) -> np.ndarray:
    """Top ``n_values`` eigenvalues of D^-1/2 A D^-1/2, A the kNN graph of D2, decreasing.

    The graph is split into its connected components (an exact graph search): the spectrum
    is the union of theirs, every component contributing one eigenvalue 1.  Well separated
    groups are such components, and Lanczos on the whole graph would have to find every copy
    of the repeated eigenvalue 1, which it can miss.  Per component: Lanczos on the sparse
    matrix (about 0.03 s at n = 1000, 3x faster than dense LAPACK, 10x at n = 2000), dense
    LAPACK on small ones.
    """
    return _graph_spectrum(_knn_graph(D2, n_neighbors), n_values)


def _graph_spectrum(A: scipy.sparse.csr_matrix, n_values: int) -> np.ndarray:
    """Top ``n_values`` eigenvalues of D^-1/2 A D^-1/2 for a kNN graph A (see :func:`_knn_spectrum`)."""
    n = A.shape[0]
    r = 1.0 / np.sqrt(np.asarray(A.sum(axis=1)).ravel())  # every row has >= 1 neighbour
    S = (scipy.sparse.diags(r) @ A @ scipy.sparse.diags(r)).tocsr()
    n_values = min(n_values, n)
    n_components, labels = scipy.sparse.csgraph.connected_components(A, directed=False)
    if n_components == 1:
        mu = _top_eigenvalues(S, n_values)
    else:
        parts = []
        for c in range(n_components):
            idx = np.flatnonzero(labels == c)
            parts.append(_top_eigenvalues(S[idx][:, idx].tocsr(), n_values) if idx.size > 1 else np.ones(1))
        mu = np.concatenate(parts)
    return np.clip(np.sort(mu)[::-1][:n_values], -1.0, 1.0)


def _cluster_qr(V: np.ndarray) -> np.ndarray:
    """Labels 0..k-1 of the rows of a spectral embedding V (n, k), by column-pivoted QR.

    Damle, Minden and Ying, "Simple, direct and efficient multi-way spectral clustering"
    (2019): the k pivot rows of V^T's QR give a rotation of the embedding to nearly
    indicator vectors; each row goes to its largest entry.  Deterministic (no k-means
    restarts), O(n k^2).
    """
    k = V.shape[1]
    _, _, piv = scipy.linalg.qr(V.T, pivoting=True, mode="economic", check_finite=False)
    u, _, vt = scipy.linalg.svd(V[piv[:k], :].T, check_finite=False)
    return np.abs(V @ (u @ vt)).argmax(axis=1)


def _spectral_embedding(A: scipy.sparse.csr_matrix, n_vectors: int) -> np.ndarray:
    """The top ``n_vectors`` eigenvectors of D^-1/2 A D^-1/2, scaled by D^-1/2, (n, n_vectors):
    one dense eigendecomposition (about 0.15 s at n = 1000, n_vectors = 50)."""
    n = A.shape[0]
    r = 1.0 / np.sqrt(np.asarray(A.sum(axis=1)).ravel())
    S = (A.toarray() * r[:, None]) * r[None, :]
    n_vectors = min(n_vectors, n)
    _, vecs = scipy.linalg.eigh(S, subset_by_index=[n - n_vectors, n - 1], check_finite=False)
    return vecs[:, ::-1] * r[:, None]


def _partition_curves(A: scipy.sparse.csr_matrix, k_min: int, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Modularity and edge coverage of the spectral partition of the kNN graph A at each k in
    [k_min, min(k_max, n)].

    Modularity Q = sum_c (e_c / 2m - (d_c / 2m)^2): e_c twice the edges inside group c, d_c
    its total degree, 2m the total degree (Newman and Girvan 2004); the coverage is
    sum_c e_c / 2m, the share of the edges that stay inside the groups.  The partitions: the
    top k vectors of :func:`_spectral_embedding`, discretised by :func:`_cluster_qr` (White and
    Smyth 2005 choose K by modularity over spectral partitions); the QR discretisations cost
    about 0.1 s in all at n = 1000, k_max = 50.
    """
    n = A.shape[0]
    emb = _spectral_embedding(A, k_max)
    deg = np.asarray(A.sum(axis=1)).ravel()
    two_m = float(deg.sum())
    modularity, coverage = [], []
    for k in range(k_min, emb.shape[1] + 1):
        P = scipy.sparse.csr_matrix((np.ones(n), (np.arange(n), _cluster_qr(emb[:, :k]))), shape=(n, k))
        coverage.append(float((A @ P).multiply(P).sum()) / two_m)
        modularity.append(coverage[-1] - float(np.sum((deg @ P / two_m) ** 2)))
    return np.asarray(modularity), np.asarray(coverage)


def _modularity_curve(A: scipy.sparse.csr_matrix, k_min: int, k_max: int) -> np.ndarray:
    """Modularity of the spectral partition of A at each k in [k_min, min(k_max, n)]
    (:func:`_partition_curves`)."""
    return _partition_curves(A, k_min, k_max)[0]


def _modularity_pick(curve: np.ndarray, k_min: int) -> int:
    """The k whose partition has the largest modularity in ``curve`` (:func:`_modularity_curve`
    from ``k_min``; the smallest such k on near-ties)."""
    best_k, best_q = k_min, -np.inf
    for k, q in enumerate(curve, start=k_min):
        if q > best_q + 1e-12:
            best_k, best_q = k, q
    return best_k


def _argmax_gap(mu: np.ndarray, k_lo: int, k_hi: int) -> int:
    """The k in [k_lo, k_hi] with the largest eigengap mu_k - mu_{k+1} (first one on ties)."""
    gaps = mu[k_lo - 1:k_hi] - mu[k_lo:k_hi + 1]
    return int(np.argmax(gaps)) + k_lo
