"""The C allocator of the processes that run mkdist's row tasks.

distributed's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (its config
``distributed.nanny.pre-spawn-environ``), to hand freed memory back to the OS.  Setting any
glibc malloc threshold also switches off glibc's *dynamic* mmap threshold, so every
temporary of 128 KiB or more -- a 512 x 1000 float32 kernel block is 2 MiB, and a row task
makes several per sub-block -- becomes a fresh ``mmap``, page-faulted on first touch and
unmapped on free.  That is the default of every Dask cluster with nannies (``LocalCluster``,
``dask worker``, the Kubernetes operator, Coiled).

So the row tasks fix it themselves: the first mkdist row task a process runs calls
:func:`tune_malloc`, which sets glibc's mmap threshold to 16 MiB and its trim threshold to
64 MiB with ``mallopt`` (once per process; nothing for the user to set, no plugin).  Measured
(issue 23; W1 embedding of 100,000 rows in one worker thread under the nanny's setting):
561,567 minor page faults and 4.7-7.3 s before, 1,271 faults and 2.7-4.4 s after (three
alternating runs each, load 2.2-3.8); raising the mmap threshold alone left 546,839 faults,
because a 64 KiB trim threshold hands each freed block at the top of the heap straight back
to the OS, and a process nobody configured (glibc's dynamic thresholds) took 169,721.  Those
dynamic thresholds keep at most the same 64 MiB of free heap (twice their 32 MiB mmap cap),
so worker memory stays flat: freed memory goes back to the OS once 64 MiB of it are free at
the top of an arena.  An mmap threshold named in the process's environment (``MALLOC_MMAP_THRESHOLD_`` or
``glibc.malloc.mmap_threshold`` in ``GLIBC_TUNABLES``) is the operator's choice and is left
alone.

What cannot be fixed from inside a process is reported by :func:`check_worker_malloc`, which
``mkdist.flows`` calls on a cluster it joins: a C library without ``mallopt`` (musl, as in
Alpine images, mmaps every allocation of 128 KiB or more, with no setting to change it), a
``mallopt`` that refused, or an explicit threshold that keeps the slow path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
from collections.abc import Iterator

__all__ = ["MALLOC_THRESHOLDS", "WORKER_MALLOC_ENVIRON", "tune_malloc", "worker_malloc_settings",
           "check_worker_malloc"]

logger = logging.getLogger("mkdist")

#: glibc ``mallopt`` parameters, from ``<malloc.h>``.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Bytes: allocations from 16 MiB are mmapped (row-task temporaries are 2-4 MiB; glibc caps
#: this threshold at 32 MiB), and an arena returns memory once 64 MiB are free at its top.
MALLOC_THRESHOLDS = {"mmap": 16 << 20, "trim": 64 << 20}

#: The same settings as glibc environment variables (read by glibc at process start).
WORKER_MALLOC_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": str(MALLOC_THRESHOLDS["trim"]),
                         "MALLOC_MMAP_THRESHOLD_": str(MALLOC_THRESHOLDS["mmap"])}

_status: str | None = None
_lock = threading.Lock()


def _explicit_mmap_threshold() -> str | None:
    """The mmap threshold this process's environment names, as ``NAME=value``, or None."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return f"MALLOC_MMAP_THRESHOLD_={os.environ['MALLOC_MMAP_THRESHOLD_']}"
    for item in os.environ.get("GLIBC_TUNABLES", "").split(":"):
        if item.startswith("glibc.malloc.mmap_threshold="):
            return f"GLIBC_TUNABLES {item}"
    return None


def _glibc_mallopt():
    """glibc's ``mallopt`` in this process, or None on another C library or platform."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)  # the C library already loaded, whichever it is
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None  # musl has neither the version call nor these mallopt parameters
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def _tune() -> str:
    explicit = _explicit_mmap_threshold()
    if explicit is not None:
        return f"explicit {explicit}"
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return f"not glibc ({sys.platform})"
    # Both: with the mmap threshold raised but the nanny's 64 KiB trim threshold left, each
    # freed block at the top of the heap still goes back to the OS and faults in again.
    ok = (mallopt(_M_TRIM_THRESHOLD, MALLOC_THRESHOLDS["trim"])
          and mallopt(_M_MMAP_THRESHOLD, MALLOC_THRESHOLDS["mmap"]))
    return "set" if ok else "mallopt refused"


def tune_malloc() -> str:
    """Keep this process's large temporaries on the heap (glibc): once per process, idempotent.

    Called by every mkdist row task (``mkdist._core._blocks``) before its first sub-block; see the
    module docstring for what it sets and why.

    Returns
    -------
    status : str
        ``"set"``; ``"explicit NAME=value"`` (the environment names an mmap threshold, left
        alone); ``"not glibc (platform)"`` (nothing to set); or ``"mallopt refused"``.
    """
    global _status
    if _status is None:
        with _lock:
            if _status is None:
                _status = _tune()
                logger.debug("malloc thresholds of process %d: %s (mmap %d, trim %d bytes)", os.getpid(), _status,
                             MALLOC_THRESHOLDS["mmap"], MALLOC_THRESHOLDS["trim"])
    return _status


def _temporary_reused(nbytes: int = 4 << 20, rounds: int = 4) -> bool:
    """Does a freed ``nbytes`` block come back from ``malloc`` as it was left (the allocator
    kept it), rather than as fresh zeroed pages from the OS (mmap, or a trimmed heap)?

    ``rounds`` malloc / read back / fill / free cycles; True if one of the last two read back
    the fill.  The first two may not: glibc's dynamic threshold rises only when a mmapped
    block is freed, and the heap block after that is new.  Two chances, because a free that
    takes the free top of the heap past the trim threshold hands it back once.
    """
    libc = ctypes.CDLL(None)
    malloc, free, memset = libc.malloc, libc.free, libc.memset
    malloc.argtypes, malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    free.argtypes, free.restype = (ctypes.c_void_p,), None
    memset.argtypes, memset.restype = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t), ctypes.c_void_p
    # Offsets far from the chunk header, which the allocator overwrites with free-list links.
    offsets = [nbytes // 4, nbytes // 2, nbytes - 1]
    kept = []
    for _ in range(rounds):
        p = malloc(nbytes)
        if not p:
            raise MemoryError(f"malloc({nbytes}) failed")
        try:
            kept.append(all(ctypes.string_at(p + off, 1) == b"\xa5" for off in offsets))
            memset(p, 0xA5, nbytes)
        finally:
            free(p)
    return any(kept[-2:])


def _worker_malloc_state() -> dict[str, object]:
    return {"status": tune_malloc(), "reused": _temporary_reused()}


def check_worker_malloc(client) -> str | None:
    """Tune every worker of ``client`` now; a one-line advice for those still on the slow path.

    Each worker runs :func:`tune_malloc` (which its first row task would do anyway) and then
    checks that a freed 4 MiB block is reused rather than mapped afresh.  Returns None when
    every worker passes (or the check cannot run); else says which workers fail and why, as
    only a change to how they are started can help there.
    """
    try:
        states = client.run(_worker_malloc_state)
    except Exception:  # noqa: BLE001 - advice only: a cluster that cannot run it is not an error
        return None
    slow = {addr: s["status"] for addr, s in states.items() if not s["reused"]}
    if not slow:
        return None
    fixes = []
    if any(st.startswith("not glibc") for st in slow.values()):
        fixes.append("run them on glibc (a Debian- or Ubuntu-based image, not Alpine/musl)")
    if any(st.startswith("explicit") for st in slow.values()):
        fixes.append("drop the explicit mmap threshold from their environment, or set "
                     + " ".join(f"{k}={v}" for k, v in WORKER_MALLOC_ENVIRON.items()))
    if any(st in ("set", "mallopt refused") for st in slow.values()):
        fixes.append("start them with " + " ".join(f"{k}={v}" for k, v in WORKER_MALLOC_ENVIRON.items()))
    return (f"{len(slow)} of {len(states)} Dask workers get every freed 4 MiB temporary afresh from the OS "
            f"({'; '.join(sorted(set(slow.values())))}), which made mkdist's row tasks ~2x slower; mkdist cannot "
            f"change that from inside them: {'; or '.join(fixes)}")


@contextlib.contextmanager
def worker_malloc_settings() -> Iterator[None]:
    """Nanny workers started inside the block get :data:`WORKER_MALLOC_ENVIRON` at start.

    Not needed for speed: the row tasks set the same thresholds themselves (:func:`tune_malloc`).
    It sets ``distributed.nanny.pre-spawn-environ`` (the other entries kept) and, for the block
    only, the same variables in this process's environment: distributed lets an existing
    variable win over its config, and a nanny started earlier in this process leaves its own
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
