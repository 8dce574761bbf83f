"""Zarr run stores for mkdist runs (installed as ``mkdist.storage``).

A :class:`RunStore` holds one clustering run in a Zarr v3 group: the run's provenance in
the root attributes (``schema_version``, ``mkdist_version``, ``created``, ``fingerprint``,
``params``) and each pipeline stage as an xarray Dataset in its own group, a generation
committed by one atomic put of the stage's pointer, so that readers only ever see complete
stages (one whole version, even while a writer replaces it) and a crashed run resumes.
Each stage's completion marker records its arrays' shapes, chunking and per-chunk
checksums, so a stage damaged later is reported and refused rather than read as data; a
writer lease keeps a second run from writing the store while one is live.

Public API
----------
RunStore        : create/open a run store; write, read, verify, list and delete stages
PendingStage    : a stage being written lazily (``RunStore.write_stage_lazy``)
StoreLease      : a run's writer lease on a store (``RunStore.lease``)
LeaseInfo       : what a lease records (``RunStore.lease_holder``)
SCHEMA_VERSION  : on-disk layout version this mkdist writes and reads (others are refused)
STANDARD_STAGES : stage names ``RunStore.stage_status`` always reports
GENERATION_GRACE_S : seconds a replaced stage version stays readable (MKDIST_GENERATION_GRACE_S)
"""

from __future__ import annotations

import importlib

# Names load on first use (PEP 562): ``mkdist.storage._remote`` -- the object-store options the
# CLI resolves before anything heavy -- must not pull zarr and xarray in with the package.
_PUBLIC = {"LeaseInfo": "._lease", "StoreLease": "._lease", "GENERATION_GRACE_S": "._generations",
           "SCHEMA_VERSION": "._store", "STANDARD_STAGES": "._store", "PendingStage": "._store",
           "RunStore": "._store"}

__all__ = ["RunStore", "PendingStage", "StoreLease", "LeaseInfo", "SCHEMA_VERSION",
           "STANDARD_STAGES", "GENERATION_GRACE_S"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    if isinstance(value, type):
        value.__module__ = __name__  # documented and pickled as mkdist.storage.X
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
