"""The staged pipeline, public: what ``mkdist.flows``, the CLI and users' own orchestration import.

A run is described by a :class:`RunConfig` (method, clusters, seed, estimator parameters)
and lives in a Zarr run store (``mkdist.storage.RunStore``).  :func:`check_run` refuses bad
input without reading data, :func:`open_run` scans the input and opens the store (under the
store's :func:`writer_lease`), :func:`prepare_resume` cleans and verifies a reopened store,
:func:`stage_plan` says which stages the run's method needs, each stage function (or
:func:`run_stage` by name) computes one stage and stores it atomically, :func:`stage_metrics`
writes the summary and :func:`write_report` the report; :func:`cluster` does all of it in
order and :func:`assign` labels new data with a stored model and measures its drift.
"""

from ._core._worker_env import WORKER_MALLOC_ENVIRON, check_worker_malloc, worker_malloc_settings
from ._methods._registry import DEFAULT_METHOD, available_methods, get_method, method_table, method_table_markdown
from ._pipeline._config import ClusterResult, RunConfig
from ._pipeline._dask_runtime import DEFAULT_CONNECT_TIMEOUT, dashboard_link, dask_client
from ._pipeline._drift import DEFAULT_THRESHOLDS as DEFAULT_DRIFT_THRESHOLDS
from ._pipeline._io import (
    InputSource,
    as_input,
    check_labels_out,
    labels_out_owner,
    load_ids,
    load_views,
    open_input,
    path_kind,
    scan_views,
    views_fingerprint,
    write_labels_parquet,
)
from ._pipeline._stages import (
    assign,
    check_assign,
    check_run,
    load_estimator,
    merge_timings,
    open_run,
    prepare_resume,
    refuse_overlap,
    run_stage,
    stage_embedding,
    stage_labels,
    stage_landmarks,
    stage_metrics,
    stage_model,
    stage_plan,
    writer_lease,
)
from ._pipeline._tables import parse_view_option
from ._report._summary import (
    ReportDraft,
    assignment_summary,
    inspect_markdown,
    inspect_store,
    load_labels,
    report_data,
    summary_markdown,
    write_report,
)
from ._run._driver import (
    STEP_NAMES,
    RunPlan,
    cluster,
    direct_step,
    drive_assign,
    drive_run,
    plan_run,
    refit_inputs,
    write_labels_out,
)

__all__ = [
    # runs
    "DEFAULT_METHOD", "RunConfig", "ClusterResult", "cluster", "assign", "load_estimator",
    # the run driver (mkdist.cluster, the CLI and the flow)
    "RunPlan", "plan_run", "drive_run", "drive_assign", "direct_step", "STEP_NAMES", "refit_inputs",
    # the stages, as the flows run them
    "check_run", "check_assign", "open_run", "writer_lease", "prepare_resume", "stage_plan", "run_stage",
    "stage_landmarks", "stage_model", "stage_embedding", "stage_labels", "stage_metrics", "merge_timings",
    "refuse_overlap",
    # input and output
    "InputSource", "as_input", "open_input", "path_kind", "parse_view_option",
    "load_views", "scan_views", "views_fingerprint", "load_ids", "check_labels_out", "labels_out_owner",
    "write_labels_parquet",
    "write_labels_out", "load_labels", "DEFAULT_DRIFT_THRESHOLDS",
    # the registry
    "available_methods", "get_method", "method_table", "method_table_markdown",
    # Dask workers mkdist starts or joins
    "dask_client", "dashboard_link", "DEFAULT_CONNECT_TIMEOUT",
    "WORKER_MALLOC_ENVIRON", "worker_malloc_settings", "check_worker_malloc",
    # reports
    "summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary", "report_data", "write_report",
    "ReportDraft",
]
