"""The one k-means (mkdist._core._kmeans) for NumPy and Dask input."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from mkdist._core._kmeans import assign_labels, kmeans

from .conftest import CountingScheduler


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=1500, centers=5, n_features=4, cluster_std=0.6, random_state=0)
    return X, y


def _match(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of b reordered to the nearest rows of a (centres up to relabelling)."""
    d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return b[d.argmin(axis=1)]


def test_parity_with_scikit_learn_up_to_relabelling(blobs):
    X, y = blobs
    ref = KMeans(5, n_init=10, random_state=0).fit(X)
    got = kmeans(X, 5, n_init=3, random_state=0)
    assert adjusted_rand_score(ref.labels_, got.labels) == 1.0
    np.testing.assert_allclose(_match(ref.cluster_centers_, got.centers), ref.cluster_centers_, atol=1e-8)
    assert got.inertia == pytest.approx(ref.inertia_, rel=1e-9)
    assert got.labels.dtype == np.int64


def test_numpy_and_dask_give_the_same_labels(blobs):
    X, _ = blobs
    ref = kmeans(X, 5, n_init=3, random_state=1)
    with dask.config.set(scheduler="synchronous"):
        got = kmeans(da.from_array(X, chunks=(200, -1)), 5, n_init=3, random_state=1)
        assert isinstance(got.labels, da.Array)
        np.testing.assert_array_equal(got.labels.compute(), ref.labels)
    np.testing.assert_allclose(got.centers, ref.centers, rtol=1e-12)
    assert got.n_iter == ref.n_iter


def test_restarts_cost_no_pass_over_the_rows():
    """One compute per Lloyd pass whatever n_init (plus one for the sample the restarts run on)."""
    X = np.random.default_rng(0).uniform(size=(20_000, 2))  # no cluster structure: Lloyd is slow
    dX = da.from_array(X, chunks=(2_000, -1))
    counts = {}
    for n_init in (1, 6):
        sched = CountingScheduler()
        with dask.config.set(scheduler=sched):
            res = kmeans(dX, 5, n_init=n_init, max_iter=4, tol=0.0, init_sample_size=100, random_state=0)
        counts[n_init] = (sched.calls, res.n_iter)
    assert counts[1][1] == counts[6][1] == 4
    assert counts[1][0] == counts[6][0] == 4 + 1


def test_in_memory_data_is_scikit_learns_kmeans(blobs):
    """Data that fit the sample: the restarts are scikit-learn's KMeans on all rows."""
    X, _ = blobs
    for seed in range(3):
        got = kmeans(X, 5, n_init=4, random_state=seed)
        rng = np.random.RandomState(seed)
        ref = KMeans(5, n_init=4, random_state=rng.randint(np.iinfo(np.int32).max)).fit(X)
        np.testing.assert_array_equal(got.labels, ref.labels_)
        assert got.n_iter == 1  # the pass over all rows confirms the converged restart


def test_empty_cluster_keeps_its_centre():
    # 6 clusters asked of 3 distinct points: some runs start with coinciding centres, and a
    # centre that wins no row stays where it is instead of becoming NaN.
    X = np.repeat(np.array([[0.0, 0.0], [5.0, 5.0], [10.0, 0.0]]), 20, axis=0)
    res = kmeans(X, 6, n_init=2, random_state=0)
    assert np.isfinite(res.centers).all() and res.centers.shape == (6, 2)
    assert len(np.unique(res.labels)) == 3 and res.inertia == pytest.approx(0.0, abs=1e-12)


def test_assign_labels_is_the_nearest_centre_in_float64(blobs):
    X, _ = blobs
    centers = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    want = ((X[:, None, :] - centers[None]) ** 2).sum(-1).argmin(axis=1)
    np.testing.assert_array_equal(assign_labels(X.astype(np.float32), centers), want)
    lazy = assign_labels(da.from_array(X, chunks=(400, -1)), centers)
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), want)
