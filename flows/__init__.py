"""Prefect flows over the mkdist library (installed as ``mkdist.flows``)."""
