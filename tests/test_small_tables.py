"""Small tables compute in the run's own process (issue 33, item 4): the same labels as on a
cluster, and the run says where it computed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dask
import numpy as np
import pytest

import mkdist
from mkdist.storage import RunStore

from .conftest import make_blobs_views

VIEWS = ["--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id"]


def _cli(*args, env_extra=None):
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **(env_extra or {})}
    env.pop("PREFECT_API_URL", None)
    env.pop("MKDIST_DASK_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _labels(store) -> np.ndarray:
    return RunStore.open(str(store)).read_stage("labels")["labels"].values


#: mkdist.cluster in a fresh interpreter, where no distributed client exists (in this one the
#: session's client, once a test has started it, is the default and mkdist.cluster uses it).
_CLUSTER_ALONE = """
import json, sys, mkdist
r = mkdist.cluster(sys.argv[1], sys.argv[2], 3, n_landmarks=120, random_state=0, chunk_rows=100)
print(json.dumps(r.metrics["scheduler"]))
"""


def test_in_process_and_cluster_runs_of_one_seed_give_identical_labels(dask_client, tmp_path):
    views, _ = make_blobs_views(n_per_cluster=150, n_clusters=3, seed=4, dtype=np.float32)
    data = tmp_path / "blobs.npz"
    np.savez(data, a=views[0], b=views[1])
    # Several row chunks (chunk_rows=100): the k-means passes reduce partial sums across them.
    on_cluster = mkdist.cluster(str(data), str(tmp_path / "cluster.zarr"), 3, n_landmarks=120, random_state=0,
                                chunk_rows=100)
    alone = subprocess.run([sys.executable, "-c", _CLUSTER_ALONE, str(data), str(tmp_path / "here.zarr")],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    here = json.loads(alone.stdout.strip().splitlines()[-1])
    assert on_cluster.metrics["scheduler"]["kind"] == "local-cluster"
    assert on_cluster.metrics["scheduler"]["workers"] == 2
    assert here["kind"] == "in-process" and here["description"].startswith("in-process (")
    # Recorded with the run, not only returned.
    assert RunStore.open(str(tmp_path / "here.zarr")).attrs["summary"]["scheduler"] == here
    np.testing.assert_array_equal(_labels(tmp_path / "here.zarr"), _labels(tmp_path / "cluster.zarr"))


def test_a_scheduler_set_by_the_caller_is_kept(tmp_path):
    views, _ = make_blobs_views(n_per_cluster=40, n_clusters=3, seed=1)
    with dask.config.set(scheduler="synchronous"):
        result = mkdist.cluster(views, str(tmp_path / "s.zarr"), 3, n_landmarks=60, random_state=0)
    assert result.metrics["scheduler"]["description"] == "in-process (1 thread)"


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    from mkdist.datasets import write_customer_table

    path = tmp_path_factory.mktemp("small") / "customers.parquet"
    write_customer_table(path, 600, n_clusters=3)
    return path


@pytest.mark.slow
def test_the_cli_says_where_it_computes_and_both_ways_agree(small_table, tmp_path):
    args = ["run", "--input", str(small_table), "--n-clusters", "3", *VIEWS, "--random-state", "0",
            "--n-landmarks", "200", "--json"]
    here = _cli(*args, "--store", str(tmp_path / "here.zarr"))
    assert here.returncode == 0, here.stderr
    assert ("computing on: in-process (" in here.stderr
            and "600 rows, at most 1,000,000 (MKDIST_IN_PROCESS_MAX_ROWS), so no Dask cluster to start" in here.stderr)
    assert "starting a local Dask cluster" not in here.stderr
    assert json.loads(here.stdout)["scheduler"]["kind"] == "in-process"
    # Above the threshold: a LocalCluster, announced before it starts.
    big = _cli(*args, "--store", str(tmp_path / "cluster.zarr"), env_extra={"MKDIST_IN_PROCESS_MAX_ROWS": "500"})
    assert big.returncode == 0, big.stderr
    assert "starting a local Dask cluster (2 workers)" in big.stderr and "in-process" not in big.stderr
    assert json.loads(big.stdout)["scheduler"] == {"kind": "local-cluster", "workers": 2,
                                                   "address": json.loads(big.stdout)["scheduler"]["address"],
                                                   "description": "local Dask cluster (2 workers)"}
    np.testing.assert_array_equal(_labels(tmp_path / "here.zarr"), _labels(tmp_path / "cluster.zarr"))
    # `assign` decides the same way from its batch's rows.
    assigned = _cli("assign", "--model-store", str(tmp_path / "here.zarr"), "--input", str(small_table), "--output",
                    str(tmp_path / "assigned.zarr"))
    assert assigned.returncode == 0, assigned.stderr
    assert "computing on: in-process (" in assigned.stderr and "assigned 600 rows" in assigned.stdout
    np.testing.assert_array_equal(_labels(tmp_path / "assigned.zarr"), _labels(tmp_path / "here.zarr"))
    # A threshold that is not a number is refused, naming the variable.
    bad = _cli(*args, "--store", str(tmp_path / "bad.zarr"), env_extra={"MKDIST_IN_PROCESS_MAX_ROWS": "lots"})
    assert bad.returncode == 2 and "MKDIST_IN_PROCESS_MAX_ROWS='lots' must be an integer" in bad.stderr, bad.stderr
