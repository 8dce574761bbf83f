"""The ``mkdist`` command line: run, assign, inspect, methods, demo.

Exit codes: 0 success; 2 bad input (arguments, parameters, data, store state, an
unreachable scheduler), refused with one line on stderr -- everything that can be checked
without the data is checked before Prefect or Dask start; 3 ``assign --fail-on-drift`` and
the batch drifted (its labels are stored); 1 any other failure (one line; ``--debug`` prints
the traceback).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DRIFT = 0, 1, 2, 3

#: Seconds to wait for an existing Dask scheduler (``--connect-timeout``, MKDIST_CONNECT_TIMEOUT).
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Run options the cluster flow takes as its own arguments (the rest are estimator parameters).
FLOW_KEYS = ("n_clusters", "kernels", "n_landmarks", "random_state", "method", "label_key", "labels_out",
             "id_column")
#: Options that are the CLI's, not the run's.
CLI_KEYS = ("dask_address", "n_workers", "label_key", "labels_out", "id_column")


class BadInput(click.ClickException):
    """An argument, a config file or an input the CLI refuses (exit 2, one line)."""

    exit_code = EXIT_BAD_INPUT


def _environment(quiet: bool, debug: bool) -> None:
    # Prefect reads its settings at import: set them before the flows are imported.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # With no server configured, Prefect starts a temporary one in this process and gives it
    # 20 s by default; on this 2-core machine under load it took longer (the demo failed with
    # "Timed out while attempting to connect to ephemeral Prefect API server").
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if quiet and not debug:
        os.environ["PREFECT_LOGGING_LEVEL"] = "CRITICAL"
        os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"


class _OneLineForKnownErrors(logging.Filter):
    """Drop the tracebacks Prefect logs for mkdist's own errors: the CLI prints them in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from mkdist.errors import MkdistError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, MkdistError):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_prefect_tracebacks() -> None:
    """Install the filter on every handler of the prefect loggers (after Prefect is imported)."""
    handlers = set()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("prefect") and isinstance(logger, logging.Logger):
            handlers.update(logger.handlers)
    for handler in handlers | set(logging.root.handlers):
        handler.addFilter(_OneLineForKnownErrors())


def _guard(fn, debug: bool) -> Any:
    """Call fn; map failures to the documented exit codes with a one-line message."""
    from mkdist.errors import DriftDetectedError, MkdistError

    try:
        return fn()
    except DriftDetectedError as exc:
        click.echo(f"mkdist: drift: {exc}", err=True)
        sys.exit(EXIT_DRIFT)
    except (MkdistError, BadInput, click.BadParameter, FileNotFoundError, FileExistsError) as exc:
        if debug:
            traceback.print_exc()
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        click.echo(f"mkdist: bad input: {message}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("mkdist: interrupted; re-run the same command to resume.", err=True)
        sys.exit(EXIT_FAILURE)
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if debug:
            traceback.print_exc()
        click.echo(f"mkdist: failed: {type(exc).__name__}: {exc} (--debug shows the traceback)", err=True)
        sys.exit(EXIT_FAILURE)


def _load_config(path: str | None) -> dict[str, Any]:
    """A TOML/JSON/YAML file of run options; a malformed one is refused naming file and line."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"config file {path} does not exist")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    except Exception as exc:  # each parser has its own error class; all mean "not valid"
        raise BadInput(f"config file {path} is not valid {p.suffix.lstrip('.').upper() or 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"config file {path} must hold a table of run options, got {type(data).__name__}")
    return data


def _check_scheduler(address: str | None, timeout: float) -> None:
    """Refuse an unreachable scheduler address quickly, before Prefect or Dask start."""
    if not address:
        return
    url = urlparse(address if "://" in address else f"tcp://{address}")
    if url.scheme not in ("tcp", "tls") or not url.hostname:
        return  # other comms (inproc, ucx): the client reports them
    try:
        socket.create_connection((url.hostname, url.port or 8786), timeout=timeout).close()
    except OSError as exc:
        raise BadInput(f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({exc}); check "
                       "--dask-address, or start the scheduler") from None


def _prepare_run(source: str, store: str, merged: dict[str, Any], overwrite: bool):
    """Every check that needs no data pass: options, input metadata, store state, overlaps."""
    from mkdist._config import RunConfig

    if "n_clusters" not in merged:
        raise BadInput("give --n-clusters (or n_clusters in --config)")
    options = {k: v for k, v in merged.items() if k not in CLI_KEYS}
    config = RunConfig.from_options(**options)
    config.check_params()  # before mkdist.pipeline loads scikit-learn, Dask and xarray (2-3 s)
    from mkdist.pipeline import check_run

    views, _, _ = check_run(store, source, config, overwrite=overwrite)
    if merged.get("labels_out"):
        from mkdist.pipeline import check_labels_out, load_ids, refuse_overlap

        refuse_overlap(merged["labels_out"], store=store, input=source)
        check_labels_out(merged["labels_out"], overwrite)
        load_ids(source, merged.get("id_column"), views)
    return config


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
                     help="Existing scheduler, e.g. tcp://host:8786 (default: a LocalCluster for the run)."),
        click.option("--n-workers", type=click.IntRange(min=1), default=None,
                     help="Workers of the LocalCluster (default 2)."),
        click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True),
                     default=lambda: float(os.environ.get("MKDIST_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT)),
                     show_default="10, or MKDIST_CONNECT_TIMEOUT", help="Seconds to wait for --dask-address."),
        click.option("--overwrite", is_flag=True, help="Replace a store holding a different run."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
        click.option("--quiet", is_flag=True, help="No progress bars, no Prefect logs."),
        click.option("--debug", is_flag=True, help="Print tracebacks of failures."),
    ]):
        fn = option(fn)
    return fn


@main.command()
@click.option("--input", "source", required=True, help="Zarr group / xarray dataset, Parquet, or .npy/.npz.")
@click.option("--store", required=True, help="Run store: local directory or fsspec URL.")
@click.option("--n-clusters", type=click.IntRange(min=1), help="Number of clusters K (or in --config).")
@click.option("--config", "config_path", default=None, help="TOML/JSON/YAML file of run options.")
@click.option("--n-landmarks", type=click.IntRange(min=1), default=None)
@click.option("--kernels", default=None, help="Kernel set name (auto, rbf-grid, rbf, mkkm12, ...).")
@click.option("--method", default=None,
              help="A registered method (see `mkdist methods`; default mkc), or auto (chosen from the "
                   "data's shape, recorded in the store); estimator parameters go in --config (top level "
                   "or under method_params).")
@click.option("--random-state", type=click.IntRange(min=0), default=None)
@click.option("--label-key", default=None, help="Variable holding true labels: adds ACC/NMI to the metrics.")
@click.option("--labels-out", default=None, help="Also write id, cluster, distance per row as Parquet here.")
@click.option("--id-column", default=None, help="Column / coordinate of INPUT with the row ids (default: position).")
@_cluster_options
def run(source, store, n_clusters, config_path, n_landmarks, kernels, method, random_state, label_key, labels_out,
        id_column, dask_address, n_workers, connect_timeout, overwrite, as_json, quiet, debug):
    """Cluster INPUT with the cluster flow; results and model go to STORE."""
    _environment(quiet, debug)

    def prepare():
        config = _load_config(config_path)
        given = dict(n_clusters=n_clusters, n_landmarks=n_landmarks, kernels=kernels, method=method,
                     random_state=random_state, dask_address=dask_address, n_workers=n_workers,
                     label_key=label_key, labels_out=labels_out, id_column=id_column)
        merged = {**config, **{k: v for k, v in given.items() if v is not None}}
        _prepare_run(source, store, merged, overwrite)
        _check_scheduler(merged.get("dask_address"), connect_timeout)
        return merged

    merged = _guard(prepare, debug)

    def go():
        from mkdist.flows import cluster_flow

        if not debug:
            _quiet_prefect_tracebacks()
        flow_args = {k: v for k, v in merged.items() if k in FLOW_KEYS}
        options = {k: v for k, v in merged.items() if k not in FLOW_KEYS + CLI_KEYS}
        return cluster_flow(source=source, store=store, overwrite=overwrite, progress=not quiet,
                            dask_address=merged.get("dask_address"), n_workers=merged.get("n_workers"),
                            connect_timeout=connect_timeout, options=options, **flow_args)

    summary = _guard(go, debug)
    _print_summary(summary, store, as_json)
    if not as_json and summary.get("report"):
        click.echo(f"run report: {summary['report']}")


def _print_summary(summary: dict, store: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary, default=float, indent=2))
        return
    from mkdist.pipeline import summary_markdown

    click.echo(summary_markdown(summary, store))


def _thresholds(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--drift-threshold {item!r}: write NAME=VALUE, e.g. cluster_tv=0.2")
        out[name.strip()] = value.strip()
    from mkdist._drift import check_thresholds

    check_thresholds(out)
    return out


@main.command()
@click.option("--model-store", required=True, help="Store of a finished run.")
@click.option("--input", "source", required=True, help="New points (same views and features).")
@click.option("--output", required=True, help="Store for the labels of the new points.")
@click.option("--labels-out", default=None, help="Also write id, cluster, distance per row as Parquet here.")
@click.option("--id-column", default=None, help="Column / coordinate of INPUT with the row ids (default: position).")
@click.option("--fail-on-drift", is_flag=True, help="Exit 3 (after storing the labels) when the batch drifted.")
@click.option("--drift-threshold", "drift_threshold", multiple=True,
              help="NAME=VALUE overriding a drift threshold (share_beyond_fit_p99, cluster_tv, cluster_psi, "
                   "mean_shift_sd, scale_ratio_max).")
@_cluster_options
def assign(model_store, source, output, labels_out, id_column, fail_on_drift, drift_threshold, dask_address,
           n_workers, connect_timeout, overwrite, as_json, quiet, debug):
    """Label new data with a stored model (no refit) and report its drift from the fit."""
    _environment(quiet, debug)

    def prepare():
        thresholds = _thresholds(drift_threshold)  # before mkdist.pipeline loads (2-3 s)
        from mkdist.pipeline import check_assign, check_labels_out, load_ids, refuse_overlap

        _, views, _ = check_assign(model_store, source, output, overwrite=overwrite)
        if labels_out:
            refuse_overlap(labels_out, model_store=model_store, input=source, output=output)
            check_labels_out(labels_out, overwrite)
            load_ids(source, id_column, views)
        _check_scheduler(dask_address, connect_timeout)
        return thresholds

    thresholds = _guard(prepare, debug)

    def go():
        from mkdist.flows import assign_flow

        if not debug:
            _quiet_prefect_tracebacks()
        return assign_flow(model_store=model_store, source=source, output=output, dask_address=dask_address,
                           n_workers=n_workers, connect_timeout=connect_timeout, overwrite=overwrite,
                           progress=not quiet, labels_out=labels_out, id_column=id_column,
                           drift_thresholds=thresholds or None, fail_on_drift=fail_on_drift)

    summary = _guard(go, debug)
    if as_json:
        click.echo(json.dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=2))
    else:
        click.echo(summary["markdown"])
        if summary.get("report"):
            click.echo(f"report: {summary['report']}")


@main.command()
@click.argument("store")
@click.option("--output", default=None, help="Where to write (default: next to STORE).")
@click.option("--format", "fmt", type=click.Choice(["html", "png"]), default="html", show_default=True,
              help="One self-contained HTML page, or a directory of PNG figures (for CI systems).")
@click.option("--debug", is_flag=True, help="Print tracebacks of failures.")
def report(store, output, fmt, debug):
    """Write the report of a run or an assignment: figures of weights, spectrum, clusters, drift."""
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
    from mkdist.pipeline import inspect_markdown, inspect_store

    info = _guard(lambda: inspect_store(store, verify="full" if verify else "quick", clean=clean), debug)
    click.echo(json.dumps(info, default=float, indent=2) if as_json else inspect_markdown(info))
    if info.get("problems"):
        sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.option("--markdown", is_flag=True, help="The README's markdown table.")
def methods(markdown):
    """List the registered methods: name, estimator, views, stages."""
    from mkdist.pipeline import method_table, method_table_markdown

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
    """Generate a 2-view data set and run the whole cluster flow on a local Dask cluster."""
    _environment(quiet, debug)

    def go():
        from mkdist._demo import run_demo

        return run_demo(workdir, n_samples=n_samples, n_workers=n_workers, progress=not quiet)

    t0 = time.perf_counter()
    summary = _guard(go, debug)
    _print_summary(summary, summary["store"], False)
    click.echo(f"demo finished in {time.perf_counter() - t0:.1f} s; store: {summary['store']}")
    click.echo(f"inspect it with: mkdist inspect {summary['store']}")
    if summary.get("report"):
        click.echo(f"run report (open it in a browser): {summary['report']}")


if __name__ == "__main__":  # pragma: no cover
    main()
