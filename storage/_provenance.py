"""A run store's provenance: the mkdist version it records, the schema versions this mkdist
reads, what differs between a stored run and a given one, and attributes as plain JSON."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mkdist.errors import SchemaVersionError

from ._layout import SCHEMA_VERSION


def _mkdist_version() -> str:
    """The installed mkdist's version, read without importing the package root (which imports
    this module: a cycle)."""
    try:
        return importlib.metadata.version("mkdist")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def _check_schema(attrs: Mapping[str, Any], url: str) -> None:
    """Refuse a store of another schema version than this mkdist's (older, or newer)."""
    version = attrs.get("schema_version")
    if isinstance(version, int) and version < SCHEMA_VERSION:
        # No reader or migration: no released mkdist wrote an older schema.  Version 1 kept no
        # checksums to verify stages by; version 2 committed stages by directory renames,
        # which a reader could see half done.
        raise SchemaVersionError(
            f"{url} has store schema_version={version}, written by an older mkdist; mkdist "
            f"{_mkdist_version()} reads schema version {SCHEMA_VERSION} only: re-create the run "
            "with RunStore.create(..., overwrite=True) (`mkdist run --overwrite`), or use "
            "another location.")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{url} has store schema_version={version!r}, but mkdist {_mkdist_version()} reads "
            f"schema versions up to {SCHEMA_VERSION}: upgrade mkdist to read this store.")


def _run_differences(attrs: Mapping[str, Any], fingerprint: str, params: dict) -> list[str]:
    """What differs between the stored run and the given one (empty if it is the same run)."""
    diffs = []
    if attrs.get("fingerprint") != fingerprint:
        diffs.append(f"fingerprint (stored {attrs.get('fingerprint')!r}, given {fingerprint!r})")
    stored = attrs.get("params") or {}
    unset = object()

    def same(a: Any, b: Any) -> bool:  # through JSON so that NaN equals NaN
        return a is not unset and b is not unset and _dumps(a) == _dumps(b)

    keys = sorted(k for k in stored.keys() | params.keys()
                  if not same(stored.get(k, unset), params.get(k, unset)))
    if keys:
        diffs.append("params " + ", ".join(
            f"{k} (stored {stored.get(k, '<unset>')!r}, given {params.get(k, '<unset>')!r})"
            for k in keys))
    return diffs


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} {obj!r} is not JSON-serialisable")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_json_default)


def _to_json(obj: Any, what: str) -> Any:
    """``obj`` as plain JSON types (tuples become lists, numpy scalars numbers)."""
    try:
        return json.loads(_dumps(obj))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON-serialisable (run stores hold no pickles): {e}"
                        ) from None
