"""Runtime pieces shared by the flows: the Dask cluster for a run and the retry policy."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from mkdist.errors import InputValidationError, SchedulerUnreachableError

__all__ = ["dask_client", "retry_transient", "TRANSIENT_ERRORS", "DEFAULT_CONNECT_TIMEOUT"]

logger = logging.getLogger("mkdist.flows")


def _transient_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [TimeoutError, ConnectionError]
    try:
        from distributed.comm.core import CommClosedError
        from distributed.scheduler import KilledWorker

        types += [CommClosedError, KilledWorker]
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


#: Errors worth a retry: a worker died, a connection dropped, a store timed out.  Bad input
#: and store-state errors (mkdist.errors.*) are never retried: they would fail again.
TRANSIENT_ERRORS = _transient_types()


def retry_transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry only transient cluster/store failures."""
    try:
        state.result()
    except TRANSIENT_ERRORS:
        return True
    except OSError as exc:
        # Network/file-system hiccups (e.g. an fsspec backend) but not a missing path.
        return not isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError))
    except Exception:
        return False
    return False


#: Seconds a run waits for an existing scheduler before it gives up (MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0


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

    from mkdist.pipeline import check_worker_malloc, worker_malloc_settings

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
        logger.info("using Dask scheduler %s (dashboard %s)", address, client.dashboard_link)
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
    with worker_malloc_settings(), \
            LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                         memory_limit=memory_limit, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=True) as client:
            logger.info("started LocalCluster with %d workers (dashboard %s)", n_workers, client.dashboard_link)
            yield client
