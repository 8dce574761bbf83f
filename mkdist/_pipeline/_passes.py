"""Passes over a run's rows: a progress line while an iterative fit or a persist runs, and
what a stage persists together with its labels."""

from __future__ import annotations

import contextlib
import time

import numpy as np

from .._core._blocks import report_passes
from .._core._cluster import active_client, persist_and_wait


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


def _listed(profiles) -> list:
    """The profiles' partials as a list to persist with the labels: empty when they are off."""
    return [] if profiles is None else [profiles]


def _unlisted(profiles, persisted: list):
    """(persisted partials or None, the rest) of a persist that took ``_listed(profiles)`` first."""
    return (None, persisted) if profiles is None else (persisted[0], persisted[1:])


def _int32(labels):
    """Labels as int32, the store's label dtype (lazily on Dask arrays)."""
    return labels.astype(np.int32)
