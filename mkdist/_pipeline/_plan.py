"""A run, checked and decided once: :func:`check_request`, :func:`plan_run` and the immutable
:class:`RunRequest` / :class:`RunPlan` they return.

Every check of a run that reads no data lives here, each done once per run: the parameters
against the method's table, the remote locations probed, outputs overlapping inputs, the
input's metadata (a table's columns, views, nulls, row ids), the parameters against the
input's shape, the store (a file, another run, another live writer, another schema), the
labels output and the report path.  What the run decides is decided here too and kept in
the plan, never written back into a config: the method of ``method="auto"``, the seed (the
stored run's, else one drawn), whether the store already holds the whole run.

Two steps, so that the command line can answer "nothing to do" between them before the
numerical stack loads: :func:`check_request` (no Dask, xarray or scikit-learn: the request's
key is known after it) and :func:`plan_run` (the views, the estimator's own checks, the
store).  The driver (``mkdist._run._driver``), the stages and both flows take the plan;
:meth:`RunPlan.to_json` / :meth:`RunPlan.from_json` carry it to a flow as one parameter.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from mkdist.storage._remote import probe_run

from .._methods._registry import AUTO_METHOD
from ..errors import DamagedStoreError, InputValidationError, SchemaVersionError
from ._config import RunConfig
from ._io import (
    InputSource,
    OpenedInput,
    as_input,
    check_labels_out,
    check_missing,
    labels_mark,
    load_ids,
    load_views,
    refuse_file_store,
    refuse_overlap,
    views_fingerprint,
)
from ._rerun import request_key

__all__ = ["RunRequest", "RunPlan", "AssignRequest", "check_request", "plan_run"]

logger = logging.getLogger("mkdist")


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """A run as asked, its cheap checks passed (:func:`check_request`).

    Attributes
    ----------
    source : InputSource or in-memory input
    store : str, PathLike or RunStore
    config : RunConfig
        As given (``method="auto"`` and ``random_state=None`` unresolved): what the request's
        key and its JSON hold.
    labels_out : str or None
    overwrite : bool
    report : bool or str
    id_column : str or None
        An in-memory input's (a location's is its InputSource's).
    missing : {"refuse", "impute"}
    opened : OpenedInput or None
        A location's metadata, read once.
    key : str or None
        For a location's input: the request this run answers
        (:func:`mkdist._pipeline._rerun.request_key`), recorded in the store when the run
        finishes, so that the same command again is a no-op.
    """

    source: Any
    store: Any
    config: RunConfig
    labels_out: str | None = None
    overwrite: bool = False
    report: bool | str = False
    id_column: str | None = None
    missing: str = "refuse"
    opened: OpenedInput | None = None
    key: str | None = None

    @property
    def label_column(self) -> str | None:
        """The input's column of true labels (a location's), else None."""
        return self.source.label_column if isinstance(self.source, InputSource) else None

    def to_json(self) -> dict[str, Any]:
        """The request as JSON: what a flow run, a deployment or a refit takes as its ``plan``.

        Without the input's storage options: flow parameters are stored by the Prefect
        server, and the flow's process has its own credentials (or the options registered
        for the run's locations, when it is this process).

        Raises
        ------
        InputValidationError
            The input is in-memory data (arrays, a Dataset): it has no JSON.
        """
        if not isinstance(self.source, InputSource):
            raise InputValidationError(
                f"a run of in-memory data ({type(self.source).__name__}) has no JSON: give its input as a path or URL "
                "(mkdist.cluster writes a DataFrame beside the store) to hand the run to a flow.")
        report = self.report if isinstance(self.report, bool) else os.fspath(self.report)
        return {"source": _source_json(self.source),
                "store": str(getattr(self.store, "url", None) or os.fspath(self.store)),
                "config": self.config.to_json(), "labels_out": self.labels_out, "overwrite": bool(self.overwrite),
                "report": report}

    @classmethod
    def from_json(cls, data: Any) -> RunRequest:
        """The request of :meth:`to_json` (or one written by hand: a deployment's ``plan``),
        checked (:func:`check_request`).

        ``source`` is a location or an InputSource's JSON (its views, id and label columns,
        ``missing``); ``config`` a :class:`RunConfig`'s JSON (``n_clusters``, ``method``,
        ``random_state``, estimator parameters in ``params``); ``labels_out``, ``overwrite``
        (default False) and ``report`` (default True: a flow's run writes its report) are
        optional.
        """
        data = _mapping(data)
        known = {"source", "store", "config", "labels_out", "overwrite", "report", "resolved"}
        unknown = sorted(set(data) - known)
        if unknown or not {"source", "store", "config"} <= set(data):
            raise InputValidationError(
                f"a run plan holds `source`, `store` and `config` (optionally `labels_out`, `overwrite`, `report`); "
                f"got {sorted(data)}" + (f" ({unknown} unknown)" if unknown else ""))
        return check_request(as_input(data["source"]), data["store"], RunConfig.from_json(_mapping(data["config"])),
                             labels_out=data.get("labels_out"), overwrite=bool(data.get("overwrite", False)),
                             report=data.get("report", True))


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A run, checked and decided before any work (:func:`plan_run`); immutable.

    Attributes
    ----------
    request : RunRequest
        What was asked (source, store, the config as given, outputs), checked.
    config : RunConfig
        Resolved: ``method="auto"`` chosen, the seed adopted from the stored run or drawn.
    views : dict of str to dask.array.Array
        Lazy; nothing read.
    fingerprint : str
        The input's (:func:`mkdist._pipeline._io.views_fingerprint`): the store's identity of it.
    existing : RunStore or None
        The store at the location when planned, if there was one this mkdist reads.
    labels_action : {"write", "skip", "replace"} or None
        What the run does with ``labels_out`` (skip: this run already wrote it).
    complete : bool
        Every stage of the plan (and the metrics) is stored for this run: nothing to compute.
    """

    request: RunRequest
    config: RunConfig
    views: dict
    fingerprint: str
    existing: Any = None
    labels_action: str | None = None
    complete: bool = False

    # What was asked, by name (the driver and the stages read these).
    source = property(lambda self: self.request.source)
    store = property(lambda self: self.request.store)
    opened = property(lambda self: self.request.opened)
    labels_out = property(lambda self: self.request.labels_out)
    overwrite = property(lambda self: self.request.overwrite)
    report = property(lambda self: self.request.report)
    id_column = property(lambda self: self.request.id_column)
    missing = property(lambda self: self.request.missing)

    @property
    def n_rows(self) -> int:
        """Rows of the input (from its views' shapes: nothing read)."""
        return int(next(iter(self.views.values())).shape[0])

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages the run executes, in order (its method's plan)."""
        return tuple(self.config.estimator_class.stage_plan)

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON, one flow parameter: the request (:meth:`RunRequest.to_json`) and
        under ``resolved`` what planning decided, so that :meth:`from_json` rebuilds the plan
        without checking or deciding again.  Round-trips (``RunPlan.from_json(p.to_json())``
        has the same JSON)."""
        return {**self.request.to_json(), "resolved": {
            "config": self.config.to_json(), "fingerprint": self.fingerprint, "request": self.request.key,
            "input": self.opened.fingerprint if self.opened is not None else None,
            "labels_action": self.labels_action, "complete": self.complete}}

    @classmethod
    def from_json(cls, data: Any) -> RunPlan:
        """The plan of :meth:`to_json`, or of a request's JSON (no ``resolved``: planned now).

        A resolved plan is rebuilt, not planned again: its input's metadata is read to rebuild
        the lazy views (and must be the input it was planned on: same metadata fingerprint and
        views), the store reopened read-only; the checks and the decisions are the plan's.

        Raises
        ------
        InputValidationError
            The input changed since the plan was made (plan the run again).
        """
        data = _mapping(data)
        resolved = data.get("resolved")
        if resolved is None:
            return plan_run(RunRequest.from_json(data))
        source = as_input(data["source"])
        opened = source.open()
        if opened.fingerprint != resolved.get("input"):
            raise InputValidationError(f"the input {source.location} changed since this run was planned: plan the "
                                       "run again (re-run the command).")
        request = RunRequest(opened.source, data["store"], RunConfig.from_json(_mapping(data["config"])),
                             labels_out=data.get("labels_out"), overwrite=bool(data.get("overwrite", False)),
                             report=data.get("report", True), id_column=opened.source.id_column,
                             missing=check_missing(opened.source.missing), opened=opened, key=resolved.get("request"))
        views = opened.load()
        fingerprint = views_fingerprint(views, request.missing)
        if fingerprint != resolved["fingerprint"]:
            raise InputValidationError(f"the views of {source.location} are not the ones this run was planned on: "
                                       "plan the run again (re-run the command).")
        existing, _ = _existing_store(request.store, overwrite=True)
        return cls(request, RunConfig.from_json(_mapping(resolved["config"])), views, fingerprint, existing,
                   resolved.get("labels_action"), bool(resolved.get("complete")))


@dataclasses.dataclass(frozen=True)
class AssignRequest:
    """An assignment as asked: what ``mkdist assign --prefect``, a deployment and the assign
    flow hand over as one parameter (:meth:`to_json`), instead of a list of loose ones.

    Not checked here: :func:`mkdist._pipeline._assign.check_assign` checks it once, in the
    process that runs it (it loads the model and reads the batch's metadata).

    Attributes
    ----------
    model_store : str
        A finished run store.
    source : InputSource
        The batch, with how to read it (views, ``id_column``, ``missing``).
    output : str
        The store that receives the labels and the drift record.
    labels_out : str or None
    overwrite : bool
    report : bool
    drift_thresholds : dict of str to float or None
        Overrides of ``mkdist.pipeline.DEFAULT_DRIFT_THRESHOLDS``.
    """

    model_store: str
    source: InputSource
    output: str
    labels_out: str | None = None
    overwrite: bool = False
    report: bool = True
    drift_thresholds: dict | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as JSON (without the input's storage options, as :meth:`RunRequest.to_json`)."""
        return {"model_store": os.fspath(self.model_store),
                "source": _source_json(self.source),
                "output": os.fspath(self.output), "labels_out": self.labels_out, "overwrite": bool(self.overwrite),
                "report": bool(self.report), "drift_thresholds": self.drift_thresholds}

    @classmethod
    def from_json(cls, data: Any) -> AssignRequest:
        """The request of :meth:`to_json`, or one written by hand (a deployment's ``request``):
        ``model_store``, ``source`` (a location or an InputSource's JSON: its views,
        ``id_column``, ``missing``) and ``output``; ``labels_out``, ``overwrite`` (default
        False), ``report`` (default True) and ``drift_thresholds`` are optional.  Its shape is
        checked here; the assignment itself when it runs."""
        data = _mapping(data)
        required = {"model_store", "source", "output"}
        known = required | {"labels_out", "overwrite", "report", "drift_thresholds"}
        unknown = sorted(set(data) - known)
        if unknown or not required <= set(data):
            raise InputValidationError(
                "an assign request holds `model_store`, `source` and `output` (optionally `labels_out`, `overwrite`, "
                f"`report`, `drift_thresholds`); got {sorted(data)}" + (f" ({unknown} unknown)" if unknown else ""))
        source = as_input(data["source"])
        if not isinstance(source, InputSource):
            raise InputValidationError(f"an assign request's `source` is a location or an InputSource's JSON, "
                                       f"not {type(data['source']).__name__}")
        thresholds = data.get("drift_thresholds")
        if thresholds is not None and not isinstance(thresholds, dict):
            raise InputValidationError(f"`drift_thresholds` is a mapping of threshold names to numbers, not "
                                       f"{type(thresholds).__name__}")
        return cls(os.fspath(data["model_store"]), source, os.fspath(data["output"]),
                   labels_out=data.get("labels_out"), overwrite=bool(data.get("overwrite", False)),
                   report=bool(data.get("report", True)), drift_thresholds=thresholds)


def _source_json(source: InputSource) -> dict[str, Any]:
    """An input's JSON in a request: without its storage options (credentials), which flow
    parameters would store on the Prefect server; the flow's process has its own."""
    return {k: v for k, v in source.to_json().items() if k != "storage_options"}


def _mapping(data: Any) -> dict[str, Any]:
    """A plan's JSON as a dict (a JSON string is parsed: a deployment may hand it so)."""
    if isinstance(data, (str, bytes)):
        import json

        data = json.loads(data)
    if not isinstance(data, dict):
        raise InputValidationError(f"a run plan or request is a JSON object (a dict), not {type(data).__name__}")
    return data


def check_request(source: Any, store: Any, config: RunConfig, *, labels_out: Any = None, overwrite: bool = False,
                  report: bool | str = False, id_column: str | None = None,
                  missing: str | None = None) -> RunRequest:
    """The checks of a run that need neither its data nor the numerical stack; then its key.

    The parameters against the method's table (a bad argument is refused before scikit-learn
    loads), the remote locations probed (a wrong key or an unreachable endpoint is one line,
    before any metadata is read and before anything is created), outputs overlapping inputs,
    the store path's kind, the report path, the input's metadata (a location's: opened once),
    K against the input's rows.

    Parameters
    ----------
    source : InputSource, OpenedInput or in-memory input
    store : str, PathLike or RunStore
    config : RunConfig
        As given.
    labels_out : str or PathLike, optional
    overwrite : bool, default=False
    report : bool or str, default=False
    id_column : str, optional
        For an in-memory input (a location's is its InputSource's).
    missing : {"refuse", "impute"}, optional
        For an in-memory input (a location's is its InputSource's).

    Returns
    -------
    RunRequest

    Raises
    ------
    InputValidationError, StorageAccessError, StoreExistsError
    """
    config.check_params()
    check_missing(missing)
    opened = source if isinstance(source, OpenedInput) else None
    if opened is not None:
        source = opened.source
    options = source.storage_options if isinstance(source, InputSource) else None
    probe_run(source.location if isinstance(source, InputSource) else None, store, labels_out, options)
    refuse_overlap(store, input=source)
    if labels_out is not None:
        refuse_overlap(labels_out, store=store, input=source)
    if not isinstance(report, (bool, str, os.PathLike)):
        raise InputValidationError(f"`report`={report!r} must be True, False or the report's path.")
    if not isinstance(report, bool):
        refuse_overlap(report, store=store, input=source)
    refuse_file_store(store)
    key = None
    if isinstance(source, InputSource):
        opened = opened if opened is not None else source.open()
        id_column, missing = source.id_column, source.missing
        k = config.n_clusters
        k_max = k[1] if isinstance(k, list) else k  # "auto": its k_max follows the landmarks (checked at planning)
        if isinstance(k_max, int):
            from .._core._validation import check_k_at_most

            check_k_at_most(k, k_max, opened.n_rows, "rows", "")  # the estimator's own check, before it loads
        key = request_key(opened.fingerprint, config.to_json())
    return RunRequest(source, store, config, None if labels_out is None else os.fspath(labels_out), bool(overwrite),
                      report, id_column, check_missing(missing), opened, key)


def plan_run(source: Any, store: Any = None, config: RunConfig | None = None, *, labels_out: Any = None,
             overwrite: bool = False, report: bool | str = False, id_column: str | None = None,
             missing: str | None = None, chunk_rows: int | None = None) -> RunPlan:
    """Check a run once and decide what it will do; reads no data and writes nothing.

    What :func:`check_request` checks (skipped when ``source`` is its RunRequest), then: the
    views (lazy), ``method="auto"`` resolved on them, every parameter against the input's
    shape (the estimator's ``validate_input``), the input's fingerprint, the store (another
    schema or unreadable root metadata: refused unless ``overwrite``; another live writer:
    refused; another run: refused unless ``overwrite``), the seed (given, else the stored
    run's, else drawn), whether the store holds the whole run, the labels output (another
    run's, or already written by this one).

    Parameters
    ----------
    source : RunRequest, InputSource, OpenedInput or in-memory input
        With a RunRequest, the other arguments are not given.
    store, config, labels_out, overwrite, report, id_column, missing
        As for :func:`check_request`.
    chunk_rows : int, optional
        Rows per chunk of an in-memory input (see :func:`mkdist.load_views`).

    Returns
    -------
    RunPlan

    Raises
    ------
    InputValidationError, StoreExistsError, StoreLockedError, SchemaVersionError, DamagedStoreError
    """
    import numpy as np

    request = source if isinstance(source, RunRequest) else check_request(
        source, store, config, labels_out=labels_out, overwrite=overwrite, report=report, id_column=id_column,
        missing=missing)
    overwrite = request.overwrite
    views = (request.opened.load() if request.opened is not None
             else load_views(request.source, chunk_rows=chunk_rows))
    config = request.config
    if config.method == AUTO_METHOD:
        config = config.resolve(views)
        config.check_params()
        logger.info("method='auto' chose %r: %s", config.method, config.auto["reason"])
    config.validate(views)
    fingerprint = views_fingerprint(views, request.missing)
    existing, _ = _existing_store(request.store, overwrite)
    same_input = existing is not None and not overwrite and existing.fingerprint == fingerprint
    if existing is not None:
        existing.check_no_other_writer(f"a run of {config.method!r}")
    if config.random_state is None:
        stored_seed = existing.params.get("random_state") if same_input else None
        # A run's seed is stored with it, so that a resumed run makes the same random choices.
        seed = int(stored_seed) if stored_seed is not None else int(np.random.SeedSequence().entropy % (2**31 - 1))
        config = config.with_seed(seed)
    if existing is not None and not overwrite:
        existing.check_same_run(fingerprint, config.to_json())
    # A store of another run was refused above: with the same input it is this run.
    complete = same_input and all(existing.is_complete(s) for s in [*config.estimator_class.stage_plan, "profiles",
                                                                    "metrics"])
    action = None
    if request.labels_out is not None:
        action = check_labels_out(request.labels_out, overwrite, labels_mark(existing) if complete else None,
                                  request.source.storage_options if isinstance(request.source, InputSource) else None,
                                  store=existing.url if existing is not None else None)
    if not isinstance(request.source, InputSource) and request.labels_out is not None and request.id_column:
        load_ids(request.source, request.id_column, views)  # an in-memory input without that coordinate: refused now
    return RunPlan(request, config, views, fingerprint, existing, action, complete)


def _existing_store(store: Any, overwrite: bool):
    """The run store at ``store`` opened read-only, or None; a store this mkdist cannot read
    (another schema version, unreadable root metadata) is refused unless ``overwrite``.
    Returns (store or None, whether the location holds something overwrite replaces)."""
    from mkdist.storage import RunStore

    try:
        return RunStore.open(getattr(store, "url", store), mode="r"), True
    except FileNotFoundError:
        return None, False
    except (DamagedStoreError, SchemaVersionError):  # unreadable here: what overwrite replaces
        if not overwrite:
            raise
        return None, True
