import numpy as np
import pytest
from sklearn.metrics.pairwise import cosine_similarity, polynomial_kernel, rbf_kernel

from mkdist._core._kernel_specs import FittedKernel, KernelSpec, resolve_kernel_specs
from mkdist._core._kernels import (
    fit_kernels,
    fit_preprocessing,
    kernel_blocks,
    landmark_kernels,
    preprocess_block,
    self_kernel,
)
from mkdist.errors import InputValidationError


@pytest.fixture
def data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(40, 6)), rng.normal(size=(15, 6))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_blocks_match_reference(data, dtype):
    X, L = data
    ks = [FittedKernel("v", "rbf", sigma=1.7), FittedKernel("v", "laplacian", sigma=2.0),
          FittedKernel("v", "polynomial", degree=3, coef0=0.5), FittedKernel("v", "linear"),
          FittedKernel("v", "cosine")]
    blocks = dict(kernel_blocks({"v": X}, {"v": L}, ks, dtype=dtype))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    d = np.sqrt(((X[:, None] - L[None]) ** 2).sum(-1))
    np.testing.assert_allclose(blocks[0], rbf_kernel(X, L, gamma=1 / (2 * 1.7**2)), **tol)
    np.testing.assert_allclose(blocks[1], np.exp(-d / 2.0), **tol)
    np.testing.assert_allclose(blocks[2], polynomial_kernel(X, L, degree=3, gamma=1, coef0=0.5), **tol)
    np.testing.assert_allclose(blocks[3], X @ L.T, **tol)
    np.testing.assert_allclose(blocks[4], cosine_similarity(X, L), **tol)
    assert all(b.dtype == dtype for b in blocks.values())


def test_one_gemm_per_view(data, monkeypatch):
    """All kernels of a view derive from a single X @ L.T."""
    import mkdist._core._kernels as K

    X, L = data
    calls = []
    real = K._gram
    monkeypatch.setattr(K, "_gram", lambda a, b: calls.append(1) or real(a, b))
    ks = [FittedKernel("v", "rbf", sigma=s) for s in (0.5, 1, 2)] + [
        FittedKernel("v", "linear"), FittedKernel("v", "cosine"), FittedKernel("w", "rbf", sigma=1.0)]
    assert len(list(K.kernel_blocks({"v": X, "w": X}, {"v": L, "w": L}, ks))) == 6
    assert len(calls) == 2  # one per view


def test_bandwidth_heuristics(data):
    X, _ = data
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)
    iu = np.triu_indices(len(X), 1)
    specs = [KernelSpec("v", "rbf", bandwidth_rule=r) for r in ("mean", "median", "max")]
    specs.append(KernelSpec("v", "rbf", bandwidth=3.0, multiplier=2.0))
    fitted = fit_kernels(specs, {"v": X})
    assert fitted[0].sigma == pytest.approx(np.sqrt(d2[iu].mean()))
    assert fitted[1].sigma == pytest.approx(np.median(np.sqrt(d2[iu])))
    assert fitted[2].sigma == pytest.approx(np.sqrt(d2[iu]).max())
    assert fitted[3].sigma == 6.0


def test_multiplier_grid_and_named_sets():
    specs = resolve_kernel_specs("rbf-grid", ["a", "b"])
    assert [(s.view, s.multiplier) for s in specs] == [("a", 0.5), ("a", 1.0), ("a", 2.0),
                                                       ("b", 0.5), ("b", 1.0), ("b", 2.0)]
    assert len(resolve_kernel_specs("mkkm12", ["a"])) == 12
    assert resolve_kernel_specs([{"view": 1, "kind": "linear"}], ["a", "b"])[0].view == "b"


@pytest.mark.parametrize("kernels, match", [
    ([{"view": "nope", "kind": "rbf"}], "does not exist"),
    ([{"view": 3, "kind": "rbf"}], "there are 2 views"),
    ([{"view": "a", "kind": "rbf", "bandwidth": 0.0}], "must be > 0"),
    ([{"view": "a", "kind": "rbf", "bandwidth": -1.0}], "must be > 0"),
    ([{"view": "a", "kind": "sigmoid"}], "unknown kernel kind"),
    ([{"view": "a", "kernel": "rbf"}], "unknown kernel spec keys"),
    ("fancy", "unknown kernel set"),
    ([], "empty"),
])
def test_bad_kernel_specs(kernels, match):
    with pytest.raises(InputValidationError, match=match):
        resolve_kernel_specs(kernels, ["a", "b"])


def test_constant_view_is_refused():
    with pytest.raises(InputValidationError, match="constant"):
        fit_kernels([KernelSpec("v", "rbf")], {"v": np.ones((10, 3))})


@pytest.mark.parametrize("normalize", [None, "diagonal", "trace"])
def test_out_of_sample_centering_matches_feature_space(data, normalize):
    """For the linear kernel the centred feature map is explicit: x - mean(landmarks)."""
    X, L = data
    ks = [FittedKernel("v", "linear")]
    stack, prep = fit_preprocessing(landmark_kernels({"v": L}, ks), True, normalize)
    block = next(kernel_blocks({"v": X}, {"v": L}, ks))[1]
    got = preprocess_block(block, self_kernel({"v": X}, ks[0]), 0, prep)
    mu = L.mean(axis=0)
    Xc, Lc = X - mu, L - mu
    want = Xc @ Lc.T
    if normalize == "diagonal":
        want = want / np.outer(np.linalg.norm(Xc, axis=1), np.linalg.norm(Lc, axis=1))
    elif normalize == "trace":
        want = want / (np.trace(Lc @ Lc.T) / len(L))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # ... and the landmark stack is the same map applied to the landmarks themselves.
    lw = Lc @ Lc.T
    if normalize == "diagonal":
        lw = lw / np.outer(np.linalg.norm(Lc, axis=1), np.linalg.norm(Lc, axis=1))
    elif normalize == "trace":
        lw = lw / (np.trace(Lc @ Lc.T) / len(L))
    np.testing.assert_allclose(stack[0], lw, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["rbf", "laplacian", "polynomial", "cosine"])
def test_landmark_rows_of_a_block_equal_the_preprocessed_landmark_kernel(data, kind):
    _, L = data
    ks = [FittedKernel("v", kind, sigma=2.0, degree=2.0, coef0=1.0)]
    stack, prep = fit_preprocessing(landmark_kernels({"v": L}, ks), True, "diagonal")
    block = next(kernel_blocks({"v": L}, {"v": L}, ks))[1]
    got = preprocess_block(block, self_kernel({"v": L}, ks[0]), 0, prep)
    # The Laplacian takes sqrt of a GEMM-based squared distance: a 1e-16 cancellation error
    # on the diagonal becomes 1e-8, the only place the two paths differ.
    tol = 1e-7 if kind == "laplacian" else 1e-9
    np.testing.assert_allclose(got, stack[0], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bandwidths_a_power_of_two_apart_share_one_exp(data, dtype, monkeypatch):
    """rbf sigmas 0.5, 1, 2, 4 (and laplacian 1, 2) from one exp each by squarings / roots."""
    import mkdist._core._kernels as K

    X, L = data
    ks = [FittedKernel("v", "rbf", sigma=s) for s in (0.5, 1.0, 2.0, 4.0)] + [
        FittedKernel("v", "laplacian", sigma=s) for s in (1.0, 2.0)] + [FittedKernel("v", "rbf", sigma=3.0)]
    fam = K._power_families(ks)
    # the base is the family's median exponent (sigma 1 of the rbf four), the others powers of it
    assert {i: fam[i][0] for i in range(7)} == {0: 1, 1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 6: 6}
    assert [fam[i][1] for i in range(7)] == [2, 0, -2, -4, 0, -1, 0]
    calls = []
    real_exp = np.exp
    monkeypatch.setattr(K.np, "exp", lambda *a, **k: calls.append(1) or real_exp(*a, **k))
    blocks = dict(K.kernel_blocks({"v": X}, {"v": L}, ks, dtype=dtype))
    monkeypatch.undo()
    assert len(calls) == 3  # one per family
    d2 = ((X[:, None] - L[None]) ** 2).sum(-1)
    tol = dict(rtol=2e-5, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-15)
    for i, k in enumerate(ks):
        ref = np.exp(-d2 / (2 * k.sigma**2)) if k.kind == "rbf" else np.exp(-np.sqrt(d2) / k.sigma)
        np.testing.assert_allclose(blocks[i], ref, **tol)


def test_auto_kernel_set_gives_sparse_views_the_cosine_kernel():
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(50, 4))
    words = (rng.random((50, 300)) < 0.02) * rng.integers(1, 5, (50, 300))  # 2% non-zero: a text view
    specs = resolve_kernel_specs("auto", ["d", "w"], {"d": dense, "w": words.astype(float)})
    assert [(s.view, s.kind) for s in specs] == [("d", "rbf")] * 3 + [("w", "cosine")]
    assert [s.multiplier for s in specs[:3]] == [0.5, 1.0, 2.0]
    # Without rows (a parameter check), every view counts as dense.
    assert [s.kind for s in resolve_kernel_specs("auto", ["d", "w"])] == ["rbf"] * 6
    with pytest.raises(InputValidationError, match="unknown kernel set 'nope'.*'auto'"):
        resolve_kernel_specs("nope", ["d"])
