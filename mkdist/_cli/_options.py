"""The commands' options read and checked before anything heavy loads: --n-clusters, a config
file merged with the flags, the run request checked without the data, a store or a scheduler that
is not there, a finished run with nothing left to do, --drift-threshold."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click

from mkdist._cli._errors import BadInput

#: Options that are the CLI's and the flow's, not the estimator's.
RUN_KEYS = ("n_clusters", "kernels", "n_landmarks", "random_state", "method", "label_key", "labels_out",
            "id_column", "views", "dask_address", "n_workers", "storage_options", "missing")


def parse_n_clusters(value: Any) -> Any:
    """``--n-clusters`` (or ``n_clusters`` in --config): K, "auto", or a range "K_MIN:K_MAX"
    (a config file may give a list [k_min, k_max]).

    Only the command line's spelling is read here; whether the value is a K the method takes
    is the library's check (one message for every refusal, with the flag's name: a value this
    cannot read, such as "many" or "2.5", is passed on as it is and refused there)."""
    if isinstance(value, (bool, int, list)):
        return value
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    lo, sep, hi = text.partition(":")
    try:
        return [int(lo), int(hi)] if sep else int(text)
    except ValueError:
        return text


class _NClustersType(click.ParamType):
    name = "K|auto|K_MIN:K_MAX"

    def convert(self, value, param, ctx):
        return parse_n_clusters(value)


def _load_config(path: str | None) -> dict[str, Any]:
    """A TOML/JSON/YAML file of run options; a malformed one is refused naming file and line."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"config file {path} does not exist")
    text = p.read_text()
    invalid: tuple[type[Exception], ...] = (ValueError,)  # tomllib's and json's errors are ValueErrors
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            invalid = (ValueError, yaml.YAMLError)
            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    except invalid as exc:  # each parser's own "not valid"; anything else is no verdict on the file
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


def _run_options(config_path: str | None, given: dict[str, Any], view_items: tuple[str, ...]) -> dict[str, Any]:
    """The config file's options overridden by the command line's; ``--view`` replaces the
    file's ``[views]`` table."""
    from mkdist._pipeline._tables import parse_view_option

    merged = {**_load_config(config_path), **{k: v for k, v in given.items() if v is not None}}
    if view_items:
        merged["views"] = parse_view_option(view_items)
    views = merged.get("views")
    if views is not None and not isinstance(views, dict):
        raise BadInput(f"views in {config_path} must be a table of view = columns, e.g. [views] a = 'a*'")
    return merged


def _request(source: str, store: str, merged: dict[str, Any], overwrite: bool):
    """The run as asked, from the command line's options, checked without the data or the
    heavy imports (``mkdist.pipeline.check_request``: parameters, remote locations, outputs
    overlapping inputs, the store path's kind, the input's metadata, K against its rows).
    Returns the RunRequest: its key says whether the store already holds this run."""
    from mkdist._pipeline._config import RunConfig
    from mkdist._pipeline._io import InputSource
    from mkdist._pipeline._plan import check_request

    options = merged.get("storage_options")
    if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) for k in options)):
        raise BadInput("storage_options in --config must be a table of fsspec options, e.g. [storage_options] "
                       "endpoint_url = 'http://...'")
    if "n_clusters" not in merged:
        raise BadInput("give --n-clusters (or n_clusters in --config)")
    merged["n_clusters"] = parse_n_clusters(merged["n_clusters"])
    run_keys = ("n_clusters", "kernels", "n_landmarks", "random_state", "method")
    config = RunConfig.from_options(**{k: v for k, v in merged.items() if k not in RUN_KEYS or k in run_keys})
    source = InputSource(source, views=merged.get("views"), id_column=merged.get("id_column"),
                         label_column=merged.get("label_key"), storage_options=options, missing=merged.get("missing"))
    return check_request(source, store, config, labels_out=merged.get("labels_out"), overwrite=overwrite, report=True)


def _refuse_missing_store(store: str) -> None:
    """A STORE argument that names no run store is refused before the numerical stack loads.

    ``inspect``, ``report`` and ``assign --model-store`` read a store that must exist; a typo
    in its path answered after ~3 s of imports (scikit-learn, zarr, xarray) before this check.
    Only fsspec is needed here (and the object-store probe for URLs: a wrong key is one line).
    """
    import fsspec

    from mkdist._pipeline._tables import _suggest
    from mkdist.errors import InputValidationError
    from mkdist.storage._remote import options_for, probe

    if "://" in store:
        probe(store, what="store")
    fs, path = fsspec.core.url_to_fs(store, **options_for(store))
    if not fs.exists(path):
        raise InputValidationError(f"no mkdist run store at {store}{_suggest(fs, path)}")
    if not fs.isdir(path) or not fs.exists(f"{path.rstrip('/')}/zarr.json"):
        kind = "directory" if fs.isdir(path) else "file"
        raise InputValidationError(f"no mkdist run store at {store}: it is a {kind} without a zarr.json (a run "
                                   "store is a Zarr group written by `mkdist run`)")


def _nothing_to_do(store: str, key: str, merged: dict[str, Any], overwrite: bool) -> dict | None:
    """The stored summary when the store holds this finished run and its outputs are there."""
    from mkdist._pipeline._rerun import finished_run

    if overwrite:
        return None
    summary = finished_run(store, key)
    if summary is None or (summary.get("report") and not _exists(summary["report"])):
        return None
    labels_out = merged.get("labels_out")
    if labels_out is not None:
        from mkdist._pipeline._io import labels_out_owner

        owner = labels_out_owner(labels_out)
        url = store.rstrip("/") if "://" in store else os.path.abspath(store)
        if not owner or summary.get("labels_out") != labels_out or owner.get("store") != url:
            return None
    else:
        summary.pop("labels_out", None)
    return summary


def _exists(location: str) -> bool:
    """Whether a file exists, on local disk or at an fsspec URL (a report next to an s3 store)."""
    if "://" not in location:
        return os.path.exists(location)
    import fsspec

    from mkdist.storage._remote import options_for

    fs, path = fsspec.core.url_to_fs(location, **options_for(location))
    return fs.exists(path)


def _thresholds(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--drift-threshold {item!r}: write NAME=VALUE, e.g. cluster_tv=0.2")
        out[name.strip()] = value.strip()
    from mkdist._pipeline._drift import check_thresholds

    check_thresholds(out)
    return out
