"""Row tasks keep their large temporaries on the heap on any Dask cluster, with nothing to set."""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest

import mkdist
from mkdist._core._worker_env import (
    _explicit_mmap_threshold,
    _temporary_reused,
    _worker_malloc_state,
    check_worker_malloc,
    tune_malloc,
)

from .conftest import make_blobs_views


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _heap_returns_memory(nbytes: int = 256 << 20, block: int = 4 << 20) -> tuple[int, int]:
    """(RSS grown while ``nbytes`` of 4 MiB heap blocks are held, RSS still held after freeing them)."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    before = _rss_bytes()
    ptrs = [libc.malloc(block) for _ in range(nbytes // block)]
    for p in ptrs:
        libc.memset(p, 1, block)
    held = _rss_bytes() - before
    for p in ptrs[::-1]:
        libc.free(p)
    return held, _rss_bytes() - before


@pytest.fixture(scope="module")
def fitted():
    views, _ = make_blobs_views(n_per_cluster=100)
    return mkdist.MultipleKernelClustering(3, kernels="rbf-grid", n_landmarks=60, random_state=0).fit(views), views


def _run_row_tasks(client, fitted) -> None:
    """A real mkdist row pass on the cluster: ``transform`` of Dask views with a fitted MKC."""
    import dask.array as da

    est, views = fitted
    H = est.transform([da.from_array(v, chunks=(100, -1)) for v in views])
    np.asarray(client.compute(H).result())


@contextlib.contextmanager
def _fresh_workers(kind: str, request):
    """A client whose worker processes have run no mkdist task yet.

    ``dask_address``: the session's `dask scheduler` + `dask worker` processes, restarted (every
    client of that cluster closes after its test, so the restart has no keys to keep).
    ``local``: a plain ``LocalCluster`` of its own; restarting the session's shared LocalCluster
    fails whenever another test's fixture still holds a future on it (``assert not self.tasks``).
    """
    from distributed import Client, LocalCluster

    if kind == "dask_address":
        with Client(request.getfixturevalue("dask_address")) as client:
            client.restart()
            yield client
    else:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            yield client


@pytest.mark.parametrize("cluster", ["dask_address", "local"])
@pytest.mark.slow
def test_row_tasks_keep_temporaries_on_a_default_cluster(cluster, request, fitted):
    # `dask scheduler` + `dask worker` processes, and a plain LocalCluster from Python: both
    # start their workers with the nanny's MALLOC_TRIM_THRESHOLD_ and nothing else.
    with _fresh_workers(cluster, request) as client:
        # Distributed's default: a freed 4 MiB block is unmapped and the next one mapped afresh.
        assert not any(client.run(_temporary_reused).values())
        _run_row_tasks(client, fitted)
        assert all(client.run(_temporary_reused).values())
        # ... and the heap still goes back to the OS once more than the trim threshold is free.
        for held, kept in client.run(_heap_returns_memory).values():
            assert held > 200 << 20 and kept < 80 << 20


@pytest.mark.skipif(not sys.platform.startswith("linux") or _explicit_mmap_threshold() is not None,
                    reason="glibc thresholds are set on Linux unless the environment names one")
def test_tune_malloc_sets_glibc_thresholds_once():
    assert tune_malloc() == "set"
    assert tune_malloc() == "set"
    assert _temporary_reused()


def test_no_advice_on_a_default_cluster(dask_client):
    assert check_worker_malloc(dask_client) is None
    assert {s["status"] for s in dask_client.run(_worker_malloc_state).values()} == {"set"}


@pytest.mark.slow
def test_an_explicit_mmap_threshold_is_left_alone_and_named(fitted):
    # An operator's MALLOC_MMAP_THRESHOLD_ is kept; at the glibc default of 128 KiB (with the
    # nanny's trim threshold) the workers stay slow, which only their environment can change.
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": "131072"}), \
            LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        _run_row_tasks(client, fitted)
        assert list(client.run(_temporary_reused).values()) == [False]
        advice = check_worker_malloc(client)
    assert advice is not None and "1 of 1 Dask workers" in advice
    assert "explicit MALLOC_MMAP_THRESHOLD_=131072" in advice and "MALLOC_TRIM_THRESHOLD_=67108864" in advice
