"""The one run driver: what ``mkdist.cluster``, ``mkdist run`` and the Prefect flow all run.

A run is checked and decided once (:func:`mkdist._pipeline._plan.plan_run`: parameters, the
input's metadata, the store, the labels output and the report path -- no data read, nothing
written; an immutable :class:`~mkdist._pipeline._plan.RunPlan`), then driven
(:func:`drive_run`): the store's writer lease, the input scan and the store opened (the
run's context, handed to every stage), damaged stages dropped, the method's stages in order
with the report drawn as they complete, the metrics, the labels out, the report.  Each of
these steps goes through a ``step`` callable: called directly by ``mkdist.cluster`` and the
command line, wrapped as a Prefect task by the flow, so the loop exists once.

It sits above :mod:`mkdist._pipeline._stages` (the stages) and :mod:`mkdist._report._summary` (the report,
which reads the stages' stores), so that a run can draw its report as it goes without an
import cycle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import time
from collections.abc import Callable
from typing import Any

from mkdist.storage._lease import LEASE_FILE
from mkdist.storage._remote import register_options

from .._core._columns import is_frame
from .._methods._registry import DEFAULT_METHOD
from .._pipeline._config import ClusterResult, RunConfig
from .._pipeline._dask_runtime import current_scheduler, in_process
from .._pipeline._io import InputSource, as_input, check_labels_out, frame_input, labels_mark
from .._pipeline._plan import RunPlan, RunRequest, check_request, plan_run
from .._pipeline._profiles import read_profiles
from .._pipeline._progress import stage_line
from .._pipeline._rerun import FINISHED
from .._pipeline._stages import (
    as_store,
    assign,
    merge_timings,
    open_run,
    prepare_resume,
    refuse_overlap,
    run_stage,
    stage_metrics,
    write_stored_labels,
    writer_lease,
)
from .._report._summary import ReportDraft, assignment_summary, load_labels, write_report
from ..errors import InputValidationError

__all__ = ["cluster", "plan_run", "check_request", "drive_run", "drive_assign", "write_labels_out", "RunPlan",
           "RunRequest", "direct_step", "STEP_NAMES", "refit_inputs"]

#: What each step of a run is called (the Prefect task names of the flow).
STEP_NAMES = {"open": "scan-and-open-store", "landmarks": "sample-landmarks", "model": "fit-model",
              "embedding": "embed-all-points", "labels": "label-all-points", "metrics": "metrics-and-summary",
              "labels_out": "labels-out", "report": "run-report", "y_true": "labels-for-scoring",
              "assign": "assign-new-points", "assign_report": "assignment-report"}

Step = Callable[..., Any]


def direct_step(name: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run one step of a run in this process (what ``mkdist.cluster`` and the CLI do)."""
    return fn(*args, **kwargs)


def _storage_options(source: Any) -> dict | None:
    return source.storage_options if isinstance(source, InputSource) else None


@contextlib.contextmanager
def _remove_if_unused(store: Any):
    """A run refused or interrupted before it created its store leaves no directory behind
    (the writer lease creates the location to hold its lease file); nor does a run whose input
    is refused later, by the scan in its embedding's pass, in a store it created."""
    import fsspec

    from mkdist.storage._remote import options_for

    raw = store.url if hasattr(store, "url") else os.fspath(store)
    fs, path = fsspec.core.url_to_fs(raw, **options_for(raw))
    existed = fs.exists(path)
    try:
        yield
    except BaseException as e:
        if not existed:
            with contextlib.suppress(OSError):
                # Refused input: what the run stored came from it (the lease is released by now).
                # (what the lease leaves, its fence directory, is not a use)
                if fs.isdir(path) and (isinstance(e, InputValidationError) or not [
                        p for p in fs.ls(path, detail=False) if not posixpath.basename(p.rstrip("/")).startswith(
                            LEASE_FILE)]):
                    fs.rm(path, recursive=True)
        raise


def drive_run(plan: RunPlan, *, progress: bool = False, y_true: Any = None, label_key: str | None = None,
              step: Step = direct_step, owner: str = "mkdist", echo: Callable[[str], None] | None = None
              ) -> ClusterResult:
    """Drive a checked run to its end: lease, scan and store, stages, metrics, labels out, report.

    Parameters
    ----------
    plan : RunPlan
        From :func:`plan_run`: checked and decided; nothing is checked again.
    progress : bool, default=False
        Progress of the passes over the rows on stderr, labelled by stage.
    y_true : array-like of shape (N,), optional
        Ground truth (adds scores to the metrics); or ``label_key``, a column/variable of the
        source read by its own step (default: the input's ``label_column``).
    step : callable ``step(name, fn, *args, **kwargs)``
        How each step runs: :func:`direct_step`, or the flow's Prefect task wrapper.
    owner : str
        Who holds the store's lease (shown to a second writer).
    echo : callable, optional
        Where the run's one-line notes go (the input's columns, resumed stages).

    Returns
    -------
    ClusterResult
    """
    store = plan.store
    if label_key is None and y_true is None:
        label_key = plan.request.label_column
    t_all = time.perf_counter()
    # Asked once, of the scheduler the stages will ask (their caller chose it: run_scheduler).
    where = current_scheduler().to_json()
    with _remove_if_unused(store), writer_lease(store, owner=owner):
        ctx = step(STEP_NAMES["open"], open_run, plan, progress=progress)
        run = ctx.store
        resume = prepare_resume(run)
        before = resume["status"]
        stages = list(plan.stages)
        done = [s for s in stages if before.get(s) == "complete"]
        if len(done) < len(stages) and run.attrs.get(FINISHED):
            run.update_attrs(**{FINISHED: None})  # no longer finished until this run is
        if echo is not None and done:
            echo(f"resuming: {', '.join(done)} already stored" + (
                f"; damaged, recomputed: {', '.join(resume['dropped'])}" if resume["dropped"] else ""))
        draft = ReportDraft(ctx) if plan.report and not plan.complete else None
        try:
            parts = []
            for i, name in enumerate(stages, 1):
                if progress and name not in done:
                    stage_line(f"[{i}/{len(stages)}] {name}", final=True)
                parts.append(step(STEP_NAMES.get(name, name), run_stage, name, ctx, progress=progress))
                if draft is not None:
                    draft.stage_complete(name)
            timings = merge_timings(parts)
            timings["total_s"] = time.perf_counter() - t_all
            stored = run.attrs.get("summary") if run.is_complete("metrics") else None
            if len(done) == len(stages) and stored and (label_key is None or stored.get("scores")) \
                    and y_true is None:
                metrics = stored  # nothing was recomputed: the stored summary is this run's
            else:
                if y_true is None and label_key is not None:
                    y_true = step(STEP_NAMES["y_true"], load_labels, plan.source, label_key)
                metrics = step(STEP_NAMES["metrics"], stage_metrics, ctx, timings=timings, y_true=y_true,
                               scheduler=where)
            labels_out = None
            if plan.labels_out is not None:
                labels_out = step(STEP_NAMES["labels_out"], _write_labels_out, ctx, progress=progress)
        except BaseException:
            if draft is not None:
                draft.close()
            raise
    written, report_timings = None, {}
    if plan.report:
        t0 = time.perf_counter()
        target = None if plan.report is True else os.fspath(plan.report)
        if draft is not None:
            with draft:
                written = step(STEP_NAMES["report"], write_report, run, target, draft=draft)
            report_timings = {"tail_s": time.perf_counter() - t0, "foreground_s": draft.foreground_s,
                              "background_cpu_s": draft.background_cpu_s, "timeline": dict(draft.timeline)}
        else:
            written = _existing_report(run, target) or step(STEP_NAMES["report"], write_report, run, target)
    if plan.request.key is not None:
        finished = {"request": plan.request.key, "labels_out": labels_out, "report": written,
                    "stages": stages + ["metrics"]}
        if run.attrs.get(FINISHED) != finished:
            run.update_attrs(**{FINISHED: finished})
    metrics = dict(metrics)
    metrics["resumed_stages"] = done
    metrics["computed_stages"] = [s for s in stages if s not in done]
    if labels_out is not None:
        metrics["labels_out"] = labels_out
    if written is not None:
        metrics["report"] = written
    model = ctx.estimator()
    # The profiles of the clusters the model found, as a fitted attribute (sklearn style).
    model.profiles_ = read_profiles(run)
    return ClusterResult(labels=run.read_stage("labels")["labels"].data, model=model, store=run,
                         timings=timings, skipped=done, metrics=metrics, report=written,
                         report_timings=report_timings)


def _existing_report(run, target: str | None) -> str | None:
    """The report a finished run already wrote (a no-op re-run does not draw it again)."""
    import fsspec

    from mkdist.storage._remote import options_for

    path = target or f"{str(run.url).rstrip('/')}.report.html"
    fs, p = fsspec.core.url_to_fs(path, **options_for(path))
    return path if fs.exists(p) and fs.info(p).get("mtime", 0) else None


def _write_labels_out(ctx, *, progress: bool = False) -> str:
    """The run's labels as Parquet keyed by the input's ids (``plan.labels_out``), written from
    the stored labels (no recompute); skipped when this run already wrote them.  The plan
    checked the output; what this run's stages stored is known only now (the mark)."""
    plan = ctx.plan
    options = _storage_options(plan.source)
    if check_labels_out(plan.labels_out, plan.overwrite, labels_mark(ctx.store), options) == "skip":
        return plan.labels_out
    return write_stored_labels(ctx.store, plan.labels_out, plan.source, ctx.views, id_column=plan.id_column,
                               progress=progress)


def write_labels_out(store: Any, labels_out: Any, source: Any, *, id_column: str | None = None,
                     overwrite: bool = False, views: dict | None = None, progress: bool = False) -> str:
    """A finished run's labels as Parquet keyed by its input's ids: id, cluster, distance per row
    (and ``missing_cells``, the imputed cells per row, when the run imputed).

    Written from the stored labels (no recompute).  An output this run already wrote is left
    as it is; one of another run (or any other file) is replaced only with ``overwrite``.

    Parameters
    ----------
    store : RunStore or str
    labels_out : str or Path
    source : path/URL, InputSource or xarray.Dataset
        The run's input (where the ids are read).
    id_column : str, optional
        Default: the source's (an InputSource's), else the row position.
    views : dict of str to dask.array.Array, optional
        The loaded views (their row chunks); read from ``source`` when not given.

    Returns
    -------
    str
    """
    from .._pipeline._io import load_views

    run = as_store(store, mode="r")
    source = as_input(source, id_column=id_column)
    refuse_overlap(labels_out, store=run, input=source.location if isinstance(source, InputSource) else source)
    id_column = source.id_column if isinstance(source, InputSource) else id_column
    if check_labels_out(labels_out, overwrite, labels_mark(run), _storage_options(source)) == "skip":
        return str(labels_out)
    views = views if views is not None else load_views(source)
    return write_stored_labels(run, labels_out, source, views, id_column=id_column, progress=progress)


def cluster(source: Any, store: Any, n_clusters: int | str | tuple[int, int], kernels: Any = None,
            n_landmarks: int | None = None,
            random_state: int | None = None, *, method: str = DEFAULT_METHOD, views: Any = None,
            id_column: str | None = None, overwrite: bool = False, progress: bool = False, y_true=None,
            label_column: str | None = None, chunk_rows: int | None = None, labels_out: Any = None,
            report: bool | str = False, storage_options: dict | None = None, missing: str | None = None,
            **params) -> ClusterResult:
    """Run the staged pipeline of a method, persisting every stage: on the active
    ``distributed.Client`` if there is one, else in this process.

    With no client the stages compute on Dask's threaded scheduler, one BLAS thread per Dask
    thread (:func:`mkdist._pipeline._dask_runtime.in_process`); no worker processes are
    started (a LocalCluster started from a script without an ``if __name__ == "__main__"``
    guard would re-run the script in each worker).  The summary records which
    (``result.metrics["scheduler"]``).

    Parameters
    ----------
    source : array, list/dict of arrays, DataFrame, xarray.Dataset, path/URL or InputSource
        Anything :func:`mkdist.load_views` reads: NumPy, Dask, xarray, Zarr, Parquet (a file,
        a directory of files, a glob; any fsspec URL), .npy/.npz.  A pandas or dask DataFrame
        is read as a table (``views``, ``id_column``, categories, ``labels_out`` by id): it is
        written once as Parquet beside the store (``<store>.input/``, named by its content),
        so that every stage, every worker and a resumed run read the same rows.
    store : str or Path
        Run store location (local directory or fsspec URL).  Reused for resuming when it
        holds this input and these parameters; otherwise refused unless ``overwrite``.
    n_clusters : int, "auto" or (k_min, k_max)
        K; or "auto" / a range: the model stage chooses K from the landmark kernel (methods
        ``mkc``, ``nystrom``, ``late-fusion``; others refuse it before any work).  The
        choice (K, confidence, runner-up, candidates with their scores, rule) is stored in
        the model stage's attrs (``n_clusters_choice``) and shown by ``mkdist inspect`` and
        the report; an ambiguous one still fits with its best guess and says so.
    kernels, n_landmarks
        For the methods that have them (None: the method's default).
    random_state : int, optional
        One seed for the run (stored; drawn when None).
    method : str, default=DEFAULT_METHOD ("mkc")
        A registered method (``mkdist.available_methods()``), or "auto": the method and its
        kernels are chosen from the input's shape by :func:`mkdist.choose_method`; the choice
        and its reason are stored with the run (``store.params["auto"]``, shown by
        ``mkdist inspect``).
    views : mapping of str to list of str, optional
        A table's views: view name -> columns or ``fnmatch`` patterns (``{"a": "a*", "b":
        ["b0", "b1"]}``); default one view of every numeric column but the id and labels.
        For Zarr/xarray/.npz inputs, a list of the variables that are views.
    id_column : str, optional
        Column / coordinate of a table or dataset holding the row ids: never a feature, and
        the key of ``labels_out``; default: the row position.
    overwrite : bool, default=False
        Replace what is in the way: a store holding a different run (recomputed from scratch)
        and an existing ``labels_out`` of another run.  A store of this same run is resumed.
    progress : bool, default=False
        Progress of the passes over the rows on stderr, labelled by stage, with rows/s.
    y_true : array-like of shape (N,), optional
        Ground truth; adds ACC/NMI/ARI/purity to the stored metrics.
    label_column : str, optional
        A column / variable of ``source`` holding the ground truth (never a feature).
    chunk_rows : int, optional
        Rows per chunk (see :func:`mkdist.load_views`).
    labels_out : str or Path, optional
        Also write every row's id, cluster and distance to its centre as Parquet; written
        from the stored labels, and skipped when this run already wrote it.
    report : bool or str, default=False
        Also write the run report: True puts it next to the store (``<store>.report.html``),
        a str is its path.  The model's figures are drawn while the rows are embedded
        (:class:`mkdist._report._summary.ReportDraft`), so the report adds little to the run's time.
    storage_options : dict, optional
        fsspec options (credentials, endpoint) of every remote location of the run: ``source``,
        ``store``, ``labels_out`` and the report.  Default: fsspec's configuration and the
        environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``).
        Resolved in this process and carried to the Dask workers with their tasks (they need
        no credentials of their own); never stored.  Each remote location is probed before
        any work: a wrong key or an unreachable endpoint raises
        :class:`~mkdist.errors.StorageAccessError` with nothing created.
    missing : {"refuse", "impute"}, optional
        Missing cells (a table's nulls, NaN).  "refuse" (the default) stops the run before any
        work, naming the column, the count and the first row.  "impute" clusters and labels
        every row: each missing cell gets the mean of that feature over the 10 rows most like
        the row on the cells it has (across all views), found among 1000 donor rows read in
        the input scan (:mod:`mkdist._core._missing`); the fill is stored with the run, so
        a resumed run and ``assign`` of a later batch fill the same way.  The labels stage
        and ``labels_out`` say per row how many cells were imputed (``missing_cells``), the
        summary counts them.  Infinity is refused either way, and so is a row with no value
        in any view (there is nothing to cluster it on).
    **params
        Parameters of the method's estimator (e.g. ``weights="uniform"`` for ``mkc``),
        ``method_params={...}``, or ``write_kernel_blocks=True``.

    Returns
    -------
    ClusterResult

    Examples
    --------
    >>> from distributed import Client, LocalCluster                       # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))                          # doctest: +SKIP
    >>> result = mkdist.cluster("customers.parquet", "runs/c.zarr", 5, id_column="customer_id",
    ...                         views={"a": "a*", "b": "b*"}, labels_out="labels.parquet")  # doctest: +SKIP
    >>> result.labels[:10].compute(), result.timings                        # doctest: +SKIP
    """
    config = RunConfig.from_options(n_clusters=n_clusters, kernels=kernels, n_landmarks=n_landmarks,
                                    random_state=random_state, method=method, **params)
    if is_frame(source):
        # A run reads its input at every stage and on resume: the frame becomes a table beside the store.
        source = frame_input(source, store, storage_options=storage_options)
    source = as_input(source, views=views, id_column=id_column, label_column=label_column, chunk_rows=chunk_rows,
                      storage_options=storage_options, missing=missing)
    # One set of options for every remote location of the run: the input's, the store's and the
    # labels output's (the store is reopened from its URL by the stages and the report).
    register_options(storage_options, store, labels_out, report if isinstance(report, str) else None,
                     source.location if isinstance(source, InputSource) else None)
    if not isinstance(source, InputSource) and (chunk_rows is not None or views is not None):
        from .._pipeline._io import load_views

        source = load_views(source, views=views, chunk_rows=chunk_rows)
    plan = plan_run(source, store, config, labels_out=labels_out, overwrite=overwrite, report=report,
                    id_column=id_column, missing=missing)
    from .._core._cluster import active_client

    with contextlib.nullcontext() if active_client() is not None else in_process():
        return drive_run(plan, progress=progress, y_true=y_true,
                         label_key=label_column if y_true is None else None, owner="mkdist.cluster")


def drive_assign(model_store: Any, source: Any = None, output: Any = None, *, overwrite: bool = False,
                 progress: bool = False, labels_out: Any = None, id_column: str | None = None,
                 drift_thresholds: dict | None = None, report: bool = True, step: Step = direct_step,
                 missing: str | None = None) -> dict[str, Any]:
    """Label a new batch with a stored model (:func:`mkdist.assign`), then its report: what
    ``mkdist assign`` and the assign flow run.  ``model_store`` may be the assignment checked
    already (``check_assign``'s AssignPlan, without ``source`` and ``output``).

    Returns
    -------
    dict
        :func:`mkdist._report._summary.assignment_summary` of the output, with ``report`` and
        ``labels_out`` (where they were written).
    """
    out = step(STEP_NAMES["assign"], assign, model_store, source, output, overwrite=overwrite, progress=progress,
               labels_out=labels_out, id_column=id_column, drift_thresholds=drift_thresholds, missing=missing)
    summary = assignment_summary(out)
    if labels_out is not None:
        summary["labels_out"] = str(labels_out)
    if report:
        summary["report"] = step(STEP_NAMES["assign_report"], write_report, out)
    return summary


def refit_inputs(model_store: Any, source: Any, *, store: Any = None,
                 id_column: str | None = None) -> tuple[InputSource, str, RunConfig]:
    """What a run that refits ``model_store``'s model on a new batch needs: its input, store
    and configuration.

    The stored configuration (method, parameters, seed) is kept whole, so the refit differs
    from the fit in its data only; the batch is read with the model's views (a table's
    columns per view).  Local paths come back absolute: the refit may run in another
    process, in another working directory.

    Parameters
    ----------
    model_store : str, Path or RunStore
        A run store holding the model (its run configuration and input record).
    source : str, Path, dict or InputSource
        The new batch; a location, not in-memory data (the refit runs elsewhere).
    store : str or Path, optional
        Where the refit writes; default ``model_store`` itself.
    id_column : str, optional
        The batch's id column, as given to the assignment.

    Returns
    -------
    source : InputSource
    store : str
    config : RunConfig

    Raises
    ------
    InputValidationError
        ``source`` is in-memory data.
    StoreNotFoundError
        No run store at ``model_store``.
    """
    model = as_store(model_store, mode="r")
    record = model.attrs.get("input") or {}
    batch = as_input(source, id_column=id_column)
    if not isinstance(batch, InputSource):
        raise InputValidationError(f"a refit needs the batch as a path or URL, not {type(source).__name__}: "
                                   "it runs in another process.")
    if "://" not in batch.location:
        batch = dataclasses.replace(batch, location=os.path.abspath(batch.location))
    if batch.views is None and record.get("views"):
        batch = dataclasses.replace(batch, views=record["views"])
    if batch.missing is None and (model.attrs.get("missing") or {}).get("mode") == "impute":
        batch = dataclasses.replace(batch, missing="impute")  # the refit fills its batch as the fit did
    target = os.fspath(store) if store is not None else str(model.url)
    if "://" not in target:
        target = os.path.abspath(target)
    return batch, target, RunConfig.from_json(model.params)
