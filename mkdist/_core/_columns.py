"""The columns of a table, as mkdist reads them: what every column is, which form which
view, how categories become features, and what is refused before any work.

A data engineer's table has an id column, string and categorical columns, timestamps and
nulls beside the numbers.  Decided from a table's schema and statistics (and one read of a
column where a check needs its values):

* the id column (``id_column``) is never a feature; it keys the labels written out;
* numeric columns (integers, floats, decimals) make numeric views; booleans are features only
  when a view names them (as 0/1);
* strings and categoricals (dictionary columns) make categorical views when a view names them
  (each column one-hot encoded over its categories, :func:`encode_categories`); integer codes
  too when the view is declared ``NAME:categorical``; undeclared they are ignored and named;
* timestamps, dates and anything else are never features: declared, they are refused with
  what to do; a view mixing numbers and categories is refused with the two views to declare;
* views are declared as column lists or ``fnmatch`` patterns (``{"a": "a*", "b": ["b0",
  "b1"]}``); with no declaration every numeric non-id column forms one view;
* an undeclared integer column that looks like a row id (unique and monotone) is refused,
  naming it: clustered as a feature, it splits the rows into id ranges;
* nulls in a feature (from the column statistics) and in the id column are refused before
  any work, naming the column, the count and the first row; with ``missing="impute"`` the
  features' nulls pass (as NaN, which the run fills), the id column's never do.

The table itself is a :class:`Table` (:mod:`mkdist._core._table`): in memory
(:class:`ArrowTable`, a pandas DataFrame's) or Parquet files
(``mkdist._pipeline._tables.ParquetTable``).  Only ``pyarrow`` and NumPy are imported here, so
the estimators (which take DataFrames) and the command line use it alike.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError
from ._table import ArrowTable, Column, Table, _describe, frame_to_arrow, is_frame

__all__ = ["Column", "Table", "ArrowTable", "ViewPlan", "plan_views", "parse_view_option", "encode_categories",
           "encode_views", "view_layout", "frame_to_arrow", "is_frame", "describe_row", "DEFAULT_VIEW",
           "MAX_CATEGORIES", "VIEW_KINDS"]

#: Name of the one view formed by every numeric column when no view is declared.
DEFAULT_VIEW = "features"
#: Integer columns with one of these names (or ending in ``_id``) are checked for uniqueness
#: in any order, not only for monotone values.
_ID_LIKE_NAMES = ("id", "index", "key", "uuid", "row", "rowid", "row_id", "row_number")
_GLOB_CHARS = "*?["
#: What every refusal of missing values offers (``missing="impute"``: the run fills them).
MISSING_HINT = "pass --missing impute (missing='impute') to cluster those rows too, their missing cells imputed"


# ----------------------------------------------------------------------------- views
@dataclasses.dataclass
class ViewPlan:
    """Which columns of a table form which view, and which are left out and why.

    Attributes
    ----------
    views : dict of str to list of str
        View name -> its columns, in table order within a pattern, in the given order across.
    ignored : list of (str, str)
        (column, why) for every column that is not a feature.
    declared : bool
        Whether the views were declared (else one view of every numeric non-id column).
    id_column, label_column : str or None
    """

    views: dict[str, list[str]]
    ignored: list[tuple[str, str]]
    declared: bool
    id_column: str | None = None
    label_column: str | None = None
    categories: dict[str, list] = dataclasses.field(default_factory=dict)

    @property
    def categorical_views(self) -> list[str]:
        """The views whose columns are categories (one-hot encoded, see :func:`encode_categories`)."""
        return [v for v, cols in self.views.items() if cols and cols[0] in self.categories]

    def kind(self, view: str) -> str:
        """"categorical" or "numeric"."""
        return "categorical" if view in self.categorical_views else "numeric"

    def widths(self) -> dict[str, int]:
        """Features per view as the estimators see them: a categorical column gives one
        indicator per category of its vocabulary."""
        return {v: sum(len(self.categories[c]) for c in cols) if self.kind(v) == "categorical" else len(cols)
                for v, cols in self.views.items()}

    def feature_names(self) -> dict[str, list[str]]:
        """The name of every feature of every view: the column, or ``column=category``."""
        return {v: [f"{c}={value}" for c in cols for value in self.categories[c]]
                if self.kind(v) == "categorical" else list(cols) for v, cols in self.views.items()}

    def message(self) -> str:
        """The one line a run prints about its input's columns."""
        def cols(names: list[str]) -> str:
            return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {names[-1]}"

        def what(view: str, columns: list[str]) -> str:
            if self.kind(view) == "numeric":
                return f"{len(columns)} columns"
            n = sum(len(self.categories[c]) for c in columns)
            return f"{len(columns)} categorical column{'s' * (len(columns) > 1)}, {n} categories"

        if self.declared:
            head = "views: " + "; ".join(f"{v} = {cols(c)} ({what(v, c)})" for v, c in self.views.items())
        else:
            (name, columns), = self.views.items()
            head = (f"one view {name!r} of all {len(columns)} numeric columns ({cols(columns)}); declare views "
                    "with --view NAME=COLUMNS")
        if self.ignored:
            by_reason: dict[str, list[str]] = {}
            for c, why in self.ignored:
                by_reason.setdefault(why, []).append(c)
            head += "; ignored: " + ", ".join(f"{cols(c)} ({why})" for why, c in by_reason.items())
        return head

    def to_json(self) -> dict[str, Any]:
        out = {"views": self.views, "ignored": [list(x) for x in self.ignored], "declared": self.declared,
               "id_column": self.id_column, "label_column": self.label_column}
        if self.categories:
            # Only when there are categories: a numeric plan keeps the JSON (and so the run
            # fingerprint) it had before categorical views existed, and its stores resume.
            out["categories"] = self.categories
        return out


def parse_view_option(values: Sequence[str]) -> dict[str, list[str]]:
    """``["a=a*", "b=b0,b1,b2"]`` (the ``--view`` option) -> ``{"a": ["a*"], "b": ["b0", "b1", "b2"]}``."""
    out: dict[str, list[str]] = {}
    for item in values:
        name, sep, spec = item.partition("=")
        name, spec = name.strip(), spec.strip().strip("'\"")
        if not sep or not name or not spec:
            raise InputValidationError(f"--view {item!r}: write NAME=COLUMNS, e.g. --view a='a*' or --view "
                                       "b=b0,b1,b2")
        if name in out:
            raise InputValidationError(f"view {name!r} is declared twice")
        out[name] = [c.strip() for c in spec.split(",") if c.strip()]
    return out


def _normalise_declaration(views: Any) -> dict[str, list[str]] | None:
    if views is None:
        return None
    if isinstance(views, Mapping):
        out = {}
        for name, spec in views.items():
            items = [spec] if isinstance(spec, str) else list(spec)
            cols = [c.strip() for item in items for c in str(item).split(",") if c.strip()]
            if not cols:
                raise InputValidationError(f"view {name!r} names no column")
            out[str(name)] = cols
        if not out:
            raise InputValidationError("views={} declares no view")
        return out
    raise InputValidationError(
        f"views={views!r}: for a table, declare views as a mapping of view name to columns or patterns, "
        "e.g. {'a': 'a*', 'b': ['b0', 'b1']}")


def plan_views(table: Table, views: Any = None, *, id_column: str | None = None,
               label_column: str | None = None, categories: Mapping[str, Sequence] | None = None,
               missing: str | None = None) -> ViewPlan:
    """Sort a table's columns into views; refuse what cannot be clustered, naming it.

    Parameters
    ----------
    table : ParquetTable
    views : mapping of str to str or list of str, optional
        View name -> column names or ``fnmatch`` patterns (a string may list several,
        comma-separated).  None: one view (``"features"``) of every numeric column.  A view's
        kind follows from its columns: numbers (and booleans) make a numeric view, strings and
        categoricals a categorical one (each column one-hot encoded over its categories, see
        :func:`encode_categories`); a name ``"NAME:categorical"`` reads integer codes as
        categories too, ``"NAME:numeric"`` insists on numbers.
    id_column : str, optional
        The rows' ids: never a feature.
    label_column : str, optional
        True labels (for scores): never a feature.
    categories : mapping of str to list, optional
        Column -> its categories, as a fitted model has them: a new batch is encoded with the
        model's vocabulary (a category it did not see becomes all-zero indicators), and a view
        whose columns all have one is categorical.  Default: each categorical column's distinct
        values, sorted (at most ``MAX_CATEGORIES``).
    missing : {"refuse", "impute"}, optional
        "impute" lets nulls in the features through (the run fills them); nulls in the id
        column are refused either way.  Default "refuse".

    Returns
    -------
    ViewPlan

    Raises
    ------
    InputValidationError
        An unknown column (the available ones listed), a pattern matching nothing, the id
        column in a view, a declared column that is not a number, a feature with nulls, an id
        column with nulls, an undeclared integer column that looks like a row id, a table
        with no numeric column.
    """
    columns = table.columns
    available = ", ".join(f"{c.name} ({_describe(c.kind, c.arrow_type)})" for c in columns.values())
    for what, name in (("id_column", id_column), ("label column", label_column)):
        if name is not None and name not in columns:
            raise InputValidationError(f"{what} {name!r} is not a column of {table.source}; its columns are: "
                                       f"{available}")
    reserved = {c: why for c, why in ((id_column, "id"), (label_column, "labels")) if c is not None}
    declared = _normalise_declaration(views)
    ignored: list[tuple[str, str]] = []
    if declared is None:
        features = []
        for c in columns.values():
            if c.name in reserved:
                ignored.append((c.name, reserved[c.name]))
            elif c.name in table.pandas_index:
                ignored.append((c.name, "pandas index"))
            elif c.is_numeric:
                features.append(c.name)
            else:
                ignored.append((c.name, _describe(c.kind, c.arrow_type)))
        if not features:
            raise InputValidationError(f"{table.source} has no numeric column to cluster; its columns are: {available}")
        plan = ViewPlan({DEFAULT_VIEW: features}, ignored, False, id_column, label_column)
        _refuse_row_id_features(table, features, explicit=set())
    else:
        chosen: dict[str, list[str]] = {}
        explicit: set[str] = set()
        categorical: set[str] = set()
        for declared_name, specs in declared.items():
            view, forced = _split_view_kind(declared_name)
            if view in chosen:
                raise InputValidationError(f"view {view!r} is declared twice")
            # (column, named explicitly?, the pattern that matched it)
            entries: list[tuple[str, bool, str | None]] = []
            for spec in specs:
                if any(ch in spec for ch in _GLOB_CHARS):
                    hits = [c for c in columns if fnmatch.fnmatchcase(c, spec) and c not in reserved
                            and c not in table.pandas_index]
                    if not hits:
                        raise InputValidationError(f"view {view!r}: pattern {spec!r} matches no column of "
                                                   f"{table.source}; its columns are: {available}")
                    entries += [(c, False, spec) for c in hits]
                else:
                    if spec not in columns:
                        raise InputValidationError(f"view {view!r}: column {spec!r} is not in {table.source}; its "
                                                   f"columns are: {available}")
                    if spec in reserved:
                        raise InputValidationError(f"view {view!r}: column {spec!r} is the {reserved[spec]} column, "
                                                   "which is never a feature")
                    entries.append((spec, True, None))
            if forced is None and categories and entries and all(c in categories for c, _, _ in entries):
                forced = "categorical"  # a model's categorical view, read again for a new batch
            kind = forced or _infer_view_kind(view, entries, columns)
            cols = []
            for c, named, _ in entries:
                if _fits_view(kind, columns[c]):
                    cols.append(c)
                    if named:
                        explicit.add(c)
                elif named:
                    _refuse_declared(view, columns[c], kind, forced is not None)
                elif (c, _describe(columns[c].kind, columns[c].arrow_type)) not in ignored:
                    # A pattern takes the columns of the view's kind; what else it matches is named as ignored.
                    ignored.append((c, _describe(columns[c].kind, columns[c].arrow_type)))
            for spec in dict.fromkeys(spec for _, named, spec in entries if not named):
                hits = [c for c, named, s in entries if s == spec]
                if not any(_fits_view(kind, columns[c]) for c in hits):
                    word = "numeric" if kind == "numeric" else "category"
                    raise InputValidationError(f"view {view!r}: pattern {spec!r} matches no {word} column "
                                               f"(only {', '.join(hits)})")
            if kind == "categorical":
                categorical.add(view)
            duplicates = sorted({c for c in cols if cols.count(c) > 1})
            if duplicates:
                raise InputValidationError(f"view {view!r} names {duplicates} more than once")
            chosen[view] = cols
        used = {c for cols in chosen.values() for c in cols}
        ignored[:0] = [(c, why) for c, why in reserved.items()]
        for c in columns.values():
            if c.name in reserved:
                continue
            elif c.name not in used and all(c.name != i[0] for i in ignored):
                ignored.append((c.name, "not in a view" if c.is_numeric or c.kind == "boolean"
                                else _describe(c.kind, c.arrow_type)))
        both = sorted({c for v in categorical for c in chosen[v]} & {c for v in chosen if v not in categorical
                                                                       for c in chosen[v]})
        if both:
            raise InputValidationError(f"column {both[0]!r} is in a numeric and a categorical view: a column is read "
                                       "one way; keep it in one of them")
        vocabularies = {c: _vocabulary(table, c, (categories or {}).get(c)) for v in chosen if v in categorical
                        for c in chosen[v]}
        plan = ViewPlan(chosen, ignored, True, id_column, label_column, vocabularies)
        _refuse_row_id_features(table, [c for v, cols in chosen.items() if v not in categorical for c in cols],
                                explicit)
    features = [c for cols in plan.views.values() for c in cols] if missing != "impute" else []
    _refuse_nulls(table, features, id_column)
    return plan


#: Most categories a categorical column may have: each becomes a feature (an indicator) of its
#: view, and a column with more distinct values is an identifier or free text, not a category.
MAX_CATEGORIES = 1000
#: The kinds a view can be declared with, as a suffix of its name (``"profile:categorical"``).
VIEW_KINDS = ("numeric", "categorical")


def _split_view_kind(name: str) -> tuple[str, str | None]:
    """``"profile:categorical"`` -> ``("profile", "categorical")``; ``"a"`` -> ``("a", None)``."""
    view, sep, kind = name.rpartition(":")
    if not sep:
        return name, None
    kind = kind.strip().lower()
    if kind not in VIEW_KINDS:
        raise InputValidationError(f"view {name!r}: the kind after ':' must be one of {', '.join(VIEW_KINDS)} "
                                   f"(e.g. {view.strip()}:categorical=store,zip to read integer codes as categories)")
    return view.strip(), kind


def _is_category(column: Column) -> bool:
    return column.kind in ("string", "categorical")


def _fits_view(kind: str, column: Column) -> bool:
    """Whether a column can be a feature of a view of that kind: numbers and booleans in a
    numeric view; strings, categoricals, booleans and integers (codes) in a categorical one."""
    if kind == "numeric":
        return column.is_numeric or column.kind == "boolean"
    return _is_category(column) or column.kind in ("boolean", "integer")


def _infer_view_kind(view: str, entries: Sequence[tuple[str, bool, str | None]], columns) -> str:
    """A view's kind from its columns' types: categorical when it names strings or categoricals
    (or its patterns match only those), numeric otherwise; naming both is refused."""
    named = [columns[c] for c, is_named, _ in entries if is_named]
    numbers = [c.name for c in named if c.is_numeric]
    cats = [c.name for c in named if _is_category(c)]
    if numbers and cats:
        raise InputValidationError(
            f"view {view!r} mixes numbers ({', '.join(numbers)}) and categories ({', '.join(cats)}): a view is one "
            f"kind, each with its own kernel; declare two views, e.g. --view {view}={','.join(numbers)} --view "
            f"{view}_cat={','.join(cats)} (views={{{view!r}: {numbers}, '{view}_cat': {cats}}}); to read integer "
            f"codes as categories, declare the view as {view}:categorical")
    if cats:
        return "categorical"
    if numbers:
        return "numeric"
    matched = [columns[c] for c, is_named, _ in entries if not is_named]
    if not any(c.is_numeric for c in matched) and any(_is_category(c) for c in matched):
        return "categorical"
    return "numeric"


def _refuse_declared(view: str, column: Column, kind: str, forced: bool) -> None:
    what = _describe(column.kind, column.arrow_type)
    if kind == "categorical":
        raise InputValidationError(
            f"view {view!r}: column {column.name!r} is {what}, not a category (categories are strings, "
            "categoricals, booleans or integer codes); put it in a numeric view, or bin it into categories first")
    fix = {"temporal": "turn it into a number first (e.g. days since a date), or leave it out of the view"}
    if _is_category(column) and forced:
        fix[column.kind] = (f"a view declared numeric takes numbers only; put it in a view of categories "
                            f"(--view {view}_cat={column.name})")
    raise InputValidationError(f"view {view!r}: column {column.name!r} is {what}, not a number; "
                               f"{fix.get(column.kind, 'leave it out of the view')}")


def _vocabulary(table: Table, column: str, given: Sequence | None) -> list:
    """The categories of a column, sorted: ``given`` (a model's, for a new batch) after checking
    that the column's type can hold them, else its distinct non-null values (one column read)."""
    col = table.columns[column]
    if given is not None:
        if col.kind == "boolean" and not all(isinstance(v, bool) for v in given) or \
                col.kind == "integer" and not all(isinstance(v, int) and not isinstance(v, bool) for v in given) or \
                _is_category(col) and not all(isinstance(v, str) for v in given):
            raise InputValidationError(
                f"column {column!r} is {_describe(col.kind, col.arrow_type)} here, but the model's categories of "
                f"{column!r} are {type(given[0]).__name__} values ({', '.join(map(repr, given[:3]))}, ...): "
                "the batch must have the column types of the data the model was fitted on")
        return list(given)
    values = table.distinct_values(column, MAX_CATEGORIES)
    if values is None:
        raise InputValidationError(
            f"column {column!r} has more than {MAX_CATEGORIES:,} distinct values: as categories each would be a "
            "feature of its own; leave it out of the view (an id or free text is no category), or group its rare "
            "values into one (e.g. 'other') first")
    return values


def encode_categories(values, vocabulary: Sequence, dtype=np.float32) -> np.ndarray:
    """One column of categories as indicators: one feature per category of the vocabulary.

    Why indicators: the squared distance between two rows' indicators is twice the number of
    columns on which they differ, so a distance kernel on them (``rbf``) is the overlap kernel
    exp(-mismatches / sigma^2), with its bandwidths learned like any view's; on a sparse
    encoding (many categories) the ``"auto"`` kernels pick the cosine kernel, which is the
    share of matching columns.

    Parameters
    ----------
    values : pyarrow.Array or ChunkedArray of shape (n,)
        Strings, a dictionary column, booleans or integers.
    vocabulary : sequence of length c
        The categories, as fixed when the model was fitted.

    Returns
    -------
    ndarray of shape (n, c)
        1 at the row's category, 0 elsewhere; all 0 for a category not in the vocabulary (one
        unseen at fit time matches none: its row is as far from every category as it can be);
        all NaN for a missing value (refused, or imputed, by the run's ``missing`` option).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    value_set = pa.array(list(vocabulary))
    if not values.type.equals(value_set.type):
        try:
            values = values.cast(value_set.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # e.g. an int column against a model's string categories: nothing matches.
            value_set = pa.array([str(v) for v in vocabulary])
            values = values.cast(pa.string())
    codes = pc.index_in(values, value_set=value_set).fill_null(-1).to_numpy(zero_copy_only=False)
    out = np.zeros((len(codes), len(value_set)), dtype=dtype)
    hit = np.nonzero(codes >= 0)[0]
    out[hit, codes[hit]] = 1
    missing = values.is_null().to_numpy(zero_copy_only=False)
    if missing.any():
        out[missing] = np.nan
    return out


def _looks_like_id_name(name: str) -> bool:
    lower = name.lower()
    return lower in _ID_LIKE_NAMES or lower.endswith(("_id", "_key", "_no", "_number")) or lower.endswith("id")


def _refuse_row_id_features(table: Table, features: Sequence[str], explicit: set[str]) -> None:
    """An integer feature nobody named explicitly that is unique and monotone (or unique with
    an id-like name) is a row id: clustered, it splits the rows into id ranges."""
    if table.n_rows < 3:
        return
    for name in features:
        if name in explicit or table.columns[name].kind != "integer":
            continue
        monotone, first, last = table.monotone_unique(name)
        if monotone or (_looks_like_id_name(name) and table.unique(name)):
            shape = f"unique, monotone integers {first} .. {last}" if monotone else "unique integers"
            raise InputValidationError(
                f"column {name!r} looks like a row id ({shape}): clustered as a feature it splits the rows into "
                f"id ranges; pass --id-column {name} (id_column={name!r}), or name it in a view to cluster it anyway")


def _refuse_nulls(table: Table, features: Sequence[str], id_column: str | None) -> None:
    """Nulls known from the statistics, in the features or the ids: refused before any work."""
    with_nulls = [c for c in dict.fromkeys(list(features) + ([id_column] if id_column else []))
                  if table.columns[c].nulls]
    if not with_nulls:
        return
    name = with_nulls[0]
    n = table.columns[name].nulls
    row = table.first_null(name)
    where = f"first at row {row}" + _id_suffix(table, id_column, row, name)
    if name == id_column:
        raise InputValidationError(f"id column {name!r} has {n} null{'s' * (n > 1)} ({where}): a row without an id "
                                   "cannot be joined back; fill them or drop those rows")
    others = f" (also: {', '.join(f'{c} {table.columns[c].nulls}' for c in with_nulls[1:])})" if with_nulls[1:] else ""
    raise InputValidationError(f"column {name!r} has {n} missing value{'s' * (n > 1)} ({where}){others}: fill or "
                               f"drop them, leave the column out of the views, or {MISSING_HINT}")


def _id_suffix(table: Table, id_column: str | None, row: int | None, column: str) -> str:
    if row is None or id_column is None or id_column == column:
        return ""
    try:
        value = table.read_rows([row], id_column)[0]
    except Exception:  # noqa: BLE001 - the id only decorates the message
        return ""
    return f", {id_column} {value!r}"


def describe_row(table: Table, id_column: str | None):
    """A function row -> 'row 17, customer_id 'C17'' for messages about single rows."""
    def describe(row: int) -> str:
        return f"row {row}" + _id_suffix(table, id_column, row, "")

    return describe


# ----------------------------------------------------------------------------- encoding
def _view_dtype(table: Table, columns: Sequence[str]) -> np.dtype:
    """float32, the row engine's working precision, whatever the columns' Arrow types.

    A float64 column is rounded to 7 significant digits: kernel values move by about 1e-7
    relative, far below what changes a clustering, and the row tasks run 2.5x faster
    (embed of 200k rows x 2 views: 2.7 s float32 vs 6.7 s float64, measured).  A value beyond
    float32's range (3.4e38) becomes infinity, which the input scan refuses naming the column.
    """
    return np.dtype(np.float32)


def _column_values(column, dtype) -> np.ndarray:
    """One Arrow column as floats; nulls become NaN, which the input scan names."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_decimal(column.type) or pa.types.is_boolean(column.type) or column.null_count:
        column = pc.cast(column, pa.float64())
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def view_layout(table: Table, plan: ViewPlan) -> tuple:
    """Per view: (name, columns, dtype, vocabularies or None) -- what a read task encodes."""
    return tuple((v, tuple(cols), _view_dtype(table, cols).str,
                  tuple(tuple(plan.categories[c]) for c in cols) if plan.kind(v) == "categorical" else None)
                 for v, cols in plan.views.items())


def encode_views(data, layout: tuple) -> dict[str, np.ndarray]:
    """The views of an Arrow table's rows as arrays (see :func:`view_layout`): numeric columns
    as floats (nulls as NaN), categorical columns as indicators (:func:`encode_categories`)."""
    out = {}
    for view, cols, dtype, vocabularies in layout:
        if vocabularies is not None:
            out[view] = np.concatenate([encode_categories(data.column(c), vocab, dtype)
                                        for c, vocab in zip(cols, vocabularies)], axis=1)
            continue
        block = np.empty((data.num_rows, len(cols)), dtype=dtype)
        for j, c in enumerate(cols):
            block[:, j] = _column_values(data.column(c), dtype)
        out[view] = block
    return out


# ----------------------------------------------------------------------------- DataFrames
def has_frames(X: Any) -> bool:
    """Whether ``X`` is a DataFrame, or a list/tuple/dict holding one (one per view)."""
    if is_frame(X):
        return True
    values = X.values() if isinstance(X, Mapping) else X if isinstance(X, (list, tuple)) else ()
    return any(is_frame(v) for v in values)


def _frame_table(frame: Any) -> Table:
    if type(frame).__module__.split(".")[0] != "pandas":
        raise InputValidationError("a dask DataFrame is read through its partitions: pass it to mkdist.cluster or "
                                   "mkdist.load_views (lazily), or call .compute() for an in-memory fit")
    return ArrowTable(frame_to_arrow(frame))


def frame_views(X: Any, categories: Mapping[str, Sequence] | None = None) -> tuple[dict[str, Any], dict[str, list]]:
    """DataFrames as views, through the same column rules and encoding as a Parquet table.

    Parameters
    ----------
    X : pandas.DataFrame, or list/tuple/dict of DataFrames (and arrays)
        One DataFrame: one view (``"features"``) of its numeric columns, strings and the like
        ignored, as for an undeclared table.  A list or dict: one view per DataFrame, its kind
        from its columns (numbers, or categories: strings, categoricals); arrays pass through.
    categories : mapping of str to list, optional
        The vocabularies a fit learned (``categories_``): a categorical view is encoded with
        them, so predicting encodes new rows as the fit did.

    Returns
    -------
    views : dict of str to ndarray of shape (N, d_v)
        float32; a categorical view has one column per category of each of its columns.
    categories : dict of str to list
        The vocabulary of every categorical column (empty without one).
    """
    if is_frame(X):
        table = _frame_table(X)
        plan = plan_views(table, categories=categories)
        return encode_views(table.read((0, table.n_rows), _plan_columns(plan)), view_layout(table, plan)), \
            dict(plan.categories)
    items = list(X.items()) if isinstance(X, Mapping) else [(f"view{i}", v) for i, v in enumerate(X)]
    views: dict[str, Any] = {}
    learned: dict[str, list] = {}
    for name, value in items:
        if not is_frame(value):
            views[str(name)] = value
            continue
        table = _frame_table(value)
        known = {c: v for c, v in (categories or {}).items() if c in table.columns}
        plan = plan_views(table, {str(name): [str(c) for c in table.columns if c not in table.pandas_index]},
                          categories=known or None)
        views.update(encode_views(table.read((0, table.n_rows), _plan_columns(plan)), view_layout(table, plan)))
        learned.update(plan.categories)
    return views, learned


def _plan_columns(plan: ViewPlan) -> list[str]:
    return list(dict.fromkeys(c for cols in plan.views.values() for c in cols))
