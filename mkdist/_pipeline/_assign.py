"""Labelling a new batch with a stored model (no refit): the assignment checked before any
work (:func:`check_assign`), run (:func:`assign`: labels, drift, profiles), and the labels written out
keyed by the batch's ids (:func:`write_stored_labels`, shared with a run's labels output)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core._cluster import compute
from .._core._columns import is_frame
from .._core._missing import count_missing, fill_views
from ..errors import DamagedStoreError, InputValidationError, MkdistError, SchemaVersionError
from ._drift import check_thresholds, drift_statistics
from ._io import (
    InputSource,
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
from ._passes import _int32, _listed, _pass_progress, _persist, _unlisted, persist_progress
from ._profiles import PROFILES_STAGE, merge_blocks, profile_blocks, profile_layout, stage_profiles, write_profiles
from ._run_input import like_model, run_imputer, table_cells
from ._run_store import as_store, load_estimator, prepare_resume, writer_lease

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
        else:
            # Labels stored but the profiles lost or damaged (or written before profiles
            # existed): computed from the stored labels, in the fit's columns.
            stage_profiles(out, vs, int(est.n_clusters_), columns_of=src)
        if labels_out is not None:
            write_stored_labels(out, labels_out, source, vs, id_column=id_column, overwrite=overwrite,
                                progress=progress)
    return out


def write_stored_labels(store, labels_out: Any, source: Any, views: Mapping[str, Any], *,
                        id_column: str | None = None, overwrite: bool = True, progress: bool = False) -> str:
    """A store's labels stage as Parquet keyed by its input's ids: id, cluster, distance per
    row (and ``missing_cells`` when the run imputed), marked as the store's
    (:func:`mkdist._pipeline._labels_out.labels_mark`).  What a run's and an assignment's labels
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
