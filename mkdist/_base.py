"""The estimator protocol every mkdist method follows (scikit-learn ``_BaseKMeans`` style).

:class:`MkdistEstimator` owns what all methods share: ``fit_predict``, the scikit-learn
tags, the checks of fit and predict input (views, NaN/inf, fitted views and features), the
declarative parameter constraints, the saved-state round trip (``model_state`` /
``from_model_state``, arrays + JSON, no pickle) and ``summary()``, one JSON schema for
every method that reports, ``mkdist inspect`` and the flow artifacts read.

The class attributes ``method``, ``multi_view``, ``stage_plan`` and ``state_format`` are
what the registry (:mod:`mkdist._methods`) and the pipeline read; a method subclasses
:class:`MkdistEstimator` (fit, then predict: stage plan ``("model", "labels")``) or
:class:`LandmarkEmbeddingEstimator` (sample landmarks, fit on them, embed every row,
k-means on the embedding: ``("landmarks", "model", "embedding", "labels")``), whose ``fit``
runs exactly the hooks the pipeline runs stage by stage.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import _params
from ._kmeans import KMeansResult, assign_labels, assign_with_distance, kmeans
from ._sampling import gather_rows
from ._state import StateArrays, check_state_format, encode_params, to_jsonable
from ._validation import (
    as_views, check_finite, collect_constraints, is_dask_array, validate_params,
)
from .errors import InputValidationError

__all__ = ["MkdistEstimator", "LandmarkEmbeddingEstimator", "FIT_PREDICT", "LANDMARK_EMBEDDING",
           "STAGE_PLANS", "resolve_seed"]

#: Fit on the data, then label every row with ``predict``.
FIT_PREDICT = ("model", "labels")
#: Sample landmarks, fit on them, embed every row out of sample, k-means on the embedding.
LANDMARK_EMBEDDING = ("landmarks", "model", "embedding", "labels")
#: The stage plans the pipeline knows how to run.
STAGE_PLANS = (FIT_PREDICT, LANDMARK_EMBEDDING)


def resolve_seed(random_state: Any) -> int:
    """One integer seed per fit: an int is used as is; None or a RandomState draw one.

    Every random step of a fit (landmarks, bandwidth samples, k-means) derives from this
    seed, so an estimator and ``mkdist.cluster`` with the same integer seed make the same
    random choices.
    """
    if random_state is None or isinstance(random_state, np.random.RandomState):
        rng = random_state if random_state is not None else np.random.mtrand._rand
        return int(rng.randint(np.iinfo(np.int32).max))
    return int(random_state)


class MkdistEstimator(ClusterMixin, TransformerMixin, BaseEstimator):
    """Base class of the mkdist clustering estimators.

    Subclasses set the registry metadata below, a ``_param_constraints`` table (merged with
    the bases'; a built-in method's table lives in ``mkdist._params``, so that arguments are
    checked without importing scikit-learn), implement ``fit`` / ``transform`` / ``predict``
    with the helpers here, and ``_state`` / ``_restore`` / ``_summary_fields``.
    """

    #: Registry name (``mkdist.cluster(method=...)``, ``mkdist run --method``).
    method: ClassVar[str] = ""
    #: False: the estimator clusters exactly one view (one 2-D array).
    multi_view: ClassVar[bool] = True
    #: The run-store stages the pipeline runs for this method (one of ``STAGE_PLANS``).
    stage_plan: ClassVar[tuple[str, ...]] = FIT_PREDICT
    #: Tag of the saved state; bump the version when the state's layout changes.
    state_format: ClassVar[str] = ""
    #: Parameter values ``mkdist.cluster`` uses unless the run gives them (measured reasons
    #: in the subclasses' docstrings).
    run_defaults: ClassVar[dict[str, Any]] = {}
    #: Extra stages a run may ask for (e.g. ``"kernel_blocks"``, with a method of that name).
    optional_stages: ClassVar[tuple[str, ...]] = ()
    #: Fitted attribute whose presence means "fitted".
    _fitted_attr: ClassVar[str] = "cluster_centers_"
    #: Fewest rows a fit accepts.
    _min_samples: ClassVar[int] = 2
    _param_constraints: ClassVar[dict[str, list]] = _params.ESTIMATOR

    # ------------------------------------------------------------------ sklearn protocol
    def fit_predict(self, X, y=None, **kwargs):
        """Fit and return ``labels_`` (a lazy Dask array for Dask input)."""
        return self.fit(X).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True  # scipy.sparse views are densified (mkdist._validation)
        tags.non_deterministic = False
        return tags

    # ------------------------------------------------------------------ validation
    def validate_input(self, X) -> dict[str, Any]:
        """Check the parameters against the input's shapes and views, reading no data.

        Parameters
        ----------
        X : array-like or list/dict of arrays, NumPy or Dask

        Returns
        -------
        dict
            Values resolved from the parameters and the input (e.g. the landmark count).

        Raises
        ------
        InputValidationError
            Naming the parameter or view, before any heavy work.
        """
        views = as_views(X)
        self._check_arity(views)
        return self._check_params(int(next(iter(views.values())).shape[0]), views)

    def _check_params(self, n_samples: int, views: dict) -> dict[str, Any]:
        """The constraint table, then the data-dependent checks of ``_check_params_vs_input``."""
        if n_samples < self._min_samples:
            raise InputValidationError(
                f"n_samples={n_samples} is too few: at least {self._min_samples} samples are required.")
        validate_params(collect_constraints(type(self), "_param_constraints"), self.get_params(deep=False))
        return self._check_params_vs_input(n_samples, views) or {}

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        """Checks that need N or the views (metadata only); returns resolved values."""
        if self.n_clusters > n_samples:
            raise InputValidationError(f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}.")
        return {}

    def _check_arity(self, views: dict) -> None:
        if not self.multi_view and len(views) != 1:
            raise InputValidationError(
                f"{type(self).__name__} clusters one view (a single 2-D array), got {len(views)} views "
                f"{list(views)}: concatenate them along columns (np.hstack / da.concatenate(..., axis=1)) "
                "after putting them on comparable scales, or use a multi-view method "
                "(mkdist.available_methods())."
            )

    def _fit_views(self, X) -> dict[str, Any]:
        """The views of ``fit``: named, same rows, finite (NumPy now, Dask in the first pass)."""
        views = as_views(X)
        self._check_arity(views)
        check_finite(views)
        return views

    def _set_fitted_views(self, views: dict) -> None:
        self.view_names_ = list(views)
        self.n_features_per_view_ = {k: int(v.shape[1]) for k, v in views.items()}
        self.n_features_in_ = int(sum(self.n_features_per_view_.values()))

    def _predict_views(self, X) -> dict[str, Any]:
        """The views of ``transform`` / ``predict``, in the fitted order, checked against the fit.

        Views match by name; unnamed views (a list, a tuple or one array) match by position.
        """
        check_is_fitted(self, self._fitted_attr)
        views = as_views(X)
        check_finite(views)
        names = self.view_names_
        cls = type(self).__name__
        if set(views) != set(names):
            positional = list(views) == [f"view{i}" for i in range(len(views))]
            if len(views) != len(names):
                raise InputValidationError(
                    f"X has {len(views)} view(s) {list(views)}, but {cls} was fitted on {len(names)} views "
                    f"{names}.")
            if not positional:
                raise InputValidationError(f"got views {list(views)}, but {cls} was fitted on views {names}.")
            views = dict(zip(names, views.values()))
        for name in names:
            got, want = views[name].shape[1], self.n_features_per_view_[name]
            if got != want:
                where = f" (view {name!r})" if len(names) > 1 else ""
                raise InputValidationError(
                    f"X has {got} features, but {cls} is expecting {want} features as input{where}.")
        return {n: views[n] for n in names}

    # ------------------------------------------------------------------ assignment and reports
    def assign_with_distance(self, X):
        """Cluster of every row and its squared distance to that cluster's centre.

        The distance is measured where the clusters live (the embedding ``transform``
        returns); drift monitoring compares it with the fit's.  Lazy for Dask input.

        Returns
        -------
        labels : ndarray or dask.array.Array of shape (N,), int64
        distance : ndarray or dask.array.Array of shape (N,), float64
        """
        return assign_with_distance(self.transform(X), self.cluster_centers_)

    def report_embedding(self, X):
        """The rows as a report draws them: the embedding the clusters live in, shape (N, D)."""
        return self.transform(X)

    # ------------------------------------------------------------------ state (no pickle)
    def model_state(self) -> dict[str, Any]:
        """Everything ``transform`` / ``predict`` need, as named arrays + JSON (no pickle).

        Returns
        -------
        dict
            ``{"attrs": JSON-able dict, "arrays": {name: (dims tuple, ndarray)}}``.  ``attrs``
            holds the format tag, the parameters, the fitted views and the diagnostics.
            ``labels_`` (N values) is not part of the model: the run stores it.
        """
        check_is_fitted(self, self._fitted_attr)
        attrs, arrays = self._state()
        attrs = {
            "format": self.state_format,
            "params": encode_params(self),
            "views": {"names": list(self.view_names_), "n_features": dict(self.n_features_per_view_)},
            "diagnostics": to_jsonable({k: v for k, v in getattr(self, "diagnostics_", {}).items()
                                        if k != "timings"}),
            **attrs,
        }
        json.dumps(attrs)  # fail here, not in the store, if something is not JSON
        return {"attrs": attrs, "arrays": arrays}

    @classmethod
    def from_model_state(cls, state: dict[str, Any]):
        """A fitted estimator (without ``labels_``) that predicts exactly like the saved one."""
        attrs = state["attrs"]
        check_state_format(attrs, cls.state_format, cls.__name__)
        est = cls(**attrs["params"])
        views = attrs["views"]
        est.view_names_ = list(views["names"])
        est.n_features_per_view_ = {k: int(v) for k, v in views["n_features"].items()}
        est.n_features_in_ = int(sum(est.n_features_per_view_.values()))
        est.diagnostics_ = {**attrs.get("diagnostics", {}), "timings": {}}
        est._restore(attrs, StateArrays(state["arrays"]))
        return est

    def _state(self) -> tuple[dict, dict]:
        """(attrs, arrays) specific to the method (see ``model_state``)."""
        raise NotImplementedError

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        """Set the fitted attributes from ``_state``'s output."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reporting
    def summary(self) -> dict[str, Any]:
        """What reports show about the fitted model, in one JSON schema for every method.

        Keys: ``method``, ``estimator``, ``n_clusters``, ``views``, ``n_features``,
        ``n_landmarks`` (landmarks or anchors; None if the method has none),
        ``n_components`` (embedding width), ``kernel_names``, ``weights`` (a list of
        ``{"name", "labels", "values"}``: kernel weights, view weights, filter weights...),
        ``objective_history`` (list or None), ``n_iter``, ``converged``, ``spectrum``
        (``{"values": top eigenvalues of the combined kernel, decreasing, "k": n_clusters,
        "what": ...}`` or None), ``pep`` (``{"t", "base": {kernel: PEP}, "combined", ...}`` or
        None) and ``diagnostics`` (the method's own, without timings).
        """
        check_is_fitted(self, self._fitted_attr)
        out: dict[str, Any] = {
            "method": self.method, "estimator": type(self).__name__, "n_clusters": int(self.n_clusters),
            "views": list(self.view_names_), "n_features": dict(self.n_features_per_view_),
            "n_landmarks": None, "n_components": None, "kernel_names": None, "weights": [],
            "objective_history": None, "n_iter": None, "converged": None, "spectrum": None, "pep": None,
            "diagnostics": {k: v for k, v in getattr(self, "diagnostics_", {}).items() if k != "timings"},
        }
        out.update(self._summary_fields())
        return to_jsonable(out)

    def _summary_fields(self) -> dict[str, Any]:
        """The method's values for the keys of ``summary``."""
        return {}


class LandmarkEmbeddingEstimator(MkdistEstimator):
    """Estimators fitted on landmarks whose embedding of every row is clustered by k-means.

    ``fit`` runs the same hooks, in the same order and with the same seed, as the pipeline
    runs stage by stage (``LANDMARK_EMBEDDING``): ``sample_landmarks`` -> ``fit_landmarks``
    -> ``transform`` -> ``fit_centroids`` -> ``assign_embedding``.
    """

    stage_plan: ClassVar[tuple[str, ...]] = LANDMARK_EMBEDDING

    def fit(self, X, y=None):
        """Sample landmarks, fit on them, embed every row, k-means on the embedding.

        Parameters
        ----------
        X : array-like of shape (N, d), or list/tuple/dict of arrays of shape (N, d_v)
            One array per view, same rows; NumPy or row-chunked Dask (then ``labels_`` is
            lazy and the embedding is persisted on the workers for the k-means passes).
        y : ignored

        Returns
        -------
        self
        """
        views = self._fit_views(X)
        seed = resolve_seed(self.random_state)
        indices = self.sample_landmarks(views, seed)
        self.fit_landmarks(gather_rows(views, indices), indices, seed)
        H = self.transform(views)
        if is_dask_array(H):
            import dask

            H = dask.persist(H)[0]
        self.fit_centroids(H, seed)
        self.labels_ = self.assign_embedding(H)
        return self

    # ------------------------------------------------------------------ the pipeline's hooks
    def sample_landmarks(self, views: dict, seed: int) -> np.ndarray:
        """Validate against the input, then the sorted row indices of the landmarks."""
        raise NotImplementedError

    def fit_landmarks(self, landmark_views: dict, landmark_indices: np.ndarray, seed: int):
        """Fit the model on in-memory landmark rows (sets the fitted attributes but the centroids)."""
        raise NotImplementedError

    def _kmeans_params(self) -> dict[str, Any]:
        """``n_init``, ``max_iter``, ``tol`` of the final k-means."""
        raise NotImplementedError

    def fit_centroids(self, embedding, seed: int) -> KMeansResult | None:
        """k-means on the embedding of every row; sets ``cluster_centers_``, ``inertia_``.

        Returns the k-means result, or None where a method keeps the centroids of its
        landmark fit (e.g. ``LateFusionClustering(cluster_all_points=False)``).
        """
        km = kmeans(embedding, self.n_clusters, random_state=seed, **self._kmeans_params())
        self.cluster_centers_ = np.asarray(km.centers, dtype=np.float64)
        self.inertia_ = float(km.inertia)
        self.kmeans_n_iter_ = int(km.n_iter)
        return km

    def assign_embedding(self, embedding):
        """Nearest centroid of every embedded row, int64 (lazy for a Dask embedding)."""
        return assign_labels(embedding, self.cluster_centers_)
