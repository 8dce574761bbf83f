"""What each stage of a run is handed: :class:`RunContext` (store, plan, views, the model).

A run's stages used to rebuild their context from the store's URL each time (the store
reopened, the config parsed, the views loaded, the model's arrays read and checked) and
module-level caches made up for it -- which also meant that a stage silently depended on an
earlier one having run in the same process.  The context is built once: by
:func:`mkdist._pipeline._stages.open_run` from a plan (it also carries what the input
scan gathered for the next stage), or, for a stage that runs in a fresh process (a resumed
run, a flow's task on another machine), by :func:`run_context` from the store alone.  It
lives as long as the run: nothing of it outlives the run in the process.
"""

from __future__ import annotations

import copy
from typing import Any

from .._core._cluster import compute_here
from .._core._missing import Imputer
from .._core._state import dataset_to_state
from .._methods._registry import get_method
from ._config import RunConfig

__all__ = ["RunContext", "run_context", "read_model_state", "estimator_from_state", "read_imputer",
           "IMPUTATION_STAGE"]

#: The stage of a run with ``missing="impute"`` that holds its fill (written when the run opens).
IMPUTATION_STAGE = "imputation"


class RunContext:
    """A run's store, plan (or configuration) and views, and the model as the stages read it.

    Deliberately not a dataclass: Prefect rebuilds the dataclasses it finds in a task's
    arguments, and the flow's stage tasks must share this one object (its model state).

    Parameters
    ----------
    store : RunStore
        Opened for writing (the run holds its writer lease).
    views : dict of str to dask.array.Array
        The input's views, lazy.
    config : RunConfig
        The run's resolved configuration (the plan's, or the store's).
    plan : RunPlan, optional
        The run's plan, when this process planned it.
    landmarks : (ndarray of shape (n,), dict of str to ndarray of shape (n, d_v)), optional
        The landmark rows the input scan gathered (indices, rows per view): the landmarks
        stage stores them instead of reading them again.

    Attributes
    ----------
    store, views, config, plan, landmarks
    """

    def __init__(self, store: Any, views: dict, config: RunConfig, *, plan: Any = None,
                 landmarks: tuple | None = None) -> None:
        self.store = store
        self.views = views
        self.config = config
        self.plan = plan
        self.landmarks = landmarks
        self._model: tuple[tuple, str, dict] | None = None  # (tokens, method, state)
        self._imputer: tuple[str | None, Imputer | None] | None = None

    def __repr__(self) -> str:
        return f"RunContext({self.store.url!s}, method={self.config.method!r})"

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages the run executes, in order (its method's plan)."""
        return tuple(self.config.estimator_class.stage_plan)

    @property
    def n_rows(self) -> int:
        return int(next(iter(self.views.values())).shape[0])

    def take_landmarks(self) -> tuple | None:
        """The landmark rows the scan gathered, once (None after, or when it gathered none)."""
        handed, self.landmarks = self.landmarks, None
        return handed

    def estimator(self, *, k_hint: bool = False):
        """The run's fitted estimator, rebuilt from the stored model (a new object each call).

        The model's arrays are read (and checked against their checksums) once per stored
        content -- the model and labels stages' tokens -- for the whole run: 0.25 s a read at
        1M rows, which every stage after the model would otherwise pay.  With ``k_hint``
        the estimator carries the K rule's verdict also when K was given by hand (the rule
        runs once per model, ~1 s at 1000 landmarks; later estimators of this context carry
        it, so the run's summary shows what its report drew).
        """
        store = self.store
        tokens = (store.stage_token("model"), store.stage_token("labels"))
        if self._model is None or self._model[0] != tokens or tokens[0] is None:
            hint = None
            if self._model is not None and self._model[0][0] == tokens[0]:
                hint = self._model[2]["attrs"].get("n_clusters_hint")  # the same model, now with its labels
            method, state = read_model_state(store)
            if hint is not None and not state["attrs"].get("n_clusters_hint"):
                state["attrs"]["n_clusters_hint"] = hint
            self._model = (tokens, method, state)
        _, method, state = self._model
        return estimator_from_state(method, state, k_hint=k_hint)

    def imputer(self) -> Imputer | None:
        """How the run fills missing cells (its ``imputation`` stage, read once), or None."""
        token = self.store.stage_token(IMPUTATION_STAGE)
        if self._imputer is None or self._imputer[0] != token or token is None:
            self._imputer = (token, read_imputer(self.store))
        return self._imputer[1]


def run_context(store: Any, views: Any, *, config: RunConfig | None = None) -> RunContext:
    """A run's context rebuilt from its store: what a stage running in a fresh process (a
    resumed run, a flow's task) builds once, then hands to each stage.

    Parameters
    ----------
    store : RunStore, str or PathLike
        A run store (opened for writing; take its writer lease first).
    views : anything :func:`mkdist.load_views` reads
        The run's input.
    config : RunConfig, optional
        Default: the store's (its ``params``).

    Returns
    -------
    RunContext
    """
    from mkdist.storage import RunStore

    from ._io import load_views

    store = store if isinstance(store, RunStore) else RunStore.open(store, mode="r+")
    return RunContext(store, load_views(views), config if config is not None else RunConfig.from_json(store.params))


def read_model_state(store: Any) -> tuple[str, dict]:
    """The method and the model state of a run store's ``model`` stage (for a landmark
    embedding run with its labels stored, the centroids from the ``labels`` stage too)."""
    ds = store.read_stage("model")  # refuses a missing, unfinished or damaged stage by name
    method = ds.attrs.get("method")
    state = dataset_to_state(ds)
    if "embedding" in get_method(method).stage_plan and store.stage_token("labels") is not None:
        labels = store.read_stage("labels")
        state["arrays"]["cluster_centers"] = (("cluster", "component"),
                                              compute_here(labels["cluster_centers"].data)[0])
    return method, state


def estimator_from_state(method: str, state: dict, *, k_hint: bool = False):
    """A fitted estimator of ``method`` from a model state (a copy: the state is kept as it is,
    except that a K hint computed here is recorded in its attrs)."""
    est = get_method(method).from_model_state(copy.deepcopy(state))
    if k_hint and est.__dict__.get("n_clusters_choice_") is None and "_n_clusters_hint" not in est.__dict__:
        hint = est.n_clusters_hint()
        if hint is not None:
            state["attrs"]["n_clusters_hint"] = hint.as_dict()
    return est


def read_imputer(store: Any) -> Imputer | None:
    """How a run fills missing cells (its ``imputation`` stage), or None when it does not impute.

    Raises
    ------
    StoreNotFoundError, DamagedStageError
        The run imputes but its ``imputation`` stage is gone or damaged (re-running the run
        scans its input again and rewrites it).
    """
    if (store.attrs.get("missing") or {}).get("mode") != "impute":
        return None
    ds = store.read_stage(IMPUTATION_STAGE)  # refuses a missing or damaged stage by name
    names = list(ds.attrs["view_names"])
    arrays = dict(zip(ds.data_vars, compute_here(*(ds[v].data for v in ds.data_vars))))
    return Imputer.from_arrays(names, arrays, int(ds.attrs["n_neighbors"]))
