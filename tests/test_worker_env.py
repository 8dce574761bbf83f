"""Worker processes get malloc settings that keep row-task temporaries off mmap."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from mkdist._worker_env import WORKER_MALLOC_ENVIRON, _malloc_environ, check_worker_malloc
from mkdist.flows._runtime import dask_client as run_client

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def test_a_cluster_with_distributed_defaults_gets_the_advice(dask_client):
    # The session cluster is a plain LocalCluster: the nanny's MALLOC_TRIM_THRESHOLD_ only.
    advice = check_worker_malloc(dask_client)
    assert advice is not None and "2 of 2 Dask workers" in advice and "MALLOC_MMAP_THRESHOLD_" in advice


def test_the_run_cluster_starts_workers_with_the_settings():
    before = dict(os.environ)
    with run_client(n_workers=1) as client:
        envs = client.run(_malloc_environ)
        assert list(envs.values()) == [WORKER_MALLOC_ENVIRON]
        assert check_worker_malloc(client) is None
    # This process's environment is as it was (glibc read it at start; nothing else should see it).
    assert {k: os.environ.get(k) for k in WORKER_MALLOC_ENVIRON} == {k: before.get(k) for k in WORKER_MALLOC_ENVIRON}


def test_the_deploy_config_sets_the_same_values():
    cfg = yaml.safe_load((DEPLOY / "dask-workers.yaml").read_text())
    env = {k: str(v) for k, v in cfg["distributed"]["nanny"]["pre-spawn-environ"].items()}
    assert env == WORKER_MALLOC_ENVIRON
    assert "COPY deploy/dask-workers.yaml /usr/local/etc/dask/" in (DEPLOY / "Dockerfile").read_text()
