"""Checks every registered method must pass, driven by the registry (no hand-kept list).

For each estimator in ``mkdist.available_methods()``: scikit-learn's common checks, NumPy vs
Dask parity, lazy graph building, the saved-state round trip, the summary schema, and a run
through the store (``mkdist.cluster`` -> ``load_estimator`` -> ``assign``).  The check
functions take the class, so a method defined elsewhere (tests/test_toy_method.py) reuses them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import parametrize_with_checks

import mkdist
from mkdist._core._sampling import gather_rows
from mkdist._core._validation import as_views, collect_constraints
from mkdist._methods._base import LANDMARK_EMBEDDING
from mkdist._methods._registry import get_method, method_table_markdown
from mkdist.errors import DegenerateKernelWarning, EmbeddingStabilityWarning

from .conftest import make_blobs_views, raise_if_dask_computes

METHODS = mkdist.available_methods()
SUMMARY_KEYS = {"method", "estimator", "n_clusters", "views", "n_features", "n_landmarks", "n_components",
                "kernel_names", "weights", "objective_history", "n_iter", "converged", "spectrum", "pep",
                "diagnostics"}


def make_instance(cls, n_clusters: int = 3, **extra):
    """A fast instance of any registered estimator: few k-means restarts, a fixed seed."""
    params = {"n_clusters": n_clusters, "random_state": 0, **extra}
    if "n_init" in cls().get_params():
        params.setdefault("n_init", 2)
    return cls(**params)


def method_views(cls, views):
    """The test views a method takes: all of them, or the first for single-view methods."""
    return list(views) if cls.multi_view else views[0]


def _quiet(fn, *args):
    with warnings.catch_warnings():
        # Tiny test data: near-identity kernels and weak eigen-gaps are expected, not the point.
        warnings.simplefilter("ignore", DegenerateKernelWarning)
        warnings.simplefilter("ignore", EmbeddingStabilityWarning)
        return fn(*args)


@pytest.fixture(scope="module")
def data():
    views, y = make_blobs_views(n_per_cluster=60, n_clusters=3, seed=4)
    new, _ = make_blobs_views(n_per_cluster=20, n_clusters=3, seed=4)
    return views, y, new


# ----------------------------------------------------------------------------- the checks
def check_numpy_dask_parity(cls, views, new):
    """Same seed, NumPy or Dask input: the same partition, and the same predictions."""
    X = method_views(cls, views)
    dX = [da.from_array(v, chunks=(50, -1)) for v in X] if cls.multi_view else da.from_array(X, chunks=(50, -1))
    ref = _quiet(make_instance(cls).fit, X)
    with dask.config.set(scheduler="synchronous"):
        got = _quiet(make_instance(cls).fit, dX)
        labels = np.asarray(got.labels_.compute() if hasattr(got.labels_, "compute") else got.labels_)
        assert adjusted_rand_score(ref.labels_, labels) == 1.0
        Xn = method_views(cls, new)
        dXn = [da.from_array(v, chunks=(25, -1)) for v in Xn] if cls.multi_view else da.from_array(Xn, chunks=25)
        assert adjusted_rand_score(ref.predict(Xn), got.predict(dXn).compute()) == 1.0


def check_graph_is_lazy(cls, views, new):
    """transform / predict on Dask input build a graph and compute nothing."""
    est = _quiet(make_instance(cls).fit, method_views(cls, views))
    Xn = method_views(cls, new)
    dXn = [da.from_array(v, chunks=(25, -1)) for v in Xn] if cls.multi_view else da.from_array(Xn, chunks=25)
    with raise_if_dask_computes():
        H, labels = est.transform(dXn), est.predict(dXn)
    assert isinstance(H, da.Array) and isinstance(labels, da.Array) and labels.dtype == np.int64
    np.testing.assert_array_equal(labels.compute(scheduler="sync"), est.predict(Xn))


def check_state_round_trip(cls, views, new):
    """model_state -> JSON + plain arrays -> from_model_state predicts and transforms identically."""
    est = _quiet(make_instance(cls).fit, method_views(cls, views))
    state = est.model_state()
    plain = {"attrs": json.loads(json.dumps(state["attrs"])),
             "arrays": {k: (tuple(dims), np.array(a)) for k, (dims, a) in state["arrays"].items()}}
    for name, (dims, a) in plain["arrays"].items():
        assert len(dims) == a.ndim and a.dtype.kind in "iufb" and "/" not in name, name
    restored = cls.from_model_state(plain)
    Xn = method_views(cls, new)
    np.testing.assert_array_equal(restored.predict(Xn), est.predict(Xn))
    np.testing.assert_array_equal(restored.transform(Xn), est.transform(Xn))
    assert restored.get_params() == est.get_params()
    with pytest.raises(mkdist.errors.InputValidationError, match="format"):
        cls.from_model_state({"attrs": {**plain["attrs"], "format": "other/1"}, "arrays": plain["arrays"]})


def check_summary_schema(cls, views, new=None):
    """summary() has the common keys, is JSON, and its weights / PEP have the common shape."""
    est = _quiet(make_instance(cls).fit, method_views(cls, views))
    s = est.summary()
    assert SUMMARY_KEYS <= set(s) and s["method"] == cls.method and s["estimator"] == cls.__name__
    json.dumps(s)
    for w in s["weights"]:
        assert set(w) == {"name", "labels", "values"} and len(w["values"]) == len(w["labels"])
    if s["pep"] is not None:
        assert {"t", "base", "combined"} <= set(s["pep"]) and isinstance(s["pep"]["base"], dict)
    if s["spectrum"] is not None:
        assert s["spectrum"]["k"] == est.n_clusters and len(s["spectrum"]["values"]) >= 1


def check_parameters_checked_by_the_base(cls, views, new=None):
    """A bad parameter is refused by every fit entry point, and a fit checks the parameters
    exactly once: the base class does it (mkdist._methods._base._fit_context), so no method
    calls the check itself (the toy method's fit never mentions it)."""
    X = method_views(cls, views)
    for bad in ({"n_clusters": 0}, {"random_state": "seed"}):
        with pytest.raises(mkdist.errors.InputValidationError, match=next(iter(bad))):
            make_instance(cls, **bad).fit(X)
    est = make_instance(cls)
    calls = []
    check = est._check_params
    est._check_params = lambda *args: calls.append(args[0]) or check(*args)
    _quiet(est.fit, X)
    assert calls == [len(views[0])]
    if cls.stage_plan == LANDMARK_EMBEDDING:  # the pipeline's stages call the hooks one by one
        named = as_views(X)
        idx = np.arange(0, len(views[0]), 3)
        with pytest.raises(mkdist.errors.InputValidationError, match="n_clusters"):
            make_instance(cls, n_clusters=0).sample_landmarks(named, 0)
        with pytest.raises(mkdist.errors.InputValidationError, match="n_clusters"):
            make_instance(cls, n_clusters=0).fit_landmarks(gather_rows(named, idx), idx, 0)


def check_nan_named_by_its_input_row(cls, views, new=None):
    """NaN in Dask input is refused naming its row of the input, wherever the fit meets it: in the
    rows it gathers first (landmarks, anchors, an init sample: NaN there would spoil the model
    before any pass reads the chunks) or in a pass over the chunks.  Where the method has
    landmarks (100 of the 180 rows here), the row is one whose place among them is not its row."""
    X = method_views(cls, views)
    extra = {"n_landmarks": 100} if "n_landmarks" in cls().get_params() else {}
    sampled = getattr(_quiet(make_instance(cls, **extra).fit, X), "landmark_indices_", None)
    row = 77 if sampled is None else int(sampled[-1])
    assert sampled is None or row != len(sampled) - 1
    Xs = list(X) if cls.multi_view else [X]
    bad = Xs[-1].copy()
    bad[row, 1] = np.nan
    dX = [da.from_array(v, chunks=(50, -1)) for v in [*Xs[:-1], bad]]
    with dask.config.set(scheduler="synchronous"), pytest.raises(
            mkdist.errors.InputValidationError, match=rf"view 'view{len(Xs) - 1}'.*first bad row {row}\b"):
        _quiet(make_instance(cls, **extra).fit, dX if cls.multi_view else dX[0])


def check_store_round_trip(cls, views, y, tmp_path):
    """A run through the store: labels as the stored estimator predicts them, assign likewise."""
    X = method_views(cls, views)
    dX = [da.from_array(v, chunks=(60, -1)) for v in (X if cls.multi_view else [X])]
    url = str(tmp_path / f"{cls.method}.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateKernelWarning)
        warnings.simplefilter("ignore", EmbeddingStabilityWarning)
        res = mkdist.cluster(dX, url, 3, random_state=0, method=cls.method, y_true=y)
    labels = res.labels.compute()
    assert res.metrics["method"] == cls.method and sum(res.metrics["cluster_sizes"]) == len(y)
    assert res.skipped == [] and set(cls.stage_plan) <= set(res.store.stage_status())
    est = mkdist.load_estimator(url)
    np.testing.assert_array_equal(est.predict(X), labels)
    out = mkdist.assign(url, dX, str(tmp_path / f"{cls.method}-assigned.zarr"))
    np.testing.assert_array_equal(out.read_stage("labels")["labels"].values, labels)
    again = mkdist.cluster(dX, url, 3, random_state=0, method=cls.method)
    assert again.skipped == list(cls.stage_plan)
    # The run report: one self-contained page, figures inline, read from a sample of the store.
    page = Path(mkdist.pipeline.write_report(url)).read_text()
    # Cluster sizes and the embedding always; PEP and weights figures when the method records
    # them (a method without them gets a sentence saying so instead of a figure).
    has_pep = bool(res.metrics.get("pep"))
    assert page.count('src="data:image/png;base64,') >= (3 if has_pep else 2)
    assert has_pep or "records no principal eigenvalue proportions" in page
    assert "<script" not in page and "https://" not in page


def _expected_failed(est) -> dict:
    lows = [c.low for c in collect_constraints(type(est), "_param_constraints")["n_clusters"] if hasattr(c, "low")]
    if lows and min(lows) >= 2:
        return {name: "sets n_clusters=1, which this estimator rejects by design (a one-cluster spectral "
                      "embedding is a constant: there is nothing to cluster)"
                for name in ("check_dont_overwrite_parameters", "check_methods_subset_invariance",
                             "check_fit2d_predict1d", "check_fit2d_1feature")}
    return {}


# ----------------------------------------------------------------------------- over the registry
@parametrize_with_checks([make_instance(get_method(m), n_clusters=2) for m in METHODS],
                         expected_failed_checks=_expected_failed)
def test_sklearn_compatible(estimator, check):
    _quiet(check, estimator)


#: The in-memory checks every registered method passes (the toy method reuses them).
CHECKS = {"numpy_dask_parity": check_numpy_dask_parity, "graph_building_computes_nothing": check_graph_is_lazy,
          "state_round_trip": check_state_round_trip, "summary_schema": check_summary_schema,
          "parameters_checked_by_the_base": check_parameters_checked_by_the_base,
          "nan_named_by_its_input_row": check_nan_named_by_its_input_row}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("method", METHODS)
def test_common_check(method, check, data):
    views, _, new = data
    CHECKS[check](get_method(method), views, new)


@pytest.mark.parametrize("method", METHODS)
def test_store_round_trip(method, data, dask_client, tmp_path):
    views, y, _ = data
    check_store_round_trip(get_method(method), views, y, tmp_path)


def test_every_parameter_has_a_constraint():
    for m in METHODS:
        cls = get_method(m)
        assert set(cls().get_params()) == set(collect_constraints(cls, "_param_constraints")), m


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(mkdist.errors.InputValidationError, match=r"unknown method 'spectral'; choose one of \["):
        get_method("spectral")


def test_readme_method_table_is_the_registry():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert method_table_markdown() in readme, "regenerate the README table with `mkdist methods --markdown`"
