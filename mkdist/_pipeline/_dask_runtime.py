"""Where a run computes: an existing scheduler, this process, or a LocalCluster started for the run.

A run given no scheduler (no address, no ``MKDIST_DASK_ADDRESS``, no active ``distributed.Client``)
computes in its own process when its input has at most :data:`IN_PROCESS_MAX_ROWS` rows, and
starts a LocalCluster of worker processes above that (:func:`run_scheduler`).

Why rows, and why 1,000,000 (``bench/RESULTS.md``, "Small tables"; a 16-column table, ``mkdist
run`` end to end, alternating): the in-process run (Dask's threads, one BLAS thread each) was
faster than a run that starts a LocalCluster of two workers in 20 of 21 pairs from 300 to
1,000,000 rows on the 2-core machine, by a median of 10 s at 50k and 200k rows (8-9 s against
16-19 s) and 14-26 s at 1M, with identical labels; its peak memory was 1 GiB at 1M rows.  No
larger input was measured: above it a run keeps the worker processes' memory limits and
isolation, and their start-up is a small part of a run that long.  The passes over the rows
cost per row (the embedding's kernels are rows x landmarks per kernel), so the threshold counts
rows, not bytes; a very wide table was not measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InputValidationError, SchedulerUnreachableError

__all__ = ["dask_client", "dashboard_link", "DEFAULT_CONNECT_TIMEOUT", "IN_PROCESS_MAX_ROWS", "RunScheduler",
           "in_process", "run_scheduler", "current_scheduler"]

logger = logging.getLogger("mkdist")

#: Seconds a run waits for an existing scheduler before it gives up (MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Rows up to which a run given no scheduler computes in its own process
#: (``MKDIST_IN_PROCESS_MAX_ROWS``); see the module docstring.
IN_PROCESS_MAX_ROWS = 1_000_000


def in_process_max_rows() -> int:
    """:data:`IN_PROCESS_MAX_ROWS`, or the ``MKDIST_IN_PROCESS_MAX_ROWS`` environment variable."""
    value = os.environ.get("MKDIST_IN_PROCESS_MAX_ROWS")
    if value is None:
        return IN_PROCESS_MAX_ROWS
    try:
        return int(value)
    except ValueError:
        raise InputValidationError(f"MKDIST_IN_PROCESS_MAX_ROWS={value!r} must be an integer (rows); unset it for "
                                   f"the default {IN_PROCESS_MAX_ROWS:,}.") from None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class RunScheduler:
    """Where a run computes.

    Attributes
    ----------
    kind : {"in-process", "local-cluster", "scheduler"}
        This process's threads; a LocalCluster started for the run; a scheduler the run was
        given (an address, or the caller's active ``distributed.Client``).
    workers : int
        Threads (in-process) or worker processes.
    address : str or None
        The scheduler's address (none in-process).
    client : distributed.Client or None
    """

    kind: str
    workers: int
    address: str | None = None
    client: Any = None

    def describe(self) -> str:
        """One line: ``in-process (2 threads)``, ``local Dask cluster (2 workers)``, ..."""
        plural = "" if self.workers == 1 else "s"
        if self.kind == "in-process":
            return f"in-process ({self.workers} thread{plural})"
        if self.kind == "local-cluster":
            return f"local Dask cluster ({self.workers} worker{plural})"
        return f"Dask scheduler {self.address} ({self.workers} worker{plural})"

    def to_json(self) -> dict[str, Any]:
        """What the run summary records (JSON)."""
        return {"kind": self.kind, "workers": int(self.workers), "address": self.address,
                "description": self.describe()}


def current_scheduler() -> RunScheduler:
    """Where Dask computes now: the active distributed client's cluster, or this process.

    Asked of :func:`mkdist._core._cluster.active_client`, the same question every stage asks
    before it computes, so the answer is where the stages run whoever chose it.
    """
    import dask

    from .._core._cluster import active_client

    client = active_client()
    if client is None:
        threads = 1 if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded") else \
            int(dask.config.get("num_workers", None) or _cores())
        return RunScheduler("in-process", threads)
    cluster = getattr(client, "cluster", None)
    kind = "local-cluster" if cluster is not None and type(cluster).__name__ == "LocalCluster" else "scheduler"
    try:
        workers = len(client.scheduler_info().get("workers", {}))
    except Exception as exc:  # noqa: BLE001 - a description is not worth failing a run for
        logger.debug("cannot count the scheduler's workers: %s", exc)
        workers = 0
    return RunScheduler(kind, workers, client.scheduler.address, client)


@contextlib.contextmanager
def in_process(threads: int | None = None) -> Iterator[RunScheduler]:
    """Compute in this process for the block: Dask's threaded scheduler, one BLAS thread each
    (unless the caller set a scheduler in Dask's configuration: that one is kept).

    The row tasks run ``threads`` at a time (default: the cores this process may use), each
    a chain of GEMMs: BLAS's own threads on top would oversubscribe the cores (two Dask
    threads x two OpenBLAS threads on two cores), so BLAS is limited to one thread, as on a
    worker process with one thread.

    Yields
    ------
    RunScheduler
    """
    import dask
    from threadpoolctl import threadpool_limits

    if dask.config.get("scheduler", None) is not None:
        # The caller chose a local scheduler (``dask.config.set(scheduler=...)``): theirs.
        yield current_scheduler()
        return
    threads = int(threads or _cores())
    with dask.config.set(scheduler="threads", num_workers=threads), \
            threadpool_limits(limits=1, user_api="blas"):
        yield RunScheduler("in-process", threads)


@contextlib.contextmanager
def run_scheduler(address: str | None = None, n_workers: int | None = None, *, n_rows: int | None = None,
                  connect_timeout: float | None = None, echo: Callable[[str], None] | None = None
                  ) -> Iterator[RunScheduler]:
    """Where a run of ``n_rows`` rows computes, for the block: what ``mkdist run``, ``mkdist
    assign``, the demo and the flows use.

    In order: a scheduler named by ``address`` (or ``MKDIST_DASK_ADDRESS``), see
    :func:`dask_client`; the caller's active ``distributed.Client``; this process
    (:func:`in_process`) when ``n_rows`` is at most :func:`in_process_max_rows` and no
    ``n_workers`` was asked for; else a LocalCluster of ``n_workers`` (default 2) worker
    processes, announced through ``echo`` before it starts (it takes seconds).

    Parameters
    ----------
    address : str, optional
    n_workers : int, optional
        Worker processes of a LocalCluster; given, the run starts one whatever its size.
    n_rows : int, optional
        Rows of the run's input (None: unknown, a LocalCluster).
    connect_timeout : float, optional
    echo : callable, optional
        Where the line "starting a local Dask cluster (N workers)" goes.

    Yields
    ------
    RunScheduler
    """
    from .._core._cluster import active_client

    if address or os.environ.get("MKDIST_DASK_ADDRESS"):
        with dask_client(address, n_workers, connect_timeout=connect_timeout):
            yield current_scheduler()
        return
    if active_client() is not None:
        yield current_scheduler()
        return
    if n_workers is None and n_rows is not None and n_rows <= in_process_max_rows():
        with in_process() as scheduler:
            yield scheduler
        return
    n_workers = int(n_workers or os.environ.get("MKDIST_DASK_WORKERS", "2"))
    if echo is not None:
        echo(f"starting a local Dask cluster ({n_workers} worker{'' if n_workers == 1 else 's'})")
    with dask_client(None, n_workers, connect_timeout=connect_timeout) as client:
        yield RunScheduler("local-cluster", n_workers, client.scheduler.address, client)


@contextlib.contextmanager
def _sigint_ignored_by_children() -> Iterator[None]:
    """Worker processes started in the block ignore SIGINT; one that reaches this process in
    the meantime is delivered when the block ends.

    A Ctrl-C in a terminal reaches every process of the foreground process group: the
    LocalCluster's workers would die mid-task while the run is still closing its cluster, and
    the nanny would restart them.  They ignore it from their preload (``mkdist._pipeline._ignore_sigint``);
    this process keeps an interrupt pressed while they start, instead of ignoring it.
    """
    import dask

    preload = [*dask.config.get("distributed.worker.preload", []), "mkdist._pipeline._ignore_sigint"]
    if threading.current_thread() is not threading.main_thread():
        with dask.config.set({"distributed.worker.preload": preload}):
            yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        with dask.config.set({"distributed.worker.preload": preload}):
            yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            signal.raise_signal(signal.SIGINT)


@contextlib.contextmanager
def dask_client(address: str | None = None, n_workers: int | None = None,
                threads_per_worker: int = 1, memory_limit: str | None = "auto",
                connect_timeout: float | None = None) -> Iterator:
    """The Dask client a run uses: an existing scheduler, or a LocalCluster for the run.

    ``address`` (or the ``MKDIST_DASK_ADDRESS`` environment variable) names a running
    scheduler (``tcp://host:8786``, ``tls://...``; security settings come from Dask's own
    configuration, see deploy/README.md); one that does not answer within
    ``connect_timeout`` seconds (default 10, or ``MKDIST_CONNECT_TIMEOUT``) is reported with
    its address.  Without one a LocalCluster of ``n_workers`` processes starts for the run
    and stops after it.  The client is the process default, so every library call in the
    run's tasks uses it.  Either way the workers get a plugin that closes their object-store
    sessions when they close (:mod:`mkdist._pipeline._sessions`).
    """
    from distributed import Client, LocalCluster

    from .._core._worker_env import check_worker_malloc, worker_malloc_settings
    from ._sessions import register_session_closer

    address = address or os.environ.get("MKDIST_DASK_ADDRESS") or None
    timeout = float(connect_timeout if connect_timeout is not None
                    else os.environ.get("MKDIST_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT))
    if address:
        try:
            client = Client(address, set_as_default=True, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise SchedulerUnreachableError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({exc}); check the "
                "address, or start the scheduler") from None
        logger.info("using Dask scheduler %s", address)
        register_session_closer(client)
        advice = check_worker_malloc(client)
        if advice:
            logger.warning(advice)
        try:
            yield client
        finally:
            client.close()
        return
    n_workers = int(n_workers or os.environ.get("MKDIST_DASK_WORKERS", "2"))
    if n_workers < 1:
        # A LocalCluster with no worker accepts work it can never run: the run would hang.
        raise InputValidationError(f"n_workers={n_workers} must be >= 1.")
    with worker_malloc_settings(), _sigint_ignored_by_children():
        # Any free port for the scheduler's HTTP server (":8787", the default, warns when another
        # cluster holds it); no dashboard link is shown: its pages need bokeh, which mkdist does
        # not install.
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                               memory_limit=memory_limit, dashboard_address=":0")
    try:
        with Client(cluster, set_as_default=True) as client:
            logger.info("started a LocalCluster with %d workers", n_workers)
            register_session_closer(client)
            yield client
    finally:
        cluster.close(timeout=5)


def _scheduler_serves_dashboard(dask_scheduler=None) -> bool:
    # Runs in the scheduler process (Client.run_on_scheduler).  distributed imports its
    # dashboard module only when the dashboard is on, and when that import fails (no bokeh,
    # or one older than 3.1) it serves a page saying "Dask needs bokeh>=3.1.0" at the same
    # address instead: the imported module is the one sign that the pages are there.
    import sys

    return "distributed.dashboard.scheduler" in sys.modules


def dashboard_link(client) -> str | None:
    """The address of the Dask dashboard when the scheduler serves its pages, else None.

    ``Client.dashboard_link`` names the scheduler's HTTP port whether or not the dashboard
    works there: a scheduler without bokeh (mkdist does not depend on it) answers with a
    "needs bokeh" page, and one started with ``--no-dashboard`` not at all.  A link is
    worth logging only when it opens.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    str or None
    """
    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None
        if not client.run_on_scheduler(_scheduler_serves_dashboard):
            return None
    except Exception as exc:  # a scheduler that refuses run_on_scheduler: no link, not a failed run
        logger.debug("cannot ask the scheduler about its dashboard: %s", exc)
        return None
    return client.dashboard_link
