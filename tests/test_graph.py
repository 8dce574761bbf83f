"""Graph utilities of late fusion (mkdist._graph): kNN, adaptive neighbours, filters, simplex QP."""

import numpy as np
import pytest
import scipy.sparse

from mkdist._graph import (
    Graph, adaptive_neighbor_weights, apply_filter, build_graph, filter_basis, knn, simplex_qp,
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
    # A zero matrix: nothing to minimise, the start is kept.
    np.testing.assert_array_equal(simplex_qp(np.zeros((3, 3)), np.full(3, 1 / 3)), np.full(3, 1 / 3))
