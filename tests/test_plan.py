"""A run is checked and decided once (``plan_run``), and its plan travels as JSON.

Real parts: .npz inputs on disk, real Zarr run stores, the real command line (in this
process, so that calls can be counted) computing on this process's threads."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import mkdist
from mkdist.errors import InputValidationError
from mkdist.pipeline import AssignRequest, InputSource, RunConfig, RunPlan, RunRequest, check_request, plan_run

from .conftest import make_blobs_views, write_blobs_npz


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "train.npz"
    write_blobs_npz(path, n_per_cluster=100, seed=3)
    return str(path)


@pytest.fixture
def counted(monkeypatch):
    """Counts of the calls that check a run's input, on the real functions (wrapped, not replaced)."""
    calls = {"validate": 0, "open": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(RunConfig, "validate", counting("validate", RunConfig.validate))
    monkeypatch.setattr(InputSource, "open", counting("open", InputSource.open))
    return calls


def test_the_plan_json_round_trips_and_rebuilds_without_deciding_again(npz, tmp_path):
    store = str(tmp_path / "run.zarr")
    config = RunConfig.from_options(n_clusters=3, method="auto", n_landmarks=60)
    plan = plan_run(InputSource(npz, label_column="y"), store, config, labels_out=str(tmp_path / "l.parquet"))
    # Decided in the plan, not written back into the config given.
    assert config.method == "auto" and config.random_state is None
    assert plan.config.method != "auto" and isinstance(plan.config.random_state, int)
    assert plan.request.config is config and plan.labels_action == "write"
    data = plan.to_json()
    assert json.loads(json.dumps(data)) == data
    again = RunPlan.from_json(json.dumps(data))  # the JSON text too (a deployment may hand it so)
    assert again.to_json() == data
    assert again.config == plan.config and again.fingerprint == plan.fingerprint
    assert again.request.key == plan.request.key and again.source == plan.source
    assert list(again.views) == list(plan.views)
    # Without ``resolved`` it is a request: planned now, with a seed of its own.
    request = {k: v for k, v in data.items() if k != "resolved"}
    fresh = RunPlan.from_json(request)
    assert fresh.config.method == plan.config.method and fresh.request.key == plan.request.key
    assert RunRequest.from_json(request).to_json() == request
    # A plan whose input changed since it was made is refused, not run on other rows.
    moved = dict(data, resolved=dict(data["resolved"], input="sha256:another"))
    with pytest.raises(InputValidationError, match="changed since this run was planned"):
        RunPlan.from_json(moved)
    with pytest.raises(InputValidationError, match="a run config has no"):
        RunPlan.from_json(dict(request, config={"n_clusters": 3, "n_landmarks": 60}))
    # Immutable: a plan and its configs are values.
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.config.random_state = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.complete = True


def test_in_memory_input_has_no_json(tmp_path):
    views, _ = make_blobs_views(n_per_cluster=20, n_clusters=3)
    request = check_request(views, str(tmp_path / "run.zarr"), RunConfig(n_clusters=3))
    with pytest.raises(InputValidationError, match="in-memory data"):
        request.to_json()


def test_the_assign_request_json_round_trips_and_names_what_is_wrong(tmp_path):
    batch = InputSource(str(tmp_path / "batch.parquet"), id_column="customer_id", missing="impute")
    asked = AssignRequest("runs/model.zarr", batch, "labels/out.zarr", labels_out="labels/out.parquet",
                          overwrite=True, drift_thresholds={"mean_shift": 0.5})
    data = json.loads(json.dumps(asked.to_json()))  # what a flow parameter stores
    again = AssignRequest.from_json(data)
    assert again == asked and again.to_json() == data
    assert again.source.id_column == "customer_id" and again.source.missing == "impute"
    # A deployment's hand-written request: a location for the source, the defaults for the rest.
    short = AssignRequest.from_json({"model_store": "m.zarr", "source": "b.zarr", "output": "o.zarr"})
    assert short.source == InputSource("b.zarr") and short.report and not short.overwrite
    with pytest.raises(InputValidationError, match=r"\['outptu'\] unknown"):
        AssignRequest.from_json({"model_store": "m.zarr", "source": "b.zarr", "outptu": "o.zarr"})
    with pytest.raises(InputValidationError, match="drift_thresholds"):
        AssignRequest.from_json({"model_store": "m.zarr", "source": "b.zarr", "output": "o.zarr",
                                 "drift_thresholds": 0.5})


@pytest.mark.slow
def test_a_run_validates_its_input_once(npz, tmp_path, counted, monkeypatch):
    # mkdist.cluster: planned once, driven; the stages check nothing again.
    result = mkdist.cluster(npz, str(tmp_path / "py.zarr"), 3, n_landmarks=60, random_state=0, label_column="y")
    assert result.metrics["scores"]["acc"] >= 0.99
    assert counted == {"validate": 1, "open": 1}
    # The same run again (resumed: every stage stored) is planned once too.
    counted.update(validate=0, open=0)
    again = mkdist.cluster(npz, str(tmp_path / "py.zarr"), 3, n_landmarks=60, random_state=0, label_column="y")
    assert again.skipped == ["landmarks", "model", "embedding", "labels"]
    assert counted == {"validate": 1, "open": 1}

    # The command line, in this process (it installs no Ctrl-C handler here: pytest's stays).
    from click.testing import CliRunner

    from mkdist import cli

    for key in ("PREFECT_API_URL", "MKDIST_DASK_ADDRESS"):
        monkeypatch.delenv(key, raising=False)
    saved = dict(os.environ)
    counted.update(validate=0, open=0)
    try:
        r = CliRunner().invoke(cli.main, ["run", "--input", npz, "--store", str(tmp_path / "cli.zarr"),
                                          "--n-clusters", "3", "--n-landmarks", "60", "--random-state", "0",
                                          "--label-key", "y", "--quiet", "--no-prefect"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert r.exit_code == 0, r.output
    assert "ACC 1.0000" in r.output or "ACC 0.99" in r.output
    assert counted == {"validate": 1, "open": 1}
    # `mkdist assign` checks the batch before any work and hands the check on (no second open).
    counted.update(validate=0, open=0)
    try:
        r = CliRunner().invoke(cli.main, ["assign", "--model-store", str(tmp_path / "cli.zarr"), "--input", npz,
                                          "--output", str(tmp_path / "a.zarr"), "--quiet", "--no-prefect"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert r.exit_code == 0, r.output
    assert "assigned 300 rows" in r.output and counted["open"] == 1
