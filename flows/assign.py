"""``assign_flow``: label a new batch with a stored model, no refit (the scheduled flow).

Each run measures how far the batch drifted from the data the model was fitted on and says
so in its artifact; with ``fail_on_drift`` a drifted batch fails the flow run, so a
deployment can trigger a refit.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mkdist.errors import DriftDetectedError
from mkdist.pipeline import assign, assignment_summary, write_report

from ._runtime import dask_client, retry_transient

_TASK = dict(cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[5, 30],
             retry_condition_fn=retry_transient)


@task(name="assign-new-points", **_TASK)
def assign_task(model_store: str, source: Any, output: str, overwrite: bool, progress: bool,
                labels_out: str | None, id_column: str | None, drift_thresholds: dict | None) -> dict:
    return assignment_summary(assign(model_store, source, output, overwrite=overwrite, progress=progress,
                                     labels_out=labels_out, id_column=id_column,
                                     drift_thresholds=drift_thresholds))


@task(name="assignment-report", **_TASK)
def report_task(output: str) -> str:
    return write_report(output)


@flow(name="mkdist-assign", log_prints=True)
def assign_flow(model_store: str, source: Any, output: str, dask_address: str | None = None,
                n_workers: int | None = None, overwrite: bool = False, progress: bool = False,
                connect_timeout: float | None = None, labels_out: str | None = None,
                id_column: str | None = None, drift_thresholds: dict | None = None,
                fail_on_drift: bool = False, report: bool = True) -> dict:
    """Embed and label the points of ``source`` with the model stored in ``model_store``.

    Parameters
    ----------
    model_store : str
        A finished run store (from ``cluster_flow`` / ``mkdist run``).
    source : str
        New points, same views and features as the training input.
    output : str
        Store that receives the ``labels`` stage (labels and distances) and the drift record.
    dask_address : str, optional
        Existing scheduler; default a LocalCluster for the run.
    labels_out : str, optional
        Also write every row's id, cluster and distance as Parquet there.
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the row position).
    drift_thresholds : dict, optional
        Overrides of ``mkdist.pipeline.DEFAULT_DRIFT_THRESHOLDS``.
    fail_on_drift : bool, default=False
        Fail the flow run (``DriftDetectedError``) when the batch drifted; the labels are
        stored either way.
    report : bool, default=True
        Write ``<output>.report.html`` (distance distribution, cluster shift, drift table).
    """
    logger = get_run_logger()
    with dask_client(dask_address, n_workers, connect_timeout=connect_timeout) as client:
        logger.info("Dask dashboard: %s", client.dashboard_link)
        summary = assign_task(model_store, source, output, overwrite, progress, labels_out, id_column,
                              drift_thresholds)
    logger.info("assigned %d points to %s", summary["N"], output)
    markdown = summary["markdown"]
    if report:
        summary["report"] = report_task(output)
        markdown = f"Report (figures): `{summary['report']}`\n\n" + markdown
    create_markdown_artifact(markdown, key="mkdist-assign-summary", description=f"assign {output}")
    if summary["drifted"]:
        reasons = "; ".join(summary["drift"]["reasons"])
        logger.warning("the batch drifted from the fit: %s", reasons)
        create_markdown_artifact(f"# mkdist: drift detected\n\n{reasons}\n\nConsider refitting the model "
                                 f"(`{model_store}`).\n", key="mkdist-assign-drift",
                                 description=f"DRIFT in {output}")
        if fail_on_drift:
            raise DriftDetectedError(f"the batch in {output} drifted from the fit: {reasons}")
    return summary
