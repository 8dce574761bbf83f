"""Keeping intermediate results on the Dask cluster: which client computes, and persisting.

Fits and stages keep a few results between passes (an embedding before the k-means passes,
power k-means' features, a stage's labels before they are written).  They all ask Dask the
same way which distributed client, if any, computes (:func:`active_client`) and persist the
same way (:func:`persist_and_wait`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["active_client", "persist_and_wait"]


def active_client():
    """The distributed ``Client`` that is the current Dask scheduler, else None.

    Asked of ``dask.base.get_scheduler`` rather than ``distributed.get_client``: inside
    ``dask.config.set(scheduler=...)`` (a test's synchronous scheduler, a user's threads) a
    default client exists but does not compute, and ``dask.persist`` would not use it either.

    Returns
    -------
    distributed.Client or None
    """
    from dask.base import get_scheduler

    client = getattr(get_scheduler(), "__self__", None)
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    return client if isinstance(client, Client) else None


def persist_and_wait(x: Any, *, watch: Callable[[Any], None] | None = None) -> Any:
    """Persist Dask collections on the active scheduler and return once they are computed.

    On a distributed cluster the results stay on the workers as futures; a failed task's own
    exception is raised here, after every key of ``x`` is released: the scheduler would
    otherwise hand the same error to a re-run (same input, same deterministic keys) instead
    of recomputing.  On a local scheduler ``dask.persist`` computes in this process.

    Parameters
    ----------
    x : Dask collection, or a list/tuple of them (or Delayed objects)
    watch : callable, optional
        Called with the persisted collection(s) before waiting, on a cluster only (e.g. a
        progress bar over their futures); an exception or interrupt in it releases the keys too.

    Returns
    -------
    The persisted collection(s): the same structure as ``x`` (a list for a list or tuple on
    a cluster).
    """
    import dask

    client = active_client()
    if client is None:
        return dask.persist(x)[0]
    from distributed import futures_of, wait

    x = client.persist(x)
    futures = futures_of(x)
    try:
        if watch is not None:
            watch(x)
        wait(futures)
        failed = [f for f in futures if f.status == "error"]
        if failed:
            failed[0].result()  # raises the task's own exception
    except BaseException:
        client.cancel(futures, force=True)
        raise
    return x
