"""NystromSpectralClustering: Algorithm 1 against a dense reference, Algorithm 2 against eq. 19-20,
NumPy/Dask parity, model state round trip and input validation."""

import json
import math
import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.exceptions import NotFittedError

from mkdist._methods._nystrom import NystromSpectralClustering, default_n_anchors
from mkdist.errors import EmbeddingStabilityWarning, InputValidationError
from mkdist.metrics import nmi

from .conftest import make_blobs_views, raise_if_dask_computes


@pytest.fixture
def data():
    """300 points in 3 well separated clusters (5 features) and 60 new points from the same clusters."""
    (v0, _), y = make_blobs_views(n_per_cluster=120, n_clusters=3, seed=0)
    return v0[:300], y[:300], v0[300:], y[300:]


def _dense_algorithm1(X, anchors, sigma, k):
    """Algorithm 1 written out with N x m matrices, a full inverse and a full SVD (reference)."""
    def W(A, B):
        return np.exp(-cdist(A, B, "sqeuclidean") / (2 * sigma**2))
    P, K = W(X, anchors), W(anchors, anchors)
    lam, U = np.linalg.eigh(K)
    d = P @ np.linalg.solve(K, P.sum(axis=0)) / len(X)
    Z = (P @ U / np.sqrt(lam)) / np.sqrt(d)[:, None]
    F, s, _ = np.linalg.svd(Z, full_matrices=False)
    return F[:, :k] / np.sqrt(d)[:, None], s[:k], F[:, :k], d, P, K


def _match_signs(A, B):
    return B * np.sign((A * B).sum(axis=0))[None, :]


def test_fit_recovers_clusters_and_attributes(data):
    X, y, X_new, y_new = data
    m = NystromSpectralClustering(3, random_state=0).fit(X)
    assert nmi(y, m.labels_) == 1.0 and nmi(y_new, m.predict(X_new)) == 1.0
    assert m.n_anchors_ == math.ceil(math.sqrt(300)) == 18
    assert m.anchors_.shape == (18, 5) and m.anchor_indices_.shape == (18,)
    np.testing.assert_array_equal(m.anchors_, X[m.anchor_indices_])
    assert m.embedding_projection_.shape == (18, 3) and m.degree_weights_.shape == (18,)
    assert m.cluster_centers_.shape == (3, 3) and m.labels_.dtype == np.int64
    assert m.kernel_rank_ == m.anchor_eigenvalues_.size <= 18
    assert np.all(np.diff(m.singular_values_) <= 0)
    # sqrt(d) is an exact singular vector of Z with singular value sqrt(N): H's first column is constant.
    assert m.singular_values_[0] == pytest.approx(math.sqrt(300), rel=1e-10)
    H = m.transform(X)
    assert H.shape == (300, 3) and H.dtype == np.float64
    np.testing.assert_allclose(H[:, 0], H[0, 0], rtol=1e-8)
    assert H[0, 0] > 0
    assert m.diagnostics_["n_degrees_floored"] == 0


def test_algorithm1_matches_dense_reference(data):
    X, _, _, _ = data
    m = NystromSpectralClustering(3, n_anchors=25, random_state=1).fit(X)
    assert m.kernel_rank_ == 25  # well conditioned: the reference's full inverse is the same operator
    H_ref, s_ref, _, d_ref, _, _ = _dense_algorithm1(X, m.anchors_, m.sigma_, 3)
    H = m.transform(X)
    np.testing.assert_allclose(m.singular_values_, s_ref, rtol=1e-8)
    np.testing.assert_allclose(_match_signs(H, H_ref), H, rtol=1e-6, atol=1e-9)
    # d(x) = W(x, anchors) @ degree_weights_ are the degrees W~ 1 / N of the reference.
    P = np.exp(-cdist(X, m.anchors_, "sqeuclidean") / (2 * m.sigma_**2))
    np.testing.assert_allclose(P @ m.degree_weights_, d_ref, rtol=1e-8)


def test_algorithm2_is_the_eq19_extension_and_reproduces_training_H(data):
    """h~_t(x) = f~_t(x) / sqrt(d(x)), f~_t(x) = sum_j G~(x, x_j) f~_t(x_j) / (N sigma~_t^2) with
    f~_t(x_j) = sqrt(N) F_jt (eq. 19) and sigma~_t^2 = Sigma_t^2 / N equals sqrt(N) * transform(x)."""
    X, _, X_new, _ = data
    N = len(X)
    m = NystromSpectralClustering(3, n_anchors=25, random_state=1).fit(X)
    _, s, F, d, P, K = _dense_algorithm1(X, m.anchors_, m.sigma_, 3)
    F = _match_signs(m.transform(X) * np.sqrt(d)[:, None], F)
    Kinv = np.linalg.inv(K)
    for Xq in (X_new, X):
        Pq = np.exp(-cdist(Xq, m.anchors_, "sqeuclidean") / (2 * m.sigma_**2))
        W_tilde = Pq @ Kinv @ P.T                                   # W~(x, x_j), eq. 16
        d_q = W_tilde.sum(axis=1) / N                               # d~_N(x)
        G = W_tilde / np.sqrt(d_q[:, None] * d[None, :])            # eq. 17
        f = G @ (np.sqrt(N) * F) / (N * s**2 / N)                   # eq. 19
        h = f / np.sqrt(d_q)[:, None]                               # eq. 20
        np.testing.assert_allclose(h, np.sqrt(N) * m.transform(Xq), rtol=1e-6, atol=1e-9)
    # At the training points Algorithm 2 gives Algorithm 1's H = D^-1/2 F (same scale, same signs).
    np.testing.assert_allclose(m.transform(X), F / np.sqrt(d)[:, None], rtol=1e-6, atol=1e-9)


def test_sigma_is_eq24_and_bandwidth_overrides(data):
    X, _, _, _ = data
    m = NystromSpectralClustering(3, random_state=0).fit(X)
    # eq. 24, W = exp(-d^2 / mean d^2), is exp(-d^2 / (2 sigma^2)) with 2 sigma^2 = mean d^2 over
    # pairs of distinct rows (N <= 10k: all rows, exact).
    d2 = cdist(X, X, "sqeuclidean")
    assert 2 * m.sigma_**2 == pytest.approx(d2[np.triu_indices(len(X), 1)].mean(), rel=1e-12)
    m2 = NystromSpectralClustering(3, bandwidth=2.5, random_state=0).fit(X)
    assert m2.sigma_ == 2.5
    np.testing.assert_array_equal(m2.anchor_indices_, m.anchor_indices_)


def test_bandwidth_estimated_on_a_sample_for_large_n():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12_000, 3))
    m = NystromSpectralClustering(2, n_anchors=10, n_init=1, random_state=0).fit(X)
    exact = X.var(axis=0).sum()  # half the mean squared distance
    assert m.sigma_**2 == pytest.approx(exact, rel=0.05) and m.sigma_**2 != pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("n, c, k, expected", [(300, 1.0, 3, 18), (10_000, 1.0, 8, 100), (10_000, 0.5, 8, 50),
                                               (10, 4.0, 2, 10), (4, 0.1, 3, 3)])
def test_default_n_anchors(n, c, k, expected):
    assert default_n_anchors(n, c, k) == expected


def test_same_seed_same_result_and_predict_matches_labels(data):
    X, _, _, _ = data
    a = NystromSpectralClustering(3, random_state=5).fit(X)
    b = NystromSpectralClustering(3, random_state=5).fit(X)
    np.testing.assert_array_equal(a.anchor_indices_, b.anchor_indices_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(X), a.labels_)
    np.testing.assert_array_equal(a.fit_predict(X), a.labels_)
    np.testing.assert_allclose(a.fit_transform(X), a.transform(X))


def test_float32_input_computes_kernel_in_float32(data):
    X, y, _, _ = data
    m64 = NystromSpectralClustering(3, random_state=0).fit(X)
    m32 = NystromSpectralClustering(3, random_state=0).fit(X.astype(np.float32))
    assert m32.anchors_.dtype == np.float32 and m32.transform(X).dtype == np.float64
    np.testing.assert_allclose(m32.transform(X), m64.transform(X), rtol=1e-4, atol=1e-6)
    assert nmi(y, m32.labels_) == 1.0


def test_isolated_point_degree_is_floored_with_warning(data):
    X, _, _, _ = data
    X = np.r_[X, [[1e3] * 5]]
    est = NystromSpectralClustering(3, n_anchors=10, bandwidth=3.0, random_state=0)
    with pytest.warns(EmbeddingStabilityWarning, match="1 of 301 points"):
        est.fit(X)
    assert len(X) - 1 not in est.anchor_indices_
    assert np.isfinite(est.transform(X)).all() and est.diagnostics_["n_degrees_floored"] == 1


# ----------------------------------------------------------------------------- Dask
@pytest.mark.parametrize("chunks, block_rows", [(64, 8192), (300, 8192), ((100, 37, 163), 8192),
                                                (300, 41)])
def test_numpy_and_dask_agree(data, chunks, block_rows, monkeypatch):
    """Same seed, any chunking: same anchors, sigma and model; labels equal up to relabelling.

    ``block_rows`` < the chunk size makes every task (and the NumPy path) walk several kernel
    blocks of at most BLOCK_ROWS rows."""
    da = pytest.importorskip("dask.array")
    X, y, X_new, _ = data
    monkeypatch.setattr("mkdist._methods._nystrom.BLOCK_ROWS", block_rows)
    ref = NystromSpectralClustering(3, random_state=3).fit(X)
    Xd = da.from_array(X, chunks=(chunks, 5))
    m = NystromSpectralClustering(3, random_state=3).fit(Xd)
    np.testing.assert_array_equal(m.anchor_indices_, ref.anchor_indices_)
    assert m.sigma_ == pytest.approx(ref.sigma_, rel=1e-12)
    np.testing.assert_allclose(m.singular_values_, ref.singular_values_, rtol=1e-10)
    np.testing.assert_allclose(m.embedding_projection_, ref.embedding_projection_, rtol=1e-8, atol=1e-12)
    labels = m.labels_
    assert isinstance(labels, da.Array)
    assert nmi(y, labels.compute()) == 1.0 and nmi(ref.labels_, labels.compute()) == 1.0
    Xn = da.from_array(X_new, chunks=25)
    np.testing.assert_allclose(m.transform(Xn).compute(), ref.transform(X_new), rtol=1e-8, atol=1e-12)
    assert nmi(m.predict(Xn).compute(), ref.predict(X_new)) == 1.0


def test_dask_transform_and_predict_are_lazy(data):
    da = pytest.importorskip("dask.array")
    X, _, X_new, _ = data
    m = NystromSpectralClustering(3, random_state=0).fit(X)
    Xd = da.from_array(X_new, chunks=(20, 2))  # column chunks are merged lazily
    with raise_if_dask_computes():
        H, labels = m.transform(Xd), m.predict(Xd)
    assert H.chunks == ((20, 20, 20), (3,)) and labels.dtype == np.int64
    np.testing.assert_array_equal(labels.compute(), m.predict(X_new))
    # Two inputs, two graphs: keys must not collide.
    H2 = m.transform(da.from_array(X_new[::-1].copy(), chunks=(20, 5)))
    assert H2.name != H.name
    np.testing.assert_allclose(H2.compute(), m.transform(X_new)[::-1], rtol=1e-12)


def test_dask_nan_is_reported_with_its_chunk(data):
    da = pytest.importorskip("dask.array")
    X, _, _, _ = data
    bad = X.copy()
    bad[130, 2] = np.nan
    # Caught while reading the sampled rows (N <= 10k: every row is in the bandwidth sample) ...
    with pytest.raises(InputValidationError, match=r"NaN \(NaN or infinity\): view 'view0', first bad row"):
        NystromSpectralClustering(3, random_state=0).fit(da.from_array(bad, chunks=50))
    # ... or, for a row that was not sampled, inside the first pass, naming its chunk.
    m = NystromSpectralClustering(3, random_state=0).fit(X)
    assert 130 not in m.anchor_indices_
    with pytest.raises(InputValidationError, match=r"NaN or infinity: view 'view0', chunk 2 \(first bad row 130\)"):
        NystromSpectralClustering(3, bandwidth=3.0, random_state=0).fit(da.from_array(bad, chunks=50))
    with pytest.raises(InputValidationError, match="first bad row 130"):
        m.predict(da.from_array(bad, chunks=50)).compute()


def test_distributed_fit_and_predict(data, dask_client):
    da = pytest.importorskip("dask.array")
    X, y, X_new, y_new = data
    m = NystromSpectralClustering(3, n_init=2, random_state=0).fit(da.from_array(X, chunks=100))
    assert nmi(y, m.labels_.compute()) == 1.0
    assert nmi(y_new, m.predict(da.from_array(X_new, chunks=30)).compute()) == 1.0


# ----------------------------------------------------------------------------- model state
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_model_state_round_trip(data, dtype):
    X, _, X_new, _ = data
    m = NystromSpectralClustering(3, n_anchors=20, anchor_factor=2.0, random_state=7).fit(X.astype(dtype))
    state = m.model_state()
    attrs = json.loads(json.dumps(state["attrs"]))
    arrays = {k: (tuple(dims), np.array(a)) for k, (dims, a) in state["arrays"].items()}
    for dims, a in arrays.values():
        assert len(dims) == a.ndim and set(dims) <= {"anchor", "feature", "component", "cluster", "anchor_rank",
                                                     "eigenvalue"}
    r = NystromSpectralClustering.from_model_state({"attrs": attrs, "arrays": arrays})
    assert r.get_params() == m.get_params()
    np.testing.assert_array_equal(r.transform(X_new), m.transform(X_new))
    np.testing.assert_array_equal(r.predict(X_new), m.predict(X_new))
    assert r.sigma_ == m.sigma_ and r.anchors_.dtype == np.dtype(dtype)
    with pytest.raises(InputValidationError, match="format"):
        NystromSpectralClustering.from_model_state({"attrs": {**attrs, "format": "other/1"}, "arrays": arrays})


def test_model_state_of_random_state_instance_is_json(data):
    X, _, _, _ = data
    m = NystromSpectralClustering(3, random_state=np.random.RandomState(0)).fit(X)
    state = m.model_state()
    assert state["attrs"]["params"]["random_state"] is None
    json.dumps(state["attrs"])


# ----------------------------------------------------------------------------- validation
def _small():
    return make_blobs_views(n_per_cluster=10)[0][0]  # 30 x 5


@pytest.mark.parametrize("X, params, match", [
    (lambda: _small(), {"n_clusters": 1}, "`n_clusters`=1: give K as an integer >= 2"),
    (lambda: _small(), {"n_clusters": 11, "n_anchors": 10},
     "`n_clusters`=11: K is more than the 10 anchors; raise `n_anchors` or lower `n_clusters`."),
    (lambda: _small(), {"n_anchors": 31}, "n_anchors=31 must be <= n_samples=30"),
    (lambda: _small(), {"n_clusters": 31}, "`n_clusters`=31: K is more than the 30 rows"),
    (lambda: np.ones((30, 4)), {}, "is constant"),
    (lambda: np.ones((30, 4)), {"bandwidth": 1.0}, r"`n_clusters`=3: K = 3 is more than the numerical rank 1"),
    (lambda: np.r_[_small()[:-1], [[np.nan] * 5]], {}, "NaN"),
    (lambda: np.r_[_small()[:-1], [[np.inf] * 5]], {}, "infinity"),
    (lambda: _small()[:1], {}, "n_samples=1"),
    (lambda: _small(), {"anchor_factor": 0.0}, "anchor_factor"),
    (lambda: _small(), {"bandwidth": -1.0}, "`bandwidth`=-1.0 must be > 0"),
    (lambda: _small(), {"n_anchors": 2.5}, "`n_anchors` must be an integer"),
    (lambda: _small(), {"n_init": 0}, "n_init"),
    (lambda: [_small(), _small()], {}, "clusters one view .*, got 2 views"),
    (lambda: _small()[:, 0], {}, "must be 2-D"),
])
def test_bad_input_raises_before_heavy_work(X, params, match):
    with pytest.raises(InputValidationError, match=match):
        NystromSpectralClustering(**{"n_clusters": 3, **params}).fit(X())


def test_predict_before_fit_and_with_wrong_features(data):
    X, _, _, _ = data
    with pytest.raises(NotFittedError):
        NystromSpectralClustering(3).predict(X)
    m = NystromSpectralClustering(3, random_state=0).fit(X)
    with pytest.raises(InputValidationError, match="X has 4 features, but NystromSpectralClustering is expecting 5"):
        m.predict(X[:, :4])
    with pytest.raises(InputValidationError, match="NaN"):
        m.transform(np.r_[X[:3], [[np.nan] * 5]])


def test_no_warning_on_clean_data(data):
    X, _, _, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NystromSpectralClustering(3, random_state=0).fit(X)


# scikit-learn's estimator checks run once per registered method, with the same instance
# (n_clusters=2, n_init=2, random_state=0), in tests/test_common.py::test_sklearn_compatible.
