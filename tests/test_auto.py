"""method="auto": the rule (mkdist.choose_method) and what a run records about its choice."""

import dask.array as da
import numpy as np
import pytest

import mkdist
from mkdist._methods._registry import LATE_FUSION_MIN_DIM, choose_method, data_facts
from mkdist._pipeline._config import RunConfig
from mkdist.errors import InputValidationError
from mkdist.pipeline import inspect_markdown, inspect_store

from .conftest import make_blobs_views


def _words(n, d, rng, density=0.02):
    return ((rng.random((n, d)) < density) * rng.integers(1, 4, (n, d))).astype(np.float32)


def test_facts_read_shapes_and_the_density_of_the_first_rows():
    rng = np.random.default_rng(0)
    dense, words = rng.normal(size=(3000, 5)), _words(3000, 400, rng)
    facts = data_facts({"a": dense, "b": da.from_array(words, chunks=(500, -1))})
    assert facts["n_samples"] == 3000 and facts["n_views"] == 2 and facts["dims"] == [5, 400]
    assert facts["density"][0] == 1.0 and 0.01 < facts["density"][1] < 0.03
    assert facts["sparse_views"] == ["b"]


def test_rule_by_shape():
    rng = np.random.default_rng(0)
    n = 400
    # Sparse views: MultipleKernelClustering with the cosine kernel on them.
    c = choose_method([_words(n, 300, rng), rng.normal(size=(n, 8))], 5)
    assert (c.method, c.params) == ("mkc", {"kernels": "auto"})
    assert "['view0'] are sparse" in c.reason and c.facts["sparse_views"] == ["view0"]
    # Dense low-dimensional views.
    c = choose_method([rng.normal(size=(n, 8)), rng.normal(size=(n, 30))], 12)
    assert (c.method, c.params) == ("mkc", {"kernels": "auto"}) and "every view is dense" in c.reason
    # Every view dense and wide (raw images): late fusion.
    c = choose_method([rng.random((n, LATE_FUSION_MIN_DIM)), rng.random((n, 2 * LATE_FUSION_MIN_DIM))], 10)
    assert c.method == "late-fusion" and "dense" in c.reason
    # One narrow view is enough to stay with MultipleKernelClustering.
    assert choose_method([rng.random((n, LATE_FUSION_MIN_DIM)), rng.random((n, 6))], 10).method == "mkc"
    # The choice is a fit-ready estimator, the user's parameters on top of the rule's.
    est = choose_method([rng.normal(size=(n, 4))], 3).make_estimator(3, random_state=0, n_landmarks=50)
    assert isinstance(est, mkdist.MultipleKernelClustering) and est.kernels == "auto" and est.n_landmarks == 50


def test_run_config_resolves_auto_and_checks_user_params_against_the_choice():
    views, _ = make_blobs_views(n_per_cluster=50, n_clusters=3)
    named = {f"view{i}": v for i, v in enumerate(views)}
    config = RunConfig.from_options(n_clusters=3, method="auto", n_landmarks=60)
    config.check_params()  # nothing to check before the data is seen
    resolved = config.resolve(named)
    # A new config: the one given is left as it was (the run's request key is computed from it).
    assert config.method == "auto" and config.auto is None
    config = resolved
    assert config.method == "mkc" and config.params == {"kernels": "auto", "n_landmarks": 60}
    assert config.auto["method"] == "mkc" and config.auto["facts"]["dims"] == [5, 5] and config.auto["reason"]
    # A parameter the chosen method does not take is refused, naming the choice.
    bad = RunConfig.from_options(n_clusters=3, method="auto", graph_filter_order=2)
    with pytest.raises(InputValidationError,
                       match=r"method=\"auto\" chose 'mkc' .* does not take \['graph_filter_order'\]"):
        bad.resolve(named)
    with pytest.raises(InputValidationError, match="does not take"):
        RunConfig.from_options(n_clusters=3, method="auto", not_a_parameter=1)


def test_cluster_with_auto_records_the_choice_and_resumes(dask_client, tmp_path):
    views, y = make_blobs_views(n_per_cluster=100, n_clusters=3, seed=3, dtype=np.float32)
    url = str(tmp_path / "auto.zarr")
    res = mkdist.cluster([da.from_array(v, chunks=(100, -1)) for v in views], url, 3, n_landmarks=120,
                         random_state=0, method="auto", y_true=y)
    assert res.metrics["scores"]["acc"] == 1.0
    params = res.store.params
    assert params["method"] == "mkc" and params["auto"]["method"] == "mkc"
    assert params["params"]["kernels"] == "auto" and "dense" in params["auto"]["reason"]
    assert res.model.kernels == "auto" and res.model.model_.n_components == 6  # 2K columns for K = 3
    text = inspect_markdown(inspect_store(url))
    assert "method chosen by auto: mkc" in text and "dense" in text
    # The same call resolves to the same run: every stage is resumed.
    again = mkdist.cluster([da.from_array(v, chunks=(100, -1)) for v in views], url, 3, n_landmarks=120,
                           random_state=0, method="auto")
    assert again.skipped == ["landmarks", "model", "embedding", "labels"]
