"""The power k-means estimators: :class:`RFFKernelPowerKMeans` and :class:`MultiViewRFFPowerKMeans`."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from numbers import Real
from typing import Any, ClassVar

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..._core._blocks import RowBlocks
from ..._core._distances import bandwidth_statistic, check_bandwidth
from ..._core._sampling import gather_rows
from ..._core._scaling import FeatureScaling, scales_features
from ..._core._state import StateArrays
from ..._core._validation import Interval, Options, check_finite, is_dask_array, validate_params
from ...errors import InputValidationError
from .. import _params
from .._base import MkdistEstimator, resolve_seed
from .._registry import register
from ._loop import fit_loop
from ._passes import FeatureMap, PassModel, feature_map_of, feature_rows, row_costs, row_labels, view_features
from ._restarts import Restarter, feature_peps, restart_counts, run_restarts, select_restart

__all__ = ["RFFKernelPowerKMeans", "MultiViewRFFPowerKMeans", "default_n_components"]

#: Rows drawn uniformly (without replacement; all rows when N is smaller) to estimate the
#: feature scaling, the bandwidths, the k-means start, the typicality eta and the default
#: s0.  Estimates are means or medians over this many rows: ~1% relative error.
INIT_SAMPLE_SIZE = 20_000

#: Rows of that sample whose pairwise distances give the median bandwidth (~500k pairs).
BANDWIDTH_PAIR_ROWS = 1_000

# lam="auto": lambda per data point, the paper's lambda = 100 on its ~2,000-point data sets.
LAM_PER_POINT = 100.0 / 2000.0


def default_n_components(n_clusters: int, rule: str = "main") -> int:
    """Number D of random frequencies per view for ``n_components=None``.

    Parameters
    ----------
    n_clusters : int
        k.
    rule : {"main", "appendix"}, default="main"
        "main": ceil(4 ln^3(2k)), the main text's recommendation after Theorem 3
        (108 for k = 10).  "appendix": ceil(4 ln^3(k / delta) / eps^2) with
        eps = delta = 0.5, i.e. ceil(16 ln^3(2k)) (431 for k = 10), section B.1.

    Returns
    -------
    int
        D >= 1 (each view then has 2D features).
    """
    if rule not in _params.D_RULES:
        raise InputValidationError(f"D rule {rule!r}; choose one of {_params.D_RULES}.")
    factor = 4.0 if rule == "main" else 16.0
    return max(1, math.ceil(factor * math.log(2 * n_clusters) ** 3))



class RFFPowerKMeansBase(MkdistEstimator):
    """Shared fit / predict / state code; subclasses set ``_possibilistic``."""

    _possibilistic: ClassVar[bool] = False
    _fitted_attr: ClassVar[str] = "centroids_"
    _param_constraints: ClassVar[dict[str, list]] = _params.RFF_POWER_KMEANS

    # ------------------------------------------------------------------ validation
    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        """n_clusters <= N, D from its rule, one bandwidth rule or value per view; ``lam``
        (None: fixed view weights) and ``fuzzifier`` for the fit."""
        super()._check_params_vs_input(n_samples, views)
        D = self.n_components
        if D is None or isinstance(D, str):
            D = default_n_components(self.n_clusters, D or "main")
        bw, n_views = self.bandwidth, len(views)
        if isinstance(bw, (list, tuple, np.ndarray)):
            if len(bw) != n_views:
                raise InputValidationError(
                    f"`bandwidth` has {len(bw)} values but the input has {n_views} view(s).")
            bw = [b.item() if isinstance(b, np.generic) else b for b in bw]  # np.str_ -> str
            rule = [Options(*_params.POWER_BANDWIDTH_RULES), Interval(Real, 0, None, closed="neither")]
            validate_params({f"bandwidth[{i}]": rule for i in range(n_views)},
                            {f"bandwidth[{i}]": b for i, b in enumerate(bw)})
            bandwidths = [b if isinstance(b, str) else float(b) for b in bw]
        else:
            bandwidths = [bw if isinstance(bw, str) else float(bw)] * n_views
        return {"D": int(D), "bandwidths": bandwidths, "lam": None, "fuzzifier": 2.0}

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None):
        """Cluster the rows of X.

        Four steps: the init sample and what is estimated on it (scaling, bandwidths;
        :meth:`_fit_sample`), the restarts on it (:meth:`_fit_restarts`), the kept run refined
        by passes over all rows when the sample is not all of them (:meth:`_refine`), and the
        fitted attributes (:meth:`_set_fitted`).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (N, d), or a list / dict of L such views
            Views share their rows.  Dask views must share their row chunks (NumPy views
            mixed with Dask ones are chunked like them).  NaN/inf is rejected (for Dask input
            in the first pass that reaches the bad chunk).
        y : ignored

        Returns
        -------
        self
        """
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        views = self._fit_views(X)
        rows = RowBlocks(views, block_rows=int(self.chunk_size))
        # One RandomState for the fit's draws, in this order (it fixes what a seed gives): the
        # sample, per view the median bandwidth's rows, one seed per restart, the consensus's
        # seed.  A restart draws its frequencies and its k-means seed from its own seed (see
        # ``Restarter.__call__``).
        rng = np.random.RandomState(resolve_seed(self.random_state))
        sample, sample_idx = self._fit_sample(rows, rng)
        self._set_fitted_views(views)
        timings["sample_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        restart, run, record = self._fit_restarts(rows, sample, rng)
        self.rff_frequencies_ = run["frequencies"]
        phis, sample_rows = restart.features(run["frequencies"])
        timings["restarts_s"] = time.perf_counter() - t0

        refine = rows.n_samples > sample_idx.size
        result = self._refine(rows, run, restart, phis, timings) if refine else run
        self._set_fitted(result, record, phis, timings)
        # NumPy input: the rows of the last pass (the cached features, returned by _refine
        # with the result).  Dask input: the raw rows, so that the lazy labels_ holds no
        # reference to the persisted features (their memory is released with the fit) -- the
        # same features, recomputed by the same map.  Without a refinement the last passes
        # walked the sample, i.e. all rows in order.  The data was checked by the first pass
        # (or with the sample).
        final = result["model"]
        last_rows = result.get("rows", sample_rows) if refine else sample_rows
        if rows.is_dask:
            last_rows, final = rows, dataclasses.replace(final, features=self._feature_map())
        final = dataclasses.replace(final, distance_dtype=np.float64)  # as predict: see PassModel
        self.labels_ = last_rows.map(row_labels, final, n_cols=None, dtype=np.int64,
                                     name="rff-power-labels", check_finite=False)
        return self

    def _fit_sample(self, rows: RowBlocks, rng: np.random.RandomState) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The init sample (INIT_SAMPLE_SIZE rows, all when N is smaller; one read), the feature
        scaling and the bandwidths estimated on it; sets ``feature_centers_``,
        ``feature_scales_``, ``bandwidths_`` and ``n_components_``.

        Returns
        -------
        sample : dict of str to ndarray of shape (n, d_l), float64
        sample_idx : ndarray of shape (n,)
        """
        N = rows.n_samples
        sample_idx = (np.arange(N) if N <= INIT_SAMPLE_SIZE
                      else np.sort(rng.choice(N, INIT_SAMPLE_SIZE, replace=False)))
        arrays = dict(zip(rows.names, rows.arrays))
        sample = gather_rows(arrays, sample_idx) if rows.is_dask or N > INIT_SAMPLE_SIZE else arrays
        sample = {name: np.asarray(v, dtype=np.float64) for name, v in sample.items()}
        if rows.is_dask:  # NumPy input was checked whole (_fit_views); NaN here would make sigma NaN
            check_finite(sample, row_numbers=sample_idx)
        scaling = FeatureScaling.fit(self.scale, sample)
        where = "all rows" if N <= INIT_SAMPLE_SIZE else f"{sample_idx.size} sampled rows"
        centers, scales, sigmas = [], [], []
        for (name, v), rule in zip(sample.items(), self._fit_checks["bandwidths"]):
            c = np.zeros(v.shape[1]) if scaling is None else scaling.offset[name]
            sc = np.ones(v.shape[1]) if scaling is None else scaling.scale[name]
            if isinstance(rule, str):
                scaled = v if scaling is None else (v - c) / sc
                sigma = bandwidth_statistic(scaled, rule, rng=rng, pair_rows=BANDWIDTH_PAIR_ROWS)
                check_bandwidth(sigma, name, f"the {rule!r} bandwidth on {where}")
            else:
                sigma = rule
            centers.append(c)
            scales.append(sc)
            sigmas.append(sigma)
        self.feature_centers_ = centers
        self.feature_scales_ = scales
        self.bandwidths_ = np.asarray(sigmas)
        self.n_components_ = int(self._fit_checks["D"])
        return sample, sample_idx

    def _fit_restarts(self, rows: RowBlocks, sample: dict[str, np.ndarray],
                      rng: np.random.RandomState) -> tuple[Restarter, dict[str, Any], dict[str, Any]]:
        """The restarts on the sample, each with its own frequencies, k-means start and
        annealing, and the run kept of them (``restart_selection``); sets ``n_init_``.

        Returns
        -------
        restart : Restarter
        run : dict
            The kept run (``Restarter.__call__``'s dict).
        record : dict
            ``diagnostics_["restarts"]``.
        """
        p = self._fit_checks
        L, k, D = len(sample), int(self.n_clusters), p["D"]
        n = next(iter(sample.values())).shape[0]
        lam = p["lam"]
        self.n_init_, start_n_init = restart_counts(self.n_init, n, k, D, L)
        restart = Restarter(
            sample=list(sample.values()), names=rows.names, centers=self.feature_centers_,
            scales=self.feature_scales_, sigmas=list(self.bandwidths_), D=D, k=k, possibilistic=self._possibilistic,
            fuzzifier=p["fuzzifier"], s0=self.s0, block_rows=int(self.chunk_size),
            # lambda per point is the model's: eq. 31 sums the view costs over the rows it sees.
            lam=None if lam is None else lam * n / rows.n_samples,
            loop=dict(annealing=float(self.annealing), anneal_every=int(self.anneal_every),
                      max_iter=int(self.max_iter), tol=float(self.tol),
                      trace=getattr(self, "_trace", None)),
            start_n_init=start_n_init)
        runs = run_restarts(restart, [int(seed) for seed in rng.randint(np.iinfo(np.int32).max, size=self.n_init_)],
                            on_cluster=rows.is_dask)
        best, agreement = select_restart(runs, self.restart_selection)
        run = runs[best]
        consensus_ari = None
        if self.restart_selection == "consensus" and len(runs) > 1:
            best, run, consensus_ari = restart.from_consensus(runs, int(rng.randint(np.iinfo(np.int32).max)))
        record = {
            "rows": int(n), "selection": self.restart_selection, "best": best,
            "start_n_init": start_n_init,
            "consensus_ari": consensus_ari,
            "consensus_final_objective": None if consensus_ari is None else run["final_objective"],
            "final_objective": [r["final_objective"] for r in runs], "agreement": agreement,
            "seed": [r["seed"] for r in runs], "s0": [r["s0"] for r in runs],
            "s_final": [float(r["s_history"][-1]) for r in runs],
            "n_iter": [int(r["n_iter"]) for r in runs],
            "converged": [bool(r["converged"]) for r in runs]}
        return restart, run, record

    def _refine(self, rows: RowBlocks, run: dict[str, Any], restart: Restarter, phis: list,
                timings: dict[str, float]) -> dict[str, Any]:
        """The kept run refined over all rows, from its final centroids and power.

        Its features are kept between passes when they fit the budget (``feature_rows``).
        Returns the iterations' dict (``fit_loop``) with the run's ``s0`` and the ``rows`` the
        last pass read.
        """
        t0 = time.perf_counter()
        features = self._feature_map()
        cached = feature_rows(rows, features)
        model = dataclasses.replace(run["model"], features=features)
        if cached is not None:
            rows, model = cached, dataclasses.replace(model, features=None)
        timings["features_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = {**fit_loop(rows, model, s0=run["s_next"], lam=self._fit_checks["lam"], reseed_pool=phis,
                             **restart.loop), "s0": run["s0"], "rows": rows}
        timings["refine_s"] = time.perf_counter() - t0
        return result

    def _set_fitted(self, result: dict[str, Any], record: dict[str, Any], phis: list,
                    timings: dict[str, float]) -> None:
        """The fitted attributes of the final run (``result``), its diagnostics and warnings."""
        timings.setdefault("refine_s", 0.0)
        k = int(self.n_clusters)
        final = result["model"]
        self.s0_ = float(result["s0"])
        self.s_ = float(result["s_history"][-1])
        self.s_history_ = result["s_history"]
        self.objective_history_ = result["objective_history"]
        self.n_iter_ = int(result["n_iter"])
        self.centroids_ = final.centroids
        self.cluster_centers_ = np.hstack(list(final.centroids))
        self.view_weights_ = final.view_weights
        if self._possibilistic:
            self.typicality_ = final.typicality
            self.lam_ = float(self._fit_checks["lam"])
        self.diagnostics_ = {key: result[key] for key in
                             ("converged", "n_merged_iterations", "merged_at_end", "n_reseeded")}
        self.diagnostics_["restarts"] = record
        self.diagnostics_["timings"] = timings
        self.diagnostics_["pep"] = feature_peps(phis, final.view_weights, k)
        if result["merged_at_end"]:
            warnings.warn(
                f"{type(self).__name__}: after max_iter={self.max_iter} iterations two centroids "
                f"still coincide (s={self.s_:.3g}): the partition has fewer than {k} distinct "
                "clusters. Raise max_iter, or start from a more negative s0.",
                ConvergenceWarning, stacklevel=3)

    def _feature_map(self) -> FeatureMap:
        return feature_map_of(self.rff_frequencies_, self.feature_centers_, self.feature_scales_)

    def _model(self) -> PassModel:
        return PassModel(self._feature_map(), self.centroids_, self.view_weights_, self.s_,
                      getattr(self, "typicality_", None),
                      float(getattr(self, "fuzzifier", 2.0)), distance_dtype=np.float64)

    # ------------------------------------------------------------------ inference
    def _rows(self, X) -> RowBlocks:
        return RowBlocks(self._predict_views(X), block_rows=int(self.chunk_size))

    def transform(self, X):
        """Assignment costs of every point to every cluster (not the RFF features).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, d), or a list / dict of views

        Returns
        -------
        costs : ndarray or lazy dask.array.Array of shape (n, n_clusters), float64
            C_ij = sum_l alpha_l d~_ij,l, the argument of the power mean (squared RFF
            distances averaged over views for plain power k-means; see the class Notes).
            ``predict`` is its row-wise argmin.
        """
        rows = self._rows(X)
        return rows.map(row_costs, self._model(), n_cols=int(self.centroids_.shape[1]),
                        dtype=np.float64, name="rff-power-costs")

    def predict(self, X):
        """Cluster of smallest assignment cost for every point.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n, d), or a list / dict of views

        Returns
        -------
        labels : ndarray of shape (n,), int64 (lazy Dask array for Dask input)
        """
        rows = self._rows(X)
        return rows.map(row_labels, self._model(), n_cols=None, dtype=np.int64,
                        name="rff-power-labels")

    def rff_features(self, X) -> list:
        """The random Fourier features phi_l(x) of every view, as used by the fit.

        Returns
        -------
        list of L ndarrays or lazy Dask arrays of shape (n, 2 n_components_), float64
            (the passes of the fit use them rounded to ``FEATURE_DTYPE``)
        """
        return view_features(self._rows(X), dataclasses.replace(self._feature_map(), dtype=np.float64))

    def assign_with_distance(self, X):
        """Cluster of smallest assignment cost and that cost (what drift monitoring compares).

        Returns
        -------
        labels : ndarray or lazy dask.array.Array of shape (n,), int64
        cost : ndarray or lazy dask.array.Array of shape (n,), float64
        """
        costs = self.transform(X)
        return costs.argmin(axis=1).astype(np.int64), costs.min(axis=1)

    def report_embedding(self, X):
        """The views' RFF features side by side, each scaled by sqrt(view weight): the space the
        centroids live in, as a report draws it, shape (n, L * 2 n_components_)."""
        parts = [f * np.sqrt(a) for f, a in zip(self.rff_features(X), self.view_weights_)]
        if is_dask_array(parts[0]):
            import dask.array as da

            return da.concatenate(parts, axis=1)
        return np.hstack(parts)

    # ------------------------------------------------------------------ state and summary
    def _state(self) -> tuple[dict, dict]:
        """Per-view arrays are named ``<array>__<view>`` with dims ``feature__<view>``; the
        other dims are "view", "cluster", "frequency", "rff_feature" and "iteration"."""
        attrs = {"n_components": int(self.n_components_), "s0": float(self.s0_),
                 "lam": float(self.lam_) if self._possibilistic else None, "s": float(self.s_),
                 "n_iter": int(self.n_iter_)}
        arrays: dict[str, tuple[tuple[str, ...], np.ndarray]] = {
            "centroids": (("view", "cluster", "rff_feature"), self.centroids_),
            "view_weights": (("view",), self.view_weights_),
            "bandwidths": (("view",), self.bandwidths_),
            "s_history": (("iteration",), self.s_history_),
            "objective_history": (("iteration",), self.objective_history_),
        }
        if self._possibilistic:
            arrays["typicality"] = (("cluster", "view"), self.typicality_)
        names = self.view_names_
        for name, W in zip(names, self.rff_frequencies_):
            arrays[f"rff_frequencies__{name}"] = ((f"feature__{name}", "frequency"), W)
        if scales_features(self.scale):
            arrays.update(FeatureScaling(self.scale, dict(zip(names, self.feature_centers_)),
                                         dict(zip(names, self.feature_scales_))).state_arrays())
        return attrs, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        names = self.view_names_
        self.n_components_ = int(attrs["n_components"])
        self.s0_ = float(attrs["s0"])
        if self._possibilistic and attrs.get("lam") is not None:
            self.lam_ = float(attrs["lam"])
        self.s_ = float(attrs["s"])
        self.n_iter_ = int(attrs["n_iter"])
        self.centroids_ = get("centroids", np.float64)
        self.cluster_centers_ = np.hstack(list(self.centroids_))
        self.view_weights_ = get("view_weights", np.float64)
        self.bandwidths_ = get("bandwidths", np.float64)
        self.s_history_ = get("s_history")
        self.objective_history_ = get("objective_history")
        if self._possibilistic:
            self.typicality_ = get("typicality", np.float64)
        self.rff_frequencies_ = [get(f"rff_frequencies__{n}") for n in names]
        scaling = FeatureScaling.from_state(self.scale, names, get)
        d = self.n_features_per_view_
        if scaling is None:
            self.feature_centers_ = [np.zeros(d[n]) for n in names]
            self.feature_scales_ = [np.ones(d[n]) for n in names]
        else:
            self.feature_centers_ = [scaling.offset[n] for n in names]
            self.feature_scales_ = [scaling.scale[n] for n in names]

    def _summary_fields(self) -> dict[str, Any]:
        """``n_components`` is D (frequencies per view, each view has 2D features); one
        Gaussian RFF kernel per view."""
        views = list(self.view_names_)
        names = [f"{v}:rff-gaussian(sigma={s:.4g})" for v, s in zip(views, self.bandwidths_)]
        pep = self.diagnostics_.get("pep")
        if pep:
            pep = {**pep, "base": dict(zip(names, pep["base"]))}  # {"t", "base", "combined"}
        return {
            "n_components": int(self.n_components_), "kernel_names": names,
            "weights": [{"name": "view weights", "labels": views,
                         "values": np.asarray(self.view_weights_).tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(),
            "n_iter": int(self.n_iter_), "converged": bool(self.diagnostics_.get("converged")),
            "pep": pep or None,
        }


#: The parameters, attributes and notes both power k-means estimators document alike, written once
#: and put in their docstrings by :func:`_shared_doc` (as ``%(name)s``), so that the two cannot drift.
_DOC = {
    "parameters_data": """\
    n_clusters : int, default=8
        k, the number of clusters (>= 1; at most the number of samples).
    n_components : int, "main", "appendix" or None, default=None
        D, random frequencies per view (each view then has 2D features, a sine and a
        cosine per frequency).  None / "main": ceil(4 ln^3(2k)), the paper's main-text
        rule (108 for k = 10); "appendix": ceil(16 ln^3(2k)) (431 for k = 10).  See
        :func:`default_n_components`.
    bandwidth : "median", "mean", float or sequence, default="median"
        Gaussian bandwidth sigma per view, estimated once on the (scaled) init sample:
        "median" is the median pairwise distance of up to 1,000 sample rows, "mean" the
        root mean squared pairwise distance (the bipartite-spectral paper's rule).  A number
        applies to every view; a sequence gives one rule or number per view (why not the
        paper's fixed sigma: ``docs/algorithms.md``, "Power k-means").
    s0 : "auto" or float < 0, default="auto"
        Initial power; "auto" ties it to the data: s0 = -1 / median_i (log C_i(2) - log C_i(1))
        at the k-means start, clipped to [-1000, -0.1] (``docs/algorithms.md``).""",
    "parameters_iterations": """\
    annealing : float >= 1, default=1.04
        s <- annealing * s every ``anneal_every`` iterations (Algorithm 1, appendix C).
    anneal_every : int >= 1, default=2
        Iterations between annealing steps.
    max_iter : int, default=300
        Maximum number of passes over the data.
    tol : float >= 0, default=1e-6
        Stop when no centroid moves more than this (squared, view-weighted RFF distance), or
        when an iteration at an unchanged s lowers the objective by at most
        ``OBJECTIVE_RTOL`` (1e-5) of its value -- unless two centroids coincide or a cluster
        vanished in that iteration.  0 runs to an exact fixed point or ``max_iter``.
    scale : None, "none", "standard" or "minmax", default=None
        Feature scaling per view, estimated on the init sample and folded into the
        frequencies (no scaled copy of X is made).  None (or "none") uses the features as
        given.""",
    "parameters_seed": """\
    random_state : int, RandomState or None, default=None
        Seeds the init sample, the bandwidth sample and one seed per restart, from which a
        restart draws its frequencies and its k-means start (one integer seed per fit: None
        or a RandomState gives one draw, see ``mkdist._methods._base.resolve_seed``).
    chunk_size : int, default=8192
        Rows per block: NumPy input is walked in blocks of this many rows, and a Dask task
        walks its row chunk in blocks of this many rows (Dask input keeps its own chunks).""",
    "attributes": """\
    labels_ : ndarray of shape (N,) or lazy dask.array.Array, int64
        Cluster of every training point (lazy for Dask input: computing it is one more
        pass over the data).
    centroids_ : ndarray of shape (L, n_clusters, 2 * n_components_)
        theta_{j,l}, the centroids in each view's RFF feature space.
    cluster_centers_ : ndarray of shape (n_clusters, L * 2 * n_components_)
        ``centroids_`` with the views side by side.
    view_weights_ : ndarray of shape (L,)
        alpha_l on the simplex.
    rff_frequencies_ : list of L ndarrays of shape (d_l, n_components_)
        W_l ~ N(0, sigma_l^-2 I) in the scaled coordinates.
    feature_centers_, feature_scales_ : lists of L ndarrays of shape (d_l,)
        The scaling x -> (x - center) / scale (zeros and ones when ``scale=None``).
    bandwidths_ : ndarray of shape (L,)
        sigma_l used for each view.
    n_components_ : int
        D.
    s0_ : float
        Initial power actually used (resolved from "auto").
    s_ : float
        Power at the last iteration.
    s_history_ : ndarray of shape (n_iter_,)
        s per iteration.
    objective_history_ : ndarray of shape (n_iter_,)
        Objective per iteration (sum of power means of the assignment costs; for the
        multi-view model plus lambda times the view-weight entropy term).
    n_iter_ : int
        Passes over all rows of the kept run: its passes over the sample when the sample
        is all rows (with "consensus": of the run continued from the consensus), else the
        passes that refined it over all rows.
    n_init_ : int
        Restarts run (``n_init``, or the number "auto" chose).
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
    n_features_in_ : int
        Total number of features over the views.
    diagnostics_ : dict
        ``converged``, ``n_merged_iterations`` (iterations in which two centroids
        coincided, a transient of annealing), ``merged_at_end``, ``n_reseeded`` (clusters
        whose weight mass vanished and were re-seeded from the init sample), ``timings``
        (seconds per stage) and ``pep``: the principal eigenvalue proportion (t = k, see
        :func:`mkdist.principal_eigenvalue_proportion`) of each view's RFF kernel
        Phi_l Phi_l^T (``base``) and of the combined kernel sum_l alpha_l Phi_l Phi_l^T
        (``combined``), on the init sample (up to 20,000 rows) from the 2D-wide side.
        ``restarts``: ``rows`` (of the sample they ran on), ``selection``, ``best`` (index
        of the kept restart; with "consensus" the one whose features the run continued in),
        ``start_n_init`` (k-means++ inits of each start), ``consensus_ari`` (each restart's
        adjusted Rand index with the consensus; None unless "consensus" ran) and
        ``consensus_final_objective``, and per restart ``seed``, ``final_objective``,
        ``agreement``, ``s0``, ``s_final``, ``n_iter``, ``converged``.""",
    "notes": """\
    Power-mean weights are evaluated in log space (finite down to s = -1000), ``s0="auto"``
    ties the initial power to the data, a cluster whose weight vanishes is re-seeded, and the
    restarts run on the init sample before passes over all rows refine the kept run:
    ``docs/algorithms.md``, "Power k-means", with the measurements behind the defaults.""",
}


def _shared_doc(cls: type) -> type:
    """``cls`` with the ``%(name)s`` fields of its docstring filled from ``_DOC``."""
    if cls.__doc__:  # None under python -OO
        cls.__doc__ = cls.__doc__ % _DOC
    return cls


@_shared_doc
class RFFKernelPowerKMeans(RFFPowerKMeansBase):
    """Kernel power k-means on random Fourier features (RFF-KPKM, Algorithm 1).

    Power k-means (Xu and Lange 2019) minimises the power mean M_s of each point's
    squared distances to the k centroids, annealing s towards -infinity so that the
    objective moves from a smooth surrogate to the k-means objective; here the distances
    are in the random-Fourier-feature space of a Gaussian kernel, so it is kernel k-means
    at O(N k D) per iteration (RFF power k-means seed, ``docs/algorithms.md`` section 4).
    Several views are allowed: their features are concatenated with equal weights 1/L
    (the RFF-MKPKM baseline of the paper); :class:`MultiViewRFFPowerKMeans` learns them.

    Parameters
    ----------
%(parameters_data)s
%(parameters_iterations)s
    n_init : int >= 1 or "auto", default="auto"
        Restarts of the whole power k-means on the init sample, each with its own
        frequencies, k-means start and annealing; "auto": 3 to 10 by the cost of a pass
        (see :class:`MultiViewRFFPowerKMeans`).  The number run is ``n_init_``.
    restart_selection : {"agreement", "consensus", "objective"}, default="agreement"
        How the restarts give the fit: the medoid of their partitions, the run continued
        from the consensus of their partitions, or the lowest final objective (see
        :class:`MultiViewRFFPowerKMeans`).  Not "consensus" as for the multi-view model: for
        this plain model it measured lower (``docs/algorithms.md``).
%(parameters_seed)s

    Attributes
    ----------
%(attributes)s

    Notes
    -----
%(notes)s

    Examples
    --------
    >>> from mkdist import RFFKernelPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(600, n_clusters=3, random_state=0, as_dask=False)
    >>> labels = RFFKernelPowerKMeans(3, n_init=2, random_state=0).fit_predict(views["view0"])  # 2 restarts: quick
    >>> labels.shape
    (600,)
    """

    method: ClassVar[str] = "rff-power"
    state_format: ClassVar[str] = "mkdist.RFFKernelPowerKMeans/2"

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 annealing: float = 1.04, anneal_every: int = 2, max_iter: int = 300,
                 tol: float = 1e-6, scale=None, n_init="auto", restart_selection: str = "agreement",
                 random_state=None, chunk_size: int = 8192):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.s0 = s0
        self.annealing = annealing
        self.anneal_every = anneal_every
        self.max_iter = max_iter
        self.tol = tol
        self.scale = scale
        self.n_init = n_init
        self.restart_selection = restart_selection
        self.random_state = random_state
        self.chunk_size = chunk_size


@_shared_doc
class MultiViewRFFPowerKMeans(RFFPowerKMeansBase):
    """Improved possibilistic multi-view RFF kernel power k-means (IP-RFF-MKPKM).

    Algorithm 2 of the RFF power k-means seed (eq. 20-31): one Gaussian RFF map per
    view, possibilistic memberships u_ij (fuzzifier m) with typicality eta_{j,l}, the
    distances d~_ij,l = u_ij^m ||phi_l(x_i) - theta_{j,l}||^2 + (1 - u_ij)^m eta_{j,l},
    power-mean weights w_ij (eq. 22), centroids theta (eq. 28) and view weights alpha by
    an entropy-regularised softmax (eq. 31).  Every step is a sum over points, run as a
    map-reduce over the row chunks of the Dask arrays.

    Parameters
    ----------
%(parameters_data)s
    lam : "auto" or float > 0, default="auto"
        lambda of the view-weight entropy term (eq. 31): alpha = softmax(-cost_l / lambda).
        Small values put all weight on the cheapest view, large ones keep alpha uniform;
        the paper uses 100 (searching [1, 1000]) on data sets of about 2,000 points.
        cost_l sums over the N points, so a fixed lambda turns into a hard choice of one
        view as N grows: "auto" is lambda = 0.05 N, the paper's 100 at N = 2,000 (measured:
        ``docs/algorithms.md``).  The value used is ``lam_``.
    fuzzifier : float > 1, default=2.0
        m of the possibilistic memberships (the paper's value).
%(parameters_iterations)s
    n_init : int >= 1 or "auto", default="auto"
        Restarts of the whole power k-means on the init sample (all rows when N <= 20,000),
        each with its own random frequencies, its own k-means start (best of up to
        ``START_KMEANS_N_INIT`` = 10 k-means++ runs on its features, fewer when a run is
        expensive: ``START_WORK``) and its own annealing; ``restart_selection`` makes one
        run of them and, when the sample is not all rows, it is refined by passes over all
        rows.  Restarts cost no pass over the data.  ``n_init=1`` is one run.  "auto": 10
        restarts, fewer (at least 3) when one pass over the sample costs more than
        ``RESTART_WORK`` / 10 products n k 2D L (measured: ``docs/algorithms.md``).  The
        number run is ``n_init_``.
    restart_selection : {"consensus", "agreement", "objective"}, default="consensus"
        How the restarts make the fit.  "consensus": the consensus of their partitions of
        the sample (k-means on their stacked one-hot memberships, which maximises the
        summed category utility with them: points end up together as often as the restarts
        put them together), then the run continued from the means of the consensus clusters
        in the features of the restart that agrees best with it (its frequencies, view
        weights and final s).  "agreement": the restart whose partition agrees best with the
        others' (highest mean adjusted Rand index: the medoid of the partitions; between two
        restarts the lower objective).  "objective": the lowest final objective,
        sum_i min_j C_ij (+ lambda sum_l alpha_l log alpha_l for the multi-view model) --
        the function every run anneals towards (s -> -infinity), which hardly tracks the
        partitions' accuracy across restarts (the three rules measured:
        ``docs/algorithms.md``, "Power k-means").
%(parameters_seed)s

    Attributes
    ----------
%(attributes)s
    lam_ : float
        lambda actually used (resolved from "auto").
    typicality_ : ndarray of shape (n_clusters, L)
        eta_{j,l} = mean_i ||phi_l(x_i) - theta_{j,l}||^2 at the start, kept fixed
        (``docs/algorithms.md``).

    Notes
    -----
%(notes)s

    Examples
    --------
    >>> from mkdist import MultiViewRFFPowerKMeans, make_multiview_blobs
    >>> views, y = make_multiview_blobs(600, n_clusters=3, random_state=0, as_dask=False)
    >>> est = MultiViewRFFPowerKMeans(3, n_init=2, random_state=0).fit(views)  # 2 restarts: quick
    >>> est.view_weights_.shape
    (2,)
    """

    method: ClassVar[str] = "mv-rff-power"
    state_format: ClassVar[str] = "mkdist.MultiViewRFFPowerKMeans/2"
    _possibilistic: ClassVar[bool] = True
    _param_constraints: ClassVar[dict[str, list]] = _params.MV_RFF_POWER_KMEANS

    def __init__(self, n_clusters: int = 8, *, n_components=None, bandwidth="median", s0="auto",
                 lam="auto", fuzzifier: float = 2.0, annealing: float = 1.04,
                 anneal_every: int = 2, max_iter: int = 300, tol: float = 1e-6, scale=None,
                 n_init="auto", restart_selection: str = "consensus", random_state=None,
                 chunk_size: int = 8192):
        self.n_clusters = n_clusters
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.s0 = s0
        self.lam = lam
        self.fuzzifier = fuzzifier
        self.annealing = annealing
        self.anneal_every = anneal_every
        self.max_iter = max_iter
        self.tol = tol
        self.scale = scale
        self.n_init = n_init
        self.restart_selection = restart_selection
        self.random_state = random_state
        self.chunk_size = chunk_size

    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        out = super()._check_params_vs_input(n_samples, views)
        out["lam"] = LAM_PER_POINT * n_samples if isinstance(self.lam, str) else float(self.lam)
        out["fuzzifier"] = float(self.fuzzifier)
        return out


register(RFFKernelPowerKMeans)
register(MultiViewRFFPowerKMeans)
