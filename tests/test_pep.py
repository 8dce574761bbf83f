import numpy as np
import pytest

from mkdist._core._pep import principal_eigenvalue_proportion as pep, top_eigenvalue_sum
from mkdist.errors import InputValidationError


def test_hand_computed_values():
    # Identity: no structure, beta(I_n, t) = t / n.
    assert pep(np.eye(10), 3) == pytest.approx(0.3)
    # diag(4, 3, 2, 1): (4 + 3) / 10.
    assert pep(np.diag([4.0, 3.0, 2.0, 1.0]), 2) == pytest.approx(0.7)
    # Rank-t kernel: all of the spectrum in its top t eigenvalues.
    rng = np.random.default_rng(0)
    H = rng.normal(size=(30, 3))
    assert pep(H @ H.T, 3) == pytest.approx(1.0)
    assert pep(np.eye(5), 5) == pytest.approx(1.0)


def test_factor_equals_dense_kernel_without_forming_it():
    rng = np.random.default_rng(1)
    H = rng.normal(size=(40, 6)) * np.array([5, 4, 3, 1, 0.5, 0.1])
    K = H @ H.T
    for t in (1, 2, 5):
        assert pep(H, t) == pytest.approx(pep(K, t), rel=1e-10)      # non-square: a factor
        assert pep(H, t, factor=True) == pytest.approx(pep(K, t, factor=False), rel=1e-10)
    # t beyond the factor's rank: the whole spectrum.
    assert pep(H, 10) == pytest.approx(1.0)
    # A wide factor (n < r) works from the small side too.
    W = rng.normal(size=(5, 50))
    assert pep(W, 2) == pytest.approx(pep(W @ W.T, 2), rel=1e-10)


def test_square_factor_needs_the_flag():
    rng = np.random.default_rng(2)
    H = rng.normal(size=(8, 8))
    with pytest.raises(InputValidationError, match="factor=True"):
        pep(H, 2)
    assert pep(H, 2, factor=True) == pytest.approx(pep(H @ H.T, 2), rel=1e-10)
    with pytest.raises(InputValidationError, match="must be square"):
        pep(rng.normal(size=(8, 3)), 2, factor=False)


def test_lanczos_path_matches_dense():
    # n above the Lanczos threshold: a low-rank-plus-identity kernel with a known spectrum.
    rng = np.random.default_rng(3)
    n = 3100
    Q, _ = np.linalg.qr(rng.normal(size=(n, 4)))
    K = Q @ np.diag([400.0, 300.0, 200.0, 100.0]) @ Q.T + np.eye(n)
    assert top_eigenvalue_sum(K, 3) == pytest.approx(903.0, rel=1e-8)
    assert pep(K, 4) == pytest.approx(1004.0 / (1000.0 + n), rel=1e-8)


@pytest.mark.parametrize("K, t, kwargs, match", [
    (np.eye(4), 0, {}, r"`t`=0 must be in \[1, n=4\]"),
    (np.eye(4), 5, {}, r"`t`=5 must be in \[1, n=4\]"),
    (np.eye(4), 1.5, {}, "must be an integer"),
    (np.eye(4), True, {}, "must be an integer"),
    (np.ones(4), 1, {}, "must be 2-D"),
    (np.array([[1.0, np.nan], [np.nan, 1.0]]), 1, {}, "NaN"),
    (np.zeros((3, 3)), 1, {}, "not positive"),
    (np.zeros((3, 2)), 1, {}, "factor H is zero"),
    (np.array([["a", "b"], ["c", "d"]]), 1, {}, "real-valued"),
])
def test_bad_input(K, t, kwargs, match):
    with pytest.raises(InputValidationError, match=match):
        pep(K, t, **kwargs)


def test_dask_input_is_refused_with_a_fix():
    da = pytest.importorskip("dask.array")
    with pytest.raises(InputValidationError, match="compute"):
        pep(da.ones((10, 3), chunks=5), 1)


def test_multiple_kernel_clustering_warns_about_near_identity_kernels():
    """A too-narrow Gaussian is the identity on the landmarks: named, with its weight share."""
    import warnings

    from sklearn.datasets import make_blobs

    from mkdist import KernelSpec, MultipleKernelClustering
    from mkdist.errors import DegenerateKernelWarning

    X, _ = make_blobs(300, n_features=5, centers=3, cluster_std=1.0, random_state=0)
    specs = [KernelSpec("view0", "rbf", bandwidth=1e-3), KernelSpec("view0", "rbf")]
    with pytest.warns(DegenerateKernelWarning, match=r"1 base kernel.*sigma=0\.001.*kernel weight"):
        est = MultipleKernelClustering(3, kernels=specs, random_state=0).fit(X)
    base = est.diagnostics_["pep"]["base"]
    assert base[0] < 3 / 300 + 0.01 < base[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateKernelWarning)
        MultipleKernelClustering(3, random_state=0).fit(X)
