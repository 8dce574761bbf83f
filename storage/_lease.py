"""One writer per run store: a lease object in the store, kept alive by a heartbeat.

A holder is presumed dead when its heartbeats stop for the lease's TTL; on its own host (same
kernel and PID namespace) it is known dead at once when its pid no longer runs, or runs a
process that started at another time (the pid was reused), and its lease is taken over
without waiting for the TTL.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from mkdist.errors import StoreLockedError

__all__ = ["LEASE_FILE", "DEFAULT_TTL", "LeaseInfo", "StoreLease", "read_lease", "check_writer",
           "held_here", "host_id", "process_start"]

logger = logging.getLogger("mkdist.storage")

#: Name of the lease object at the store root.
LEASE_FILE = ".mkdist-lease.json"
#: Seconds without a heartbeat after which a lease is stale (its holder presumed dead).
DEFAULT_TTL = 60.0

# Leases this process holds: lease path -> token.  A store object of this process may write
# while the token in the store is one of these, whichever RunStore instance took it (the
# pipeline's stage functions reopen the store from its URL).
_HELD: dict[str, str] = {}
_HELD_LOCK = threading.Lock()


@functools.cache
def host_id() -> str | None:
    """This host's kernel boot and PID namespace (Linux), or None where they are unknown.

    Two processes with the same ``host_id`` see each other's pids.  The host name alone is
    not enough: containers sharing a host name (``--network host``) have separate pid
    spaces, and a pid found absent there would be a live process's.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{socket.gethostname()}/{boot}/{namespace}"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, from /proc), or None if no
    such process runs (a zombie, killed but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            stat = f.read()
    except (OSError, ValueError):
        return None
    # Fields after the command, which is in parentheses and may hold spaces: state is the
    # 3rd field of the line, starttime the 22nd.
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


@dataclass(frozen=True)
class LeaseInfo:
    """The content of a lease object.

    Attributes
    ----------
    host, pid : str, int
        Where the holder runs.
    owner : str
        What the holder said it is (by default its command line).
    token : str
        Random; identifies this lease among those ever taken on the store.
    started : str
        ISO time the lease was taken.
    heartbeat : float
        Unix time of the last heartbeat (the holder's clock).
    ttl : float
        Seconds without a heartbeat after which the lease is stale.
    host_id : str or None
        The holder's :func:`host_id`; None where its host could not tell it.
    pid_start : str or None
        The holder's :func:`process_start`, telling its pid from a later process's.
    """

    host: str
    pid: int
    owner: str
    token: str
    started: str
    heartbeat: float
    ttl: float
    host_id: str | None = None
    pid_start: str | None = None

    @classmethod
    def parse(cls, raw: bytes) -> LeaseInfo:
        d = json.loads(raw)
        optional = {k: str(d[k]) if d.get(k) is not None else None for k in ("host_id", "pid_start")}
        return cls(host=str(d["host"]), pid=int(d["pid"]), owner=str(d["owner"]),
                   token=str(d["token"]), started=str(d["started"]),
                   heartbeat=float(d["heartbeat_unix"]), ttl=float(d["ttl_s"]), **optional)

    def age(self) -> float:
        """Seconds since the last heartbeat."""
        return time.time() - self.heartbeat

    def stale(self) -> bool:
        """Whether the TTL passed without a heartbeat."""
        return self.age() > self.ttl

    def holder_gone(self) -> str | None:
        """Why the holder is known dead, if it ran on this host and is gone; else None.

        Only a holder with this process's :func:`host_id` can be checked: elsewhere a pid
        means nothing here, and only the TTL tells.
        """
        if self.host_id is None or self.pid_start is None or self.host_id != host_id():
            return None
        start = process_start(self.pid)
        if start is None:
            return f"its process (pid {self.pid}) is gone"
        if start != self.pid_start:
            return f"its pid {self.pid} now belongs to another process"
        return None

    def live(self) -> bool:
        """Whether the lease still holds: heartbeats within the TTL, from a holder not known dead."""
        return not self.stale() and self.holder_gone() is None

    def describe(self) -> str:
        return (f"{self.owner!r} on host {self.host} (pid {self.pid}), running since "
                f"{self.started}, last heartbeat {self.age():.0f} s ago")


def _lease_key(fs: Any, path: str) -> str:
    return fs.unstrip_protocol(path)


def held_here(fs: Any, path: str, token: str) -> bool:
    """Whether this process holds the lease ``token`` of the lease object at ``path``."""
    with _HELD_LOCK:
        return _HELD.get(_lease_key(fs, path)) == token


def read_lease(fs: Any, path: str) -> LeaseInfo | None:
    """The lease at ``path``; None if there is none.  Raises ValueError if it is unreadable."""
    try:
        raw = fs.cat_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return LeaseInfo.parse(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"unreadable lease {path}: {type(e).__name__}: {e}") from None


def check_writer(fs: Any, path: str, url: str, what: str) -> None:
    """Refuse ``what`` if a live lease of another process (or another holder) holds the store.

    Raises
    ------
    StoreLockedError
        The message says who holds the store, where, since when, and what to do.
    """
    try:
        info = read_lease(fs, path)
    except ValueError:  # a torn or hand-edited lease protects nothing: writers proceed
        return
    if info is not None and not held_here(fs, path, info.token) and info.live():
        raise StoreLockedError(_locked_message(url, info, what))


def _locked_message(url: str, info: LeaseInfo, what: str) -> str:
    left = max(0.0, info.ttl - info.age())
    if info.host_id is not None and info.host_id == host_id():
        # Its process runs on this host (a dead one's lease would have been taken over).
        return (f"{url} is in use by another live run: {info.describe()}. {what} was refused: "
                "one store has one writer. Wait for that run to finish, or stop it (process "
                f"{info.pid}): the lease of a run that died on this host is taken over at once.")
    return (f"{url} is in use by another live run: {info.describe()}. {what} was refused: one "
            "store has one writer. Wait for that run to finish; if it was killed, its lease "
            f"expires {left:.0f} s from now (TTL {info.ttl:.0f} s without heartbeat) and the "
            "next run takes it over.")


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class StoreLease:
    """The writer lease of one run store, held by this process while it writes.

    Take it with :meth:`RunStore.lease` (a context manager).  While held, a background
    thread rewrites the lease object every ``heartbeat`` seconds; another process treats
    the lease as live until ``ttl`` seconds pass without a heartbeat (so the lease of a
    SIGKILLed run expires), then takes it over.  A process on the holder's own host takes
    it over at once once the holder is dead (:meth:`LeaseInfo.holder_gone`).

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
    root : str
        The store's path on ``fs``.
    url : str
        The store's URL, for messages.
    local : bool
        ``fs`` is the local file system: the lease is created atomically with a hard link
        (``O_EXCL`` where links are unsupported); elsewhere it is written with a conditional
        put where the backend has one, then read back to check the token.
    owner : str, optional
        Who holds the lease, shown to refused writers; default: this process's command line.
    ttl : float, default=60.0
        Seconds without a heartbeat after which the lease is stale.
    heartbeat : float, optional
        Seconds between heartbeats; default ``ttl / 4``.  Must be below ``ttl``.

    Attributes
    ----------
    token : str
        Random identifier of this lease.
    info : LeaseInfo
        What the lease object says (as last written).
    lost : str or None
        Why the lease was lost while held (a heartbeat found another holder's token), if it was.
    """

    def __init__(self, fs: Any, root: str, url: str, *, local: bool, owner: str | None = None,
                 ttl: float = DEFAULT_TTL, heartbeat: float | None = None) -> None:
        heartbeat = ttl / 4 if heartbeat is None else heartbeat
        if not (ttl > 0 and 0 < heartbeat < ttl):
            raise ValueError(f"lease ttl={ttl!r} and heartbeat={heartbeat!r} must satisfy "
                             "0 < heartbeat < ttl (e.g. ttl=60, heartbeat=15).")
        self._fs, self._url, self._local = fs, url, local
        self._root = root
        self._path = f"{root.rstrip('/')}/{LEASE_FILE}"
        self.token = uuid.uuid4().hex
        self.heartbeat_s = float(heartbeat)
        self.info = LeaseInfo(host=socket.gethostname(), pid=os.getpid(),
                              owner=owner or shlex.join(sys.argv) or "python", token=self.token,
                              started=_now_iso(), heartbeat=time.time(), ttl=float(ttl),
                              host_id=host_id(), pid_start=process_start(os.getpid()))
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        state = "held" if self.held else "lost" if self.lost else "not held"
        return f"<StoreLease {self._url} {state} token={self.token[:8]}>"

    def __enter__(self) -> StoreLease:
        if self._thread is None:
            self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """Whether this process still holds the lease (taken, not released, not lost)."""
        return held_here(self._fs, self._path, self.token)

    # ------------------------------------------------------------------ taking
    def acquire(self) -> StoreLease:
        """Take the lease, or raise StoreLockedError if another live run holds it.

        A stale lease (no heartbeat for its TTL), or one whose holder died on this host, is
        taken over, with a warning in the log.
        """
        if self._thread is not None:
            raise RuntimeError(f"{self!r} was already acquired; take a new lease instead.")
        for _ in range(5):  # retried only when another writer changes the lease meanwhile
            try:
                current = read_lease(self._fs, self._path)
            except ValueError as e:
                logger.warning("%s: taking over an unreadable lease (%s)", self._url, e)
                self._discard(None)
                current = None
            if current is not None:
                gone = None if current.stale() else current.holder_gone()
                if not current.stale() and gone is None:
                    raise StoreLockedError(_locked_message(self._url, current, "Taking its lease"))
                if gone is not None:
                    logger.warning("%s: taking over the lease of %s: %s on this host", self._url,
                                   current.describe(), gone)
                else:
                    logger.warning("%s: taking over the stale lease of %s (TTL %.0f s)",
                                   self._url, current.describe(), current.ttl)
                self._discard(current.token)
            if self._create():
                break
        else:
            raise StoreLockedError(f"{self._url}: could not take the writer lease, other writers "
                                   "kept taking it first; retry when they are done.")
        if not self._local:
            time.sleep(0.05)  # let a concurrent put that raced ours land before reading back
        try:
            back = read_lease(self._fs, self._path)
        except ValueError:
            back = None
        if back is None or back.token != self.token:
            raise StoreLockedError(_locked_message(self._url, back, "Taking its lease")
                                   if back else f"{self._url}: the writer lease vanished while "
                                   "being taken (another writer cleaned it); retry.")
        with _HELD_LOCK:
            _HELD[_lease_key(self._fs, self._path)] = self.token
        self._thread = threading.Thread(target=self._beat, name=f"mkdist-lease-{self.token[:8]}",
                                        daemon=True)
        self._thread.start()
        return self

    def _payload(self) -> bytes:
        i = self.info
        return json.dumps({
            "host": i.host, "host_id": i.host_id, "pid": i.pid, "pid_start": i.pid_start,
            "owner": i.owner, "command": shlex.join(sys.argv),
            "token": i.token, "started": i.started,
            "heartbeat": datetime.fromtimestamp(i.heartbeat, timezone.utc).isoformat(),
            "heartbeat_unix": i.heartbeat, "ttl_s": i.ttl, "heartbeat_s": self.heartbeat_s,
        }, indent=1).encode()

    def _create(self) -> bool:
        """Create the lease object unless one exists; whether this call created it."""
        data = self._payload()
        if self._local:
            os.makedirs(self._root, exist_ok=True)
            tmp = f"{self._path}.{self.token}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                # A hard link appears complete and fails if the name exists: readers never see
                # a half-written lease, and two creators cannot both succeed.
                os.link(tmp, self._path)
                return True
            except FileExistsError:
                return False
            except OSError:  # no hard links on this file system
                try:
                    fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                return True
            finally:
                os.unlink(tmp)
        try:
            self._fs.pipe_file(self._path, data, mode="create")  # conditional put where supported
            return True
        except FileExistsError:
            return False
        except (NotImplementedError, TypeError, ValueError):
            if self._fs.exists(self._path):
                return False
            self._fs.pipe_file(self._path, data)
            return True

    def _discard(self, token: str | None) -> None:
        """Remove the stale lease ``token`` (None: an unreadable one), not a newer lease."""
        if self._local:
            aside = f"{self._path}.{self.token}.stale"
            try:
                os.rename(self._path, aside)
            except FileNotFoundError:
                return
            try:
                moved = read_lease(self._fs, aside)
            except ValueError:
                moved = None
            if token is not None and moved is not None and moved.token != token:
                # Another process replaced the stale lease in between: put its lease back.
                try:
                    os.link(aside, self._path)
                except FileExistsError:
                    pass
            os.unlink(aside)
            return
        try:
            again = read_lease(self._fs, self._path)
        except ValueError:
            again = None
        if again is None or token is None or again.token == token:
            try:
                self._fs.rm_file(self._path)
            except FileNotFoundError:
                pass

    # --------------------------------------------------------------- holding
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                current = read_lease(self._fs, self._path)
            except (OSError, ValueError) as e:
                logger.warning("%s: lease heartbeat could not read the lease (%s)", self._url, e)
                continue
            if current is None or current.token != self.token:
                self._lose("the lease object was removed" if current is None else
                           f"it was taken over by {current.describe()}")
                return
            self.info = replace(self.info, heartbeat=time.time())
            try:
                self._write()
            except OSError as e:  # transient: the next beat retries before the TTL runs out
                logger.warning("%s: lease heartbeat failed (%s)", self._url, e)

    def _write(self) -> None:
        if self._local:
            tmp = f"{self._path}.{self.token}.tmp"
            with open(tmp, "wb") as f:
                f.write(self._payload())
            os.replace(tmp, self._path)  # atomic: readers see the old or the new heartbeat
        else:
            self._fs.pipe_file(self._path, self._payload())

    def _lose(self, why: str) -> None:
        self.lost = why
        with _HELD_LOCK:
            if _HELD.get(_lease_key(self._fs, self._path)) == self.token:
                del _HELD[_lease_key(self._fs, self._path)]
        logger.error("%s: this run lost its writer lease: %s. Its further writes are refused.",
                     self._url, why)

    def release(self) -> None:
        """Stop the heartbeat and remove the lease object (if it is still this lease's)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with _HELD_LOCK:
            was_held = _HELD.get(_lease_key(self._fs, self._path)) == self.token
            if was_held:
                del _HELD[_lease_key(self._fs, self._path)]
        if not was_held:
            return
        try:
            current = read_lease(self._fs, self._path)
        except ValueError:
            current = None
        if current is not None and current.token == self.token:
            try:
                self._fs.rm_file(self._path)
            except FileNotFoundError:
                pass
