"""The staged pipeline, public: what ``mkdist.flows``, the CLI and users' own orchestration import.

A run is described by a :class:`RunConfig` (method, clusters, seed, estimator parameters)
and lives in a Zarr run store (``mkdist.storage.RunStore``).  :func:`open_run` validates
and opens the store, :func:`stage_plan` says which stages the run's method needs, each
stage function (or :func:`run_stage` by name) computes one stage and stores it atomically,
:func:`stage_metrics` writes the summary; :func:`cluster` does all of it in order and
:func:`assign` labels new data with a stored model.
"""

from ._config import ClusterResult, RunConfig
from ._io import load_views, scan_views, views_fingerprint
from ._methods import DEFAULT_METHOD, available_methods, get_method, method_table, method_table_markdown
from ._report import assignment_summary, inspect_markdown, inspect_store, load_labels, summary_markdown
from ._stages import (
    assign, check_assign, check_run, cluster, load_estimator, merge_timings, open_run, prepare_resume, refuse_overlap, run_stage, stage_embedding, stage_labels,
    stage_landmarks, stage_metrics, stage_model, stage_plan, writer_lease,
)

__all__ = [
    "DEFAULT_METHOD", "RunConfig", "ClusterResult", "cluster", "assign", "open_run", "stage_plan", "run_stage", "stage_landmarks",
    "stage_model", "stage_embedding", "stage_labels", "stage_metrics", "load_estimator", "check_run", "check_assign", "merge_timings", "refuse_overlap", "writer_lease", "prepare_resume",
    "load_views", "scan_views", "views_fingerprint", "available_methods", "get_method", "method_table",
    "method_table_markdown", "summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary",
    "load_labels",
]
