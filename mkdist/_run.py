"""A whole run in one call: :func:`cluster` runs a method's stages in order, then its report.

It sits above :mod:`mkdist._stages` (the stages) and :mod:`mkdist._report` (the report, which
reads the stages' stores), so that a run can draw its report as it goes without an import
cycle; the flows run the same stages and report as Prefect tasks.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ._config import ClusterResult, RunConfig
from ._io import check_labels_out, load_ids, load_views
from ._methods import DEFAULT_METHOD
from ._report import ReportDraft, write_report
from ._stages import (
    load_estimator, merge_timings, open_run, prepare_resume, refuse_overlap, run_stage, stage_metrics, stage_plan,
    write_labels_out, writer_lease,
)
from .errors import InputValidationError

__all__ = ["cluster"]


def cluster(views: Any, store: Any, n_clusters: int, kernels: Any = None, n_landmarks: int | None = None,
            random_state: int | None = None, *, method: str = DEFAULT_METHOD, overwrite: bool = False,
            progress: bool = False, y_true=None, chunk_rows: int | None = None, labels_out: Any = None,
            id_column: str | None = None, report: bool | str = False, **params) -> ClusterResult:
    """Run the staged pipeline of a method on the active Dask scheduler, persisting every stage.

    Parameters
    ----------
    views : array, list/dict of arrays, xarray.Dataset or path/URL
        Anything :func:`mkdist.load_views` reads (NumPy, Dask, xarray, Zarr, Parquet, .npy/.npz).
    store : str or Path
        Run store location (local directory or fsspec URL).  Reused for resuming when it
        holds this input and these parameters; otherwise refused unless ``overwrite``.
    n_clusters : int
    kernels, n_landmarks
        For the methods that have them (None: the method's default).
    random_state : int, optional
        One seed for the run (stored; drawn when None).
    method : str, default=DEFAULT_METHOD ("mkc")
        A registered method (``mkdist.available_methods()``), or "auto": the method and its
        kernels are chosen from the input's shape by :func:`mkdist.choose_method`; the choice
        and its reason are stored with the run (``store.params["auto"]``, shown by
        ``mkdist inspect``).
    overwrite : bool, default=False
        Replace a store that holds a different run.
    progress : bool, default=False
        Show Dask progress bars for the passes over the data.
    y_true : array-like of shape (N,), optional
        Ground truth; adds ACC/NMI/ARI/purity to the stored metrics.
    chunk_rows : int, optional
        Row chunking for NumPy input (see :func:`mkdist.load_views`).
    labels_out : str or Path, optional
        Also write every row's id, cluster and distance to its centre as Parquet.
    id_column : str, optional
        Column / coordinate of ``views`` (a file or an xarray Dataset) holding the row ids;
        default: the row position.
    report : bool or str, default=False
        Also write the run report: True puts it next to the store (``<store>.report.html``),
        a str is its path.  The model's figures are drawn while the rows are embedded
        (:class:`mkdist._report.ReportDraft`), so the report adds little to the run's time.
    **params
        Parameters of the method's estimator (e.g. ``weights="uniform"`` for ``mkc``),
        ``method_params={...}``, or ``write_kernel_blocks=True``.

    Returns
    -------
    ClusterResult

    Examples
    --------
    >>> from distributed import Client, LocalCluster            # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))               # doctest: +SKIP
    >>> result = mkdist.cluster([X1, X2], "runs/demo.zarr", 10)  # doctest: +SKIP
    >>> result.labels[:10].compute(), result.timings             # doctest: +SKIP
    """
    config = RunConfig.from_options(n_clusters=n_clusters, kernels=kernels, n_landmarks=n_landmarks,
                                    random_state=random_state, method=method, **params)
    refuse_overlap(store, input=views)  # here too: open_run sees the loaded views, not the location
    if labels_out is not None:
        refuse_overlap(labels_out, store=store, input=views)
        check_labels_out(labels_out, overwrite)
    if not isinstance(report, (bool, str, os.PathLike)):
        raise InputValidationError(f"`report`={report!r} must be True, False or the report's path.")
    if not isinstance(report, bool):  # refused before the run, not after it
        refuse_overlap(report, store=store, input=views)
    vs = load_views(views, chunk_rows=chunk_rows)
    if labels_out is not None:
        load_ids(views, id_column, vs)  # a missing id column is refused before any work
    with writer_lease(store, owner="mkdist.cluster"):
        run = open_run(store, vs, config, overwrite=overwrite)
        before = prepare_resume(run)["status"]
        t_all = time.perf_counter()
        plan = stage_plan(config)
        draft = ReportDraft(run) if report else None
        try:
            parts = []
            for name in plan:
                parts.append(run_stage(name, run, vs, progress=progress))
                if draft is not None:
                    draft.stage_complete(name)
            timings = merge_timings(parts)
            timings["total_s"] = time.perf_counter() - t_all
            metrics = stage_metrics(run, timings=timings, y_true=y_true)
        except BaseException:
            if draft is not None:
                draft.close()
            raise
    if labels_out is not None:
        write_labels_out(run, labels_out, views, id_column=id_column, overwrite=overwrite, chunk_rows=chunk_rows)
    written, report_timings = None, {}
    if draft is not None:
        t0 = time.perf_counter()
        with draft:
            written = write_report(run, None if report is True else os.fspath(report), draft=draft)
        report_timings = {"tail_s": time.perf_counter() - t0, "foreground_s": draft.foreground_s,
                          "background_cpu_s": draft.background_cpu_s, "timeline": dict(draft.timeline)}
    skipped = [s for s in plan if before.get(s) == "complete"]
    return ClusterResult(labels=run.read_stage("labels")["labels"].data, model=load_estimator(run), store=run,
                         timings=timings, skipped=skipped, metrics=metrics, report=written,
                         report_timings=report_timings)
