"""Which kernels enter the weight fit (issue 41): a noise view gets no weight, and numbers in
different units are standardised by default."""

import numpy as np
import pytest
from sklearn.datasets import load_iris, load_wine

from mkdist import MultipleKernelClustering
from mkdist._core._scaling import SCALE_UNITS, FeatureScaling, units_differ
from mkdist._core._structure import Z_MIN, permutation_moments, shared_structure
from mkdist.metrics import clustering_accuracy


def _wine_views(noise: bool, seed: int = 12345):
    X, y = load_wine(return_X_y=True)
    views = {"a": X[:, :7], "b": X[:, 7:]}
    if noise:
        views["noise"] = np.random.default_rng(seed).standard_normal((X.shape[0], 10))
    return views, y


def _centred_rbf(X: np.ndarray) -> np.ndarray:
    X = (X - X.mean(0)) / X.std(0)
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = np.exp(-d2 / d2.mean())
    H = np.eye(len(X)) - 1.0 / len(X)
    return H @ K @ H


def test_noise_view_fails_the_test_and_informative_views_pass():
    views, _ = _wine_views(noise=True)
    stack = np.stack([_centred_rbf(v) for v in views.values()])
    check = shared_structure(stack, list(views))
    assert check.views == ["a", "b", "noise"]
    assert check.kept == [True, True, False]
    assert check.z[0] > 3 * Z_MIN and check.z[1] > 3 * Z_MIN
    assert abs(check.z[2]) < Z_MIN
    assert "noise" in check.note
    assert check.kernel_mask(["a", "a", "noise", "b"]).tolist() == [True, True, False, True]


def test_permutation_moments_are_those_of_sampled_permutations():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 3))
    A, B = _centred_rbf(X), _centred_rbf(X[:, :2] + rng.standard_normal((30, 2)))
    stat, mean, var = permutation_moments(A, B)
    A0, B0 = A.copy(), B.copy()
    np.fill_diagonal(A0, 0)
    np.fill_diagonal(B0, 0)
    assert stat == pytest.approx(np.vdot(A0, B0))
    null = np.array([np.vdot(A0[np.ix_(p, p)], B0) for p in (rng.permutation(30) for _ in range(20000))])
    assert mean == pytest.approx(null.mean(), abs=4 * null.std() / np.sqrt(null.size))
    assert var == pytest.approx(null.var(), rel=0.05)


def test_one_view_is_not_tested_and_all_noise_keeps_everything():
    rng = np.random.default_rng(0)
    one = np.stack([_centred_rbf(rng.standard_normal((60, 3)))])
    assert shared_structure(one, ["x"]) is None
    noise = np.stack([_centred_rbf(rng.standard_normal((60, 3))) for _ in range(2)])
    check = shared_structure(noise, ["x", "y"])
    assert check.kept == [True, True]  # nothing to tell the noise by: every kernel enters
    assert "every kernel is kept" in check.note


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_view_gets_no_weight_and_does_not_move_the_labels(seed):
    clean_views, y = _wine_views(noise=False)
    noisy_views, _ = _wine_views(noise=True, seed=seed)
    clean = MultipleKernelClustering(3, random_state=seed).fit(clean_views)
    noisy = MultipleKernelClustering(3, random_state=seed).fit(noisy_views)
    noise_kernels = [k.view == "noise" for k in noisy.kernels_]
    assert np.all(noisy.kernel_weights_[noise_kernels] == 0)
    assert noisy.diagnostics_["structure"]["kept"] == [True, True, False]
    acc_clean, acc_noisy = clustering_accuracy(y, clean.labels_), clustering_accuracy(y, noisy.labels_)
    assert abs(acc_noisy - acc_clean) <= 0.01
    assert acc_noisy > 0.9


def test_without_the_test_the_noise_view_draws_weight():
    views, _ = _wine_views(noise=True)
    est = MultipleKernelClustering(3, random_state=0, keep_structured=False).fit(views)
    w2 = est.kernel_weights_**2
    noise = np.array([k.view == "noise" for k in est.kernels_])
    assert w2[noise].sum() / w2.sum() > 0.3  # the min-max objective's pull (72% measured)
    assert est.diagnostics_["structure"] is None


def test_units_rule():
    wine, _ = load_wine(return_X_y=True)
    iris, _ = load_iris(return_X_y=True)
    assert units_differ(wine)  # proline (std 315) beside hue (0.23)
    assert not units_differ(iris)  # four lengths in cm
    counts = np.zeros((50, 40))
    counts[np.arange(50), np.arange(50) % 40] = np.arange(50) * 100.0  # sparse: one unit by definition
    assert not units_differ(counts)
    assert FeatureScaling.fit(SCALE_UNITS, {"iris": iris}) is None  # nothing to scale: no scaling step
    scaling = FeatureScaling.fit(SCALE_UNITS, {"iris": iris, "wine": wine[:150]})
    assert np.all(scaling.scale["iris"] == 1) and np.all(scaling.offset["iris"] == 0)
    np.testing.assert_allclose(scaling.scale["wine"], wine[:150].std(0))


def test_default_standardises_a_view_in_different_units_only():
    wine, y = load_wine(return_X_y=True)
    est = MultipleKernelClustering(3, random_state=0).fit(wine)
    assert est.model_.scaling is not None and est.model_.scaling.kind == SCALE_UNITS
    assert clustering_accuracy(y, est.labels_) > 0.95  # 0.68 on the raw units
    iris, _ = load_iris(return_X_y=True)
    assert MultipleKernelClustering(3, random_state=0).fit(iris).model_.scaling is None
