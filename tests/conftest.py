"""Shared fixtures: small multi-view data as NumPy and as Dask, and real data paths."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(os.environ.get("MKDIST_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def make_blobs_views(n_per_cluster: int = 60, n_clusters: int = 3, seed: int = 0, dtype=np.float64):
    """Two views of the same well-separated clusters (view1 is a noisy non-linear map of view0)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 4.0, size=(n_clusters, 5))
    y = np.repeat(np.arange(n_clusters), n_per_cluster)
    v0 = centers[y] + rng.normal(0, 0.6, size=(y.size, 5))
    v1 = np.c_[np.tanh(v0[:, :3]), v0[:, 3:] ** 2 / 10] + rng.normal(0, 0.05, size=(y.size, 5))
    perm = rng.permutation(y.size)
    return [v0[perm].astype(dtype), v1[perm].astype(dtype)], y[perm]


@pytest.fixture
def blobs():
    return make_blobs_views()


@pytest.fixture(scope="session")
def mfeat():
    path = SHARED_DATA / "mfeat.npz"
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    d = np.load(path)
    return [d[f"view{i}"] for i in range(6)], d["y"]
