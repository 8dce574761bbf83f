"""Zarr/xarray store layer for mkdist runs (installed as ``mkdist.storage``)."""
