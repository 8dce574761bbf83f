"""One writer per run store: a lease object in the store, kept alive by a heartbeat.

A holder is presumed dead when its heartbeats stop for the lease's TTL; on its own host (same
kernel and PID namespace) it is known dead at once when its pid no longer runs, or runs a
process that started at another time (the pid was reused), and its lease is taken over
without waiting for the TTL.

A presumed-dead holder may only have been paused (a stopped VM, a long GC, SIGSTOP, a network
partition), and wake up after its lease was taken over.  So the holder's writes that make
something visible -- its heartbeats, each stage's commit, the root attributes -- are fenced:
each checks, atomically with the write, that the lease is still this one's
(:meth:`StoreLease.fenced_put`), and a holder whose lease was taken over commits nothing more
(:class:`~mkdist.errors.LeaseLostError`).  Each lease carries a generation, one more than the
lease it replaced, that messages name.

- On a local disk each holder has a fence directory, ``.mkdist-lease.json.fence/<generation>.<token>``:
  a fenced write is written into it, then renamed (or linked) from it onto its name.  A run that
  takes the lease over first renames the previous holder's directory away (revokes it); a rename
  or link out of a directory already gone fails.  The file system orders the two renames, so a
  paused holder's write lands before the takeover or not at all.
- On an object store (S3) the lease object is the fence: a takeover replaces it with a
  conditional put (``If-Match`` its ETag as read), each heartbeat and each commit first rewrites
  it with ``If-Match`` the ETag of this holder's last write, which fails once anyone else wrote
  or removed it.  Object stores have no multi-object transaction, so a commit is one conditional
  put of the lease followed by the put of the stage's pointer: a holder paused for longer than the
  TTL exactly between the two could still put that one pointer (a conditional create, which a
  pointer the new holder has put makes fail) -- the gap is the time between two requests, where
  the local fence has none.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
import shutil
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from mkdist.errors import LeaseLostError, StoreLockedError

from ._faults import reaching_storage_failed

__all__ = ["LEASE_FILE", "FENCE_DIR", "DEFAULT_TTL", "LeaseInfo", "StoreLease", "read_lease", "check_writer",
           "held_here", "held_lease", "host_id", "process_start"]

logger = logging.getLogger("mkdist.storage")

#: Name of the lease object at the store root.
LEASE_FILE = ".mkdist-lease.json"
#: The holders' fence directories on a local disk (named after the lease file, so that whatever
#: ignores the lease at the store root ignores them too).
FENCE_DIR = LEASE_FILE + ".fence"
#: Seconds without a heartbeat after which a lease is stale (its holder presumed dead).
DEFAULT_TTL = 60.0

# Leases this process holds: lease path -> token.  A store object of this process may write
# while the token in the store is one of these, whichever RunStore instance took it (the
# pipeline's stage functions reopen the store from its URL).
_HELD: dict[str, str] = {}
_HELD_LOCK = threading.Lock()
# Why a lease is lost when its object is gone: taken over, then released by its new holder.
_GONE = "its lease object is gone (another run took the store over, and released it when it finished)"
# Leases this process took and has not released, held or lost: lease path -> lease.  A write of
# this process to a store it took the lease of goes through that lease's fence.
_LEASES: dict[str, StoreLease] = {}


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
    generation: int = 0

    @classmethod
    def parse(cls, raw: bytes) -> LeaseInfo:
        d = json.loads(raw)
        optional = {k: str(d[k]) if d.get(k) is not None else None for k in ("host_id", "pid_start")}
        return cls(host=str(d["host"]), pid=int(d["pid"]), owner=str(d["owner"]),
                   token=str(d["token"]), started=str(d["started"]),
                   heartbeat=float(d["heartbeat_unix"]), ttl=float(d["ttl_s"]),
                   generation=int(d.get("generation") or 0), **optional)

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


def held_lease(fs: Any, path: str) -> StoreLease | None:
    """The lease this process took on the lease object at ``path`` and has not released (held,
    or lost to a takeover), or None."""
    with _HELD_LOCK:
        return _LEASES.get(_lease_key(fs, path))


def check_writer(fs: Any, path: str, url: str, what: str) -> None:
    """Refuse ``what`` if a live lease of another process (or another holder) holds the store.

    Raises
    ------
    LeaseLostError
        This process held the store's lease and lost it (it was taken over): it writes nothing more.
    StoreLockedError
        The message says who holds the store, where, since when, and what to do.
    """
    mine = held_lease(fs, path)
    if mine is not None and mine.lost:
        raise mine.lost_error()
    try:
        info = read_lease(fs, path)
    except ValueError:  # a torn or hand-edited lease protects nothing: writers proceed
        return
    if mine is not None:
        # This process took the lease: is it still its own?  (Told here, before any work, in
        # the one-line message; the write itself is fenced atomically: StoreLease.fenced_put.)
        mine.confirm(info)
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
        # The fence (module docstring): this holder's directory (local disk), or the ETag of its
        # last write of the lease object (object stores); one fenced write at a time.
        self.generation = 0
        self._fence_dir = ""
        self._etag: str | None = None
        self._fence_lock = threading.Lock()
        # Conditional puts (If-Match) are S3's (s3fs passes them to PutObject); other remote
        # backends are written as before fences: read the lease, compare its token, write.
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        self._conditional = not local and any(p in ("s3", "s3a") for p in protocols)

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
            etag = self._lease_etag()
            try:
                current = read_lease(self._fs, self._path)
            except ValueError as e:
                logger.warning("%s: taking over an unreadable lease (%s)", self._url, e)
                self._revoke_others()
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
            self._set_generation(current)
            if current is not None and self._conditional:
                # One conditional put replaces the stale lease: its holder's next fenced write,
                # made with the ETag of its own last one, fails from now on.
                if self._replace(etag):
                    break
                continue
            if current is not None:
                # Revoked first: a paused holder waking now can no longer put its lease back.
                self._revoke_others()
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
        if self._local:
            self._revoke_others()  # what a holder that crashed left (one that won a race lost it)
        with _HELD_LOCK:
            _HELD[_lease_key(self._fs, self._path)] = self.token
            _LEASES[_lease_key(self._fs, self._path)] = self
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
            "generation": self.generation,
        }, indent=1).encode()

    def _create(self) -> bool:
        """Create the lease object unless one exists; whether this call created it."""
        data = self._payload()
        if self._local:
            os.makedirs(self._root, exist_ok=True)
            # Written from this holder's fence directory, as its heartbeats will be.
            os.makedirs(self._fence_dir, exist_ok=True)
            tmp = f"{self._fence_dir}/lease.{uuid.uuid4().hex}.tmp"
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
            out = self._fs.pipe_file(self._path, data, mode="create")  # conditional put where supported
        except FileExistsError:
            return False
        except (NotImplementedError, TypeError, ValueError):
            if self._fs.exists(self._path):
                return False
            out = self._fs.pipe_file(self._path, data)
        self._etag = _etag_of(out)
        return True

    def _replace(self, etag: str | None) -> bool:
        """Object stores: replace the stale lease whose ETag was ``etag`` by this one, in one
        conditional put; whether it was still that lease."""
        if etag is None:  # no ETag read (a backend without them): remove, then create
            self._discard(None)
            return self._create()
        try:
            out = self._fs.pipe_file(self._path, self._payload(), IfMatch=etag)
        except FileNotFoundError:
            return False  # removed meanwhile: the next try creates it
        except OSError as e:
            if _precondition_failed(e):
                return False  # another writer changed it meanwhile: read it again
            raise
        self._etag = _etag_of(out)
        return True

    def _lease_etag(self) -> str | None:
        """The ETag of the lease object as it is now (object stores), read before its content:
        a write in between changes it, and the conditional put made with it fails."""
        if self._local:
            return None
        try:
            self._fs.invalidate_cache(self._path)
            return _normal_etag(self._fs.info(self._path).get("ETag"))
        except FileNotFoundError:
            return None

    def _set_generation(self, replaced: LeaseInfo | None) -> None:
        """This lease's generation: one more than the lease it replaces and than any fence
        directory left; on a local disk also its fence directory's name."""
        newest = replaced.generation if replaced is not None else 0
        fences = f"{self._root.rstrip('/')}/{FENCE_DIR}"
        if self._local and os.path.isdir(fences):
            for name in os.listdir(fences):
                head = name.split(".", 1)[0]
                if head.isdigit():
                    newest = max(newest, int(head))
        self.generation = newest + 1
        self.info = replace(self.info, generation=self.generation)
        if self._local:
            self._fence_dir = f"{fences}/{self.generation:012d}.{self.token}"

    def _revoke_others(self) -> None:
        """Local disk: rename every other holder's fence directory away, then remove it; their
        fenced writes fail from the rename on."""
        fences = f"{self._root.rstrip('/')}/{FENCE_DIR}"
        if not os.path.isdir(fences):
            return
        mine = os.path.basename(self._fence_dir)
        for name in os.listdir(fences):
            if name == mine or name.startswith("revoked-"):
                continue
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) == self.generation - 1 and name.endswith(".released"):
                continue  # the newest released generation: the counter's memory
            aside = f"{fences}/revoked-{uuid.uuid4().hex}"
            try:
                os.rename(f"{fences}/{name}", aside)
            except FileNotFoundError:
                continue
            shutil.rmtree(aside, ignore_errors=True)

    # ----------------------------------------------------------------- fencing
    def confirm(self, current: LeaseInfo | None) -> None:
        """Raise LeaseLostError (and lose the lease) unless ``current``, the lease object as
        just read, is still this lease and, on a local disk, its fence was not revoked."""
        if self.lost:
            raise self.lost_error()
        if current is None or current.token != self.token:
            self._lose(_GONE if current is None else
                       f"it was taken over by {current.describe()} (generation {current.generation})")
            raise self.lost_error()
        if self._local and self._fence_dir and not os.path.isdir(self._fence_dir):
            self._fenced_off()

    def lost_error(self) -> LeaseLostError:
        """The error a fenced write of a lost lease raises: one line saying what happened."""
        return LeaseLostError(
            f"{self._url}: this run's writer lease (generation {self.generation}) was taken over while "
            f"the run was stopped for longer than its TTL ({self.info.ttl:g} s): {self.lost or 'it is gone'}. "
            "It committed nothing after that; the store holds the other run's work.")

    def fenced_put(self, path: str, body: bytes, *, create: bool = False) -> None:
        """Write object ``path`` (``create``: only if it does not exist) if and only if this
        lease still holds the store, checked atomically with the write (module docstring).

        Raises
        ------
        LeaseLostError
            The lease was taken over (or removed): nothing was written.
        FileExistsError
            ``create`` and ``path`` exists.
        """
        with self._fence_lock:
            if self.lost:
                raise self.lost_error()
            if self._local:
                self._fenced_rename(path, body, create=create)
                return
            if self._conditional:
                self._fenced_beat()
            else:
                self._check_token()
            self._fs.pipe_file(path, body, mode="create" if create else "overwrite")

    def _fenced_rename(self, path: str, body: bytes, *, create: bool) -> None:
        tmp = f"{self._fence_dir}/{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(body)
        except FileNotFoundError:
            self._fenced_off()
        try:
            if create:
                try:
                    os.link(tmp, path)  # fails if the name exists, or if the fence was revoked
                except (FileExistsError, FileNotFoundError):
                    raise
                except OSError:  # no hard links here: the read-back of a commit catches a race
                    if os.path.exists(path):
                        raise FileExistsError(path) from None
                    os.rename(tmp, path)
            else:
                os.rename(tmp, path)
        except FileExistsError:
            raise
        except FileNotFoundError:
            if not os.path.isdir(self._fence_dir):
                self._fenced_off()
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _fenced_beat(self, retried: bool = False) -> None:
        """Object stores: rewrite the lease (a heartbeat) on the condition that it is still the
        object this holder last wrote; on any other outcome the lease is lost."""
        self.info = replace(self.info, heartbeat=time.time())
        if self._etag is None:
            # The put that created it answered without one: ask, and take it only for this
            # lease's own object (read after the ETag: a change in between fails the put below).
            etag = self._lease_etag()
            self._check_token()
            self._etag = etag
        try:
            out = self._fs.pipe_file(self._path, self._payload(), IfMatch=self._etag)
        except FileNotFoundError:
            self._lose(_GONE)
            raise self.lost_error() from None
        except OSError as e:
            if not _precondition_failed(e):
                raise
            etag = self._lease_etag()
            try:
                now = read_lease(self._fs, self._path)
            except ValueError:
                now = None
            if now is not None and now.token == self.token and etag is not None and not retried:
                # Still this lease: a put whose answer was lost (a timeout) landed meanwhile.
                self._etag = etag
                self._fenced_beat(retried=True)
                return
            self._lose(f"it was taken over by {now.describe()} (generation {now.generation})"
                       if now is not None else "it was replaced")
            raise self.lost_error() from None
        self._etag = _etag_of(out)

    def _fenced_off(self) -> None:
        try:
            now = read_lease(self._fs, self._path)
        except ValueError:
            now = None
        self._lose(f"it was taken over by {now.describe()} (generation {now.generation})"
                   if now is not None and now.token != self.token else "its fence was revoked")
        raise self.lost_error() from None


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
                self._write()
            except LeaseLostError:
                return  # _lose logged it
            except Exception as e:
                # The storage out of reach (a partition; botocore's connection errors are no
                # OSErrors): the next beat retries, fenced -- after a takeover it fails.
                if not (isinstance(e, OSError) or reaching_storage_failed(e)):
                    raise
                logger.warning("%s: lease heartbeat failed (%s: %s)", self._url, type(e).__name__, e)

    def _write(self) -> None:
        """One heartbeat, fenced: a holder whose lease was taken over never writes it back
        over the new holder's (it was read, then written unconditionally)."""
        with self._fence_lock:
            if self.lost:
                raise self.lost_error()
            if self._conditional:
                self._fenced_beat()
                return
            self._check_token()
            self.info = replace(self.info, heartbeat=time.time())
            if self._local:
                # Atomic, and from the fence directory: readers see the old or the new heartbeat,
                # and a rename after a takeover revoked the directory fails.
                self._fenced_rename(self._path, self._payload(), create=False)
            else:
                self._fs.pipe_file(self._path, self._payload())

    def _check_token(self) -> None:
        """Lose the lease unless the lease object is still this one (read, not atomic with
        what follows: the fence of backends without one)."""
        current = read_lease(self._fs, self._path)
        if current is None or current.token != self.token:
            self._lose(_GONE if current is None else
                       f"it was taken over by {current.describe()} (generation {current.generation})")
            raise self.lost_error()

    def _lose(self, why: str) -> None:
        if self.lost:
            return
        self.lost = why
        with _HELD_LOCK:
            if _HELD.get(_lease_key(self._fs, self._path)) == self.token:
                del _HELD[_lease_key(self._fs, self._path)]
        # INFO: the next write raises LeaseLostError with this, the one line a command prints.
        logger.info("%s: this run lost its writer lease: %s. Its further writes are refused.", self._url, why)

    def release(self) -> None:
        """Stop the heartbeat and remove the lease object (if it is still this lease's)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with _HELD_LOCK:
            was_held = _HELD.get(_lease_key(self._fs, self._path)) == self.token
            if was_held:
                del _HELD[_lease_key(self._fs, self._path)]
            if _LEASES.get(_lease_key(self._fs, self._path)) is self:
                del _LEASES[_lease_key(self._fs, self._path)]
        if not was_held:
            return
        try:
            current = read_lease(self._fs, self._path)
        except ValueError:
            current = None
        if current is not None and current.token == self.token:
            if self._local and self._fence_dir:
                # Kept, emptied, as the newest released generation: the next lease counts on from it.
                fences = os.path.dirname(self._fence_dir)
                with contextlib.suppress(OSError):
                    os.rename(self._fence_dir, f"{fences}/{self.generation:012d}.released")
                    for name in os.listdir(f"{fences}/{self.generation:012d}.released"):
                        os.unlink(f"{fences}/{self.generation:012d}.released/{name}")
            try:
                self._fs.rm_file(self._path)
            except FileNotFoundError:
                pass


def _etag_of(response: Any) -> str | None:
    """The ETag of a put's response (s3fs returns botocore's), or None."""
    return _normal_etag(response.get("ETag")) if isinstance(response, dict) else None


def _normal_etag(etag: Any) -> str | None:
    return None if etag is None else str(etag)


def _precondition_failed(exc: OSError) -> bool:
    """Whether a conditional put failed its condition (HTTP 412; s3fs raises an OSError)."""
    text = str(exc).lower()
    return "precondition" in text or "pre-condition" in text or "412" in text
