"""The names of a run store's layout that readers outside the storage layer need, with no
heavy import: the schema version and a committed stage's pointer object.

``mkdist._pipeline._rerun`` answers "this store already holds this run" from these before
Zarr, xarray or Dask load; ``_store`` and ``_generations`` write with the same names, so the
two cannot drift apart.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "POINTER"]

#: Version of the on-disk layout this mkdist writes, and the only one it reads: every stage
#: a generation named by a pointer (snapshot reads, issue 23).
SCHEMA_VERSION = 3

#: Suffix of a stage's pointer object: ``<stage>.gen-current.json`` names its generation.
POINTER = ".gen-current.json"
