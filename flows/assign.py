"""``assign_flow``: label a new batch with a stored model, no refit (the scheduled flow).

Each run measures how far the batch drifted from the data the model was fitted on and says
so in its artifact; with ``fail_on_drift`` a drifted batch fails the flow run, so a
deployment can trigger a refit.  A store that another live run writes (the output, or the
model store while a run rewrites it) is waited for, up to ``lease_wait`` seconds.  Thin: the
run driver's ``drive_assign`` with each step as a Prefect task.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from mkdist.errors import DriftDetectedError, StoreLockedError
from mkdist.pipeline import as_input, dask_client, drive_assign

from .cluster import prefect_step

__all__ = ["assign_flow", "LEASE_POLL_S"]

#: Seconds between two tries of a store another live run holds (a lease check reads one
#: small object; the holder heartbeats every 15 s, so a finer poll gains nothing).
LEASE_POLL_S = 5.0


@flow(name="mkdist-assign", log_prints=True)
def assign_flow(model_store: str, source: Any, output: str, dask_address: str | None = None,
                n_workers: int | None = None, overwrite: bool = False, progress: bool = False,
                connect_timeout: float | None = None, labels_out: str | None = None,
                id_column: str | None = None, drift_thresholds: dict | None = None,
                fail_on_drift: bool = False, report: bool = True, lease_wait: float = 0.0) -> dict:
    """Embed and label the points of ``source`` with the model stored in ``model_store``.

    Parameters
    ----------
    model_store : str
        A finished run store (from ``cluster_flow`` / ``mkdist run``).
    source : str or dict
        New points, same views and features as the training input (a table is read with the
        model's views); or the JSON of a ``mkdist.pipeline.InputSource``.
    output : str
        Store that receives the ``labels`` stage (labels and distances) and the drift record.
    dask_address : str, optional
        Existing scheduler; default a LocalCluster for the run.
    labels_out : str, optional
        Also write every row's id, cluster and distance as Parquet there.
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the model's id column
        when the batch has it, else the row position, in a column named ``row``).
    drift_thresholds : dict, optional
        Overrides of ``mkdist.pipeline.DEFAULT_DRIFT_THRESHOLDS``.
    fail_on_drift : bool, default=False
        Fail the flow run (``DriftDetectedError``) when the batch drifted; the labels are
        stored either way.
    report : bool, default=True
        Write ``<output>.report.html`` (distance distribution, cluster shift, drift table).
    lease_wait : float, default=0
        Seconds to wait, at most, while another live run holds ``output`` or writes
        ``model_store`` (``StoreLockedError``), trying again every ``LEASE_POLL_S`` s; 0 fails
        at once.  Only that error is waited out: bad input, a damaged store or a drift fail
        the run the first time (they would fail again).

    Returns
    -------
    dict
        The assignment summary.
    """
    logger = get_run_logger()
    with dask_client(dask_address, n_workers, connect_timeout=connect_timeout):
        summary = _waiting_out_leases(
            lambda: drive_assign(model_store, as_input(source, id_column=id_column), output, overwrite=overwrite,
                                 progress=progress, labels_out=labels_out, drift_thresholds=drift_thresholds,
                                 report=report, step=prefect_step),
            lease_wait, logger)
    logger.info("assigned %d points to %s", summary["N"], output)
    markdown = summary["markdown"]
    if summary.get("report"):
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


def _waiting_out_leases(call, lease_wait: float, logger) -> Any:
    """``call()``, tried again while it fails with ``StoreLockedError``, for ``lease_wait`` s.

    Safe to repeat: the assignment refuses a held store before it writes anything, and a
    try interrupted later resumes from the output's stage markers.
    """
    deadline = time.monotonic() + max(0.0, float(lease_wait or 0.0))
    while True:
        try:
            return call()
        except StoreLockedError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            pause = min(LEASE_POLL_S, left)
            logger.warning("%s -- trying again in %.0f s (waiting %.0f s more at most, lease_wait)", exc, pause, left)
            time.sleep(pause)
