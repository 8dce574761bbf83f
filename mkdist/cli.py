"""The ``mkdist`` command line: run, assign, inspect, demo.

Exit codes: 0 success, 2 bad input (invalid data, parameters or store state), 1 any other
failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


def _quiet_env(quiet: bool) -> None:
    # Prefect reads its settings at import: set them before the flows are imported.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if quiet:
        os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
        os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"


def _load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    p = Path(path)
    if not p.exists():
        raise click.BadParameter(f"config file {path} does not exist", param_hint="--config")
    text = p.read_text()
    if p.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    if p.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text) or {}
    return json.loads(text)


def _run_guarded(fn, quiet: bool) -> Any:
    """Call fn, mapping errors to the documented exit codes with a one-line message."""
    from mkdist.errors import MkdistError

    try:
        return fn()
    except (MkdistError, click.BadParameter, FileNotFoundError) as exc:
        click.echo(f"mkdist: bad input: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("mkdist: interrupted; re-run the same command to resume.", err=True)
        sys.exit(EXIT_FAILURE)
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        click.echo(f"mkdist: failed: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILURE)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mkdist")
def main() -> None:
    """Multiple kernel clustering at scale (SimpleMKKM + out-of-sample embedding on Dask)."""


@main.command()
@click.option("--input", "source", required=True, help="Zarr group / xarray dataset, Parquet, or .npy/.npz.")
@click.option("--store", required=True, help="Run store: local directory or fsspec URL.")
@click.option("--n-clusters", type=int, help="Number of clusters K (or in --config).")
@click.option("--dask-address", default=None, help="Existing scheduler, e.g. tcp://host:8786 (default: LocalCluster).")
@click.option("--n-workers", type=int, default=None, help="Workers of the LocalCluster (default 2).")
@click.option("--config", "config_path", default=None, help="TOML/JSON/YAML file of run parameters.")
@click.option("--n-landmarks", type=int, default=None)
@click.option("--kernels", default=None, help="Kernel set name (rbf-grid, rbf, mkkm12, ...).")
@click.option("--method", default=None,
              help="A registered method (see `mkdist methods`; default mkc); estimator parameters go "
                   "in --config (top level or under method_params).")
@click.option("--random-state", type=int, default=None)
@click.option("--label-key", default=None, help="Variable holding true labels: adds ACC/NMI to the metrics.")
@click.option("--overwrite", is_flag=True, help="Replace a store holding a different run.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars, warnings only.")
def run(source, store, n_clusters, dask_address, n_workers, config_path, n_landmarks, kernels, method,
        random_state, label_key, overwrite, as_json, quiet):
    """Cluster INPUT with the cluster flow; results and model go to STORE."""
    _quiet_env(quiet)

    def go():
        config = _load_config(config_path)
        params = {k: v for k, v in dict(n_clusters=n_clusters, n_landmarks=n_landmarks, kernels=kernels,
                                         method=method, random_state=random_state, dask_address=dask_address,
                                         n_workers=n_workers, label_key=label_key).items() if v is not None}
        merged = {**config, **params}
        if "n_clusters" not in merged:
            raise click.BadParameter("give --n-clusters (or n_clusters in --config)", param_hint="--n-clusters")
        flow_keys = {"n_clusters", "kernels", "n_landmarks", "random_state", "dask_address", "n_workers",
                     "label_key", "method"}
        options = {k: v for k, v in merged.items() if k not in flow_keys}
        from mkdist.flows import cluster_flow

        return cluster_flow(source=source, store=store, overwrite=overwrite, progress=not quiet,
                            options=options, **{k: v for k, v in merged.items() if k in flow_keys})

    summary = _run_guarded(go, quiet)
    _print_summary(summary, store, as_json)


def _print_summary(summary: dict, store: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary, default=float, indent=2))
        return
    from mkdist.pipeline import summary_markdown

    click.echo(summary_markdown(summary, store))


@main.command()
@click.option("--model-store", required=True, help="Store of a finished run.")
@click.option("--input", "source", required=True, help="New points (same views and features).")
@click.option("--output", required=True, help="Store for the labels of the new points.")
@click.option("--dask-address", default=None)
@click.option("--n-workers", type=int, default=None)
@click.option("--overwrite", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", is_flag=True)
def assign(model_store, source, output, dask_address, n_workers, overwrite, as_json, quiet):
    """Label new data with a stored model (no refit)."""
    _quiet_env(quiet)

    def go():
        from mkdist.flows import assign_flow

        return assign_flow(model_store=model_store, source=source, output=output, dask_address=dask_address,
                           n_workers=n_workers, overwrite=overwrite, progress=not quiet)

    summary = _run_guarded(go, quiet)
    if as_json:
        click.echo(json.dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=2))
    else:
        click.echo(summary["markdown"])


@main.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def inspect(store, as_json):
    """Show what STORE holds: stages, model, summary."""
    from mkdist.pipeline import inspect_markdown, inspect_store

    info = _run_guarded(lambda: inspect_store(store), True)
    click.echo(json.dumps(info, default=float, indent=2) if as_json else inspect_markdown(info))


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
@click.option("--n-samples", type=int, default=200_000, show_default=True)
@click.option("--n-workers", type=int, default=2, show_default=True)
@click.option("--quiet", is_flag=True)
def demo(workdir, n_samples, n_workers, quiet):
    """Generate a 2-view data set and run the whole cluster flow on a local Dask cluster."""
    _quiet_env(quiet)

    def go():
        from mkdist._demo import run_demo

        return run_demo(workdir, n_samples=n_samples, n_workers=n_workers, progress=not quiet)

    t0 = time.perf_counter()
    summary = _run_guarded(go, quiet)
    _print_summary(summary, summary["store"], False)
    click.echo(f"demo finished in {time.perf_counter() - t0:.1f} s; store: {summary['store']}")
    click.echo(f"inspect it with: mkdist inspect {summary['store']}")


if __name__ == "__main__":  # pragma: no cover
    main()
