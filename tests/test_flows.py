"""Prefect flows and the CLI with real components: a `dask scheduler` and two `dask worker`
processes on 127.0.0.1, the real Prefect engine (one temporary server for the session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mkdist._methods._base as base
from mkdist import load_estimator
from mkdist.metrics import clustering_accuracy
from mkdist.storage import RunStore

from .conftest import make_blobs_views, write_blobs_npz

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.npz"
    views, y = write_blobs_npz(path, n_per_cluster=300, seed=5)
    return str(path), views, y


def _plan(path: str, store: str, n_clusters: int = 3, *, label: str | None = None, random_state: int = 0,
          method: str = "mkc", **params) -> dict:
    """A run's plan as a flow takes it: the request's JSON (the flow plans it once)."""
    source = {"location": path, **({"label_column": label} if label else {})}
    return {"source": source, "store": store,
            "config": {"n_clusters": n_clusters, "method": method, "random_state": random_state,
                       "params": {"n_landmarks": 150, **params}}}


@pytest.fixture(scope="module")
def fitted(prefect_api, dask_address, source, tmp_path_factory):
    """One cluster_flow run whose model store the assign tests read (they only read it)."""
    from mkdist.flows import cluster_flow

    path, _, _ = source
    store = str(tmp_path_factory.mktemp("fitted") / "run.zarr")
    summary = cluster_flow(plan=_plan(path, store, label="y"), dask_address=dask_address)
    return store, summary


def test_cluster_flow_on_dask_processes(fitted, source):
    store, summary = fitted
    _, _, y = source
    assert summary["scores"]["acc"] >= 0.99
    assert sum(summary["cluster_sizes"]) == 900
    status = RunStore.open(store).stage_status()
    assert all(status[s] == "complete" for s in ("landmarks", "model", "embedding", "labels", "metrics"))
    labels = RunStore.open(store).read_stage("labels")["labels"].values
    assert clustering_accuracy(y, labels) >= 0.99


def test_failed_kmeans_resumes_without_refit(prefect_api, dask_address, source, tmp_path, monkeypatch):
    from mkdist.flows import cluster_flow

    path, _, y = source
    store = str(tmp_path / "run.zarr")
    real_kmeans = base.kmeans
    calls = {"n": 0}

    def kmeans_failing_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("k-means stage lost its cluster")
        return real_kmeans(*args, **kwargs)

    monkeypatch.setattr(base, "kmeans", kmeans_failing_once)
    with pytest.raises(RuntimeError, match="lost its cluster"):
        cluster_flow(plan=_plan(path, store), dask_address=dask_address)
    status = RunStore.open(store).stage_status()
    assert status["embedding"] == "complete" and status["labels"] == "missing"
    fitted = RunStore.open(store).read_stage("model").attrs["mkdist_state"]
    summary = cluster_flow(plan=_plan(path, store, label="y"), dask_address=dask_address)
    assert summary["resumed_stages"] == ["landmarks", "model", "embedding"]
    t = summary["timings"]
    assert t["sample_s"] == t["fit_s"] == t["embed_s"] == 0.0 and t["kmeans_s"] > 0
    assert RunStore.open(store).read_stage("model").attrs["mkdist_state"] == fitted
    assert summary["scores"]["acc"] >= 0.99


def test_assign_flow_matches_model_predict(prefect_api, dask_address, fitted, tmp_path):
    from mkdist.flows import assign_flow

    store, _ = fitted
    new, _ = make_blobs_views(n_per_cluster=40, n_clusters=3, seed=5, dtype=np.float32)
    new_path = str(tmp_path / "new.npz")
    np.savez(new_path, a=new[0], b=new[1])
    out = str(tmp_path / "assigned.zarr")
    summary = assign_flow(request={"model_store": store, "source": new_path, "output": out}, dask_address=dask_address)
    assert summary["N"] == 120
    got = RunStore.open(out).read_stage("labels")["labels"].values
    np.testing.assert_array_equal(got, load_estimator(store).predict({"a": new[0], "b": new[1]}))


def _cli(*args, api=None, timeout=300):
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if api:
        env["PREFECT_API_URL"] = api
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_cli_run_inspect_assign_and_exit_codes(prefect_api, dask_address, source, tmp_path):
    from mkdist.pipeline import inspect_markdown, inspect_store

    path, _, _ = source
    store = str(tmp_path / "cli.zarr")
    # The run takes the CLI's default path (no server configured; the flow path of `run` is
    # tests/test_front_door.py::test_prefect_flow_path_when_a_server_is_configured), `assign`
    # the flow path through the server.
    r = _cli("run", "--input", path, "--store", store, "--n-clusters", "3", "--n-landmarks", "120",
             "--random-state", "0", "--dask-address", dask_address, "--label-key", "y", "--quiet", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert summary["scores"]["acc"] >= 0.99
    r = _cli("inspect", store, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["stages"]["labels"] == "complete" and info["model"]["has_centroids"]
    # The text form (the CLI prints inspect_markdown of that dict; its text output is checked
    # through the CLI in tests/test_n_clusters_auto.py and tests/test_robustness.py).
    assert "kernel weights" in inspect_markdown(inspect_store(store))
    r = _cli("assign", "--model-store", store, "--input", path, "--output", str(tmp_path / "a.zarr"),
             "--dask-address", dask_address, "--quiet", "--json", api=prefect_api)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout[r.stdout.index("{"):])["N"] == 900
    # Bad input -> exit code 2 with a message naming the problem, before any work.
    r = _cli("run", "--input", path, "--store", str(tmp_path / "bad.zarr"), "--n-clusters", "1",
             "--dask-address", dask_address, "--quiet", api=prefect_api)
    assert r.returncode == 2 and "--n-clusters 1: give K as an integer >= 2" in r.stderr
    cfg = tmp_path / "run.toml"
    cfg.write_text("n_clusters = 3\nbogus_option = 1\n")
    r = _cli("run", "--input", path, "--store", str(tmp_path / "bad2.zarr"), "--config", str(cfg),
             "--dask-address", dask_address, "--quiet", api=prefect_api)
    assert r.returncode == 2 and "does not take `bogus_option`" in r.stderr
    # A store holding another run is refused (exit 2), the stored run is untouched.
    r = _cli("run", "--input", path, "--store", store, "--n-clusters", "4", "--dask-address", dask_address,
             "--quiet", api=prefect_api)
    assert r.returncode == 2 and "different run" in r.stderr
    assert RunStore.open(store).stage_status()["labels"] == "complete"


def test_cluster_flow_other_method_publishes_pep_artifact(prefect_api, dask_address, source, tmp_path):
    """method="late-fusion" through the flow; its markdown artifact carries the PEP table."""
    from prefect.client.orchestration import get_client

    from mkdist.flows import cluster_flow

    path, views, y = source
    store = str(tmp_path / "lf.zarr")
    summary = cluster_flow(plan=_plan(path, store, label="y", kernels="rbf-grid", method="late-fusion"),
                           dask_address=dask_address)
    assert summary["scores"]["acc"] >= 0.99 and summary["method"] == "late-fusion"
    assert summary["pep"]["combined_filtered"] > 0
    with get_client(sync_client=True) as client:
        artifacts = client.read_latest_artifacts(limit=100)
    mine = [a for a in artifacts if store in (a.description or "")]
    assert mine, [(a.key, a.description) for a in artifacts]
    assert "Principal eigenvalue proportion" in mine[0].data and "after the graph filter" in mine[0].data


def test_assign_flow_waits_out_a_live_lease(prefect_api, dask_address, source, fitted, tmp_path):
    """lease_wait: a store another live process holds is tried again until it is free; without
    it the run fails at once with StoreLockedError."""
    import time

    from mkdist.errors import StoreLockedError
    from mkdist.flows import assign_flow

    path, _, _ = source
    store, _ = fitted
    out = tmp_path / "assigned.zarr"
    # Another process (a live run: same host, so not taken over) holds the output for 12 s.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom mkdist.storage import RunStore\n"
         f"with RunStore({str(out)!r}, mode='r+').lease(owner='other run'):\n"
         "    print('held', flush=True); time.sleep(12)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        # The holder lets go 12 s after it said "held" (less 1 s for the pipe's latency).
        released_at = time.monotonic() + 11
        with pytest.raises(StoreLockedError, match="other run"):
            assign_flow(request={"model_store": store, "source": path, "output": str(out)}, dask_address=dask_address)
        summary = assign_flow(request={"model_store": store, "source": path, "output": str(out)},
                              dask_address=dask_address, lease_wait=120)
        done = time.monotonic()
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert done >= released_at and summary["N"] == 900
    assert RunStore.open(out).stage_status()["labels"] == "complete"


def test_drift_starts_a_refit_of_the_model(prefect_api, dask_address, source, tmp_path):
    """refit_on_drift: a drifted batch creates a run of the cluster deployment that fits the
    model's method and parameters anew on the batch, into the model store; its parameters
    make that refit when run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    from mkdist.errors import DriftDetectedError
    from mkdist.flows import assign_flow, cluster_flow

    path, _, _ = source
    store = str(tmp_path / "model.zarr")
    cluster_flow(plan=_plan(path, store, n_init=2), dask_address=dask_address)
    before = RunStore.open(store).fingerprint
    # The deployment the refit runs, registered on this server (no worker: the run waits).
    deployment_id = cluster_flow.to_deployment(name="cluster-on-demand").apply()
    new, _ = make_blobs_views(n_per_cluster=100, n_clusters=3, seed=9, dtype=np.float32)
    batch = tmp_path / "drifted.npz"
    np.savez(batch, a=new[0] * 3 + 5, b=new[1] * 3 - 5)
    with pytest.raises(DriftDetectedError, match="Refit started"):
        assign_flow(request={"model_store": store, "source": str(batch), "output": str(tmp_path / "out.zarr")},
                    dask_address=dask_address, fail_on_drift=True, refit_on_drift=True)
    with get_client(sync_client=True) as client:
        runs = [r for r in client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=["refit"])))
                if r.deployment_id == deployment_id]
    assert len(runs) == 1 and runs[0].state.is_scheduled()
    params = runs[0].parameters
    plan = params["plan"]
    assert plan["source"]["location"] == str(batch) and plan["store"] == store and plan["overwrite"] is True
    assert plan["config"]["n_clusters"] == 3 and plan["config"]["random_state"] == 0
    assert "label_column" not in plan["source"] and plan["config"]["params"]["n_init"] == 2
    # Run what the worker would run: the model store now holds the batch's model.
    summary = cluster_flow(**params)
    model = RunStore.open(store)
    assert model.fingerprint != before and sum(summary["cluster_sizes"]) == 300
    assert model.attrs["input"]["location"] == str(batch)


def test_the_flow_plans_a_request_once_and_takes_a_plan_as_it_is(prefect_api, dask_address, source, tmp_path,
                                                                 monkeypatch):
    """A request (a deployment's parameters) is checked and planned once, in the flow; a plan
    made elsewhere (``mkdist run --prefect``) is rebuilt from its JSON, not checked again."""
    from mkdist.flows import cluster_flow
    from mkdist.pipeline import InputSource, RunConfig, plan_run

    path, _, _ = source
    calls = {"validate": 0}
    real = RunConfig.validate

    def counting(self, views):
        calls["validate"] += 1
        return real(self, views)

    monkeypatch.setattr(RunConfig, "validate", counting)
    summary = cluster_flow(plan=_plan(path, str(tmp_path / "a.zarr"), label="y"), dask_address=dask_address)
    assert summary["scores"]["acc"] >= 0.99 and calls["validate"] == 1
    calls["validate"] = 0
    plan = plan_run(InputSource(path, label_column="y"), str(tmp_path / "b.zarr"),
                    RunConfig.from_options(n_clusters=3, n_landmarks=150), report=False)
    summary = cluster_flow(plan=plan.to_json(), dask_address=dask_address)
    assert calls["validate"] == 1  # plan_run's, above
    # The seed the plan drew is the run's.
    assert summary["params"]["random_state"] == plan.config.random_state and "report" not in summary
