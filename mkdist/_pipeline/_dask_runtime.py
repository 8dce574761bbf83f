"""The Dask cluster a run uses: an existing scheduler, or a LocalCluster started for the run."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

from ..errors import InputValidationError, SchedulerUnreachableError

__all__ = ["dask_client", "dashboard_link", "DEFAULT_CONNECT_TIMEOUT"]

logger = logging.getLogger("mkdist")

#: Seconds a run waits for an existing scheduler before it gives up (MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0


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
