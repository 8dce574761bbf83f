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

Around the stages, each in its own module: the run's store (opening, writer lease, resume
repair, stage plan: :mod:`._run_store`), its input as the stages read it (input record,
imputation: :mod:`._run_input`), passes with progress (:mod:`._passes`), and labelling a new
batch with a stored model (:mod:`._assign`); the names other modules import from here are
re-exported.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._core import _missing
from .._core._cluster import compute, compute_here, unfused
from .._core._kmeans import labels_pass
from .._core._missing import Imputer, donor_indices
from .._core._sampling import gather_rows
from .._core._state import state_to_dataset, to_jsonable
from ..errors import InputValidationError
from ..metrics import clustering_scores
from ._assign import AssignPlan, assign, check_assign, write_stored_labels
from ._context import IMPUTATION_STAGE, RunContext, run_context
from ._io import InputScan, refuse_overlap, scan_views
from ._passes import _int32, _listed, _pass_progress, _persist, _unlisted, persist_progress
from ._profiles import merge_blocks, profile_accumulator, profile_blocks, profile_layout, stage_profiles, write_profiles
from ._run_input import (
    _described,
    _missing_record,
    _scan_in_embedding,
    _scan_pending,
    _stage_views,
    _write_imputation,
    input_record,
    like_model,
    run_imputer,
)
from ._run_store import as_store, load_estimator, prepare_resume, stage_plan, writer_lease

__all__ = [
    "check_assign", "AssignPlan", "open_run", "run_context", "RunContext", "write_stored_labels",
    "writer_lease", "prepare_resume", "stage_plan", "run_stage",
    "merge_timings", "stage_landmarks", "stage_model", "stage_embedding", "stage_labels",
    "stage_metrics", "load_estimator", "assign", "refuse_overlap", "persist_progress", "input_record", "like_model",
    "run_imputer", "IMPUTATION_STAGE", "as_store",
]


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
    from ._scan import _moments

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
    # Where a partial holds the NaN and inf counts (see _scan._moments: 5 sums per view).
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


#: Above this many bytes of labels and distances (8 a row: 33.5M rows), the labels stage does
#: not hold them on the workers between its pass and its store write (``MKDIST_HELD_LABELS_BYTES``
#: overrides, for tests and measurements).
HELD_LABELS_BYTES = 256 << 20


def held_labels_bytes() -> int:
    """:data:`HELD_LABELS_BYTES`, or ``MKDIST_HELD_LABELS_BYTES`` when set."""
    value = os.environ.get("MKDIST_HELD_LABELS_BYTES", "").strip()
    return int(value) if value else HELD_LABELS_BYTES


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
        # Beside it, a task per chunk accumulates the chunk's profile from its labels and its
        # rows as read (not filled), persisted with the labels; the partials merge by a tree on
        # the workers and are freed as they merge (issue 42).
        # The pass's labels and distances (8 bytes a row) are held on the workers until the
        # store write while they are small; above HELD_LABELS_BYTES the write computes them
        # again from the stored embedding (a second read of it, ~5% of a run) so that no
        # memory grows with N (100M W1 rows held 0.75 GiB of them: peak 3.59 GiB).
        hold = n_rows * 8 <= held_labels_bytes()
        accumulate = profile_accumulator(ctx.views, layout, int(est.n_clusters_), H.chunks[0])
        labels, distance, sizes, (sample, sample_labels, sample_distance), *profiles = labels_pass(
            H, est.cluster_centers_, idx, n_clusters=int(est.n_clusters_),
            persist=(lambda parts: _persist(parts, progress, "labels", n_rows)) if hold else (lambda parts: parts),
            accumulate=accumulate)
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
