"""Nystrom bipartite-graph spectral clustering with an out-of-sample extension.

Algorithm 1 (fit) and Algorithm 2 (transform / predict) of the bipartite-spectral seed
(``seeds/bipartite-spectral-nystrom-generalization.txt``, sections 4.1 and 4.2; see
``docs/algorithms.md`` section 3).  NumPy input runs the same block functions as Dask
input, on in-memory row blocks instead of ``map_blocks`` tasks, so both give the same
numbers up to summation order.

Notation (N points, m anchors, k clusters, P = W(X, anchors) of shape (N, m)):

* ``Kx = W(anchors, anchors) = U S U^T`` (eigenvalues below a rank tolerance dropped, r kept);
* ``q = U S^-1 U^T (P^T 1) / N`` so the approximate degrees are ``d = P q``;
* ``Z = D^-1/2 P U S^-1/2`` (N x r), ``Z^T Z = S^-1/2 U^T (P^T D^-1 P) U S^-1/2 = V Sigma^2 V^T``;
* ``F = Z V_k Sigma_k^-1`` (top-k left singular vectors) and ``H = D^-1/2 F = P M / d`` with
  ``M = U S^-1/2 V_k Sigma_k^-1`` (m x k).

So Algorithm 1 needs two reductions over the data (``P^T 1``, then ``P^T D^-1 P``) and one
map over it (``H``); Algorithm 2 is the same map (``P(x) M / (P(x) q)``) on new points.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._dask import align_row_chunks, check_chunk_finite
from ._kmeans import _assign, kmeans
from ._sampling import gather_rows, sample_landmark_indices
from ._validation import (
    as_views,
    check_finite,
    check_int,
    check_real,
    common_float_dtype,
    is_dask_array,
)
from .errors import EmbeddingStabilityWarning, InputValidationError

__all__ = ["NystromSpectralClustering", "default_n_anchors"]

logger = logging.getLogger("mkdist")

#: Rows sampled uniformly (without replacement) to estimate sigma^2 by eq. 24.  The estimate
#: is a mean over s^2 pairs; its relative standard error is about 1/sqrt(s), 1% at 10k rows.
BANDWIDTH_SAMPLE_SIZE = 10_000

#: Rows per kernel block, for NumPy input and inside every Dask task: a (block, m) float64
#: kernel block is 8192 x 1000 x 8 B = 65 MB at m = 1000, large enough for efficient GEMMs.
BLOCK_ROWS = 8192

#: Degrees below this fraction of the mean degree are raised to it (see ``_ModelArrays``).
DEGREE_FLOOR_RELATIVE = 1e-8

_STATE_FORMAT = "mkdist.NystromSpectralClustering/1"


def default_n_anchors(n_samples: int, anchor_factor: float = 1.0, n_clusters: int = 2) -> int:
    """Anchors used when ``n_anchors=None``: ``ceil(anchor_factor * sqrt(N))``, within [n_clusters, N].

    The seed (Theorem 3) shows m = Theta(sqrt(N)) balances the excess clustering risk
    against the O(N m (d + m)) cost; its experiments use ceil(sqrt(N)) (anchor_factor = 1).
    """
    m = math.ceil(anchor_factor * math.sqrt(n_samples))
    return int(min(n_samples, max(m, n_clusters)))


# ----------------------------------------------------------------------------- block functions
@dataclasses.dataclass(frozen=True, eq=False)
class _ModelArrays:
    """The small arrays the row-block functions need; shipped to Dask as ONE graph key.

    ``anchors`` are kept in the dtype the kernel blocks are computed in (float32 for float32
    input), so the anchor rows of P equal Kx and a restored model computes identical blocks.
    ``degree_weights`` (q) and ``projection`` (M) are None in the passes that precede them.
    ``degree_floor``: in exact arithmetic W~ = P Kx^+ P^T is a PSD under-approximation of W
    whose degrees are positive for points near the anchors, but a point far from every
    anchor (or rounding) can give d(x) <= 0, and D^-1/2 would turn it into NaN/inf; such
    degrees are raised to a tiny fraction of the mean degree (and counted during fit).
    """

    anchors: np.ndarray
    anchor_sq_norms: np.ndarray
    inv_sigma2: float
    degree_weights: np.ndarray | None = None
    degree_floor: float = 0.0
    projection: np.ndarray | None = None

    @classmethod
    def build(cls, anchors: np.ndarray, sigma2: float, **kwargs) -> _ModelArrays:
        a = np.ascontiguousarray(anchors)
        return cls(a, np.einsum("ij,ij->i", a, a), 1.0 / float(sigma2), **kwargs)


def _kernel_block(X: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    """W(X, anchors) = exp(-||x - a||^2 / sigma^2) for one row block, shape (b, m), float64.

    The (b, d) x (d, m) GEMM, the costly step, runs in the anchors' dtype; the exponent and
    everything after it in float64 (the Gram matrix is later scaled by S^-1/2, which would
    amplify float32 rounding).  Assumes X is a finite 2-D block with the anchors' feature count.
    """
    Xc = np.asarray(X, dtype=arrays.anchors.dtype)
    d2 = np.einsum("ij,ij->i", Xc, Xc)[:, None] + arrays.anchor_sq_norms[None, :]
    d2 -= 2.0 * (Xc @ arrays.anchors.T)
    # Cancellation in ||x||^2 + ||a||^2 - 2 x.a can leave tiny negatives for x close to a.
    d2 = np.maximum(d2, 0, dtype=np.float64)
    d2 *= -arrays.inv_sigma2
    return np.exp(d2, out=d2)


def _degrees(P: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    return np.maximum(P @ arrays.degree_weights, arrays.degree_floor)


def _row_blocks(X):
    """Slices of at most ``BLOCK_ROWS`` rows: bounds the (rows, m) float64 temporaries of a task
    (or of the whole NumPy input) to O(BLOCK_ROWS m) whatever the chunk size."""
    for start in range(0, X.shape[0], BLOCK_ROWS):
        yield X[start:start + BLOCK_ROWS]


def _column_sums(X: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    """Pass 1 partial: P^T 1 over the rows of X, shape (1, m)."""
    total = np.zeros(arrays.anchors.shape[0])
    for b in _row_blocks(X):
        total += _kernel_block(b, arrays).sum(axis=0)
    return total[None, :]


def _gram(X: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    """Pass 2 partial: P^T D^-1 P (m x m) over the rows of X, flattened, then the count of
    floored degrees; shape (1, m * m + 1)."""
    m = arrays.anchors.shape[0]
    C = np.zeros((m, m))
    n_floored = 0
    for b in _row_blocks(X):
        P = _kernel_block(b, arrays)
        raw = P @ arrays.degree_weights
        n_floored += int(np.count_nonzero(raw < arrays.degree_floor))
        C += (P / np.maximum(raw, arrays.degree_floor)[:, None]).T @ P
    return np.concatenate([C.ravel(), [float(n_floored)]])[None, :]


def _embed_rows(X: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    """Algorithm 2 on the rows of X: h(x) = P(x) M / d(x), shape (b, k), float64."""
    out = np.empty((X.shape[0], arrays.projection.shape[1]))
    start = 0
    for b in _row_blocks(X):
        P = _kernel_block(b, arrays)
        out[start:start + b.shape[0]] = (P @ arrays.projection) / _degrees(P, arrays)[:, None]
        start += b.shape[0]
    return out


def _check_block(X: np.ndarray, block_info) -> None:
    """In a ``map_blocks`` task: raise on NaN/inf naming the chunk and row (no extra pass)."""
    if block_info is not None:
        loc = block_info[0]
        check_chunk_finite(["X"], [X], loc["chunk-location"][0], loc["array-location"][0][0])


def _column_sums_task(X, arrays, block_info=None):
    _check_block(X, block_info)
    return _column_sums(X, arrays)


def _gram_task(X, arrays, block_info=None):
    return _gram(X, arrays)  # pass 1 already checked every chunk


def _embed_task(X, arrays, block_info=None):
    _check_block(X, block_info)
    return _embed_rows(X, arrays)


_TASKS = {_column_sums: _column_sums_task, _gram: _gram_task}


def _blockwise_sum(X, fn, arrays: _ModelArrays, width: int, split_every: int = 16) -> np.ndarray:
    """Sum over the rows of X of ``fn`` (a partial of shape (1, width)), in memory.

    NumPy: ``fn`` on the whole array (it walks ``BLOCK_ROWS`` blocks itself).  Dask: one
    task per row chunk, then a tree reduction with fan-in ``split_every``; only ``width``
    numbers reach the client.
    """
    if not is_dask_array(X):
        return fn(X, arrays)[0]
    import dask
    import dask.array as da

    key = dask.delayed(arrays, pure=True, traverse=False)
    # token=, not name=: name= fixes the whole key, so two inputs would share it.
    partials = da.map_blocks(_TASKS[fn], X, key, chunks=((1,) * X.numblocks[0], (width,)),
                             dtype=np.float64, meta=np.empty((0, width)),
                             token=f"mkdist-nystrom{fn.__name__.replace('_', '-')}")
    return np.asarray(partials.sum(axis=0, split_every=split_every).compute())


def _embed(X, arrays: _ModelArrays):
    """Algorithm 2 on every row: NumPy in -> (N, k) ndarray; Dask in -> lazy Dask array; float64."""
    if not is_dask_array(X):
        return _embed_rows(X, arrays)
    import dask
    import dask.array as da

    k = arrays.projection.shape[1]
    key = dask.delayed(arrays, pure=True, traverse=False)
    return da.map_blocks(_embed_task, X, key, chunks=(X.chunks[0], (k,)), dtype=np.float64,
                         meta=np.empty((0, k)), token="mkdist-nystrom-embed")


# ----------------------------------------------------------------------------- small dense algebra
def _anchor_eigen(K: np.ndarray, kernel_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of Kx above the numerical-rank tolerance, eigenvalues decreasing.

    Gaussian Gram matrices of low-dimensional or clustered anchors are numerically
    singular: their trailing eigenvalues are rounding noise (even negative), and S^-1 in
    W~ = P U S^-1 U^T P^T would multiply the matching noise in P by up to 1/eps.  Eigenvalues
    below ``m * eps * lambda_max`` (the tolerance of ``numpy.linalg.matrix_rank``, with eps of
    the dtype the kernel was computed in) are therefore dropped, i.e. Kx^-1 becomes the
    truncated pseudo-inverse; this is the floor.  Dropping rather than clipping them up to
    the floor keeps W~ <= W (a Schur complement) and keeps no direction that is pure noise.
    """
    lam, U = np.linalg.eigh((K + K.T) / 2.0)
    lam, U = lam[::-1], U[:, ::-1]
    tol = K.shape[0] * np.finfo(kernel_dtype).eps * max(lam[0], 0.0)
    keep = lam > tol
    return lam[keep], U[:, keep]


def _spectral_projection(C: np.ndarray, lam: np.ndarray, U: np.ndarray, k: int):
    """Top-k singular values of Z, M = U S^-1/2 V_k Sigma_k^-1 and PEP(Z Z^T, k), from C = P^T D^-1 P.

    Z^T Z = S^-1/2 U^T C U S^-1/2 = V Sigma^2 V^T gives Z's right singular vectors V and
    singular values Sigma; the left ones are F = Z V Sigma^-1 (never formed: H = P M / d).
    """
    B = U / np.sqrt(lam)[None, :]            # U S^-1/2, (m, r)
    G = B.T @ C @ B
    e, V = np.linalg.eigh((G + G.T) / 2.0)
    # Z Z^T (N x N, the normalised bipartite similarity) has the eigenvalues of G = Z^T Z,
    # so its principal eigenvalue proportion comes from the small side.
    pep = float(np.sum(e[::-1][:k]) / np.trace(G)) if np.trace(G) > 0 else float("nan")
    e, V = e[::-1][:k], V[:, ::-1][:, :k]
    # rank(Z) >= r >= k (Z restricted to the anchor rows is D^-1/2 U S^1/2), so e_k > 0 in
    # exact arithmetic; the floor only keeps rounding from dividing by zero.
    s = np.sqrt(np.maximum(e, np.finfo(np.float64).tiny))
    return s, B @ (V / s[None, :]), pep


def _fix_signs(M: np.ndarray, K: np.ndarray, q: np.ndarray, floor: float) -> np.ndarray:
    """Flip columns of M so that, over the anchors, the largest |h_t| is positive.

    Singular vectors have arbitrary signs; this makes them a function of the data (NumPy
    and Dask fits agree) and makes the first, constant column of H positive.
    """
    H_anchors = (K @ M) / np.maximum(K @ q, floor)[:, None]
    idx = np.argmax(np.abs(H_anchors), axis=0)
    signs = np.sign(H_anchors[idx, np.arange(M.shape[1])])
    signs[signs == 0] = 1.0
    return M * signs[None, :]


def _json_param(value: Any) -> Any:
    """Parameter value for the JSON attrs (a RandomState instance cannot be stored: None)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return None


# ----------------------------------------------------------------------------- estimator
class NystromSpectralClustering(ClusterMixin, TransformerMixin, BaseEstimator):
    """Spectral clustering on a Nystrom bipartite graph with a fast out-of-sample extension.

    Fit (Algorithm 1 of the bipartite-spectral seed): sample m anchors uniformly, form the
    Gaussian bipartite similarity P = W(X, anchors) one row block at a time (never stored),
    approximate the graph by W~ = P Kx^-1 P^T and its degrees by d = W~ 1 / N (never N x N),
    take the top-k left singular vectors F of Z = D^-1/2 P U S^-1/2 through the m x m matrix
    Z^T Z, and run k-means on the rows of H = D^-1/2 F.  Transform / predict (Algorithm 2)
    embed new points with m x k and m-vector products only -- no new SVD -- and assign them
    to the nearest centroid.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of clusters and of embedding dimensions (>= 2).
    n_anchors : int, default=None
        m, the number of anchors (n_clusters <= m <= N).  None: ``ceil(anchor_factor *
        sqrt(N))``, raised to n_clusters and capped at N (see :func:`default_n_anchors`).
    anchor_factor : float, default=1.0
        c in m = ceil(c sqrt(N)) when ``n_anchors=None``.  The paper uses c = 1 (Theorem 3:
        m = Theta(sqrt(N)) balances accuracy and cost).
    bandwidth : float, default=None
        sigma in W(x, y) = exp(-||x - y||^2 / sigma^2).  None: sigma^2 = mean squared pairwise
        distance (eq. 24), estimated on ``BANDWIDTH_SAMPLE_SIZE`` = 10,000 uniformly sampled
        rows (all rows when N is smaller) as 2 x the sum of the per-feature variances of the
        sample, which equals eq. 24 on the sample without forming pairs.
    n_init : int, default=10
        k-means restarts (the run with the lowest inertia wins).
    kmeans_max_iter : int, default=300
        Lloyd iterations per k-means run.
    persist_embedding : bool, default=True
        Dask input only: persist H (N x k float64, logged in bytes) before k-means.  Without
        it every Lloyd iteration recomputes the kernel blocks from X.
    random_state : int, RandomState or None, default=None
        Anchor sampling, bandwidth sampling and k-means initialisation.  The same seed gives
        the same anchors for NumPy and Dask input and for any chunking.

    Attributes
    ----------
    anchors_ : ndarray of shape (n_anchors_, n_features_in_)
        The anchor rows, in the dtype the kernel is computed in (float32 for float32 input
        or integer input of <= 2 bytes, else float64).
    anchor_indices_ : ndarray of shape (n_anchors_,), int64
        Row numbers of the anchors in the training input (sorted).
    n_anchors_ : int
        m.
    sigma_ : float
        Bandwidth sigma (given, or sqrt of the eq. 24 estimate).
    anchor_eigenvalues_ : ndarray of shape (kernel_rank_,)
        Eigenvalues of Kx = W(anchors, anchors) kept above the rank tolerance, decreasing.
    kernel_rank_ : int
        Their number r (<= n_anchors_).
    degree_weights_ : ndarray of shape (n_anchors_,)
        q = U S^-1 U^T (P^T 1) / N; the approximate degree of any point x is
        d(x) = W(x, anchors) @ q.
    degree_floor_ : float
        Degrees are raised to at least this value (1e-8 x the mean training degree).
    embedding_projection_ : ndarray of shape (n_anchors_, n_clusters)
        M = U S^-1/2 V_k Sigma_k^-1; the embedding is h(x) = W(x, anchors) @ M / d(x).
    singular_values_ : ndarray of shape (n_clusters,)
        Top-k singular values of Z (sigma~_t in the paper), decreasing.  The first equals
        sqrt(N) whenever no degree was floored (sqrt(d) is then an exact singular vector).
    cluster_centers_ : ndarray of shape (n_clusters, n_clusters)
        k-means centroids in the embedding.
    labels_ : ndarray of shape (N,), int64, or lazy dask.array.Array for Dask input
    inertia_ : float
        k-means inertia in the embedding.
    n_iter_ : int
        Lloyd iterations of the best k-means run.
    n_samples_fit_ : int
        N.
    n_features_in_ : int
    diagnostics_ : dict
        ``n_degrees_floored`` (training points whose degree was floored), ``timings``
        (seconds per stage) and ``pep``: the principal eigenvalue proportion (t = k, see
        :func:`mkdist.principal_eigenvalue_proportion`) of the anchors' Gaussian kernel
        (``base``) and of the normalised bipartite similarity Z Z^T (``combined``), both
        computed from m x m matrices.

    See Also
    --------
    MultipleKernelClustering : multiple kernels and views, landmark fit (SimpleMKKM + MKC-AE).

    Notes
    -----
    **Cost.**  Fit reads X in three passes, each computing P block by block in O(b m d):
    P^T 1 (an m-vector), P^T D^-1 P (m x m; the two cannot be fused because d = P q needs
    the global P^T 1), and H; plus one pass per Lloyd iteration over the (persisted) H.
    Dask reductions are tree sums.  The only dense algebra is two m x m eigendecompositions.

    **Algorithm 2 reproduces Algorithm 1.**  For any x let p = W(x, anchors).  With
    W~(x, y) = p(x)^T U S^-1 U^T p(y), G~(x, y) = W~(x, y) / sqrt(d(x) d(y)) and the
    left singular vectors F = Z V Sigma^-1 of Z (so P^T D^-1/2 F = U S^1/2 V Sigma),

        sum_j G~(x, x_j) F_jt / Sigma_t^2 = p^T U S^-1/2 V_t / (Sigma_t sqrt(d(x)))
                                          = sqrt(d(x)) (p^T M)_t,

    which at a training point x_i is Z_i V_t / Sigma_t = F_it.  Hence
    h_t(x) = f_t(x) / sqrt(d(x)) = (p(x)^T M)_t / d(x) (what ``transform`` returns) equals
    H_it = F_it / sqrt(d_i) exactly at every training point.  The seed's eq. 19 scales the
    eigenfunction as f~_t(x_j) = sqrt(N) F_jt with sigma~_t^2 the eigenvalue of the empirical
    operator, Sigma_t^2 / N; its h~_t is then sqrt(N) times ours, one positive factor for
    all t, to which k-means and nearest-centroid assignment are invariant.  (Reading
    sigma~_t literally as Sigma_t gives h / sqrt(N) off the training set instead, again a
    global factor.)  We keep the scale of Algorithm 1's H, where ``cluster_centers_`` live.

    References
    ----------
    Liang W., Liu X., Lan L., Zhu E. Generalization analysis of Nystrom-based bipartite-graph
    spectral clustering (seed text, sections 4.1-4.2, Algorithms 1 and 2, eq. 24).
    Fowlkes C. et al. Spectral grouping using the Nystrom method. IEEE TPAMI 26(2), 2004.

    Examples
    --------
    >>> import numpy as np
    >>> from mkdist._nystrom import NystromSpectralClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.1, (50, 2)), rng.normal(3, 0.1, (50, 2))]
    >>> model = NystromSpectralClustering(n_clusters=2, random_state=0).fit(X)
    >>> model.n_anchors_, len(set(model.labels_[:50])), len(set(model.labels_))
    (10, 1, 2)
    >>> bool((model.predict(X) == model.labels_).all())
    True
    """

    def __init__(self, n_clusters: int = 8, *, n_anchors: int | None = None,
                 anchor_factor: float = 1.0, bandwidth: float | None = None, n_init: int = 10,
                 kmeans_max_iter: int = 300, persist_embedding: bool = True, random_state=None):
        self.n_clusters = n_clusters
        self.n_anchors = n_anchors
        self.anchor_factor = anchor_factor
        self.bandwidth = bandwidth
        self.n_init = n_init
        self.kmeans_max_iter = kmeans_max_iter
        self.persist_embedding = persist_embedding
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _validate_params(self, n_samples: int) -> int:
        """Check every parameter against N; return m."""
        if n_samples < 2:
            raise InputValidationError(
                f"n_samples={n_samples} is too few: at least 2 samples are required.")
        k = check_int("n_clusters", self.n_clusters, low=2)
        m = check_int("n_anchors", self.n_anchors, low=2, allow_none=True)
        c = check_real("anchor_factor", self.anchor_factor, low=0.0, low_inclusive=False)
        check_real("bandwidth", self.bandwidth, low=0.0, low_inclusive=False, allow_none=True)
        check_int("n_init", self.n_init, low=1)
        check_int("kmeans_max_iter", self.kmeans_max_iter, low=1)
        if not isinstance(self.persist_embedding, (bool, np.bool_)):
            raise InputValidationError(
                f"`persist_embedding` must be True or False, got {self.persist_embedding!r}.")
        if k > n_samples:
            raise InputValidationError(f"n_samples={n_samples} should be >= n_clusters={k}.")
        if m is None:
            return default_n_anchors(n_samples, c, k)
        if m > n_samples:
            raise InputValidationError(
                f"n_anchors={m} must be <= n_samples={n_samples}; lower n_anchors or pass "
                "n_anchors=None (ceil(anchor_factor * sqrt(N)))."
            )
        if k > m:
            raise InputValidationError(
                f"n_clusters={k} must be <= the number of anchors (n_anchors={m}); raise n_anchors or "
                "lower n_clusters."
            )
        return m

    def _as_single_view(self, X):
        views = as_views(X)
        if len(views) != 1:
            raise InputValidationError(
                f"{type(self).__name__} takes one 2-D array, got {len(views)} views {list(views)}; "
                "concatenate them along columns (np.hstack / da.concatenate(..., axis=1)) after "
                "putting them on comparable scales."
            )
        X = next(iter(views.values()))
        if is_dask_array(X):
            X = align_row_chunks([X], ["X"])[0]
        else:
            check_finite({"X": X})
        return X

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None):
        """Cluster the rows of X (Algorithm 1).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (N, n_features)
            Dask arrays must be chunked along rows (column chunks are merged).  NaN/inf is
            rejected (for Dask input when the first pass reaches the bad chunk).
        y : ignored

        Returns
        -------
        self
        """
        self._fit(X)
        return self

    def fit_transform(self, X, y=None, **fit_params):
        """Fit and return the training embedding H, shape (N, n_clusters).

        For Dask input H is the (persisted, if ``persist_embedding``) Dask array k-means ran on.
        """
        return self._fit(X)

    def fit_predict(self, X, y=None, **kwargs):
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def _fit(self, X):
        X = self._as_single_view(X)
        N, n_features = int(X.shape[0]), int(X.shape[1])
        m = self._validate_params(N)
        k = int(self.n_clusters)
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        kernel_dtype = common_float_dtype({"X": X})

        # Anchors and the bandwidth sample: one read of the chunks that hold them.
        t0 = time.perf_counter()
        anchor_idx = sample_landmark_indices({"X": X}, m, random_state=rng)
        wanted = anchor_idx
        if self.bandwidth is None:
            sigma_idx = (np.arange(N) if N <= BANDWIDTH_SAMPLE_SIZE
                         else np.sort(rng.choice(N, BANDWIDTH_SAMPLE_SIZE, replace=False)))
            wanted = np.union1d(anchor_idx, sigma_idx)
        rows = gather_rows({"X": X}, wanted)["X"]
        if np.issubdtype(rows.dtype, np.floating) and not np.isfinite(rows).all():
            # Dask input is otherwise checked in the first pass; NaN here would make sigma NaN.
            row = int(wanted[np.argmax(~np.isfinite(rows).all(axis=1))])
            raise InputValidationError(
                f"Input contains NaN or infinity: view 'X', row {row} (an anchor or "
                "bandwidth-sample row)."
            )
        anchors = np.ascontiguousarray(rows[np.searchsorted(wanted, anchor_idx)], dtype=kernel_dtype)
        if self.bandwidth is None:
            sample = rows[np.searchsorted(wanted, sigma_idx)].astype(np.float64)
            # eq. 24 on the sample: (1/s^2) sum_ij ||x_i - x_j||^2 = 2 sum_f var_f (ddof=0).
            sigma2 = float(2.0 * ((sample - sample.mean(axis=0)) ** 2).sum() / sample.shape[0])
            if not sigma2 > 0.0:
                where = ("all rows" if N <= BANDWIDTH_SAMPLE_SIZE
                         else f"the {sample.shape[0]} rows sampled")
                raise InputValidationError(
                    f"X has zero variance on {where} (sigma^2 = mean squared pairwise distance = "
                    f"{sigma2}): the points are identical, so there is nothing to cluster; pass "
                    "`bandwidth` explicitly if only the sample is constant."
                )
        else:
            sigma2 = float(self.bandwidth) ** 2
        base = _ModelArrays.build(anchors, sigma2)
        timings["sample_s"] = time.perf_counter() - t0

        # Step 1-2: Kx = U S U^T, then d = P U S^-1 U^T (P^T 1) / N = P q.
        t0 = time.perf_counter()
        K = _kernel_block(anchors, base)
        lam, U = _anchor_eigen(K, kernel_dtype)
        if lam.size < k:
            raise InputValidationError(
                f"the anchor similarity matrix Kx has numerical rank {lam.size} < n_clusters={k} "
                f"(sigma={math.sqrt(sigma2):.4g}, {m} anchors): the anchors are (nearly) identical at "
                "this bandwidth; raise n_anchors, change `bandwidth`, or lower n_clusters."
            )
        col_sums = _blockwise_sum(X, _column_sums, base, m)
        q = U @ ((U.T @ col_sums) / lam) / N
        mean_degree = float(col_sums @ q) / N  # = mean_i d_i, without another pass
        floor = (DEGREE_FLOOR_RELATIVE * abs(mean_degree) if mean_degree != 0
                 else np.finfo(np.float64).tiny)
        timings["degrees_s"] = time.perf_counter() - t0

        # Step 3: Z^T Z from C = P^T D^-1 P, tree-summed; F never formed.
        t0 = time.perf_counter()
        stage = dataclasses.replace(base, degree_weights=q, degree_floor=floor)
        flat = _blockwise_sum(X, _gram, stage, m * m + 1)
        C, n_floored = flat[:-1].reshape(m, m), round(float(flat[-1]))
        s, M, pep_combined = _spectral_projection(C, lam, U, k)
        M = _fix_signs(M, K, q, floor)
        timings["gram_s"] = time.perf_counter() - t0
        if n_floored:
            warnings.warn(
                f"{n_floored} of {N} points have an approximate degree <= {floor:.3g} (far from every "
                "anchor); it was floored, so their embedding rows are unreliable. More anchors or a "
                "larger bandwidth help.", EmbeddingStabilityWarning, stacklevel=3)

        self.n_features_in_ = n_features
        self.n_samples_fit_ = N
        self.n_anchors_ = m
        self.anchors_ = anchors
        self.anchor_indices_ = anchor_idx
        self.sigma_ = math.sqrt(sigma2)
        self.anchor_eigenvalues_ = lam
        self.kernel_rank_ = int(lam.size)
        self.degree_weights_ = q
        self.degree_floor_ = float(floor)
        self.embedding_projection_ = M
        self.singular_values_ = s

        # Step 4: H = D^-1/2 F = P M / d, then k-means on its rows.
        t0 = time.perf_counter()
        H = _embed(X, self._model_arrays())
        if is_dask_array(H) and self.persist_embedding:
            import dask

            logger.info("persisting the Nystrom embedding H: %d x %d float64 = %d bytes",
                        N, k, H.nbytes)
            H = dask.persist(H)[0]
        timings["embed_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        km = kmeans(H, k, n_init=self.n_init, max_iter=self.kmeans_max_iter,
                    random_state=rng.randint(np.iinfo(np.int32).max))
        timings["kmeans_s"] = time.perf_counter() - t0
        self.cluster_centers_ = np.asarray(km.centers, dtype=np.float64)
        self.labels_ = km.labels
        self.inertia_ = float(km.inertia)
        self.n_iter_ = int(km.n_iter)
        # PEP (t = k, GMLKM seed Definition 2) of the one base kernel (the anchors' Gaussian
        # kernel; its trace is the full spectrum's sum, m) and of the combined similarity.
        pep_anchor = float(np.sum(self.anchor_eigenvalues_[:k]) / np.trace(K))
        self.diagnostics_ = {"n_degrees_floored": n_floored, "timings": timings,
                             "pep": {"t": k, "base": [pep_anchor], "combined": pep_combined}}
        return H

    def _model_arrays(self) -> _ModelArrays:
        return _ModelArrays.build(self.anchors_, self.sigma_**2,
                                  degree_weights=self.degree_weights_,
                                  degree_floor=self.degree_floor_,
                                  projection=self.embedding_projection_)

    # ------------------------------------------------------------------ inference (Algorithm 2)
    def _check_predict_input(self, X):
        check_is_fitted(self, "embedding_projection_")
        X = self._as_single_view(X)
        if X.shape[1] != self.n_features_in_:
            raise InputValidationError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def transform(self, X):
        """Embed points with Algorithm 2 (no new SVD): h(x) = W(x, anchors) @ M / d(x).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, n_features_in_)

        Returns
        -------
        H : ndarray or lazy dask.array.Array of shape (n, n_clusters), float64
            At training points this is Algorithm 1's H = D^-1/2 F (see Notes of the class).
        """
        return _embed(self._check_predict_input(X), self._model_arrays())

    def predict(self, X):
        """Index of the nearest ``cluster_centers_`` row for every embedded point.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, n_features_in_)

        Returns
        -------
        labels : ndarray of shape (n,), int64 (lazy Dask array for Dask input)
        """
        H = self.transform(X)
        if is_dask_array(H):
            return H.map_blocks(_assign, self.cluster_centers_, drop_axis=1, dtype=np.int64,
                                meta=np.empty((0,), dtype=np.int64))
        return _assign(H, self.cluster_centers_)

    # ------------------------------------------------------------------ state without pickle
    def _model_state(self) -> dict[str, Any]:
        """Everything ``predict``/``transform`` need, without pickle.

        Returns ``{"attrs": JSON-able dict, "arrays": {name: (dims tuple, ndarray)}}`` with dims
        among "anchor", "feature", "component", "cluster" and "anchor_rank".

        ``labels_`` (N values) is not part of the model; store it with the run.
        """
        check_is_fitted(self, "embedding_projection_")
        attrs = {
            "format": _STATE_FORMAT,
            "params": {k: _json_param(v) for k, v in self.get_params(deep=False).items()},
            "n_features_in": int(self.n_features_in_),
            "n_samples_fit": int(self.n_samples_fit_),
            "sigma": float(self.sigma_),
            "degree_floor": float(self.degree_floor_),
            "inertia": float(self.inertia_),
            "n_iter": int(self.n_iter_),
            "n_degrees_floored": int(self.diagnostics_["n_degrees_floored"]),
            "pep": self.diagnostics_.get("pep"),
        }
        json.dumps(attrs)  # fail here, not in the store, if something is not JSON
        arrays = {
            "anchors": (("anchor", "feature"), self.anchors_),
            "anchor_indices": (("anchor",), np.asarray(self.anchor_indices_, dtype=np.int64)),
            "anchor_eigenvalues": (("anchor_rank",), self.anchor_eigenvalues_),
            "degree_weights": (("anchor",), self.degree_weights_),
            "embedding_projection": (("anchor", "component"), self.embedding_projection_),
            "singular_values": (("component",), self.singular_values_),
            "cluster_centers": (("cluster", "component"), self.cluster_centers_),
        }
        return {"attrs": attrs, "arrays": arrays}

    @classmethod
    def _from_model_state(cls, state) -> NystromSpectralClustering:
        """A fitted estimator (without ``labels_``) that predicts exactly like the saved one."""
        attrs, arrays = state["attrs"], state["arrays"]
        if attrs.get("format") != _STATE_FORMAT:
            raise InputValidationError(
                f"model state format {attrs.get('format')!r} is not {_STATE_FORMAT!r}; it was not "
                f"written by {cls.__name__}._model_state."
            )

        def get(name):
            value = arrays[name]
            return np.asarray(value[1] if isinstance(value, tuple) else value)

        est = cls(**attrs["params"])
        est.n_features_in_ = int(attrs["n_features_in"])
        est.n_samples_fit_ = int(attrs["n_samples_fit"])
        est.sigma_ = float(attrs["sigma"])
        est.degree_floor_ = float(attrs["degree_floor"])
        est.inertia_ = float(attrs["inertia"])
        est.n_iter_ = int(attrs["n_iter"])
        est.diagnostics_ = {"n_degrees_floored": int(attrs["n_degrees_floored"]), "timings": {},
                            "pep": attrs.get("pep")}
        est.anchors_ = np.ascontiguousarray(get("anchors"))
        est.anchor_indices_ = get("anchor_indices").astype(np.int64)
        est.n_anchors_ = int(est.anchors_.shape[0])
        est.anchor_eigenvalues_ = get("anchor_eigenvalues")
        est.kernel_rank_ = int(est.anchor_eigenvalues_.size)
        est.degree_weights_ = get("degree_weights")
        est.embedding_projection_ = get("embedding_projection")
        est.singular_values_ = get("singular_values")
        est.cluster_centers_ = get("cluster_centers")
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags
