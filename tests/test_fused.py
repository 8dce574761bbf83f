"""The fused embedding (issue 34): kernels summed before one projection, NumPy and compiled routes."""

import json
import os
import subprocess
import sys

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
        # The block's first source stores into C without reading it (C is not zeroed): whatever
        # C held (NaN here), the sum is the one added to zeros, up to the order of its roundings.
        C0 = np.full((b, n), np.nan)
        _fused.combine_compiled(src, powers, dl, shift, weight, kxx, mode, True, C0, coefs[1], cents[1], 2, 1e-12,
                                accumulate=False)
        np.testing.assert_allclose(C0, C, rtol=1e-13, atol=1e-13)


def test_exp_inside_the_compiled_step_is_the_clipped_exp_of_the_distance_terms():
    """exp_of: the source exp(scale (G - c ||x||^2 + cb)) clipped at 1 is formed in the loop, to
    float32 accuracy (Cephes' expf: within ~1 ulp; NumPy's float32 exp ~2 ulp), exactly 0 below
    float32's smallest normal, 1 where rounding pushes the argument above 0."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(1)
    b, n, c, d, c0 = 7, 300, 3, 5, 0.05
    G = rng.uniform(-3.0, 0.0, size=(b, n)).astype(np.float32)
    G[0, :6] = [1e-6, 0.0, -88.0, -95.0, -200.0, -87.0]  # above 0, 0, below the smallest normal, ~1e-38
    X = rng.normal(size=(b, d)).astype(np.float32)
    X[0] = 0.0  # row 0's argument is G itself
    rb = -np.float32(c0) * (X * X).sum(axis=1, dtype=np.float32)
    cb = rng.uniform(-0.2, 0.0, n).astype(np.float32)
    cb[:6] = 0.0
    powers = np.array([4, 0, 2])
    dl = rng.uniform(0.5, 2.0, size=(3, n)).astype(np.float32)
    shift, weight, kxx = rng.uniform(0, 0.3, 3), rng.uniform(0.5, 2, 3), np.ones((b, 3))
    Q = rng.normal(size=(n, c))
    for scale in (1.0, 0.25):
        arg = scale * (G.astype(np.float64) + rb[:, None] + cb[None, :])
        src = np.minimum(np.exp(arg), 1.0)
        C, C64 = np.empty((b, n), np.float32), np.empty((b, n))
        coef, cent, coef64, cent64 = (np.empty((b, 3)) for _ in range(4))
        _fused.combine_compiled(G, powers, dl, shift, weight, kxx, _fused.MODE_DIAGONAL_CENTRED, False, C, coef, cent,
                                0, 1e-12, accumulate=False, exp_of=(X, cb, c0, scale))
        _fused.combine_compiled(src, powers, dl.astype(np.float64), shift, weight, kxx, _fused.MODE_DIAGONAL_CENTRED,
                                True, C64, coef64, cent64, 0, 1e-12, accumulate=False)
        np.testing.assert_allclose(C, C64, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(coef, coef64, rtol=2e-5)
        np.testing.assert_allclose((C @ Q), C64 @ Q, rtol=1e-4, atol=1e-4 * np.abs(C64 @ Q).max())
    # the source itself, through the kernel with power 0 and unit weights, no normalisation
    C = np.empty((b, n), np.float32)
    ones = np.ones(1)
    _fused.combine_compiled(G, np.array([0]), np.ones((1, n), np.float32), np.zeros(1), ones, np.ones((b, 1)),
                            _fused.MODE_CONSTANT, False, C, np.empty((b, 1)), np.empty((b, 1)), 0, 1e-12,
                            accumulate=False, exp_of=(X, cb, c0, 1.0))
    assert C[0, 0] == 1.0 and C[0, 1] == 1.0 and C[0, 2] == 0.0 and C[0, 3] == 0.0 and C[0, 4] == 0.0
    arg32 = (G + rb[:, None]) + cb[None, :]  # about the loop's float32 argument; its rounding is not the exp's
    want = np.minimum(np.exp(arg32.astype(np.float64)), 1.0)
    normal = want >= np.finfo(np.float32).tiny
    assert np.abs(C[0][normal[0]] - want[0][normal[0]]).max() <= np.spacing(np.float32(1.0))  # row 0: G exactly
    ulps = np.abs(C[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32))
    assert np.median(ulps) <= 0.5 and ulps.max() <= 8  # the rows' norms are summed in another order
    with pytest.raises(TypeError, match="float32 only"):
        _fused.combine_compiled(G.astype(np.float64), np.array([0]), np.ones((1, n)), np.zeros(1), ones,
                                np.ones((b, 1)), 0, False, np.empty((b, n)), np.empty((b, 1)), np.empty((b, 1)), 0,
                                1e-12, exp_of=(X, cb, c0, 1.0))


def test_finish_step_centres_and_scales_rows_like_numpy():
    """finish_compiled: P - cent U - coef V, unit rows in float64 (a zero row stays zero), cast."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(2)
    b, q, c = 11, 4, 6
    P = rng.normal(size=(b, c)).astype(np.float32)
    cent, coef = rng.normal(size=(b, q)), rng.normal(size=(b, q))
    U, V = rng.normal(size=(q, c)), rng.normal(size=(q, c))
    H = P.astype(np.float64) - cent @ U - coef @ V
    for center, unit in ((True, True), (True, False), (False, True), (False, False)):
        want = H if center else P.astype(np.float64)
        if unit:
            want = want / np.linalg.norm(want, axis=1, keepdims=True)
        out = np.empty((b, c))
        np.testing.assert_allclose(_fused.finish_compiled(P, cent, coef, U, V, center, unit, out), want, rtol=1e-12,
                                   atol=1e-12)
        P32 = P.copy()
        got = _fused.finish_compiled(P32, cent, coef, U, V, center, unit, P32)  # in place, float32
        assert got is P32
        np.testing.assert_array_equal(got, want.astype(np.float32))
    Z = np.zeros((2, c), np.float32)
    zero = _fused.finish_compiled(Z, np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((0, c)), np.zeros((0, c)), True,
                                  True, Z)
    assert not np.isnan(zero).any() and (zero == 0).all()


def test_numba_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("MKDIST_NUMBA", "0")
    assert not _fused.compiled_available()


#: A fit and two transforms of W1-type rows in a fresh process; argv[1] "blocked": ``import numba``
#: fails there, as where numba cannot be imported (sys.modules[name] = None makes import raise).
_ROUTE_JOB = r"""
import hashlib, json, sys
if sys.argv[1] == "blocked":
    sys.modules["numba"] = None
import numpy as np
import mkdist
from mkdist._core import _fused

views, y = mkdist.make_multiview_blobs(800, n_clusters=4, view_dims=(6, 6), as_dask=False)
views = list(views.values())
est = mkdist.MultipleKernelClustering(4, kernels="rbf-grid", n_landmarks=100, random_state=0).fit(views)
H = np.asarray(est.transform(views))
est.transform(views)  # a second pass: the notice is not repeated
print(json.dumps({"labels": np.asarray(est.labels_).tolist(), "compiled": _fused.compiled_available(),
                  "embedding": hashlib.sha256(np.ascontiguousarray(H).tobytes()).hexdigest()}))
"""


def _route_job(mode: str, **env) -> tuple[dict, str]:
    env = {**{k: v for k, v in os.environ.items() if k != "MKDIST_NUMBA"}, **env}
    r = subprocess.run([sys.executable, "-c", _ROUTE_JOB, mode], capture_output=True, text=True, env=env,
                       cwd="/tmp", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_without_numba_the_numpy_route_runs_says_so_once_and_gives_its_labels():
    blocked, blocked_err = _route_job("blocked")
    chosen, chosen_err = _route_job("plain", MKDIST_NUMBA="0")
    assert not blocked["compiled"] and not chosen["compiled"]
    assert blocked_err.count("numba cannot be imported") == 1, blocked_err[-3000:]
    assert "NumPy route" in blocked_err
    assert "numba cannot be imported" not in chosen_err  # MKDIST_NUMBA=0 is a choice: nothing to say
    # the same route: the same embedding bits and labels as the NumPy route chosen on purpose
    assert blocked["embedding"] == chosen["embedding"]
    assert blocked["labels"] == chosen["labels"]


def test_an_installed_numba_takes_the_compiled_route_by_default():
    compiled, err = _route_job("plain")
    assert compiled["compiled"]
    assert "numba cannot be imported" not in err


_WARM_JOB = r"""
import json, sys
import numpy as np
from mkdist._core import _fused
if sys.argv[1] == "warm":
    print(json.dumps({"compiled": _fused.warm(("float32",))}))
else:
    _fused._load(np.dtype("float32"))
    stats = _fused._compiled().stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values())}))
"""


def test_warm_fills_the_disk_cache_a_new_process_loads_from(tmp_path):
    """What `make setup` and the Docker image do: after ``warm``, a new process loads the compiled
    step from numba's disk cache and compiles nothing."""
    pytest.importorskip("numba")
    env = {**{k: v for k, v in os.environ.items() if k != "MKDIST_NUMBA"}, "NUMBA_CACHE_DIR": str(tmp_path)}

    def job(arg):
        r = subprocess.run([sys.executable, "-c", _WARM_JOB, arg], capture_output=True, text=True, env=env,
                           cwd="/tmp", timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert job("warm") == {"compiled": True}
    assert list(tmp_path.rglob("*.nbi")), "nothing written to NUMBA_CACHE_DIR"
    loaded = job("load")
    assert loaded["hits"] >= 1 and loaded["misses"] == 0, loaded


def _prefetched(dtype: str) -> tuple[bool, bool]:
    """On a worker: (was the load started here, is the compiled step loaded once it is done)."""
    import threading

    for t in threading.enumerate():
        if t.name == "mkdist-numba-prefetch":
            t.join()
    return np.dtype(dtype).str in _fused._PREFETCHED, bool(_fused._COMPILED) and _fused._COMPILED[0] is not None


def test_workers_load_the_compiled_step_at_start_also_those_that_join_later():
    """The fit asks the cluster to load the compiled step (a worker plugin): the workers there, and a
    worker started afterwards, load it before their first task, without being sent one."""
    from distributed import Client, LocalCluster

    pytest.importorskip("numba")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        _fused.prefetch_where_embedded("float32")
        cluster.scale(2)
        client.wait_for_workers(2, timeout=120)
        states = client.run(_prefetched, "float32")
    assert len(states) == 2
    assert all(state == (True, True) for state in states.values()), states
