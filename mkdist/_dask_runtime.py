"""The Dask cluster a run uses: an existing scheduler, or a LocalCluster started for the run."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

from .errors import InputValidationError, SchedulerUnreachableError

__all__ = ["dask_client", "DEFAULT_CONNECT_TIMEOUT"]

logger = logging.getLogger("mkdist")

#: Seconds a run waits for an existing scheduler before it gives up (MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0


@contextlib.contextmanager
def _sigint_ignored_by_children() -> Iterator[None]:
    """Worker processes started in the block ignore SIGINT.

    A Ctrl-C in a terminal reaches every process of the foreground process group: the
    LocalCluster's workers would die mid-task while the run is still closing its cluster, and
    the nanny would restart them.  A process started with SIGINT ignored keeps it ignored
    (Python installs its KeyboardInterrupt handler only over the default disposition), so the
    run alone sees the interrupt and stops its cluster in order.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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
    run's tasks uses it.
    """
    from distributed import Client, LocalCluster

    from ._worker_env import check_worker_malloc, worker_malloc_settings

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
            yield client
    finally:
        cluster.close(timeout=5)
