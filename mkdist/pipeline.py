"""The staged pipeline, public: what ``mkdist.flows``, the CLI and users' own orchestration import.

A run is described by a :class:`RunConfig` (method, clusters, seed, estimator parameters)
and lives in a Zarr run store (``mkdist.storage.RunStore``).  :func:`plan_run` checks it
once, without reading data, and decides what it will do (an immutable :class:`RunPlan`: the
method of ``method="auto"`` chosen, the seed adopted or drawn; ``to_json`` / ``from_json``
carry it to a flow); :func:`open_run` scans the input and opens the store (under the store's
:func:`writer_lease`) and returns the run's :class:`RunContext`, which every stage function
(or :func:`run_stage` by name) is handed; :func:`prepare_resume` cleans and verifies a
reopened store, :func:`stage_metrics` writes the summary and :func:`write_report` the report;
:func:`drive_run` does all of it in order (what :func:`cluster`, ``mkdist run`` and the flows
run), and :func:`assign` labels new data with a stored model and measures its drift.  A stage
run in a fresh process gets its context from :func:`run_context` (the store and the input).
"""

from ._core._worker_env import check_worker_malloc
from ._methods._registry import DEFAULT_METHOD, available_methods, get_method
from ._pipeline._config import ClusterResult, RunConfig
from ._pipeline._context import RunContext, run_context
from ._pipeline._dask_runtime import (
    DEFAULT_CONNECT_TIMEOUT,
    IN_PROCESS_MAX_ROWS,
    RunScheduler,
    dashboard_link,
    dask_client,
    in_process,
    run_scheduler,
)
from ._pipeline._drift import DEFAULT_THRESHOLDS as DEFAULT_DRIFT_THRESHOLDS
from ._pipeline._io import InputSource, as_input, load_views
from ._pipeline._plan import AssignRequest, RunPlan, RunRequest, check_request, plan_run
from ._pipeline._profiles import read_profiles, write_profiles_out
from ._pipeline._stages import (
    AssignPlan,
    assign,
    check_assign,
    load_estimator,
    open_run,
    prepare_resume,
    run_stage,
    stage_embedding,
    stage_labels,
    stage_landmarks,
    stage_metrics,
    stage_model,
    stage_plan,
    writer_lease,
)
from ._report._summary import ReportDraft, inspect_markdown, inspect_store, report_data, summary_markdown, write_report
from ._run._driver import STEP_NAMES, cluster, drive_assign, drive_run, refit_inputs, write_labels_out

# What orchestration code needs (the flows import nothing else of the library); helpers of the
# stages themselves (input scanning, timing merges, overlap checks) stay in their modules.
__all__ = [
    # runs
    "DEFAULT_METHOD", "RunConfig", "ClusterResult", "cluster", "assign", "load_estimator",
    # the run driver (mkdist.cluster, the CLI and the flow)
    "RunRequest", "RunPlan", "AssignRequest", "check_request", "plan_run", "drive_run", "drive_assign", "STEP_NAMES",
    "refit_inputs",
    # the stages, as the flows run them
    "RunContext", "run_context", "check_assign", "AssignPlan", "open_run", "writer_lease", "prepare_resume",
    "stage_plan", "run_stage",
    "stage_landmarks", "stage_model", "stage_embedding", "stage_labels", "stage_metrics",
    # input and output
    "InputSource", "as_input", "load_views", "write_labels_out", "DEFAULT_DRIFT_THRESHOLDS",
    # cluster profiles (docs/profiles.md)
    "read_profiles", "write_profiles_out",
    # the registry
    "available_methods", "get_method",
    # the Dask cluster of a run
    "dask_client", "run_scheduler", "in_process", "RunScheduler", "IN_PROCESS_MAX_ROWS", "dashboard_link",
    "DEFAULT_CONNECT_TIMEOUT", "check_worker_malloc",
    # reports
    "summary_markdown", "inspect_store", "inspect_markdown", "report_data", "write_report", "ReportDraft",
]
