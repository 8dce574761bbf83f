"""Graph utilities of late fusion (mkdist._core._graph): kNN, adaptive neighbours, filters, simplex QP."""

import numpy as np
import pytest
import scipy.sparse

from mkdist._core._graph import (
    Graph,
    NeighborSpaces,
    adaptive_neighbor_weights,
    apply_filter,
    build_graph,
    filter_basis,
    knn,
    simplex_qp,
    smallest_k,
)


def test_adaptive_neighbor_weights_by_hand():
    # d = (0, 1, 3), k = 2: s = (3 - 0, 3 - 1) / (2 * 3 - (0 + 1)) = (0.6, 0.4).
    np.testing.assert_allclose(adaptive_neighbor_weights(np.array([[0.0, 1.0, 3.0]]), 2), [[0.6, 0.4]])
    # All k + 1 distances equal: 0/0 in the closed form -> uniform.
    np.testing.assert_allclose(adaptive_neighbor_weights(np.array([[2.0, 2.0, 2.0]]), 2), [[0.5, 0.5]])
    w = adaptive_neighbor_weights(np.sort(np.random.default_rng(0).random((50, 6)), axis=1), 5)
    assert np.all(w >= 0) and np.allclose(w.sum(axis=1), 1.0)
    assert np.all(np.diff(w, axis=1) <= 1e-15)  # nearer neighbours weigh more


def test_knn_excludes_self_and_orders_by_distance():
    X = np.array([[0.0], [1.0], [3.0], [6.0]])
    idx, d = knn(X, X, 2, exclude_self=True)
    np.testing.assert_array_equal(idx, [[1, 2], [0, 2], [1, 0], [2, 1]])
    np.testing.assert_allclose(d, [[1, 9], [1, 4], [4, 9], [9, 25]])
    # Ties go to the lower index; row blocks change nothing.
    Q = np.array([[0.0], [2.0]])
    R = np.array([[1.0], [-1.0], [3.0], [1.0]])
    idx, d = knn(Q, R, 3, block_rows=1)
    np.testing.assert_array_equal(idx, [[0, 1, 3], [0, 2, 3]])
    np.testing.assert_allclose(d, [[1, 1, 1], [1, 1, 1]])


def test_knn_matches_brute_force_over_blocks():
    rng = np.random.default_rng(3)
    Q, R = rng.normal(size=(37, 4)), rng.normal(size=(50, 4))
    idx, d = knn(Q, R, 6, block_rows=8)
    full = ((Q[:, None, :] - R[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(idx, np.argsort(full, axis=1, kind="stable")[:, :6])
    np.testing.assert_allclose(d, np.sort(full, axis=1)[:, :6], atol=1e-12)


@pytest.mark.parametrize("n", [7, 99, 100, 101, 2013])
@pytest.mark.parametrize("k", [1, 6, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_smallest_k_is_the_stable_sort_prefix(n, k, dtype):
    """Exact k smallest per row, ties to the lower column, whether the row is folded into
    group minima (n >= 100) or partitioned directly; duplicates and zeros included."""
    rng = np.random.default_rng(n + k)
    D = rng.random((64, n)).astype(dtype)
    D[:, n // 2] = D[:, n // 3]            # exact ties
    D[0] = 1.0                             # a row that is all ties
    D[1, :3] = 0.0
    idx, vals = smallest_k(D, k)
    ref = np.argsort(D, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_array_equal(vals, np.take_along_axis(D, ref, axis=1))
    assert idx.dtype == np.int64 and vals.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_neighbor_spaces_match_knn_in_every_space(dtype):
    rng = np.random.default_rng(5)
    spaces = [rng.normal(size=(300, d)) for d in (4, 7, 4)]
    points = [rng.normal(size=(90, R.shape[1])) for R in spaces]
    points[0][:3] = spaces[0][:3]          # points on landmarks: distance 0
    idx, sqd = NeighborSpaces(spaces, dtype).query(points, 6)
    assert idx.shape == sqd.shape == (3, 90, 6) and sqd.dtype == np.float64
    for i, (P, R) in enumerate(zip(points, spaces)):
        ref_idx, ref_d = knn(P, R, 6)
        np.testing.assert_array_equal(idx[i], ref_idx)
        np.testing.assert_allclose(sqd[i], ref_d, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(idx[0, :3, 0], [0, 1, 2])
    assert np.all(np.diff(sqd, axis=-1) >= 0)


def test_graph_is_symmetric_normalised_and_filter_identity_holds():
    rng = np.random.default_rng(1)
    H = rng.normal(size=(60, 4))
    g = build_graph(H, 5)
    assert scipy.sparse.issparse(g.S_hat)
    assert abs(g.S_hat - g.S_hat.T).max() < 1e-15
    assert g.S_hat.nnz <= 2 * 5 * 60  # sparse: at most the k-NN edges, symmetrised
    assert np.all(g.degree >= 0.5 - 1e-15)
    # Spectrum of D^-1/2 A D^-1/2 in [-1, 1], so T = (I + S)/2 is a low-pass filter.
    ev = np.linalg.eigvalsh(g.S_hat.toarray())
    assert ev.max() == pytest.approx(1.0) and ev.min() >= -1 - 1e-12
    Z = rng.normal(size=(60, 3))
    T = 0.5 * (np.eye(60) + g.S_hat.toarray())
    for order in (1, 2, 3):
        dense = sum(np.linalg.matrix_power(T, o) for o in range(1, order + 1)) @ Z
        np.testing.assert_allclose(apply_filter(g.S_hat, Z, order), dense, atol=1e-12)
        # G Z = (1 - 2^-o) Z + S B: the identity the out-of-sample rule rests on.
        B = filter_basis(g.S_hat, Z, order)
        np.testing.assert_allclose((1 - 2.0**-order) * Z + g.S_hat @ B, dense, atol=1e-12)
    np.testing.assert_array_equal(apply_filter(g.S_hat, Z, 0), Z)
    # Rebuilt from its neighbour lists (as a reloaded model does), the graph is the same bit for bit.
    again = Graph.from_neighbors(g.indices, g.weights)
    assert (again.S_hat != g.S_hat).nnz == 0
    np.testing.assert_array_equal(again.degree, g.degree)


def test_simplex_qp_by_hand_and_never_worse_than_the_start():
    # min x^T diag(1, 4) x on the simplex: x ~ (1/1, 1/4) normalised = (0.8, 0.2).
    M = np.diag([1.0, 4.0])
    x = simplex_qp(M, np.array([0.5, 0.5]))
    np.testing.assert_allclose(x, [0.8, 0.2], atol=1e-6)
    assert x.sum() == pytest.approx(1.0) and np.all(x >= 0)
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 5))
    M = A @ A.T
    x0 = np.full(5, 0.2)
    x = simplex_qp(M, x0)
    assert x @ M @ x <= x0 @ M @ x0 + 1e-12
    # A weight the optimum puts on an active bound is exactly 0 (callers skip what it weights).
    M = np.diag([1.0, 1.0, 100.0]) + 50.0 * np.outer([0, 0, 1], [0, 0, 1])
    M[2, :2] = M[:2, 2] = 20.0  # the third direction only adds to the objective
    x = simplex_qp(M, np.full(3, 1 / 3))
    assert x[2] == 0.0 and x[:2] == pytest.approx([0.5, 0.5], abs=1e-6)
    # A zero matrix: nothing to minimise, the start is kept.
    np.testing.assert_array_equal(simplex_qp(np.zeros((3, 3)), np.full(3, 1 / 3)), np.full(3, 1 / 3))
