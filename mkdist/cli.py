"""The ``mkdist`` command line: run, assign, inspect, report, methods, demo.

Exit codes: 0 success; 2 bad input (arguments, parameters, data, store state, an
unreachable scheduler), refused with one line on stderr -- everything that can be checked
without computing is checked before Dask (or Prefect) starts; 3 ``assign --fail-on-drift``
and the batch drifted (its labels are stored, its result printed); 130 interrupted (Ctrl-C:
the store is left resumable); 1 any other failure (one line; ``--debug`` prints the
traceback).

A run needs no Prefect server: without one configured (``PREFECT_API_URL`` or the active
Prefect profile), ``mkdist run`` and ``mkdist assign`` drive the run in this process -- the
same driver the Prefect flows wrap -- and with one configured they run as flows, tracked by
it.  ``--prefect`` asks for a flow anyway (a temporary server is started for it).  The
command's processes (its cluster's workers, the report drawer, that server) are handled by
``mkdist._run._processes``.  This module holds the commands; reading and checking their
options, their errors in the command line's words and what they print are :mod:`mkdist._cli`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import click

from mkdist._cli._errors import (
    EXIT_BAD_INPUT,
    EXIT_DRIFT,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK as EXIT_OK,  # the exit codes, as they were: mkdist.cli.EXIT_*
    BadInput,
    _quiet_prefect_tracebacks,
    for_command_line,
)
from mkdist._cli._options import (
    _check_scheduler,
    _NClustersType,
    _nothing_to_do,
    _refuse_missing_store,
    _request,
    _run_options,
    _thresholds,
    parse_n_clusters as parse_n_clusters,  # imported from here by tests
)
from mkdist._cli._output import (
    _note,
    _outputs_said,
    _print_result,
    _result_line as _result_line,  # imported from here by tests/test_n_clusters_auto.py
    _where_line,
)
from mkdist._pipeline._dask_runtime import IN_PROCESS_MAX_ROWS, in_process_max_rows
from mkdist._run._processes import handle_interrupts, prefect_api_configured, stop_now, temporary_prefect_server

#: Seconds to wait for an existing Dask scheduler (``--connect-timeout``, MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Seconds an interrupted command may spend stopping its cluster before it is cut short.
INTERRUPT_GRACE_S = 4.0
INTERRUPTED = "mkdist: interrupted; re-run the same command to resume."


def _environment(quiet: bool, debug: bool) -> None:
    # Prefect reads its settings at import: set them before the flows are imported.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # With no server configured, Prefect starts a temporary one and gives it 20 s by default;
    # on this 2-core machine under load it took longer.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if quiet and not debug:
        os.environ["PREFECT_LOGGING_LEVEL"] = "CRITICAL"
        os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"
    if not debug:
        # distributed logs ~30 lines per LocalCluster (workers starting, and at close "Worker
        # process still alive after 4.0 seconds, killing"); the command prints what a person
        # needs itself, and a failure reaches it as an exception.  Read by Dask's config when
        # distributed is first imported, and inherited by the worker processes.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
        logging.getLogger("mkdist").setLevel(logging.ERROR if quiet else logging.WARNING)


#: Whether this process is the ``mkdist`` command (:func:`console_main`), not a host that called
#: :func:`main` (a notebook, a test runner, an orchestrator): only then may an interrupt end the
#: process and kill its descendants, which are then all the command's.
_OWNS_PROCESS = False


def console_main() -> None:
    """The ``mkdist`` console script (and ``python -m mkdist.cli``): :func:`main`, in a process
    that is the command's own, so that Ctrl-C ends it within seconds (exit 130)."""
    global _OWNS_PROCESS
    _OWNS_PROCESS = True
    main(prog_name="mkdist")


def _stop_now() -> None:
    """In the console script, end this command at once: its child processes (cluster workers,
    the report drawer, a temporary Prefect server) first, then itself, with the interrupted exit
    code.  Called in a host process it returns: the caller re-raises, and the run's context
    managers stop what mkdist started (its cluster, its server) in order."""
    if _OWNS_PROCESS:
        stop_now(f"\n{INTERRUPTED}\n", EXIT_INTERRUPTED)


def _handle_interrupts() -> Callable[[], None]:
    """Ctrl-C in the console script: the first stops the run in order (its lease released, its
    cluster closed) within INTERRUPT_GRACE_S, or cuts it short then; a second cuts it short at
    once.  The store is resumable either way: stages are committed atomically.  In a host
    process nothing is installed: its own handler (Python's raises KeyboardInterrupt) stays.
    Returns what puts the previous handler back."""
    if not _OWNS_PROCESS:
        return lambda: None
    return handle_interrupts(_stop_now, INTERRUPT_GRACE_S)


def _guard(fn, debug: bool, interrupts: bool = False) -> Any:
    """Call fn; map failures to the documented exit codes with a one-line message.

    ``interrupts``: fn runs the command's work, with its Ctrl-C handling installed
    (:func:`_handle_interrupts`) and the previous handler put back after.  An interrupt ends
    the console script at once; in a host process it raises SystemExit(130) once fn has
    unwound (its cluster closed), the host and its other processes untouched."""
    from mkdist.errors import DriftDetectedError, LeaseLostError, MkdistError

    restore = _handle_interrupts() if interrupts else (lambda: None)
    try:
        return fn()
    except DriftDetectedError as exc:
        click.echo(f"mkdist: drift: {exc}", err=True)
        sys.exit(EXIT_DRIFT)
    except LeaseLostError as exc:  # fenced off after a pause: not bad input, and nothing to retry here
        click.echo(f"mkdist: stopped: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    except (MkdistError, BadInput, click.BadParameter, FileNotFoundError, FileExistsError) as exc:
        if debug:
            traceback.print_exc()
        message = exc.format_message() if isinstance(exc, click.ClickException) else for_command_line(exc)
        click.echo(f"mkdist: bad input: {message}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _stop_now()  # any process this command started (a cluster starting, a server) goes with it
        click.echo(INTERRUPTED, err=True)  # a host process: fn has unwound, its processes stopped
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if debug:
            traceback.print_exc()
        click.echo(f"mkdist: failed: {type(exc).__name__}: {exc} (--debug shows the traceback)", err=True)
        sys.exit(EXIT_FAILURE)
    finally:
        restore()


class _OneLineErrors(click.Group):
    """Usage errors (a bad option value, a missing option) as one line on stderr, exit 2."""

    def main(self, *args, **kwargs):
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.UsageError as exc:
            click.echo(f"mkdist: bad input: {exc.format_message()}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.ClickException as exc:
            click.echo(f"mkdist: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("mkdist: interrupted.", err=True)
            sys.exit(EXIT_FAILURE)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mkdist")
def main() -> None:
    """Multiple kernel clustering at scale (SimpleMKKM + out-of-sample embedding on Dask)."""


def _cluster_options(fn):
    for option in reversed([
        click.option("--dask-address", default=None,
                     help="Existing scheduler, e.g. tcp://host:8786 (default: this process for an input of at most "
                          f"MKDIST_IN_PROCESS_MAX_ROWS rows, {IN_PROCESS_MAX_ROWS:,} unless set; else a LocalCluster "
                          "for the run)."),
        click.option("--n-workers", type=click.IntRange(min=1), default=None,
                     help="Worker processes of a LocalCluster for the run (default 2); given, the LocalCluster is "
                          "started whatever the input's size."),
        click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True),
                     default=lambda: float(os.environ.get("MKDIST_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT)),
                     show_default="10, or MKDIST_CONNECT_TIMEOUT", help="Seconds to wait for --dask-address."),
        click.option("--prefect/--no-prefect", "use_prefect", default=None,
                     help="Run as a Prefect flow (default: when a Prefect API is configured; --prefect without "
                          "one starts a temporary server)."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
        click.option("--quiet", is_flag=True, help="Print only the result line (errors still go to stderr)."),
        click.option("--debug", is_flag=True, help="Print tracebacks of failures, and Dask's and Prefect's logs."),
    ]):
        fn = option(fn)
    return fn


@main.command()
@click.option("--input", "source", required=True,
              help="Parquet (a file, a directory of files, a glob), a Zarr group / xarray dataset, or .npy/.npz; "
                   "local or an fsspec URL (s3://...).")
@click.option("--store", required=True, help="Run store: local directory or fsspec URL.")
@click.option("--n-clusters", type=_NClustersType(),
              help="Number of clusters K; auto, or a range K_MIN:K_MAX, to choose K from the landmark kernel's "
                   "eigengap (methods mkc, nystrom, late-fusion; the choice, its confidence and runner-up are "
                   "stored and shown by `mkdist inspect`); or in --config.")
@click.option("--view", "view_items", multiple=True, metavar="NAME=COLUMNS",
              help="A view of a table: its columns or patterns, comma-separated (--view a='a*' --view b=b0,b1,b2); "
                   "repeat for each view.  Default: one view of every numeric column but the id and labels.")
@click.option("--id-column", default=None,
              help="Column / coordinate with the row ids: never a feature; keys --labels-out (default: position).")
@click.option("--labels-out", default=None, help="Also write id, cluster, distance per row as Parquet here.")
@click.option("--profiles-out", default=None, help="Also write the clusters' profiles as a long table here "
                                                   "(.parquet or .csv; see `mkdist profile`).")
@click.option("--label-key", default=None, help="Column / variable holding true labels (never a feature): adds "
                                                "ACC/NMI to the metrics.")
@click.option("--config", "config_path", default=None,
              help="TOML/JSON/YAML file of run options (a [views] table, id_column, estimator parameters, ...).")
@click.option("--missing", type=click.Choice(["refuse", "impute"]), default=None,
              help="Missing cells (nulls, NaN): refuse the input, naming them (default), or impute: cluster every "
                   "row, each missing cell filled from the 10 rows most like it; --labels-out then says per row "
                   "how many cells were imputed (missing_cells).")
@click.option("--n-landmarks", type=click.IntRange(min=1), default=None)
@click.option("--kernels", default=None, help="Kernel set name (auto, rbf-grid, rbf, mkkm12, ...).")
@click.option("--method", default=None,
              help="A registered method (see `mkdist methods`; default mkc), or auto (chosen from the "
                   "data's shape, recorded in the store); estimator parameters go in --config (top level "
                   "or under method_params).")
@click.option("--random-state", type=click.IntRange(min=0), default=None)
@click.option("--overwrite", is_flag=True,
              help="Replace what is in the way: a store holding a different run (recomputed from scratch) and a "
                   "--labels-out of another run.  A store of this same run is resumed, never recomputed.")
@_cluster_options
def run(source, store, n_clusters, view_items, id_column, labels_out, profiles_out, label_key, config_path, missing,
        n_landmarks, kernels, method, random_state, overwrite, dask_address, n_workers, connect_timeout, use_prefect,
        as_json, quiet, debug):
    """Cluster INPUT; results and model go to STORE.  The same command again resumes it."""
    _environment(quiet, debug)
    t0 = time.perf_counter()
    given = dict(n_clusters=n_clusters, n_landmarks=n_landmarks, kernels=kernels, method=method,
                 random_state=random_state, dask_address=dask_address, n_workers=n_workers, label_key=label_key,
                 labels_out=labels_out, id_column=id_column, missing=missing)

    def request():
        merged = _run_options(config_path, given, view_items)
        _check_profiles_out(profiles_out, store, overwrite)
        return merged, _request(source, store, merged, overwrite)

    merged, asked = _guard(request, debug)
    done = _nothing_to_do(store, asked.key, merged, overwrite)
    if done is not None:
        _write_profiles_out(done, profiles_out, store, debug)
        _print_result(done, store, as_json, quiet, time.perf_counter() - t0, nothing_to_do=True)
        return
    if not quiet and asked.opened.message():
        _note(f"input: {asked.opened.message()}")

    def prepare():
        _check_scheduler(merged.get("dask_address"), connect_timeout)
        in_process_max_rows()  # a bad MKDIST_IN_PROCESS_MAX_ROWS: refused before any work
        from mkdist.pipeline import plan_run

        return plan_run(asked)  # the rest of the checks, once; the run's decisions

    plan = _guard(prepare, debug)
    flow = use_prefect if use_prefect is not None else prefect_api_configured()

    def go():
        if flow:
            return _run_flow(plan, merged, connect_timeout, quiet, debug)
        from mkdist.pipeline import drive_run, in_process, run_scheduler

        # A finished run that only lacks its labels output writes it from the store: reads and
        # writes in this process, no LocalCluster to start (a given scheduler is still used).
        if plan.complete and not (merged.get("dask_address") or os.environ.get("MKDIST_DASK_ADDRESS")):
            where = in_process()
        else:
            where = run_scheduler(merged.get("dask_address"), merged.get("n_workers"), n_rows=plan.n_rows,
                                  connect_timeout=connect_timeout, echo=None if quiet else _note)
        with where as scheduler:
            if not quiet and not plan.complete and scheduler.kind != "local-cluster":
                _note(f"computing on: {_where_line(scheduler, plan.n_rows)}")
            try:
                result = drive_run(plan, progress=not quiet, owner="mkdist run", echo=None if quiet else _note)
            except KeyboardInterrupt:
                # The run has stopped in order (lease released; stages commit atomically): the
                # workers of our own cluster need no graceful close, which takes seconds (the
                # console script's; in a host process the cluster closes as the block unwinds).
                _stop_now()
                raise
        return result.metrics

    summary = _guard(go, debug, interrupts=True)
    _write_profiles_out(summary, profiles_out, store, debug)
    _print_result(summary, store, as_json, quiet, time.perf_counter() - t0)


def _check_profiles_out(path: str | None, store: str, overwrite: bool) -> None:
    """A --profiles-out that holds a file mkdist did not write (or another run's) is refused
    before any work, as --labels-out is."""
    if path is not None:
        from mkdist._pipeline._profiles import check_profiles_out

        check_profiles_out(path, overwrite, store=store)


def _write_profiles_out(summary: dict, path: str | None, store: str, debug: bool) -> None:
    """The stored profiles as the long table at ``path`` (left as it is when already this run's)."""
    if path is not None:
        from mkdist._pipeline._profiles import write_profiles_out
        from mkdist.storage import RunStore

        summary["profiles_out"] = _guard(lambda: write_profiles_out(path, RunStore.open(store, mode="r"),
                                                                    overwrite=True), debug)


def _run_flow(plan, merged: dict, connect_timeout: float, quiet: bool, debug: bool) -> dict:
    """The run as the Prefect flow (tracked by the configured server, or a temporary one),
    handed the plan made here: the flow checks and decides nothing again."""
    with temporary_prefect_server():
        from mkdist.flows import cluster_flow

        if not debug:
            _quiet_prefect_tracebacks()
        # The plan's JSON has no storage options: flow parameters are stored by the Prefect
        # server, and the flow runs in this process, where the options are registered for the
        # run's locations.
        return cluster_flow(plan=plan.to_json(), dask_address=merged.get("dask_address"),
                            n_workers=merged.get("n_workers"), connect_timeout=connect_timeout, progress=not quiet)


@main.command()
@click.option("--model-store", required=True, help="Store of a finished run.")
@click.option("--input", "source", required=True,
              help="New points: a table (read with the model's views unless --view is given), Zarr or .npy/.npz.")
@click.option("--output", required=True, help="Store for the labels of the new points.")
@click.option("--labels-out", default=None, help="Also write id, cluster, distance per row as Parquet here.")
@click.option("--profiles-out", default=None, help="Also write the batch's cluster profiles as a long table here "
                                                   "(.parquet or .csv).")
@click.option("--id-column", default=None,
              help="Column / coordinate of INPUT with the row ids (default: the model's id column when INPUT has it, "
                   "else the position).")
@click.option("--view", "view_items", multiple=True, metavar="NAME=COLUMNS",
              help="A view of a table, as for `mkdist run` (default: the model's views).")
@click.option("--missing", type=click.Choice(["refuse", "impute"]), default=None,
              help="Missing cells of INPUT: impute fills them with the model's fill values (the model's run must "
                   "have imputed); default: as the model's run did.")
@click.option("--fail-on-drift", is_flag=True, help="Exit 3 (after storing the labels) when the batch drifted.")
@click.option("--drift-threshold", "drift_threshold", multiple=True,
              help="NAME=VALUE overriding a drift threshold (share_beyond_fit_p99, cluster_tv, cluster_psi, "
                   "mean_shift_sd, scale_ratio_max).")
@click.option("--overwrite", is_flag=True,
              help="Replace what is in the way: an output store of another batch, a --labels-out of another run.")
@_cluster_options
def assign(model_store, source, output, labels_out, profiles_out, id_column, view_items, missing, fail_on_drift,
           drift_threshold, overwrite, dask_address, n_workers, connect_timeout, use_prefect, as_json, quiet, debug):
    """Label new data with a stored model (no refit) and report its drift from the fit.

    Always prints the result: points, drift verdict and the report's path (exit 3 with
    --fail-on-drift when the batch drifted, after printing)."""
    _environment(quiet, debug)
    t0 = time.perf_counter()

    def prepare():
        from mkdist._pipeline._io import InputSource
        from mkdist._pipeline._tables import parse_view_option

        thresholds = _thresholds(drift_threshold)  # before mkdist.pipeline loads (2-3 s)
        _refuse_missing_store(model_store)
        _check_profiles_out(profiles_out, output, overwrite)
        views = parse_view_option(view_items) if view_items else None
        batch = InputSource(source, views=views, id_column=id_column, missing=missing)
        _check_scheduler(dask_address, connect_timeout)
        from mkdist.pipeline import check_assign

        checked = check_assign(model_store, batch, output, overwrite=overwrite)
        return thresholds, batch, checked, int(next(iter(checked.views.values())).shape[0])

    thresholds, batch, checked, n_rows = _guard(prepare, debug)
    flow = use_prefect if use_prefect is not None else prefect_api_configured()

    def go():
        if flow:
            with temporary_prefect_server():
                from mkdist.flows import assign_flow
                from mkdist.pipeline import AssignRequest

                if not debug:
                    _quiet_prefect_tracebacks()
                # The flow runs in this process but checks its request itself, as a deployment's
                # run does: the check above only refused bad input before the server started.
                # fail_on_drift stays here: the result is printed before the exit code says so.
                request = AssignRequest(model_store, batch, output, labels_out=labels_out, overwrite=overwrite,
                                        drift_thresholds=thresholds or None)
                return assign_flow(request=request.to_json(), dask_address=dask_address, n_workers=n_workers,
                                   connect_timeout=connect_timeout, progress=not quiet)
        from mkdist.pipeline import drive_assign, run_scheduler

        with run_scheduler(dask_address, n_workers, n_rows=n_rows, connect_timeout=connect_timeout,
                           echo=None if quiet else _note) as scheduler:
            if not quiet and scheduler.kind != "local-cluster":
                _note(f"computing on: {_where_line(scheduler, n_rows)}")
            try:
                return drive_assign(checked, overwrite=overwrite, progress=not quiet, labels_out=labels_out,
                                    drift_thresholds=thresholds or None)  # checked above: not again
            except KeyboardInterrupt:
                _stop_now()  # as in `run`: stopped in order, our workers need no graceful close
                raise

    summary = _guard(go, debug, interrupts=True)
    _write_profiles_out(summary, profiles_out, output, debug)
    drifted = bool(summary.get("drifted"))
    if as_json:
        click.echo(json.dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=2, default=float))
    else:
        if not quiet:
            click.echo(summary["markdown"])
        verdict = ("DRIFTED: " + "; ".join(summary["drift"]["reasons"])) if drifted else "no drift"
        line = (f"assigned {summary['N']:,} rows with the model in {model_store} in {time.perf_counter() - t0:.1f} s; "
                f"{verdict}; output {output}")
        imputed = summary.get("missing") or {}
        if imputed.get("rows") is not None:
            line += f"; {imputed['rows']:,} rows with missing cells ({imputed['cells']:,} cells imputed)"
        click.echo(line + _outputs_said(summary))
    if drifted and fail_on_drift:
        sys.exit(EXIT_DRIFT)


@main.command()
@click.argument("store")
@click.option("--output", default=None, help="Where to write (default: next to STORE).")
@click.option("--format", "fmt", type=click.Choice(["html", "png"]), default="html", show_default=True,
              help="One self-contained HTML page, or a directory of PNG figures (for CI systems).")
@click.option("--debug", is_flag=True, help="Print tracebacks of failures.")
def report(store, output, fmt, debug):
    """Write the report of a run or an assignment: figures of weights, spectrum, clusters, drift."""
    _guard(lambda: _refuse_missing_store(store), debug)
    from mkdist.pipeline import write_report

    path = _guard(lambda: write_report(store, output, format=fmt), debug)
    click.echo(path)


@main.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verify", is_flag=True, help="Read every chunk and check it against its stage's checksums.")
@click.option("--clean", is_flag=True, help="Remove what crashed writes left (refused while a run is live).")
@click.option("--debug", is_flag=True, help="Print tracebacks of failures.")
def inspect(store, as_json, verify, clean, debug):
    """Show what STORE holds: stages (damaged ones named), model, summary."""
    _guard(lambda: _refuse_missing_store(store), debug)
    from mkdist.pipeline import inspect_markdown, inspect_store

    info = _guard(lambda: inspect_store(store, verify="full" if verify else "quick", clean=clean), debug)
    click.echo(json.dumps(info, default=float, indent=2) if as_json else inspect_markdown(info))
    if info.get("problems"):
        sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--out", default=None, help="Also write the long table (cluster, column, statistic, category, value) "
                                          "here: .parquet or .csv.")
@click.option("--overwrite", is_flag=True, help="Replace an --out file that mkdist did not write.")
@click.option("--debug", is_flag=True, help="Print tracebacks of failures.")
def profile(store, as_json, out, overwrite, debug):
    """What each cluster of STORE is, in the input's own columns: size, label, the columns that
    separate the clusters, each column per cluster."""
    _guard(lambda: _refuse_missing_store(store), debug)
    from mkdist._report._profiles import show_profile

    click.echo(_guard(lambda: show_profile(store, as_json=as_json, out=out, overwrite=overwrite), debug))


@main.command()
@click.option("--markdown", is_flag=True, help="The README's markdown table.")
def methods(markdown):
    """List the registered methods: name, estimator, views, stages."""
    from mkdist._methods._registry import method_table, method_table_markdown

    if markdown:
        click.echo(method_table_markdown(), nl=False)
        return
    for row in method_table():
        click.echo(f"{row['method']:<14} {row['estimator']:<28} views: {row['views']:<7} stages: {row['stages']}")


@main.command()
@click.option("--dir", "workdir", default="runs/demo", show_default=True, help="Where data and store go.")
@click.option("--n-samples", type=click.IntRange(min=100), default=200_000, show_default=True)
@click.option("--n-workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--quiet", is_flag=True)
@click.option("--debug", is_flag=True, help="Print tracebacks of failures.")
def demo(workdir, n_samples, n_workers, quiet, debug):
    """Generate a 2-view data set and run the whole pipeline on a local Dask cluster."""
    _environment(quiet, debug)

    def go():
        from mkdist._run._demo import run_demo

        return run_demo(workdir, n_samples=n_samples, n_workers=n_workers, progress=not quiet,
                        echo=None if quiet else _note)

    t0 = time.perf_counter()
    summary = _guard(go, debug, interrupts=True)
    _print_result(summary, summary["store"], False, quiet, time.perf_counter() - t0)
    if not quiet:
        click.echo(f"inspect it with: mkdist inspect {summary['store']}")
        if summary.get("report"):
            click.echo(f"run report (open it in a browser): {summary['report']}")


if __name__ == "__main__":  # pragma: no cover
    console_main()
