"""``cluster_flow``: a whole clustering run as a Prefect flow over a Dask cluster.

Thin by design: the flow takes the run's plan as one parameter (``RunPlan.to_json()``, or a
request written by hand that the flow plans once), the run is ``mkdist.pipeline``'s run
driver (the same loop as ``mkdist.cluster`` and ``mkdist run``), and every step of it --
open the store, each stage of the method's plan, the metrics, the labels out, the report --
runs as a Prefect task through the driver's ``step`` hook, handed the run's context.  The
store's stage markers make each stage skip work that is already complete, so re-running the
flow with the same inputs resumes a failed run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mkdist.pipeline import STEP_NAMES, RunPlan, dashboard_link, drive_run, run_scheduler, summary_markdown

from ._runtime import retry_transient

# Resume comes from the store's stage markers, not from Prefect's result cache: the store is
# the one source of truth a later run (on any machine) can read, so results are not persisted.
_TASK = dict(cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[5, 30],
             retry_condition_fn=retry_transient)

#: Prefect task names of the stages (the stages themselves come from the method's plan).
STAGE_TASK_NAMES = {k: v for k, v in STEP_NAMES.items() if k in ("landmarks", "model", "embedding", "labels")}


def prefect_step(name: str, fn, *args: Any, **kwargs: Any) -> Any:
    """The run driver's ``step`` hook: each step of the run as a Prefect task named ``name``."""
    return task(name=name, **_TASK)(fn)(*args, **kwargs)


@flow(name="mkdist-cluster", log_prints=True)
def cluster_flow(plan: dict, dask_address: str | None = None, n_workers: int | None = None,
                 connect_timeout: float | None = None, progress: bool = False) -> dict:
    """Cluster every point of a run's input; results in its store.

    Parameters
    ----------
    plan : dict
        The run, as JSON: a plan made elsewhere (``RunPlan.to_json()``: what ``mkdist run
        --prefect`` hands over; rebuilt, not checked or decided again), or a request to plan
        here, written by hand (a deployment's parameters, a refit)::

            {"source": "input.parquet",            # or an InputSource's JSON: {"location": ...,
                                                   #   "views", "id_column", "label_column", "missing"}
             "store": "runs/run.zarr",
             "config": {"n_clusters": 10,           # a RunConfig's JSON: "method", "random_state",
                        "params": {"kernels": "rbf-grid", "n_landmarks": 1000}},  # estimator parameters
             "labels_out": None, "overwrite": False, "report": True}

        ``source``: Parquet (a file, a directory, a glob), a Zarr group / xarray dataset with
        one variable per view, or .npy/.npz, a path or fsspec URL (see ``mkdist.load_views``);
        its ``label_column`` adds ACC/NMI/ARI/purity to the metrics.  ``config.n_clusters``:
        K, or "auto" / [k_min, k_max] (the model stage chooses K and stores the choice);
        ``config.method``: a registered method, or "auto" (chosen from the input's shape, and
        its stage plan decides which stage tasks run).  Same input and parameters as the
        store holds: the run resumes.  ``overwrite`` replaces what is in the way (a store of
        another run, a labels output of another run); ``report`` (default True) writes
        ``<store>.report.html`` and links it from the summary artifact.
    dask_address : str, optional
        Scheduler of an existing Dask cluster (``tcp://host:8786``); default: the
        ``MKDIST_DASK_ADDRESS`` environment variable, else the flow's own process for an input
        of at most ``MKDIST_IN_PROCESS_MAX_ROWS`` rows (1,000,000 unless set), or a LocalCluster
        with ``n_workers`` worker processes for this run (given ``n_workers``: always one);
        see ``mkdist.pipeline.run_scheduler``.
    connect_timeout : float, optional
        Seconds to wait for ``dask_address`` (default 10, or ``MKDIST_CONNECT_TIMEOUT``).
    progress : bool, default=False
        Progress lines of the passes over the rows on stderr.

    Returns
    -------
    dict
        The run summary also stored in the store's metrics stage.
    """
    logger = get_run_logger()
    plan = RunPlan.from_json(plan)
    store = str(plan.store)
    if plan.opened is not None and plan.opened.message():
        logger.info("%s", plan.opened.message())
    # The lease is held by this (the flow's) process, where every stage task runs.
    with run_scheduler(dask_address, n_workers, n_rows=plan.n_rows, connect_timeout=connect_timeout,
                       echo=logger.info) as scheduler:
        logger.info("computing on: %s", scheduler.describe())
        if scheduler.client is not None:
            # Only a link that opens: a scheduler without bokeh serves a "needs bokeh" page there.
            link = dashboard_link(scheduler.client)
            logger.info("Dask dashboard: %s", link or "not served by this scheduler (it needs bokeh>=3.1 "
                        "installed next to the scheduler)")
        result = drive_run(plan, progress=progress, step=prefect_step,
                           owner="mkdist cluster_flow", echo=logger.info)
    summary = result.metrics
    markdown = summary_markdown(summary, store)
    if summary.get("report"):
        logger.info("run report: %s", summary["report"])
        markdown = f"Run report (figures): `{summary['report']}`\n\n" + markdown
    create_markdown_artifact(markdown, key="mkdist-cluster-summary", description=f"mkdist run {store}")
    return summary
