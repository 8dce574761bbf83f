"""``cluster_flow``: a whole clustering run as a Prefect flow over a Dask cluster.

Thin by design: the run is ``mkdist.pipeline``'s run driver (the same loop as
``mkdist.cluster`` and ``mkdist run``), and every step of it -- open the store, each stage of
the method's plan, the metrics, the labels out, the report -- runs as a Prefect task through
the driver's ``step`` hook.  The store's stage markers make each stage skip work that is
already complete, so re-running the flow with the same inputs resumes a failed run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mkdist.pipeline import (
    DEFAULT_METHOD,
    STEP_NAMES,
    InputSource,
    RunConfig,
    as_input,
    dashboard_link,
    drive_run,
    plan_run,
    run_scheduler,
    summary_markdown,
)

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
def cluster_flow(source: Any, store: str, n_clusters: int | str | list[int], kernels: Any = None,
                 n_landmarks: int | None = None, random_state: int | None = None,
                 dask_address: str | None = None, n_workers: int | None = None,
                 overwrite: bool = False, label_key: str | None = None, progress: bool = False,
                 connect_timeout: float | None = None, labels_out: str | None = None,
                 id_column: str | None = None, report: bool = True, views: dict | None = None,
                 method: str | None = DEFAULT_METHOD, options: dict | None = None, missing: str | None = None) -> dict:
    """Cluster every point of ``source``; results in ``store``.

    Parameters
    ----------
    source : str or dict
        Input path or fsspec URL: Parquet (a file, a directory, a glob), a Zarr group / xarray
        dataset with one variable per view, or .npy/.npz (see ``mkdist.load_views``); or the
        JSON of a ``mkdist.pipeline.InputSource``.
    store : str
        Run store (local directory or fsspec URL).  Same input + same parameters: resume.
    n_clusters : int, "auto" or [k_min, k_max]
        K, or "auto" / a range: the model stage chooses K from the landmark kernel (methods
        mkc, nystrom, late-fusion; see ``mkdist.cluster``) and stores the choice.
    kernels, n_landmarks, random_state
        Model parameters (see ``mkdist.MultipleKernelClustering``).
    dask_address : str, optional
        Scheduler of an existing Dask cluster (``tcp://host:8786``); default: the
        ``MKDIST_DASK_ADDRESS`` environment variable, else the flow's own process for an input
        of at most ``MKDIST_IN_PROCESS_MAX_ROWS`` rows (1,000,000 unless set), or a LocalCluster
        with ``n_workers`` worker processes for this run (given ``n_workers``: always one);
        see ``mkdist.pipeline.run_scheduler``.
    connect_timeout : float, optional
        Seconds to wait for ``dask_address`` (default 10, or ``MKDIST_CONNECT_TIMEOUT``).
    overwrite : bool, default=False
        Replace what is in the way: a store holding a different run, a labels output of
        another run.  A store of this same run is resumed.
    label_key : str, optional
        Column / variable of ``source`` with ground-truth labels: adds ACC/NMI/ARI/purity to
        the metrics (never a feature).
    labels_out : str, optional
        Also write every row's id, cluster and distance to its centre as Parquet there.
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the row position).
    report : bool, default=True
        Write the run report (``<store>.report.html``) and link it from the summary artifact.
    views : dict, optional
        A table's views: view name -> columns or patterns (``{"a": "a*", "b": ["b0", "b1"]}``).
    method : str, default=DEFAULT_METHOD ("mkc")
        A registered method (None: the default) (``mkdist.available_methods()``), or "auto" (chosen from the
        input's shape when the store opens, recorded in it: ``mkdist.choose_method``); its
        stage plan decides which stage tasks run.
    options : dict, optional
        Parameters of the method's estimator (``weights``, ``scale``, ...), ``method_params``,
        or ``write_kernel_blocks`` (see ``mkdist.pipeline.RunConfig.from_options``).
    missing : {"refuse", "impute"}, optional
        Missing cells: refuse the input (default), or cluster every row with its missing
        cells imputed (see ``mkdist.cluster``); also a key of a ``source`` dict.

    Returns
    -------
    dict
        The run summary also stored in the store's metrics stage.
    """
    logger = get_run_logger()
    config = RunConfig.from_options(n_clusters=n_clusters, kernels=kernels, n_landmarks=n_landmarks,
                                    random_state=random_state, method=method, **(options or {}))
    source = as_input(source, views=views, id_column=id_column, label_column=label_key, missing=missing)
    plan = plan_run(source, store, config, labels_out=labels_out, overwrite=overwrite, report=report)
    if isinstance(source, InputSource) and plan.opened.message():
        logger.info("%s", plan.opened.message())
    # The lease is held by this (the flow's) process, where every stage task runs.
    n_rows = int(next(iter(plan.views.values())).shape[0])
    with run_scheduler(dask_address, n_workers, n_rows=n_rows, connect_timeout=connect_timeout,
                       echo=logger.info) as scheduler:
        logger.info("computing on: %s", scheduler.describe())
        if scheduler.client is not None:
            # Only a link that opens: a scheduler without bokeh serves a "needs bokeh" page there.
            link = dashboard_link(scheduler.client)
            logger.info("Dask dashboard: %s", link or "not served by this scheduler (it needs bokeh>=3.1 "
                        "installed next to the scheduler)")
        result = drive_run(plan, progress=progress, label_key=label_key, step=prefect_step,
                           owner="mkdist cluster_flow", echo=logger.info)
    summary = result.metrics
    markdown = summary_markdown(summary, store)
    if summary.get("report"):
        logger.info("run report: %s", summary["report"])
        markdown = f"Run report (figures): `{summary['report']}`\n\n" + markdown
    create_markdown_artifact(markdown, key="mkdist-cluster-summary", description=f"mkdist run {store}")
    return summary
