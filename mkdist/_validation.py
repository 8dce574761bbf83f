"""Input validation shared by every estimator and pipeline entry point.

All checks here look at metadata (type, shape, dtype, chunks) except
:func:`check_finite`, which scans NumPy values; Dask inputs are scanned
lazily in the first pass over the data instead (see ``mkdist._io``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from .errors import InputValidationError

__all__ = [
    "as_views",
    "check_finite",
    "check_int",
    "check_real",
    "common_float_dtype",
    "is_dask_array",
]


def is_dask_array(x: Any) -> bool:
    """True for a ``dask.array.Array`` (without importing dask when it is absent)."""
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks")


def _reject_sparse(name: str, value: Any) -> None:
    if type(value).__module__.startswith("scipy.sparse"):
        raise TypeError(
            f"view {name!r} is a sparse matrix; sparse input is not supported: pass a dense array "
            "(X.toarray())."
        )


def _to_array(name: str, value: Any) -> Any:
    _reject_sparse(name, value)
    if is_dask_array(value) or isinstance(value, np.ndarray):
        arr = value
    else:
        # xarray.DataArray, pandas.DataFrame, lists ... -> ndarray.
        data = getattr(value, "data", None)
        arr = data if (data is not None and (is_dask_array(data) or isinstance(data, np.ndarray))) else None
        if arr is None:
            try:
                arr = np.asarray(value)
            except Exception as exc:  # pragma: no cover - exotic objects
                raise InputValidationError(f"view {name!r} cannot be converted to an array: {exc}") from exc
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise InputValidationError(f"Complex data not supported: view {name!r} has dtype {arr.dtype}.")
    if arr.dtype == object and not is_dask_array(arr):
        try:  # numbers stored as objects (e.g. from pandas) are fine
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            # TypeError like NumPy's own float() failure, so callers catching it keep working.
            raise TypeError(
                f"view {name!r} has non-numeric dtype object ({exc}); convert it to float or drop the "
                "non-numeric columns."
            ) from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise InputValidationError(
            f"view {name!r} has non-numeric dtype {arr.dtype}; convert it to float "
            "(e.g. X.astype(np.float32)) or drop the non-numeric columns."
        )
    if arr.ndim != 2:
        raise InputValidationError(
            f"view {name!r} must be 2-D (n_samples, n_features), got {arr.ndim}-D with shape "
            f"{arr.shape}; reshape a single feature with X.reshape(-1, 1)."
        )
    if arr.shape[1] == 0:
        raise InputValidationError(
            f"view {name!r} has zero columns: 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required."
        )
    return arr


def as_views(X: Any, *, min_samples: int = 1) -> dict[str, Any]:
    """Normalise the input to an ordered ``{view_name: 2-D array}`` mapping.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), or list/tuple/dict of such arrays
        A single array is one view named ``"view0"``; a list or tuple gives
        ``"view0" ... "view{V-1}"``; a dict keeps its (string) keys.
    min_samples : int, default=1
        Minimum number of rows.

    Returns
    -------
    views : dict of str to ndarray or dask.array.Array
        Every view has the same number of rows. Arrays are not copied.
    """
    _reject_sparse("view0", X)
    if isinstance(X, Mapping):
        items = list(X.items())
        for key, _ in items:
            if not isinstance(key, str):
                raise InputValidationError(f"view names must be strings, got {key!r} ({type(key).__name__}).")
    elif isinstance(X, (list, tuple)) and len(X) > 0 and all(
        hasattr(v, "shape") or isinstance(v, Sequence) for v in X
    ) and not _looks_like_single_table(X):
        items = [(f"view{i}", v) for i, v in enumerate(X)]
    else:
        items = [("view0", X)]
    if not items:
        raise InputValidationError("no views given: pass an array or a non-empty list/dict of arrays.")
    views = {name: _to_array(name, value) for name, value in items}
    rows = {name: v.shape[0] for name, v in views.items()}
    if len(set(rows.values())) > 1:
        raise InputValidationError(
            f"all views must have the same number of rows (samples); got {rows}."
        )
    n = next(iter(rows.values()))
    if n is None or (isinstance(n, float) and np.isnan(n)):
        raise InputValidationError(
            "a view has unknown chunk sizes (NaN rows); call .compute_chunk_sizes() on the Dask array first."
        )
    if n < min_samples:
        raise InputValidationError(f"n_samples={n} should be >= {min_samples}.")
    return views


def _looks_like_single_table(X: Sequence) -> bool:
    """A list of scalars / rows is one table (sklearn passes lists of lists), not a list of views."""
    first = X[0]
    if hasattr(first, "ndim"):
        return getattr(first, "ndim", 0) < 2
    if isinstance(first, Sequence) and not isinstance(first, (str, bytes)):
        return len(first) == 0 or not isinstance(first[0], Sequence)
    return True


def check_finite(views: Mapping[str, np.ndarray]) -> None:
    """Raise if any NumPy view holds NaN or inf, naming the view and the first bad row."""
    for name, v in views.items():
        if is_dask_array(v):
            continue
        if np.issubdtype(v.dtype, np.floating):
            bad = ~np.isfinite(v)
            if bad.any():
                row = int(np.argmax(bad.any(axis=1)))
                kind = "NaN" if np.isnan(v[row]).any() else "infinity"
                raise InputValidationError(
                    f"Input contains {kind} (NaN or infinity): view {name!r}, first bad row {row}."
                )


def common_float_dtype(views: Mapping[str, Any]) -> np.dtype:
    """float32 when every view is float32 (or narrower), else float64."""
    for v in views.values():
        if not (np.issubdtype(v.dtype, np.floating) and v.dtype.itemsize <= 4) and not (
            np.issubdtype(v.dtype, np.integer) and v.dtype.itemsize <= 2
        ) and v.dtype != np.bool_:
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None,
              allow_none: bool = False) -> int | None:
    """Check an integer parameter; the error names the parameter, its value and the range."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputValidationError(f"`{name}` must be an integer, got {value!r} ({type(value).__name__}).")
    value = int(value)
    if low is not None and value < low:
        raise InputValidationError(f"`{name}`={value} must be >= {low}.")
    if high is not None and value > high:
        raise InputValidationError(f"`{name}`={value} must be <= {high}.")
    return value


def check_real(name: str, value: Any, *, low: float | None = None, low_inclusive: bool = True,
               high: float | None = None, high_inclusive: bool = True,
               allow_none: bool = False) -> float | None:
    """Check a real parameter; the error names the parameter, its value and the range."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value):
        raise InputValidationError(f"`{name}` must be a finite number, got {value!r}.")
    value = float(value)
    if low is not None and (value < low or (value == low and not low_inclusive)):
        op = ">=" if low_inclusive else ">"
        raise InputValidationError(f"`{name}`={value} must be {op} {low}.")
    if high is not None and (value > high or (value == high and not high_inclusive)):
        op = "<=" if high_inclusive else "<"
        raise InputValidationError(f"`{name}`={value} must be {op} {high}.")
    return value


class ViewsInputMixin:
    """Input handling shared by the estimators whose fitted ``model_`` knows its views.

    ``_views`` turns any accepted input into named views and refuses NaN/inf;
    ``_check_predict_views`` also checks the estimator is fitted and that the views match
    the ones it was fitted on (names and features per view).
    """

    def _views(self, X) -> dict:
        views = as_views(X)
        check_finite(views)
        return views

    def _check_predict_views(self, X) -> dict:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "model_")
        views = self._views(X)
        self.model_.check_views(views, type(self).__name__)
        return views
