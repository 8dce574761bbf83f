import numpy as np
import pytest

from mkdist._core._kernel_specs import resolve_kernel_specs
from mkdist._core._kernels import fit_kernels, fit_preprocessing, landmark_kernels
from mkdist._core._simplemkkm import average_kernel_kmeans, combine_kernels, simple_mkkm, top_eigenpairs
from mkdist.errors import InputValidationError

from .conftest import make_blobs_views


@pytest.fixture(scope="module")
def stack():
    views, y = make_blobs_views(n_per_cluster=40, n_clusters=4, seed=3)
    views = dict(zip(["a", "b"], views))
    rng = np.random.default_rng(0)
    views["noise"] = rng.normal(size=(views["a"].shape[0], 4))
    specs = resolve_kernel_specs("rbf-grid", list(views))
    st = landmark_kernels(views, fit_kernels(specs, views))
    return fit_preprocessing(st, True, "diagonal")[0]


def test_objective_history_is_monotone_and_weights_on_simplex(stack):
    r = simple_mkkm(stack, 4)
    assert r.n_iter >= 1
    assert np.all(np.diff(r.objective_history) <= 1e-12)
    assert r.kernel_weights.sum() == pytest.approx(1.0)
    assert np.all(r.kernel_weights >= 0)
    # J is the sum of the top-K eigenvalues of K_gamma, H its orthonormal eigenvectors.
    assert r.objective_history[-1] == pytest.approx(r.eigenvalues[:4].sum())
    np.testing.assert_allclose(r.H.T @ r.H, np.eye(4), atol=1e-10)
    Kg = combine_kernels(stack, r.kernel_weights)
    np.testing.assert_allclose(Kg @ r.H, r.H * r.eigenvalues[:4], atol=1e-8)


def test_result_does_not_depend_on_starting_weights(stack):
    """J is convex in gamma (Theorem 2): every start reaches the same minimum."""
    rng = np.random.default_rng(7)
    ref = simple_mkkm(stack, 4, tol=1e-6)
    for _ in range(3):
        r = simple_mkkm(stack, 4, tol=1e-6, init_weights=rng.dirichlet(np.ones(stack.shape[0])))
        assert r.objective_history[-1] == pytest.approx(ref.objective_history[-1], rel=1e-4)
        np.testing.assert_allclose(r.kernel_weights, ref.kernel_weights, atol=2e-2)


def test_simplemkkm_beats_uniform_objective(stack):
    r = simple_mkkm(stack, 4)
    u = average_kernel_kmeans(stack, 4)
    np.testing.assert_allclose(u.kernel_weights, 1 / stack.shape[0])
    assert r.objective_history[-1] <= u.objective_history[0] + 1e-9


def test_top_eigenpairs_partial_matches_full():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 50))
    A = A + A.T
    vals, vecs = top_eigenpairs(A, 5)
    full = np.linalg.eigvalsh(A)[::-1][:5]
    np.testing.assert_allclose(vals, full, rtol=1e-10)
    assert vecs.shape == (50, 5)


@pytest.mark.parametrize("kernels, k, match", [
    (np.zeros((2, 3, 4)), 2, r"shape \(m, n, n\)"),
    (np.zeros((2, 4, 4)), 1, "n_clusters=1"),
    (np.zeros((2, 4, 4)), 5, "n_clusters=5"),
    (np.full((1, 3, 3), np.nan), 2, "NaN"),
])
def test_bad_stacks(kernels, k, match):
    with pytest.raises(InputValidationError, match=match):
        simple_mkkm(kernels, k)
