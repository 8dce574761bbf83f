"""Parameter constraints and input checks shared by every estimator and pipeline entry point.

Parameters are declared per class as a constraint table (``_param_constraints``, in the
style of scikit-learn's ``_parameter_constraints``; a different name because scikit-learn's
own machinery would try to read ours) and checked by :func:`validate_params` at fit time.
Input checks look at metadata (type, shape, dtype, chunks) except :func:`check_finite`,
which scans NumPy values; Dask inputs are scanned in the first pass over the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..errors import InputValidationError, ParameterError

__all__ = [
    "Interval",
    "Options",
    "Boolean",
    "Types",
    "RandomStateLike",
    "NClusters",
    "AUTO_N_CLUSTERS",
    "n_clusters_range",
    "check_k_at_most",
    "shown_value",
    "validate_params",
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


# ============================================================================ constraints
def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def _fmt(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


class Interval:
    """Numbers of one kind (``Integral`` or ``Real``) in an interval.

    Parameters
    ----------
    kind : {numbers.Integral, numbers.Real}
    low, high : number or None
        Bounds; None is unbounded.
    closed : {"both", "left", "right", "neither"}, default="both"
        Which bounds belong to the interval.
    hint : str, optional
        Why the bounds hold (and what to pass instead), added to the out-of-range message.
    """

    def __init__(self, kind: type, low: float | None = None, high: float | None = None, *,
                 closed: str = "both", hint: str | None = None):
        self.kind, self.low, self.high, self.closed, self.hint = kind, low, high, closed, hint

    def _in_range(self, v: float) -> bool:
        lo_ok = self.low is None or v > self.low or (v == self.low and self.closed in ("both", "left"))
        hi_ok = self.high is None or v < self.high or (v == self.high and self.closed in ("both", "right"))
        return lo_ok and hi_ok

    def right_type(self, value: Any) -> bool:
        if self.kind is Integral:
            return _is_int(value)
        return _is_real(value) and math.isfinite(value)

    def is_satisfied_by(self, value: Any) -> bool:
        return self.right_type(value) and self._in_range(value)

    def bounds(self) -> str:
        """The bounds as a phrase: ">= 2", "> 0 and <= 1"."""
        parts = []
        if self.low is not None:
            parts.append(f"{'>=' if self.closed in ('both', 'left') else '>'} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<=' if self.closed in ('both', 'right') else '<'} {self.high:g}")
        return " and ".join(parts)

    def noun(self) -> str:
        """What the interval holds, in words ("a positive integer", "a number > 0 and < 1")."""
        if self.kind is Integral:
            if self.high is None and self.low == 0 and self.closed in ("both", "left"):
                return "a non-negative integer"
            if self.high is None and self.low == 1 and self.closed in ("both", "left"):
                return "a positive integer"
            return f"an integer {self.bounds()}".rstrip()
        if self.high is None and self.low == 0 and self.closed in ("neither", "right"):
            return "a positive number"
        return f"a number {self.bounds()}".rstrip()


class Options:
    """One of a fixed set of values (strings, None, ...)."""

    def __init__(self, *values: Any):
        self.values = values

    def is_satisfied_by(self, value: Any) -> bool:
        return any(value is v or (type(value) is type(v) and value == v) for v in self.values)

    def noun(self) -> str:
        return " or ".join(_fmt(v) for v in self.values)


class Boolean:
    """True or False (NumPy booleans included)."""

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, (bool, np.bool_))

    def noun(self) -> str:
        return "True or False"


class Types:
    """An instance of one of the given types (detailed checks come later, with the data)."""

    def __init__(self, *types: type, noun: str | None = None):
        self.types, self._noun = types, noun

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, self.types)

    def noun(self) -> str:
        return self._noun or " or ".join(t.__name__ for t in self.types)


class RandomStateLike:
    """None, an int seed in [0, 2**32 - 1] or a ``numpy.random.RandomState``."""

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None or isinstance(value, np.random.RandomState) or (
            _is_int(value) and 0 <= int(value) < 2**32)

    def noun(self) -> str:
        return "None, an integer seed in [0, 2**32 - 1] or a numpy.random.RandomState"


#: The ``n_clusters`` value that asks the method to choose K (``mkdist._core._nclusters``).
AUTO_N_CLUSTERS = "auto"


class NClusters:
    """``n_clusters``: an integer >= ``low``, or, where the method can choose K, "auto" or a
    range (k_min, k_max) of integers with low <= k_min <= k_max.

    Parameters
    ----------
    low : int
        Smallest K.
    auto_reason : str or None, default=None
        None: "auto" and ranges are accepted.  Else the method cannot choose K, and this
        says why (it ends the error message).
    """

    def __init__(self, low: int = 2, auto_reason: str | None = None):
        self.low, self.auto_reason = low, auto_reason

    @property
    def auto(self) -> bool:
        """True when the method accepts "auto" and ranges."""
        return self.auto_reason is None

    def is_satisfied_by(self, value: Any) -> bool:
        if _is_int(value):
            return int(value) >= self.low
        return self.auto and n_clusters_range(value, self.low) is not None

    def noun(self) -> str:
        if not self.auto:
            return f"an integer >= {self.low}"
        return f'an integer >= {self.low}, "auto" or a range (k_min, k_max) of integers >= {self.low}'

    def error(self, name: str, value: Any) -> ParameterError:
        """The error for a value this constraint refuses: one message for every wrong K (0 and 1
        alike), and the method's reason when it cannot choose K."""
        asks = value == AUTO_N_CLUSTERS if isinstance(value, str) else isinstance(value, (list, tuple))
        if asks and not self.auto:
            return ParameterError(name, shown_value(value), f": {self.auto_reason}")
        give = f": give K as an integer >= {self.low} (e.g. 10)"
        if self.auto:
            give += (', or `"auto"` or a range `(k_min, k_max)` (e.g. `(3, 20)`) to choose K from the landmarks, '
                     f"with {self.low} <= k_min <= k_max")
        return ParameterError(name, shown_value(value), give + ".")


def shown_value(value: Any) -> Any:
    """A value as a message shows it: a range as a tuple, NumPy scalars as Python's."""
    if isinstance(value, (list, tuple)):
        return tuple(v.item() if isinstance(v, np.generic) else v for v in value)
    return value.item() if isinstance(value, np.generic) else value


def check_k_at_most(n_clusters: Any, k: int, count: int, what: str, remedy: str) -> None:
    """Refuse a K above ``count`` (rows, landmarks, anchors), with one message wherever it is checked.

    Parameters
    ----------
    n_clusters : int, "auto" or (k_min, k_max)
        As given (the message shows it).
    k : int
        The largest K it asks for.
    count : int
    what : str
        What ``count`` counts ("rows", "landmarks").
    remedy : str
        What to change besides K, e.g. "raise `n_landmarks`" (backquoted names: a front end
        words them its way).

    Raises
    ------
    ParameterError
    """
    if k > count:
        asked = "K" if _is_int(n_clusters) else f"K = {k}, the largest it searches,"
        raise ParameterError("n_clusters", shown_value(n_clusters),
                             f": {asked} is more than the {count:,} {what}; {remedy + ' or ' if remedy else ''}"
                             "lower `n_clusters`.")


def n_clusters_range(value: Any, low: int = 2) -> tuple[int, int | None] | None:
    """(k_min, k_max) asked by an ``n_clusters`` of "auto" (k_max None: the default) or a range.

    None for an integer or a value that is neither (the constraint table refuses it).
    """
    if isinstance(value, str):
        return (low, None) if value == AUTO_N_CLUSTERS else None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_int(v) for v in value):
        k_min, k_max = int(value[0]), int(value[1])
        return (k_min, k_max) if low <= k_min <= k_max else None
    return None


def _constraint(c: Any):
    return Options(None) if c is None else c


def validate_params(constraints: Mapping[str, Sequence[Any]], params: Mapping[str, Any]) -> None:
    """Check every parameter against its constraints; the error names the parameter, its value
    and what is allowed.

    Parameters
    ----------
    constraints : dict of str to list
        For each parameter a list of accepted forms: ``None``, :class:`Interval`,
        :class:`Options`, :class:`Boolean`, :class:`Types`, :class:`RandomStateLike`.
    params : dict of str to object
        The estimator's ``get_params(deep=False)``.

    Raises
    ------
    InputValidationError
        On the first parameter that satisfies none of its forms.
    """
    for name, allowed in constraints.items():
        value = params[name]
        forms = [_constraint(c) for c in allowed]
        if any(f.is_satisfied_by(value) for f in forms):
            continue
        own = [f for f in forms if hasattr(f, "error")]
        if own:  # a constraint that words its own refusal (NClusters)
            raise own[0].error(name, value)
        intervals = [f for f in forms if isinstance(f, Interval)]
        # A number of the right kind outside its range: say the range, as "`x`=0 must be >= 1".
        in_kind = [f for f in intervals if f.right_type(value)]
        if in_kind:
            f = in_kind[0]
            why = f": {f.hint}" if f.hint else "."
            raise ParameterError(name, float(value) if f.kind is Real else int(value), f" must be {f.bounds()}{why}")
        nouns = [f.noun() for f in forms]
        if len(intervals) == 1 and intervals[0].kind is Integral and len(forms) <= 2 and not isinstance(
                value, str):
            # e.g. "`n_anchors` must be an integer >= 2, got 2.5 (float)."
            extra = " or None" if any(isinstance(f, Options) and f.values == (None,) for f in forms) else ""
            raise ParameterError(name, value, f" must be {intervals[0].noun()}{extra}, got {_fmt(value)} "
                                              f"({type(value).__name__}).", show_value=False)
        raise ParameterError(name, value.item() if isinstance(value, np.generic) else value,
                             f" must be {' or '.join(nouns)}.")


def collect_constraints(cls: type, attr: str = "_param_constraints") -> dict[str, list]:
    """The constraint tables of a class and its bases, merged (subclasses win)."""
    out: dict[str, list] = {}
    for klass in reversed(cls.__mro__):
        out.update(klass.__dict__.get(attr, {}))
    return out


# ============================================================================ input views
#: A scipy.sparse view is densified when its dense form takes at most this many bytes.
SPARSE_DENSIFY_MAX_BYTES = 2 * 2**30


def _is_sparse(value: Any) -> bool:
    return type(value).__module__.startswith("scipy.sparse")


def _densify_sparse(name: str, value: Any) -> np.ndarray:
    """A scipy.sparse view as a dense array (float32 unless it is float64).

    Every kernel mkdist computes is a dense block against dense landmarks (sparse x dense
    products save nothing once a kernel's (b, n) block is formed), and the shared text and graph
    sets hold at most 10,000 x 5,000 values: densifying is the simple, exact route.  Views too
    large for it are refused with what to do instead.
    """
    dtype = np.float64 if value.dtype == np.float64 else np.float32
    nbytes = int(value.shape[0]) * int(value.shape[1]) * np.dtype(dtype).itemsize
    if nbytes > SPARSE_DENSIFY_MAX_BYTES:
        raise InputValidationError(
            f"view {name!r} is a scipy.sparse matrix of shape {value.shape}: dense it would take "
            f"{nbytes / 2**30:.1f} GiB (more than {SPARSE_DENSIFY_MAX_BYTES / 2**30:.0f} GiB); reduce its columns "
            "first (e.g. sklearn.decomposition.TruncatedSVD) or pass it as a chunked Dask array.")
    return np.asarray(value.toarray(), dtype=dtype)


def _to_array(name: str, value: Any) -> Any:
    if _is_sparse(value):
        value = _densify_sparse(name, value)
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
        ``"view0" ... "view{V-1}"``; a dict keeps its (string) keys.  pandas DataFrames are
        read by column (:func:`mkdist._core._columns.frame_views`): one DataFrame is the view
        ``"features"`` of its numeric columns, each DataFrame of a list or dict one view.
    min_samples : int, default=1
        Minimum number of rows.

    Returns
    -------
    views : dict of str to ndarray or dask.array.Array
        Every view has the same number of rows. Arrays are not copied (a scipy.sparse view
        is densified: see ``_densify_sparse``).
    """
    from ._columns import frame_views, has_frames

    if has_frames(X):
        # pandas DataFrames take the table path: views by column kind, categories one-hot encoded.
        X = frame_views(X)[0]
    if getattr(X, "ndim", None) == 1:
        raise InputValidationError(
            f"Expected a 2-D array (n_samples, n_features), got a 1-D array of shape {X.shape}: view "
            "'view0' must be 2-D. Reshape your data either using array.reshape(-1, 1) if it has a single "
            "feature or array.reshape(1, -1) if it is a single sample.")
    if _is_sparse(X):  # before Mapping: a scipy.sparse DOK matrix is a dict of (row, column) keys
        items = [("view0", X)]
    elif isinstance(X, Mapping):
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


def check_finite(views: Mapping[str, Any], row_numbers: np.ndarray | None = None) -> None:
    """Raise if any NumPy view holds NaN or inf, naming the view and the first bad row.

    Dask views are skipped: the first pass over their chunks checks them (``mkdist._core._blocks``).
    ``row_numbers`` maps the rows of gathered views (landmarks, samples) to the input's rows.
    """
    for name, v in views.items():
        if is_dask_array(v):
            continue
        if np.issubdtype(v.dtype, np.floating):
            bad = ~np.isfinite(v)
            if bad.any():
                row = int(np.argmax(bad.any(axis=1)))
                kind = "NaN" if np.isnan(v[row]).any() else "infinity"
                where = row if row_numbers is None else int(row_numbers[row])
                raise InputValidationError(
                    f"Input contains {kind} (NaN or infinity): view {name!r}, first bad row {where}."
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
    """Check one integer outside a constraint table (function arguments)."""
    if value is None and allow_none:
        return None
    validate_params({name: [Interval(Integral, low, high)]}, {name: value})
    return int(value)


def check_real(name: str, value: Any, *, low: float | None = None, low_inclusive: bool = True,
               high: float | None = None, high_inclusive: bool = True,
               allow_none: bool = False) -> float | None:
    """Check one real number outside a constraint table (function arguments)."""
    if value is None and allow_none:
        return None
    closed = {(True, True): "both", (True, False): "left", (False, True): "right",
              (False, False): "neither"}[(low_inclusive, high_inclusive)]
    validate_params({name: [Interval(Real, low, high, closed=closed)]}, {name: value})
    return float(value)
