"""deploy/prefect.yaml, deployed and run as written, on one host, as deploy/README.md says.

Real processes only: a Prefect server (the session's, `prefect_api`: a uvicorn process serving
the Prefect API, as `prefect server start` does; a second server cost the suite ~40 s), a `dask
scheduler` with two `dask worker`s, a `process` work pool, `prefect deploy --all` of the
unedited file (its own PREFECT_HOME), and a `prefect worker` that runs the flow runs as
subprocesses.  The refit a drifted nightly batch starts is tested against a real server in
tests/test_flows.py (`test_drift_starts_a_refit_of_the_model`: the run created from the
deployment, its parameters, and those parameters run).  The one
thing set for the test is the data root, MKDIST_DATA_ROOT, in the worker's environment (a
temporary directory holding small demo data).  Every process is stopped at the end, also
when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import _free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PREFECT = [sys.executable, "-m", "prefect"]
#: What is tested is the deployment and the processes, not the scale: 6k points fit (20k made
#: the cluster run's compute most of this module's time; one input chunk either way), a
#: nightly batch of 3k.
N_FIT, N_BATCH = 6_000, 3_000
#: Parameters of the on-demand run (the deployment's demo defaults cluster 200k points with
#: 1000 landmarks: minutes on a loaded 2-core machine).
CLUSTER_PARAMS = {"plan": json.dumps({
    "source": {"location": f"demo/input-{N_FIT}.zarr", "label_column": "y"}, "store": "runs/demo-cluster.zarr",
    "config": {"n_clusters": 10, "random_state": 0,
               "params": {"kernels": "rbf-grid", "n_landmarks": 300, "landmark_method": "uniform", "n_init": 1}}})}


def _wait_for(what: str, check, timeout: float, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: {p.args[:4]} exited with {p.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, newest first, then SIGKILL what is left (flow-run
    subprocesses of the worker are in its group)."""
    for p in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for p in reversed(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


class Stack:
    """The running processes and how to talk to them."""

    def __init__(self, tmp: Path, api: str):
        self.tmp = tmp
        self.data_root = tmp / "data"
        self.logs = tmp / "logs"
        self.procs: list[subprocess.Popen] = []
        self.api = api
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env.update(PREFECT_HOME=str(tmp / "prefect-home"), PREFECT_API_URL=self.api,
                        PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1", OMP_NUM_THREADS="1",
                        # The worker asks for runs every second instead of every 10 s.
                        PREFECT_WORKER_QUERY_SECONDS="1")

    def start(self, name: str, args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        p = subprocess.Popen(args, env=env or self.env, cwd=cwd or self.tmp, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def cli(self, *args: str, timeout: float = 180) -> str:
        r = subprocess.run([*PREFECT, "--no-prompt", *args], env=self.env, cwd=ROOT, capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, f"prefect {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def client(self):
        from prefect.client.orchestration import SyncPrefectClient

        return SyncPrefectClient(self.api)

    def run_deployment(self, name: str, **parameters: str) -> str:
        """`prefect deployment run` (the documented way); returns the flow run id."""
        args = [f"-p{k}={v}" for k, v in parameters.items()]
        out = self.cli("deployment", "run", name, *args)
        match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
        assert match, out
        return match.group(1)

    def wait_final(self, flow_run_id, timeout: float = 240):
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while True:
                run = client.read_flow_run(flow_run_id)
                if run.state is not None and run.state.is_final():
                    return run
                if time.monotonic() > deadline:
                    raise TimeoutError(f"flow run {run.name} still {run.state.name if run.state else None} after "
                                       f"{timeout:.0f} s; worker log:\n{self.log('prefect-worker')[-4000:]}")
                time.sleep(1)

    def logs_of(self, flow_run_id) -> str:
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

        with self.client() as client:
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        return "\n".join(entry.message for entry in logs)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, prefect_api):
    from mkdist._run._demo import write_demo_input

    tmp = tmp_path_factory.mktemp("e2e")
    s = Stack(tmp, prefect_api)
    s.data_root.mkdir()
    s.logs.mkdir()
    try:
        dask_port = _free_port()
        dask_address = f"tcp://127.0.0.1:{dask_port}"
        scheduler = s.start("dask-scheduler", [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                                               "--port", str(dask_port), "--dashboard-address", "127.0.0.1:0"])
        workers = [s.start(f"dask-worker-{i}", [sys.executable, "-m", "dask", "worker", dask_address, "--nthreads",
                                                "1", "--memory-limit", "3GiB", "--host", "127.0.0.1",
                                                "--no-dashboard", "--name", f"w{i}"]) for i in (1, 2)]
        # Input data under the data root (while the server starts): the on-demand run's input,
        # and the nightly batch where the deployment reads it (same distribution: no drift).
        write_demo_input(s.data_root / "demo" / f"input-{N_FIT}.zarr", N_FIT)
        write_demo_input(s.data_root / "incoming" / "latest.zarr", N_BATCH)
        from distributed import Client

        with Client(dask_address, timeout=60) as c:
            c.wait_for_workers(2, timeout=90)
        assert not any(p.poll() is not None for p in [scheduler, *workers])
        s.cli("work-pool", "create", "mkdist", "--type", "process")
        # The file as it is in the repository, from the repository root (README, B).
        s.cli("deploy", "--all", "--prefect-file", "deploy/prefect.yaml")
        # The worker: the only place the data root and the Dask cluster are named.
        worker_env = {**s.env, "MKDIST_DATA_ROOT": str(s.data_root), "MKDIST_DASK_ADDRESS": dask_address}
        worker = s.start("prefect-worker", [*PREFECT, "worker", "start", "--pool", "mkdist", "--type", "process",
                                            "--name", "e2e-worker"], env=worker_env)
        _wait_for("prefect worker", lambda: "started" in s.log("prefect-worker"), 90, [worker])
        s.dask_address = dask_address
        yield s
    finally:
        _stop(s.procs)


def test_deployments_created_as_written(stack):
    with stack.client() as client:
        cluster = client.read_deployment_by_name("mkdist-cluster/cluster-on-demand")
        nightly = client.read_deployment_by_name("mkdist-assign/assign-nightly")
    assert cluster.work_pool_name == nightly.work_pool_name == "mkdist"
    assert [s.schedule.cron for s in nightly.schedules] == ["0 2 * * *"]
    assert cluster.pull_steps == nightly.pull_steps == [{"mkdist.flows.steps.enter_data_root": {}}]
    assert nightly.parameters["refit_on_drift"] is True and nightly.parameters["lease_wait"] == 3600


def test_cluster_then_nightly_assign_complete(stack):
    from mkdist.storage import RunStore

    t0 = time.monotonic()
    run = stack.wait_final(stack.run_deployment("mkdist-cluster/cluster-on-demand", **CLUSTER_PARAMS))
    t_cluster = time.monotonic() - t0
    assert run.state.is_completed(), (run.state, stack.logs_of(run.id)[-3000:])
    model = RunStore.open(stack.data_root / "runs" / "demo-cluster.zarr")
    assert all(model.stage_status()[s] == "complete" for s in ("landmarks", "model", "embedding", "labels", "metrics"))
    assert model.attrs["input"]["n_rows"] == N_FIT
    logs = stack.logs_of(run.id)
    # No bokeh on this scheduler: no link that would show "needs bokeh".
    assert "Dask dashboard: not served" in logs and "/status" not in logs

    t0 = time.monotonic()
    run = stack.wait_final(stack.run_deployment("mkdist-assign/assign-nightly"))
    t_assign = time.monotonic() - t0
    assert run.state.is_completed(), (run.state, stack.logs_of(run.id)[-3000:])
    out = RunStore.open(stack.data_root / "labels" / "latest.zarr")
    assert out.stage_status()["labels"] == "complete"
    labels = out.read_stage("labels")["labels"].values
    assert labels.shape == (N_BATCH,) and labels.min() >= 0 and labels.max() < 10
    assert not out.attrs["drift"]["drifted"]
    import pyarrow.parquet as pq

    table = pq.read_table(stack.data_root / "labels" / "latest.parquet")
    assert table.num_rows == N_BATCH and "row" in table.column_names
    print(f"\ncluster run {t_cluster:.0f} s, nightly assign {t_assign:.0f} s")
