"""``cluster_flow``: a whole clustering run as a Prefect flow over a Dask cluster.

Thin by design: every task calls one ``mkdist.pipeline`` function with the store URL and the
input source (never arrays); the method's stage plan decides which stage tasks exist; the
store's stage markers make each task skip work that is already complete, so re-running the
flow with the same inputs resumes a failed run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from mkdist.pipeline import (
    DEFAULT_METHOD, ReportDraft, RunConfig, load_labels, merge_timings, open_run, prepare_resume, run_stage,
    stage_metrics, stage_plan, summary_markdown, write_labels_out, write_report, writer_lease,
)

from ._runtime import dask_client, retry_transient

# Resume comes from the store's stage markers, not from Prefect's result cache: the store is
# the one source of truth a later run (on any machine) can read, so results are not persisted.
_TASK = dict(cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[5, 30],
             retry_condition_fn=retry_transient)

#: Prefect task names of the stages (the stages themselves come from the method's plan).
STAGE_TASK_NAMES = {"landmarks": "sample-landmarks", "model": "fit-model", "embedding": "embed-all-points",
                    "labels": "label-all-points"}


@task(name="validate-and-open-store", **_TASK)
def validate_task(source: Any, store: str, config: dict, overwrite: bool) -> dict:
    run = open_run(store, source, RunConfig(**config), overwrite=overwrite)
    resume = prepare_resume(run)
    return {"status": resume["status"], "plan": list(stage_plan(run)), "dropped": resume["dropped"],
            "cleaned": resume["cleaned"]}


@task(name="stage", **_TASK)
def stage_task(name: str, store: str, source: Any, progress: bool) -> dict:
    return run_stage(name, store, source, progress=progress)


@task(name="metrics-and-summary", **_TASK)
def metrics_task(store: str, timings: dict, y_true: Any) -> dict:
    return stage_metrics(store, timings=timings, y_true=y_true)


@task(name="run-report", **_TASK)
def report_task(store: str, draft: ReportDraft | None = None) -> str:
    return write_report(store, draft=draft)


@task(name="labels-out", **_TASK)
def labels_out_task(store: str, labels_out: str, source: Any, id_column: str | None, overwrite: bool) -> str:
    return write_labels_out(store, labels_out, source, id_column=id_column, overwrite=overwrite)


@task(name="labels-for-scoring", **_TASK)
def labels_task(source: Any, label_key: str) -> Any:
    return load_labels(source, label_key)


@flow(name="mkdist-cluster", log_prints=True)
def cluster_flow(source: Any, store: str, n_clusters: int, kernels: Any = None,
                 n_landmarks: int | None = None, random_state: int | None = None,
                 dask_address: str | None = None, n_workers: int | None = None,
                 overwrite: bool = False, label_key: str | None = None, progress: bool = False,
                 connect_timeout: float | None = None, labels_out: str | None = None,
                 id_column: str | None = None, report: bool = True,
                 method: str = DEFAULT_METHOD, options: dict | None = None) -> dict:
    """Cluster every point of ``source`` with multiple kernel clustering; results in ``store``.

    Parameters
    ----------
    source : str
        Input path or URL: Zarr group / xarray dataset with one variable per view, Parquet,
        or .npy/.npz (see ``mkdist.load_views``).
    store : str
        Run store (local directory or fsspec URL).  Same input + same parameters: resume.
    n_clusters, kernels, n_landmarks, random_state
        Model parameters (see ``mkdist.MultipleKernelClustering``).
    dask_address : str, optional
        Scheduler of an existing Dask cluster (``tcp://host:8786``); default: a LocalCluster
        with ``n_workers`` worker processes for this run.
    connect_timeout : float, optional
        Seconds to wait for ``dask_address`` (default 10, or ``MKDIST_CONNECT_TIMEOUT``).
    overwrite : bool, default=False
        Replace a store that holds a different run.
    label_key : str, optional
        Variable of ``source`` with ground-truth labels: adds ACC/NMI/ARI/purity to the metrics.
    labels_out : str, optional
        Also write every row's id, cluster and distance to its centre as Parquet there.
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the row position).
    report : bool, default=True
        Write the run report (``<store>.report.html``) and link it from the summary artifact.
    method : str, default=DEFAULT_METHOD ("mkc")
        A registered method (``mkdist.available_methods()``), or "auto" (chosen from the
        input's shape when the store opens, recorded in it: ``mkdist.choose_method``); its
        stage plan decides which stage tasks run.
    options : dict, optional
        Parameters of the method's estimator (``weights``, ``scale``, ...), ``method_params``,
        or ``write_kernel_blocks`` (see ``mkdist.pipeline.RunConfig.from_options``).

    Returns
    -------
    dict
        The run summary also stored in the store's metrics stage.
    """
    logger = get_run_logger()
    config = RunConfig.from_options(n_clusters=n_clusters, kernels=kernels, n_landmarks=n_landmarks,
                                    random_state=random_state, method=method, **(options or {}))
    # The lease is held by this (the flow's) process, where every stage task runs.
    with writer_lease(store, owner="mkdist cluster_flow"), \
            dask_client(dask_address, n_workers, connect_timeout=connect_timeout) as client:
        logger.info("Dask dashboard: %s", client.dashboard_link)
        opened = validate_task(source, store, config.to_json(), overwrite)
        logger.info("store %s: %s; stages %s", store, opened["status"], opened["plan"])
        if opened["dropped"]:
            logger.warning("damaged stages are recomputed: %s", opened["dropped"])
        # The report's figures are drawn while the later stages run (ReportDraft).
        draft = ReportDraft(store) if report else None
        try:
            parts = []
            for name in opened["plan"]:
                task_name = STAGE_TASK_NAMES.get(name, name)
                parts.append(stage_task.with_options(name=task_name)(name, store, source, progress))
                if draft is not None:
                    draft.stage_complete(name)
        except BaseException:
            if draft is not None:
                draft.close()
            raise
        timings = merge_timings(parts)
        y_true = labels_task(source, label_key) if label_key else None
        summary = metrics_task(store, timings, y_true)
        if labels_out:
            summary["labels_out"] = labels_out_task(store, labels_out, source, id_column, overwrite)
    summary["resumed_stages"] = [s for s in opened["plan"] if opened["status"].get(s) == "complete"]
    markdown = summary_markdown(summary, store)
    if report:
        with draft:
            summary["report"] = report_task(store, draft)
        logger.info("run report: %s", summary["report"])
        markdown = f"Run report (figures): `{summary['report']}`\n\n" + markdown
    create_markdown_artifact(markdown, key="mkdist-cluster-summary", description=f"mkdist run {store}")
    return summary
