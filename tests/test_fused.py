"""The fused embedding (issue 34): kernels summed before one projection, NumPy and compiled routes."""

import numpy as np
import pytest

from mkdist._core import _fused
from mkdist._core._kernel_specs import FittedKernel
from mkdist._core._kernels import CombinedProjection, ProjectedKernels, fit_preprocessing, landmark_kernels

#: Every kernel kind; view "v" holds two RBF families (sigma 1, 2, 4 share one exp; 3 has its
#: own), a Laplacian family and the linear kernel beside them; "w" the polynomial and the cosine.
KERNELS = ([FittedKernel("v", "rbf", sigma=s) for s in (2.0, 1.0, 4.0, 3.0)]
           + [FittedKernel("v", "laplacian", sigma=s) for s in (2.0, 4.0)] + [FittedKernel("v", "linear")]
           + [FittedKernel("w", "polynomial", degree=2, coef0=1.0), FittedKernel("w", "cosine")])


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(3)
    L = {"v": rng.normal(size=(30, 5)), "w": rng.normal(size=(30, 3))}
    X = {"v": rng.normal(size=(70, 5)), "w": rng.normal(size=(70, 3))}
    X["v"][:5] = L["v"][:5]  # rows on a landmark: exponents of ~0 that rounding can push above 0
    X["w"][7] = 0.0  # a zero row: its cosine kernel row is 0
    Q = rng.normal(size=(30, 4))
    weights = rng.uniform(0.1, 1.0, len(KERNELS))
    weights[5] = 0.0  # a kernel with weight 0 is never computed
    return X, L, Q, weights


def _reference(X, L, Q, weights, prep, dtype=np.float64):
    proj = ProjectedKernels(L, KERNELS, prep, {p: Q for p in np.flatnonzero(weights > 0)}, dtype=dtype)
    return sum(weights[proj.index[j]] * G for j, G in proj.rows(X))


def _route(monkeypatch, route):
    if route == "compiled":
        pytest.importorskip("numba")
        monkeypatch.setenv("MKDIST_NUMBA", "1")
    else:
        monkeypatch.setenv("MKDIST_NUMBA", "0")
    assert _fused.compiled_available() == (route == "compiled")


@pytest.mark.parametrize("route", ["numpy", "compiled"])
@pytest.mark.parametrize("center, normalize", [(True, "diagonal"), (True, "trace"), (False, None),
                                               (False, "diagonal"), (True, None)])
def test_combined_projection_equals_the_weighted_sum_of_projected_kernels(setup, monkeypatch, route, center,
                                                                          normalize):
    X, L, Q, weights = setup
    _, prep = fit_preprocessing(landmark_kernels(L, KERNELS), center, normalize)
    _route(monkeypatch, route)
    got = CombinedProjection(L, KERNELS, prep, weights, Q)(X)
    np.testing.assert_allclose(got, _reference(X, L, Q, weights, prep), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("route", ["numpy", "compiled"])
def test_float32_route_is_within_float32_noise_of_float64(setup, monkeypatch, route):
    X, L, Q, weights = setup
    _, prep = fit_preprocessing(landmark_kernels(L, KERNELS), True, "diagonal")
    _route(monkeypatch, route)
    got = CombinedProjection(L, KERNELS, prep, weights, Q, dtype=np.float32)({k: v.astype(np.float32)
                                                                               for k, v in X.items()})
    ref = _reference(X, L, Q, weights, prep)
    assert got.dtype == np.float64
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, atol=2e-5 * scale)
    assert np.abs(got - ref).max() > 1e-12 * scale  # float32 arithmetic, not a float64 route


@pytest.mark.parametrize("powers", [
    [4, 0, 2],  # rbf-grid's family: the three kernels in two passes over each row
    [2, 0, -2, 1, -1, 3, 4, 5, -3],  # kernel by kernel: every unrolled power, and the general loop (5, -3)
])
def test_numpy_and_compiled_steps_agree_on_one_view(powers):
    """The two combination steps on the same source block: sum_t a_t k_t dl_t Q (the NumPy step's H)
    equals C @ Q (the compiled step's C), with the same a_t and centring terms, and both equal the
    definition."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(0)
    b, n, c = 9, 40, 3
    src = rng.uniform(0.0, 1.0, size=(b, n))
    src[0, :4] = 1.0 + 1e-9  # clipped at 1 by both
    powers = np.array(powers)
    q = len(powers)
    dl = rng.uniform(0.5, 2.0, size=(q, n))
    Q = rng.normal(size=(n, c))
    dlQ = np.zeros((q, n, 8))
    dlQ[:, :, :c] = dl[:, :, None] * Q
    dlQ[:, :, c] = 1.0 / n
    shift, weight, kxx = rng.uniform(0, 0.3, q), rng.uniform(0.5, 2, q), rng.uniform(1, 2, (b, q))
    for mode in (_fused.MODE_CONSTANT, _fused.MODE_DIAGONAL_CENTRED, _fused.MODE_DIAGONAL):
        H, C = np.zeros((b, c)), np.zeros((b, n))
        coefs, cents = [np.full((b, q + 2), np.nan) for _ in range(2)], [np.full((b, q + 2), np.nan) for _ in range(2)]
        _fused.combine_numpy(src.copy(), powers, dlQ, shift, weight, kxx, mode, True, H, coefs[0], cents[0], 2, 1e-12)
        before = src.copy()
        _fused.combine_compiled(src, powers, dl, shift, weight, kxx, mode, True, C, coefs[1], cents[1], 2, 1e-12)
        np.testing.assert_array_equal(src, before)  # the compiled step leaves its source alone
        np.testing.assert_allclose(C @ Q, H, rtol=1e-12, atol=1e-12)
        ref = np.zeros((b, c))  # the definition, kernel by kernel
        for t, p in enumerate(powers):
            k = np.minimum(src, 1.0) ** (2.0 ** p)
            a = {_fused.MODE_CONSTANT: np.full(b, weight[t]),
                 _fused.MODE_DIAGONAL_CENTRED:  # floored where the centred self-kernel is <= 0
                     weight[t] / np.sqrt(np.maximum(kxx[:, t] - 2 * k.mean(axis=1) + shift[t], 1e-12)),
                 _fused.MODE_DIAGONAL: weight[t] / np.sqrt(kxx[:, t])}[mode]
            np.testing.assert_allclose(coefs[0][:, 2 + t], a, rtol=1e-12)
            np.testing.assert_allclose(coefs[0][:, 2 + t] * (k.mean(axis=1) - shift[t]), cents[0][:, 2 + t])
            ref += coefs[0][:, 2 + t][:, None] * (k * dl[t]) @ Q
        np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(coefs[1], coefs[0], rtol=1e-12)
        np.testing.assert_allclose(cents[1], cents[0], rtol=1e-12, atol=1e-15)
        assert np.isnan(coefs[0][:, :2]).all() and not np.isnan(coefs[0][:, 2:]).any()  # columns offset..offset+q
        # The block's first source stores into C without reading it (C is not zeroed): the same
        # bits as adding to zeros, whatever C held.
        C0 = np.full((b, n), np.nan)
        _fused.combine_compiled(src, powers, dl, shift, weight, kxx, mode, True, C0, coefs[1], cents[1], 2, 1e-12,
                                accumulate=False)
        np.testing.assert_array_equal(C0, C)


def test_numba_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("MKDIST_NUMBA", "0")
    assert not _fused.compiled_available()
