"""A Zarr v3 run store: one root group per clustering run, one subgroup per stage.

Layout::

    <url>/zarr.json                 root attrs: schema_version, mkdist_version, created,
                                    fingerprint (of the input), params (of the run), summary
    <url>/<stage>/...               an xarray Dataset (named dimensions), complete
    <url>/<stage>.partial-<uuid>/   a stage being written (or left by a crashed writer)

A stage is written to a temporary sibling group, its completion marker (the group attribute
``mkdist_stage``) is set last, and only then is the group moved to its final name; readers
accept a group only under its final name *and* with the marker.  A crash at any point leaves
either no stage or a complete one under the final name, never a partial one.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import posixpath
import uuid
from typing import Any

import fsspec

from mkdist.errors import (
    IncompleteStageError, SchemaVersionError, StoreError, StoreExistsError, StoreNotFoundError,
)

__all__ = ["RunStore", "SCHEMA_VERSION", "STANDARD_STAGES"]

#: Version of the layout above.  Bump on incompatible changes; readers refuse newer stores.
SCHEMA_VERSION = 1
#: Stages every status report lists, in pipeline order.
STANDARD_STAGES = ("landmarks", "model", "embedding", "labels", "kernel_blocks", "metrics")
_MARKER = "mkdist_stage"
_PARTIAL = ".partial-"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=float))


class RunStore:
    """The Zarr store of one run.  Build it with :meth:`create` or :meth:`open`.

    Parameters
    ----------
    url : str or os.PathLike
        Local directory or fsspec URL (``memory://``, ``s3://``, ``file://`` ...).
    mode : {"r", "r+"}
        Read-only stores refuse writes.

    Attributes
    ----------
    url : str
    fingerprint : str
        Identifies the input the run was made from.
    params : dict
        The run's parameters.
    """

    def __init__(self, url: Any, mode: str = "r"):
        if mode not in ("r", "r+"):
            raise ValueError(f"mode={mode!r} must be 'r' or 'r+'.")
        self.url = os.fspath(url)
        self.mode = mode
        self._fs, self._root = fsspec.core.url_to_fs(self.url)
        self._local = "file" in (self._fs.protocol if isinstance(self._fs.protocol, tuple) else (self._fs.protocol,))
        # Zarr opens local paths with its LocalStore, URLs with FsspecStore: give each its form.
        self._zarr_url = self._root if self._local else self.url

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(cls, url: Any, *, fingerprint: str, params: dict, overwrite: bool = False) -> RunStore:
        """Create a store for a run, or reopen the store of the same run to resume it.

        Raises
        ------
        StoreExistsError
            The location holds a different run (other fingerprint or parameters) or other
            data, and ``overwrite`` is False.
        SchemaVersionError
            The location holds a store written by a newer mkdist.
        """
        import zarr

        import mkdist

        params = _jsonable(params)
        store = cls(url, mode="r+")
        if store._exists():
            attrs = store._root_attrs()
            if attrs is None:
                if not overwrite and store._fs.ls(store._root):
                    raise StoreExistsError(
                        f"{store.url} exists and is not an mkdist store; choose another location or pass "
                        "overwrite=True to replace it."
                    )
            else:
                store._check_schema(attrs)
                same = attrs.get("fingerprint") == fingerprint and attrs.get("params") == params
                if same:
                    return store
                if not overwrite:
                    what = []
                    if attrs.get("fingerprint") != fingerprint:
                        what.append(f"input fingerprint {attrs.get('fingerprint')} != {fingerprint}")
                    old = attrs.get("params") or {}
                    diff = sorted(k for k in set(old) | set(params) if old.get(k) != params.get(k))
                    if diff:
                        what.append("parameters " + ", ".join(f"{k}: {old.get(k)!r} -> {params.get(k)!r}" for k in diff))
                    raise StoreExistsError(
                        f"{store.url} holds a different run ({'; '.join(what)}); use another store or pass "
                        "overwrite=True to replace it."
                    )
            store._fs.rm(store._root, recursive=True)
        root = zarr.open_group(store._zarr_url, mode="w", zarr_format=3)
        root.attrs.update({"schema_version": SCHEMA_VERSION, "mkdist_version": mkdist.__version__,
                           "created": _now(), "fingerprint": fingerprint, "params": params})
        return store

    @classmethod
    def open(cls, url: Any, mode: str = "r") -> RunStore:
        """Open an existing store; refuses a missing one and one with a newer schema."""
        store = cls(url, mode=mode)
        attrs = store._root_attrs() if store._exists() else None
        if attrs is None:
            raise StoreNotFoundError(f"no mkdist store at {store.url}.")
        store._check_schema(attrs)
        return store

    def _exists(self) -> bool:
        return self._fs.exists(self._root)

    def _root_attrs(self) -> dict | None:
        path = posixpath.join(self._root, "zarr.json")
        if not self._fs.exists(path):
            return None
        meta = json.loads(self._fs.cat_file(path))
        attrs = meta.get("attributes", {})
        return attrs if "schema_version" in attrs else None

    @staticmethod
    def _check_schema(attrs: dict) -> None:
        version = attrs.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store schema_version={version!r} was written by a newer mkdist "
                f"({attrs.get('mkdist_version')}); this mkdist reads up to {SCHEMA_VERSION}: upgrade mkdist."
            )

    # ------------------------------------------------------------------ attributes
    @property
    def attrs(self) -> dict:
        return dict(self._root_attrs() or {})

    @property
    def fingerprint(self) -> str | None:
        return self.attrs.get("fingerprint")

    @property
    def params(self) -> dict:
        return dict(self.attrs.get("params") or {})

    def update_attrs(self, **values: Any) -> None:
        """Merge JSON-able values into the root attributes."""
        import zarr

        self._check_writable()
        zarr.open_group(self._zarr_url, mode="r+").attrs.update(_jsonable(values))

    def _check_writable(self) -> None:
        if self.mode != "r+":
            raise StoreError(f"{self.url} is open read-only; open it with mode='r+' to write.")

    # ------------------------------------------------------------------ stages
    def _path(self, name: str) -> str:
        return posixpath.join(self._root, name)

    def _stage_meta(self, name: str) -> dict | None:
        path = posixpath.join(self._path(name), "zarr.json")
        if not self._fs.exists(path):
            return None
        return json.loads(self._fs.cat_file(path)).get("attributes", {})

    def is_complete(self, name: str) -> bool:
        """True when the stage exists under its final name with its completion marker."""
        meta = self._stage_meta(name)
        return bool(meta and meta.get(_MARKER, {}).get("complete"))

    def _children(self, prefix: str = "") -> list[str]:
        base = self._path(prefix) if prefix else self._root
        if not self._fs.exists(base):
            return []
        out = []
        for entry in self._fs.ls(base, detail=True):
            if entry["type"] == "directory":
                out.append(posixpath.relpath(entry["name"].rstrip("/"), self._root.rstrip("/")))
        return out

    def stage_status(self) -> dict[str, str]:
        """``{stage: "complete" | "incomplete" | "missing"}`` for the standard stages and any
        other stage present (nested ones such as ``assignments/<name>`` included)."""
        names: list[str] = list(STANDARD_STAGES)
        partial_of: set[str] = set()
        stack = self._children()
        while stack:
            child = stack.pop()
            base, sep, _ = child.partition(_PARTIAL)
            if sep:
                partial_of.add(base)
                continue
            if self._stage_meta(child) is not None and self._stage_meta(child).get(_MARKER):
                if child not in names:
                    names.append(child)
            else:  # an intermediate group (e.g. "assignments") or a stage without a marker
                grand = self._children(child)
                if grand:
                    stack.extend(grand)
                elif child not in names:
                    names.append(child)
        status = {}
        for name in names:
            if self.is_complete(name):
                status[name] = "complete"
            elif self._stage_meta(name) is not None or name in partial_of:
                status[name] = "incomplete"
            else:
                status[name] = "missing"
        return status

    def write_stage(self, name: str, dataset, *, overwrite: bool = False) -> None:
        """Write an xarray Dataset as stage ``name``, atomically.

        Dask-backed variables are written chunk by chunk on the active scheduler (their chunks
        become the Zarr chunks); NumPy variables are written whole.

        Raises
        ------
        StoreExistsError
            The stage is already complete and ``overwrite`` is False.
        """
        import zarr

        self._check_writable()
        if self.is_complete(name) and not overwrite:
            raise StoreExistsError(f"stage {name!r} of {self.url} is complete; pass overwrite=True to replace it.")
        tmp = f"{name}{_PARTIAL}{uuid.uuid4().hex}"
        try:
            ds = dataset.copy()
            for var in ds.variables.values():
                var.encoding = {}  # encodings of a source store must not leak into this one
            ds.to_zarr(self._zarr_url, group=tmp, mode="w", consolidated=False, zarr_format=3)
            group = zarr.open_group(self._zarr_url, path=tmp, mode="r+")
            group.attrs[_MARKER] = {"name": name, "complete": True, "completed": _now()}
            old = None
            if self._fs.exists(self._path(name)):
                # Keep the old stage until the new one is in place: a crash in between leaves a
                # complete replacement under a temporary name, which clean_partials removes.
                old = f"{name}.old-{uuid.uuid4().hex}"
                self._move(name, old)
            self._move(tmp, name)
            if old is not None:
                self._fs.rm(self._path(old), recursive=True)
        except BaseException:
            if self._fs.exists(self._path(tmp)):
                self._fs.rm(self._path(tmp), recursive=True)
            raise

    def _move(self, src: str, dst: str) -> None:
        if self._local:
            # A directory rename is atomic on a local file system.
            os.rename(self._path(src), self._path(dst))
        else:
            self._fs.mv(self._path(src), self._path(dst), recursive=True)

    def read_stage(self, name: str):
        """Open stage ``name`` lazily as an xarray Dataset (Dask-backed variables).

        Raises
        ------
        StoreNotFoundError
            The stage does not exist.
        IncompleteStageError
            The stage was started but never completed.
        """
        import xarray as xr

        if not self.is_complete(name):
            status = self.stage_status()
            if status.get(name) == "incomplete":
                raise IncompleteStageError(
                    f"stage {name!r} of {self.url} is incomplete: its writer did not finish. Re-running the "
                    "pipeline with the same input and parameters resumes it."
                )
            have = sorted(k for k, v in status.items() if v == "complete")
            raise StoreNotFoundError(f"stage {name!r} not found in {self.url}; complete stages: {have}.")
        return xr.open_zarr(self._zarr_url, group=name, consolidated=False)

    def delete_stage(self, name: str) -> None:
        self._check_writable()
        if self._fs.exists(self._path(name)):
            self._fs.rm(self._path(name), recursive=True)

    def clean_partials(self) -> list[str]:
        """Remove groups left by crashed writers; returns their names."""
        removed = []
        stack = self._children()
        while stack:
            child = stack.pop()
            leaf = posixpath.basename(child)
            if _PARTIAL in leaf or ".old-" in leaf:
                if self.mode == "r+":
                    self._fs.rm(self._path(child), recursive=True)
                removed.append(child)
            elif self._stage_meta(child) is not None and not self._stage_meta(child).get(_MARKER):
                stack.extend(self._children(child))
        return removed

    def __repr__(self) -> str:
        return f"RunStore({self.url!r}, mode={self.mode!r})"


