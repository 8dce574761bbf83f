"""``assign_flow``: label a new batch with a stored model, no refit (the scheduled flow)."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mkdist.pipeline import assign, assignment_summary

from ._runtime import dask_client, retry_transient


@task(name="assign-new-points", cache_policy=NO_CACHE, persist_result=False, retries=2,
      retry_delay_seconds=[5, 30], retry_condition_fn=retry_transient)
def assign_task(model_store: str, source: Any, output: str, overwrite: bool, progress: bool) -> dict:
    return assignment_summary(assign(model_store, source, output, overwrite=overwrite, progress=progress))


@flow(name="mkdist-assign", log_prints=True)
def assign_flow(model_store: str, source: Any, output: str, dask_address: str | None = None,
                n_workers: int | None = None, overwrite: bool = False, progress: bool = False,
                connect_timeout: float | None = None) -> dict:
    """Embed and label the points of ``source`` with the model stored in ``model_store``.

    Parameters
    ----------
    model_store : str
        A finished run store (from ``cluster_flow`` / ``mkdist run``).
    source : str
        New points, same views and features as the training input.
    output : str
        Store that receives the ``labels`` stage (sample,).
    dask_address : str, optional
        Existing scheduler; default a LocalCluster for the run.
    """
    with dask_client(dask_address, n_workers, connect_timeout=connect_timeout):
        summary = assign_task(model_store, source, output, overwrite, progress)
    get_run_logger().info("assigned %d points to %s", summary["N"], output)
    create_markdown_artifact(summary["markdown"], key="mkdist-assign-summary", description=f"assign {output}")
    return summary
