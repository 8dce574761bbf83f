"""Zarr v3 run stores: one clustering run per store; each stage a verified generation, committed
by one atomic put of its pointer.

:class:`RunStore` is the facade: opening and creating stores, provenance, the writer lease,
what may be written, and verifying stages against their markers.  How stages are committed
(generations, pointers, cleaning up) is :mod:`mkdist.storage._generations`; reading a stage
back verified is :mod:`mkdist.storage._stage_read`, checking and committing a write
:mod:`mkdist.storage._stage_write`, the root's provenance :mod:`mkdist.storage._provenance`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import fsspec
import xarray as xr
from fsspec.implementations.local import LocalFileSystem
from zarr.abc.store import Store as ZarrStore

from mkdist.errors import DamagedStageError, DamagedStoreError, StoreExistsError, StoreNotFoundError

from . import _verify
from ._generations import Generations, StageState, generation_grace_s, now_iso, read_json
from ._layout import SCHEMA_VERSION
from ._lease import DEFAULT_TTL, LEASE_FILE, LeaseInfo, StoreLease, check_writer, held_here, read_lease
from ._provenance import _check_schema, _mkdist_version, _run_differences, _to_json
from ._stage_read import Verify, _check_name, _damaged_fix, _StageReading
from ._stage_write import _encoded, _StageWriting, _writable

if TYPE_CHECKING:
    from dask.delayed import Delayed

__all__ = ["SCHEMA_VERSION", "STANDARD_STAGES", "RunStore", "PendingStage"]

logger = logging.getLogger("mkdist.storage")


#: Stages every run may hold; ``stage_status`` always reports these.
STANDARD_STAGES = ("landmarks", "model", "embedding", "labels", "profiles", "kernel_blocks", "metrics")

_MARKER = _verify.MARKER
_PROVENANCE = frozenset({"schema_version", "mkdist_version", "created", "fingerprint", "params",
                         "layout"})


class RunStore(_StageReading, _StageWriting):
    """A Zarr v3 store holding one mkdist clustering run.

    The root group's attributes record the run's provenance; each pipeline stage is an
    xarray Dataset in its own group, written atomically (see :meth:`write_stage`), so a
    reader only ever sees complete stages and a crashed run resumes from its last one.
    A reader sees one whole version of a stage, even while a writer replaces it: the
    version current when it opened the stage, which it keeps reading (lazily) for at least
    :data:`GENERATION_GRACE_S` seconds after the replacement.
    A stage's completion marker records what it holds (shapes, chunking, one checksum per
    chunk), so a stage damaged after it was written is reported (:meth:`stage_status`,
    :meth:`verify_stage`) and refused (:meth:`read_stage`) instead of read as data.
    A run holds the store's writer lease (:meth:`lease`) while it writes; every write of
    another process is refused until the lease is released or expires.

    Use :meth:`create` (new or resumed run) or :meth:`open` (existing run) rather than
    the constructor, which neither touches nor checks the location.

    Parameters
    ----------
    url : str or os.PathLike
        Local directory, or any fsspec URL (``memory://...``, ``file://...``, ``s3://...``).
        Local locations, ``file://`` included, are normalised to an absolute path.
    mode : {"r", "r+"}, default="r"
        ``"r"`` refuses every write.
    storage_options : mapping, optional
        fsspec options of a remote location (endpoint, credentials).  Default: those
        registered for the location in this process, else fsspec's configuration and the
        environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``):
        see :mod:`mkdist.storage._remote`.  Resolved here, in the process that opens the store, and
        carried by the filesystem and Zarr arrays the store hands to Dask tasks, so worker
        processes write with them without credentials of their own.  Never stored.

    Attributes
    ----------
    url : str
        The normalised location, accepted by ``xarray.open_zarr`` and ``zarr.open_group``.
    mode : {"r", "r+"}

    Notes
    -----
    Layout (``schema_version`` 3), the same on local disk and on object stores::

        <url>/zarr.json                  root group; attrs: schema_version, mkdist_version,
                                         created, fingerprint, params, layout="generations"
                                         (+ update_attrs keys)
        <url>/.mkdist-lease.json         the writer lease while a run holds it: host, host_id,
                                         pid, pid_start, owner, command, token, started,
                                         heartbeat, ttl_s, generation
        <url>/.mkdist-lease.json.fence/  local disk: the holders' fence directories
                                         (<generation>.<token>; storage._lease)
        <url>/<stage>.gen-<uuid>/        one write of the stage: xarray Dataset (dimension
                                         names set), attrs incl. the completion marker
                                         mkdist_stage (below); never changed once marked
        <url>/<stage>.gen-current.json   the stage's pointer: {"stage", "generation",
                                         "digest", "committed", "retired": [{"generation",
                                         "retired", "retired_unix"}]}

    Each write is a new generation; the stage is committed by one atomic put of its pointer
    (on local disk a rename of a complete file, elsewhere one object put), so two writers'
    chunks never mix.  A reader reads the pointer once per open and then only the
    generation it names, which stays as it was: it reads one whole version, and no
    per-chunk lookup.  A failed commit leaves the pointer, and so the previous generation,
    as they were.  The generations a commit replaced are listed under ``retired`` and kept
    for :data:`GENERATION_GRACE_S` seconds (``MKDIST_GENERATION_GRACE_S``) after their
    replacement, for the readers that still hold them; the next commit of the stage, or
    :meth:`clean_partials`, removes them after that, with the generations no pointer
    names (unfinished writes).  Retirement times are the committing writer's clock and
    are compared with the cleaning writer's: hosts sharing a store need clocks synchronised
    well within the grace period (as for the lease's TTL).  Other tools read a stage's data
    with ``xr.open_zarr(url, group=store.stage_group(name))``.

    A store of another schema version is refused by :meth:`open` and :meth:`create` (except
    with ``overwrite=True``) with SchemaVersionError, before any stage is read or written.

    The completion marker, set last::

        mkdist_stage = {"name", "complete": true, "completed", "writer": {"host", "pid"},
                        "checksum": "crc32", "digest": "sha256:...",
                        "arrays": {<array>: {"shape", "data_type", "chunk_shape", "n_chunks",
                                             "crc32": [one per chunk, C order], "digest"}}}

    ``crc32`` is ``zlib.crc32`` of a chunk's values as Zarr stores them (after xarray's
    CF encoding), in C order and little-endian; an array's digest is the SHA-256 of its
    entry, the stage's of its arrays' digests.

    A stage name may be nested (``"assignments/batch-2026-11-22"``).  Everything is JSON
    or numeric Zarr arrays: nothing is pickled.

    A ``memory://`` store lives in the process that created it: write and compute its
    stages with the threaded or synchronous scheduler (or an in-process cluster), since
    the workers of a multi-process cluster would write to, and read from, their own memory.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> store = RunStore.create("memory://doc/run.zarr", fingerprint="sha256:0", params={"k": 3})
    >>> store.write_stage("labels", xr.Dataset({"labels": ("sample", np.arange(4))}))
    >>> store.stage_status()["labels"]
    'complete'
    >>> store.read_stage("labels")["labels"].values
    array([0, 1, 2, 3])
    >>> RunStore.create("memory://doc/run.zarr", fingerprint="sha256:1", params={"k": 3})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mkdist.errors.StoreExistsError: memory://doc/run.zarr holds a different run: ...
    >>> store = RunStore.create("memory://doc/run.zarr", fingerprint="sha256:1", params={"k": 3},
    ...                         overwrite=True)
    >>> store.stage_status()["labels"]
    'missing'
    """

    def __init__(self, url: str | os.PathLike[str], mode: Literal["r", "r+"] = "r", *,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        from ._remote import options_for

        if mode not in ("r", "r+"):
            raise ValueError(f"mode={mode!r} is not supported: use 'r' (read-only) or 'r+'.")
        raw = os.fspath(url)
        if "://" not in raw:
            raw = os.path.abspath(os.path.expanduser(raw))
        self._options = options_for(raw, storage_options)
        fs, path = fsspec.core.url_to_fs(raw, **self._options)
        self._fs = fs
        self._local = isinstance(fs, LocalFileSystem)
        # zarr's LocalStore creates parent directories as it writes; fsspec's file:// does
        # not, so local locations are handed to zarr/xarray as plain paths.
        self.url = path if self._local else raw.rstrip("/")
        self._path = path.rstrip("/") or "/"
        self.mode = mode
        # What zarr and xarray are given with the URL: the same options as self._fs (local
        # paths take none: zarr refuses storage_options for a LocalStore).
        self._zarr_kw: dict[str, Any] = {"storage_options": dict(self._options)} if self._options else {}
        # The commit mechanics; this class decides what may be written and verifies stages.
        self._generations = Generations(fs, self._path, self.url, local=self._local,
                                        zarr_kw=self._zarr_kw)
        self._zarr_store: ZarrStore | None = None

    def __repr__(self) -> str:
        return f"RunStore({self.url!r}, mode={self.mode!r})"

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(cls, url: str | os.PathLike[str], *, fingerprint: str, params: Mapping[str, Any],
               overwrite: bool = False, storage_options: Mapping[str, Any] | None = None) -> RunStore:
        """Create the store of a new run, or reopen the same run to resume it.

        Parameters
        ----------
        url : str or os.PathLike
            Local directory or fsspec URL.
        fingerprint : str
            Identifies the input data (e.g. ``"sha256:..."``).
        params : mapping
            Every parameter of the run, JSON-serialisable (numpy scalars are converted).
        overwrite : bool, default=False
            Delete whatever the location holds first -- including the same run -- and start
            a fresh store.

        Returns
        -------
        RunStore
            Opened with ``mode="r+"``.

        Raises
        ------
        StoreExistsError
            The location holds a run with another fingerprint or other params (the message
            names the differences), or non-empty content that is no mkdist store.
        StoreLockedError
            ``overwrite=True`` (or the store is new) while another process's live lease
            holds the location.
        SchemaVersionError
            The location holds a run of another store schema version (``overwrite=True``
            replaces it).
        DamagedStoreError
            The location's root metadata is unreadable (``overwrite=True`` replaces it).
        TypeError
            ``fingerprint`` is not a str, or ``params`` is not a JSON-able mapping.
        """
        if not isinstance(fingerprint, str):
            raise TypeError(f"fingerprint must be a str, got {type(fingerprint).__name__}.")
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping, got {type(params).__name__}.")
        params = _to_json(dict(params), "params")
        store = cls(url, mode="r+", storage_options=storage_options)
        fs, path = store._fs, store._path
        if overwrite:
            store._check_writer("RunStore.create(..., overwrite=True)")
            store._wipe()
        elif fs.exists(path):
            attrs = store._root_attrs()
            if attrs is None:
                if fs.isfile(path) or any(not posixpath.basename(p).startswith(LEASE_FILE)
                                          for p in fs.ls(path, detail=False)):
                    raise StoreExistsError(
                        f"{store.url} exists and is not an mkdist run store; choose another "
                        "location, or pass overwrite=True to delete its content.")
            else:
                _check_schema(attrs, store.url)
                store.check_same_run(fingerprint, params)
                return store
        store._check_writer("RunStore.create(...)")
        root = {"zarr_format": 3, "node_type": "group", "attributes": {
            "schema_version": SCHEMA_VERSION, "mkdist_version": _mkdist_version(),
            "created": now_iso(), "fingerprint": fingerprint, "params": params,
            "layout": "generations"}}
        # Written directly rather than with zarr.open_group(mode="w-"), which refuses a
        # location holding anything, such as the lease of the run creating the store.
        fs.makedirs(path, exist_ok=True)
        try:
            fs.pipe_file(store._abs("zarr.json"), json.dumps(root, indent=2).encode(),
                         mode="create")
        except FileExistsError:
            raise StoreExistsError(f"{store.url} was created by another writer meanwhile; "
                                   "retry to resume it.") from None
        return store

    @classmethod
    def open(cls, url: str | os.PathLike[str], mode: Literal["r", "r+"] = "r", *,
             storage_options: Mapping[str, Any] | None = None) -> RunStore:
        """Open an existing run store.

        Parameters
        ----------
        url : str or os.PathLike
            Local directory or fsspec URL.
        mode : {"r", "r+"}, default="r"

        Raises
        ------
        StoreNotFoundError
            No mkdist run store exists at ``url``.
        SchemaVersionError
            The store was written with another store schema version (by an older or a newer
            mkdist); nothing of it is read.
        """
        store = cls(url, mode=mode, storage_options=storage_options)
        attrs = store._root_attrs()
        if attrs is None:
            raise StoreNotFoundError(
                f"no mkdist run store at {store.url}; create one with RunStore.create(...).")
        _check_schema(attrs, store.url)
        return store

    # --------------------------------------------------------------- provenance
    @property
    def attrs(self) -> dict[str, Any]:
        """A copy of the root attributes (provenance plus :meth:`update_attrs` keys)."""
        return self._root_attrs() or {}

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the run's input data."""
        return self.attrs["fingerprint"]

    @property
    def params(self) -> dict[str, Any]:
        """Parameters of the run."""
        return self.attrs["params"]

    def update_attrs(self, **attrs: Any) -> None:
        """Merge JSON-able values into the root attributes (e.g. a run summary).

        The provenance keys (``schema_version``, ``mkdist_version``, ``created``,
        ``fingerprint``, ``params``, ``layout``) cannot be changed: another run needs
        another store.  Concurrent updaters may overwrite each other's keys
        (read-modify-write).
        """
        self._check_writable()
        self._check_writer("update_attrs()")
        fixed = sorted(_PROVENANCE.intersection(attrs))
        if fixed:
            raise ValueError(f"update_attrs cannot change the run's provenance {fixed}; a "
                             "different run needs its own store (or RunStore.create(..., "
                             "overwrite=True)).")
        # Read, merged and put back as one whole object, through the lease's fence when this
        # process holds it (zarr's attrs.update wrote it in place, unfenced).
        root = read_json(self._fs, self._abs("zarr.json"))
        if root is None:
            raise StoreNotFoundError(f"no mkdist run store at {self.url}; create one with RunStore.create(...).")
        root.setdefault("attributes", {}).update(_to_json(attrs, "attrs"))
        self._generations._put("zarr.json", json.dumps(root, indent=2).encode(), create=False)

    # -------------------------------------------------------------------- lease
    def lease(self, owner: str | None = None, *, ttl: float = DEFAULT_TTL,
              heartbeat: float | None = None) -> StoreLease:
        """Take the store's writer lease: one run writes a store at a time.

        Use it as a context manager around a run's writes::

            with store.lease(owner="mkdist run"):
                store.write_stage(...)

        While held, this process's writes proceed (through any RunStore of this URL) and
        every write of another process is refused with StoreLockedError: :meth:`create`
        with ``overwrite=True``, :meth:`write_stage`, :meth:`delete_stage`,
        :meth:`clean_partials`, :meth:`update_attrs`.  A store nobody holds may be written
        by anyone (as before leases existed).

        Parameters
        ----------
        owner : str, optional
            Who holds the lease, shown to refused writers; default: this process's command.
        ttl : float, default=60.0
            Seconds without a heartbeat after which the lease is stale: a killed run's
            lease expires after ``ttl`` and the next run takes it over (with a warning in
            the ``mkdist.storage`` log).  A run on the killed run's own host does not wait:
            it takes the lease over at once, its holder's pid being gone (or reused by a
            process started later).
        heartbeat : float, optional
            Seconds between heartbeats (a background thread); default ``ttl / 4``.

        Returns
        -------
        StoreLease
            Held already; released by ``with`` (or :meth:`StoreLease.release`).

        Raises
        ------
        StoreLockedError
            Another live run holds the lease; the message names its host, pid, owner, start
            time and last heartbeat, and when its lease would expire.

        Notes
        -----
        The lease object is ``<url>/.mkdist-lease.json``.  On local disk it is created with
        a hard link (``O_EXCL`` where links are unsupported), which one creator wins; on other
        fsspec stores with a conditional put where the backend has one, then read back to
        check the token.  The lease records the holder's host identity (host name, kernel
        boot id, PID namespace) and its process's start time, so that a process sharing
        them can tell a dead holder from a live one.  Each heartbeat checks the token too: a holder whose lease was
        taken over (it stalled for longer than ``ttl``) logs an error and its writes are
        refused from then on.  Staleness compares the holder's clock with the reader's:
        hosts sharing a store need synchronised clocks (well within ``ttl``).
        """
        self._check_writable()
        return StoreLease(self._fs, self._path, self.url, local=self._local, owner=owner,
                          ttl=ttl, heartbeat=heartbeat).acquire()

    def check_same_run(self, fingerprint: str, params: Mapping[str, Any]) -> None:
        """Refuse a run that is not the stored one, as :meth:`create` does (without writing).

        Raises
        ------
        StoreExistsError
            The store holds another input (fingerprint) or other parameters; the message
            names the differences.
        """
        diffs = _run_differences(self.attrs, fingerprint, _to_json(dict(params), "params"))
        if diffs:
            raise StoreExistsError(
                f"{self.url} holds a different run: {'; '.join(diffs)}. Use another "
                "location, or pass overwrite=True to delete the stored run.")

    def check_no_other_writer(self, what: str) -> None:
        """Refuse ``what`` (e.g. "mkdist run") while another process's live lease holds the store.

        Raises
        ------
        StoreLockedError
            Naming the live run's host, pid, start time and last heartbeat.
        """
        self._check_writer(what)

    def lease_holder(self) -> LeaseInfo | None:
        """The live lease on the store (who writes it, since when), or None if none is live."""
        try:
            info = read_lease(self._fs, self._lease_path)
        except ValueError:
            return None
        return info if info is not None and info.live() else None

    # ------------------------------------------------------------------- stages
    def stage_status(self, verify: Verify = "quick") -> dict[str, StageState]:
        """State of every standard stage and of every other stage found.

        Parameters
        ----------
        verify : {"quick", "full"} or None, default="quick"
            How complete stages are checked against their markers.  ``"quick"`` reads
            metadata and lists each stage once (every array's ``zarr.json`` readable, shape,
            data type and chunking as recorded, every recorded chunk object present and
            nothing else); ``"full"`` also reads every chunk and compares its checksum;
            None trusts the markers.

        Returns
        -------
        dict of str to {"complete", "incomplete", "damaged", "missing"}
            The :data:`STANDARD_STAGES` first, in pipeline order, then the other stages
            sorted by name.  ``"incomplete"`` means a writer started but did not finish (it
            crashed, or is still running); ``"damaged"`` that a complete stage no longer
            holds what its marker records (:meth:`verify_stage` says what is wrong).
        """
        found, _ = self._generations.scan()
        for stage in found.values():
            self._check_stage(stage, verify)
        status: dict[str, StageState] = {n: found.pop(n).state if n in found else "missing"
                                         for n in STANDARD_STAGES}
        status.update(sorted((n, s.state) for n, s in found.items()))
        return status

    def stage_token(self, name: str) -> str | None:
        """An identity of a complete stage's content, or None if it is not complete (or damaged).

        The digest of the stage's generation and marker (array names, shapes, chunk counts,
        checksums): equal tokens mean the same stored content, so a reader may reuse what it
        read under a token instead of reading the arrays again.
        """
        stage = self._stage(name, "quick")
        if stage.state != "complete":
            return None
        record = json.dumps({"group": stage.group, "marker": stage.marker}, sort_keys=True, default=str)
        return hashlib.sha256(record.encode()).hexdigest()

    def stage_group(self, name: str) -> str:
        """The Zarr group holding complete stage ``name`` now, relative to :attr:`url`.

        For reading a stage with other tools: ``xr.open_zarr(store.url,
        group=store.stage_group("labels"))`` (unverified, and decoded as xarray decodes).
        It is the stage's current generation, ``<name>.gen-<uuid>``; a writer replacing the
        stage later leaves it as it is for :data:`GENERATION_GRACE_S` seconds.

        Raises
        ------
        StoreNotFoundError, IncompleteStageError, DamagedStageError
            As :meth:`read_stage`.
        """
        stage = self._stage(name, "quick")
        self._refuse_unfinished(stage)
        if stage.state == "damaged":
            raise DamagedStageError(f"stage {name!r} in {self.url} is damaged: "
                                    f"{'; '.join(stage.problems)}. {_damaged_fix(name)}")
        return stage.group

    def is_complete(self, name: str, *, verify: Verify = "quick") -> bool:
        """Whether stage ``name`` was written completely and is not damaged.

        The default quick check costs a few small metadata reads and one listing of the
        stage; ``verify`` is as in :meth:`stage_status`.
        """
        return self._stage(name, verify).state == "complete"

    def verify_stage(self, name: str, full: bool = False) -> list[str]:
        """What is wrong with complete stage ``name``.

        Parameters
        ----------
        name : str
        full : bool, default=False
            Also read every chunk and compare its checksum (reads the whole stage);
            otherwise the quick check of :meth:`stage_status`.

        Returns
        -------
        list of str
            One message per problem, naming the store, the stage, the array and the chunks;
            empty if the stage holds what its marker records.

        Raises
        ------
        StoreNotFoundError, IncompleteStageError
            As :meth:`read_stage`: there is no complete stage to verify.
        """
        stage = self._stage(name, "full" if full else "quick")
        self._refuse_unfinished(stage)
        return [f"stage {name!r} in {self.url}: {p}" for p in stage.problems]

    def read_stage(self, name: str) -> xr.Dataset:
        """Open a complete stage lazily (Dask-backed, chunked as stored), checked as it is read.

        The stage is quick-checked first (see :meth:`stage_status`); then each chunk's
        checksum is compared when the returned Dask arrays compute it, in the same task
        that reads it: verification costs no extra pass.

        The returned Dataset is a snapshot: it reads the version of the stage that was
        current when it was opened, even if a writer replaces the stage meanwhile, provided
        it is computed within :data:`GENERATION_GRACE_S` seconds of that replacement.

        Raises
        ------
        StoreNotFoundError
            No such stage; the message lists the stages that exist.
        IncompleteStageError
            The stage's writer did not finish.
        DamagedStageError
            The stage no longer holds what its marker records; the message names the store,
            the stage and the array.  Also raised when computing the returned data finds a
            chunk that cannot be decoded or whose checksum differs (naming the chunk too).
        StoreNotFoundError
            Also raised when computing the returned data, if the version it reads was
            replaced and then removed after its grace period.
        """
        stage = self._stage(name, "quick")
        self._refuse_unfinished(stage)
        if stage.state == "damaged":
            raise DamagedStageError(f"stage {name!r} in {self.url} is damaged: "
                                    f"{'; '.join(stage.problems)}. {_damaged_fix(name)}")
        return self._open_verified(stage)

    def write_stage(self, name: str, dataset: xr.Dataset, *, overwrite: bool = False,
                    compute: Callable[[Any], Any] | None = None) -> None:
        """Write a Dataset as stage ``name``, atomically, with its checksums.

        Dask-backed variables are computed on the active scheduler (the distributed client,
        if any), their chunks written in parallel, and stored with the Dask chunks; the task
        that writes a chunk also computes its checksum, so checksums cost no extra pass.

        Parameters
        ----------
        name : str
            Stage name; ``/`` nests it (``"assignments/batch-2026-11-22"``).
        dataset : xarray.Dataset
            Numeric variables, JSON-able attrs.  Dimension names are stored.
        overwrite : bool, default=False
            Replace a complete stage of that name.  A damaged stage is replaced without it
            (it holds nothing worth keeping), with a warning in the log.
        compute : callable, optional
            Computes the writing tasks (a ``Delayed``) instead of ``Delayed.compute()``
            (see :meth:`PendingStage.commit`).

        Raises
        ------
        StoreExistsError
            The stage is already complete and ``overwrite=False``, or ``name`` is a group of
            other stages, or another writer committed the stage meanwhile.
        StoreLockedError
            Another process's live lease holds the store (see :meth:`lease`).
        DamagedStageError
            The written group does not hold what was computed (chunk writes were lost);
            nothing was committed.

        Notes
        -----
        The data goes to a new generation, ``<name>.gen-<uuid>``; then the completion
        marker is set on it, last; then the stage's pointer is set to name it (one atomic
        put, so two writers' chunks never mix in one stage, and a reader finds the old
        version or the new one, whole).  The generation replaced is kept for readers that
        opened it, for :data:`GENERATION_GRACE_S` seconds; this commit removes the ones
        retired longer ago.  On any error the new generation is removed and the error
        re-raised, and the previous stage, if any, stays as it was.  With a parallel
        scheduler, tasks already running when another one fails may still write chunks
        after that cleanup; such leftovers are never read as a stage and are removed by
        :meth:`clean_partials`.
        """
        self.write_stage_lazy(name, dataset, overwrite=overwrite).commit(compute)

    def write_stage_lazy(self, name: str, dataset: xr.Dataset, *,
                         overwrite: bool = False) -> PendingStage:
        """Start writing stage ``name``; the Dask-backed data is written when computed.

        Lets several stages (or other outputs) be computed in one ``dask.compute`` call.
        Metadata and numpy-backed variables (and their checksums) are written now; each
        Dask-backed block is written and checksummed by one task of ``delayed``.

        Returns
        -------
        PendingStage
            Compute its ``delayed``, then call ``finalize()``; on failure call ``abort()``.

        See Also
        --------
        write_stage : the eager version, with the same checks and guarantees.
        """
        _check_name(name)
        self._check_writable()
        self._check_writer(f"write_stage({name!r})")
        self._check_target(name, overwrite)  # fail before any computation
        generation_grace_s()  # a bad MKDIST_GENERATION_GRACE_S too, not once the data is written
        generation, delayed = self._generations.start(name, _encoded(_writable(dataset)))
        return PendingStage(self, name, generation, delayed, overwrite)

    def delete_stage(self, name: str, *, missing_ok: bool = False) -> None:
        """Delete stage ``name`` and all its generations (do not call while it is written).

        Unlike a commit, this keeps no generation for the grace period: a reader still
        computing data it read from the stage fails (StoreNotFoundError).

        Raises
        ------
        StoreNotFoundError
            Nothing of that name exists and ``missing_ok=False``.
        """
        _check_name(name)
        self._check_writable()
        self._check_writer(f"delete_stage({name!r})")
        if not self._generations.delete(name) and not missing_ok:
            raise StoreNotFoundError(f"stage {name!r} does not exist in {self.url}.")

    def clean_partials(self) -> list[str]:
        """Remove what unfinished writes left: everything outside the committed stages.

        That is generations no pointer names, generations a commit replaced more than
        :data:`GENERATION_GRACE_S` seconds ago, and stray arrays, groups or objects outside
        any stage.  Committed stages, damaged ones included, are kept (see
        :meth:`delete_stage`), and so are replaced generations still within their grace
        period, which readers may hold.

        Refused while another process's live lease holds the store, so its writes in
        progress are never touched.  Within the lease holder, call it when none of its own
        writes is running (the pipeline does at the start of a run): it also removes the
        group of a write in progress.

        Returns
        -------
        list of str
            The removed groups and objects, relative to the store root, sorted.
        """
        self._check_writable()
        self._check_writer("clean_partials()")
        _, leftovers = self._generations.scan()
        for rel in leftovers:
            self._generations.remove(rel)
        return leftovers

    # ---------------------------------------------------------------- internals
    def _abs(self, rel: str) -> str:
        return posixpath.join(self._path, rel) if rel else self._path

    def _root_attrs(self) -> dict[str, Any] | None:
        """Root attributes if the location is an mkdist store (v3 group with schema_version)."""
        try:
            meta = read_json(self._fs, self._abs("zarr.json"))
        except ValueError as e:
            raise DamagedStoreError(
                f"{self.url}/zarr.json, the run store's root metadata, is unreadable ({e}): the "
                "store is damaged. Re-create the run with RunStore.create(..., overwrite=True) "
                "(`mkdist run --overwrite`), or restore that file from a backup.") from None
        attrs = (meta or {}).get("attributes") or {}
        if meta is None or meta.get("node_type") != "group" or "schema_version" not in attrs:
            return None
        return attrs

    @property
    def _lease_path(self) -> str:
        return self._abs(LEASE_FILE)

    def _check_writer(self, what: str) -> None:
        """Refuse ``what`` while a live lease of another process holds the store."""
        check_writer(self._fs, self._lease_path, self.url, what)

    def _wipe(self) -> None:
        """Delete the location's content, root metadata first; keep this process's lease."""
        fs, path = self._fs, self._path
        if not fs.exists(path):
            return
        if fs.isfile(path):
            fs.rm_file(path)
            return
        try:  # first: a crash while deleting leaves no half run that looks like a store
            fs.rm_file(self._abs("zarr.json"))
        except FileNotFoundError:
            pass
        try:
            lease = read_lease(fs, self._lease_path)
        except ValueError:
            lease = None
        if lease is None or not held_here(fs, self._lease_path, lease.token):
            fs.rm(path, recursive=True)
            return
        for child in fs.ls(path, detail=False):
            # the lease, and its fence directories (storage._lease), stay
            if not child.rstrip("/").startswith(self._lease_path):
                fs.rm(child, recursive=True)


@dataclass(frozen=True, eq=False)
class PendingStage:
    """A stage being written by :meth:`RunStore.write_stage_lazy`.

    Attributes
    ----------
    store : RunStore
    name : str
        The stage's final name.
    partial : str
        The generation the data is written to, ``<name>.gen-<uuid>``.
    delayed : dask.delayed.Delayed
        Computing it writes the Dask-backed variables.
    overwrite : bool
        Whether ``finalize`` may replace a complete stage of the same name.
    """

    store: RunStore
    name: str
    partial: str
    delayed: Delayed
    overwrite: bool = False

    def commit(self, compute: Callable[[Delayed], Any] | None = None) -> None:
        """Compute ``delayed``, then :meth:`finalize`; on failure :meth:`abort` and re-raise.

        Parameters
        ----------
        compute : callable, optional
            Runs the computation instead of ``delayed.compute()`` (e.g. with a progress bar).
        """
        try:
            compute(self.delayed) if compute is not None else self.delayed.compute()
        except BaseException:
            self.abort()
            raise
        self.finalize()

    def finalize(self) -> None:
        """Mark the stage complete and commit it (after ``delayed`` was computed): its pointer
        names the new generation.

        Only call it once the computation succeeded: the marker asserts every chunk is written.
        On failure the new generation is removed and the error re-raised.
        """
        try:
            self.store._commit(self.partial, self.name, self.overwrite)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Remove the generation being written (the stage stays as it was).

        Best effort: a generation it cannot remove is a leftover for
        :meth:`RunStore.clean_partials`; the generation of a committed stage is never removed.
        """
        self.store._generations.discard(self.name, self.partial)


# ---------------------------------------------------------------------- helpers
