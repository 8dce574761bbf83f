"""Prefect flows over the mkdist library (installed as ``mkdist.flows``).

``cluster_flow`` runs a whole clustering job, ``assign_flow`` labels new data with a stored
model.  Both run against an existing Dask scheduler or a LocalCluster started for the run.
"""

from .assign import assign_flow
from .cluster import cluster_flow

__all__ = ["cluster_flow", "assign_flow"]
