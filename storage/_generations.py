"""How a run store commits its stages: every write a new generation, a stage the generation
its pointer names.

Stage ``<stage>`` of a store (``<url>`` its root)::

    <url>/<stage>.gen-<uuid>/        one write of the stage: its data, then its completion
                                     marker, set last; never changed once marked
    <url>/<stage>.gen-current.json   the stage's pointer: {"stage", "generation", "digest",
                                     "committed", "retired": [{"generation", "retired",
                                     "retired_unix"}]}

A write goes to a new generation (:meth:`Generations.start`), is marked complete
(:meth:`Generations.mark`), then becomes the stage by one atomic put of the pointer
(:meth:`Generations.point`), so two writers' chunks never mix and a reader, which reads the
pointer once and then only the generation it names, sees one whole version.  The
generations a commit replaced stay listed under ``retired`` for :data:`GENERATION_GRACE_S`
seconds, for the readers that opened them; generations no pointer names are what
unfinished writes left (:meth:`Generations.scan`).

:class:`~mkdist.storage._store.RunStore` is the facade over this module: it refuses what may
not be written (read-only mode, another writer's lease, invalid names, replacing a complete
stage) and verifies stages against their markers; this module finds, writes, commits and
removes generations.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import posixpath
import re
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

import dask
import numpy as np
import zarr
import zarr.storage
from zarr.abc.store import Store as ZarrStore
from zarr.storage import StorePath, WrapperStore

from mkdist.errors import DamagedStageError, StoreError, StoreExistsError

from . import _verify
from ._layout import POINTER
from ._lease import FENCE_DIR, LEASE_FILE, held_lease

if TYPE_CHECKING:
    import xarray as xr
    from dask.delayed import Delayed

__all__ = ["GENERATION_GRACE_S", "POINTER", "Generations", "Stage", "StageState",
           "generation_grace_s", "now_iso", "read_json", "valid_name"]

logger = logging.getLogger("mkdist.storage")

#: Seconds a replaced generation of a stage is kept for the readers that opened it before it
#: was replaced (their lazy arrays still read it); the next commit of the stage or
#: ``clean_partials`` removes it after that.  ``MKDIST_GENERATION_GRACE_S`` overrides it.
GENERATION_GRACE_S = 600.0


StageState = Literal["complete", "incomplete", "damaged", "missing"]

_GENERATION = re.compile(r"(?P<stage>.+)\.gen-[0-9a-f]{32}")
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")
# Written by the last task of a stage's computation into the generation being written: the
# checksums computed by the workers, read back by `Generations.mark`.
_MANIFEST = "mkdist-manifest.json"


@dataclass
class Stage:
    """Where one stage stands: its state, the group holding its data, its marker, problems."""

    name: str
    state: StageState
    group: str | None = None
    marker: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    #: Generations the pointer retired, with the Unix time each was replaced.
    retired: list[tuple[str, float]] = field(default_factory=list)
    #: The group's ``zarr.json`` documents as its verification read them (see
    #: ``_verify.list_stage``), so that opening it reads no metadata again; None until then.
    metadata: Mapping[str, bytes | Exception] | None = field(default=None, repr=False, compare=False)


class Generations:
    """The generations and pointers of one store's stages.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
        The store's file system.
    path : str
        The store's root on ``fs``.
    url : str
        The store's location as zarr and xarray are given it, and as messages name it.
    local : bool
        Whether ``fs`` is the local file system (pointers are then put by rename or link).
    zarr_kw : mapping
        What zarr and xarray are given with ``url`` (``storage_options``), else empty.
    """

    def __init__(self, fs: Any, path: str, url: str, *, local: bool,
                 zarr_kw: Mapping[str, Any]) -> None:
        self._fs, self._path, self._url, self._local = fs, path, url, local
        self._zarr_kw = dict(zarr_kw)
        # generation -> its zarr.json documents as start() wrote them, for mark()'s check
        self._documents: dict[str, dict[str, bytes]] = {}

    # ----------------------------------------------------------------- finding
    def read_json(self, rel: str) -> dict[str, Any] | None:
        """The JSON object in file ``rel``; None if there is none, ValueError if unreadable."""
        return read_json(self._fs, self._abs(rel))

    def meta(self, rel: str) -> dict[str, Any] | None:
        """The parsed ``zarr.json`` of node ``rel``; None if there is none, ValueError if
        it is unreadable."""
        return self.read_json(posixpath.join(rel, "zarr.json"))

    def locate(self, name: str) -> Stage:
        """Where stage ``name`` stands, from its pointer and marker alone (no verification):
        as :meth:`locate_pointer`, or "incomplete" if only unfinished writes of it exist."""
        stage = self.locate_pointer(name)
        if stage.state == "missing" and self.writes_of(name):
            stage.state = "incomplete"
        return stage

    def locate_pointer(self, name: str) -> Stage:
        """Stage ``name`` if its pointer names a generation (complete, or damaged), else
        "missing".  The pointer is read once: the stage is the generation it names."""
        try:
            pointer = self.read_json(name + POINTER)
        except ValueError as e:
            return Stage(name, "damaged", problems=[
                f"its pointer {name}{POINTER} is unreadable ({e})"])
        if pointer is None:
            return Stage(name, "missing")
        group = pointer.get("generation")
        if not isinstance(group, str) or _stage_of(group) != name:
            return Stage(name, "damaged", problems=[
                f"its pointer {name}{POINTER} names {group!r}, no generation of it"])
        retired = []
        for entry in pointer.get("retired") or []:
            try:
                gen, when = entry["generation"], float(entry["retired_unix"])
            except (KeyError, TypeError, ValueError):
                continue  # a malformed entry protects nothing: that generation is a leftover
            if isinstance(gen, str) and _stage_of(gen) == name and gen != group:
                retired.append((gen, when))
        try:
            meta = self.meta(group)
        except ValueError as e:
            return Stage(name, "damaged", group, retired=retired,
                         problems=[f"its group metadata {group}/zarr.json is unreadable ({e})"])
        if _verify.is_marked(meta):
            return Stage(name, "complete", group, meta["attributes"][_verify.MARKER],
                         retired=retired)
        return Stage(name, "damaged", group, retired=retired, problems=[
            f"the generation its pointer names, {group}, is missing or has no marker"])

    def writes_of(self, name: str) -> list[str]:
        """The generations of stage ``name``: committed, retired, or of unfinished writes."""
        parent = posixpath.dirname(name)
        if not self._fs.isdir(self._abs(parent)):
            return []
        children = (posixpath.join(parent, posixpath.basename(p.rstrip("/")))
                    for p in self._fs.ls(self._abs(parent), detail=False))
        return [c for c in children if _stage_of(c) == name]

    def scan(self) -> tuple[dict[str, Stage], list[str]]:
        """The stages in the store (not verified), and what unfinished writes left.

        Leftovers are generations no pointer names (nor retired less than the grace period
        ago), and anything else outside the stages: arrays, groups holding no stage,
        unknown objects.  Walks with fsspec rather than zarr so that groups whose metadata
        was never written (or was already deleted) are found too; never lists inside a
        generation.
        """
        self._fs.invalidate_cache(self._path)  # zarr wrote through another fs instance
        stages: dict[str, Stage] = {}
        writes: dict[str, list[str]] = {}  # stage -> its generations
        strays: list[str] = []

        def visit(rel: str) -> bool:
            """Walk group ``rel``: whether it holds anything to keep."""
            keep = False
            for entry in self._fs.ls(self._abs(rel), detail=True):
                base = posixpath.basename(entry["name"].rstrip("/"))
                child = posixpath.join(rel, base)
                if entry["type"] != "directory":
                    stage = child[:-len(POINTER)] if child.endswith(POINTER) else None
                    if base == "zarr.json" or (not rel and base == LEASE_FILE):
                        continue
                    if stage and valid_name(stage):
                        stages[stage] = self.locate_pointer(stage)
                        keep = True
                    else:
                        strays.append(child)
                    continue
                if not rel and base == FENCE_DIR:
                    continue  # the lease's fence directories (storage._lease)
                if stage := _stage_of(child):
                    writes.setdefault(stage, []).append(child)
                    keep = True
                    continue
                try:
                    is_array = (self.meta(child) or {}).get("node_type") == "array"
                except ValueError:
                    is_array = False
                if is_array:
                    strays.append(child)
                    continue
                n = len(strays)
                if visit(child):
                    keep = True
                    continue
                del strays[n:]  # nothing to keep below: the group goes as a whole
                strays.append(child)
            return keep

        if self._fs.isdir(self._path):
            visit("")
        leftovers = strays
        now, grace = time.time(), generation_grace_s()
        for name, groups in writes.items():
            stage = stages.setdefault(name, Stage(name, "incomplete"))
            if stage.state == "damaged" and stage.group is None:
                continue  # its pointer is unreadable: which generations it names is unknown
            held = {stage.group} | {g for g, t in stage.retired if now - t < grace}
            leftovers += [g for g in groups if g not in held]
        return stages, sorted(leftovers)

    # ----------------------------------------------------------------- writing
    def start(self, name: str, ds: xr.Dataset) -> tuple[str, Delayed]:
        """Start a new generation of stage ``name`` holding ``ds`` (encoded as stored).

        The metadata and the numpy-backed variables, with their checksums, are written now.

        Returns
        -------
        generation : str
            The group written, relative to the store root.
        delayed : dask.delayed.Delayed
            Computing it writes and checksums each Dask-backed block (one task each), then
            stores the manifest that :meth:`mark` reads.

        On any error the generation is removed and the error re-raised.
        """
        generation = f"{name}.gen-{uuid.uuid4().hex}"
        try:
            root = zarr_root_store(self._path, self._url, local=self._local, zarr_kw=self._zarr_kw)
            writer = _NewGroupWriter(root, generation)
            # xarray writes the metadata and the numpy-backed variables now; its Delayed for
            # the Dask-backed ones is dropped: they are written below, with their checksums.
            ds.to_zarr(writer, group=generation, mode="w", consolidated=False, zarr_format=3,
                       compute=False,
                       # Every chunk is stored, even one equal to the fill value, so that a
                       # missing chunk object always means a lost chunk.
                       write_empty_chunks=True)
            writer.flush()
            self._documents[generation] = writer.documents()
            specs, crcs, lazy_crcs = {}, {}, {}
            for var_name, var in ds.variables.items():
                meta = writer.written_json(f"{generation}/{var_name}/zarr.json")
                specs[var_name] = spec = _verify.array_spec(meta)
                if dask.is_dask_collection(var.data):
                    # The workers write through the plain store: the arrays they get carry
                    # the metadata just written, so opening them reads nothing.
                    array = zarr.Array(zarr.AsyncArray(
                        metadata=meta, store_path=StorePath(root, f"{generation}/{var_name}")))
                    array = array.with_config({"write_empty_chunks": True})
                    lazy_crcs[var_name] = _verify.store_with_crcs(var.data, array, spec, label=f"{name}-{var_name}")
                else:
                    crcs[var_name] = _verify.numpy_crcs(np.asarray(var.values), spec)
            delayed = dask.delayed(_put_manifest, pure=False)(
                self._fs, self._abs(posixpath.join(generation, _MANIFEST)), specs, crcs, lazy_crcs)
        except BaseException:
            self.discard(name, generation)
            raise
        return generation, delayed

    def mark(self, generation: str, name: str) -> dict[str, Any]:
        """Set the completion marker of fully written ``generation`` of stage ``name``, from
        its manifest, once the store holds what the workers checksummed.  Returns the marker.

        Raises
        ------
        StoreError
            The manifest is missing: the data was not written (``delayed`` not computed).
        DamagedStageError
            The generation does not hold what was computed (chunk writes were lost).
        """
        try:
            manifest = self.read_json(posixpath.join(generation, _MANIFEST))
        except ValueError:
            manifest = None
        if manifest is None:
            raise StoreError(f"stage {name!r} cannot be finalized: its data was not written. "
                             "Compute PendingStage.delayed (e.g. dask.compute(pending.delayed)) "
                             "before calling finalize().")
        self._fs.rm_file(self._abs(posixpath.join(generation, _MANIFEST)))
        # The workers wrote the chunks through filesystems of their own: a listing this
        # process cached (object stores cache them) would not show them.
        self._fs.invalidate_cache(self._abs(generation))
        marker = {"name": name, "complete": True, "completed": now_iso(),
                  "writer": {"host": socket.gethostname(), "pid": os.getpid()}, **manifest}
        # What the workers wrote must be what they checksummed: chunks lost on the way (a
        # memory:// store written by worker processes, an object store that dropped a put)
        # are caught here rather than by the next reader.
        # The metadata documents are the ones start() wrote into this new group a moment ago:
        # the listing is checked against them rather than read back one by one.
        root = self._abs(generation)
        listing = _verify.list_stage(self._fs, root, known=self._documents.pop(generation, None))
        problems = _verify.quick_problems(self._fs, root, marker, listing)
        if problems:
            raise DamagedStageError(
                f"stage {name!r} was not stored as computed in {self._url}: {'; '.join(problems)}."
                " Nothing was committed; write it again (a memory:// store must be written with "
                "the threaded or synchronous scheduler, not by worker processes).")
        group = zarr.open_group(self._url, path=generation, mode="r+", zarr_format=3,
                                **self._zarr_kw)
        group.attrs[_verify.MARKER] = marker
        return marker

    def point(self, name: str, generation: str, marker: Mapping[str, Any],
              current: Stage) -> None:
        """Make the marked ``generation`` stage ``name`` with one put of its pointer; retire
        the generation it replaces (``current``'s), and remove those retired longer than the
        grace period.

        Raises
        ------
        StoreExistsError
            Another writer committed the stage meanwhile.
        """
        now, grace = time.time(), generation_grace_s()
        retired = [(current.group, now)] if current.group not in (None, generation) else []
        retired += current.retired
        kept = [(g, t) for g, t in retired if now - t < grace]
        expired = [g for g, t in retired if now - t >= grace]
        pointer = name + POINTER
        body = json.dumps({
            "stage": name, "generation": generation, "digest": marker["digest"],
            "committed": now_iso(),
            "retired": [{"generation": g, "retired": _iso(t), "retired_unix": t} for g, t in kept],
        }, indent=1).encode()
        raced = (f"stage {name!r} was committed to {self._url} by another writer while this one "
                 "wrote it; this write was discarded (run one writer per store: "
                 "RunStore.lease).")
        try:
            # Conditional where the stage has no pointer yet: of two writers creating the
            # stage, one wins and the other is told, instead of silently replacing the first.
            self._put(pointer, body, create=current.state in ("missing", "incomplete"))
        except FileExistsError:
            raise StoreExistsError(raced) from None
        try:
            back = self.read_json(pointer)
        except (OSError, ValueError):  # cannot tell: the put succeeded, so assume it stands
            back = None
        if back is not None and back.get("generation") != generation:
            raise StoreExistsError(raced)
        for group in expired:
            try:
                self.remove(group)
            except Exception as e:  # the stage is committed; the generation is a leftover
                logger.warning("%s: could not delete the replaced generation %s (%s); "
                               "clean_partials() will.", self._url, group, e)

    # ---------------------------------------------------------------- removing
    def discard(self, name: str, generation: str) -> None:
        """Remove ``generation`` of a failed write of stage ``name``, unless it was committed.

        Best effort: what cannot be removed (the store is unreachable) is a leftover for
        clean_partials; the error that failed the write is the one worth raising.
        """
        self._documents.pop(generation, None)
        try:
            pointer = self.read_json(name + POINTER)
            if pointer is not None and pointer.get("generation") == generation:
                return  # the pointer was put before the failure: the stage is committed
            self.remove(generation)
        except Exception as e:
            logger.warning("%s: could not remove %s after a failed write (%s); clean_partials() "
                           "will.", self._url, generation, e)

    def delete(self, name: str) -> bool:
        """Remove stage ``name``: its pointer, then all its generations.  Returns whether
        anything of it existed."""
        # The pointer goes first: the stage is gone at once, and what a crash leaves behind
        # is a leftover for clean_partials.
        targets = [name + POINTER] if self._fs.exists(self._abs(name + POINTER)) else []
        targets += self.writes_of(name)
        for target in targets:
            self.remove(target)
        return bool(targets)

    def remove(self, rel: str) -> None:
        """Delete node (or object) ``rel`` if it exists, its zarr.json (and so any marker)
        first."""
        path = self._abs(rel)
        try:
            self._fs.rm_file(posixpath.join(path, "zarr.json"))
        except (FileNotFoundError, NotADirectoryError):
            pass
        if self._fs.exists(path):
            self._fs.rm(path, recursive=True)

    # --------------------------------------------------------------- internals
    def _abs(self, rel: str) -> str:
        return posixpath.join(self._path, rel) if rel else self._path

    def _put(self, rel: str, body: bytes, *, create: bool) -> None:
        """Write object ``rel`` so that readers find the old content or the new, whole.

        Raises FileExistsError if ``create`` and the object exists (where the backend can
        tell: a conditional put; on local disk a hard link, which fails if the name exists).
        """
        path = self._abs(rel)
        lease = held_lease(self._fs, self._abs(LEASE_FILE))
        if lease is not None:
            # This process took the store's lease: the write is fenced by it (it fails, writing
            # nothing, if the lease was taken over while this run was paused).
            lease.fenced_put(path, body, create=create)
            return
        if not self._local:
            self._fs.pipe_file(path, body, mode="create" if create else "overwrite")
            return
        # A plain write truncates, then writes: a reader could find half a pointer.  The
        # new content is written aside, then renamed (or linked) over the name: atomic.
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(body)
        try:
            if not create:
                os.replace(tmp, path)
                return
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:  # no hard links here: the read-back in point() catches a race
                if os.path.exists(path):
                    raise FileExistsError(path) from None
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def zarr_root_store(path: str, url: str, *, local: bool, zarr_kw: Mapping[str, Any],
                    read_only: bool = False) -> ZarrStore:
    """The zarr store at a run store's root, as ``zarr.open_group(url, ...)`` makes it: a
    LocalStore for a local path, an FsspecStore with the storage options for a URL."""
    if local:
        return zarr.storage.LocalStore(path, read_only=read_only)
    return zarr.storage.FsspecStore.from_url(url, storage_options=dict(zarr_kw.get("storage_options") or {}) or None,
                                             read_only=read_only)


class _NewGroupWriter(WrapperStore):
    """The store as xarray's ``to_zarr`` sees it while it creates a new generation group.

    The group is new (its name holds a fresh UUID), so everything inside it is what was
    written through this view: existence checks, listings and re-reads of the metadata just
    written are answered from memory, and nodes outside it (the store root) are read once.
    Written by hand because zarr checks each node and its parents before and after creating
    it: on an object store that is several requests per array (a HEAD, a listing, a re-read
    of each ``zarr.json``), where only the writes are needed.
    """

    def __init__(self, store: ZarrStore, group: str, *, _state: tuple[dict, dict, set] | None = None) -> None:
        super().__init__(store)
        self._group = group.strip("/")
        # key -> bytes (metadata documents) or None (chunks: only their presence is kept)
        self._written: dict[str, bytes | None]
        # key outside the group -> its bytes, or None when it does not exist
        self._outside: dict[str, bytes | None]
        self._written, self._outside, self._unflushed = _state if _state is not None else ({}, {}, set())

    def _with_store(self, store: ZarrStore) -> _NewGroupWriter:
        return type(self)(store, self._group, _state=(self._written, self._outside, self._unflushed))

    def _inside(self, key: str) -> bool:
        return key == self._group or key.startswith(self._group + "/")

    def written_json(self, key: str) -> dict[str, Any]:
        """The JSON document written at ``key`` through this view."""
        raw = self._written.get(key)
        if raw is None:
            raise StoreError(f"{key} was not written while creating {self._group}")
        return json.loads(raw)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if self._inside(key):
            if key not in self._written:
                return None
            raw = self._written[key]
            if raw is None or byte_range is not None:
                return await self._store.get(key, prototype, byte_range)
            return prototype.buffer.from_bytes(raw)
        if byte_range is None and key in self._outside:
            raw = self._outside[key]
            return None if raw is None else prototype.buffer.from_bytes(raw)
        value = await self._store.get(key, prototype, byte_range)
        if byte_range is None:
            self._outside[key] = None if value is None else value.to_bytes()
        return value

    async def exists(self, key: str) -> bool:
        if self._inside(key):
            return key in self._written
        if key in self._outside:
            return self._outside[key] is not None
        return await self._store.exists(key)

    async def set(self, key: str, value: Any) -> None:
        if self._inside(key) and key.endswith("zarr.json"):
            # xarray writes each node's metadata, then rewrites it with the attributes:
            # kept here and put once by flush().
            self._written[key] = value.to_bytes()
            self._unflushed.add(key)
            return
        await self._store.set(key, value)
        if self._inside(key):
            self._written[key] = None  # a chunk: only its presence is kept
        else:
            self._outside[key] = value.to_bytes()

    def documents(self) -> dict[str, bytes]:
        """The group's ``zarr.json`` documents written through this view, by key relative to it."""
        return {k[len(self._group) + 1:]: raw for k, raw in self._written.items()
                if raw is not None and k.endswith("zarr.json") and k not in self._unflushed}

    def flush(self) -> None:
        """Put the metadata documents held back by :meth:`set` (concurrently)."""
        keys, self._unflushed = sorted(self._unflushed), set()
        if not keys:
            return
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        buffer = default_buffer_prototype().buffer

        async def put_all() -> None:
            await asyncio.gather(*(self._store.set(k, buffer.from_bytes(self._written[k])) for k in keys))

        sync(put_all())

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        if await self.exists(key):
            return
        await self.set(key, value)

    async def delete(self, key: str) -> None:
        if key not in self._unflushed:
            await self._store.delete(key)
        self._unflushed.discard(key)
        (self._written if self._inside(key) else self._outside).pop(key, None)

    async def delete_dir(self, prefix: str) -> None:
        prefix = prefix.rstrip("/")
        if not self._inside(prefix):
            await self._store.delete_dir(prefix)
            return
        gone = [k for k in self._written if k == prefix or k.startswith(prefix + "/")]
        if any(k not in self._unflushed for k in gone):  # only what this view wrote can be there
            await self._store.delete_dir(prefix)
        for k in gone:
            del self._written[k]
            self._unflushed.discard(k)

    async def list_dir(self, prefix: str):  # type: ignore[override]
        prefix = prefix.rstrip("/")
        if not self._inside(prefix):
            async for child in self._store.list_dir(prefix):
                yield child
            return
        children = {k[len(prefix) + 1:].split("/")[0] for k in self._written if k.startswith(prefix + "/")}
        for child in sorted(children):
            yield child

    async def list_prefix(self, prefix: str):  # type: ignore[override]
        if not self._inside(prefix.rstrip("/")):
            async for key in self._store.list_prefix(prefix):
                yield key
            return
        for key in sorted(k for k in self._written if k.startswith(prefix)):
            yield key


def read_json(fs: Any, path: str) -> dict[str, Any] | None:
    """The JSON object in file ``path`` on ``fs``; None if there is none, ValueError if it is
    unreadable."""
    try:
        raw = fs.cat_file(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    value = json.loads(raw)  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    if not isinstance(value, dict):
        raise ValueError(f"it holds a JSON {type(value).__name__}, not an object")
    return value


def valid_name(name: Any) -> bool:
    """Whether ``name`` is a stage name: '/'-separated segments, none a generation's."""
    return (isinstance(name, str) and all(_SEGMENT.fullmatch(s) for s in name.split("/"))
            and ".gen-" not in name)


def generation_grace_s() -> float:
    """Seconds a replaced generation is kept: ``MKDIST_GENERATION_GRACE_S``, else
    :data:`GENERATION_GRACE_S`.  Read at each use, not once at import."""
    raw = os.environ.get("MKDIST_GENERATION_GRACE_S")
    if raw is None or not raw.strip():
        return GENERATION_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0:  # NaN included
        raise ValueError(f"MKDIST_GENERATION_GRACE_S={raw!r} is not a number of seconds >= 0 "
                         f"(e.g. {GENERATION_GRACE_S:.0f}).")
    return value


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (as every time the store records)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")


def _stage_of(rel: str) -> str | None:
    """The stage whose generation ``rel`` is, or None."""
    m = _GENERATION.fullmatch(rel)
    return m["stage"] if m else None


def _put_manifest(fs: Any, path: str, specs: Mapping[str, Any], crcs: Mapping[str, Any],
                  lazy_crcs: Mapping[str, Any]) -> None:
    """The last task of a stage's computation: store its manifest for ``mark`` to read.

    Runs after the writes (``lazy_crcs`` are computed by the tasks that write), on whichever
    worker Dask chooses, so the checksums travel through the store rather than back to the
    caller, who computes ``PendingStage.delayed`` for its side effects.
    """
    fs.pipe_file(path, json.dumps(_verify.manifest(specs, {**crcs, **lazy_crcs})).encode())
