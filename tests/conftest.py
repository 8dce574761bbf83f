"""Shared fixtures: small multi-view data as NumPy and as Dask, and real data paths."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
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


def write_blobs_npz(path, n_per_cluster: int, n_clusters: int = 3, seed: int = 0, dtype=np.float32):
    """:func:`make_blobs_views` saved as an input file (views ``a`` and ``b``, labels ``y``); returns (views, y)."""
    views, y = make_blobs_views(n_per_cluster=n_per_cluster, n_clusters=n_clusters, seed=seed, dtype=dtype)
    np.savez(path, a=views[0], b=views[1], y=y)
    return views, y


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


@pytest.fixture(scope="session")
def dask_client():
    """A real Dask cluster for the session: a scheduler and two worker processes on 127.0.0.1."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster, Client(cluster) as client:
        yield client


class raise_if_dask_computes:
    """Fail if anything is computed inside the block (graph building must be lazy)."""

    def __enter__(self):
        import dask

        def scheduler(*args, **kwargs):
            raise AssertionError("a Dask computation ran while building the graph")

        self._ctx = dask.config.set(scheduler=scheduler)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


class CountingScheduler:
    """Synchronous Dask scheduler that counts the computes it runs."""

    def __init__(self):
        self.calls = 0

    def __call__(self, dsk, keys, **kwargs):
        import dask

        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    """Wait until the server ``proc`` accepts connections on 127.0.0.1:``port`` (the bench's
    twin, bench/_common.py, is not importable from the tests)."""
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


@contextlib.contextmanager
def dask_processes(n_workers: int, env: dict | None = None, worker_home=None):
    """`dask scheduler` + ``n_workers`` `dask worker` processes on 127.0.0.1 (one thread each);
    yields the scheduler address once it accepts connections (not waiting for the workers).

    ``env``: the processes' environment (default: this one), with ``OMP_NUM_THREADS=1``.
    ``worker_home(i)``: a directory for worker ``i``, then its cwd, its Dask local directory
    (``dask/``) and its TMPDIR (``tmp/``) - workers that share no local directory - and its
    stderr (``worker.log``), which otherwise goes nowhere.
    """
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1"}
    logs = contextlib.ExitStack()
    procs = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port",
                               str(port), "--no-dashboard"], env=env, stderr=subprocess.DEVNULL)]
    try:
        wait_for_port(port, procs[0], "dask scheduler")
        for i in range(n_workers):
            args = [sys.executable, "-m", "dask", "worker", address, "--nthreads", "1", "--no-dashboard",
                    "--memory-limit", "2GiB", "--host", "127.0.0.1"]
            worker_env, cwd, stderr = env, None, subprocess.DEVNULL
            if worker_home is not None:
                cwd = Path(worker_home(i))
                (cwd / "tmp").mkdir()
                args += ["--local-directory", str(cwd / "dask")]
                worker_env = {**env, "TMPDIR": str(cwd / "tmp")}
                stderr = logs.enter_context(open(cwd / "worker.log", "w"))
            procs.append(subprocess.Popen(args, env=worker_env, cwd=cwd, stderr=stderr))
        yield address
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        logs.close()


@pytest.fixture(scope="session")
def dask_address():
    """`dask scheduler` + two `dask worker` processes, as a data engineer would start them."""
    from distributed import Client

    with dask_processes(2) as address:
        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        yield address


@pytest.fixture(scope="session")
def prefect_api():
    """One temporary Prefect server for the whole session (it takes 20-40 s to start)."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


class UnreachableAfter:
    """An fsspec file system on this process's memory (``flaky://``) whose reads of chosen
    objects fail with a ConnectionError, as a dropped network would: ``fail(suffix, from_read=n)``
    makes the n-th read of each object whose path ends with ``suffix``, and every later one, fail.

    A real file system (fsspec's memory one) with one fault injected, not a mock: zarr, xarray and
    pyarrow read it through their ordinary fsspec paths."""

    def __init__(self):
        import fsspec
        from fsspec.implementations.memory import MemoryFileSystem

        rules: dict[str, int] = {}
        reads: dict[str, int] = {}

        class Flaky(MemoryFileSystem):
            protocol = ("flaky",)
            # its own objects, not the memory:// ones of other tests
            store: dict = {}
            pseudo_dirs = [""]

            @classmethod
            def _strip_protocol(cls, path):
                return MemoryFileSystem._strip_protocol("memory://" + str(path).removeprefix("flaky://"))

            def _check(self, path):
                p = self._strip_protocol(path)
                n = reads[p] = reads.get(p, 0) + 1
                for suffix, first in rules.items():
                    if p.endswith(suffix) and n >= first:
                        raise ConnectionError(f"connection reset by peer reading {p} (injected)")

            def cat_file(self, path, start=None, end=None, **kwargs):
                self._check(path)
                return super().cat_file(path, start, end, **kwargs)

            def _open(self, path, mode="rb", **kwargs):
                if "r" in mode:
                    self._check(path)
                return super()._open(path, mode, **kwargs)

        fsspec.register_implementation("flaky", Flaky, clobber=True)
        self.fs, self.rules, self.reads = Flaky(), rules, reads

    def fail(self, suffix: str, from_read: int = 1) -> None:
        self.rules[suffix] = from_read
        self.reads.clear()


@pytest.fixture
def unreachable():
    """A fresh :class:`UnreachableAfter` (``flaky://``) for one test."""
    flaky = UnreachableAfter()
    yield flaky
    flaky.rules.clear()
    flaky.fs.store.clear()


_HTTP_METHODS = {b"GET", b"PUT", b"POST", b"HEAD", b"DELETE"}


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of a local server (a moto S3 server): what a process
    that reaches its storage through it sees of the network.  ``close()`` cuts it -- the
    listening socket closed (new connections refused) and every open connection reset --
    ``open()`` puts it back on the same port.  ``fail_every``: one HTTP request in that many is
    not forwarded and its connection reset instead (a flaky network; the client retries it);
    ``requests`` and ``failed`` count them.  A request is a read from the client that starts
    with an HTTP method (a client sends its next request once the previous answer is in)."""

    def __init__(self, target_port: int, fail_every: int = 0):
        import threading

        self.port, self.target, self.fail_every = _free_port(), target_port, fail_every
        self.connections, self.requests, self.failed = 0, 0, 0
        self._lock = threading.Lock()
        self._open: set = set()
        self._server = None
        self.open()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        import threading

        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(128)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        self._server.close()
        with self._lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, server) -> None:
        import threading

        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.connections += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for a, b, requests in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, requests), daemon=True).start()

    def _pipe(self, a, b, requests: bool = False) -> None:
        try:
            while data := a.recv(65536):
                if requests and data.split(b" ", 1)[0] in _HTTP_METHODS:
                    with self._lock:
                        self.requests += 1
                        fail = self.fail_every and self.requests % self.fail_every == 0
                        self.failed += bool(fail)
                    if fail:  # reset, not forwarded: the server never sees this request
                        for s in (a, b):
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                            s.close()
                        return
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open -= {a, b}


#: Session fixtures that start processes (a Dask cluster, a Prefect server): a test that uses one
#: is a slow test whatever its own marks say, so `make test-fast` (-m "not slow") starts none.
PROCESS_FIXTURES = {"dask_client", "dask_address", "prefect_api"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
