"""``assign_flow``: label a new batch with a stored model, no refit (the scheduled flow).

Each run measures how far the batch drifted from the data the model was fitted on and says
so in its artifact; with ``refit_on_drift`` a drifted batch starts a run of the cluster
deployment that refits the model on it, and with ``fail_on_drift`` the flow run then fails,
so its state says the model needed a refit.  A store that another live run writes (the
nightly output, or the model store while a refit replaces it) is waited for, up to
``lease_wait`` seconds.  Thin: the run driver's ``drive_assign`` with each step as a Prefect
task.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from mkdist.errors import DriftDetectedError, InputValidationError, StoreLockedError
from mkdist.pipeline import as_input, dask_client, drive_assign, refit_inputs

from .cluster import prefect_step

__all__ = ["assign_flow", "refit_parameters", "REFIT_DEPLOYMENT", "LEASE_POLL_S"]

#: The deployment a drifted batch's refit runs (``deploy/prefect.yaml``): flow/deployment name.
REFIT_DEPLOYMENT = "mkdist-cluster/cluster-on-demand"
#: Seconds between two tries of a store another live run holds (a lease check reads one
#: small object; the holder heartbeats every 15 s, so a finer poll gains nothing).
LEASE_POLL_S = 5.0


@flow(name="mkdist-assign", log_prints=True)
def assign_flow(model_store: str, source: Any, output: str, dask_address: str | None = None,
                n_workers: int | None = None, overwrite: bool = False, progress: bool = False,
                connect_timeout: float | None = None, labels_out: str | None = None,
                id_column: str | None = None, drift_thresholds: dict | None = None,
                fail_on_drift: bool = False, report: bool = True, lease_wait: float = 0.0,
                refit_on_drift: bool = False, refit_store: str | None = None,
                refit_deployment: str = REFIT_DEPLOYMENT, missing: str | None = None) -> dict:
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
        Existing scheduler; default the ``MKDIST_DASK_ADDRESS`` environment variable, else a
        LocalCluster for the run.
    labels_out : str, optional
        Also write every row's id, cluster and distance as Parquet there.
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the model's id column
        when the batch has it, else the row position, in a column named ``row``).
    drift_thresholds : dict, optional
        Overrides of ``mkdist.pipeline.DEFAULT_DRIFT_THRESHOLDS``.
    fail_on_drift : bool, default=False
        Fail the flow run (``DriftDetectedError``) when the batch drifted; the labels are
        stored either way (and the refit started first, with ``refit_on_drift``).
    report : bool, default=True
        Write ``<output>.report.html`` (distance distribution, cluster shift, drift table).
    lease_wait : float, default=0
        Seconds to wait, at most, while another live run holds ``output`` or writes
        ``model_store`` (``StoreLockedError``), trying again every ``LEASE_POLL_S`` s; 0 fails
        at once.  Only that error is waited out: bad input, a damaged store or a drift fail
        the run the first time (they would fail again).
    refit_on_drift : bool, default=False
        When the batch drifted, start a run of the deployment ``refit_deployment`` (not
        waited for) that fits the model's method and parameters anew on this batch and
        writes it to ``refit_store``.
    refit_store : str, optional
        Where the refit writes (replacing what is there).  Default: ``model_store`` itself,
        so the next assign labels with the refitted model (assigns meanwhile wait for it,
        given ``lease_wait``).
    refit_deployment : str, default="mkdist-cluster/cluster-on-demand"
        ``<flow name>/<deployment name>`` of a ``cluster_flow`` deployment on this Prefect API.
    missing : {"refuse", "impute"}, optional
        The batch's missing cells (default: the source's own, else as the model's run did);
        "impute" fills them with the model's fill values.

    Returns
    -------
    dict
        The assignment summary; with a refit started, ``refit`` names its flow run.
    """
    logger = get_run_logger()
    with dask_client(dask_address, n_workers, connect_timeout=connect_timeout):
        summary = _waiting_out_leases(
            lambda: drive_assign(model_store, as_input(source, id_column=id_column, missing=missing), output,
                                 overwrite=overwrite,
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
        next_step = f"Consider refitting the model (`{model_store}`)."
        if refit_on_drift:
            summary["refit"] = _start_refit(refit_deployment, refit_parameters(
                model_store, source, refit_store=refit_store, dask_address=dask_address, id_column=id_column))
            next_step = (f"Refit started: flow run `{summary['refit']['flow_run_name']}` of "
                         f"`{refit_deployment}`, writing `{summary['refit']['store']}`.")
            logger.warning("%s", next_step)
        create_markdown_artifact(f"# mkdist: drift detected\n\n{reasons}\n\n{next_step}\n", key="mkdist-assign-drift",
                                 description=f"DRIFT in {output}")
        if fail_on_drift:
            raise DriftDetectedError(f"the batch in {output} drifted from the fit: {reasons}"
                                     + (f" ({next_step})" if refit_on_drift else ""))
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


def refit_parameters(model_store: str, source: Any, *, refit_store: str | None = None,
                     dask_address: str | None = None, id_column: str | None = None) -> dict[str, Any]:
    """Parameters of a ``cluster_flow`` run that refits ``model_store``'s model on ``source``.

    The model's method and every parameter it was fitted with (the stored ``RunConfig``,
    seed included) on the new batch, read with the model's views
    (``mkdist.pipeline.refit_inputs``), as the run's request: the refit plans it when it runs
    (the store may have changed by then).  The whole request is given, so none of the cluster
    deployment's defaults (its demo input, its label column) applies.

    Parameters
    ----------
    model_store : str
        The finished run store whose model drifted.
    source : str or dict
        The drifted batch, as given to ``assign_flow``.
    refit_store : str, optional
        Where the refit writes; default ``model_store`` (replaced: ``overwrite=True``).
    dask_address, id_column
        As given to ``assign_flow``.

    Returns
    -------
    dict
        JSON-able parameters of ``cluster_flow``: ``plan`` (the request's JSON) and ``dask_address``.
    """
    batch, store, config = refit_inputs(model_store, source, store=refit_store, id_column=id_column)
    batch = {k: v for k, v in batch.to_json().items() if k not in ("storage_options", "label_column")}
    return {"plan": {"source": batch, "store": store, "config": config.to_json(), "labels_out": None,
                     "overwrite": True, "report": True},
            "dask_address": dask_address}


def _start_refit(deployment: str, parameters: dict[str, Any]) -> dict[str, str]:
    """Create the refit's flow run on the Prefect API (a worker of the deployment's pool runs
    it); returns its id, name and store.  Not awaited: the refit may take hours, and the
    assign's own result (its labels) is complete."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound
    from prefect.runtime import flow_run as this_run

    try:
        # One refit per assign run, even if this flow run is retried or re-entered.
        run = run_deployment(deployment, parameters=parameters, timeout=0, as_subflow=False,
                             tags=["mkdist", "refit"], idempotency_key=f"mkdist-refit-of-{this_run.id}")
    except ObjectNotFound:
        raise InputValidationError(
            f"refit_on_drift: no deployment {deployment!r} on this Prefect API; deploy it "
            "(prefect deploy --all --prefect-file deploy/prefect.yaml) or set refit_deployment") from None
    return {"flow_run_id": str(run.id), "flow_run_name": run.name, "deployment": deployment,
            "store": parameters["plan"]["store"]}
