import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from mkdist import MultipleKernelClustering, embed
from mkdist.errors import InputValidationError
from mkdist.metrics import clustering_accuracy

from .conftest import make_blobs_views


def test_fit_recovers_clusters_and_predict_agrees(blobs):
    views, y = blobs
    m = MultipleKernelClustering(3, n_landmarks=60, random_state=0).fit(views)
    assert clustering_accuracy(y, m.labels_) == 1.0
    np.testing.assert_array_equal(m.predict(views), m.labels_)
    # K = 3 <= 10: the default embedding has 2K columns (default_embedding_dim).
    assert m.transform(views).shape == (len(y), 6)
    assert m.kernel_weights_.shape == (6,) and m.kernel_weights_.sum() == pytest.approx(1)
    assert m.landmark_indices_.shape == (60,)
    assert m.cluster_centers_.shape == (3, 6)
    assert m.eigenvalues_.shape == (7,)
    assert len(m.objective_history_) == m.n_iter_ + 1
    assert {"lambda_K", "eigengaps", "gap_threshold", "min_gap_ratio", "relative_gap_K"} <= set(m.diagnostics_)
    assert m.diagnostics_["gap_threshold"] == pytest.approx(4 / np.sqrt(60))
    # PEP (t = K) of every base kernel and of the combined kernel, each a share in (K/n, 1].
    pep = m.diagnostics_["pep"]
    assert len(pep["base"]) == 6 and all(3 / 60 <= b <= 1 + 1e-9 for b in pep["base"])
    assert 3 / 60 <= pep["combined"] <= 1 + 1e-9


def test_landmarks_embed_to_their_own_eigenvector_rows(blobs):
    views, _ = blobs
    m = MultipleKernelClustering(3, n_landmarks=50, normalize_embedding=False, random_state=1).fit(views)
    lm = [v[m.landmark_indices_] for v in views]
    H = m.transform(lm)
    np.testing.assert_allclose(H, m.model_.eigenvectors, atol=1e-8)


@pytest.mark.parametrize("container", ["list", "tuple", "dict"])
def test_multi_view_containers(blobs, container):
    views, y = blobs
    X = {"list": list(views), "tuple": tuple(views), "dict": {"a": views[0], "b": views[1]}}[container]
    m = MultipleKernelClustering(3, n_landmarks=60, random_state=0).fit(X)
    assert clustering_accuracy(y, m.labels_) == 1.0


def test_float32_input_embeds_in_float32(blobs):
    views, y = blobs
    views32 = [v.astype(np.float32) for v in views]
    m = MultipleKernelClustering(3, n_landmarks=60, random_state=0).fit(views32)
    assert m.transform(views32).dtype == np.float32
    assert clustering_accuracy(y, m.labels_) == 1.0


def test_same_seed_same_result(blobs):
    views, _ = blobs
    a = MultipleKernelClustering(3, n_landmarks=40, random_state=5).fit(views)
    b = MultipleKernelClustering(3, n_landmarks=40, random_state=5).fit(views)
    np.testing.assert_array_equal(a.landmark_indices_, b.landmark_indices_)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def _views():
    return make_blobs_views(n_per_cluster=10)[0]


@pytest.mark.parametrize("X, params, match", [
    (lambda: [np.r_[_views()[0][:-1], [[np.nan] * 5]], _views()[1]], {}, "NaN"),
    (lambda: [_views()[0], np.r_[_views()[1][:-1], [[np.inf] * 5]]], {}, "infinity"),
    (lambda: [_views()[0], _views()[1][:-1]], {}, "same number of rows"),
    (lambda: [_views()[0], _views()[1][:, 0]], {}, "must be 2-D"),
    (lambda: [_views()[0], np.empty((30, 0))], {}, "zero columns"),
    (lambda: _views(), {"n_clusters": 1}, "n_clusters"),
    (lambda: _views(), {"n_clusters": 11, "n_landmarks": 10},
     "`n_clusters`=11: K is more than the 10 landmarks; raise `n_landmarks` or lower `n_clusters`."),
    (lambda: _views(), {"n_landmarks": 31}, "n_landmarks=31 must be <= n_samples=30"),
    (lambda: [_views()[0], _views()[1].astype(str)], {}, "non-numeric"),
    (lambda: _views(), {"kernels": [{"view": "view7", "kind": "rbf"}]}, "does not exist"),
    (lambda: _views(), {"kernels": [{"view": 0, "kind": "rbf", "bandwidth": -2.0}]}, "must be > 0"),
    (lambda: [_views()[0], np.ones((30, 3))], {}, "constant"),
    (lambda: [_views()[0], _views()[1] * 1e300], {}, "overflow float64"),
    (lambda: _views(), {"landmark_method": "farthest"}, "landmark_method"),
    (lambda: _views(), {"kmeans_tol": -1.0}, "`kmeans_tol`=-1.0 must be >= 0"),
    (lambda: _views(), {"weights": "learned"}, "weights"),
    (lambda: _views(), {"scale": "robust"}, "scale"),
])
def test_bad_input_raises_before_heavy_work(X, params, match):
    with pytest.raises(InputValidationError, match=match):
        MultipleKernelClustering(**{"n_clusters": 3, **params}).fit(X())


def test_predict_before_fit_and_with_wrong_features(blobs):
    views, _ = blobs
    with pytest.raises(NotFittedError):
        MultipleKernelClustering(3).predict(views)
    m = MultipleKernelClustering(3, n_landmarks=30, random_state=0).fit(views)
    with pytest.raises(InputValidationError, match="X has 4 features, but MultipleKernelClustering is expecting 5"):
        m.predict([views[0], views[1][:, :4]])
    with pytest.raises(InputValidationError, match="fitted on 2 views"):
        m.transform([views[0]])
    with pytest.raises(InputValidationError, match=r"got views \['a', 'b'\], but .* fitted on views"):
        m.transform({"a": views[0], "b": views[1]})


def test_uniform_weights_baseline(blobs):
    views, y = blobs
    m = MultipleKernelClustering(3, n_landmarks=60, weights="uniform", random_state=0).fit(views)
    np.testing.assert_allclose(m.kernel_weights_, 1 / 6)
    assert m.n_iter_ == 0


def test_model_state_round_trip(blobs):
    views, _ = blobs
    m = MultipleKernelClustering(3, n_landmarks=40, scale="minmax", random_state=0).fit(views)
    restored = MultipleKernelClustering.from_model_state(m.model_state())
    np.testing.assert_array_equal(embed(dict(zip(["view0", "view1"], views)), restored.model_), m.transform(views))
    np.testing.assert_array_equal(restored.predict(views), m.labels_)


@pytest.mark.parametrize("center, normalize", [(True, "diagonal"), (True, "trace"), (False, None),
                                               (False, "diagonal"), (True, None)])
def test_fused_embedding_equals_reference(blobs, center, normalize):
    """The fused block (centring through the projection) equals sum_p alpha_p^2 P_p @ H D^-1, with
    P_p every out-of-sample kernel block preprocessed explicitly (the reference)."""
    from mkdist._core._blocks import RowBlocks
    from mkdist._core._kernels import kernel_blocks, preprocess_block, self_kernel
    from mkdist._methods._mkc import _embed_rows

    views, _ = blobs
    m = MultipleKernelClustering(3, n_landmarks=50, center=center, normalize=normalize,
                                 normalize_embedding=False, random_state=0).fit(views)
    model = m.model_
    named = dict(zip(["view0", "view1"], views))
    combined = np.zeros((len(views[0]), model.n_landmarks))
    for p, block in kernel_blocks(named, model.landmarks, model.kernels):
        preprocess_block(block, self_kernel(named, model.kernels[p]), p, model.preprocessing)
        combined += model.kernel_weights[p] ** 2 * block
    ref = combined @ model.projection
    got = RowBlocks(named, block_rows=37).map(_embed_rows, model, n_cols=3, dtype=np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-10)


def test_embedding_dim_widens_the_embedding(blobs):
    from mkdist._methods._base import default_embedding_dim

    assert [default_embedding_dim(k, 1000) for k in (2, 10, 11, 40)] == [4, 20, 11, 40]
    assert default_embedding_dim(10, 15) == 15 and default_embedding_dim(3, 3) == 3  # at most n landmarks
    views, y = blobs
    m = MultipleKernelClustering(3, n_landmarks=60, embedding_dim=5, random_state=0).fit(views)
    assert m.transform(views).shape == (len(y), 5) and m.cluster_centers_.shape == (3, 5)
    assert clustering_accuracy(y, m.labels_) == 1.0
    # the weights are the same SimpleMKKM fit; only the embedding is wider
    base = MultipleKernelClustering(3, n_landmarks=60, embedding_dim=3, random_state=0).fit(views)
    assert base.transform(views).shape == (len(y), 3)
    np.testing.assert_allclose(m.kernel_weights_, base.kernel_weights_)
    assert len(m.summary()["spectrum"]["values"]) >= 7
    with pytest.raises(InputValidationError, match="embedding_dim=2 must be >= n_clusters=3"):
        MultipleKernelClustering(3, embedding_dim=2).fit(views)


def test_collapsed_weights_are_reported():
    from mkdist._methods._mkc import _warn_collapsed_weights
    from mkdist.errors import DegenerateKernelWarning

    with pytest.warns(DegenerateKernelWarning, match="collapsed onto b .* compare with weights='uniform'"):
        _warn_collapsed_weights(np.array([0.05, 0.95, 0.0]), ["a", "b", "c"], "simplemkkm")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_collapsed_weights(np.array([0.4, 0.6]), ["a", "b"], "simplemkkm")
        _warn_collapsed_weights(np.array([0.0, 1.0]), ["a", "b"], "uniform")


def test_scipy_sparse_views_are_densified_and_match_dense_input(blobs):
    import scipy.sparse

    views, y = blobs
    sparse = [scipy.sparse.csr_matrix(np.where(np.abs(v) > 1.0, v, 0.0)) for v in views]
    dense = [s.toarray() for s in sparse]
    a = MultipleKernelClustering(3, kernels="auto", n_landmarks=60, random_state=0).fit(sparse)
    b = MultipleKernelClustering(3, kernels="auto", n_landmarks=60, random_state=0).fit(dense)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(sparse), b.predict(dense))


def test_sparse_view_too_large_to_densify_is_refused(monkeypatch):
    import scipy.sparse

    from mkdist._core import _validation

    monkeypatch.setattr(_validation, "SPARSE_DENSIFY_MAX_BYTES", 1000)
    X = scipy.sparse.random(100, 50, density=0.01, format="csr", random_state=0)
    with pytest.raises(InputValidationError, match=r"scipy.sparse matrix of shape \(100, 50\).*TruncatedSVD"):
        MultipleKernelClustering(3).fit(X)


def test_learned_weights_are_compared_with_uniform_weights(blobs):
    views, _ = blobs
    m = MultipleKernelClustering(3, n_landmarks=60, random_state=0).fit(views)
    check = m.diagnostics_["weights_check"]
    # Well-separated blobs: both weightings find the same landmark partition.
    assert check["ari"] == pytest.approx(1.0) and check["agree"] is True
    # SimpleMKKM minimises J, which starts at the uniform weights.
    assert check["objective_learned"] <= check["objective_uniform"] + 1e-9
    assert "weights_check" in m.summary()["diagnostics"]
    assert "weights_check" not in MultipleKernelClustering(3, n_landmarks=60, weights="uniform",
                                                           random_state=0).fit(views).diagnostics_
