"""Adding a method touches one module and its registration: a toy method, defined here only.

``ToyKMeans`` (k-means on the views side by side) subclasses the estimator base, declares its
registry metadata and parameter constraints, and registers itself; nothing else in mkdist is
edited.  With it registered, the registry-driven checks of tests/test_common.py pass, and the
pipeline, the CLI's method list and ``inspect`` run it by name.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

import mkdist
from mkdist._core._blocks import RowBlocks
from mkdist._core._kmeans import assign_labels, kmeans
from mkdist._core._validation import Interval
from mkdist._methods._base import MkdistEstimator
from mkdist._methods._registry import registered
from mkdist.cli import main

from . import test_common as common
from .conftest import make_blobs_views


def _side_by_side(blocks, _state):
    return np.hstack([np.asarray(b, dtype=np.float64) for b in blocks])


class ToyKMeans(MkdistEstimator):
    """k-means on the views side by side (a toy: what a new method needs, nothing more)."""

    method: ClassVar[str] = "toy-kmeans"
    state_format: ClassVar[str] = "tests.ToyKMeans/1"
    _param_constraints: ClassVar[dict] = {"n_init": [Interval(Integral, 1, None)]}

    def __init__(self, n_clusters: int = 8, *, n_init: int = 3, random_state=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.random_state = random_state

    def fit(self, X, y=None):
        views = self._fit_views(X)  # the base class has checked the parameters against X
        self._set_fitted_views(views)
        km = kmeans(self._features(views), self.n_clusters, n_init=self.n_init, random_state=self.random_state)
        self.cluster_centers_, self.labels_ = km.centers, km.labels
        self.diagnostics_ = {"inertia": km.inertia}
        return self

    def _features(self, views):
        return RowBlocks(views).map(_side_by_side, None, n_cols=self.n_features_in_, dtype=np.float64)

    def transform(self, X):
        return self._features(self._predict_views(X))

    def predict(self, X):
        return assign_labels(self.transform(X), self.cluster_centers_)

    def _state(self) -> tuple[dict, dict]:
        return {}, {"cluster_centers": (("cluster", "feature"), self.cluster_centers_)}

    def _restore(self, attrs: dict, get) -> None:
        self.cluster_centers_ = get("cluster_centers")

    def _summary_fields(self) -> dict[str, Any]:
        return {"n_components": int(self.n_features_in_)}


@pytest.fixture
def toy():
    with registered(ToyKMeans):
        yield ToyKMeans


@pytest.fixture(scope="module")
def data():
    views, y = make_blobs_views(n_per_cluster=60, n_clusters=3, seed=4)
    new, _ = make_blobs_views(n_per_cluster=20, n_clusters=3, seed=4)
    return views, y, new


def test_the_common_checks_pass(toy, data):
    views, _, new = data
    for check in common.CHECKS.values():
        check(toy, views, new)


def test_the_pipeline_runs_it_by_name(toy, data, dask_client, tmp_path):
    views, y, _ = data
    assert "toy-kmeans" in mkdist.available_methods()
    common.check_store_round_trip(toy, views, y, tmp_path)
    info = mkdist.pipeline.inspect_store(str(tmp_path / "toy-kmeans.zarr"))
    assert info["model"]["estimator"] == "ToyKMeans" and info["stages"]["labels"] == "complete"
    listed = CliRunner().invoke(main, ["methods"])
    assert listed.exit_code == 0 and "toy-kmeans" in listed.output
    with pytest.raises(mkdist.errors.InputValidationError, match="does not use `kernels`"):
        mkdist.pipeline.RunConfig.from_options(n_clusters=3, method="toy-kmeans", kernels=[{"view": 0}])
    assert mkdist.pipeline.stage_plan(mkdist.pipeline.RunConfig(3, method="toy-kmeans")) == ("model", "labels")


def test_it_is_gone_when_unregistered():
    assert "toy-kmeans" not in mkdist.available_methods()
    with pytest.raises(mkdist.errors.InputValidationError, match="unknown method 'toy-kmeans'"):
        mkdist.cluster([np.zeros((4, 2))], "memory://nowhere", 2, method="toy-kmeans")
