"""The estimator protocol every mkdist method follows (scikit-learn ``_BaseKMeans`` style).

:class:`MkdistEstimator` owns what all methods share: ``fit_predict``, the scikit-learn
tags, the checks of fit and predict input (views, NaN/inf, fitted views and features), the
declarative parameter constraints (checked once per fit entry point by the base class, see
:func:`_fit_context`), the saved-state round trip (``model_state`` /
``from_model_state``, arrays + JSON, no pickle) and ``summary()``, one JSON schema for
every method that reports, ``mkdist inspect`` and the flow artifacts read.

The class attributes ``method``, ``multi_view``, ``stage_plan`` and ``state_format`` are
what the registry (:mod:`mkdist._methods._registry`) and the pipeline read; a method subclasses
:class:`MkdistEstimator` (fit, then predict: stage plan ``("model", "labels")``) or
:class:`LandmarkEmbeddingEstimator` (sample landmarks, fit on them, embed every row,
k-means on the embedding: ``("landmarks", "model", "embedding", "labels")``), whose ``fit``
runs exactly the hooks the pipeline runs stage by stage.  :class:`KernelLandmarkEstimator`
holds what the two landmark methods with base kernels share, so that no method module
imports another.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import warnings
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._core._cluster import persist_and_wait
from .._core._columns import frame_views, has_frames
from .._core._kernel_specs import resolve_kernel_specs
from .._core._kmeans import KMeansResult, assign_labels, assign_with_distance, kmeans
from .._core._sampling import gather_rows, sample_landmark_indices
from .._core._state import StateArrays, check_state_format, encode_params, to_jsonable
from .._core._validation import (
    as_views,
    check_finite,
    check_k_at_most,
    collect_constraints,
    is_dask_array,
    n_clusters_range,
    shown_value,
    validate_params,
)
from ..errors import AmbiguousNClustersWarning, InputValidationError, ParameterError
from . import _params

logger = logging.getLogger("mkdist")

__all__ = ["MkdistEstimator", "LandmarkEmbeddingEstimator", "KernelLandmarkEstimator", "FIT_PREDICT",
           "LANDMARK_EMBEDDING", "STAGE_PLANS", "resolve_seed", "default_n_landmarks", "default_embedding_dim"]

#: Fit on the data, then label every row with ``predict``.
FIT_PREDICT = ("model", "labels")
#: Sample landmarks, fit on them, embed every row out of sample, k-means on the embedding.
LANDMARK_EMBEDDING = ("landmarks", "model", "embedding", "labels")
#: The stage plans the pipeline knows how to run.
STAGE_PLANS = (FIT_PREDICT, LANDMARK_EMBEDDING)


#: Landmarks when ``n_landmarks=None``: at most this many unless a method caps them otherwise
#: (``LandmarkEmbeddingEstimator.max_default_landmarks``; see :func:`default_n_landmarks`).
DEFAULT_MAX_LANDMARKS = 1000


def default_n_landmarks(n_samples: int, max_landmarks: int = DEFAULT_MAX_LANDMARKS) -> int:
    """Number of landmarks used when ``n_landmarks=None``: min(N, ``max_landmarks``).

    The one rule of every landmark method; each caps it with its ``max_default_landmarks``
    (MultipleKernelClustering 1000, the default here; LateFusionClustering 2000).  For 1000:
    the MKC-AE paper uses 1000 landmarks on 30k-100k points; the bipartite-spectral paper
    argues Theta(sqrt(N)), which is 1000 at N = 1M.  Measured on MNIST (60k points,
    ``bench/bench_pipeline.py --part landmarks``): ACC stops improving at about 500
    landmarks (0.511 at 250, 0.544 at 500, 0.538-0.542 from 1000 to 4000), so 1000 keeps a
    2x margin over the knee at a fit cost of seconds.

    Parameters
    ----------
    n_samples : int
        N.
    max_landmarks : int, default=1000
        The method's cap.

    Returns
    -------
    int
    """
    return int(min(n_samples, max_landmarks))


#: The embedding has 2K columns for K up to this, K columns above (see
#: :func:`default_embedding_dim`).
WIDE_EMBEDDING_MAX_K = 10


def default_embedding_dim(n_clusters: int, n_landmarks: int) -> int:
    """Columns of the embedding when ``embedding_dim=None``: 2K for K <= 10, else K (<= n).

    Measured on the 28 shared multi-view sets (bench/RESULTS.md, quality; 5 seeds): with 2K
    columns the mean ACC rose on 14 of the 21 sets with K <= 10 and fell on 5 (UCI mfeat
    0.913 -> 0.940, MSRC-v1 0.72 -> 0.92, ACM 0.80 -> 0.72); in the seed-0 exploration it fell
    on 5 of the 7 sets with K > 10 (ORL, K = 40: 0.88 -> 0.76), where the extra eigenvectors
    carry noise.  Late fusion's d = 2k is the same observation.
    """
    d = 2 * n_clusters if n_clusters <= WIDE_EMBEDDING_MAX_K else n_clusters
    return int(max(n_clusters, min(d, n_landmarks)))


#: The methods that start a fit, from an estimator or from the pipeline's stages.  The base
#: class checks the parameters on entering the outermost one (:func:`_fit_context`), so a
#: method's own ``fit`` never calls the check.
FIT_ENTRY_POINTS = ("fit", "fit_transform", "sample_landmarks", "fit_landmarks")


def _fit_context(method):
    """``method``, a fit entry point whose first argument is the input, with the parameters
    checked against that input once before it runs (scikit-learn's ``_fit_context`` checks
    once per fit in the same way).

    The outermost entry point checks (:meth:`MkdistEstimator._check_params`) and calls
    ``method`` with the input as named views, converted once, and with the values the check
    resolved (``n_landmarks``, ``n_anchors``, ...) in ``self._fit_checks`` for the length of the
    call.  An entry point called inside it (``fit`` -> ``sample_landmarks`` -> ``fit_landmarks``)
    runs as written: the input it gets was checked by the outer one.
    """
    input_name = list(inspect.signature(method).parameters)[1]

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if "_fit_checks" in self.__dict__:
            return method(self, *args, **kwargs)
        X = args[0] if args else kwargs[input_name]
        views, self._fit_checks = self._checked_input(X)
        try:
            if args:
                out = method(self, views, *args[1:], **kwargs)
            else:
                out = method(self, *args, **{**kwargs, input_name: views})
        finally:
            del self._fit_checks
        if method.__name__ == "fit":
            self.profiles_ = _fit_profiles(self, X, views)
        return out

    checked._checks_parameters = True
    return checked


def _fit_profiles(est, X, views: dict):
    """The profiles of an in-memory fit's clusters in its input's own columns (a DataFrame's
    column names, else ``view:index``), from the rows as given (issue 42); None for Dask input,
    whose labels are lazy (a pipeline run computes them in its labels pass: ``result.profiles``)."""
    from .._core._profiles import ProfileLayout, profile_partial
    from .._core._validation import is_dask_array

    labels = getattr(est, "labels_", None)
    if labels is None or is_dask_array(labels) or any(is_dask_array(v) for v in views.values()):
        return None
    from .._core._columns import ArrowTable, frame_to_arrow, is_frame, plan_views
    from .._core._profile_tables import ClusterProfiles

    widths = {name: int(np.shape(v)[1]) for name, v in views.items()}
    columns, categories = None, None
    if is_frame(X):
        plan = plan_views(ArrowTable(frame_to_arrow(X)), categories=getattr(est, "categories_", None))
        columns, categories = plan.views, plan.categories
    layout = ProfileLayout.of_views(widths, columns, categories)
    blocks = [np.asarray(views[name].toarray() if hasattr(views[name], "toarray") else views[name])
              for name in layout.views]
    k = int(getattr(est, "n_clusters_", 0) or int(np.max(labels)) + 1)
    return ClusterProfiles(profile_partial(np.asarray(labels), blocks, layout, k), layout)


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
    the bases'; a built-in method's table lives in ``mkdist._methods._params``, so that arguments are
    checked without importing scikit-learn), implement ``fit`` / ``transform`` / ``predict``
    with the helpers here, and ``_state`` / ``_restore`` / ``_summary_fields``.  The parameters
    are checked by this class before a subclass's ``fit`` (or any of ``FIT_ENTRY_POINTS``)
    runs; the values the check resolved are in ``self._fit_checks`` during the fit.
    """

    #: Registry name (``mkdist.cluster(method=...)``, ``mkdist run --method``).
    method: ClassVar[str] = ""
    #: False: the estimator clusters exactly one view (one 2-D array).
    multi_view: ClassVar[bool] = True
    #: The run-store stages the pipeline runs for this method (one of ``STAGE_PLANS``).
    stage_plan: ClassVar[tuple[str, ...]] = FIT_PREDICT
    #: Tag of the saved state; bump the version when the state's layout changes.
    state_format: ClassVar[str] = ""
    #: Extra stages a run may ask for (e.g. ``"kernel_blocks"``, with a method of that name).
    optional_stages: ClassVar[tuple[str, ...]] = ()
    #: Fitted attribute whose presence means "fitted".
    _fitted_attr: ClassVar[str] = "cluster_centers_"
    #: Fewest rows a fit accepts.
    _min_samples: ClassVar[int] = 2
    _param_constraints: ClassVar[dict[str, list]] = _params.ESTIMATOR

    def __init_subclass__(cls, **kwargs):
        # Wrapped before scikit-learn's own wrapping (set_output, in super()), so that it sees
        # the caller's input rather than the views.
        for name in FIT_ENTRY_POINTS:
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "_checks_parameters", False):
                setattr(cls, name, _fit_context(method))
        super().__init_subclass__(**kwargs)

    # ------------------------------------------------------------------ sklearn protocol
    def fit_predict(self, X, y=None, **kwargs):
        """Fit and return ``labels_`` (a lazy Dask array for Dask input)."""
        return self.fit(X).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True  # scipy.sparse views are densified (mkdist._core._validation)
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
        return self._checked_input(X)[1]

    def _checked_input(self, X) -> tuple[dict[str, Any], dict[str, Any]]:
        """The input as named views, and the values the parameter check resolved against it."""
        views = self._input_views(X, fitting=True)
        self._check_arity(views)
        return views, self._check_params(int(next(iter(views.values())).shape[0]), views)

    def _input_views(self, X, *, fitting: bool) -> dict[str, Any]:
        """``X`` as named views; DataFrames through the table path, their categories learned
        by a fit (``categories_``) and reused to encode what is predicted."""
        if has_frames(X):
            X, categories = frame_views(X, None if fitting else getattr(self, "categories_", None))
            if fitting:
                self.categories_ = categories
        return as_views(X)

    def _check_params(self, n_samples: int, views: dict) -> dict[str, Any]:
        """The constraint table, then the data-dependent checks of ``_check_params_vs_input``."""
        if n_samples < self._min_samples:
            raise InputValidationError(
                f"n_samples={n_samples} is too few: at least {self._min_samples} samples are required.")
        validate_params(collect_constraints(type(self), "_param_constraints"), self.get_params(deep=False))
        return self._check_params_vs_input(n_samples, views) or {}

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        """Checks that need N or the views (metadata only); returns resolved values."""
        check_k_at_most(self.n_clusters, self._largest_k(), n_samples, "rows", "")
        return {}

    # ------------------------------------------------------------------ choosing K
    def _largest_k(self) -> int:
        """The largest K the fit may use, for the checks against N, landmarks and embedding
        widths: ``n_clusters``, k_max of a range, or k_min for "auto" (whose k_max follows
        the landmarks: :meth:`_check_k_range`)."""
        asked = n_clusters_range(self.n_clusters)
        if asked is None:
            return int(self.n_clusters)
        return asked[1] if asked[1] is not None else asked[0]

    def _check_k_range(self, n_landmarks: int, what: str = "landmarks") -> tuple[int, int] | None:
        """(k_min, k_max) the K choice searches on ``n_landmarks`` landmarks, None for an integer K.

        "auto" searches [2, min(50, n // 15)] (``mkdist._core._nclusters.default_k_max``: at least
        fifteen landmarks per cluster at the largest K), and reads up to min(50, n // 10) when the
        spectrum shows a clear gap there (the k_max returned).  Refused here, before any heavy work: a
        range whose k_max is not below the number of landmarks (the gap after the k_max-th
        eigenvalue needs one more), or fewer than 4 landmarks.
        """
        from .._core._nclusters import _default_search

        asked = n_clusters_range(self.n_clusters)
        if asked is None:
            return None
        k_min, k_max = asked
        k_max = _default_search(n_landmarks, k_min)[1] if k_max is None and n_landmarks >= 4 else (k_max or k_min)
        if n_landmarks < 4 or k_max >= n_landmarks:
            raise ParameterError(
                "n_clusters", shown_value(self.n_clusters),
                f": searching K up to {k_max} needs more than {k_max} {what} (and at least 4); there are "
                f"{n_landmarks}: raise `n_{what}`, lower k_max or give K as an integer.")
        return k_min, k_max

    def _choose_n_clusters(self, kernel: np.ndarray, n_landmarks: int, seed: int, kernel_weights=None) -> int:
        """K for this fit, and ``n_clusters_choice_``: the integer ``n_clusters``, or the choice of
        ``mkdist._core._nclusters.choose_n_clusters`` on the landmark kernel when it is "auto" or a range.

        The one place every method that supports "auto" chooses K (they call it with their
        landmark kernel as soon as they have it, before anything that depends on K).

        Parameters
        ----------
        kernel : ndarray of shape (n, n) or (m, n, n)
            The combined landmark kernel, or the stack of preprocessed base kernels
            (uniform weights unless ``kernel_weights``).
        n_landmarks : int
        seed : int
            The fit's seed (the resampling votes derive from it: same seed, same K).

        Returns
        -------
        int
            K.  An ambiguous choice (no clear gap) still returns its best guess and warns
            with ``AmbiguousNClustersWarning``, naming the runner-up.
        """
        from .._core._nclusters import choose_n_clusters

        k_range = self._check_k_range(n_landmarks)
        self.n_clusters_choice_ = None
        if k_range is None:
            return int(self.n_clusters)
        # "auto" leaves k_max to the rule: it searches a narrower range on small data (fifth round).
        choice = choose_n_clusters(kernel, k_min=k_range[0], k_max=n_clusters_range(self.n_clusters)[1],
                                   kernel_weights=kernel_weights, random_state=seed)
        self.n_clusters_choice_ = choice
        if choice.ambiguous:
            warnings.warn(f"n_clusters={self.n_clusters!r}: {choice.verdict()}. The fit uses K = "
                          f"{choice.n_clusters}; give n_clusters as an integer if you know K.",
                          AmbiguousNClustersWarning, stacklevel=4)
        else:
            logger.info("n_clusters=%r chose %s", self.n_clusters, choice.verdict())
        return choice.n_clusters

    @property
    def n_clusters_(self) -> int:
        """K of the fit: ``n_clusters``, or the K chosen when it was "auto" or a range."""
        choice = self.__dict__.get("n_clusters_choice_")
        if choice is not None:
            return int(choice.n_clusters)
        if n_clusters_range(self.n_clusters) is not None:
            raise AttributeError(f"n_clusters={self.n_clusters!r} is chosen by fit; this estimator is not fitted.")
        return int(self.n_clusters)

    def landmark_kernel(self) -> np.ndarray | None:
        """The (n, n) landmark kernel the K choice reads, rebuilt from the fitted model (uniform
        combination of the preprocessed base kernels); None for a method that has none."""
        return None

    def n_clusters_hint(self) -> Any:
        """What the K rule says about this fit: ``n_clusters_choice_`` when the fit chose K,
        else the rule run now on :meth:`landmark_kernel` (K given by hand; computed once and
        kept with the model state).  None for a method without a landmark kernel.

        Returns
        -------
        NClustersChoice or None
        """
        from .._core._nclusters import choose_n_clusters

        choice = self.__dict__.get("n_clusters_choice_")
        if choice is not None:
            return choice
        if "_n_clusters_hint" not in self.__dict__:
            K = self.landmark_kernel()
            hint = None
            if K is not None and K.shape[0] >= 4:
                hint = choose_n_clusters(K, k_min=2, random_state=0)
            self._n_clusters_hint = hint
        return self._n_clusters_hint

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
        views = self._input_views(X, fitting=False)
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
            "views": {"names": list(self.view_names_), "n_features": dict(self.n_features_per_view_),
                      **({"categories": self.categories_} if getattr(self, "categories_", None) else {})},
            "diagnostics": to_jsonable({k: v for k, v in getattr(self, "diagnostics_", {}).items()
                                        if k != "timings"}),
            "n_clusters_choice": _choice_dict(self.__dict__.get("n_clusters_choice_")),
            "n_clusters_hint": _choice_dict(self.__dict__.get("_n_clusters_hint")),
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
        if views.get("categories"):
            est.categories_ = {k: list(v) for k, v in views["categories"].items()}
        est.diagnostics_ = {**attrs.get("diagnostics", {}), "timings": {}}
        from .._core._nclusters import NClustersChoice

        if attrs.get("n_clusters_choice"):
            est.n_clusters_choice_ = NClustersChoice.from_dict(attrs["n_clusters_choice"])
        if attrs.get("n_clusters_hint"):
            est._n_clusters_hint = NClustersChoice.from_dict(attrs["n_clusters_hint"])
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
        ``n_clusters_choice`` (what the K rule said, see :meth:`n_clusters_hint`: the choice's
        fields, with ``chosen_by_fit`` True when K was "auto" or a range, False for a hint on
        a K given by hand; None when not computed), ``objective_history`` (list or None),
        ``n_iter``, ``converged``, ``spectrum``
        (``{"values": top eigenvalues of the combined kernel, decreasing, "k": n_clusters,
        "what": ...}`` or None), ``pep`` (``{"t", "base": {kernel: PEP}, "combined", ...}`` or
        None) and ``diagnostics`` (the method's own, without timings).
        """
        check_is_fitted(self, self._fitted_attr)
        out: dict[str, Any] = {
            "method": self.method, "estimator": type(self).__name__, "n_clusters": int(self.n_clusters_),
            "n_clusters_choice": self._choice_summary(),
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

    def _choice_summary(self) -> dict[str, Any] | None:
        """The K rule's verdict for ``summary`` (computed only if the fit or a caller did)."""
        chosen = self.__dict__.get("n_clusters_choice_")
        choice = chosen if chosen is not None else self.__dict__.get("_n_clusters_hint")
        if choice is None:
            return None
        d = choice.as_dict()
        return {**d, "chosen_by_fit": chosen is not None, "asked": to_jsonable(self.n_clusters),
                "verdict": choice.verdict()}


def _choice_dict(choice: Any) -> dict[str, Any] | None:
    return None if choice is None else choice.as_dict()


class LandmarkEmbeddingEstimator(MkdistEstimator):
    """Estimators fitted on landmarks whose embedding of every row is clustered by k-means.

    ``fit`` runs the same hooks, in the same order and with the same seed, as the pipeline
    runs stage by stage (``LANDMARK_EMBEDDING``): ``sample_landmarks`` -> ``fit_landmarks``
    -> ``transform`` -> ``fit_centroids`` -> ``assign_embedding``.  The parameters are
    checked on entering ``fit``, or, when the stages call the hooks one by one, on entering
    ``sample_landmarks`` (against the input) and ``fit_landmarks`` (against the landmark rows).
    A subclass has an ``n_landmarks`` parameter (None: :func:`default_n_landmarks` with the
    class's ``max_default_landmarks``) and implements ``fit_landmarks`` and ``_kmeans_params``.
    """

    stage_plan: ClassVar[tuple[str, ...]] = LANDMARK_EMBEDDING
    #: Landmarks when ``n_landmarks=None``: min(N, this) (:func:`default_n_landmarks`).
    max_default_landmarks: ClassVar[int] = DEFAULT_MAX_LANDMARKS

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
            H = persist_and_wait(H)
        self.fit_centroids(H, seed)
        self.labels_ = self.assign_embedding(H)
        return self

    # ------------------------------------------------------------------ landmarks
    def _n_landmarks(self, n_samples: int) -> int:
        """n: the ``n_landmarks`` parameter, or when None min(N, ``max_default_landmarks``)."""
        if self.n_landmarks is None:
            return default_n_landmarks(n_samples, self.max_default_landmarks)
        return int(self.n_landmarks)

    def _check_landmarks(self, n_samples: int) -> tuple[int, int]:
        """n against N and the largest K the fit may use against n; returns (n, that K)."""
        n = self._n_landmarks(n_samples)
        if n > n_samples:
            raise InputValidationError(f"n_landmarks={n} must be <= n_samples={n_samples}.")
        k_range = self._check_k_range(n)
        k = self._largest_k() if k_range is None else k_range[1]
        check_k_at_most(self.n_clusters, k, n, "landmarks", "raise `n_landmarks`")
        return n, k

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        return {"n_landmarks": self._check_landmarks(n_samples)[0]}

    def _landmark_sampling(self, seed: int) -> dict[str, Any]:
        """How ``sample_landmarks`` draws from the fit's seed: the keywords of
        ``mkdist._core._sampling.sample_landmark_indices`` (``method``, ``random_state``)."""
        return {"random_state": seed}

    # ------------------------------------------------------------------ the pipeline's hooks
    def sample_landmarks(self, views: dict, seed: int) -> np.ndarray:
        """Draw the landmarks: sorted row indices, shape (n,) (the parameters are checked
        against ``views`` first, by the fit context)."""
        return sample_landmark_indices(views, self._fit_checks["n_landmarks"], **self._landmark_sampling(seed))

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
        km = kmeans(embedding, self.n_clusters_, random_state=seed, **self._kmeans_params())
        self.cluster_centers_ = np.asarray(km.centers, dtype=np.float64)
        self.inertia_ = float(km.inertia)
        self.kmeans_n_iter_ = int(km.n_iter)
        return km

    def assign_embedding(self, embedding):
        """Nearest centroid of every embedded row, int64 (lazy for a Dask embedding)."""
        return assign_labels(embedding, self.cluster_centers_)


class KernelLandmarkEstimator(LandmarkEmbeddingEstimator):
    """A landmark-embedding estimator whose model is base kernels on the landmarks
    (``MultipleKernelClustering``, ``LateFusionClustering``).

    What those methods share lives here once: the checks of ``n_landmarks``,
    ``embedding_dim`` and ``kernels`` against the input, the landmark kernel the K rule
    reads, and the saved state around the fitted model.  A subclass has the parameters
    ``n_landmarks``, ``embedding_dim``, ``kernels``, ``center`` and ``normalize``; it keeps its
    model in ``model_`` (with ``landmarks``, ``kernels`` and ``state()``; ``_model_type`` is its
    class, with ``from_state``), sets it with ``_set_model`` and sets the fit's
    ``objective_history_``, ``n_iter_`` and ``converged_``.
    """

    _fitted_attr: ClassVar[str] = "model_"
    #: The fitted model's class (``from_state(attrs, get)`` rebuilds ``model_``).
    _model_type: ClassVar[type]

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        n, k = self._check_landmarks(n_samples)
        d = self._embedding_dim(n, k)
        resolve_kernel_specs(self.kernels, list(views))  # unknown views / sets / bad specs fail here
        return {"n_landmarks": n, "embedding_dim": d}

    def _embedding_dim(self, n_landmarks: int, k: int | None = None) -> int:
        """d, the embedding's columns: ``embedding_dim`` checked against K and n, or
        :func:`default_embedding_dim` (2K for K <= 10, else K; at most n).  ``k``: the K of
        the fit (None: ``n_clusters_``, once it is chosen)."""
        k = self.n_clusters_ if k is None else k
        if self.embedding_dim is None:
            return default_embedding_dim(k, n_landmarks)
        d = int(self.embedding_dim)
        if not k <= d <= n_landmarks:
            raise InputValidationError(
                f"embedding_dim={d} must be >= n_clusters={k} and <= the number of landmarks ({n_landmarks}).")
        return d

    def _set_model(self, model: Any) -> None:
        """Set ``model_`` and the fitted attributes read from it."""
        raise NotImplementedError

    def landmark_kernel(self) -> np.ndarray:
        """The uniform combination of the preprocessed base kernels on the landmarks (every
        kernel of the model, dropped ones included), (n, n), rebuilt from the model (what
        ``n_clusters="auto"`` chooses K on)."""
        from .._core._nclusters import average_landmark_kernel

        check_is_fitted(self, "model_")
        # The model's own preprocessing: the parameter may be "auto", resolved by the fit.
        prep = self.model_.preprocessing
        return average_landmark_kernel(self.model_.landmarks, self.model_.kernels, bool(prep.center), prep.normalize)

    def _state(self) -> tuple[dict, dict]:
        attrs, arrays = self.model_.state()
        arrays["objective_history"] = (("iteration",), np.asarray(self.objective_history_))
        return {"model": attrs, "n_iter": int(self.n_iter_), "converged": bool(self.converged_)}, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        self._set_model(self._model_type.from_state(attrs["model"], get))
        self.objective_history_ = get("objective_history")
        self.n_iter_ = int(attrs["n_iter"])
        self.converged_ = bool(attrs["converged"])
