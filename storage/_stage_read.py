"""Reading a committed stage back: its name checked, verified against its completion marker
(quick: listing and sizes; full: every chunk's checksum), and opened with its arrays read through
checksum checks, the metadata the verification read served from memory.  :class:`_StageReading`
holds the :class:`RunStore` methods that do it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import xarray as xr
import zarr
from zarr.abc.store import Store as ZarrStore
from zarr.storage import StorePath, WrapperStore

from mkdist.errors import DamagedStageError, IncompleteStageError, StoreNotFoundError

from . import _verify
from ._faults import reaching_storage_failed
from ._generations import Stage, valid_name, zarr_root_store

#: How far a stage is verified: "quick" (listing and sizes), "full" (every chunk's checksum), None (not).
Verify = Literal["quick", "full"] | None

_MARKER = _verify.MARKER


def _check_name(name: str) -> str:
    """``name`` if it is a valid stage name, else ValueError."""
    if not valid_name(name):
        raise ValueError(f"invalid stage name {name!r}: use '/'-separated segments of letters, "
                         "digits and '_.=+-' (not starting with '.', '=', '+' or '-', and without "
                         "'.gen-'), e.g. 'assignments/batch-2026-11-22'.")
    return name


def _known_metadata(stage: Stage) -> dict[str, bytes] | None:
    """The group's and its arrays' ``zarr.json`` as the stage's verification read them, or
    None when that read is not at hand (the stage was not verified) or was incomplete."""
    docs = stage.metadata
    if not docs or not isinstance(docs.get("zarr.json"), bytes) or not stage.marker:
        return None
    wanted = ["zarr.json", *(f"{n}/zarr.json" for n in stage.marker.get("arrays", {}))]
    if not all(isinstance(docs.get(rel), bytes) for rel in wanted):
        return None
    return {rel: docs[rel] for rel in wanted}


class _KnownMetadataStore(WrapperStore):
    """A read-only view of a zarr store that answers, from memory, the metadata reads and the
    listing of one group whose ``zarr.json`` documents are already known; everything else
    (chunks, other nodes) goes to the wrapped store.

    Written by hand: zarr's consolidated metadata would do this, but only for groups written
    consolidated (and it is outside the Zarr v3 specification); this reuses what the stage's
    verification read anyway.
    """

    def __init__(self, store: ZarrStore, group: str, documents: Mapping[str, bytes]) -> None:
        super().__init__(store)
        self._group = group.strip("/")
        self._documents = {f"{self._group}/{rel}": raw for rel, raw in documents.items()}
        self._children = ["zarr.json", *sorted(rel.split("/")[0] for rel in documents if "/" in rel)]

    def _with_store(self, store: ZarrStore) -> _KnownMetadataStore:
        group_docs = {k[len(self._group) + 1:]: v for k, v in self._documents.items()}
        return type(self)(store, self._group, group_docs)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        raw = self._documents.get(key)
        if raw is None or byte_range is not None:
            return await self._store.get(key, prototype, byte_range)
        return prototype.buffer.from_bytes(raw)

    async def exists(self, key: str) -> bool:
        return key in self._documents or await self._store.exists(key)

    async def list_dir(self, prefix: str):  # type: ignore[override]
        if prefix.strip("/") == self._group:
            for child in self._children:
                yield child
        else:
            async for child in self._store.list_dir(prefix):
                yield child


def _damaged_fix(name: str) -> str:
    return (f"Its data cannot be trusted: delete it with delete_stage({name!r}) and recompute it "
            "(re-running the pipeline rewrites damaged stages).")


class _StageReading:
    """The stage-reading methods of :class:`mkdist.storage._store.RunStore` (a mixin: they use its
    filesystem, location and generations)."""

    def _stage(self, name: str, verify: Verify) -> Stage:
        return self._check_stage(self._generations.locate(_check_name(name)), verify)

    def _check_stage(self, stage: Stage, verify: Verify) -> Stage:
        """Verify a complete stage (``verify`` as in stage_status); damaged if problems."""
        if stage.state != "complete" or verify is None:
            return stage
        self._fs.invalidate_cache(self._path)  # zarr wrote through another fs instance
        listing = _verify.list_stage(self._fs, self._abs(stage.group))
        stage.problems = _verify.quick_problems(self._fs, self._abs(stage.group), stage.marker, listing)
        stage.metadata = listing.metadata
        if not stage.problems and verify == "full":
            try:
                group = zarr.open_group(self.url, path=stage.group, mode="r", zarr_format=3,
                                        **self._zarr_kw)
            except Exception as e:
                if reaching_storage_failed(e):  # says nothing about the stage: not "damaged"
                    raise
                stage.problems = [f"its group cannot be opened ({type(e).__name__}: {e})"]
            else:
                stage.problems = _verify.full_problems(group, stage.marker)
        if stage.problems:
            stage.state = "damaged"
        return stage

    def _refuse_unfinished(self, stage: Stage) -> None:
        """Raise unless ``stage`` is complete or damaged (something was committed)."""
        if stage.state == "incomplete":
            raise IncompleteStageError(
                f"stage {stage.name!r} in {self.url} is incomplete: its writer did not finish "
                "(it crashed or is still running). Re-running the pipeline resumes the run and "
                "rewrites this stage.")
        if stage.state == "missing":
            found, _ = self._generations.scan()
            listing = ", ".join(f"{n} ({s.state})" for n, s in sorted(found.items())) or "none"
            raise StoreNotFoundError(
                f"stage {stage.name!r} does not exist in {self.url}; stages found: {listing}.")

    def _open_verified(self, stage: Stage) -> xr.Dataset:
        """The Dataset of a quick-checked stage, its arrays read through checksum checks."""
        where = f"stage {stage.name!r} in {self.url}"
        try:
            known = _known_metadata(stage)
            if known is None:
                raw = xr.open_zarr(self.url, group=stage.group, consolidated=False, zarr_format=3,
                                   chunks=None, decode_cf=False, create_default_indexes=False,
                                   **self._zarr_kw)
                group = zarr.open_group(self.url, path=stage.group, mode="r", zarr_format=3,
                                        **self._zarr_kw)
                arrays = {n: group[n] for n in raw.variables}
            else:
                # The verification just read every zarr.json of the group: xarray and zarr are
                # handed those documents instead of reading each one again (on an object
                # store, a request or two per array, per read of the stage).
                root = self._zarr_root()
                # Opened without CF decoding, so that its variables hold the stored values the
                # checksums cover; decoded (lazily) once the checked arrays replace them.
                raw = xr.open_zarr(_KnownMetadataStore(root, stage.group, known), group=stage.group,
                                   consolidated=False, zarr_format=3, chunks=None, decode_cf=False,
                                   create_default_indexes=False)
                arrays = {n: zarr.Array(zarr.AsyncArray(
                    metadata=json.loads(known[f"{n}/zarr.json"]),
                    store_path=StorePath(root, f"{stage.group}/{n}"))) for n in raw.variables}
        except Exception as e:
            if reaching_storage_failed(e):  # the network, not the stage: raised as it is
                raise
            raise DamagedStageError(f"{where} cannot be opened ({type(e).__name__}: {e}). "
                                    f"{_damaged_fix(stage.name)}") from e
        variables = {}
        for var_name, var in raw.variables.items():
            spec = stage.marker["arrays"].get(var_name)
            if spec is None:  # excluded by the quick check; kept as a guard
                raise DamagedStageError(f"{where}: array {var_name!r} is not recorded in its "
                                        f"marker. {_damaged_fix(stage.name)}")
            data = _verify.verified_dask(arrays[var_name], spec, var.dtype,
                                         where=f"{where}: array {var_name!r}",
                                         fix=_damaged_fix(stage.name))
            if var_name in raw.dims:  # an index: loaded now (as xarray does), in this process
                data = data.compute(scheduler="synchronous")
            variables[var_name] = xr.Variable(var.dims, data, var.attrs, var.encoding)
        ds = xr.Dataset({n: v for n, v in variables.items() if n not in raw.coords},
                        coords={n: variables[n] for n in raw.coords}, attrs=raw.attrs)
        ds = xr.decode_cf(ds)
        ds.attrs.pop(_MARKER, None)
        return ds

    def _zarr_root(self) -> ZarrStore:
        """A read-only zarr store at the store's root, made once."""
        if self._zarr_store is None:
            self._zarr_store = zarr_root_store(self._path, self.url, local=self._local, zarr_kw=self._zarr_kw,
                                               read_only=True)
        return self._zarr_store
