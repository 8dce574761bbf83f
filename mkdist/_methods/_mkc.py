"""Multiple kernel clustering on landmarks with out-of-sample embedding (SimpleMKKM + MKC-AE).

Fit (one node): base kernels on n landmarks, centred and normalised, SimpleMKKM learns the
kernel weights gamma; H_n holds the top eigenvectors of K_gamma = sum_p gamma_p^2 K_p (2K of
them for K <= 10 by default, see :func:`mkdist._methods._base.default_embedding_dim`).
Embed (every row, NumPy or Dask through the row engine): H_N = (sum_p gamma_p^2 P_p) H_n D_n^-1,
linear in N and never an N x n x m array.  k-means on the rows of H_N gives the labels.
The fitted :class:`MKCModel` is plain arrays + JSON (the estimator's ``model_state``).

This module holds the estimator; the fitted model and its embedding are
:mod:`mkdist._methods._mkc_model`, the fit on the landmarks :mod:`mkdist._methods._mkc_fit`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._core._blocks import RowBlocks
from .._core._fused import prefetch_where_embedded
from .._core._kernel_specs import auto_specs_for_table
from .._core._kmeans import KMeansResult, assign_labels
from .._core._linalg import blas_threads
from .._core._scaling import SCALE_TABLE, SCALE_UNITS
from .._core._validation import check_finite, common_float_dtype
from . import _params
from ._base import DEFAULT_MAX_LANDMARKS, KernelLandmarkEstimator
from ._mkc_fit import (
    _warn_collapsed_weights as _warn_collapsed_weights,  # imported from here by tests/test_mkc.py
    fit_landmark_model,
)
from ._mkc_model import (
    MKCModel,
    _embed_rows as _embed_rows,  # imported from here by tests
    _kernel_block_rows,
    embed,
    embed_chunk,
    spectral_diagnostics,
)
from ._registry import register

__all__ = ["MultipleKernelClustering", "MKCModel", "embed", "embed_chunk", "fit_landmark_model",
           "spectral_diagnostics"]

# ============================================================================ estimator
class MultipleKernelClustering(KernelLandmarkEstimator):
    """Multiple kernel clustering on landmarks with out-of-sample embedding (SimpleMKKM + MKC-AE).

    Fits SimpleMKKM on ``n_landmarks`` sampled points: kernel weights gamma on the simplex and
    the top-K spectral embedding H_n of the combined kernel sum_p gamma_p^2 K_p.  Every point
    is then embedded with H_N = (sum_p gamma_p^2 P_p) H_n D_n^-1 (linear in N) and clustered
    by k-means on the rows of H_N.

    Parameters
    ----------
    n_clusters : int, "auto" or (k_min, k_max), default=8
        K, number of clusters.  "auto": chosen from the landmark kernel (the uniform
        combination of the preprocessed base kernels) by the eigengap of its kNN graph with
        resampling votes, or the modularity of its spectral partitions when the spectra show no
        gap or the gap's partition is clearly less modular (``mkdist._core._nclusters``), in
        [2, min(50, n_landmarks // 10)]; a pair (k_min, k_max) searches that range (k_max <
        n_landmarks).  The choice is in ``n_clusters_`` and ``n_clusters_choice_``; when it is
        ambiguous (no clear gap, or the two criteria disagree) the
        fit uses the best guess and warns (``AmbiguousNClustersWarning``).
    kernels : str or list of KernelSpec/dict, default=None
        Base kernels.  None: "auto": on a view with fewer than 10% non-zero entries (text,
        graph adjacency) the cosine kernel, on the others "rbf-grid", three RBF kernels with
        sigma = sqrt(mean squared pairwise distance) x {0.5, 1, 2}; decided on the landmarks.
        On a categorical view (a table's categories) the linear kernel on its indicators: it
        adds the columns where the RBF multiplies them, so a noise column beside an
        informative one no longer splits every cluster
        (:func:`mkdist._core._kernel_specs.auto_specs_for_table`).
        A string names a kernel set applied to every view ("auto", "rbf", "rbf-median",
        "rbf-grid", "rbf-grid5", "linear", "mkkm12").  Measured on the 28 shared multi-view
        sets (bench/RESULTS.md, quality): the cosine kernel on sparse views lifts the mean ACC
        of the default fit from 0.598 to 0.636 and changes nothing on dense views.
    n_landmarks : int, default=None
        Landmarks n (<= N).  None: ``min(N, 1000)`` (see :func:`mkdist.default_n_landmarks`).
    embedding_dim : int, default=None
        Columns of the embedding H_N: the top ``embedding_dim`` eigenvectors of the combined
        kernel (n_clusters <= embedding_dim <= n_landmarks); the weights are SimpleMKKM's,
        learned with n_clusters eigenvectors.  None: n_clusters when the embedding's columns
        are kernel PCA coordinates (``embedding_scale`` "eigenvalue", "auto" with a categorical
        view), else 2 x n_clusters for n_clusters <= 10, n_clusters above
        (:func:`mkdist._methods._base.default_embedding_dim`; measured on the shared
        multi-view sets, bench/RESULTS.md).
    landmark_method : {"uniform", "kmeans++"}, default="uniform"
        How landmarks are drawn (see ``mkdist._core._sampling.sample_landmark_indices``).
    weights : {"simplemkkm", "uniform"}, default="simplemkkm"
        Learn gamma with SimpleMKKM, or use uniform weights (average-kernel k-means baseline).
    center : bool, default=True
        Centre every kernel in feature space at the landmark mean.
    normalize : {"auto", "diagonal", "trace", None}, default="auto"
        Kernel normalisation after centring: "diagonal", every landmark's centred
        self-similarity 1 (as the SimpleMKKM authors' code); "trace", each kernel divided by its
        mean self-similarity, so kernels are comparable in scale and keep their own geometry.
        "auto": "trace" when a view is categorical, "diagonal" otherwise (see below).
    normalize_embedding : {"auto", True, False}, default="auto"
        Scale rows of H_N to unit length before k-means (as the authors' code does with H).
        "auto": False when a view is categorical, True otherwise.
    embedding_scale : {"auto", "unit", "eigenvalue"}, default="auto"
        How the embedding's columns are weighed for k-means: "unit", the paper's H_N, every
        eigenvector alike; "eigenvalue", column j scaled by sqrt(lambda_j) (kernel PCA
        coordinates: k-means then follows the combined kernel's distances).  "auto":
        "eigenvalue" when a view is categorical (``categories_``: DataFrame or table input
        with categorical columns), "unit" otherwise.  Why: a categorical view has a few
        distinct rows, each a point mass; in the unit-weighted embedding its weakest
        directions (a noisy column's categories) are as wide as the strongest and k-means
        cuts along them (ACC 0.51 on a mixed table where the eigenvalue scaling gives 0.92-0.96,
        ``bench/bench_tables.py``).  On the numeric shared sets the unit scaling is the measured
        default.

        The three "auto"s decide together: with a categorical view, mkc clusters as kernel
        k-means on the combined kernel (its top K kernel PCA coordinates, ``embedding_dim``
        None), and both the diagonal normalisation and the unit rows would put every row on a
        sphere (cosine geometry) instead.  On the customer table of ``bench/bench_tables.py`` the
        sphere moved the boundary between two numeric clusters into the one nearer the
        kernel's mean (pair accuracy 0.983, one-hot + k-means 0.987; kernel k-means 0.989):
        ACC 0.884 -> 0.890 on seeds 0-2 (one-hot + k-means 0.888), 0.886 -> 0.890 on seeds 3-7
        (0.889).  With K columns rather than 2K, Palmer penguins' species NMI 0.59 -> 0.73
        (``docs/algorithms.md``).  Numeric inputs keep the paper's geometry (the 28-set
        measurements).
    scale : {"auto", None, "none", "minmax", "standard", "units", "table"}, default="auto"
        Per-feature scaling estimated on the landmarks.  "units": "standard" on a dense view
        whose columns come in different units (the widest column's standard deviation over 10x
        the median column's, :func:`mkdist._core._scaling.units_differ`: wine's proline beside
        its hue), the features as given on the others (pixels, counts, one-unit descriptors).
        "table": "standard" on the numeric views, a categorical view's indicators as given.
        "auto": "table" when a view is categorical (a table: its numbers come in their own
        units, and one RBF bandwidth per view cannot weigh dollars against visits; the
        indicators as given count each column once, as k-modes does, where standardised ones
        weighed a column by its number of levels: :data:`mkdist._core._scaling.SCALE_TABLE`), else "units"
        (wine 0.68 -> 0.97 ACC, breast_cancer 0.83 -> 0.91; iris and digits as given, where
        standardising costs 0.18 and 0.08; ``bench/bench_baselines.py``).  On the customer table of
        ``bench/bench_tables.py`` without scaling, the kernel k-means geometry cut a pair of
        segments by spend on one seed of 8 (ACC 0.725; ``docs/algorithms.md``).  None or "none":
        the features as given ("none" is how a run's options say it: there ``scale=None`` means
        the default).
    keep_structured : bool, default=True
        Before the weights are learned, test every view's kernels for structure the other
        views share (centred kernel alignment against a landmark-permutation null,
        :func:`mkdist._core._structure.shared_structure`); a view at chance gets weight 0.
        Why: SimpleMKKM's min-max objective gives the most weight to the flattest spectrum, and
        a view of pure noise has it (wine + 10 noise columns: 72-80% of the weight on the noise,
        ACC 0.96 -> 0.54-0.76).  With one view, or when no view passes, every kernel enters.
        The test is in ``diagnostics_["structure"]``.
    max_iter : int, default=200
        SimpleMKKM descent steps.
    tol : float, default=1e-4
        SimpleMKKM stopping rule, max |delta gamma|.
    n_init : int, default=10
        k-means++ restarts, run to convergence on a uniform sample of at most 50,000 embedded
        rows (``mkdist._core._kmeans``); the best is refined by Lloyd passes over all rows, so
        the restarts cost no pass over the data.  ``mkdist.cluster`` uses the same default (it
        used 3 until issue 36, and gave other labels than this estimator: standardised iris,
        K = 3, seed 1, NMI 0.49 against 0.61).
    kmeans_max_iter : int, default=300
        Lloyd iterations (per restart on the sample, then over all rows).
    kmeans_tol : float, default=1e-4
        k-means stopping rule (scikit-learn's, relative to the feature variance).
    dtype : {None, "float32", "float64"}, default=None
        Precision of the out-of-sample embedding; None: float32 if every view is float32.
        The landmark fit always runs in float64.
    random_state : int, RandomState or None, default=None
        Landmark sampling, bandwidth sampling and k-means initialisation (one seed for all;
        the same integer seed makes the same choices as ``mkdist.cluster``).

    Attributes
    ----------
    n_clusters_ : int
        K of the fit (``n_clusters``, or the K chosen for "auto" / a range).
    n_clusters_choice_ : NClustersChoice or None
        The K choice (K, confidence, runner-up, candidates with their vote shares, whether
        it is ambiguous); None when ``n_clusters`` is an integer.
    kernel_weights_ : ndarray of shape (m,)
    kernels_ : list of FittedKernel
        Base kernels with their fitted bandwidths.
    landmark_indices_ : ndarray of shape (n,)
    eigenvalues_ : ndarray of shape (K + 1,)
        Top eigenvalues of (1/n) K_alpha (the normalised kernel of the MKC-AE paper).
    cluster_centers_ : ndarray of shape (n_clusters_, embedding_dim)
        Centroids in the embedding.
    labels_ : ndarray of shape (N,), or a lazy dask.array.Array for Dask input
    inertia_ : float
        k-means inertia in the embedding.
    objective_history_ : ndarray of shape (n_iter_ + 1,)
        SimpleMKKM objective J(gamma); non-increasing.
    n_iter_ : int
    converged_ : bool
    diagnostics_ : dict
        Spectral quantities behind the MKC-AE stability theorem (see ``spectral_diagnostics``),
        the principal eigenvalue proportions (``pep``), fit timings and, for learned weights,
        ``weights_check`` (see :func:`compare_with_uniform`: whether uniform weights would
        cluster the landmarks the same way; when they would not, compare with
        ``weights="uniform"``).
    model_ : MKCModel
        The fitted model (arrays + JSON; see ``model_state``).
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
    n_features_in_ : int
        Total number of features over all views.

    Examples
    --------
    >>> import numpy as np
    >>> from mkdist import MultipleKernelClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.1, (20, 2)), rng.normal(3, 0.1, (20, 2))]
    >>> model = MultipleKernelClustering(n_clusters=2, random_state=0).fit([X, X**2])
    >>> len(set(model.labels_[:20])), len(set(model.labels_))
    (1, 2)
    """

    method: ClassVar[str] = "mkc"
    state_format: ClassVar[str] = "mkdist.MultipleKernelClustering/2"
    optional_stages: ClassVar[tuple[str, ...]] = ("kernel_blocks",)
    max_default_landmarks: ClassVar[int] = DEFAULT_MAX_LANDMARKS
    _model_type: ClassVar[type] = MKCModel
    _param_constraints: ClassVar[dict[str, list]] = _params.MKC

    def __init__(self, n_clusters: int = 8, *, kernels: Any = None, n_landmarks: int | None = None,
                 embedding_dim: int | None = None, landmark_method: str = "uniform", weights: str = "simplemkkm",
                 center: bool = True,
                 normalize: str | None = "auto", normalize_embedding: bool | str = "auto",
                 embedding_scale: str = "auto", scale: str | None = "auto", keep_structured: bool = True,
                 max_iter: int = 200, tol: float = 1e-4, n_init: int = 10, kmeans_max_iter: int = 300,
                 kmeans_tol: float = 1e-4, dtype: str | None = None, random_state=None):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.n_landmarks = n_landmarks
        self.embedding_dim = embedding_dim
        self.landmark_method = landmark_method
        self.weights = weights
        self.center = center
        self.normalize = normalize
        self.normalize_embedding = normalize_embedding
        self.embedding_scale = embedding_scale
        self.scale = scale
        self.keep_structured = keep_structured
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.kmeans_max_iter = kmeans_max_iter
        self.kmeans_tol = kmeans_tol
        self.dtype = dtype
        self.random_state = random_state

    # ------------------------------------------------------------------ the pipeline's hooks
    def _landmark_sampling(self, seed: int) -> dict[str, Any]:
        return {"method": self.landmark_method, "random_state": seed}

    def fit_landmarks(self, landmark_views: dict, landmark_indices: np.ndarray, seed: int):
        """SimpleMKKM on the in-memory landmark rows; sets every fitted attribute but the centroids."""
        check_finite(landmark_views, row_numbers=landmark_indices)  # Dask input: NaN among the landmarks
        n = int(np.asarray(landmark_indices).shape[0])
        k_range = self._check_k_range(n)
        self.n_clusters_choice_ = None
        n_clusters = self.n_clusters if k_range is None else (
            lambda stack: self._choose_n_clusters(stack, n, seed))
        dtype = self.dtype or str(common_float_dtype(landmark_views))
        # The workers (or this process) load the embedding's compiled step while the model is fitted.
        prefetch_where_embedded(dtype)
        geometry = self._geometry()
        with blas_threads(1):  # faster than two on a quiet machine, and 10x faster on a busy one (mkdist._core._linalg)
            model, info = fit_landmark_model(
                landmark_views, np.asarray(landmark_indices), n_clusters=n_clusters,
                kernels=self._kernels_for(landmark_views),
                weights=self.weights, center=self.center, keep_structured=self.keep_structured,
                max_iter=self.max_iter,
                tol=self.tol, dtype=dtype, random_state=seed, embedding_dim=self.embedding_dim, **geometry)
        self._set_fitted_views(landmark_views)
        self._set_model(model)
        self.objective_history_ = np.asarray(info["objective_history"])
        self.n_iter_ = int(info["n_iter"])
        self.converged_ = bool(info["converged"])
        self.diagnostics_ = {**info["diagnostics"], "timings": dict(info["timings"])}
        return self

    def _geometry(self) -> dict[str, Any]:
        """``normalize``, ``normalize_embedding``, ``embedding_scale`` and ``scale`` of this
        fit, each "auto" resolved by one fact: whether a view is categorical (``categories_``).

        With one, the fit is kernel k-means on the combined kernel: trace-normalised kernels,
        kernel PCA coordinates (K of them unless ``embedding_dim`` says otherwise), rows as
        they are.  A categorical view's rows are a few point
        masses, which the unit-weighted H_N spreads as wide as the real clusters; and both
        the diagonal normalisation and the unit rows project every row onto a sphere, which
        on a numeric view beside it moves the rows near the kernel's mean (a cluster between
        two others) towards their neighbours (bench/RESULTS.md, "Tables as they come").
        Numeric inputs keep the paper's spectral geometry, measured on the 28 shared sets.
        """
        categorical = bool(getattr(self, "categories_", None))
        pick = {"normalize": ("trace", "diagonal"), "normalize_embedding": (False, True),
                "embedding_scale": ("eigenvalue", "unit"), "scale": (SCALE_TABLE, SCALE_UNITS)}
        return {name: (choice[0] if categorical else choice[1]) if getattr(self, name) == "auto"
                else getattr(self, name) for name, choice in pick.items()}

    def _kernels_for(self, landmark_views: dict) -> Any:
        """``kernels`` as the fit uses it: with the default ("auto") and a categorical view
        (``categories_``), the linear kernel on that view's indicators
        (:func:`mkdist._core._kernel_specs.auto_specs_for_table`); else as given."""
        if self.kernels not in (None, "auto") or not getattr(self, "categories_", None):
            return self.kernels
        return auto_specs_for_table(landmark_views)

    def _embedding_dim(self, n_landmarks: int, k: int | None = None) -> int:
        if self.embedding_dim is None and self._geometry()["embedding_scale"] == "eigenvalue":
            return self.n_clusters_ if k is None else k  # as fit_landmark_model decides
        return super()._embedding_dim(n_landmarks, k)

    def _set_model(self, model: MKCModel) -> None:
        self.model_ = model
        self.kernels_ = model.kernels
        self.kernel_weights_ = model.kernel_weights
        self.landmark_indices_ = model.landmark_indices
        self.eigenvalues_ = model.eigenvalues / model.n_landmarks
        if model.cluster_centers is not None:
            self.cluster_centers_ = model.cluster_centers

    def _kmeans_params(self) -> dict[str, Any]:
        return {"n_init": self.n_init, "max_iter": self.kmeans_max_iter, "tol": self.kmeans_tol}

    def fit_centroids(self, embedding, seed: int) -> KMeansResult:
        km = super().fit_centroids(embedding, seed)
        self.model_.cluster_centers = self.cluster_centers_
        return km

    # ------------------------------------------------------------------ inference
    def transform(self, X):
        """Embed points with the fitted model (no refit).

        Parameters
        ----------
        X : array-like of shape (N, d) or list/dict of views, NumPy or Dask

        Returns
        -------
        H_N : ndarray or dask.array.Array of shape (N, embedding_dim)
            Rows of the out-of-sample spectral embedding (unit length when
            ``normalize_embedding``), the space ``cluster_centers_`` live in.
        """
        return embed(self._predict_views(X), self.model_)

    def predict(self, X):
        """Nearest-centroid cluster of every point in the embedding.

        Returns
        -------
        labels : ndarray of shape (N,), int64 (a lazy Dask array for Dask input)
        """
        check_is_fitted(self, "cluster_centers_")
        return assign_labels(self.transform(X), self.cluster_centers_)

    def kernel_blocks(self, X):
        """Every preprocessed partial kernel block P_p(x, landmarks) (the optional ``kernel_blocks`` stage).

        Returns
        -------
        P : ndarray or lazy dask.array.Array of shape (m, N, n_landmarks), in the model's dtype
        names : list of str
            The m kernel names.
        """
        views = self._predict_views(X)
        model = self.model_
        m, n = len(model.kernels), model.n_landmarks
        flat = RowBlocks(views, model.view_names).map(_kernel_block_rows, model, n_cols=m * n,
                                                      dtype=np.dtype(model.dtype), name="kernel-blocks")
        return flat.reshape(flat.shape[0], m, n).transpose(1, 0, 2), [k.name for k in model.kernels]

    # ------------------------------------------------------------------ state and summary
    def _summary_fields(self) -> dict[str, Any]:
        names = [k.name for k in self.kernels_]
        diag = self.diagnostics_
        pep = diag.get("pep") or {}
        return {
            "n_landmarks": int(self.model_.n_landmarks), "n_components": int(self.model_.n_components),
            "kernel_names": names,
            "weights": [{"name": "kernel weights", "labels": names, "values": self.kernel_weights_.tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(), "n_iter": int(self.n_iter_),
            "converged": bool(self.converged_),
            "spectrum": {"values": list(diag.get("spectrum") or np.asarray(self.eigenvalues_).tolist()),
                         "k": int(self.n_clusters_),
                         "what": "top eigenvalues of (1/n) K_gamma, the combined landmark kernel"},
            "pep": {"t": pep.get("t"), "base": dict(zip(names, pep.get("base", []))),
                    "combined": pep.get("combined")} if pep else None,
        }


register(MultipleKernelClustering)
