"""Graph utilities of late fusion: kNN, adaptive-neighbour graphs, low-pass graph filters, simplex QP.

Everything here works on small in-memory arrays (the n landmarks of a fit, or one row block
of new points against them): the nearest neighbours of the rows of an embedding, the
adaptive-neighbour affinities of Nie, Wang & Huang (2014) in closed form, the normalised
sparse graph D^-1/2 A D^-1/2 they define, the filter G = sum_{o=1}^{o_bar} T^o with
T = (I + D^-1/2 A D^-1/2) / 2 applied by repeated sparse products (never an n x n dense
matrix), and the small quadratic programme over the probability simplex of the filter
weights.  Used by :mod:`mkdist._methods._late_fusion` (GMLKM, algorithms.md section 5).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.optimize
import scipy.sparse

from ._distances import row_sq_norms, sq_distances

__all__ = ["knn", "smallest_k", "NeighborSpaces", "adaptive_neighbor_weights", "Graph", "build_graph",
           "apply_filter", "filter_basis", "simplex_qp"]

#: ``smallest_k`` splits a row into this many groups (at least k): the k-th smallest group
#: minimum bounds the k-th smallest entry from above, and on embeddings it is barely above it
#: (W1 filters, 2000 landmarks, k = 6: 6.3 candidates per row on average).
_SELECT_GROUPS = 50


def knn(Q: np.ndarray, R: np.ndarray, k: int, *, exclude_self: bool = False,
        block_rows: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest rows of R for every row of Q, by increasing distance (ties: lower index).

    Parameters
    ----------
    Q : ndarray of shape (b, d)
    R : ndarray of shape (n, d)
    k : int
        1 <= k <= n (n - 1 with ``exclude_self``).
    exclude_self : bool, default=False
        Q is R: a row is not its own neighbour.
    block_rows : int, default=2048
        Rows of Q per distance block, so memory is (block_rows, n) whatever b.

    Returns
    -------
    indices : ndarray of shape (b, k), int64
    sqdist : ndarray of shape (b, k)
        Squared Euclidean distances (``sq_distances``), increasing along each row.
    """
    b = Q.shape[0]
    rr = row_sq_norms(R)
    idx = np.empty((b, k), dtype=np.int64)
    dist = np.empty((b, k))
    for start in range(0, b, block_rows):
        stop = min(start + block_rows, b)
        D = sq_distances(Q[start:stop], R, b_sq=rr)
        if exclude_self:
            D[np.arange(stop - start), np.arange(start, stop)] = np.inf
        part = np.argpartition(D, k - 1, axis=1)[:, :k]
        dv = np.take_along_axis(D, part, axis=1)
        order = np.lexsort((part, dv), axis=1)
        idx[start:stop] = np.take_along_axis(part, order, axis=1)
        dist[start:stop] = np.take_along_axis(dv, order, axis=1)
    return idx, dist


def smallest_k(D: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k smallest entries of every row of D, increasing (ties: lower column), exactly.

    The columns are folded in halves (elementwise minima of the two halves, until about
    ``_SELECT_GROUPS`` >= k columns are left): each remaining column is the minimum of a group
    of entries, so the k-th smallest of them, t, is attained by k different entries and the
    k smallest of the row are all <= t.  Only the few entries <= t are sorted.  Measured on
    the late-fusion filter spaces (2000 landmarks, k = 6, one thread): about 6 candidates per
    row, the selection ~2x faster than ``np.argpartition`` (which then still needs a sort).

    Parameters
    ----------
    D : ndarray of shape (b, n)
        No NaN.
    k : int
        1 <= k <= n.

    Returns
    -------
    indices : ndarray of shape (b, k), int64
    values : ndarray of shape (b, k), D's dtype
    """
    b, n = D.shape
    g = max(k, _SELECT_GROUPS)
    if n < 2 * g or b == 0:  # short rows: a stable sort
        idx = np.argsort(D, axis=1, kind="stable")[:, :k]
        return idx, np.take_along_axis(D, idx, axis=1)
    folded, width = D, n
    while width >= 2 * g:
        half = width // 2
        folded = np.minimum(folded[:, :half], folded[:, half:2 * half])
        width = half
    t = np.partition(folded, k - 1, axis=1)[:, k - 1]
    flat = np.flatnonzero(D <= t[:, None])
    rows, cols = np.divmod(flat, n)
    vals = D.ravel()[flat]
    order = np.lexsort((cols, vals, rows))         # rows ascending, then value, then column
    counts = np.bincount(rows, minlength=b)
    first = (np.cumsum(counts) - counts)[:, None] + np.arange(k)
    take = order[first]
    return cols[take], vals[take]


#: ``NeighborSpaces.query`` ranks this many bytes of (points x landmarks) at a time, so that
#: the GEMM's output and the selection's passes over it stay in cache.  W1 (4 filters x
#: 2000 landmarks, float32, one thread, 262-point blocks): 23-25 us per point at 2 MiB,
#: 26 at 4 MiB, 33-35 at 8 MiB, 24-38 at 0.5-1 MiB (per-call overhead).
_QUERY_BLOCK_BYTES = 2 * 2**20


class NeighborSpaces:
    """The landmark rows of several embedding spaces, for the kNN of new points in all of them.

    ``query`` ranks, for a block of points given in every space, all landmarks of every space
    in one array (m, rows, n) of ||r||^2 - 2 x.r -- the squared distance less the point's own
    ||x||^2, which does not change the ranking: one GEMM per space against [-2 R^T; ||r||^2]
    with x extended by a 1, in ``dtype`` -- and selects the k nearest of every space in one
    ``smallest_k``, a cache-sized group of rows at a time.  The squared distances of the
    selected landmarks are then recomputed in float64 from the differences (no
    cancellation) and sorted (ties: lower index).  Only a choice among landmarks tied to
    ``dtype`` rounding can differ from an exact search; the adaptive-neighbour weights are
    continuous there.

    Parameters
    ----------
    spaces : list of m ndarrays of shape (n, d_i)
        Landmark coordinates in every space.
    dtype : numpy dtype, default=float64
        Precision of the ranking (float32 halves the GEMM and the selection's memory traffic).
    """

    def __init__(self, spaces, dtype=np.float64):
        self.dtype = np.dtype(dtype)
        self.spaces = [np.ascontiguousarray(R, dtype=np.float64) for R in spaces]
        self.ranker = [np.ascontiguousarray(np.vstack([-2.0 * R.T, row_sq_norms(R)[None, :]]), dtype=self.dtype)
                       for R in self.spaces]

    def query(self, points, k: int) -> tuple[np.ndarray, np.ndarray]:
        """k nearest landmarks of every point in every space.

        Parameters
        ----------
        points : list of m ndarrays of shape (b, d_i)
        k : int

        Returns
        -------
        indices : ndarray of shape (m, b, k), int64
        sqdist : ndarray of shape (m, b, k), float64, increasing along the last axis
        """
        m, n = len(self.spaces), self.spaces[0].shape[0] if self.spaces else 0
        b = points[0].shape[0] if points else 0
        ext = [np.hstack([np.asarray(P, dtype=self.dtype), np.ones((b, 1), dtype=self.dtype)]) for P in points]
        idx = np.empty((m, b, k), dtype=np.int64)
        step = max(1, _QUERY_BLOCK_BYTES // max(1, m * n * self.dtype.itemsize))
        rank = np.empty((m, min(step, b), n), dtype=self.dtype)
        for start in range(0, b, step):
            stop = min(start + step, b)
            r = rank[:, :stop - start]
            for i, (P, R) in enumerate(zip(ext, self.ranker)):
                np.matmul(P[start:stop], R, out=r[i])
            idx[:, start:stop] = smallest_k(r.reshape(-1, n), k)[0].reshape(m, stop - start, k)
        sqd = np.empty((m, b, k))
        for i, (P, R) in enumerate(zip(points, self.spaces)):
            diff = R[idx[i]] - np.asarray(P, dtype=np.float64)[:, None, :]
            np.einsum("bkd,bkd->bk", diff, diff, out=sqd[i])
        order = np.lexsort((idx, sqd), axis=-1)
        return np.take_along_axis(idx, order, axis=-1), np.take_along_axis(sqd, order, axis=-1)


def adaptive_neighbor_weights(sqdist: np.ndarray, n_neighbors: int) -> np.ndarray:
    """Adaptive-neighbour affinities (Nie, Wang & Huang 2014), closed form.

    Parameters
    ----------
    sqdist : ndarray of shape (b, n_neighbors + 1)
        Squared distances of every row to its n_neighbors + 1 nearest candidates, increasing.
    n_neighbors : int
        k, the number of non-zero affinities per row.

    Returns
    -------
    S : ndarray of shape (b, n_neighbors)
        s_j = (d_{k+1} - d_j) / (k d_{k+1} - sum_{h<=k} d_h) for the k nearest: non-negative,
        summing to 1 per row, decreasing with the distance.  A row whose k + 1 distances are
        all equal (the closed form is 0/0) gets uniform weights 1/k.

    Examples
    --------
    >>> adaptive_neighbor_weights(np.array([[0.0, 1.0, 3.0]]), 2)
    array([[0.6, 0.4]])
    """
    k = n_neighbors
    d = np.asarray(sqdist, dtype=np.float64)
    dk1 = d[:, k]
    num = dk1[:, None] - d[:, :k]
    den = k * dk1 - d[:, :k].sum(axis=1)
    ok = den > 1e-12 * np.maximum(dk1, np.finfo(np.float64).tiny)
    out = np.full((d.shape[0], k), 1.0 / k)
    out[ok] = num[ok] / den[ok, None]
    return out


@dataclasses.dataclass
class Graph:
    """One adaptive-neighbour graph: the kNN lists and the normalised affinity D^-1/2 A D^-1/2.

    Attributes
    ----------
    indices : ndarray of shape (n, k), int64
        The k nearest nodes of each node.
    weights : ndarray of shape (n, k)
        Adaptive-neighbour weights s_ij (rows sum to 1).
    S_hat : scipy.sparse.csr_matrix of shape (n, n)
        Symmetric D^-1/2 A D^-1/2 with A = (S + S^T) / 2.
    degree : ndarray of shape (n,)
        Row sums of A (>= 1/2: every row of S sums to 1).
    """

    indices: np.ndarray
    weights: np.ndarray
    S_hat: scipy.sparse.csr_matrix
    degree: np.ndarray

    @classmethod
    def from_neighbors(cls, indices: np.ndarray, weights: np.ndarray) -> Graph:
        """The graph of given neighbour lists and weights (the same arithmetic at fit and reload)."""
        n, k = indices.shape
        S = scipy.sparse.csr_matrix((weights.ravel(), (np.repeat(np.arange(n), k), indices.ravel())),
                                    shape=(n, n))
        A = ((S + S.T) * 0.5).tocsr()
        degree = np.asarray(A.sum(axis=1)).ravel()
        dinv = 1.0 / np.sqrt(degree)
        S_hat = scipy.sparse.csr_matrix(scipy.sparse.diags(dinv) @ A @ scipy.sparse.diags(dinv))
        S_hat.sort_indices()
        return cls(indices, weights, S_hat, degree)


def build_graph(H: np.ndarray, n_neighbors: int) -> Graph:
    """Adaptive-neighbour graph on the rows of H (n, d), each row linked to its n_neighbors nearest."""
    idx, sqd = knn(H, H, n_neighbors + 1, exclude_self=True)
    return Graph.from_neighbors(idx[:, :n_neighbors], adaptive_neighbor_weights(sqd, n_neighbors))


def apply_filter(S_hat, Z: np.ndarray, order: int) -> np.ndarray:
    """G Z with G = sum_{o=1}^{order} T^o, T = (I + S_hat)/2, by repeated sparse products.

    ``order=0`` is the identity (G = I: plain late fusion).
    """
    if order == 0:
        return np.array(Z, dtype=np.float64, copy=True)
    out = np.zeros_like(Z, dtype=np.float64)
    cur = Z
    for _ in range(order):
        cur = 0.5 * (cur + S_hat @ cur)
        out += cur
    return out


def filter_basis(S_hat, Z: np.ndarray, order: int) -> np.ndarray:
    """B = sum_{q=0}^{order-1} (1 - 2^-(order-q)) T^q Z, so that G Z = (1 - 2^-order) Z + S_hat B.

    The identity follows from T = (I + S_hat)/2 (unroll r_o = (r_{o-1} + S_hat T^{o-1} Z)/2 from
    r_0 = Z); it is what lets a new node reuse the existing nodes' rows of B (see the Notes of
    ``mkdist.LateFusionClustering``).
    """
    B = np.zeros_like(Z, dtype=np.float64)
    cur = Z
    for q in range(order):
        B += (1.0 - 2.0 ** -(order - q)) * cur
        if q + 1 < order:
            cur = 0.5 * (cur + S_hat @ cur)
    return B


#: Simplex weights at or below this are rounding residue of an active bound (``simplex_qp``).
_SIMPLEX_ZERO = 1e-10


def simplex_qp(M: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """argmin x^T M x over the probability simplex (M symmetric PSD, small), never worse than x0."""
    m = M.shape[0]
    scale = float(np.trace(M)) / m
    if not scale > 0:
        return x0
    Ms = M / scale  # O(1) entries: SLSQP's absolute tolerances then mean something
    f0 = float(x0 @ Ms @ x0)
    res = scipy.optimize.minimize(
        lambda x: float(x @ Ms @ x), x0, jac=lambda x: 2.0 * (Ms @ x), method="SLSQP",
        bounds=[(0.0, 1.0)] * m,
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0, "jac": lambda x: np.ones_like(x)}],
        options={"ftol": 1e-15, "maxiter": 500})
    # SLSQP leaves ~1e-16 on the bounds it makes active: exact zeros there, since a caller may
    # skip what a zero weight multiplies (late fusion applies only the filters weighted > 0).
    x = np.where(res.x > _SIMPLEX_ZERO, res.x, 0.0)
    if not x.sum() > 0:
        return x0
    x /= x.sum()
    return x if float(x @ Ms @ x) <= f0 else x0
