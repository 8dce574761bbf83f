"""Writing a stage: the Dataset made ready and encoded as the store keeps it, the target
checked (what may be replaced, where a stage may sit), and a written generation committed.
:class:`_StageWriting` holds the :class:`RunStore` methods that do it."""

from __future__ import annotations

import logging

import xarray as xr

# The function xarray's Zarr backend encodes each variable with (CF conventions, dtype
# encoding): applied before writing so that the checksums cover exactly the stored values.
from xarray.backends.zarr import encode_zarr_variable

from mkdist.errors import StoreError, StoreExistsError

from . import _verify
from ._generations import Stage

logger = logging.getLogger("mkdist.storage")

_MARKER = _verify.MARKER

# Encoding a stage may carry over.  Chunk keys are dropped on purpose: the stored chunks are
# the data's own (Dask) chunks, and stale ``chunks`` from a store the data was read from
# would conflict with them.
_ENCODING_KEYS = frozenset({"compressors", "filters", "serializer", "dtype", "_FillValue"})


def _writable(dataset: xr.Dataset) -> xr.Dataset:
    """A shallow copy of ``dataset`` ready for a stage group (the input is not modified)."""
    if not isinstance(dataset, xr.Dataset):
        raise TypeError(f"a stage is an xarray.Dataset, got {type(dataset).__name__}.")
    ds = dataset.copy(deep=False)
    # A marker copied from another store's stage would make the new generation look
    # complete before its data is written.
    ds.attrs.pop(_MARKER, None)
    for var in ds.variables.values():
        var.encoding = {k: v for k, v in var.encoding.items() if k in _ENCODING_KEYS}
    return ds


def _encoded(dataset: xr.Dataset) -> xr.Dataset:
    """``dataset`` with every variable encoded as xarray's Zarr backend stores it.

    Encoding is idempotent, so ``to_zarr`` stores these variables unchanged (the same Dask
    arrays: the write and checksum tasks share their blocks) and the checksums computed on
    them are those of the stored values.
    """
    variables = {k: encode_zarr_variable(v, name=k, zarr_format=3)
                 for k, v in dataset.variables.items()}
    return xr.Dataset({k: variables[k] for k in dataset.data_vars},
                      coords={k: variables[k] for k in dataset.coords}, attrs=dataset.attrs)


class _StageWriting:
    """The stage-writing checks of :class:`mkdist.storage._store.RunStore` (a mixin: they use its
    filesystem, location and generations, and :class:`mkdist.storage._stage_read._StageReading`)."""

    def _check_writable(self) -> None:
        """Refuse a write in mode "r"."""
        if self.mode == "r":
            raise StoreError(f"{self.url} was opened read-only; use RunStore.open(url, mode='r+') "
                             "to write to it.")

    def _check_target(self, name: str, overwrite: bool) -> Stage:
        """Refuse replacing a complete stage (unless overwrite) or a group, or nesting in one.

        A damaged stage may be replaced: it holds nothing worth keeping.  Returns the stage
        as it stands.
        """
        parts = name.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            try:
                meta = self._generations.meta(parent) or {}
            except ValueError:
                meta = {}
            if (self._generations.locate_pointer(parent).state != "missing"
                    or meta.get("node_type") == "array"):
                raise StoreExistsError(f"cannot write stage {name!r} inside stage {parent!r}.")
        stage = self._stage(name, "quick")
        if stage.state == "damaged":
            logger.warning("%s: replacing damaged stage %r (%s)", self.url, name,
                           "; ".join(stage.problems))
            return stage
        if stage.state != "complete" and self._fs.isdir(self._abs(name)):
            raise StoreExistsError(
                f"{name!r} in {self.url} is not a stage written by mkdist (a group of stages?); "
                f"delete it with delete_stage({name!r}) first.")
        if stage.state == "complete" and not overwrite:
            raise StoreExistsError(f"stage {name!r} is already complete in {self.url}; pass "
                                   "overwrite=True to replace it.")
        return stage

    def _commit(self, generation: str, name: str, overwrite: bool) -> None:
        """Mark the fully written ``generation`` complete and make it stage ``name``."""
        marker = self._generations.mark(generation, name)
        # Again: another writer may have taken the store, or finished this stage, meanwhile.
        self._check_writer(f"committing stage {name!r}")
        current = self._check_target(name, overwrite)
        self._generations.point(name, generation, marker, current)
