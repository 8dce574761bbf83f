"""RFF kernel power k-means: the feature map and weights against their formulas, one
iteration of Algorithms 1 and 2 against a direct transcription, MM monotonicity, the
collapse guard, the NumPy feature cache, NumPy/Dask parity (one compute per iteration), model
state round trip, summary and input validation."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from mkdist._core._blocks import RowBlocks
from mkdist._methods._power_kmeans import MultiViewRFFPowerKMeans, RFFKernelPowerKMeans, default_n_components
from mkdist._methods._power_kmeans._loop import S0_GAP_FACTOR, auto_s0, fit_loop, log_gap
from mkdist._methods._power_kmeans._passes import LOG_WEIGHT_FLOOR, PassModel, power_mean_weights, row_labels
from mkdist._methods._power_kmeans._restarts import consensus_labels, partition_centroids
from mkdist.errors import InputValidationError
from mkdist.metrics import clustering_accuracy, nmi

from .conftest import CountingScheduler, make_blobs_views, raise_if_dask_computes

ESTIMATORS = [RFFKernelPowerKMeans, MultiViewRFFPowerKMeans]


@pytest.fixture
def views():
    """Two views of 3 well separated clusters, 150 points (view1 a noisy non-linear map)."""
    (v0, v1), y = make_blobs_views(n_per_cluster=50, n_clusters=3, seed=0)
    return [v0, v1], y


def _fit(cls, X, **kw):
    kw.setdefault("n_init", 2)
    kw.setdefault("random_state", 0)
    return cls(3, **kw).fit(X)


# ----------------------------------------------------------------------------- building blocks
def test_default_n_components_rules():
    assert default_n_components(10) == math.ceil(4 * math.log(20) ** 3) == 108
    assert default_n_components(10, "appendix") == math.ceil(16 * math.log(20) ** 3) == 431
    assert default_n_components(1) == 2  # ceil(4 ln^3 2) = ceil(1.33)


def test_rff_features_approximate_the_gaussian_kernel(views):
    (X, _), _ = views
    sigma = 3.0
    m = RFFKernelPowerKMeans(3, n_components=4000, bandwidth=sigma, max_iter=1, n_init=1,
                             random_state=0).fit(X)
    (phi,) = m.rff_features(X[:40])
    assert phi.shape == (40, 8000)
    np.testing.assert_allclose((phi * phi).sum(axis=1), 1.0, rtol=1e-12)
    exact = np.exp(-cdist(X[:40], X[:40], "sqeuclidean") / (2 * sigma**2))
    # Monte Carlo error of a D-term mean of cosines: sd <= 1/sqrt(2D) ~ 0.011.
    assert np.abs(phi @ phi.T - exact).max() < 0.06
    assert m.bandwidths_.tolist() == [sigma]


def test_scaling_is_folded_into_the_frequencies(views):
    (X, _), _ = views
    X = X * np.array([1.0, 10.0, 100.0, 0.1, 5.0]) + 7.0
    m = RFFKernelPowerKMeans(3, scale="standard", bandwidth=2.0, max_iter=1, n_init=1,
                             random_state=0).fit(X)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    (phi,) = m.rff_features(X)
    D = m.n_components_
    proj = Z @ m.rff_frequencies_[0]
    np.testing.assert_allclose(phi, np.sqrt(1 / D) * np.c_[np.sin(proj), np.cos(proj)], atol=1e-10)


def test_power_mean_weights_match_the_direct_formula():
    rng = np.random.default_rng(0)
    C = rng.uniform(0.2, 2.0, size=(50, 4))
    s, k = -3.0, 4
    w, log_mean = power_mean_weights(C, s)
    direct = (C ** (s - 1) / k) / ((C**s).sum(axis=1, keepdims=True) / k) ** (1 - 1 / s)
    np.testing.assert_allclose(w, direct, rtol=1e-12)
    M = ((C**s).mean(axis=1)) ** (1 / s)
    np.testing.assert_allclose(np.exp(log_mean), M, rtol=1e-12)
    # w is the gradient of the 1-homogeneous M_s: sum_j w_ij C_ij = M_s(C_i) (Euler).
    np.testing.assert_allclose((w * C).sum(axis=1), M, rtol=1e-12)


def test_weights_stay_finite_at_s_minus_1000_and_zero_cost():
    C = np.array([[0.0, 0.5, 1.0], [0.30, 0.31, 2.0], [0.0, 0.0, 1.0], [1e-300, 3.9, 4.0]])
    w, log_mean = power_mean_weights(C, -1000.0)
    assert np.isfinite(w).all() and np.isfinite(log_mean).all()
    # no subnormals: every weight is 0 or at least exp(LOG_WEIGHT_FLOOR)
    assert np.all((w == 0) | (w >= math.exp(LOG_WEIGHT_FLOOR)))
    # a point on a centroid: all weight there (k^(-1/s) = 3^(1/1000) is eq. 4's 1/k factors)
    np.testing.assert_allclose(w[0], [3 ** (1 / 1000), 0.0, 0.0], rtol=1e-12, atol=1e-300)
    assert w[1, 2] == 0.0 and w[1, 0] > 0 and w[1, 1] > 0
    np.testing.assert_allclose(w[2, :2], w[2, 0])  # two clusters tied at the point
    assert w[3, 0] > 0 and w[3, 1:].tolist() == [0.0, 0.0]


def test_auto_s0_is_inverse_to_the_log_gap():
    rng = np.random.default_rng(0)
    C = rng.uniform(0.2, 1.5, size=(200, 5))
    s0 = auto_s0(C)
    assert s0 * log_gap(C) == pytest.approx(-S0_GAP_FACTOR)
    # squaring the costs doubles every log gap, so it halves |s0|: the start weights
    # C^s0 are then identical.
    assert auto_s0(C**2) == pytest.approx(s0 / 2)


# ----------------------------------------------------------------------------- one iteration
def _reference_iteration(phis, theta, alpha, s, eta=None, lam=None, m=2.0):
    """Algorithm 1 (eta None) or Algorithm 2 step, written from the paper's formulas."""
    k = theta.shape[1]
    d = np.stack([cdist(phi, t, "sqeuclidean") for phi, t in zip(phis, theta)], axis=2)
    if eta is None:
        dt, g_factor = d, 1.0
    else:
        ratio = (d @ alpha) / (eta @ alpha)[None, :]
        u = 1.0 / (1.0 + ratio ** (1.0 / (m - 1.0)))                           # eq. 26
        dt = u[:, :, None] ** m * d + (1 - u[:, :, None]) ** m * eta[None]      # eq. 23
        g_factor = u**m
    C = dt @ alpha
    w = (C ** (s - 1) / k) / ((C**s).sum(axis=1, keepdims=True) / k) ** (1 - 1 / s)  # eq. 22
    g = w * g_factor
    new = np.stack([(g.T @ phi) / g.sum(axis=0)[:, None] for phi in phis])         # eq. 28
    if lam is None:
        return new, alpha
    logits = -np.einsum("ij,ijl->l", w, dt) / lam                                   # eq. 31
    a = np.exp(logits - logits.max())
    return new, a / a.sum()


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("dtype, rtol, atol", [(np.float64, 1e-9, 1e-12), (np.float32, 1e-5, 1e-7)])
def test_one_iteration_matches_the_paper_formulas(cls, views, dtype, rtol, atol):
    """In float64 to rounding; with the passes' float32 features (FEATURE_DTYPE) to float32
    rounding of the features, distances and products (relative 3e-6 measured)."""
    X, _ = views
    est = _fit(cls, X, max_iter=1)
    phis = est.rff_features(X)
    rng = np.random.default_rng(1)
    theta = np.stack([phi[rng.choice(len(phi), 3, replace=False)] for phi in phis])
    alpha = np.array([0.3, 0.7])
    eta = rng.uniform(0.3, 1.0, size=(3, 2)) if cls is MultiViewRFFPowerKMeans else None
    lam = 50.0 if eta is not None else None
    features = dataclasses.replace(est._feature_map(), dtype=dtype)
    model = PassModel(features, theta, alpha, float("nan"), eta)
    out = fit_loop(RowBlocks(dict(zip(["a", "b"], X)), block_rows=40), model, s0=-2.5,
                    annealing=1.04, anneal_every=2, max_iter=1, tol=0.0, lam=lam,
                    reseed_pool=phis)
    ref_theta, ref_alpha = _reference_iteration(phis, theta, alpha, -2.5, eta, lam)
    np.testing.assert_allclose(out["model"].centroids, ref_theta, rtol=rtol, atol=atol)
    np.testing.assert_allclose(out["model"].view_weights, ref_alpha, rtol=rtol)


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-9), (np.float32, 1e-5)])
def test_objective_never_increases_at_fixed_s(cls, views, dtype, rtol, monkeypatch):
    """Without annealing each iteration is an MM step: f_s (+ lam sum alpha log alpha) falls,
    to rounding (float32 features: ~1e-6 of f near the fixed point)."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    monkeypatch.setattr(_passes, "FEATURE_DTYPE", dtype)
    X, _ = views
    est = _fit(cls, X, s0=-2.0, annealing=1.0, max_iter=25, tol=0.0)
    f = est.objective_history_
    # tol=0 stops only at an exact fixed point (centroid shift exactly 0), which BLAS
    # rounding reaches on some machines before max_iter: then later steps would repeat it.
    assert 5 <= f.size <= 25 and (f.size == 25 or est.diagnostics_["converged"])
    assert np.all(np.diff(f) <= rtol * np.abs(f[:-1]))
    assert f[-1] < f[0]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_fit_stops_when_the_objective_stalls_at_fixed_s(cls, views):
    """tol > 0: a pass at the s of the previous pass that lowers f by <= OBJECTIVE_RTOL of f ends
    the fit (the shift test alone runs on); annealing passes never do."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    X, _ = views
    est = _fit(cls, X, s0=-2.0, annealing=1.0, max_iter=40, tol=1e-30)
    f = est.objective_history_
    assert est.diagnostics_["converged"] and est.n_iter_ < 40
    assert f[-2] - f[-1] <= _loop.OBJECTIVE_RTOL * abs(f[-2])
    assert np.all(f[:-2] - f[1:-1] > _loop.OBJECTIVE_RTOL * np.abs(f[:-2]))


def test_annealing_schedule(views):
    X, _ = views
    est = _fit(RFFKernelPowerKMeans, X, n_init=1, s0=-2.0, annealing=1.5, anneal_every=3, max_iter=7, tol=0.0)
    np.testing.assert_allclose(est.s_history_, [-2, -2, -2, -3, -3, -3, -4.5])
    assert est.s0_ == -2.0 and est.n_iter_ == 7


# ----------------------------------------------------------------------------- fitting
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_recovers_clusters_and_sets_attributes(cls, views):
    X, y = views
    est = _fit(cls, X)
    D = default_n_components(3)
    assert nmi(y, est.labels_) == 1.0 and nmi(y, est.predict(X)) == 1.0
    np.testing.assert_array_equal(est.labels_, est.predict(X))
    assert est.labels_.dtype == np.int64
    assert est.n_components_ == D and est.centroids_.shape == (2, 3, 2 * D)
    assert est.cluster_centers_.shape == (3, 4 * D)
    assert est.rff_frequencies_[0].shape == (5, D) and est.bandwidths_.shape == (2,)
    assert est.view_weights_.sum() == pytest.approx(1.0) and np.all(est.view_weights_ > 0)
    assert est.n_features_in_ == 10 and est.n_features_per_view_ == {"view0": 5, "view1": 5}
    assert est.s0_ < 0 and est.s_ <= est.s0_ and est.diagnostics_["converged"]
    assert est.s_history_.shape == est.objective_history_.shape == (est.n_iter_,)
    costs = est.transform(X)
    assert costs.shape == (150, 3) and np.all(costs >= 0)
    np.testing.assert_array_equal(costs.argmin(axis=1), est.labels_)
    if cls is MultiViewRFFPowerKMeans:
        assert est.typicality_.shape == (3, 2) and np.all(est.typicality_ > 0)
    else:
        np.testing.assert_array_equal(est.view_weights_, [0.5, 0.5])


def test_view_weights_favour_the_informative_view(views):
    (X, _), y = views
    noise = np.random.default_rng(3).normal(size=(150, 5))
    est = _fit(MultiViewRFFPowerKMeans, [X, noise], lam=5.0)
    assert nmi(y, est.labels_) == 1.0
    assert est.view_weights_[0] > 0.9


def test_duplicate_points_and_s0_minus_1000_stay_finite():
    rng = np.random.default_rng(0)
    points = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    y = rng.integers(0, 3, size=90)
    X = points[y]  # only 3 distinct points: centroids sit exactly on them (cost 0)
    for cls in ESTIMATORS:
        est = cls(3, s0=-1000.0, n_init=1, random_state=0).fit(X)
        assert np.isfinite(est.centroids_).all() and np.isfinite(est.objective_history_).all()
        assert nmi(y, est.labels_) == 1.0
        assert np.isfinite(est.transform(X)).all()


@pytest.fixture
def overlapping():
    """4 overlapping Gaussian blobs (centres 3 sd apart): at s near 0 the centroids merge."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 40)
    return np.array([[0, 0], [3, 0], [0, 3], [3, 3]])[y] + rng.normal(size=(160, 2)), y


def test_merged_centroids_do_not_end_the_fit(overlapping, monkeypatch):
    """s0 near 0 first merges the centroids, where they barely move; the guard keeps
    annealing until they split again instead of stopping on the small shift."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    X, y = overlapping
    # the kept restart's own run (a consensus run starts at its final s, past the merging)
    kw = dict(n_init=2, restart_selection="agreement", random_state=0)
    sharp = RFFKernelPowerKMeans(4, s0=-1.0, **kw).fit(X)
    est = RFFKernelPowerKMeans(4, s0=-0.05, **kw).fit(X)
    assert est.diagnostics_["n_merged_iterations"] > 0
    assert not est.diagnostics_["merged_at_end"] and est.diagnostics_["converged"]
    assert nmi(y, est.labels_) >= nmi(y, sharp.labels_) - 0.01
    # without the guard the shift test stops the fit among merged centroids
    monkeypatch.setattr(_loop, "MERGE_TOL", 0.0)
    unguarded = RFFKernelPowerKMeans(4, s0=-0.05, **kw).fit(X)
    assert unguarded.n_iter_ < est.n_iter_ / 3
    assert nmi(y, unguarded.labels_) < nmi(y, est.labels_) - 0.05


def test_merged_at_max_iter_warns(overlapping):
    X, _ = overlapping
    with pytest.warns(ConvergenceWarning, match="still coincide"):
        est = RFFKernelPowerKMeans(4, s0=-0.05, n_init=2, max_iter=20, random_state=0).fit(X)
    assert est.diagnostics_["merged_at_end"] and not est.diagnostics_["converged"]


def test_a_cluster_whose_weight_mass_vanishes_is_reseeded(views):
    X, y = views
    est = _fit(RFFKernelPowerKMeans, X[0], max_iter=1)
    (phi,) = est.rff_features(X[0])
    theta = est.centroids_.copy()
    theta[0, 2] = -phi.mean(axis=0) * 5  # far from every point: all its weights underflow
    model = PassModel(est._feature_map(), theta, np.ones(1), float("nan"), None)
    out = fit_loop(RowBlocks({"v": X[0]}, block_rows=64), model, s0=-1000.0, annealing=1.04,
                    anneal_every=2, max_iter=30, tol=1e-9, lam=None, reseed_pool=[phi])
    assert out["n_reseeded"] >= 1
    assert np.isfinite(out["model"].centroids).all()
    assert np.unique(row_labels([X[0]], out["model"])).size == 3
    # a model without a feature map reads its rows as features (the NumPy feature cache)
    cached = dataclasses.replace(out["model"], features=None)
    np.testing.assert_array_equal(row_labels([phi], cached), row_labels([X[0]], out["model"]))


def test_feature_cache_gives_the_same_fit(views, monkeypatch):
    """NumPy input walks the cached features or recomputes them per block: same row
    functions on the same row blocks, so the same numbers."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    X, _ = views
    cached = _fit(MultiViewRFFPowerKMeans, X, chunk_size=40)
    monkeypatch.setattr(_passes, "FEATURE_CACHE_BYTES", 0)
    recomputed = _fit(MultiViewRFFPowerKMeans, X, chunk_size=40)
    np.testing.assert_array_equal(recomputed.labels_, cached.labels_)
    np.testing.assert_array_equal(recomputed.centroids_, cached.centroids_)
    np.testing.assert_array_equal(recomputed.objective_history_, cached.objective_history_)


@pytest.fixture
def recorded_restarts(monkeypatch):
    """Every restart a fit runs: (the restarter, its seed, its result)."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    calls = []
    run = _restarts.Restarter.__call__

    def record(self, seed):
        out = run(self, seed)
        calls.append((self, seed, out))
        return out

    monkeypatch.setattr(_restarts.Restarter, "__call__", record)
    return calls


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("rule", ["objective", "agreement"])
def test_restarts_keep_the_run_their_rule_selects(cls, overlapping, recorded_restarts, rule):
    """The fit keeps the lowest objective ("objective") or the partition agreeing most with the
    others (mean ARI, "agreement"), and is that run (the sample is all rows: no refinement)."""
    from sklearn.metrics import adjusted_rand_score

    X, _ = overlapping
    est = cls(4, n_init=4, restart_selection=rule, random_state=1).fit(X)
    diag = est.diagnostics_["restarts"]
    assert len(recorded_restarts) == 4 and diag["selection"] == rule and diag["rows"] == 160
    objectives = []
    for r, (_, seed, out) in enumerate(recorded_restarts):
        assert diag["seed"][r] == seed
        assert diag["final_objective"][r] == out["final_objective"]
        objectives.append(out["final_objective"])
    # the runs differ (else the rule has nothing to choose)
    assert len({round(o, 9) for o in objectives}) > 1
    labels = [out["labels"] for _, _, out in recorded_restarts]
    ari = np.array([[adjusted_rand_score(a, b) for b in labels] for a in labels])
    agreement = (ari.sum(axis=1) - 1) / 3
    np.testing.assert_allclose(diag["agreement"], agreement, rtol=1e-12)
    if rule == "objective":
        assert diag["best"] == int(np.argmin(objectives))
    else:
        assert agreement[diag["best"]] == agreement.max()
    chosen = recorded_restarts[diag["best"]][2]
    np.testing.assert_array_equal(est.centroids_, chosen["model"].centroids)
    np.testing.assert_array_equal(est.labels_, chosen["labels"])
    np.testing.assert_array_equal(est.rff_frequencies_[0], chosen["frequencies"][0])
    assert est.n_iter_ == chosen["n_iter"]


def test_restart_selection_defaults():
    """The measured defaults (bench/RESULTS.md, "Consensus of the restarts")."""
    assert MultiViewRFFPowerKMeans().restart_selection == "consensus"
    assert RFFKernelPowerKMeans().restart_selection == "agreement"
    assert MultiViewRFFPowerKMeans().n_init == RFFKernelPowerKMeans().n_init == "auto"


def test_consensus_of_identical_partitions_is_that_partition():
    """Restarts that agree up to the names of their clusters have that partition as consensus."""
    from sklearn.metrics import adjusted_rand_score

    labels = np.random.default_rng(0).integers(0, 5, size=200)
    renamed = [labels, (labels + 2) % 5, np.array([4, 3, 2, 1, 0])[labels]]
    assert adjusted_rand_score(labels, consensus_labels(renamed, 5, seed=0)) == 1.0


def test_consensus_votes_out_an_error_the_restarts_do_not_share():
    """Each of three partitions puts a different block of points in the wrong cluster; the
    consensus puts every point where at least two of them put it (the true partition)."""
    from sklearn.metrics import adjusted_rand_score

    truth = np.repeat(np.arange(3), 30)
    partitions = []
    for r in range(3):
        wrong = truth.copy()
        wrong[30 * r: 30 * r + 8] = (r + 1) % 3
        partitions.append(wrong)
    assert all(adjusted_rand_score(truth, p) < 1.0 for p in partitions)
    assert adjusted_rand_score(truth, consensus_labels(partitions, 3, seed=0)) == 1.0


def test_partition_centroids_are_the_cluster_means():
    rng = np.random.default_rng(0)
    phis = [rng.normal(size=(30, 6)), rng.normal(size=(30, 6))]  # every view has 2D features
    labels = rng.integers(0, 3, size=30)  # cluster 3 is empty
    out = partition_centroids(phis, labels, 4)
    assert out.shape == (2, 4, 6)
    for v, phi in enumerate(phis):
        for j in range(3):
            np.testing.assert_allclose(out[v][j], phi[labels == j].mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(out[v][3], phi.mean(axis=0), rtol=1e-12)


@pytest.fixture
def recorded_consensus(monkeypatch):
    """The consensus runs a fit makes: (the consensus partition, the result of from_consensus)."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    calls = []
    consensus, continue_from = _restarts.consensus_labels, _restarts.Restarter.from_consensus

    def record_labels(*args, **kwargs):
        out = consensus(*args, **kwargs)
        calls.append(out)
        return out

    def record_run(self, runs, seed):
        out = continue_from(self, runs, seed)
        calls.append(out)
        return out

    monkeypatch.setattr(_restarts, "consensus_labels", record_labels)
    monkeypatch.setattr(_restarts.Restarter, "from_consensus", record_run)
    return calls


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_consensus_continues_from_the_restarts_consensus(cls, overlapping, recorded_restarts,
                                                          recorded_consensus):
    """restart_selection="consensus" (the multi-view default) continues the run from the
    consensus of the restarts' partitions in the features of the restart agreeing most with
    it, and records it."""
    from sklearn.metrics import adjusted_rand_score

    X, _ = overlapping
    est = cls(4, n_init=4, restart_selection="consensus", random_state=1).fit(X)
    diag = est.diagnostics_["restarts"]
    assert diag["selection"] == "consensus" and len(recorded_restarts) == 4
    consensus, (best, run, ari) = recorded_consensus
    expected = [adjusted_rand_score(consensus, out["labels"]) for _, _, out in recorded_restarts]
    np.testing.assert_allclose(diag["consensus_ari"], expected, rtol=1e-12)
    assert diag["best"] == best == int(np.argmax(expected))
    base = recorded_restarts[best][2]
    np.testing.assert_array_equal(est.rff_frequencies_[0], base["frequencies"][0])
    # the continued run starts at the base's final s, from the consensus clusters' means
    assert run["s_history"][0] == base["s_next"] and est.s0_ == base["s0"]
    assert diag["consensus_final_objective"] == run["final_objective"]
    np.testing.assert_array_equal(est.labels_, run["labels"])
    np.testing.assert_array_equal(est.centroids_, run["model"].centroids)
    assert adjusted_rand_score(consensus, est.labels_) > 0.5
    # one restart: nothing to combine, the fit is that restart
    recorded_restarts.clear()
    one = cls(4, n_init=1, restart_selection="consensus", random_state=1).fit(X)
    assert one.diagnostics_["restarts"]["consensus_ari"] is None and len(recorded_consensus) == 2
    np.testing.assert_array_equal(one.labels_, recorded_restarts[0][2]["labels"])


def test_auto_restarts_and_start_inits_are_sized_by_the_work_of_a_pass(views, monkeypatch, recorded_restarts):
    """n_init="auto" runs as many restarts (3 to 10) and each start as many k-means++ inits
    (1 to 10) as fit their work budgets in products n k F of a pass; an int n_init is kept."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    X, _ = views
    est = MultiViewRFFPowerKMeans(3, random_state=0).fit(X)
    assert est.n_init_ == len(recorded_restarts) == 10
    assert est.diagnostics_["restarts"]["start_n_init"] == 10
    work = 150 * 3 * 2 * est.n_components_ * 2  # n k 2D L
    for budget, restarts, inits in [(4.5, 4, 2), (1.0, 3, 1), (0.1, 3, 1)]:
        monkeypatch.setattr(_restarts, "RESTART_WORK", budget * work)
        monkeypatch.setattr(_restarts, "START_WORK", budget / 2 * work)
        recorded_restarts.clear()
        est = MultiViewRFFPowerKMeans(3, random_state=0).fit(X)
        assert est.n_init_ == len(recorded_restarts) == restarts
        assert est.diagnostics_["restarts"]["start_n_init"] == inits
        assert all(r.start_n_init == max(inits, 1) for r, _, _ in recorded_restarts)
    recorded_restarts.clear()
    assert RFFKernelPowerKMeans(3, n_init=2, random_state=0).fit(X).n_init_ == len(recorded_restarts) == 2


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_a_restart_run_alone_gives_the_same_result(cls, overlapping, recorded_restarts):
    """A restart is a function of its seed: run again it repeats its objective and partition,
    and n_init=1 is the first restart of a fit with more (the same seed), alone."""
    X, _ = overlapping
    many = cls(4, n_init=3, random_state=1).fit(X)
    runs = list(recorded_restarts)
    for restarter, seed, out in runs:
        again = restarter(seed)
        assert again["final_objective"] == out["final_objective"]
        np.testing.assert_array_equal(again["labels"], out["labels"])
    recorded_restarts.clear()
    one = cls(4, n_init=1, random_state=1).fit(X)
    assert len(recorded_restarts) == 1 and one.diagnostics_["restarts"]["best"] == 0
    first = runs[0][2]
    assert one.diagnostics_["restarts"]["final_objective"] == [first["final_objective"]]
    np.testing.assert_array_equal(one.labels_, first["labels"])
    np.testing.assert_array_equal(one.objective_history_, first["objective_history"])
    assert many.diagnostics_["restarts"]["seed"][0] == one.diagnostics_["restarts"]["seed"][0]


def test_the_winner_is_refined_over_all_rows(views, monkeypatch, recorded_restarts):
    """Sample smaller than the data: the restarts run on the sample, then only the winner
    passes over all rows, from its final centroids and s, with lambda per point unchanged."""
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    monkeypatch.setattr(_estimators, "INIT_SAMPLE_SIZE", 90)
    X, y = views
    est = MultiViewRFFPowerKMeans(3, n_init=3, restart_selection="agreement", random_state=0).fit(X)
    diag = est.diagnostics_["restarts"]
    assert diag["rows"] == 90 and all(r.lam == pytest.approx(0.05 * 90) for r, _, _ in recorded_restarts)
    assert est.lam_ == pytest.approx(0.05 * 150)
    winner = recorded_restarts[diag["best"]][2]
    assert est.s_history_[0] == winner["s_next"] and est.s0_ == winner["s0"]
    assert est.n_iter_ >= 1 and {"restarts_s", "features_s", "refine_s"} <= set(est.diagnostics_["timings"])
    assert nmi(y, est.labels_) == 1.0


def test_one_cluster_is_allowed(views):
    X, _ = views
    est = RFFKernelPowerKMeans(1, n_init=1, random_state=0).fit(X)
    assert est.labels_.tolist() == [0] * 150 and est.s0_ == -1.0


# ----------------------------------------------------------------------------- Dask
@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("dtype, rtol, obj_rtol", [(np.float64, 1e-8, 1e-10), (np.float32, 1e-4, 1e-5)])
@pytest.mark.parametrize("sample_size", [150, 100])
def test_dask_matches_numpy_with_one_compute_per_iteration(cls, views, dtype, rtol, obj_rtol, sample_size,
                                                           monkeypatch):
    """Same arithmetic on differently cut row blocks: equal up to summation order (float32
    features: their rounding, ~1e-5 of a centroid coordinate).  With the sample all rows the
    restarts are the fit (one compute: the sample); else the winner is refined over all rows
    with one compute per pass."""
    import dask
    import dask.array as da

    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    monkeypatch.setattr(_passes, "FEATURE_DTYPE", dtype)
    monkeypatch.setattr(_estimators, "INIT_SAMPLE_SIZE", sample_size)
    X, y = views
    ref = _fit(cls, X)
    Xd = [da.from_array(v, chunks=(40, 5)) for v in X]
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        est = _fit(cls, Xd, chunk_size=16)
    if sample_size == 150:
        assert counter.calls == 1
    else:
        # the sample, one persist of the features (they fit the local budget,
        # FEATURE_CACHE_BYTES), then one per pass; labels_ stays lazy
        assert counter.calls == est.n_iter_ + 2
    assert est.diagnostics_["restarts"]["rows"] == sample_size
    assert est.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(est.centroids_, ref.centroids_, rtol=rtol, atol=rtol * 1e-2)
    np.testing.assert_allclose(est.view_weights_, ref.view_weights_, rtol=rtol)
    np.testing.assert_allclose(est.objective_history_, ref.objective_history_, rtol=obj_rtol)
    assert isinstance(est.labels_, da.Array)
    np.testing.assert_array_equal(est.labels_.compute(), ref.labels_)


@pytest.mark.parametrize("chunks_in_budget, persisted", [(10.0, 4), (2.5, 2), (0.5, 0)])
def test_distributed_features_are_persisted_within_the_memory_budget(views, dask_client, monkeypatch,
                                                                      chunks_in_budget, persisted):
    """On a distributed cluster the restarts run on the workers and the first row chunks'
    features that fit the budget are persisted (futures on the workers), the rest recomputed
    in every pass; the fit is the same either way, and the same as for NumPy input up to
    float32 summation order."""
    import dask.array as da

    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    # the features of all rows serve the refinement of the winner, when the sample is not all rows
    monkeypatch.setattr(_estimators, "INIT_SAMPLE_SIZE", 100)
    X, _ = views
    Xd = [da.from_array(v, chunks=(40, 5)) for v in X]             # chunks of 40, 40, 40, 30 rows
    ref = _fit(MultiViewRFFPowerKMeans, X)
    workers = dask_client.scheduler_info(n_workers=-1)["workers"].values()
    memory = len(workers) * min(w["memory_limit"] for w in workers)
    chunk_bytes = 40 * 2 * 2 * ref.n_components_ * np.dtype(_passes.FEATURE_DTYPE).itemsize
    monkeypatch.setattr(_passes, "FEATURE_PERSIST_FRACTION", chunks_in_budget * chunk_bytes / memory)
    rows = RowBlocks(dict(zip(["view0", "view1"], Xd)))
    kept = _passes.feature_rows(rows, ref._feature_map())
    if persisted == 0:
        assert kept is None
    else:
        for a in kept.arrays:
            assert len(dask_client.futures_of(a)) == persisted and a.chunks[0] == Xd[0].chunks[0]
    est = _fit(MultiViewRFFPowerKMeans, Xd)
    assert est.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(est.centroids_, ref.centroids_, rtol=1e-4, atol=1e-6)
    # the restarts ran as tasks on the workers: the same runs as in this process
    assert est.diagnostics_["restarts"]["seed"] == ref.diagnostics_["restarts"]["seed"]
    np.testing.assert_allclose(est.diagnostics_["restarts"]["final_objective"],
                               ref.diagnostics_["restarts"]["final_objective"], rtol=1e-10)
    np.testing.assert_array_equal(est.labels_.compute(), ref.labels_)


def test_dask_predict_and_transform_are_lazy(views):
    import dask.array as da

    X, y = views
    est = _fit(MultiViewRFFPowerKMeans, X)
    Xd = [da.from_array(v, chunks=(50, 5)) for v in X]
    with raise_if_dask_computes():
        labels = est.predict(Xd)
        costs = est.transform(Xd)
    assert isinstance(labels, da.Array) and labels.chunks == ((50, 50, 50),)
    assert costs.chunks == ((50, 50, 50), (3,))
    np.testing.assert_array_equal(labels.compute(), est.predict(X))
    np.testing.assert_allclose(costs.compute(), est.transform(X), rtol=1e-12)


def test_mixed_numpy_and_dask_views(views):
    import dask.array as da

    X, y = views
    ref = _fit(RFFKernelPowerKMeans, X)
    est = _fit(RFFKernelPowerKMeans, [X[0], da.from_array(X[1], chunks=(60, 5))])
    np.testing.assert_array_equal(est.labels_.compute(), ref.labels_)


def test_dask_views_with_different_row_chunks_are_rejected(views):
    import dask.array as da

    X, _ = views
    with pytest.raises(InputValidationError, match="rechunk"):
        _fit(RFFKernelPowerKMeans, [da.from_array(X[0], chunks=(50, 5)),
                                    da.from_array(X[1], chunks=(40, 5))])


def test_nan_in_dask_input_is_named(views):
    import dask.array as da

    X, _ = views
    bad = X[1].copy()
    bad[77, 2] = np.nan
    with pytest.raises(InputValidationError, match=r"NaN \(NaN or infinity\): view 'view1', first bad row 77\.$"):
        _fit(RFFKernelPowerKMeans, [da.from_array(X[0], chunks=(50, 5)),
                                    da.from_array(bad, chunks=(50, 5))])


# ----------------------------------------------------------------------------- model state
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_model_state_round_trip(cls, views):
    X, _ = views
    est = _fit(cls, X, scale="minmax")
    state = est.model_state()
    json.dumps(state["attrs"])
    for name, (dims, arr) in state["arrays"].items():
        assert isinstance(arr, np.ndarray) and len(dims) == arr.ndim, name
    # what a store would hand back: plain arrays, attrs through JSON
    restored = cls.from_model_state({
        "attrs": json.loads(json.dumps(state["attrs"])),
        "arrays": {name: (dims, np.array(arr)) for name, (dims, arr) in state["arrays"].items()},
    })
    np.testing.assert_array_equal(restored.predict(X), est.predict(X))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))
    assert restored.get_params() == est.get_params()
    assert restored.n_iter_ == est.n_iter_ and restored.diagnostics_["converged"]
    for name in ("feature_centers_", "feature_scales_", "rff_frequencies_"):
        for a, b in zip(getattr(restored, name), getattr(est, name)):
            np.testing.assert_array_equal(a, b)
    assert restored.summary() == est.summary()
    if cls is MultiViewRFFPowerKMeans:
        assert restored.lam_ == est.lam_


def test_lam_auto_grows_with_the_number_of_points(views):
    """lam="auto" = 0.05 N (the paper's 100 at N = 2000); a number is used as given."""
    X, _ = views
    n = len(X[0])
    assert _fit(MultiViewRFFPowerKMeans, X).lam_ == pytest.approx(0.05 * n)
    assert _fit(MultiViewRFFPowerKMeans, [v[:90] for v in X]).lam_ == pytest.approx(0.05 * 90)
    assert _fit(MultiViewRFFPowerKMeans, X, lam=7.0).lam_ == 7.0
    assert not hasattr(_fit(RFFKernelPowerKMeans, X), "lam_")


def test_model_state_of_another_class_is_rejected(views):
    X, _ = views
    state = _fit(RFFKernelPowerKMeans, X, max_iter=2).model_state()
    with pytest.raises(InputValidationError, match="format 'mkdist.RFFKernelPowerKMeans/2'"):
        MultiViewRFFPowerKMeans.from_model_state(state)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_summary_reports_views_kernels_and_pep(cls, views):
    X, _ = views
    est = _fit(cls, {"a": X[0], "b": X[1]})
    out = est.summary()
    names = [f"{v}:rff-gaussian(sigma={s:.4g})" for v, s in zip("ab", est.bandwidths_)]
    assert out["method"] == cls.method and out["views"] == ["a", "b"]
    assert out["n_features"] == {"a": 5, "b": 5} and out["n_components"] == est.n_components_
    assert out["kernel_names"] == names
    assert out["weights"] == [{"name": "view weights", "labels": ["a", "b"],
                               "values": est.view_weights_.tolist()}]
    assert out["n_iter"] == est.n_iter_ and out["converged"] is True and out["spectrum"] is None
    assert out["objective_history"] == est.objective_history_.tolist()
    pep = est.diagnostics_["pep"]
    assert out["pep"] == {"t": 3, "base": dict(zip(names, pep["base"])), "combined": pep["combined"]}
    assert "timings" not in out["diagnostics"]


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls, params, match", [
    (RFFKernelPowerKMeans, {"n_clusters": 0}, r"`n_clusters`=0: give K as an integer >= 1 \(e.g. 10\)\.$"),
    (RFFKernelPowerKMeans, {"n_components": 0}, r"`n_components`=0 must be >= 1"),
    (RFFKernelPowerKMeans, {"n_components": "huge"}, r"`n_components`='huge'"),
    (RFFKernelPowerKMeans, {"s0": 0.0}, r"`s0`=0.0 must be < 0"),
    (MultiViewRFFPowerKMeans, {"s0": 15}, r"`s0`=15.0 must be < 0"),
    (RFFKernelPowerKMeans, {"s0": "big"}, r"`s0`='big'"),
    (MultiViewRFFPowerKMeans, {"lam": 0.0}, r"`lam`=0.0 must be > 0"),
    (MultiViewRFFPowerKMeans, {"lam": -1}, r"`lam`=-1.0 must be > 0"),
    (MultiViewRFFPowerKMeans, {"lam": "big"}, r"`lam`='big' must be 'auto' or a positive number"),
    (MultiViewRFFPowerKMeans, {"fuzzifier": 1.0}, r"`fuzzifier`=1.0 must be > 1"),
    (RFFKernelPowerKMeans, {"annealing": 0.9}, r"`annealing`=0.9 must be >= 1"),
    (RFFKernelPowerKMeans, {"anneal_every": 0}, r"`anneal_every`=0 must be >= 1"),
    (RFFKernelPowerKMeans, {"bandwidth": -1.0}, r"`bandwidth`=-1.0 must be > 0"),
    (RFFKernelPowerKMeans, {"bandwidth": [1.0]}, r"`bandwidth` has 1 values but the input has 2"),
    (RFFKernelPowerKMeans, {"bandwidth": [1.0, "silverman"]},
     r"`bandwidth\[1\]`='silverman' must be 'median' or 'mean' or a positive number"),
    (RFFKernelPowerKMeans, {"bandwidth": "silverman"}, r"`bandwidth`='silverman'"),
    (RFFKernelPowerKMeans, {"scale": "robust"}, r"`scale`='robust'"),
    (RFFKernelPowerKMeans, {"n_init": 0}, r"`n_init`=0 must be >= 1"),
    (MultiViewRFFPowerKMeans, {"n_init": "many"}, r"`n_init`='many' must be 'auto'"),
    (MultiViewRFFPowerKMeans, {"restart_selection": "best"}, r"`restart_selection`='best'.*'consensus'"),
    (RFFKernelPowerKMeans, {"restart_selection": None}, r"`restart_selection`=None"),
    (RFFKernelPowerKMeans, {"n_clusters": 151}, r"`n_clusters`=151: K is more than the 150 rows; lower `n_clusters`"),
])
def test_bad_parameters_are_rejected_before_work(cls, params, match, views, monkeypatch):
    from mkdist._methods._power_kmeans import _estimators, _loop, _passes, _restarts  # noqa: F401

    X, _ = views
    # the checks must come before any work on the data
    monkeypatch.setattr(_estimators, "gather_rows", lambda *a: pytest.fail("data read before validation"))
    monkeypatch.setattr(_estimators, "RowBlocks", lambda *a, **k: pytest.fail("data read before validation"))
    kw = {"n_clusters": 3, **params}
    with pytest.raises(InputValidationError, match=match):
        cls(**kw).fit(X)


def test_zero_variance_view_is_rejected(views):
    X, _ = views
    const = np.full((150, 4), 2.5)
    with pytest.raises(InputValidationError, match=r"view 'view1' is constant"):
        _fit(MultiViewRFFPowerKMeans, [X[0], const])


def test_nan_input_is_rejected(views):
    X, _ = views
    bad = X[0].copy()
    bad[5, 1] = np.nan
    with pytest.raises(InputValidationError, match=r"NaN.*view 'view0', first bad row 5"):
        _fit(RFFKernelPowerKMeans, [bad, X[1]])


def test_predict_checks_fitted_and_feature_counts(views):
    X, _ = views
    with pytest.raises(NotFittedError):
        RFFKernelPowerKMeans(3).predict(X)
    est = _fit(RFFKernelPowerKMeans, X)
    with pytest.raises(InputValidationError,
                       match=r"X has 4 features, but RFFKernelPowerKMeans is expecting 5 features as "
                             r"input \(view 'view1'\)"):
        est.predict([X[0], X[1][:, :4]])
    with pytest.raises(InputValidationError, match=r"X has 1 view\(s\) \['view0'\], but .* fitted on 2 views"):
        est.transform(X[0])


# ----------------------------------------------------------------------------- real data
@pytest.mark.slow
def test_mfeat_pix_fac(mfeat):
    """One seed on the paper's HW2 pair (pix + fac): far above the k-means start's ~0.75."""
    views_, y = mfeat
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = MultiViewRFFPowerKMeans(10, scale="minmax", n_init=3, random_state=0).fit(
            [views_[3], views_[1]])
    assert clustering_accuracy(y, est.labels_) > 0.8
