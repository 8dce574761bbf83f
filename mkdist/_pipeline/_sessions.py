"""The worker plugin that closes a Dask worker's object-store sessions before the worker exits.

Every worker that reads or writes a chunk of a store on s3 holds an aiohttp session on zarr's
event loop, which nothing else closes: at the worker process's exit it is garbage-collected and
aiohttp prints "Unclosed client session" (one per worker, at the end of every run on s3 with
the CLI's own LocalCluster, or when a user stops their ``dask worker``; see
:func:`mkdist.storage._remote.close_sessions`).  A worker's plugins are torn down when it closes
-- a LocalCluster stopping, a nanny restarting its worker, ``dask worker`` told to stop -- while
zarr's loop still runs, before the process exits (a worker process's own atexit hooks run after
zarr's has stopped the loop).  Registered by :func:`mkdist._pipeline._dask_runtime.dask_client`
on every cluster a run starts or joins: the scheduler keeps it for workers that join later.
"""

from __future__ import annotations

import logging

from distributed import WorkerPlugin

from mkdist.storage._remote import close_sessions

__all__ = ["CloseObjectStoreSessions", "register_session_closer"]

logger = logging.getLogger("mkdist")


class CloseObjectStoreSessions(WorkerPlugin):
    """Closes the worker process's object-store sessions when the worker closes."""

    name = "mkdist-close-object-store-sessions"
    # Registered again by every run against a long-lived cluster: kept, not replaced, since a
    # replaced plugin is torn down -- which would close the sessions under another run's tasks.
    idempotent = True

    def teardown(self, worker) -> None:
        closed = close_sessions()
        if closed:
            logger.debug("closed %d object-store sessions of worker %s", closed, worker.address)


def register_session_closer(client) -> None:
    """Register :class:`CloseObjectStoreSessions` on the cluster of ``client`` (a no-op when it
    is there).  A cluster that refuses it (workers without this mkdist) still runs the run."""
    try:
        client.register_plugin(CloseObjectStoreSessions())
    except Exception as exc:  # noqa: BLE001 - the run does not depend on it
        logger.debug("cannot register the session-closing worker plugin: %r", exc)
