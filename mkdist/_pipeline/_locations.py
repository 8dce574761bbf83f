"""Where a run reads and writes: a store's or an input's location normalised, and the refusals
of an output that would overlap an input or a store location that is a file."""

from __future__ import annotations

import os
from typing import Any

from mkdist.storage._remote import options_for

from ..errors import InputValidationError


def _location(url: Any) -> tuple[str, str] | None:
    """(protocol, normalised path) of a store or input location; None for in-memory objects."""
    if hasattr(url, "url"):  # a RunStore
        url = url.url
    if not isinstance(url, (str, os.PathLike)):
        return None
    raw = os.fspath(url)
    if "://" not in raw or raw.startswith("file://"):
        return "file", os.path.realpath(os.path.expanduser(raw.removeprefix("file://")))
    protocol, _, path = raw.partition("://")
    return protocol, "/" + path.strip("/")


def refuse_overlap(target: Any, **inputs: Any) -> None:
    """Refuse an output location that is, contains or lies inside one of the inputs.

    Writing a store there (or overwriting it) could destroy the input, e.g. ``assign`` onto
    its own model store.

    Raises
    ------
    InputValidationError
        Naming the output and the input it would overlap.
    """
    out = _location(target)
    if out is None:
        return
    for what, given in inputs.items():
        other = _location(given)
        if other is None or other[0] != out[0]:
            continue
        if out[1] == other[1]:
            relation = "is"
        elif out[1].startswith(other[1].rstrip("/") + "/"):
            relation = "lies inside"
        elif other[1].startswith(out[1].rstrip("/") + "/"):
            relation = "contains"
        else:
            continue
        raise InputValidationError(
            f"the output {target} {relation} the {what.replace('_', ' ')} {given}: writing it could destroy "
            "that input; choose another output location.")


def refuse_file_store(store: Any) -> None:
    """A store location that is a regular file is refused before anything else reads it."""
    import fsspec

    raw = store.url if hasattr(store, "url") else store
    if not isinstance(raw, (str, os.PathLike)):
        return
    raw = os.fspath(raw)
    fs, path = fsspec.core.url_to_fs(raw, **options_for(raw))
    if fs.isfile(path):
        raise InputValidationError(f"the store {raw} is a file; a run store is a directory (give a new path, "
                                   "e.g. runs/customers.zarr)")
