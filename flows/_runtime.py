"""Runtime pieces shared by the flows: the Dask cluster for a run and the retry policy."""

from __future__ import annotations

import logging

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


# The run's Dask cluster is the library's (mkdist.cluster and the CLI start it the same way).
from mkdist.pipeline import DEFAULT_CONNECT_TIMEOUT, dask_client  # noqa: E402
