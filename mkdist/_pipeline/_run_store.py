"""A run's store as its stages hold it: opened from a URL, under the writer lease, repaired
before a resume, its stage plan, and the model it stores."""

from __future__ import annotations

import logging
import os
from typing import Any

from ._config import RunConfig
from ._context import estimator_from_state, read_model_state
from ._profiles import PROFILES_STAGE

logger = logging.getLogger("mkdist")

#: Seconds a run's writer lease lives without a heartbeat (it beats every TTL / 4): a run
#: killed with SIGKILL blocks its store for at most this long (MKDIST_LEASE_TTL overrides).
LEASE_TTL = 60.0


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
