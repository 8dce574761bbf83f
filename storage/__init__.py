"""Zarr/xarray store layer for mkdist runs (installed as ``mkdist.storage``).

:class:`RunStore` holds one run: a schema-versioned root group whose attributes record the
input fingerprint and parameters, and one xarray-readable group per stage, written
atomically (temporary group, completion marker, move).  Models are arrays + JSON: no pickle.
"""

from ._runstore import SCHEMA_VERSION, STANDARD_STAGES, RunStore

__all__ = ["RunStore", "SCHEMA_VERSION", "STANDARD_STAGES"]
