"""Helpers shared by the benchmark scripts (data paths, timing, JSON output, the A/B harness of two
checkouts, the customer table, Dask clusters started as an operator starts them)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MKDIST_SHARED_DATA", REPO.parent / "shared" / "data"))


def multiview_sets() -> dict:
    """Name -> file of every shared multi-view set (``shared/data/multiview/*.npz``, sorted)
    and of UCI mfeat (all six views), the data sets of the quality benchmarks."""
    sets = {f.stem: f for f in sorted((SHARED_DATA / "multiview").glob("*.npz"))}
    sets["mfeat"] = SHARED_DATA / "mfeat.npz"
    return sets


def load_multiview(path) -> tuple[list[np.ndarray], np.ndarray]:
    """The views (``view0``, ``view1``, ... in order) and the labels ``y`` of a shared .npz file."""
    d = np.load(path)
    return [d[f"view{i}"] for i in range(sum(k.startswith("view") for k in d.files))], d["y"]


def load_mfeat():
    return load_multiview(SHARED_DATA / "mfeat.npz")


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def median(xs):
    return float(statistics.median(xs))


def machine():
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}


def emit(result: dict) -> None:
    """Print the benchmark result as one JSON document (the contract of every bench script)."""
    print(json.dumps(result, indent=2, default=float))


OUT = REPO / "bench" / "out"
#: Where a script keeps the JSON it printed (tracked: the figures bench/RESULTS.md quotes).
RESULTS = REPO / "bench" / "results"


def write_result(out: dict, name: str, path: str | Path | None = None) -> Path:
    """Write ``out`` as JSON to ``path``, by default ``bench/results/<name>.json``; returns the path."""
    path = Path(path) if path is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=float))
    return path


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file a resumable benchmark appends to (none when it does not
    exist yet; blank lines skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------- A/B of two checkouts
def one_blas_thread_env(**extra: str) -> dict[str, str]:
    """This process's environment with one BLAS / OpenMP thread, and ``extra``: what a job of an
    A/B comparison runs under, so that neither checkout gets more cores than the other."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}


def run_job(python: str, job: str, *args, env: dict | None = None, cwd: str | Path = "/tmp",
            timeout: float = 3600) -> dict:
    """Run the Python source ``job`` with the interpreter ``python`` (``sys.argv[1:]`` = ``args``)
    and return the JSON document its last line of output prints.

    ``cwd`` is /tmp by default: ``python -c`` puts the working directory first on ``sys.path``,
    so run from a checkout it would import that checkout's ``mkdist/`` rather than the one
    installed in ``python``.  ``env``: :func:`one_blas_thread_env` unless given.  A job that
    fails stops the benchmark with the tail of its stderr.
    """
    r = subprocess.run([python, "-c", job, *map(str, args)], capture_output=True, text=True,
                       env=one_blas_thread_env() if env is None else env, cwd=str(cwd), timeout=timeout)
    if r.returncode:
        raise SystemExit(f"{python}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def alternate(pythons: dict[str, str], rounds: int, run, progress=json.dumps) -> tuple[dict[str, list], list[float]]:
    """``run(tag, python)`` for each interpreter of ``pythons`` (tag -> interpreter, e.g. ``{"old": ...,
    "new": ...}``), ``rounds`` times each, in the order A, B; B, A; A, B; ...: a load that drifts
    over the runs (a shared machine) weighs on both sides alike.  After each run a line
    ``TAG progress(record) (load L)`` goes to stderr.

    Returns
    -------
    runs : dict of str to list
        Each tag's records, in the order they ran.
    loads : list of float
        The 1-minute load average after each run, in the order the runs ran.
    """
    tags = list(pythons)
    runs: dict[str, list] = {tag: [] for tag in tags}
    loads: list[float] = []
    for i in range(rounds):
        for tag in (tags if i % 2 == 0 else tags[::-1]):
            runs[tag].append(run(tag, pythons[tag]))
            loads.append(os.getloadavg()[0])
            print(tag, progress(runs[tag][-1]), f"(load {loads[-1]:.1f})", file=sys.stderr, flush=True)
    return runs, loads


# ----------------------------------------------------------------------------- data
def customer_table(n: int) -> Path:
    """:func:`mkdist.datasets.write_customer_table` of ``n`` rows (string ``customer_id`` in
    shuffled order, a string, a categorical and a date column, views ``a0..a7`` and ``b0..b7``,
    ``true_segment``; 5 clusters), written once under ``bench/out/data``."""
    from mkdist.datasets import write_customer_table

    path = OUT / "data" / f"customers-{n}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_customer_table(path.with_suffix(".tmp"), n)
        path.with_suffix(".tmp").rename(path)
    return path


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``mkdist`` command as a user with no Prefect server and no default
    Dask scheduler types it (no ``PREFECT_API_URL``, no ``MKDIST_DASK_ADDRESS``), and ``extra``."""
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **extra}
    for name in ("PREFECT_API_URL", "MKDIST_DASK_ADDRESS"):
        if name not in extra:
            env.pop(name, None)
    return env
#: Workload W1: two 32-feature float32 views, 10 clusters, rbf-grid kernels, 1000 landmarks.
W1 = dict(n_clusters=10, kernels="rbf-grid", n_landmarks=1000)


def w1_input(N: int, chunk_rows: int = 50_000) -> Path:
    """W1 data as an xarray-style Zarr dataset (views view0, view1; labels y), written once
    under bench/out/data and read by every run."""
    import xarray as xr
    from distributed import Client, LocalCluster

    from mkdist.datasets import make_multiview_blobs

    path = OUT / "data" / f"w1-{N}.zarr"
    if (path / "zarr.json").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    views, y = make_multiview_blobs(N, chunk_rows=chunk_rows, random_state=0, view_dims=(32, 32))
    ds = xr.Dataset({k: (("sample", f"feature_{k}"), v) for k, v in views.items()})
    ds["y"] = (("sample",), y)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c, Client(c):
        ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3)
    return path


#: How the benchmark's Dask workers are started (``--cluster``):
#: ``tuned``: a LocalCluster whose nannies pass mkdist's malloc settings (``worker_malloc_settings``);
#: ``plain``: a LocalCluster with distributed's defaults, as a user creates one from Python;
#: ``unfixed``: a plain LocalCluster whose workers keep glibc's 128 KiB mmap threshold: an explicit
#:     ``MALLOC_MMAP_THRESHOLD_=131072``, which mkdist leaves alone -- the glibc state of every
#:     nanny worker before the row tasks set the thresholds themselves (issue 23);
#: ``dask-worker``: ``dask scheduler`` and ``dask worker --nthreads 1`` processes, defaults only.
CLUSTERS = ("tuned", "plain", "unfixed", "dask-worker")


def drop_malloc_environ() -> dict[str, str]:
    """Remove the ``MALLOC_*`` variables from this process's environment; returns them.

    distributed's nanny copies its pre-spawn settings into ``os.environ`` and leaves them
    there, so every process started afterwards -- the next cluster's workers, `dask worker`
    processes, the floor's children -- would inherit the previous cluster's glibc settings
    (an "unfixed" cluster left MALLOC_MMAP_THRESHOLD_=131072 to the plain one after it, and
    slowed the floor: `--part plain` up to commit 2644752)."""
    return {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("MALLOC_")]}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server a benchmark starts)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, what: str, proc=None, timeout: float = 60) -> None:
    """Wait until a server started as ``proc`` accepts connections on 127.0.0.1:``port``."""
    import socket

    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or (proc is not None and proc.poll() is not None):
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


class DaskProcesses:
    """``dask scheduler`` + ``n_workers`` x ``dask worker --nthreads 1`` processes on 127.0.0.1, as an
    operator starts them (distributed's defaults but ``memory_limit`` per worker, None: dask's);
    ``env``: variables added to the processes' environment.  Returns once the workers have
    joined; ``scheduler_address`` as a LocalCluster's; ``close()`` stops the processes."""

    def __init__(self, n_workers: int = 2, *, memory_limit: str | None = "8GiB", env: dict | None = None):
        from distributed import Client

        port = free_port()
        self.scheduler_address = f"tcp://127.0.0.1:{port}"
        dask = [sys.executable, "-m", "dask"]
        drop_malloc_environ()  # an operator's shell, not what an earlier nanny left here
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        self.procs = [subprocess.Popen(dask + ["scheduler", "--host", "127.0.0.1", "--port", str(port),
                                               "--no-dashboard"], **quiet)]
        try:
            wait_for_port(port, "dask scheduler", self.procs[0])
            limit = ["--memory-limit", memory_limit] if memory_limit else []
            self.procs += [subprocess.Popen(dask + ["worker", self.scheduler_address, "--nthreads", "1", *limit,
                                                    "--host", "127.0.0.1", "--no-dashboard"], **quiet)
                           for _ in range(n_workers)]
            with Client(self.scheduler_address) as client:
                client.wait_for_workers(n_workers, timeout=300)
        except BaseException:
            self.close()
            raise

    def close(self):
        for p in self.procs[::-1]:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=60)


class DaskWorkerCommand:
    """``dask scheduler`` + one ``dask worker --nworkers N --nthreads 1`` command (a nanny per worker
    process), distributed's defaults otherwise, as an operator types them; ``env``: variables added
    to the processes' environment.  ``pids``: the two commands' processes (the worker processes are
    their children); ``close()`` stops them."""

    def __init__(self, n_workers: int = 2, env: dict | None = None):
        from distributed import Client

        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **(env or {})}
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        dask = [sys.executable, "-m", "dask"]
        self.scheduler = subprocess.Popen(dask + ["scheduler", "--host", "127.0.0.1", "--port", str(port),
                                                  "--no-dashboard"], **quiet)
        self.workers = None
        try:
            wait_for_port(port, "dask scheduler", self.scheduler)
            self.workers = subprocess.Popen(dask + ["worker", self.address, "--nworkers", str(n_workers),
                                                    "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"],
                                            **quiet)
            with Client(self.address) as client:
                client.wait_for_workers(n_workers, timeout=300)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self.scheduler, self.workers) if p is not None]

    def close(self):
        procs = [p for p in (self.workers, self.scheduler) if p is not None]
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def local_cluster(n_workers: int = 2, cluster: str = "tuned"):
    """A cluster of ``n_workers`` processes x 1 thread started as ``cluster`` says (:data:`CLUSTERS`),
    and a client of it; the caller closes both."""
    import dask
    from distributed import Client, LocalCluster

    if cluster == "dask-worker":
        procs = DaskProcesses(n_workers)
        return procs, Client(procs.scheduler_address)
    # Imported here, not above: the plain `dask worker` kind also runs checkouts older than
    # mkdist.internals (bench_scheduler_ab.py's A/B).
    from mkdist.internals import worker_malloc_settings

    # Callables, not context managers: ``dask.config.set`` applies its change when constructed,
    # so building all three here left every later cluster of the process "unfixed" (the plain
    # cluster of `--part plain` ran with the 128 KiB mmap threshold up to commit 2644752).
    settings = {"tuned": worker_malloc_settings, "plain": contextlib.nullcontext,
                "unfixed": lambda: dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_":
                                                    "131072"})}
    drop_malloc_environ()  # each kind from a clean environment
    with settings[cluster]():
        lc = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          memory_limit="8GiB")
    return lc, Client(lc)


def import_library() -> None:
    """What a run's processes import: the pipeline and every built-in method's module
    (``import mkdist`` alone loads names on first use, so it no longer does this)."""
    import mkdist
    import mkdist.pipeline  # noqa: F401

    for name in mkdist.available_methods():
        mkdist.get_method(name)


def vm_hwm_bytes() -> float:
    """Peak resident set of the calling process's own address space (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024.0
    return float("nan")


def vm_rss_bytes() -> float:
    """Resident set of the calling process now (VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024.0
    return float("nan")


def worker_peak_rss(client) -> dict:
    """Peak resident memory of every worker process over its life (fresh cluster per run), GiB.

    VmHWM, not ``ru_maxrss``: on Linux ``ru_maxrss`` survives fork + exec, so a worker spawned
    by a driver that holds a large array starts at the driver's peak (the 10M run of
    ``bench_speed --part scale`` reported 1.5 GiB per worker that way).
    """
    peaks = client.run(vm_hwm_bytes)
    return {addr: round(v / 2**30, 3) for addr, v in peaks.items()}


def task_compute_seconds(records: list) -> dict:
    """Seconds the workers spent computing each kind of task (the key's name up to its token),
    from a ``distributed.get_task_stream`` record list: where a stage's time went on the workers."""
    out: dict = {}
    for rec in records:
        key = rec["key"]
        name = key[0] if isinstance(key, tuple) else str(key)
        name = re.sub(r"-[0-9a-f]{32}$", "", name)
        for ss in rec.get("startstops", ()):
            if ss.get("action") == "compute":
                out[name] = out.get(name, 0.0) + ss["stop"] - ss["start"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run_pipeline(N: int, store: Path, *, report: bool = False, cluster: str = "tuned", n_workers: int = 2,
                 **params) -> dict:
    """W1 at N rows through ``mkdist.cluster`` on a fresh ``n_workers`` x 1 thread cluster (``cluster``: see
    :data:`CLUSTERS`), end to end from Zarr into ``store`` (replaced).  With ``report`` the run writes its
    report as ``cluster_flow``
    does (``mkdist.cluster(report=True)``: the model's figures drawn by a background process while
    the rows are embedded, the rest after the last stage); ``end_to_end_s`` then includes the
    report's tail, and ``report_s`` is its cost to the run: the tail, the time the stages waited
    for the report, and half the drawing process's CPU time spent while the workers were busy
    (it shares the 2 cores with 2 busy workers, at a lower priority): all of it but its imports
    when those were done before the model stage was (they ran beside the fit, which keeps one
    core of two busy); ``report_s_upper`` counts all of its CPU time in full."""
    import xarray as xr

    import mkdist

    src = w1_input(N)
    if store.exists():
        shutil.rmtree(store)
    y = xr.open_zarr(src, consolidated=False)["y"].values
    workers, client = local_cluster(n_workers, cluster=cluster)
    out: dict = {"N": N, "cluster": cluster, "n_workers": n_workers}
    try:
        client.run(import_library)  # workers import the library before the clock starts
        from distributed import get_task_stream

        with get_task_stream(client) as stream:
            t0 = time.perf_counter()
            res = mkdist.cluster(str(src), str(store), random_state=0, report=report, **{**W1, **params})
            out["end_to_end_s"] = total = time.perf_counter() - t0
        out["task_compute_s"] = task_compute_seconds(stream.data)
        peaks = worker_peak_rss(client)
        out["worker_rss_after_gib"] = {a: round(v / 2**30, 3) for a, v in client.run(vm_rss_bytes).items()}
        # What the row tasks left the workers' allocator in (mkdist/_core/_worker_env.py): "set" and a
        # reused 4 MiB block is the fast state.
        from mkdist.internals import worker_malloc_state

        out["worker_malloc"] = client.run(worker_malloc_state)
        if report:
            timings = res.report_timings
            tail, fore, cpu = timings["tail_s"], timings["foreground_s"], timings["background_cpu_s"]
            line = timings["timeline"]
            imports_beside_fit = (line.get("imported") or float("inf")) <= line.get("sent_model", 0.0)
            busy_cpu = cpu - (line.get("import_cpu_s") or 0.0) if imports_beside_fit else cpu
            run_s = total - tail - fore
            out.update(report=res.report, report_tail_s=tail, report_foreground_s=fore,
                       report_background_cpu_s=cpu, report_background_busy_cpu_s=busy_cpu,
                       report_imports_beside_fit=imports_beside_fit, report_timeline=line,
                       report_s=tail + fore + busy_cpu / 2, report_s_upper=tail + fore + cpu,
                       run_without_report_s=run_s, report_share_of_run=(tail + fore + busy_cpu / 2) / run_s,
                       report_share_of_run_upper=(tail + fore + cpu) / run_s)
        labels = res.labels.compute()
    finally:
        client.close()
        workers.close()
    return {**out, "stages": res.timings, "kmeans": res.metrics["kmeans"],
            "scores": mkdist.clustering_scores(y, labels), "worker_peak_rss_gib": peaks,
            "max_worker_peak_rss_gib": max(peaks.values()), "store": str(store)}


def run_forked(target, args: tuple, timeout: float) -> dict:
    """``target(conn, *args)`` in a forked child that sends one record through ``conn``.

    A fit that hangs or takes longer than ``timeout`` seconds is killed and recorded as a
    timeout (a benchmark over many data sets must not stall on one); a child that dies
    without a record is recorded as a bug.  Adds ``wall_s``.
    """
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(child, *args))
    t0 = time.perf_counter()
    proc.start()
    child.close()
    rec = None
    if parent.poll(timeout):
        try:
            rec = parent.recv()
        except EOFError:
            rec = None
    proc.join(timeout=5 if rec is not None else 0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if rec is None:
        if time.perf_counter() - t0 >= timeout:
            rec = {"status": "timeout", "error": f"no result within {timeout:.0f} s"}
        else:
            rec = {"status": "bug", "error": f"the fit process died (exit code {proc.exitcode})"}
    rec["wall_s"] = time.perf_counter() - t0
    return rec


class MotoServer:
    """A moto S3 server on 127.0.0.1 (``python -m moto.server``, its own process), logging each
    request (one line each) so the requests of a run can be counted."""

    _REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+)')

    def __init__(self, log: Path):
        import subprocess

        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = Path(log)
        self._log = open(self.log, "w")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                     env=env, stdout=self._log, stderr=self._log)
        wait_for_port(port, "moto server", self.proc)

    def log_size(self) -> int:
        """Where the log ends now: pass it to :meth:`request_lines` to see only later requests."""
        self._log.flush()
        return self.log.stat().st_size

    def request_lines(self, since: int = 0) -> list[tuple[str, str]]:
        """(method, path) of every request logged after byte ``since``."""
        self._log.flush()
        with open(self.log) as f:
            f.seek(since)
            return [m.groups() for m in map(self._REQUEST.search, f.read().splitlines()) if m]

    def requests(self) -> int:
        return len(self.request_lines())

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self._log.close()


# Every benchmark times work, not imports: `import mkdist` loads its names on first use, so the
# first fit or run of a script would otherwise include loading scikit-learn and Dask (2-3 s).
import_library()
