"""What a re-run can answer before the heavy imports: "this store already holds this run".

A run that finishes records, in its store's root attributes, the *request* it answered: a
hash of the input's metadata fingerprint (files, sizes, modification times, the view plan)
and of the run's options as given (before ``method="auto"`` is resolved or a seed drawn).
The same command again computes the same request from the input's metadata alone, reads
the store's root ``zarr.json``, and, when they match, has nothing to do -- without importing
scikit-learn, Dask, xarray or Zarr (which take 3-5 s on a 2-core machine), so that a no-op
re-run answers in about a second.  Anything else (a new input, other options, a store being
written or of another schema version) goes the full way, where every stage is verified.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from mkdist.storage._layout import POINTER, SCHEMA_VERSION
from mkdist.storage._lease import LEASE_FILE

__all__ = ["request_key", "finished_run", "FINISHED"]

#: Root attribute of a run store recording the request a finished run answered.
FINISHED = "finished"


def request_key(input_fingerprint: str, config_json: dict[str, Any]) -> str:
    """The identity of a run request: the input's metadata fingerprint and the options as given."""
    text = json.dumps({"input": input_fingerprint, "config": config_json}, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def finished_run(store: Any, key: str) -> dict[str, Any] | None:
    """The stored summary when ``store`` holds a finished run of request ``key``, else None.

    Reads the store's root metadata and its lease file (JSON, through fsspec): a store that a
    live run is writing is never "finished".
    """
    import fsspec

    raw = os.fspath(store)
    try:
        from mkdist.storage._remote import options_for

        fs, path = fsspec.core.url_to_fs(raw if "://" in raw else os.path.abspath(raw), **options_for(raw))
        with fs.open(f"{path.rstrip('/')}/zarr.json", "rb") as f:
            attrs = json.load(f).get("attributes") or {}
        if fs.exists(f"{path.rstrip('/')}/{LEASE_FILE}"):
            return None
    except (OSError, ValueError):
        return None
    if attrs.get("schema_version") != SCHEMA_VERSION:
        return None  # the full path refuses the store, saying why and what to do
    finished = attrs.get(FINISHED) or {}
    if finished.get("request") != key or not attrs.get("summary"):
        return None
    # Each stage is still committed (its pointer object is there): a few metadata reads.  Its
    # content is verified by the full path (a run that has work to do) and `mkdist inspect --verify`.
    try:
        if not all(fs.exists(f"{path.rstrip('/')}/{stage}{POINTER}") for stage in finished.get("stages", ())):
            return None
    except OSError:
        return None
    return dict(attrs["summary"], **{k: v for k, v in finished.items() if k not in ("request", "stages")})
