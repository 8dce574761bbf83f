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
import logging
import math
import time
import warnings
from typing import Any, ClassVar

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._core._blocks import RowBlocks, cache_block_rows
from .._core._cluster import persist_and_wait
from .._core._distances import bandwidth_statistic, check_bandwidth, sq_distances
from .._core._kmeans import assign_labels, kmeans
from .._core._linalg import largest_entry_signs
from .._core._sampling import gather_rows, sample_landmark_indices
from .._core._state import StateArrays
from .._core._validation import check_finite, check_k_at_most, common_float_dtype, shown_value
from ..errors import EmbeddingStabilityWarning, InputValidationError, ParameterError
from . import _params
from ._base import MkdistEstimator
from ._registry import register

__all__ = ["NystromSpectralClustering", "default_n_anchors"]

logger = logging.getLogger("mkdist")

#: Rows sampled uniformly (without replacement) to estimate the bandwidth by eq. 24.  The
#: estimate is a mean over s^2 pairs; its relative standard error is about 1/sqrt(s), 1% at 10k rows.
BANDWIDTH_SAMPLE_SIZE = 10_000

#: Most rows per kernel block (NumPy input, and inside every Dask task); fewer when m is large,
#: so that a (block, m) float64 kernel block stays cache-sized (``mkdist._core._blocks.cache_block_rows``).
BLOCK_ROWS = 8192

#: Degrees below this fraction of the mean degree are raised to it (see ``_ModelArrays``).
DEGREE_FLOOR_RELATIVE = 1e-8


def default_n_anchors(n_samples: int, anchor_factor: float = 1.0, n_clusters: int = 2) -> int:
    """Anchors used when ``n_anchors=None``: ``ceil(anchor_factor * sqrt(N))``, within [n_clusters, N].

    The seed (Theorem 3) shows m = Theta(sqrt(N)) balances the excess clustering risk
    against the O(N m (d + m)) cost; its experiments use ceil(sqrt(N)) (anchor_factor = 1).
    """
    m = math.ceil(anchor_factor * math.sqrt(n_samples))
    return int(min(n_samples, max(m, n_clusters)))


# ----------------------------------------------------------------------------- row functions
@dataclasses.dataclass(frozen=True, eq=False)
class _ModelArrays:
    """The small arrays the row functions need; shipped to Dask as ONE graph key.

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
    inv_two_sigma2: float
    degree_weights: np.ndarray | None = None
    degree_floor: float = 0.0
    projection: np.ndarray | None = None

    @classmethod
    def build(cls, anchors: np.ndarray, sigma: float, **kwargs) -> _ModelArrays:
        a = np.ascontiguousarray(anchors)
        return cls(a, np.einsum("ij,ij->i", a, a), 1.0 / (2.0 * float(sigma) ** 2), **kwargs)


def _kernel_block(X: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    """W(X, anchors) = exp(-||x - a||^2 / (2 sigma^2)) for one row block, shape (b, m), float64.

    The (b, d) x (d, m) GEMM, the costly step, runs in the anchors' dtype; the exponent and
    everything after it in float64 (the Gram matrix is later scaled by S^-1/2, which would
    amplify float32 rounding).  Assumes X is a finite 2-D block with the anchors' feature count.
    """
    Xc = np.asarray(X, dtype=arrays.anchors.dtype)
    d2 = sq_distances(Xc, arrays.anchors, b_sq=arrays.anchor_sq_norms).astype(np.float64, copy=False)
    d2 *= -arrays.inv_two_sigma2
    return np.exp(d2, out=d2)


def _degrees(P: np.ndarray, arrays: _ModelArrays) -> np.ndarray:
    return np.maximum(P @ arrays.degree_weights, arrays.degree_floor)


def _column_sums(blocks: list, arrays: _ModelArrays) -> np.ndarray:
    """Pass 1 partial: P^T 1 over the rows of the block, shape (m,)."""
    return _kernel_block(blocks[0], arrays).sum(axis=0)


def _gram(blocks: list, arrays: _ModelArrays) -> np.ndarray:
    """Pass 2 partial: P^T D^-1 P (m x m) over the block's rows, flattened, then the count of
    floored degrees; shape (m * m + 1,)."""
    P = _kernel_block(blocks[0], arrays)
    raw = P @ arrays.degree_weights
    n_floored = float(np.count_nonzero(raw < arrays.degree_floor))
    C = (P / np.maximum(raw, arrays.degree_floor)[:, None]).T @ P
    return np.concatenate([C.ravel(), [n_floored]])


def _embed_rows(blocks: list, arrays: _ModelArrays) -> np.ndarray:
    """Algorithm 2 on the rows of the block: h(x) = P(x) M / d(x), shape (b, k), float64."""
    P = _kernel_block(blocks[0], arrays)
    return (P @ arrays.projection) / _degrees(P, arrays)[:, None]


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
    """Top-k singular values of Z, M = U S^-1/2 V_k Sigma_k^-1, PEP(Z Z^T, k) and the top
    eigenvalues of Z Z^T (up to max(2k, k + 10) of them), from C = P^T D^-1 P.

    Z^T Z = S^-1/2 U^T C U S^-1/2 = V Sigma^2 V^T gives Z's right singular vectors V and
    singular values Sigma; the left ones are F = Z V Sigma^-1 (never formed: H = P M / d).
    """
    B = U / np.sqrt(lam)[None, :]            # U S^-1/2, (m, r)
    G = B.T @ C @ B
    e, V = np.linalg.eigh((G + G.T) / 2.0)
    # Z Z^T (N x N, the normalised bipartite similarity) has the eigenvalues of G = Z^T Z,
    # so its principal eigenvalue proportion comes from the small side.
    pep = float(np.sum(e[::-1][:k]) / np.trace(G)) if np.trace(G) > 0 else float("nan")
    spectrum = e[::-1][:max(2 * k, k + 10)].copy()
    e, V = e[::-1][:k], V[:, ::-1][:, :k]
    # rank(Z) >= r >= k (Z restricted to the anchor rows is D^-1/2 U S^1/2), so e_k > 0 in
    # exact arithmetic; the floor only keeps rounding from dividing by zero.
    s = np.sqrt(np.maximum(e, np.finfo(np.float64).tiny))
    return s, B @ (V / s[None, :]), pep, spectrum


def _orient_by_anchor_embedding(M: np.ndarray, K: np.ndarray, q: np.ndarray, floor: float) -> np.ndarray:
    """Flip columns of the projection M so that the anchors' embedding h = K M / (K q) has
    its largest |h_t| positive in every column.

    The signs are read on the embedding, not on M itself, because the embedding is what
    k-means and ``transform`` see; it also makes the first, constant column of H positive.
    """
    H_anchors = (K @ M) / np.maximum(K @ q, floor)[:, None]
    return M * largest_entry_signs(H_anchors)[None, :]


# ----------------------------------------------------------------------------- estimator
class NystromSpectralClustering(MkdistEstimator):
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
    n_clusters : int, "auto" or (k_min, k_max), default=8
        k, the number of clusters and of embedding dimensions (>= 2).  "auto" or a range:
        chosen from the anchors' Gaussian kernel Kx by the eigengap of its kNN graph, or the
        modularity of its spectral partitions when there is no gap or the gap's partition is
        clearly less modular (``mkdist._core._nclusters``;
        "auto" searches [2, min(50, m // 10)], so it needs m >= 20 anchors to look beyond
        K = 2), before the degree and Gram passes over the rows (``n_clusters_``,
        ``n_clusters_choice_``).
    n_anchors : int, default=None
        m, the number of anchors (n_clusters <= m <= N).  None: ``ceil(anchor_factor *
        sqrt(N))``, raised to n_clusters and capped at N (see :func:`default_n_anchors`).
    anchor_factor : float, default=1.0
        c in m = ceil(c sqrt(N)) when ``n_anchors=None``.  The paper uses c = 1 (Theorem 3:
        m = Theta(sqrt(N)) balances accuracy and cost).
    bandwidth : float, default=None
        sigma in W(x, y) = exp(-||x - y||^2 / (2 sigma^2)) -- the one meaning of ``bandwidth``
        in mkdist (as in KernelSpec and the RFF estimators).  None: the paper's eq. 24,
        W(x, y) = exp(-||x - y||^2 / mean squared pairwise distance), i.e. sigma^2 = half the
        mean squared distance over pairs of distinct rows, estimated on
        ``BANDWIDTH_SAMPLE_SIZE`` = 10,000 uniformly sampled rows (all rows when N is smaller)
        from moments, without forming pairs (``mkdist._core._distances.bandwidth_statistic``).
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
    n_clusters_ : int
        K of the fit (``n_clusters``, or the K chosen for "auto" / a range).
    n_clusters_choice_ : NClustersChoice or None
        The K choice (confidence, runner-up, candidates, ambiguous); None for an integer K.
    anchors_ : ndarray of shape (n_anchors_, n_features_in_)
        The anchor rows, in the dtype the kernel is computed in (float32 for float32 input
        or integer input of <= 2 bytes, else float64).
    anchor_indices_ : ndarray of shape (n_anchors_,), int64
        Row numbers of the anchors in the training input (sorted).
    n_anchors_ : int
        m.
    sigma_ : float
        Bandwidth sigma of exp(-d^2 / (2 sigma^2)) (given, or from the eq. 24 estimate).
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
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
    spectrum_ : ndarray
        Top eigenvalues of Z Z^T / N (the normalised bipartite similarity), decreasing;
        the first is 1 when no degree was floored.
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
    >>> from mkdist._methods._nystrom import NystromSpectralClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.1, (50, 2)), rng.normal(3, 0.1, (50, 2))]
    >>> model = NystromSpectralClustering(n_clusters=2, random_state=0).fit(X)
    >>> model.n_anchors_, len(set(model.labels_[:50])), len(set(model.labels_))
    (10, 1, 2)
    >>> bool((model.predict(X) == model.labels_).all())
    True
    """

    method: ClassVar[str] = "nystrom"
    multi_view: ClassVar[bool] = False
    state_format: ClassVar[str] = "mkdist.NystromSpectralClustering/2"
    _param_constraints: ClassVar[dict[str, list]] = _params.NYSTROM

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
    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        """Resolve m against N."""
        super()._check_params_vs_input(n_samples, views)
        k = self._largest_k()
        if self.n_anchors is None:
            m = default_n_anchors(n_samples, float(self.anchor_factor), k)
            self._check_k_range(m, "anchors")
            return {"n_anchors": m}
        m = int(self.n_anchors)
        k_range = self._check_k_range(m, "anchors")
        k = k if k_range is None else k_range[1]
        if m > n_samples:
            raise InputValidationError(
                f"n_anchors={m} must be <= n_samples={n_samples}; lower n_anchors or pass "
                "n_anchors=None (ceil(anchor_factor * sqrt(N))).")
        check_k_at_most(self.n_clusters, k, m, "anchors", "raise `n_anchors`")
        return {"n_anchors": m}

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

    def _fit(self, X):
        views = self._fit_views(X)
        N = int(next(iter(views.values())).shape[0])
        m = self._fit_checks["n_anchors"]
        rows = RowBlocks(views, block_rows=min(BLOCK_ROWS, cache_block_rows(m, 8)))
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        kernel_dtype = common_float_dtype(views)

        # Anchors and the bandwidth sample: one read of the chunks that hold them.
        t0 = time.perf_counter()
        anchor_idx = sample_landmark_indices(views, m, random_state=rng)
        wanted = anchor_idx
        if self.bandwidth is None:
            sigma_idx = (np.arange(N) if N <= BANDWIDTH_SAMPLE_SIZE
                         else np.sort(rng.choice(N, BANDWIDTH_SAMPLE_SIZE, replace=False)))
            wanted = np.union1d(anchor_idx, sigma_idx)
        sampled = gather_rows(views, wanted)
        # Dask input is otherwise checked in the first pass; NaN here would make sigma NaN.
        check_finite(sampled, row_numbers=wanted)
        rows_in = next(iter(sampled.values()))
        anchors = np.ascontiguousarray(rows_in[np.searchsorted(wanted, anchor_idx)], dtype=kernel_dtype)
        if self.bandwidth is None:
            sample = rows_in[np.searchsorted(wanted, sigma_idx)]
            where = "all rows" if N <= BANDWIDTH_SAMPLE_SIZE else f"the {sample.shape[0]} rows sampled"
            # eq. 24: W = exp(-d^2 / mean d^2), so sigma^2 = mean d^2 / 2 in exp(-d^2 / (2 sigma^2)).
            msd_root = bandwidth_statistic(sample, "mean")
            check_bandwidth(msd_root, rows.names[0], f"the root mean squared distance of {where}")
            sigma = msd_root / math.sqrt(2.0)
        else:
            sigma = float(self.bandwidth)
        base = _ModelArrays.build(anchors, sigma)
        timings["sample_s"] = time.perf_counter() - t0

        # Step 1-2: Kx = U S U^T, then d = P U S^-1 U^T (P^T 1) / N = P q.
        t0 = time.perf_counter()
        K = _kernel_block(anchors, base)
        # K from the anchors' kernel for "auto" / a range (the seed: the integer random_state,
        # else 0, so that the choice draws nothing from the fit's random stream).
        seed = int(self.random_state) if isinstance(self.random_state, (int, np.integer)) else 0
        t1 = time.perf_counter()
        k = self._choose_n_clusters(np.asarray(K, dtype=np.float64), m, seed)
        if self.n_clusters_choice_ is not None:
            timings["choose_k_s"] = time.perf_counter() - t1
        lam, U = _anchor_eigen(K, kernel_dtype)
        if lam.size < k:
            raise ParameterError(
                "n_clusters", shown_value(self.n_clusters),
                f": K = {k} is more than the numerical rank {lam.size} of the anchor similarity matrix Kx "
                f"(sigma={sigma:.4g}, {m} anchors): the anchors are (nearly) identical at this bandwidth; "
                "raise `n_anchors`, change `bandwidth`, or lower `n_clusters`.")
        col_sums = rows.reduce(_column_sums, base, width=m, name="nystrom-degrees")
        q = U @ ((U.T @ col_sums) / lam) / N
        mean_degree = float(col_sums @ q) / N  # = mean_i d_i, without another pass
        floor = (DEGREE_FLOOR_RELATIVE * abs(mean_degree) if mean_degree != 0
                 else np.finfo(np.float64).tiny)
        timings["degrees_s"] = time.perf_counter() - t0

        # Step 3: Z^T Z from C = P^T D^-1 P, tree-summed; F never formed.
        t0 = time.perf_counter()
        stage = dataclasses.replace(base, degree_weights=q, degree_floor=floor)
        flat = rows.reduce(_gram, stage, width=m * m + 1, name="nystrom-gram", check_finite=False)
        C, n_floored = flat[:-1].reshape(m, m), round(float(flat[-1]))
        s, M, pep_combined, spectrum = _spectral_projection(C, lam, U, k)
        M = _orient_by_anchor_embedding(M, K, q, floor)
        timings["gram_s"] = time.perf_counter() - t0
        if n_floored:
            warnings.warn(
                f"{n_floored} of {N} points have an approximate degree <= {floor:.3g} (far from every "
                "anchor); it was floored, so their embedding rows are unreliable. More anchors or a "
                "larger bandwidth help.", EmbeddingStabilityWarning, stacklevel=3)

        self._set_fitted_views(views)
        self.n_samples_fit_ = N
        self.n_anchors_ = m
        self.anchors_ = anchors
        self.anchor_indices_ = anchor_idx
        self.sigma_ = float(sigma)
        self.anchor_eigenvalues_ = lam
        self.kernel_rank_ = int(lam.size)
        self.degree_weights_ = q
        self.degree_floor_ = float(floor)
        self.embedding_projection_ = M
        self.singular_values_ = s
        self.spectrum_ = spectrum / N

        # Step 4: H = D^-1/2 F = P M / d, then k-means on its rows.
        t0 = time.perf_counter()
        H = rows.map(_embed_rows, self._model_arrays(), n_cols=k, dtype=np.float64, name="nystrom-embed",
                     check_finite=False)
        if rows.is_dask and self.persist_embedding:
            logger.info("persisting the Nystrom embedding H: %d x %d float64 = %d bytes", N, k, H.nbytes)
            H = persist_and_wait(H)
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
        return _ModelArrays.build(self.anchors_, self.sigma_, degree_weights=self.degree_weights_,
                                  degree_floor=self.degree_floor_, projection=self.embedding_projection_)

    # ------------------------------------------------------------------ inference (Algorithm 2)
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
        rows = RowBlocks(self._predict_views(X), block_rows=min(BLOCK_ROWS, cache_block_rows(self.n_anchors_, 8)))
        return rows.map(_embed_rows, self._model_arrays(), n_cols=int(self.n_clusters_), dtype=np.float64,
                        name="nystrom-embed")

    def predict(self, X):
        """Index of the nearest ``cluster_centers_`` row for every embedded point.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, n_features_in_)

        Returns
        -------
        labels : ndarray of shape (n,), int64 (lazy Dask array for Dask input)
        """
        return assign_labels(self.transform(X), self.cluster_centers_)

    # ------------------------------------------------------------------ state and summary
    def _state(self) -> tuple[dict, dict]:
        attrs = {"n_samples_fit": int(self.n_samples_fit_), "sigma": float(self.sigma_),
                 "degree_floor": float(self.degree_floor_), "inertia": float(self.inertia_),
                 "n_iter": int(self.n_iter_)}
        arrays = {
            "anchors": (("anchor", "feature"), self.anchors_),
            "anchor_indices": (("anchor",), np.asarray(self.anchor_indices_, dtype=np.int64)),
            "anchor_eigenvalues": (("anchor_rank",), self.anchor_eigenvalues_),
            "degree_weights": (("anchor",), self.degree_weights_),
            "embedding_projection": (("anchor", "component"), self.embedding_projection_),
            "singular_values": (("component",), self.singular_values_),
            "spectrum": (("eigenvalue",), self.spectrum_),
            "cluster_centers": (("cluster", "component"), self.cluster_centers_),
        }
        return attrs, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        self.n_samples_fit_ = int(attrs["n_samples_fit"])
        self.sigma_ = float(attrs["sigma"])
        self.degree_floor_ = float(attrs["degree_floor"])
        self.inertia_ = float(attrs["inertia"])
        self.n_iter_ = int(attrs["n_iter"])
        self.anchors_ = np.ascontiguousarray(get("anchors"))
        self.anchor_indices_ = get("anchor_indices", np.int64)
        self.n_anchors_ = int(self.anchors_.shape[0])
        self.anchor_eigenvalues_ = get("anchor_eigenvalues")
        self.kernel_rank_ = int(self.anchor_eigenvalues_.size)
        self.degree_weights_ = get("degree_weights")
        self.embedding_projection_ = get("embedding_projection")
        self.singular_values_ = get("singular_values")
        self.spectrum_ = get("spectrum")
        self.cluster_centers_ = get("cluster_centers")

    def landmark_kernel(self) -> np.ndarray:
        """The anchors' Gaussian kernel Kx, (m, m): what ``n_clusters="auto"`` chooses K on."""
        check_is_fitted(self, "anchors_")
        return np.asarray(_kernel_block(self.anchors_, _ModelArrays.build(self.anchors_, self.sigma_)),
                          dtype=np.float64)

    def _kernel_name(self) -> str:
        return f"{self.view_names_[0]}:gaussian(sigma={self.sigma_:.4g})"

    def _summary_fields(self) -> dict[str, Any]:
        pep = self.diagnostics_.get("pep") or {}
        name = self._kernel_name()
        return {
            "n_landmarks": int(self.n_anchors_), "n_components": int(self.n_clusters_), "kernel_names": [name],
            "n_iter": int(self.n_iter_),
            "spectrum": {"values": np.asarray(self.spectrum_).tolist(), "k": int(self.n_clusters_),
                         "what": "top eigenvalues of Z Z^T / N, the normalised Nystrom bipartite similarity"},
            "pep": {"t": pep.get("t"), "base": dict(zip([name], pep.get("base", []))),
                    "combined": pep.get("combined")} if pep else None,
        }


register(NystromSpectralClustering)
