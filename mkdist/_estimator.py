"""The scikit-learn style estimator for multiple kernel clustering (SimpleMKKM + MKC-AE)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.cluster import KMeans
from sklearn.utils import check_random_state

from ._fit import fit_landmark_model
from ._model import MKCModel, assign_chunk, embed
from ._sampling import sample_landmark_indices
from ._validation import check_int, check_real, common_float_dtype, is_dask_array, ViewsInputMixin
from .errors import InputValidationError

__all__ = ["MultipleKernelClustering", "default_n_landmarks"]

#: Default landmark count (see :func:`default_n_landmarks`).
DEFAULT_MAX_LANDMARKS = 1000


def default_n_landmarks(n_samples: int) -> int:
    """Number of landmarks used when ``n_landmarks=None``: min(N, 1000).

    The MKC-AE paper uses 1000 landmarks on 30k-100k points; the bipartite-spectral paper
    argues Theta(sqrt(N)), which is 1000 at N = 1M.  Measured on MNIST (60k points,
    ``bench/bench_pipeline.py --part landmarks``): ACC stops improving at about 500
    landmarks (0.511 at 250, 0.544 at 500, 0.538-0.542 from 1000 to 4000), so 1000 keeps a
    2x margin over the knee at a fit cost of seconds.
    """
    return int(min(n_samples, DEFAULT_MAX_LANDMARKS))


class MultipleKernelClustering(ViewsInputMixin, ClusterMixin, TransformerMixin, BaseEstimator):
    """Multiple kernel clustering on landmarks with out-of-sample embedding (SimpleMKKM + MKC-AE).

    Fits SimpleMKKM on ``n_landmarks`` sampled points: kernel weights gamma on the simplex and
    the top-K spectral embedding H_n of the combined kernel sum_p gamma_p^2 K_p.  Every point
    is then embedded with H_N = (sum_p gamma_p^2 P_p) H_n D_n^-1 (linear in N) and clustered
    by k-means on the rows of H_N.

    Parameters
    ----------
    n_clusters : int, default=8
        K, number of clusters and of embedding dimensions.
    kernels : str or list of KernelSpec/dict, default=None
        Base kernels.  None: "rbf-grid", three RBF kernels per view with sigma = sqrt(mean
        squared pairwise distance) x {0.5, 1, 2}.  A string names a kernel set applied to every view ("rbf", "rbf-median", "rbf-grid",
        "rbf-grid5", "linear", "mkkm12").
    n_landmarks : int, default=None
        Landmarks n (<= N).  None: ``min(N, 1000)`` (see :func:`default_n_landmarks`).
    weights : {"simplemkkm", "uniform"}, default="simplemkkm"
        Learn gamma with SimpleMKKM, or use uniform weights (average-kernel k-means baseline).
    center : bool, default=True
        Centre every kernel in feature space at the landmark mean.
    normalize : {"diagonal", "trace", None}, default="diagonal"
        Kernel normalisation after centring (unit diagonal as the SimpleMKKM authors' code).
    normalize_embedding : bool, default=True
        Scale rows of H_N to unit length before k-means (as the authors' code does with H).
    scale : {None, "minmax", "standard"}, default=None
        Per-feature scaling estimated on the landmarks; only when asked, so results follow
        the data as passed.
    max_iter : int, default=200
        SimpleMKKM descent steps.
    tol : float, default=1e-4
        SimpleMKKM stopping rule, max |delta gamma|.
    n_init : int, default=10
        k-means restarts.
    kmeans_max_iter : int, default=300
    dtype : {None, "float32", "float64"}, default=None
        Precision of the out-of-sample embedding; None: float32 if every view is float32.
        The landmark fit always runs in float64.
    random_state : int, RandomState or None, default=None
        Landmark sampling, bandwidth sampling and k-means initialisation.

    Attributes
    ----------
    kernel_weights_ : ndarray of shape (m,)
    kernels_ : list of FittedKernel
        Base kernels with their fitted bandwidths.
    landmark_indices_ : ndarray of shape (n,)
    eigenvalues_ : ndarray of shape (K + 1,)
        Top eigenvalues of (1/n) K_alpha (the normalised kernel of the MKC-AE paper).
    cluster_centers_ : ndarray of shape (n_clusters, n_clusters)
        Centroids in the embedding.
    labels_ : ndarray of shape (N,)
    objective_history_ : ndarray of shape (n_iter_ + 1,)
        SimpleMKKM objective J(gamma); non-increasing.
    n_iter_ : int
    diagnostics_ : dict
        Spectral quantities behind the MKC-AE stability theorem (see ``spectral_diagnostics``)
        and fit timings.
    model_ : MKCModel
        The fitted model (arrays + JSON; see ``mkdist.storage``).
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

    def __init__(self, n_clusters: int = 8, *, kernels: Any = None, n_landmarks: int | None = None,
                 weights: str = "simplemkkm", center: bool = True, normalize: str | None = "diagonal",
                 normalize_embedding: bool = True, scale: str | None = None, max_iter: int = 200,
                 tol: float = 1e-4, n_init: int = 10, kmeans_max_iter: int = 300, dtype: str | None = None,
                 random_state=None):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.n_landmarks = n_landmarks
        self.weights = weights
        self.center = center
        self.normalize = normalize
        self.normalize_embedding = normalize_embedding
        self.scale = scale
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.kmeans_max_iter = kmeans_max_iter
        self.dtype = dtype
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _validate_params(self, n_samples: int) -> int:
        if n_samples < 2:
            raise InputValidationError(f"n_samples={n_samples} is too few: at least 2 samples are required.")
        check_int("n_clusters", self.n_clusters, low=2)
        n = check_int("n_landmarks", self.n_landmarks, low=2, allow_none=True)
        if n is None:
            n = default_n_landmarks(n_samples)
        if n > n_samples:
            raise InputValidationError(f"n_landmarks={n} must be <= n_samples={n_samples}.")
        if self.n_clusters > n:
            raise InputValidationError(
                f"n_clusters={self.n_clusters} must be <= the number of landmarks ({n}); "
                "raise n_landmarks or lower n_clusters."
            )
        if self.weights not in ("simplemkkm", "uniform"):
            raise InputValidationError(f"`weights`={self.weights!r} must be 'simplemkkm' or 'uniform'.")
        if self.normalize not in (None, "diagonal", "trace"):
            raise InputValidationError(f"`normalize`={self.normalize!r} must be 'diagonal', 'trace' or None.")
        if self.scale not in (None, "minmax", "standard"):
            raise InputValidationError(f"`scale`={self.scale!r} must be None, 'minmax' or 'standard'.")
        if self.dtype not in (None, "float32", "float64"):
            raise InputValidationError(f"`dtype`={self.dtype!r} must be None, 'float32' or 'float64'.")
        check_int("max_iter", self.max_iter, low=1)
        check_real("tol", self.tol, low=0.0, low_inclusive=False)
        check_int("n_init", self.n_init, low=1)
        check_int("kmeans_max_iter", self.kmeans_max_iter, low=1)
        return n

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None):
        """Fit the model on the views and label every row.

        Parameters
        ----------
        X : array-like of shape (N, d), or list/tuple/dict of arrays of shape (N, d_v)
            One array per view, same rows.  Dask arrays run the distributed pipeline
            (see :func:`mkdist.cluster`).
        y : ignored

        Returns
        -------
        self
        """
        views = self._views(X)
        if any(is_dask_array(v) for v in views.values()):
            from ._pipeline import fit_estimator_dask

            return fit_estimator_dask(self, views)
        N = next(iter(views.values())).shape[0]
        n = self._validate_params(N)
        rng = check_random_state(self.random_state)
        landmark_indices = sample_landmark_indices(views, n, random_state=rng)
        landmark_views = {k: np.asarray(v[landmark_indices]) for k, v in views.items()}
        self.model_ = self._fit_landmarks(views, landmark_views, landmark_indices, rng)
        timings = self.diagnostics_["timings"]
        t0 = time.perf_counter()
        H_N = embed(views, self.model_)
        timings["embed_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        km = KMeans(self.n_clusters, n_init=self.n_init, max_iter=self.kmeans_max_iter,
                    random_state=rng.randint(np.iinfo(np.int32).max)).fit(H_N)
        timings["kmeans_s"] = time.perf_counter() - t0
        self.model_.cluster_centers = km.cluster_centers_.astype(np.float64)
        self.cluster_centers_ = self.model_.cluster_centers
        self.labels_ = km.labels_.astype(np.int64)
        return self

    def _fit_landmarks(self, views: dict, landmark_views: dict, landmark_indices: np.ndarray,
                       rng: np.random.RandomState) -> MKCModel:
        """Fit on the (in-memory) landmarks and set the fitted attributes."""
        model, info = fit_landmark_model(
            landmark_views, landmark_indices, n_clusters=self.n_clusters, kernels=self.kernels,
            weights=self.weights, center=self.center, normalize=self.normalize,
            normalize_embedding=self.normalize_embedding, scale=self.scale, max_iter=self.max_iter,
            tol=self.tol, dtype=self.dtype or str(common_float_dtype(views)),
            random_state=rng.randint(np.iinfo(np.int32).max))
        self._set_model_attributes(model, info)
        self.n_features_in_ = int(sum(v.shape[1] for v in views.values()))
        return model

    def _set_model_attributes(self, model: MKCModel, info: dict) -> None:
        n = model.n_landmarks
        self.model_ = model
        self.kernels_ = model.kernels
        self.kernel_weights_ = model.kernel_weights
        self.landmark_indices_ = model.landmark_indices
        self.eigenvalues_ = model.eigenvalues / n
        self.objective_history_ = np.asarray(info["objective_history"])
        self.n_iter_ = info["n_iter"]
        self.converged_ = info["converged"]
        self.n_features_per_view_ = dict(model.n_features)
        self.diagnostics_ = {**info["diagnostics"], "timings": dict(info["timings"])}

    # ------------------------------------------------------------------ inference
    def transform(self, X):
        """Embed points with the fitted model (no refit).

        Parameters
        ----------
        X : array-like of shape (N, d) or list/dict of views
            NumPy or Dask.

        Returns
        -------
        H_N : ndarray or dask.array.Array of shape (N, n_clusters)
            Rows of the out-of-sample spectral embedding (unit length when
            ``normalize_embedding``), the space ``cluster_centers_`` live in.
        """
        return embed(self._check_predict_views(X), self.model_)

    def predict(self, X):
        """Nearest-centroid cluster of every point in the embedding, shape (N,), int64.

        NumPy in -> NumPy out; Dask in -> lazy Dask array.
        """
        H = self.transform(X)
        centers = self.cluster_centers_.astype(H.dtype)
        if is_dask_array(H):
            return H.map_blocks(assign_chunk_rows, centers, drop_axis=1, dtype=np.int64)
        return assign_chunk(centers, H)

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_``."""
        return self.fit(X).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.non_deterministic = False
        return tags


def assign_chunk_rows(H: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``assign_chunk`` with the block first, for ``map_blocks``."""
    return assign_chunk(centers, H)
