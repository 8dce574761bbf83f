"""Model state: what a fitted estimator saves and reloads, as named arrays + JSON, no pickle.

A state is ``{"attrs": JSON-able dict, "arrays": {name: (dims, ndarray)}}``.  The estimator
base (:mod:`mkdist._methods._base`) adds the format tag and the encoded parameters; this module holds
the pieces every method shares: parameter encoding, the format check, array getters and the
conversion to and from an xarray Dataset (the run store's ``model`` stage).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputValidationError
from ._cluster import compute_here

__all__ = ["encode_param", "encode_params", "check_state_format", "StateArrays", "state_to_dataset",
           "dataset_to_state", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """``value`` with NumPy scalars/arrays and tuples turned into plain JSON types."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def encode_param(value: Any) -> Any:
    """A constructor parameter as JSON: kernel specs become dicts, tuples lists; a value that
    has no JSON form (a ``RandomState`` instance) becomes None."""
    try:
        return to_jsonable(value)
    except (TypeError, ValueError):
        return None


def encode_params(estimator: Any) -> dict[str, Any]:
    """``get_params(deep=False)`` of an estimator, JSON-encoded (see :func:`encode_param`)."""
    return {k: encode_param(v) for k, v in estimator.get_params(deep=False).items()}


def check_state_format(attrs: Mapping[str, Any], expected: str, owner: str) -> None:
    """Raise unless the state was written by ``owner`` in format ``expected``."""
    got = attrs.get("format")
    if got != expected:
        raise InputValidationError(
            f"model state format {got!r} is not {expected!r}; it was not written by "
            f"{owner}.model_state() of this mkdist version."
        )


class StateArrays:
    """Read access to the arrays of a state, whether stored as ``(dims, array)`` or bare."""

    def __init__(self, arrays: Mapping[str, Any]):
        self._arrays = arrays

    def __contains__(self, name: str) -> bool:
        return name in self._arrays

    def __call__(self, name: str, dtype=None) -> np.ndarray:
        if name not in self._arrays:
            raise InputValidationError(f"model state has no array {name!r}; it holds {sorted(self._arrays)}.")
        value = self._arrays[name]
        arr = np.asarray(value[1] if isinstance(value, tuple) else value)
        return arr if dtype is None else arr.astype(dtype, copy=False)


def state_to_dataset(state: Mapping[str, Any], method: str):
    """A state as an xarray Dataset: arrays with named dimensions, attrs as one JSON string.

    Raises
    ------
    ValueError
        An array name holds '/' (Zarr would read it as a sub-group and the stage would lose it).
    """
    import xarray as xr

    bad = [k for k in state["arrays"] if "/" in k]
    if bad:
        raise ValueError(f"model state array names must not contain '/': {bad}")
    ds = xr.Dataset({k: (dims, np.asarray(a)) for k, (dims, a) in state["arrays"].items()})
    ds.attrs["mkdist_state"] = json.dumps(state["attrs"], default=_json_default)
    ds.attrs["method"] = method
    return ds


def dataset_to_state(ds) -> dict[str, Any]:
    """The state stored by :func:`state_to_dataset` (arrays read into memory)."""
    if "mkdist_state" not in ds.attrs:
        raise InputValidationError(
            "the model stage holds no mkdist model state (attribute 'mkdist_state' missing); it was "
            "written by another version of mkdist: re-run the pipeline into a new store.")
    names = list(ds.data_vars)
    values = compute_here(*(ds[k].data for k in names))
    return {"attrs": json.loads(ds.attrs["mkdist_state"]),
            "arrays": {k: (tuple(ds[k].dims), v) for k, v in zip(names, values)}}
