"""The GMLKM estimator, :class:`LateFusionClustering`: fit on landmarks, every row out of sample."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..._core._blocks import RowBlocks
from ..._core._distances import nearest_center
from ..._core._graph import apply_filter, build_graph
from ..._core._kernels import fit_preprocessing, kernel_blocks
from ..._core._kmeans import KMeansResult
from ..._core._linalg import top_eigenvalue_sum
from ..._core._pep import excess_pep, principal_eigenvalue_proportion
from ..._core._state import StateArrays
from ..._core._validation import check_finite, common_float_dtype
from ...errors import InputValidationError
from .. import _params
from .._base import KernelLandmarkEstimator
from .._registry import register
from ._fusion import fit_fusion, normalized_clusters, partition_copies
from ._model import LateFusionModel, embed_rows, label_rows
from ._partitions import DEFAULT_MIN_PEP_RATIO, BasePartitions, base_kernels, fit_base_partitions, fit_seeds

__all__ = ["DEFAULT_N_NEIGHBORS", "LateFusionClustering"]

#: Neighbours of the adaptive-neighbour graphs when ``n_neighbors=None`` (at most n - 2).  The
#: paper fixes 5; 10 raised the mean ACC over the 28 shared sets from 0.654 to 0.667 and the
#: sets beating k-means from 22 to 23 (10 seeds; ORL 0.82 -> 0.90, Yale 0.78 -> 0.88; MSRC-v1
#: 0.92 -> 0.87) and UCI mfeat pix from 0.938 to 0.945 (bench/RESULTS.md, late-fusion defaults).
DEFAULT_N_NEIGHBORS = 10


class LateFusionClustering(KernelLandmarkEstimator):
    """Graph-filtered late-fusion multiple kernel clustering (GMLKM) with out-of-sample assignment.

    Fits GMLKM (Du et al., Algorithm 1) on ``n_landmarks`` sampled points and assigns every
    other point out of sample, so the cost is linear in the number of points.

    On the landmarks, every base kernel K_p (centred and normalised like in
    :class:`MultipleKernelClustering`) gives a base partition H_p, its top-d eigenvectors.
    Base kernels without cluster structure are dropped (see Notes).  Each partition gets a
    sparse adaptive-neighbour graph A_p and a low-pass filter
    G_p = sum_{o=1}^{o_bar} ((I + D_p^-1/2 A_p D_p^-1/2) / 2)^o.  Then labels Y, view weights
    gamma and filter weights mu minimise eq. 23,

        J(Y, gamma, mu) = ||(I - P_Y) G~ [gamma_1 H_1, ..., gamma_m H_m]||_F^2,
        G~ = sum_i mu_i G_i,  gamma and mu on the simplex,

    by alternating k-means (Y), gamma_p = (1/alpha_p) / sum_q (1/alpha_q) with
    alpha_p = ||(I - P_Y) G~ H_p||_F^2 (eq. 26), and the simplex QP min mu^T M mu,
    M_ij = <(I - P_Y) G_i H_g, (I - P_Y) G_j H_g>_F, H_g = [gamma_p H_p] (eq. 27, with gamma
    entering squared as the restriction of eq. 23 requires).  Each step minimises J over its
    variable, so J never increases (``objective_history_``).

    Parameters
    ----------
    n_clusters : int, "auto" or (k_min, k_max), default=8
        k, the number of clusters (>= 2).  "auto" or a range: chosen from the uniform
        combination of the preprocessed base kernels on the landmarks, as
        :class:`MultipleKernelClustering` does (``n_clusters_``, ``n_clusters_choice_``).
    kernels : str or list of KernelSpec/dict, default="auto"
        Base kernels, as in :class:`MultipleKernelClustering`: "auto" is the cosine kernel on a
        sparse view (< 10% non-zero entries) and three RBF kernels (``"rbf-grid"``) on a dense
        one.  "mkkm12" is the GMLKM paper's standard set per view (12 kernels: 7 Gaussians, 4
        polynomials, a cosine), slower and less accurate on the shared sets
        (``docs/algorithms.md``, "Late fusion").
    embedding_dim : int, default=None
        d, eigenvectors per base partition, n_clusters <= d <= n_landmarks.  None: 2k for
        k <= 10, else k (:func:`mkdist._methods._base.default_embedding_dim`; the paper picks d from
        {k, 2k, 3k, 4k}; measured: ``docs/algorithms.md``).  Eigenpairs with
        lambda <= 1e-8 lambda_1 (numerical null space of a low-rank kernel) are left out of H_p.
    graph_filter_order : int, default=3
        o_bar >= 0.  0 gives plain late fusion (G~ = I), the ablation baseline on the same code
        path.  The paper picks o_bar from {1, 2, 3} per data set; 3 measured best and most
        stable (``docs/algorithms.md``).
    n_neighbors : int, default=None
        k of the adaptive-neighbour graphs, 1 <= k <= n_landmarks - 2 (the closed form needs the
        (k+1)-th neighbour).  None: min(10, n_landmarks - 2) (``DEFAULT_N_NEIGHBORS``; the
        paper fixes 5, 10 measured better: ``docs/algorithms.md``).
    n_landmarks : int, default=None
        Points the model is fitted on (n_clusters <= n <= N).  None: min(N, 2000).
    min_pep_ratio : float, default=0.02
        Degenerate-kernel rule (Notes): drop base kernel p when its excess k-PEP is below
        ``min_pep_ratio`` x the best kernel's.  0 keeps every kernel (the paper's method as
        printed; the ablation).  0.02 (``DEFAULT_MIN_PEP_RATIO``) keeps the cosine kernels of
        sparse views, whose spectrum is spread (ACM: 0.03-0.04 of its near-constant view4's),
        and still drops near-identity Gaussians (~0.01).  Independently of it, the kernels of a
        view that is constant or nearly so on the landmarks are dropped (Notes).
    filter_weights : {"learned", "uniform"}, default="learned"
        "learned": mu from eq. 27.  "uniform": mu = 1/m' fixed (a guard for data whose graphs
        are unreliable; the ablation of the mu step).
    center : bool, default=True
        Centre every kernel in feature space at the landmark mean.
    normalize : {"diagonal", "trace", None}, default="diagonal"
        Kernel normalisation after centring.
    scale : {"auto", None, "none", "minmax", "standard"}, default="auto"
        Per-feature scaling estimated on the landmarks (``mkdist._core._scaling.FeatureScaling``).
        "auto": "minmax" on dense views, none on sparse ones (< 10% non-zero entries, the
        views ``kernels="auto"`` gives the cosine kernel): min-max scaling gives a word seen
        once the weight of the most frequent one (measured: ``docs/algorithms.md``).
        None or "none": the features as given ("none" in a run's options, where ``scale=None``
        means the default).
    max_iter : int, default=30
        Maximum sweeps of Algorithm 1.
    tol : float, default=1e-6
        Stop when a sweep lowers J by <= tol x J.
    n_init : int, default=10
        k-means++ restarts of the first Y step; later Y steps are Lloyd from the current clusters.
    cluster_all_points : bool, default=True
        When there are fewer landmarks than rows: run the final k-means (k-means++ with
        ``n_init`` restarts, then Lloyd; across the Dask cluster for Dask input) on the
        embedding H~ of all N rows, as MKC-AE does on H_N, and keep its centroids; landmark
        rows get the label of their nearest final centroid.  False keeps the landmark
        clustering's centroids (``normalize_embedding``'s, else Algorithm 1's) and assigns
        every row to the nearest one; landmarks keep their labels, since both end with Lloyd
        run to a fixed point, where every landmark is nearest to its own cluster's centroid.
        With as many landmarks as rows there is nothing to add and the landmark clustering's
        centroids are kept either way (measured: ``docs/algorithms.md``).  For Dask input H~
        (N x D, in ``dtype``) is persisted on the workers for the Lloyd passes.
    normalize_embedding : bool, default=True
        Cluster the rows of H~ scaled to unit length, as ``MultipleKernelClustering`` clusters
        its embedding and the SimpleMKKM authors' code its H (the spectral-clustering step of
        Ng, Jordan & Weiss): Algorithm 1 runs unchanged (its gamma, mu and labels Y), then the
        landmarks' clusters are those of k-means on their unit rows -- of two candidates the
        one with the lower k-means objective: Lloyd from the means of Algorithm 1's clusters,
        and ``n_init`` k-means++ restarts (``diagnostics_["normalized_kmeans"]``).
        ``transform`` returns the unit rows, the final k-means (``cluster_all_points``) and
        ``predict`` work on them (measured, and why both candidates: ``docs/algorithms.md``).
        False: the raw H~ and Algorithm 1's labels and centroids, the paper's discretisation.
    dtype : {None, "float32", "float64"}, default=None
        Precision of the out-of-sample embedding H~ (``transform``, the embedding the final
        k-means reads, ``predict``): its kernel blocks, its neighbour searches and the rows it
        returns.  None: float32 if every view is float32 (as ``MultipleKernelClustering``).
        The landmark fit, the filters' weights and the neighbour distances that set them are
        float64 either way.  Column j of h_p(x) carries the kernel rows' float32 rounding
        times lambda_1 / lambda_j; pass "float64" when trailing eigenvalues are tiny
        (measured: ``docs/algorithms.md``).
    full_pep : bool, default=False
        Also record beta(G~ K_p G~, k) for every kept base kernel and for the combined kernel
        sum_p gamma_p^2 K_p, before and after filtering.  Costs a second pass over the base
        kernels (kernel, two sparse-dense products and a partial eigensolve each): for
        diagnostics on moderate n.
    random_state : int, RandomState or None, default=None
        Landmark sampling, bandwidth heuristic, pilot landmarks and k-means.

    Attributes
    ----------
    n_clusters_ : int
        K of the fit (``n_clusters``, or the K chosen for "auto" / a range).
    n_clusters_choice_ : NClustersChoice or None
        The K choice (confidence, runner-up, candidates, ambiguous); None for an integer K.
    labels_ : ndarray of shape (N,), int64, or dask.array.Array
        Cluster of every training row (lazy for Dask input): the final k-means on all rows
        (``cluster_all_points``), else the nearest of the landmark clustering's centroids (for
        the landmarks: their fitted labels).  Equal to ``predict`` on the training rows.
    cluster_centers_ : ndarray of shape (n_clusters, D)
        Centroids in the filtered late-fusion embedding H~ (D = sum of the kept d_p), its
        rows scaled to unit length with ``normalize_embedding``.
    inertia_ : float
        k-means inertia, in the space of ``cluster_centers_``, of the clustering the centroids
        come from: the final k-means over all rows, or the landmark clustering.
    view_weights_ : ndarray of shape (m,)
        gamma on the simplex over all base kernels (0 for dropped ones).
    filter_weights_ : ndarray of shape (m,)
        mu on the simplex over all base kernels (0 for dropped ones).
    objective_history_ : ndarray of shape (n_iter_ + 1,)
        J after initialisation and after every sweep; non-increasing.
    n_iter_ : int
    converged_ : bool
    landmark_indices_ : ndarray of shape (n,)
    kernels_ : list of FittedKernel, length m
    kept_kernels_ : ndarray of shape (m',)
        Indices of the base kernels used in the fusion.
    merged_kernels_ : list of dict
        One record per base kernel that shares the partition (and graph) of a kept one, its
        kernel matrix on the landmarks being that one's to ``_DUPLICATE_RTOL`` (1e-3): index,
        name, into (the kept kernel's index), into_name, pep.  Its gamma is that kernel's and
        the two split that kernel's mu -- Algorithm 1 on both -- without a second eigensolve,
        graph or out-of-sample kernel row (Notes).
    dropped_kernels_ : list of dict
        One record per dropped kernel: index, name, pep, pep_exact, excess_pep, threshold, reason.
    embedding_dim_ : int
    diagnostics_ : dict
        ``pep_kernels`` (m,): beta(K_p, k) of every base kernel (an upper bound where
        ``pep_kernels_exact`` is False); ``pep_chance`` = k/n; ``pep_partitions_filtered``:
        beta(G~ H_p, k) per kept partition (unfiltered: k/d_p); ``pep_combined_before`` /
        ``pep_combined_after``: beta of H_g H_g^T and of H~ H~^T (the linear kernels eq. 23
        clusters, before / after the learned filter); with ``full_pep`` also
        ``pep_kernels_filtered`` and ``pep_kernel_combined_before`` / ``_after``; the
        per-step objective ``objective_steps``; ``normalized_kmeans`` (which start won and
        both candidates' inertia; None without ``normalize_embedding``); ``final_kmeans``
        (rows, inertia, n_iter) when
        the final k-means ran; ``timings`` (s).
    model_ : LateFusionModel
    n_features_in_ : int
        Total features over all views.
    n_features_per_view_ : dict of str to int
    view_names_ : list of str

    See Also
    --------
    MultipleKernelClustering : SimpleMKKM (kernel fusion) on landmarks.
    principal_eigenvalue_proportion : the PEP of Definition 2.

    Notes
    -----
    Which base kernels are dropped (degenerate ones, by their PEP; those of near-constant
    views) or merged (kernels with one partition), the out-of-sample formula for H~(x) and the
    measurements behind the defaults: ``docs/algorithms.md``, "Late fusion".

    References
    ----------
    Du, Jiang, Li, Guo, Chen, Li, Zhou, Qian, "Sharper Error Bounds in Late Fusion Multi-view
    Clustering Using Eigenvalue Proportion" (GMLKM).  Nie, Wang, Huang, "Clustering and
    projected clustering with adaptive neighbors", KDD 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from mkdist import LateFusionClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.3, (30, 2)), rng.normal(4, 0.3, (30, 2))]
    >>> model = LateFusionClustering(2, kernels="rbf-grid", random_state=0).fit(X)
    >>> len(set(model.labels_[:30])), len(set(model.labels_))
    (1, 2)
    """

    method: ClassVar[str] = "late-fusion"
    multi_view: ClassVar[bool] = True
    state_format: ClassVar[str] = "mkdist.LateFusionClustering/2"
    #: Landmarks when ``n_landmarks=None``: min(N, 2000).  The fit costs one dense n x n kernel
    #: and one partial eigensolve per base kernel (O(m n^2) memory traffic), a few seconds at
    #: n = 2000.
    max_default_landmarks: ClassVar[int] = 2000
    _model_type: ClassVar[type] = LateFusionModel
    #: The adaptive-neighbour graphs need n_neighbors + 1 <= n - 1 other landmarks, n_neighbors >= 1.
    _min_samples: ClassVar[int] = 4
    _param_constraints: ClassVar[dict[str, list]] = _params.LATE_FUSION

    def __init__(self, n_clusters: int = 8, *, kernels: Any = "auto", embedding_dim: int | None = None,
                 graph_filter_order: int = 3, n_neighbors: int | None = None, n_landmarks: int | None = None,
                 min_pep_ratio: float = DEFAULT_MIN_PEP_RATIO, filter_weights: str = "learned", center: bool = True,
                 normalize: str | None = "diagonal", scale: str | None = "auto", max_iter: int = 30,
                 tol: float = 1e-6, n_init: int = 10, cluster_all_points: bool = True,
                 normalize_embedding: bool = True, dtype: str | None = None, full_pep: bool = False,
                 random_state=None):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.embedding_dim = embedding_dim
        self.graph_filter_order = graph_filter_order
        self.n_neighbors = n_neighbors
        self.n_landmarks = n_landmarks
        self.min_pep_ratio = min_pep_ratio
        self.filter_weights = filter_weights
        self.center = center
        self.normalize = normalize
        self.scale = scale
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.cluster_all_points = cluster_all_points
        self.normalize_embedding = normalize_embedding
        self.dtype = dtype
        self.full_pep = full_pep
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        checks = super()._check_params_vs_input(n_samples, views)
        n = checks["n_landmarks"]
        nb = self._n_neighbors(n)
        if nb > n - 2:
            raise InputValidationError(
                f"`n_neighbors`={nb} must be >= 1 and < n_landmarks - 1 = {n - 1} (the adaptive-neighbour "
                f"weights need the (k+1)-th nearest of the {n - 1} other landmarks).")
        return checks

    def _n_neighbors(self, n_landmarks: int) -> int:
        """k of the adaptive-neighbour graphs: ``n_neighbors``, or when None
        min(``DEFAULT_N_NEIGHBORS``, n_landmarks - 2) (the closed form needs the (k+1)-th
        nearest of the n - 1 other landmarks)."""
        if self.n_neighbors is None:
            return int(max(1, min(DEFAULT_N_NEIGHBORS, n_landmarks - 2)))
        return int(self.n_neighbors)

    # ------------------------------------------------------------------ the pipeline's hooks
    def _landmark_sampling(self, seed: int) -> dict[str, Any]:
        return {"random_state": fit_seeds(seed)[0]}

    def fit_landmarks(self, landmark_views: dict, landmark_indices: np.ndarray, seed: int):
        """Base partitions, graphs and Algorithm 1 on the in-memory landmark rows.

        Sets every fitted attribute, Algorithm 1's centroids and landmark labels included
        (``fit_centroids`` may replace them by a k-means on all rows).
        """
        # Dask input: NaN among the landmarks is caught here, named by its row of the input.
        check_finite(landmark_views, row_numbers=landmark_indices)
        indices = np.asarray(landmark_indices)
        _, seed_base, seed_fusion = fit_seeds(seed)
        self.n_clusters_choice_ = None
        if self._check_k_range(indices.size) is not None:
            t0 = time.perf_counter()
            self._choose_n_clusters(self._uniform_landmark_kernel(landmark_views, seed_base), indices.size, seed)
            choose_s = time.perf_counter() - t0
        base = fit_base_partitions(
            landmark_views, n_clusters=self.n_clusters_, embedding_dim=self._embedding_dim(indices.size),
            kernels=self.kernels, center=bool(self.center), normalize=self.normalize, scale=self.scale,
            min_pep_ratio=float(self.min_pep_ratio), random_state=seed_base)
        self._fit_from_base(base, indices, seed_fusion, landmark_views=landmark_views,
                            dtype=self.dtype or common_float_dtype(landmark_views).name)
        if self.n_clusters_choice_ is not None:
            self.diagnostics_["timings"]["choose_k_s"] = choose_s
        return self

    def _uniform_landmark_kernel(self, landmark_views: Mapping[str, np.ndarray], seed_base: int) -> np.ndarray:
        """The uniform combination of the preprocessed base kernels on the landmarks, (n, n): the
        kernel ``n_clusters="auto"`` chooses K on.  The kernels are set up as ``fit_base_partitions``
        sets them up (``base_kernels``, same seed: the same bandwidths), formed one at a time (the
        fit never holds the (m, n, n) stack)."""
        from ..._core._nclusters import average_landmark_kernel

        setup, _ = base_kernels(landmark_views, kernels=self.kernels, scale=self.scale, random_state=seed_base)
        return average_landmark_kernel(setup.views, setup.kernels, bool(self.center), self.normalize)

    def _fit_from_base(self, base: BasePartitions, landmark_indices: np.ndarray, seed: int,
                       landmark_views: Mapping[str, np.ndarray] | None = None,
                       dtype: str | None = None) -> LateFusionModel:
        """Steps 2-3 (graphs, Algorithm 1) on fitted base partitions; sets the fitted attributes.

        Separate from ``fit_landmarks`` so that a benchmark can reuse one set of base
        partitions over several seeds / settings (they do not depend on the k-means seed).
        ``seed`` is the fusion seed (the third of ``fit_seeds``); ``dtype`` that of the
        out-of-sample path (default: the ``dtype`` parameter, else float64).
        """
        order = int(self.graph_filter_order)
        kept = base.kept
        k_nb = self._n_neighbors(next(iter(base.landmarks.values())).shape[0])
        t0 = time.perf_counter()
        H_cat = np.hstack([base.H[p] for p in kept])
        column_kernel = np.repeat(np.arange(kept.size), [base.H[p].shape[1] for p in kept])
        eig = np.concatenate([base.eigenvalues[p] for p in kept])
        graphs = [build_graph(base.H[p], k_nb) for p in kept]
        t_graph = time.perf_counter() - t0
        t0 = time.perf_counter()
        fusion = fit_fusion(H_cat, column_kernel, graphs, partition_copies(base.kernel_group, kept.size),
                             n_clusters=self.n_clusters_, order=order,
                             learn_mu=self.filter_weights == "learned", n_init=int(self.n_init),
                             max_iter=int(self.max_iter), tol=float(self.tol), random_state=seed)
        t_fusion = time.perf_counter() - t0
        if not fusion.converged:
            warnings.warn(f"GMLKM did not converge in max_iter={self.max_iter} sweeps.", RuntimeWarning,
                          stacklevel=4)
        model = LateFusionModel(
            view_names=list(base.view_names), n_features=dict(base.n_features), landmarks=base.landmarks,
            landmark_indices=np.asarray(landmark_indices, dtype=np.int64), scaling=base.scaling,
            kernels=list(base.kernels), kept=kept, preprocessing=base.preprocessing, partitions=H_cat,
            column_kernel=column_kernel, eigenvalues=eig, view_weights=fusion.gamma, filter_weights=fusion.mu,
            graph_filter_order=order, neighbor_indices=np.stack([np.ascontiguousarray(g.indices) for g in graphs]),
            neighbor_weights=np.stack([g.weights for g in graphs]), cluster_centers=fusion.centers,
            landmark_labels=fusion.labels, dtype=dtype or self.dtype or "float64", kernel_group=base.kernel_group,
            normalize_embedding=bool(self.normalize_embedding))
        normalized_kmeans = None
        if model.normalize_embedding:
            model.cluster_centers, normalized_kmeans = normalized_clusters(
                model.cluster_embedding, fusion.labels, self.n_clusters_, int(self.n_init), seed)
        # The landmarks' labels by the rule every other row follows (nearest centroid of H~), so
        # labels_, predict and assign_embedding agree by construction.  Algorithm 1 ends with Lloyd
        # run to a fixed point, where its labels are exactly these up to a distance tie at
        # rounding level (scikit-learn's distance arithmetic vs sq_distances).
        model.landmark_labels = nearest_center(model.cluster_embedding, model.cluster_centers)
        self._set_fitted_views(base.landmarks)
        self._set_model(model)
        self.__dict__.pop("kmeans_n_iter_", None)  # a previous fit's final k-means
        self.inertia_ = float(((model.cluster_embedding - model.cluster_centers[model.landmark_labels]) ** 2).sum())
        self.objective_history_ = np.asarray(fusion.objective_history)
        self.n_iter_ = int(fusion.n_iter)
        self.converged_ = bool(fusion.converged)
        self.embedding_dim_ = int(base.embedding_dim)
        self.dropped_kernels_ = list(base.dropped)
        self.merged_kernels_ = list(base.merged)
        k = self.n_clusters_
        n = model.n_landmarks
        pep_parts = [principal_eigenvalue_proportion(model.embedding[:, c], min(k, n), factor=True)
                     for c in model.column_slices]
        diag = {
            "n_landmarks": n,
            "pep_t": k,
            "pep_chance": k / n,
            "pep_kernels": base.pep.tolist(),
            "pep_kernels_exact": base.pep_exact.tolist(),
            "pep_threshold_excess":
                float(base.min_pep_ratio * max(excess_pep(base.pep[base.pep_exact], k / n).max(), 0))
                if base.pep_exact.any() else None,
            "kernel_names": [kk.name for kk in base.kernels],
            "kept_kernels": [base.kernels[p].name for p in kept],
            "pep_partitions_unfiltered": [k / c.size for c in model.column_slices],
            "pep_partitions_filtered": pep_parts,
            "pep_combined_before": principal_eigenvalue_proportion(H_cat * model.gamma_cols[None, :], k, factor=True),
            "pep_combined_after": principal_eigenvalue_proportion(model.embedding, k, factor=True),
            "eigenvalues": {base.kernels[p].name: (base.eigenvalues[p] / n).tolist() for p in kept},
            "objective_steps": [[name, float(v)] for name, v in fusion.objective_steps],
            "normalized_kmeans": normalized_kmeans,
            "timings": {**base.timings, "graphs_s": t_graph, "fusion_s": t_fusion},
        }
        if self.full_pep and landmark_views is not None:
            t0 = time.perf_counter()
            diag.update(_filtered_kernel_peps(model, base, landmark_views, k))
            diag["timings"]["full_pep_s"] = time.perf_counter() - t0
        self.diagnostics_ = diag
        return model

    def _set_model(self, model: LateFusionModel) -> None:
        group = model.kernel_group
        used = group >= 0
        gamma = np.zeros(group.size)
        mu = np.zeros(group.size)
        gamma[used] = model.view_weights[group[used]]
        mu[used] = (model.filter_weights / model.copies)[group[used]]
        self.model_ = model
        self.kernels_ = list(model.kernels)
        self.kept_kernels_ = np.asarray(model.kept, dtype=np.int64)
        self.view_weights_ = gamma
        self.filter_weights_ = mu
        self.cluster_centers_ = model.cluster_centers
        self.landmark_indices_ = model.landmark_indices

    def _kmeans_params(self) -> dict[str, Any]:
        return {"n_init": int(self.n_init), "max_iter": 300, "tol": 1e-4}

    def fit_centroids(self, embedding, seed: int) -> KMeansResult | None:
        """The final k-means on the embedding H~ of every row, when it applies.

        With ``cluster_all_points`` and more rows than landmarks: k-means (``n_init``
        restarts, NumPy or across the Dask cluster) on ``embedding``; its centroids replace
        Algorithm 1's, ``inertia_`` is over all rows and every landmark's label becomes its
        nearest final centroid.  Otherwise Algorithm 1's centroids stay (the landmark
        clustering; ``inertia_`` over the landmarks) and nothing is computed.

        Returns
        -------
        KMeansResult or None
            None when Algorithm 1's centroids are kept.
        """
        model = self.model_
        if not (self.cluster_all_points and embedding.shape[0] > model.n_landmarks):
            return None
        t0 = time.perf_counter()
        km = super().fit_centroids(embedding, fit_seeds(seed)[2])
        model.cluster_centers = self.cluster_centers_
        model.landmark_labels = nearest_center(model.cluster_embedding, self.cluster_centers_)
        self.diagnostics_["final_kmeans"] = {"rows": int(embedding.shape[0]), "inertia": float(km.inertia),
                                             "n_iter": int(km.n_iter)}
        self.diagnostics_["timings"]["kmeans_all_s"] = time.perf_counter() - t0
        return km

    # ------------------------------------------------------------------ inference
    def transform(self, X):
        """Filtered late-fusion embedding H~ of every row (out of sample; no refit).

        Parameters
        ----------
        X : array-like of shape (N, d) or list/dict of views
            NumPy or Dask.

        Returns
        -------
        H : ndarray or dask.array.Array of shape (N, D), in ``model_.dtype``
            The space ``cluster_centers_`` live in; a landmark gets its fitted row.
        """
        views = self._predict_views(X)
        model = self.model_
        return RowBlocks(views, model.view_names, block_rows=model.block_rows).map(
            embed_rows, model, n_cols=model.n_components, dtype=model.dtype, name="late-fusion-embed")

    def predict(self, X):
        """Cluster of every row: the nearest centroid of its H~ row (``transform`` and the
        assignment fused in one pass per row block, so H~ of all rows is never held).

        Returns
        -------
        labels : ndarray of shape (N,), int64, or lazy dask.array.Array
        """
        views = self._predict_views(X)
        model = self.model_
        return RowBlocks(views, model.view_names, block_rows=model.block_rows).map(
            label_rows, model, n_cols=None, dtype=np.int64, name="late-fusion-predict")

    # ------------------------------------------------------------------ state and summary
    def _state(self) -> tuple[dict, dict]:
        attrs, arrays = super()._state()
        attrs.update(embedding_dim=int(self.embedding_dim_), dropped_kernels=list(self.dropped_kernels_),
                     merged_kernels=list(self.merged_kernels_))
        return attrs, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        super()._restore(attrs, get)
        self.embedding_dim_ = int(attrs["embedding_dim"])
        self.dropped_kernels_ = list(attrs["dropped_kernels"])
        self.merged_kernels_ = list(attrs["merged_kernels"])

    def _summary_fields(self) -> dict[str, Any]:
        model = self.model_
        names = [k.name for k in self.kernels_]
        diag = self.diagnostics_
        k = int(self.n_clusters_)
        # The spectrum of the kernel the final clustering sees: H~ H~^T / n on the landmarks,
        # whose PEP is ``pep_combined_after`` (the squared singular values of H~, never n x n).
        s = np.linalg.svd(model.embedding, compute_uv=False)
        return {
            "n_landmarks": int(model.n_landmarks), "n_components": int(model.n_components),
            "kernel_names": names,
            "weights": [{"name": "view weights (gamma)", "labels": names, "values": self.view_weights_.tolist()},
                        {"name": "filter weights (mu)", "labels": names, "values": self.filter_weights_.tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(), "n_iter": int(self.n_iter_),
            "converged": bool(self.converged_),
            "spectrum": {"values": (s[: k + 1] ** 2 / model.n_landmarks).tolist(), "k": k,
                         "what": "top eigenvalues of (1/n) H~ H~^T, the linear kernel of the filtered "
                                 "late-fusion embedding on the landmarks"},
            "pep": {"t": diag.get("pep_t", k), "base": dict(zip(names, diag.get("pep_kernels", []))),
                    "combined": diag.get("pep_combined_before"), "combined_filtered": diag.get("pep_combined_after"),
                    "dropped": [d["name"] for d in self.dropped_kernels_]} if "pep_kernels" in diag else None,
        }


def _filtered_kernel_peps(model: LateFusionModel, base: BasePartitions, landmark_views: Mapping[str, np.ndarray],
                          k: int) -> dict[str, Any]:
    """beta(K, k) vs beta(G~ K G~, k) for every kept base kernel and for sum_p gamma_p^2 K_p.

    G~ K G~ is the kernel of the filtered feature maps (K = Phi Phi^T -> G~ Phi); G~ is
    symmetric, so G~ K G~ = G~ (G~ K)^T.  One kernel in memory at a time plus the combination.
    """
    order = model.graph_filter_order

    def filt(Z):
        out = np.zeros_like(Z)
        for g, w in zip(model.graphs, model.filter_weights):
            if w != 0.0:
                out += w * apply_filter(g.S_hat, Z, order)
        return out

    n = model.n_landmarks
    lv = model.landmarks
    combined = np.zeros((n, n))
    before, after = [], []
    for i, blk in kernel_blocks(lv, lv, model.kept_kernels, reuse=True):
        K, _ = fit_preprocessing(blk[None], base.preprocessing.center, base.preprocessing.normalize)
        K = K[0]
        before.append(top_eigenvalue_sum(K, k) / float(np.trace(K)))
        combined += model.copies[i] * model.view_weights[i] ** 2 * K
        Kf = filt(filt(K).T)
        after.append(top_eigenvalue_sum(Kf, k) / float(np.trace(Kf)))
        del K, Kf
    cf = filt(filt(combined).T)
    return {
        "pep_kernels_filtered": dict(zip([kk.name for kk in model.kept_kernels], after)),
        "pep_kernels_kept_unfiltered": dict(zip([kk.name for kk in model.kept_kernels], before)),
        "pep_kernel_combined_before": top_eigenvalue_sum(combined, k) / float(np.trace(combined)),
        "pep_kernel_combined_after": top_eigenvalue_sum(cf, k) / float(np.trace(cf)),
    }


register(LateFusionClustering)
