"""Process settings of the Dask workers that run mkdist's row tasks.

distributed's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (its config
``distributed.nanny.pre-spawn-environ``), to hand freed memory back to the OS.  Setting any
glibc malloc threshold also switches off glibc's *dynamic* mmap threshold, so every
temporary of 128 KiB or more -- a 512 x 1000 float64 kernel block is 4 MiB, and a row task
makes several per sub-block -- becomes a fresh ``mmap``, page-faulted on first touch and
unmapped on free.  Measured on this machine (W1 embedding, one thread, 50,000 rows): 0.37 s
in a plain process, 0.76 s with the nanny's setting, 0.36 s with the values below.  The
values keep large temporaries on the heap (mmap only from 16 MiB) and still return memory to
the OS once 64 MiB are free at the top of the heap, so worker memory stays flat.

No library sets this for us (distributed's own default is the slow one for this workload),
hence this module: :func:`worker_malloc_settings` for clusters mkdist starts,
``deploy/dask-workers.yaml`` for clusters started by ``dask worker``, and
:func:`check_worker_malloc` to say so when a cluster runs without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["WORKER_MALLOC_ENVIRON", "worker_malloc_settings", "check_worker_malloc"]

#: glibc malloc settings of a worker process (read by glibc at process start).
WORKER_MALLOC_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": str(64 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}


@contextlib.contextmanager
def worker_malloc_settings() -> Iterator[None]:
    """Nanny workers started inside the block get :data:`WORKER_MALLOC_ENVIRON`.

    Use as ``with worker_malloc_settings(): cluster = LocalCluster(...)``.  It sets
    ``distributed.nanny.pre-spawn-environ`` (the other entries kept) and, for the block only,
    the same variables in this process's environment: distributed lets an existing variable
    win over its config, and a nanny started earlier in this process leaves its own
    ``MALLOC_TRIM_THRESHOLD_`` there.  A nanny keeps the settings for the workers it restarts.
    """
    import dask

    saved = {name: os.environ.get(name) for name in WORKER_MALLOC_ENVIRON}
    os.environ.update(WORKER_MALLOC_ENVIRON)
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": value
                              for name, value in WORKER_MALLOC_ENVIRON.items()}):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _malloc_environ() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in WORKER_MALLOC_ENVIRON}


def check_worker_malloc(client) -> str | None:
    """A one-line advice if some worker of ``client`` runs with a malloc trim threshold but no
    mmap threshold (the slow combination described in this module), else None."""
    try:
        envs = client.run(_malloc_environ)
    except Exception:  # noqa: BLE001 - advice only: a cluster that cannot run it is not an error
        return None
    slow = sorted(addr for addr, env in envs.items()
                  if env.get("MALLOC_TRIM_THRESHOLD_") is not None and env.get("MALLOC_MMAP_THRESHOLD_") is None)
    if not slow:
        return None
    settings = " ".join(f"{k}={v}" for k, v in WORKER_MALLOC_ENVIRON.items())
    return (f"{len(slow)} of {len(envs)} Dask workers run with MALLOC_TRIM_THRESHOLD_ but no MALLOC_MMAP_THRESHOLD_, "
            f"which makes mkdist's row tasks ~2x slower; start them with {settings} "
            "(deploy/dask-workers.yaml sets it through distributed.nanny.pre-spawn-environ)")
