"""The staged pipeline over a Zarr run store, for every registered method.

A run's stages come from its method's stage plan (``MkdistEstimator.stage_plan``):

* ``("landmarks", "model", "embedding", "labels")``: sample landmarks (their rows are
  stored), fit on them on this process, embed every row across the cluster (stored), then
  k-means on the stored embedding; the labels stage also holds the centroids;
* ``("model", "labels")``: the estimator's own (distributed) ``fit``, then ``predict``.

Each stage is handed the run's context (:class:`mkdist._pipeline._context.RunContext`:
store, plan, views, the model as stored), reads what earlier stages stored, writes its own
output atomically and is skipped when the store already holds it complete, so a crashed or
interrupted run resumes where it stopped.  :func:`open_run` builds the context from a plan
(:func:`mkdist._pipeline._plan.plan_run`, where the run was checked); a stage in a fresh
process gets one from :func:`mkdist._pipeline._context.run_context`.  The Prefect flows call
these functions one task each; :func:`cluster` calls them in order.  No method name appears
here: the pipeline asks the estimator class.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core import _missing
from .._core._blocks import report_passes
from .._core._cluster import active_client, compute, compute_here, persist_and_wait, unfused
from .._core._columns import is_frame
from .._core._kmeans import labels_pass
from .._core._missing import Imputer, count_missing, donor_indices, fill_views
from .._core._sampling import gather_rows
from .._core._state import state_to_dataset, to_jsonable
from ..errors import DamagedStoreError, InputValidationError, MkdistError, SchemaVersionError
from ..metrics import clustering_scores
from ._config import RunConfig
from ._context import IMPUTATION_STAGE, RunContext, estimator_from_state, read_imputer, read_model_state, run_context
from ._drift import check_thresholds, drift_statistics
from ._io import (
    InputScan,
    InputSource,
    OpenedInput,
    check_labels_out,
    check_missing,
    frame_input,
    labels_mark,
    load_ids,
    load_views,
    refuse_overlap,
    scan_views,
    views_fingerprint,
    write_labels_parquet,
)
from ._profiles import (
    PROFILES_STAGE,
    merge_blocks,
    profile_accumulator,
    profile_blocks,
    profile_layout,
    stage_profiles,
    write_profiles,
)

__all__ = [
    "check_assign", "AssignPlan", "open_run", "run_context", "RunContext", "write_stored_labels",
    "writer_lease", "prepare_resume", "stage_plan", "run_stage",
    "merge_timings", "stage_landmarks", "stage_model", "stage_embedding", "stage_labels",
    "stage_metrics", "load_estimator", "assign", "refuse_overlap", "persist_progress", "input_record", "like_model",
    "run_imputer", "IMPUTATION_STAGE",
]

logger = logging.getLogger("mkdist")

#: Seconds a run's writer lease lives without a heartbeat (it beats every TTL / 4): a run
#: killed with SIGKILL blocks its store for at most this long (MKDIST_LEASE_TTL overrides).
LEASE_TTL = 60.0


# ----------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _pass_progress(stage: str, enabled: bool, n_rows: int | None = None):
    """With ``enabled``, one status line on stderr that counts the passes over the rows of an
    iterative fit (power k-means, k-means, Nystrom's reductions: one pass per iteration),
    which a progress bar per pass would turn into dozens of bars."""
    if not enabled:
        yield
        return
    from ._progress import stage_line

    state = {"passes": 0, "seconds": 0.0}
    t0 = time.perf_counter()

    def rate(seconds: float) -> str:
        return f", {n_rows / seconds:,.0f} rows/s" if n_rows and seconds > 0 else ""

    def show(layer: str, seconds: float) -> None:
        state["passes"] += 1
        state["seconds"] += seconds
        stage_line(f"{stage}: pass {state['passes']} over the rows ({layer}, {seconds:.1f} s{rate(seconds)})",
                   final=False)

    with report_passes(show):
        yield
    if state["passes"]:
        stage_line(f"{stage}: {state['passes']} passes over {n_rows or 0:,} rows in "
                   f"{time.perf_counter() - t0:.1f} s", final=True)


def _persist(x, progress: bool = False, stage: str = "compute", n_rows: int = 0):
    """:func:`mkdist._core._cluster.persist_and_wait`, with a progress line for ``stage`` if asked
    (on a cluster it follows the futures; on a local scheduler Dask's local callbacks draw it)."""
    if not progress:
        return persist_and_wait(x)
    from ._progress import LocalRowsBar, track

    if active_client() is not None:
        return persist_and_wait(x, watch=lambda persisted: track(persisted, stage, n_rows))
    with LocalRowsBar(stage, n_rows):
        return persist_and_wait(x)


def persist_progress(stage: str, n_rows: int, progress: bool):
    """A ``compute(collections)`` for callers that take one: :func:`_persist` with a progress
    line for ``stage``."""
    return lambda collections: _persist(collections, progress, stage, n_rows)


def as_store(store, mode: str = "r+"):
    """A RunStore from a RunStore or a URL (what the store-reading entry points accept)."""
    from mkdist.storage import RunStore

    return store if isinstance(store, RunStore) else RunStore.open(store, mode=mode)


def writer_lease(store: Any, owner: str | None = None):
    """The run's writer lease on ``store`` (a context manager; one writer per store).

    Taken before the store is created or reopened, held for the whole run (heartbeated), so a
    second run on the same store is refused with ``StoreLockedError`` naming the live one.
    """
    from mkdist.storage import RunStore

    target = store if isinstance(store, RunStore) else RunStore(store, mode="r+")
    # MKDIST_LEASE_TTL: seconds without a heartbeat after which a killed run's lease expires.
    return target.lease(owner=owner, ttl=float(os.environ.get("MKDIST_LEASE_TTL", LEASE_TTL)))


def prepare_resume(store, stages: list[str] | None = None) -> dict[str, Any]:
    """Make a reopened run safe to resume: remove crash leftovers, drop damaged stages.

    Every stored stage is verified in full (each chunk against its checksum); the first
    damaged stage in the plan's order (or ``stages``, for stores that are not runs, such as
    an assignment's output) and every stage after it are deleted, so they are recomputed
    instead of trusted.  Call it while holding the writer lease.

    Returns
    -------
    dict
        ``{"cleaned": [leftovers removed], "dropped": [stages deleted], "problems": [...],
        "status": stage status after the repair}``.
    """
    store = as_store(store)
    cleaned = store.clean_partials()
    order = list(stages) if stages is not None else [*stage_plan(store), "kernel_blocks", PROFILES_STAGE, "metrics"]
    status = store.stage_status(verify="full")
    damaged = [s for s in order if status.get(s) == "damaged"]
    problems, dropped = [], []
    if damaged:
        problems = [p for s in damaged for p in store.verify_stage(s, full=True)]
        first = min(order.index(s) for s in damaged)
        dropped = [s for s in order[first:] if status.get(s) in ("complete", "damaged")]
        for s in dropped:
            store.delete_stage(s, missing_ok=True)
        logger.warning("store %s: %s damaged (%s); recomputing %s", store.url, ", ".join(damaged),
                       "; ".join(problems), ", ".join(dropped))
        status = store.stage_status(verify=None)
    return {"cleaned": cleaned, "dropped": dropped, "problems": problems, "status": status}


def stage_plan(run: Any) -> tuple[str, ...]:
    """The stages a run executes, in order: its method's plan (an optional ``kernel_blocks``
    stage is written with the embedding).  ``run``: a RunConfig, a RunContext or a RunPlan
    (their resolved config), or a run store (its stored config)."""
    config = getattr(run, "config", run)
    if not isinstance(config, RunConfig):
        config = RunConfig.from_json(as_store(run, "r").params)
    return tuple(config.estimator_class.stage_plan)


def _listed(profiles) -> list:
    """The profiles' partials as a list to persist with the labels: empty when they are off."""
    return [] if profiles is None else [profiles]


def _unlisted(profiles, persisted: list):
    """(persisted partials or None, the rest) of a persist that took ``_listed(profiles)`` first."""
    return (None, persisted) if profiles is None else (persisted[0], persisted[1:])


def _int32(labels):
    """Labels as int32, the store's label dtype (lazily on Dask arrays)."""
    return labels.astype(np.int32)


# ----------------------------------------------------------------------------- opening a run
def open_run(plan: Any, *, progress: bool = False) -> RunContext:
    """Scan the input of a planned run, then create or reopen its store: the run's context.

    ``plan`` (:func:`mkdist._pipeline._plan.plan_run`) was checked and decided before: this
    checks nothing again.  Call it while holding the store's writer lease (:func:`writer_lease`).

    The scan is one pass over the data before anything is written: NaN/inf (with view,
    chunk and row), values whose squared distances overflow or underflow, constant views.  A
    store that holds the same run is reopened for resuming (its stored input statistics are
    reused: no pass).

    With ``missing="impute"`` the scan counts the missing cells instead of refusing them and
    reads a uniform sample of donor rows in its pass; the fill
    (:class:`mkdist._core._missing.Imputer`: the donors and the features' statistics) is
    stored as stage ``imputation``, and root attribute ``missing`` says what was missing.
    Every stage, a resumed run and ``assign`` fill from that stage.

    Returns
    -------
    RunContext
        The store (opened for writing), the plan, its views, and the landmark rows the scan
        gathered for the landmarks stage.
    """
    from mkdist.storage import RunStore

    config, views, opened, missing, overwrite = plan.config, plan.views, plan.opened, plan.missing, plan.overwrite
    store_url, fingerprint = plan.store, plan.fingerprint
    # The store as it is now, under the lease (the plan read it before the lease was taken):
    # what of this run it holds already.
    existing = None
    if not overwrite:
        with contextlib.suppress(FileNotFoundError):
            existing = RunStore.open(getattr(store_url, "url", store_url), mode="r")
    described = {} if opened is None else {"feature_names": opened.feature_names,
                                           "describe_row": opened.describe_row}
    n_rows = int(next(iter(views.values())).shape[0])
    same_run = existing is not None and not overwrite and existing.fingerprint == fingerprint
    stats = existing.attrs.get("input_stats") if same_run else None
    if missing == "impute" and same_run and not existing.is_complete(IMPUTATION_STAGE, verify="full"):
        stats = None  # its fill was lost: the scan reads the same donor rows again (same seed)
    landmarks = imputer = None
    if stats is None and _scan_in_embedding(config, missing):
        # No pass of its own: the landmarks stage reads the landmark rows (and checks them), the
        # embedding's pass scans every row (NaN/inf, statistics) in the tasks that embed it.
        pass
    elif stats is None:
        # The landmark rows (when the plan needs them) and the donor rows (when the run imputes)
        # are read in the scan's pass: each chunk once.
        idx = None
        if "landmarks" in stage_plan(config) and not (same_run and existing.is_complete("landmarks")):
            idx = config.make_estimator().sample_landmarks(views, config.random_state)
        donors = donor_indices(n_rows, config.random_state) if missing == "impute" else None
        wanted = [t for t in (idx, donors) if t is not None]
        take = None if not wanted else (wanted[0] if len(wanted) == 1 else np.union1d(*wanted))
        with _pass_progress("scan input", progress, n_rows):
            scanned = scan_views(views, gather=take, missing=missing, **described)
        stats, rows = scanned if take is not None else (scanned, None)
        if donors is not None:
            at = np.searchsorted(take, donors)
            imputer = Imputer(list(rows), [stats[v]["mean"] for v in rows], [stats[v]["std"] for v in rows],
                              [r[at] for r in rows.values()], _missing.N_NEIGHBORS)
        if idx is not None:
            at = np.searchsorted(take, idx)
            picked = [r[at] for r in rows.values()]
            # Landmarks with missing cells are filled as every other row will be, before the fit.
            landmarks = (idx, dict(zip(rows, imputer.fill(picked) if imputer is not None else picked)))
    run = RunStore.create(store_url, fingerprint=fingerprint, params=config.to_json(), overwrite=overwrite)
    if "input_stats" not in run.attrs and stats is not None:
        run.update_attrs(input_stats=stats)
    if imputer is not None:
        _write_imputation(run, imputer)
        run.update_attrs(missing=_missing_record(stats, imputer, (opened.feature_names if opened else None)))
    if opened is not None and "input" not in run.attrs:
        # How the input's columns became views: an assignment of a new batch reads it the same way.
        run.update_attrs(input=input_record(opened))
    return RunContext(run, views, config, plan=plan, landmarks=landmarks)


def _scan_in_embedding(config: RunConfig, missing: str) -> bool:
    """Whether a run's input scan rides on its embedding's pass (issue 34: the input read once
    for the embedding): a landmark-embedding plan whose rows are not imputed (the fill needs
    the scan's statistics before any row is embedded)."""
    return missing == "refuse" and {"landmarks", "embedding"} <= set(stage_plan(config))


def _scan_pending(store) -> bool:
    """The run's input scan is still to be done, by its embedding's pass."""
    return "input_stats" not in store.attrs and (store.attrs.get("missing") or {}).get("mode") != "impute"


def _write_imputation(run, imputer: Imputer) -> None:
    import xarray as xr

    ds = xr.Dataset(attrs={"view_names": imputer.view_names, "n_neighbors": imputer.n_neighbors})
    for name, values in imputer.arrays().items():
        view = name.split("__", 1)[1]
        ds[name] = (("donor", f"feature__{view}") if name.startswith("donors__") else (f"feature__{view}",), values)
    run.write_stage(IMPUTATION_STAGE, ds, overwrite=True, compute=compute)


def _missing_record(stats: Mapping[str, dict], imputer: Imputer, feature_names) -> dict[str, Any]:
    """Root attribute ``missing`` of an imputing run: the cells missing per column, the fill."""
    columns = {}
    for view, st in stats.items():
        names = (feature_names or {}).get(view) or [f"{view}[{j}]" for j in range(st["n_features"])]
        columns.update({str(n): int(c) for n, c in zip(names, st.get("missing") or []) if c})
    return {"mode": "impute", "cells": int(sum(columns.values())), "columns": columns,
            "fill": f"mean of the {imputer.n_neighbors} nearest of {imputer.n_donors} donor rows"
            if imputer.n_neighbors else "column mean"}


def run_imputer(store) -> Imputer | None:
    """How a run fills missing cells (its ``imputation`` stage), or None when it does not impute
    (read from the store each call; a run's stages share their context's: ``RunContext.imputer``).

    Raises
    ------
    StoreNotFoundError, DamagedStageError
        The run imputes but its ``imputation`` stage is gone or damaged (re-running the run
        scans its input again and rewrites it).
    """
    return read_imputer(as_store(store, mode="r"))


def _stage_views(ctx: RunContext):
    """The views a stage hands the estimator, and the missing cells per row.

    As read when the run does not impute (counts None); else every view filled with the
    run's stored fill, lazily: the fill runs in the tasks that consume the rows (no extra
    pass), and the counts (int32, shape (N,)) share the rows' reads.
    """
    views = ctx.views
    imputer = ctx.imputer()
    if imputer is None:
        return views, None
    return fill_views(views, imputer), count_missing(views, table_cells(ctx.store))


def table_cells(store) -> dict[str, np.ndarray] | None:
    """Per categorical view of the run's table, which of its features stand for one cell (the
    first indicator of each column), so that a missing category counts as one cell."""
    record = store.attrs.get("input") or {}
    categories = record.get("categories")
    if not categories:
        return None
    return {view: np.concatenate([np.arange(len(categories[c])) == 0 for c in cols])
            for view, cols in record["views"].items() if cols and all(c in categories for c in cols)}


def input_record(opened: OpenedInput) -> dict[str, Any]:
    """What a run store keeps of its input: location, kind, views (a table's columns per view),
    id and label columns."""
    record = {"location": opened.source.location, "kind": opened.kind, "n_rows": opened.n_rows,
              "id_column": opened.source.id_column, "label_column": opened.source.label_column}
    if opened.plan is not None:
        record["views"] = opened.plan.views
        if opened.plan.categories:
            # The vocabulary of every categorical column: a new batch is encoded with it.
            record["categories"] = opened.plan.categories
    return record


def like_model(source: Any, model) -> Any:
    """A new batch read as the model's input was: a table without declared views gets the
    model's columns per view, and the model's id column when it has that column."""
    from ._io import InputSource, as_input

    source = as_input(source)
    record = model.attrs.get("input") or {}
    if not isinstance(source, InputSource) or not record.get("views") or not source.is_table:
        return source
    changes = {}
    if source.views is None:
        changes["views"] = record["views"]
    if record.get("categories") and source.categories is None:
        changes["categories"] = record["categories"]
    if source.id_column is None and record.get("id_column"):
        from ._tables import ParquetTable

        if record["id_column"] in ParquetTable.open(source.location, source.storage_options).columns:
            changes["id_column"] = record["id_column"]
    return dataclasses.replace(source, **changes) if changes else source


#: What check_assign refuses while a live run writes the model store.
_READ_UNFINISHED = "Labelling with the model it is still writing"


@dataclasses.dataclass(frozen=True)
class AssignPlan:
    """An assignment, checked before any work (:func:`check_assign`); :func:`assign` takes it
    instead of checking again.

    Attributes
    ----------
    model_store, output : str, PathLike or RunStore
    source : InputSource or in-memory input
        The batch, read as the model's input was (:func:`like_model`).
    estimator : estimator
        The model's, loaded.
    views : dict of str to dask.array.Array
        The batch's views, lazy (checked against the model).
    fingerprint : str
    opened : OpenedInput or None
    overwrite : bool
    """

    model_store: Any
    source: Any
    output: Any
    estimator: Any
    views: dict
    fingerprint: str
    opened: Any = None
    overwrite: bool = False


def check_assign(model_store: Any, source: Any, output: Any, *, overwrite: bool = False,
                 chunk_rows: int | None = None, missing: str | None = None) -> AssignPlan:
    """Every check of an assignment that reads no data, and writes nothing.

    The output must not overlap the model store or the input; the model store must hold a
    finished run, and one that is not (or is gone) because a live run is writing it (a refit
    replacing the model) is refused with ``StoreLockedError``; the input's views and features
    must match the model; an output store that holds another assignment or that this mkdist
    cannot read (unless ``overwrite``), or that another live run writes, is refused.
    ``missing`` (default: the batch's own, else the model run's) "impute" needs a model run
    that imputed: its fill values fill the batch.

    Returns
    -------
    AssignPlan
    """
    from mkdist.storage import RunStore

    refuse_overlap(output, model_store=model_store, input=source)
    try:
        src = as_store(model_store, mode="r")
    except (FileNotFoundError, DamagedStoreError):
        # A live run (a refit) replacing the model store wipes it first: say that, as
        # StoreLockedError, which a caller may wait out (the assign flow's ``lease_wait``).
        RunStore(model_store, mode="r").check_no_other_writer(_READ_UNFINISHED)
        raise
    if not src.is_complete("labels"):
        src.check_no_other_writer(_READ_UNFINISHED)
        raise InputValidationError(f"the run in {src.url} is not finished (its labels stage is not complete): "
                                   "finish it first (re-run it to resume).")
    est = load_estimator(src)
    source = like_model(source, src)
    mode = _assign_missing(src, source, missing)
    if isinstance(source, InputSource) and source.missing != mode:
        source = dataclasses.replace(source, missing=mode)
    opened = source.open() if isinstance(source, InputSource) else None
    views = opened.load() if opened is not None else load_views(source, chunk_rows=chunk_rows)
    est.predict(views)  # lazy: checks the views against the model, computes nothing
    fingerprint = views_fingerprint(views, mode)
    try:
        out = RunStore.open(output, mode="r")
    except FileNotFoundError:
        out = None
    except (DamagedStoreError, SchemaVersionError):  # unreadable here: what overwrite replaces
        if not overwrite:
            raise
        out = None
    if out is not None:
        out.check_no_other_writer("an assignment")
        if not overwrite:
            out.check_same_run(fingerprint, _assign_params(src))
    return AssignPlan(model_store, opened.source if opened is not None else source, output, est, views, fingerprint,
                      opened, bool(overwrite))


def _assign_missing(src, source: Any, missing: str | None) -> str:
    """How an assignment treats the batch's missing cells: as asked (``missing``, else the
    batch's InputSource), else as the model's run did; "impute" fills with the model's fill."""
    asked = missing if missing is not None else (source.missing if isinstance(source, InputSource) else None)
    model = (src.attrs.get("missing") or {}).get("mode", "refuse")
    mode = check_missing(asked, default=model)
    if mode == "impute" and model != "impute":
        raise InputValidationError(
            f"missing='impute' fills a batch with its model's fill values, and the run in {src.url} has none (it ran "
            "with missing='refuse'): refit it with --missing impute (missing='impute'), or fill the batch's missing "
            "cells first")
    return mode


def _assign_params(src) -> dict[str, Any]:
    return {"model_store": str(src.url), "model_fingerprint": src.fingerprint}


# ----------------------------------------------------------------------------- stages
def stage_landmarks(ctx: RunContext) -> float:
    """Sample the landmarks reproducibly and store their rows.  Returns seconds (0 if resumed
    or not in the run's plan).

    ``ctx``: the run's context (:func:`open_run`, or :func:`run_context` in a fresh process);
    the rows the input scan gathered are taken from it, else read.
    """
    import xarray as xr

    store, config = ctx.store, ctx.config
    if "landmarks" not in stage_plan(config) or store.is_complete("landmarks"):
        return 0.0
    t0 = time.perf_counter()
    handed = ctx.take_landmarks()
    if handed is not None:
        idx, rows = handed
    else:
        # Drawn on the views as read, as open_run draws them (the same rows for the same seed).
        idx = config.make_estimator().sample_landmarks(ctx.views, config.random_state)
        rows = gather_rows(_stage_views(ctx)[0], idx)
        if _scan_pending(store):
            try:  # the scan's checks on the landmark rows, in memory, before the fit uses them
                scan_views(rows)
            except InputValidationError:
                # The whole scan says why, of every row (it raises; if it does not, the fit goes on).
                scan_views(ctx.views, **_described(store))
    ds = xr.Dataset({"landmark_index": (("landmark",), idx)})
    for name, r in rows.items():
        ds[f"X__{name}"] = (("landmark", f"feature__{name}"), r)
    ds.attrs["view_names"] = list(rows)
    ds.attrs["elapsed_s"] = time.perf_counter() - t0  # provenance: what this stage cost when it ran
    store.write_stage("landmarks", ds, compute=compute)
    return time.perf_counter() - t0


def _described(store) -> dict[str, Any]:
    """What a refusal names a run's columns and rows by (a table's column names per view, its
    row ids), from the input the store records."""
    record = store.attrs.get("input") or {}
    out: dict[str, Any] = {"feature_names": record["views"]} if record.get("views") else {}
    if record.get("kind") == "table" and record.get("id_column"):
        def describe_row(row: int) -> str:  # on the error path only: opens the table again
            from ._io import as_input

            try:
                opened = as_input(record["location"], views=record["views"], id_column=record["id_column"]).open()
            except (MkdistError, OSError):
                return f"row {row}"
            return opened.describe_row(row)

        out["describe_row"] = describe_row
    return out


def stage_model(ctx: RunContext, *, progress: bool = False) -> float:
    """Fit the run's model: on the stored landmarks (on this process) when the plan has a
    landmarks stage, else the estimator's own (distributed) ``fit`` on the run's views."""
    store = ctx.store
    if store.is_complete("model"):
        return 0.0
    t0 = time.perf_counter()
    config = ctx.config
    est = config.make_estimator()
    categories = (store.attrs.get("input") or {}).get("categories")
    if categories:
        # Which features are categories, as an estimator fitted on a DataFrame knows it
        # (categories_): kept with the model, it encodes DataFrames given to it later.
        est.categories_ = categories
    if "landmarks" in stage_plan(config):
        ds = store.read_stage("landmarks")
        names = list(ds.attrs["view_names"])
        *values, index = compute_here(*(ds[f"X__{n}"].data for n in names), ds["landmark_index"].data)
        est.fit_landmarks(dict(zip(names, values)), index, config.random_state)
    else:
        views, _ = _stage_views(ctx)
        with _pass_progress("model", progress, int(next(iter(views.values())).shape[0])):
            est.fit(views)
    ds = state_to_dataset(est.model_state(), config.method)
    summary = est.summary()
    ds.attrs["n_clusters"] = int(est.n_clusters_)
    # The K rule's choice when n_clusters was "auto" or a range ("null" otherwise).  On a K
    # given by hand the rule's hint is computed where it is shown (report, inspect: see
    # load_estimator's k_hint), not here: 1.0 s of a 1M-row W1 run, on one core while the
    # workers waited for the model.
    ds.attrs["n_clusters_choice"] = json.dumps(summary["n_clusters_choice"])
    # What reports show of the model, kept with it: a report drawn while the run goes on reads
    # this instead of rebuilding the estimator (mkdist._report._summary.ReportDraft).
    ds.attrs["summary"] = json.dumps(summary)
    timings = dict(getattr(est, "diagnostics_", {}).get("timings", {}))
    ds.attrs["timings"] = to_jsonable(timings)
    ds.attrs["elapsed_s"] = time.perf_counter() - t0
    store.write_stage("model", ds, compute=compute)
    return time.perf_counter() - t0


def load_estimator(store, *, k_hint: bool = False):
    """The fitted estimator of a run store, rebuilt from arrays + JSON (any method, no pickle).

    For a landmark-embedding run the centroids come from the ``labels`` stage once it is
    complete (before that the estimator transforms but does not predict).  Each call reads
    the store (the stages of a run share one read: ``RunContext.estimator``).

    With ``k_hint`` the estimator carries the K rule's verdict (``summary()["n_clusters_choice"]``)
    also when K was given by hand: the rule runs on the landmark kernel (~1 s at 1000
    landmarks).
    """
    method, state = read_model_state(as_store(store, mode="r"))
    return estimator_from_state(method, state, k_hint=k_hint)


def stage_embedding(ctx: RunContext, *, progress: bool = False) -> dict[str, float]:
    """The embedding of every row across the cluster, written to the store (and the kernel
    blocks if the run asked for them).  Returns ``{"embed_s", "write_s"}`` (zeros if resumed):
    ``embed_s`` includes writing the embedding (one pass), ``write_s`` the kernel blocks."""
    import xarray as xr

    store, config = ctx.store, ctx.config
    plan = stage_plan(config)
    if "embedding" not in plan or (store.is_complete("embedding") and (
            not config.write_kernel_blocks or store.is_complete("kernel_blocks"))):
        return {"embed_s": 0.0, "write_s": 0.0}
    views, counts = _stage_views(ctx)
    est = ctx.estimator()
    t_embed = t_write = 0.0
    if not store.is_complete("embedding"):
        t0 = time.perf_counter()
        # Each task embeds a row chunk and writes it: the embedding is never held in worker
        # memory (N x K floats: 0.4 GB per worker at 10M W1 rows on 2 workers, which made the
        # workers' peak grow with N); k-means streams it back from the store.
        n_rows = int(next(iter(views.values())).shape[0])
        scan = InputScan(views, **_described(store)) if _scan_pending(store) and _is_lazy(views) else None
        if scan is not None:
            # The input scan in the embedding's tasks: each reads its chunk once, sums the scan's
            # moments and embeds it (a chunk with NaN/inf is not embedded: the scan refuses it).
            H, partials = _embed_and_scan(est, scan)
        else:
            H, partials = est.transform(views), None
        ds = xr.Dataset({"embedding": (("sample", "component"), H)})
        # Uncompressed: zstd saves 8% on these floats and cost 2-3x the read time of each of
        # the k-means passes (measured on W1, 50,000 x 20 float32 chunks: 9-11 ms vs 3-4 ms).
        ds["embedding"].encoding["compressors"] = None
        if counts is not None:
            # Counted in the embedding's pass (the rows' reads are shared); the labels stage copies it.
            ds["missing_cells"] = (("sample",), counts)
        if partials is None:
            pending = store.write_stage_lazy("embedding", ds)
            pending.commit(lambda delayed: _persist(delayed, progress, "embedding", n_rows))
        else:
            import dask

            # Dask's low-level fusion off: the write's graph is optimized on its own (when the
            # stage's writer wraps it), where each chunk's sealed task has one consumer and would
            # be fused into it, and computed a second time for the scan's sum.
            with dask.config.set({"optimization.fuse.active": False}):
                pending = store.write_stage_lazy("embedding", ds)
                try:
                    total = dask.delayed(_sum_rows)(list(partials.to_delayed().ravel()))
                    _, total = _persist([pending.delayed, total], progress, "embedding", n_rows)
                    stats = scan.finish(np.asarray(compute(total)[0]))  # raises what the scan refuses
                except BaseException:
                    pending.abort()
                    raise
            pending.finalize()
            store.update_attrs(input_stats=stats)
        t_embed = time.perf_counter() - t0
    if config.write_kernel_blocks and not store.is_complete("kernel_blocks"):
        t0 = time.perf_counter()
        P, names = est.kernel_blocks(views)
        store.write_stage("kernel_blocks", xr.Dataset({"P": (("kernel", "sample", "landmark"), P)},
                                                      attrs={"kernel_names": names}), compute=compute)
        t_write += time.perf_counter() - t0
    return {"embed_s": t_embed, "write_s": t_write}


def _is_lazy(views: Mapping[str, Any]) -> bool:
    from .._core._validation import is_dask_array

    return any(is_dask_array(v) for v in views.values())


def _embed_scan_chunk(*args, block_info=None):
    """One chunk: the scan's partial and, when the chunk is finite, its embedding; as a (1, 1)
    object block (the task's one output, split by two getters)."""
    from .._core._worker_env import tune_malloc
    from ._io import _moments

    tune_malloc()  # like every row task (see _core/_blocks.py): this may be a worker's first
    *blocks, state = args
    est, names, shifts, n_bad, width, dtype = state
    partial = _moments(blocks, shifts)
    if partial[n_bad].any():  # NaN or inf in the chunk: not embedded, the scan refuses it
        H = np.zeros((blocks[0].shape[0], width), dtype=dtype)
    else:
        H = est.transform(dict(zip(names, blocks)))
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (H, partial[None, :])
    return out


def _part_of(block, i):
    return block[0, 0][i]


def _sum_rows(blocks: list) -> np.ndarray:
    """The sum of (1, w) partials, in chunk order, shape (w,)."""
    return np.sum(np.concatenate(blocks), axis=0)


def _embed_and_scan(est, scan):
    """The embedding (lazy) and the scan's partials (lazy, (n_chunks, width)) from ONE task per
    row chunk, which reads the chunk once: the estimator's own ``transform`` on the chunk (the
    same arithmetic over the same sub-blocks as its Dask graph) beside the scan's moments."""
    import dask
    import dask.array as da
    from dask.base import tokenize

    rows = scan.rows
    first = dict(zip(rows.names, scan.first))
    if not all(np.isfinite(r).all() for r in first.values()):
        # The first row is refused: the scan of its own says so in full (on this path only).
        scan_views(dict(zip(rows.names, rows.arrays)), feature_names=scan.feature_names)
    probe = est.transform(first)  # the embedding's width and dtype
    width, dtype = int(probe.shape[1]), probe.dtype
    # Where a partial holds the NaN and inf counts (see _io._moments: 5 sums per view).
    at, n_bad = 0, []
    for d in scan.widths:
        n_bad.extend(range(at + 3 * d, at + 5 * d))
        at += 5 * d
    nb = len(rows.row_chunks)
    state = dask.delayed((est, rows.names, scan.shifts, np.asarray(n_bad), width, dtype), pure=False,
                         traverse=False)
    name = f"mkdist-embed-scan-{tokenize(*rows.arrays, scan.width, width)}"
    # Sealed: both getters use each chunk's one task (fused into each, it ran twice).
    parts = unfused(da.map_blocks(_embed_scan_chunk, *rows.arrays, state, chunks=((1,) * nb, (1,)), dtype=object,
                                  meta=np.empty((0, 0), dtype=object), name=name))
    H = parts.map_blocks(_part_of, 0, chunks=(rows.row_chunks, (width,)), dtype=dtype,
                         meta=np.empty((0, 0), dtype=dtype), name=f"{name}-embedding")
    partials = parts.map_blocks(_part_of, 1, chunks=((1,) * nb, (scan.width,)), dtype=np.float64,
                                meta=np.empty((0, 0)), name=f"{name}-scan")
    return H, partials


#: Rows of every run kept for its report (the 2-D view of the embedding, the distance
#: distribution): evenly spaced over the input, so a report never reads the whole embedding.
REPORT_ROWS = 20_000


def report_rows(n_rows: int, size: int = REPORT_ROWS) -> np.ndarray:
    """Sorted, evenly spaced row indices of the report sample, shape (min(N, size),)."""
    return np.unique(np.linspace(0, n_rows - 1, num=min(n_rows, size)).round().astype(np.int64))


def principal_components(X, n_components: int = 16) -> np.ndarray:
    """The rows of X on their top principal components (at most ``n_components``), float32.

    What a report draws (the first two) and keeps small whatever the embedding's width
    (late fusion's and the RFF feature spaces have hundreds of columns).
    """
    X = np.asarray(X, dtype=np.float64)
    X = X - X.mean(axis=0)
    if X.shape[0] < 2:
        return X[:, :n_components].astype(np.float32)
    U, s, _ = np.linalg.svd(X, full_matrices=False)
    r = min(n_components, s.size)
    return (U[:, :r] * s[:r]).astype(np.float32)


def stage_labels(ctx: RunContext, *, progress: bool = False) -> dict[str, float]:
    """Label every row: k-means on the stored embedding (the centroids are stored with the
    labels), or the fitted estimator's assignment for fit-predict methods.

    Besides ``labels`` (sample,) the stage holds ``distance`` (sample,), each row's squared
    distance to its centre, ``cluster_sizes`` (cluster,), for a run that imputes
    ``missing_cells`` (sample,), each row's imputed cells (attrs ``missing_rows`` and
    ``missing_cells`` count them), and the report sample: ``report_index`` (report_row,),
    ``report_labels`` (report_row,) and ``report_embedding`` (report_row, component), so that a
    report reads neither the embedding nor the labels of every row.  Its attrs hold
    ``distance_p99``, the 99th percentile of the distances (what drift monitoring compares new
    batches with).

    Returns ``{"kmeans_s", "write_s"}`` (zeros if resumed).
    """
    import dask.array as da
    import xarray as xr

    store = ctx.store
    if store.is_complete("labels"):
        # A store written before profiles existed, or whose profiles were damaged: one pass.
        t0 = time.perf_counter()
        done = stage_profiles(store, ctx.views, int(ctx.estimator().n_clusters_),
                              persist=lambda b: _persist(b, progress, "profiles", int(store.read_stage("labels")
                                                                                       ["labels"].shape[0])))
        return {"kmeans_s": 0.0, "write_s": time.perf_counter() - t0 if done else 0.0}
    config = ctx.config
    est = ctx.estimator()
    layout = profile_layout(store, ctx.views)
    t0 = time.perf_counter()
    attrs: dict[str, Any] = {}
    variables: dict[str, Any] = {}
    if "embedding" in stage_plan(config):
        # Streamed from the store by every pass (k-means sample, Lloyd passes, labels), not
        # persisted: worker memory stays independent of N (see stage_embedding).
        embedding = store.read_stage("embedding")
        H = embedding["embedding"].data
        counts = embedding["missing_cells"].data if "missing_cells" in embedding else None
        with _pass_progress("k-means", progress, int(H.shape[0])):
            km = est.fit_centroids(H, config.random_state)  # None: the method keeps its landmark centroids
        shown = None
        variables["cluster_centers"] = (("cluster", "component"), est.cluster_centers_)
        if km is not None:
            attrs = {"inertia": float(km.inertia), "kmeans_n_iter": int(km.n_iter)}
    else:
        views, counts = _stage_views(ctx)
        labels, distance = est.assign_with_distance(views)
        shown = est.report_embedding(views)
    n_rows = int(H.shape[0]) if shown is None else int(labels.shape[0])
    idx = report_rows(n_rows)
    extra = () if counts is None else (counts,)
    if shown is None:
        # One pass over the stored embedding: per chunk one task computes the labels, the
        # distances, the cluster sizes and the report rows (they were 4 passes and 16 tasks
        # per chunk: the report rows' read, the labels, the sizes and sample over them).
        # The same task accumulates the chunk's profile from its labels and its rows as read
        # (not filled); the partials merge by a tree on the workers (issue 42).
        accumulate = profile_accumulator(ctx.views, layout, int(est.n_clusters_), H.chunks[0])
        labels, distance, sizes, (sample, sample_labels, sample_distance), *profiles = labels_pass(
            H, est.cluster_centers_, idx, n_clusters=int(est.n_clusters_),
            persist=lambda parts: _persist(parts, progress, "labels", n_rows), accumulate=accumulate)
        profiles = profiles[0] if profiles else None
        extra = _persist(list(extra), False) if extra else []
        missing = compute(*[x for c in extra for x in ((c > 0).sum(), c.sum())])
    else:
        # One persist: the report sample (and the missing cells) share the pass and the input
        # reads with the labels.
        labels = _int32(labels)
        # The profiles' partials share the pass (and the input's reads) with the labels.
        profiles = profile_blocks(labels, ctx.views, layout, int(est.n_clusters_))
        labels, distance, sample, *extra = _persist((labels, distance.astype(np.float32), shown[idx],
                                                     *_listed(profiles), *extra), progress, "labels", n_rows)
        profiles, extra = _unlisted(profiles, extra)
        profiles = merge_blocks(profiles)
        # The sizes too: the labels are in memory now, and the metrics and the report need them.
        sample, sample_distance, sample_labels, sizes, *missing = compute(
            sample, distance[idx], labels[idx], da.bincount(labels, minlength=int(est.n_clusters_)),
            *[x for c in extra for x in ((c > 0).sum(), c.sum())])
    if extra:
        variables["missing_cells"] = (("sample",), extra[0])
        attrs.update(missing_rows=int(missing[0]), missing_cells=int(missing[1]))
    t_labels = time.perf_counter() - t0
    t0 = time.perf_counter()
    variables.update({"labels": (("sample",), labels), "distance": (("sample",), distance),
                      "cluster_sizes": (("cluster",), np.asarray(sizes, dtype=np.int64)),
                      "report_index": (("report_row",), idx),
                      "report_labels": (("report_row",), np.asarray(sample_labels)),
                      "report_embedding": (("report_row", "report_component"), principal_components(sample))})
    attrs["distance_p99"] = float(np.quantile(np.asarray(sample_distance, dtype=np.float64), 0.99))
    store.write_stage("labels", xr.Dataset(variables, attrs={**attrs, "elapsed_s": t_labels}), compute=compute)
    write_profiles(store, profiles, layout)
    return {"kmeans_s": t_labels, "write_s": time.perf_counter() - t0}


def stage_metrics(ctx: RunContext, *, timings: Mapping[str, float] | None = None, y_true=None,
                  scheduler: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Cluster sizes, the model's summary, timings (and scores when ``y_true`` is given), stored.

    ``scheduler``: where the run computed
    (:meth:`mkdist._pipeline._dask_runtime.RunScheduler.to_json`), recorded as it is.
    """
    import dask
    import xarray as xr

    store = ctx.store
    labels = store.read_stage("labels")
    lab = labels["labels"].data
    # Read here, not through the cluster: the sizes are a few numbers, and the labels reach
    # the client anyway to be scored (through a fresh cluster's workers the two reads took 9 s
    # of a 200k-row re-run on a busy 2-core machine).
    with dask.config.set(scheduler="threads"):
        sizes = labels["cluster_sizes"].values
        scores = clustering_scores(np.asarray(y_true), np.asarray(lab.compute())) if y_true is not None else None
    kmeans = ({"inertia": labels.attrs["inertia"], "n_iter": labels.attrs["kmeans_n_iter"]}
              if "inertia" in labels.attrs else None)
    summary = {
        **ctx.estimator().summary(),
        "params": dict(store.params),
        "N": int(lab.shape[0]),
        "cluster_sizes": [int(s) for s in sizes],
        "timings": dict(timings or {}),
        "scheduler": dict(scheduler) if scheduler is not None else None,
        "scores": scores,
        "kmeans": kmeans,
    }
    record = store.attrs.get("missing")
    if record and "missing_rows" in labels.attrs:
        summary["missing"] = {"mode": record["mode"], "rows": labels.attrs["missing_rows"],
                              "cells": labels.attrs["missing_cells"], "fill": record.get("fill")}
    summary = to_jsonable(summary)
    ds = xr.Dataset({"cluster_sizes": (("cluster",), np.asarray(sizes, dtype=np.int64))})
    ds.attrs["summary"] = json.dumps(summary)
    store.write_stage("metrics", ds, overwrite=True, compute=compute)
    store.update_attrs(summary=summary)
    return summary


#: The stage functions by stage name (the flows run the plan's stages through this table).
_STAGE_FUNCTIONS = {
    "landmarks": lambda ctx, progress: {"sample_s": stage_landmarks(ctx)},
    "model": lambda ctx, progress: {"fit_s": stage_model(ctx, progress=progress)},
    "embedding": lambda ctx, progress: stage_embedding(ctx, progress=progress),
    "labels": lambda ctx, progress: stage_labels(ctx, progress=progress),
}


def run_stage(name: str, ctx: RunContext, *, progress: bool = False) -> dict[str, float]:
    """Run one stage of the plan by name on the run's context; returns its timings (seconds,
    zeros if resumed)."""
    if name not in _STAGE_FUNCTIONS:
        raise InputValidationError(f"unknown stage {name!r}; stages are {list(_STAGE_FUNCTIONS)}.")
    if not isinstance(ctx, RunContext):
        raise InputValidationError(f"run_stage takes the run's context (open_run, or run_context(store, views) in a "
                                   f"fresh process), not {type(ctx).__name__}.")
    return _STAGE_FUNCTIONS[name](ctx, progress)


def merge_timings(parts: list[dict[str, float]]) -> dict[str, float]:
    """The timings of several stages as one dict (seconds per kind, summed)."""
    out: dict[str, float] = {"sample_s": 0.0, "fit_s": 0.0, "embed_s": 0.0, "kmeans_s": 0.0, "write_s": 0.0}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


# ----------------------------------------------------------------------------- entry points
def assign(model_store: Any, source: Any = None, output: Any = None, *, overwrite: bool = False,
           progress: bool = False, chunk_rows: int | None = None, labels_out: Any = None,
           id_column: str | None = None, drift_thresholds: Mapping[str, float] | None = None,
           missing: str | None = None) -> Any:
    """Label new points with a stored model, no refit, and measure how far they drifted.

    Parameters
    ----------
    model_store : str, Path, RunStore or AssignPlan
        A finished run store (its labels stage complete, so its centroids are known); or the
        assignment checked already (:func:`check_assign`), with ``source`` and ``output``
        not given: it is not checked again (its ``overwrite`` is the one that applies).
    source : array, list/dict of arrays, xarray.Dataset or path/URL
        The new points, with the same views and features as the training data.
    output : str or Path
        Store for the result: stage ``labels`` with ``labels`` and ``distance`` (sample,);
        root attributes ``drift`` (see :func:`mkdist._pipeline._drift.drift_statistics`) and
        ``input_stats`` (the batch's per-feature statistics).
    labels_out : str or Path, optional
        Also write every row's id, cluster and distance as Parquet (:func:`write_labels_parquet`).
    id_column : str, optional
        Column / coordinate of ``source`` holding the row ids (default: the row position).
    drift_thresholds : dict, optional
        Overrides of ``mkdist._pipeline._drift.DEFAULT_THRESHOLDS``.
    missing : {"refuse", "impute"}, optional
        The batch's missing cells; default: as the model's run treated its own.  "impute"
        fills them with the model's fill (its stored donors and statistics, never the
        batch's); the labels stage then holds ``missing_cells`` per row.

    Returns
    -------
    RunStore
        The output store.
    """
    import dask.array as da
    import xarray as xr

    from mkdist.storage import RunStore

    thresholds = check_thresholds(drift_thresholds)
    if isinstance(model_store, AssignPlan):
        if source is not None or output is not None:
            raise InputValidationError("assign(plan) takes the batch and the output from the plan: give neither.")
        plan = model_store
    else:
        if is_frame(source):
            # Read by column like the model's table, from a Parquet copy beside the output (see frame_input).
            source = frame_input(source, output)
        plan = check_assign(model_store, source, output, overwrite=overwrite, chunk_rows=chunk_rows, missing=missing)
    model_store, source, output, overwrite = plan.model_store, plan.source, plan.output, plan.overwrite
    est, vs, fingerprint, opened = plan.estimator, plan.views, plan.fingerprint, plan.opened
    id_column = id_column or (source.id_column if opened is not None else None)
    src = as_store(model_store, mode="r")
    imputer = run_imputer(src) if _assign_missing(src, source, missing) == "impute" else None
    if labels_out is not None:
        refuse_overlap(labels_out, model_store=model_store, input=source, output=output)
        check_labels_out(labels_out, overwrite, _assignment_mark(output, fingerprint),
                         storage_options=getattr(source, "storage_options", None))
        if opened is None:
            load_ids(source, id_column, vs)  # a missing id is refused before any work
    fit_labels = src.read_stage("labels")
    fit_p99 = float(fit_labels.attrs["distance_p99"])
    fitted_sizes = json.loads(src.read_stage("metrics").attrs["summary"])["cluster_sizes"]
    described = {} if opened is None else {"feature_names": opened.feature_names, "describe_row": opened.describe_row}
    with writer_lease(output, owner="mkdist.assign"):
        out = RunStore.create(output, fingerprint=fingerprint, params=_assign_params(src), overwrite=overwrite)
        if prepare_resume(out, ["labels", PROFILES_STAGE])["status"].get("labels") != "complete":
            n_rows = int(next(iter(vs.values())).shape[0])
            with _pass_progress("scan input", progress, n_rows):
                # Refuses NaN (unless imputed) / overflow / constant views before any write.
                batch_stats = scan_views(vs, missing="impute" if imputer is not None else "refuse", **described)
            views = vs if imputer is None else fill_views(vs, imputer)
            extra = () if imputer is None else (count_missing(vs, table_cells(src)),)
            labels, distance = est.assign_with_distance(views)
            labels, layout = _int32(labels), profile_layout(src, vs)
            # The batch's profiles (in the fit's columns) share the pass and the reads with its labels.
            profiles = profile_blocks(labels, vs, layout, int(est.n_clusters_))
            labels, distance, *extra = _persist((labels, distance.astype(np.float32), *_listed(profiles), *extra),
                                                progress, "assign", int(labels.shape[0]))
            profiles, extra = _unlisted(profiles, extra)
            sizes, beyond, *missing_sums = compute(da.bincount(labels, minlength=int(est.n_clusters_)),
                                                   (distance > fit_p99).mean(),
                                                   *[x for c in extra for x in ((c > 0).sum(), c.sum())])
            drift = drift_statistics(fit_stats=src.attrs.get("input_stats") or {}, batch_stats=batch_stats,
                                     fitted_sizes=fitted_sizes, batch_sizes=sizes,
                                     share_beyond_fit_p99=float(beyond), thresholds=thresholds)
            drift["fit_p99"] = fit_p99
            variables = {"labels": (("sample",), labels), "distance": (("sample",), distance)}
            attrs: dict[str, Any] = {"drift": json.dumps(drift)}
            record: dict[str, Any] = {}
            if extra:
                variables["missing_cells"] = (("sample",), extra[0])
                attrs.update(missing_rows=int(missing_sums[0]), missing_cells=int(missing_sums[1]))
                record = {"missing": {"mode": "impute", "rows": int(missing_sums[0]), "cells": int(missing_sums[1]),
                                      "fill": f"the model's, from {src.url}"}}
            profiles = merge_blocks(profiles)
            out.write_stage("labels", xr.Dataset(variables, attrs=attrs), compute=compute)
            write_profiles(out, profiles, layout)
            out.update_attrs(drift=drift, input_stats=batch_stats, **record)
        if labels_out is not None:
            write_stored_labels(out, labels_out, source, vs, id_column=id_column, overwrite=overwrite,
                                progress=progress)
    return out


def write_stored_labels(store, labels_out: Any, source: Any, views: Mapping[str, Any], *,
                        id_column: str | None = None, overwrite: bool = True, progress: bool = False) -> str:
    """A store's labels stage as Parquet keyed by its input's ids: id, cluster, distance per
    row (and ``missing_cells`` when the run imputed), marked as the store's
    (:func:`mkdist._pipeline._io.labels_mark`).  What a run's and an assignment's labels
    output both write; the caller has decided that it is written (``check_labels_out``).

    Parameters
    ----------
    store : RunStore
        Its labels stage stored.
    labels_out : str or PathLike
    source : InputSource or in-memory input
        Where the ids are read.
    views : dict of str to dask.array.Array
        The input's views (their row chunks).
    id_column : str, optional
        Default: the row position, in a column named ``row``.

    Returns
    -------
    str
    """
    stored = store.read_stage("labels")
    chunks = next(iter(views.values())).chunks[0]
    labels = stored["labels"].data.rechunk((chunks,))
    counts = stored["missing_cells"].data.rechunk((chunks,)) if "missing_cells" in stored else None
    return write_labels_parquet(labels_out, labels, stored["distance"].data.rechunk((chunks,)),
                                load_ids(source, id_column, views), id_name=id_column or "row", overwrite=overwrite,
                                mark=labels_mark(store), storage_options=getattr(source, "storage_options", None),
                                compute=persist_progress("labels-out", int(labels.shape[0]), progress),
                                missing_cells=counts)


def _assignment_mark(output: Any, fingerprint: str) -> dict[str, Any] | None:
    """The labels-output mark of ``output`` when it already holds this batch's labels, else None."""
    from mkdist.storage import RunStore

    try:
        out = RunStore.open(output, mode="r")
    except (FileNotFoundError, MkdistError):
        return None
    if out.fingerprint != fingerprint or not out.is_complete("labels"):
        return None
    return labels_mark(out)
