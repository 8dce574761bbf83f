"""The input scan: one pass over the rows before anything is stored that refuses what no
method can cluster (NaN/inf unless imputed, overflow, constant views) and takes the per-feature
statistics; as a whole pass (:func:`scan_views`) or as partials another pass carries
(:class:`InputScan`).  Also the ``missing`` option it applies (:func:`check_missing`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._core._blocks import RowBlocks
from .._core._cluster import compute
from .._core._columns import MISSING_HINT
from .._core._missing import all_missing_rows
from ..errors import InputValidationError

#: What a run does with missing cells (nulls, NaN): refuse the input (the default), or
#: cluster every row with its missing cells imputed (:mod:`mkdist._core._missing`).
MISSING_OPTIONS = ("refuse", "impute")


def check_missing(value: Any, default: str = "refuse") -> str:
    """The ``missing`` option checked: "refuse" or "impute" (None: ``default``).

    Raises
    ------
    InputValidationError
        Any other value, naming the two.
    """
    if value is None:
        return default
    if value not in MISSING_OPTIONS:
        raise InputValidationError(
            f"missing={value!r}: choose 'refuse' (a missing cell stops the run, naming it; the default) or 'impute' "
            "(every row is clustered, its missing cells filled from the rows most like it)")
    return str(value)


#: Rows of one step of the scan's sums: (rows, d) float64 temporaries stay in the L2 cache.
_MOMENT_ROWS = 2048


def _moments(blocks: list, shifts: list) -> np.ndarray:
    """Per view and column: sum of (x - s), of (x - s)^2 and of |x - s| over the finite values,
    the count of NaN and of +-inf values; then the rows whose every cell is NaN.  Shape
    (5 sum(d) + 1,).

    The sums run over cache-sized row steps, and the NaN/inf masks are only built for a view
    whose sums come out non-finite: a NaN or an inf in a column makes its sum NaN or inf, so
    finite sums prove there is none.  It is the embed task's scan, 1.15 us a W1 row as
    whole-chunk passes with five masks and float64 copies of the chunk (4x less this way).
    """
    parts = []
    clean = False  # a view without NaN: then no row is missing everywhere
    for X, s in zip(blocks, shifts):
        sums = _finite_moments(X, s)
        if sums is None:
            Z = np.asarray(X, dtype=np.float64) - s
            nan, inf = np.isnan(Z), np.isinf(Z)
            Z = np.where(nan | inf, 0.0, Z)
            with np.errstate(over="ignore", invalid="ignore"):
                sums = [Z.sum(axis=0), (Z * Z).sum(axis=0), np.abs(Z).sum(axis=0), nan.sum(axis=0), inf.sum(axis=0)]
        else:
            clean = True
        parts += sums
    parts.append([0.0 if clean else float(all_missing_rows(blocks).sum())])
    return np.concatenate(parts)


def _finite_moments(X, s) -> list | None:
    """The five sums of one view when it holds no NaN or inf (counts 0), else None."""
    n, d = X.shape
    s1, s2, s3 = np.zeros(d), np.zeros(d), np.zeros(d)
    # one buffer for every step: a fresh 0.5 MB temporary per step would be an mmap (and its
    # page faults) wherever a nanny pinned malloc's thresholds
    buffer = np.empty((min(n, _MOMENT_ROWS), d))
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, _MOMENT_ROWS):
            Z = buffer[:min(_MOMENT_ROWS, n - start)]
            np.subtract(X[start:start + _MOMENT_ROWS], s, out=Z)
            s1 += Z.sum(axis=0)
            s2 += np.einsum("ij,ij->j", Z, Z)
            np.abs(Z, out=Z)
            s3 += Z.sum(axis=0)
    if not (np.isfinite(s1).all() and np.isfinite(s2).all()):
        return None
    return [s1, s2, s3, np.zeros(d), np.zeros(d)]


def _bad_rows(blocks: list, where: tuple[int | None, str]) -> np.ndarray:
    """Per row: whether column ``where[0]`` of the (one) view holds NaN or inf (``where[1]``
    "bad") or inf ("inf"); with column None, whether every cell of every view is NaN."""
    column, what = where
    if column is None:
        return all_missing_rows(blocks)
    x = blocks[0][:, column]
    return np.isinf(x) if what == "inf" else ~np.isfinite(x)


def _first_row(rows: RowBlocks, view: str | None, column: int | None, what: str = "bad") -> int:
    """The first row a refusal names: found by a second pass over that column (over every
    view for a row with no value at all), on the error path only."""
    arrays = {view: rows.arrays[rows.names.index(view)]} if view is not None else dict(zip(rows.names, rows.arrays))
    mask = RowBlocks(arrays).map(_bad_rows, (column, what), n_cols=None, dtype=bool, check_finite=False)
    return int(compute(mask.argmax())[0])


def _column_namer(feature_names):
    def column(view: str, j: int) -> str:
        names = (feature_names or {}).get(view)
        return f"column {names[j]!r}" if names else f"view {view!r}, feature {j}"

    return column


def _refuse_non_finite(rows: RowBlocks, counts: dict[str, np.ndarray], feature_names, describe_row, *,
                       what: str = "bad") -> None:
    """The NaN/inf found by the scan, in one message: the first column with its count and first
    row (found by a second pass over that column, on this error path only), then the others.

    ``what``: "bad" (NaN or infinity, ``missing="refuse"``) or "inf" (infinity, which
    ``missing="impute"`` does not fill: it is a value, not a missing one)."""
    bad = [(view, j, int(c)) for view in rows.names for j, c in enumerate(counts[view]) if c > 0]
    if not bad:
        return
    column = _column_namer(feature_names)
    view, j, n = bad[0]
    first = _first_row(rows, view, j, what)
    where = describe_row(first) if describe_row is not None else f"row {first}"
    others = "; also " + ", ".join(f"{column(v, k).removeprefix('column ')} ({c})" for v, k, c in bad[1:4]) \
        + (f" and {len(bad) - 4} more columns" if len(bad) > 4 else "") if len(bad) > 1 else ""
    if what == "inf":
        raise InputValidationError(
            f"{column(view, j)} holds infinity in {n} row{'s' * (n > 1)}, first at {where}{others}: infinity is a "
            "value, not a missing one, so missing='impute' does not fill it; replace it (by a finite value, or by "
            "NaN to have it imputed), drop those rows, or leave the column out of the views")
    raise InputValidationError(
        f"{column(view, j)} holds NaN or infinity in {n} row{'s' * (n > 1)}, first at {where}{others}: fill or "
        f"drop those rows, leave the column out of the views, or {MISSING_HINT}")


def _refuse_empty(rows: RowBlocks, parts: dict, n_empty_rows: int, feature_names, describe_row) -> None:
    """``missing="impute"``: a column with no value at all, or rows with no value at all,
    cannot be filled from what they show: refused, naming them."""
    column = _column_namer(feature_names)
    N = rows.n_samples
    for view in rows.names:
        empty = np.flatnonzero(parts[view][3] + parts[view][4] >= N)
        if empty.size:
            raise InputValidationError(
                f"{column(view, int(empty[0]))} has no value in any of the {N} rows: nothing to impute it from; "
                "leave it out of the views")
    if n_empty_rows:
        first = _first_row(rows, None, None)
        where = describe_row(first) if describe_row is not None else f"row {first}"
        raise InputValidationError(
            f"{n_empty_rows} row{'s have' if n_empty_rows > 1 else ' has'} no value in any view, first at {where}: "
            "there is nothing to cluster such a row on, imputed or not; drop those rows")


def scan_views(views: Mapping[str, Any], gather: np.ndarray | None = None, *,
               feature_names: Mapping[str, Sequence[str]] | None = None, describe_row=None,
               missing: str = "refuse"):
    """One pass over the input before anything is stored: refuse what no method can cluster.

    Raises (``InputValidationError``, naming the view) on NaN/inf (naming the column, the
    number of bad values and the first row), on values whose squared deviations overflow
    float64 (around 1e154 and beyond), on values that differ only at a scale where they
    underflow (around 1e-154), and on constant views (every row the same, which includes
    input of duplicate rows only).  With ``missing="impute"`` NaN cells are counted instead
    (they are filled later, :class:`mkdist._core._missing.Imputer`), and refused are only
    infinity, a column without any value and a row without any value.

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
    gather : ndarray of shape (n,), optional
        Sorted row indices to read in the same pass (e.g. the landmarks): each chunk is read
        once for both.
    feature_names : dict of str to list of str, optional
        The column names of each view, for the messages.
    describe_row : callable, optional
        ``describe_row(row) -> str`` for the messages (e.g. with the row's id).
    missing : {"refuse", "impute"}, default="refuse"

    Returns
    -------
    stats : dict of str to dict
        Per view: ``n_rows``, ``n_features``, per-feature ``mean`` and ``std`` (population,
        over the finite values), the statistics of the data a model was fitted on (kept in
        the run store); with missing cells, ``missing``: the NaN count per feature.
    rows : dict of str to ndarray of shape (n, d_v)
        Only with ``gather``: those rows of every view.
    """
    missing = check_missing(missing)
    scan = InputScan(views, feature_names=feature_names, describe_row=describe_row, missing=missing)
    # NaN/inf are counted in this pass (not raised at the first bad chunk), so the message can
    # say how many rows are bad.
    sums = scan.rows.reduce(_moments, scan.shifts, width=scan.width, name="scan-input", take=gather,
                            check_finite=False)
    if gather is not None:
        sums, picked = sums
        return scan.finish(sums), dict(zip(scan.rows.names, picked))
    return scan.finish(sums)


class InputScan:
    """The input scan as a partial sum per row block, so that another pass can carry it (the
    embedding's: the input read once), and what the scan concludes from the total.

    Parameters
    ----------
    views, feature_names, describe_row, missing
        As :func:`scan_views`.

    Attributes
    ----------
    rows : RowBlocks
    first : list of ndarray of shape (1, d_v)
        The first row of every view, as read.
    shifts : list of ndarray of shape (d_v,)
        The same, float64 and NaN/inf as 0: the moments are of deviations from it.
    width : int
        Length of a partial, ``5 sum(d_v) + 1``.
    """

    def __init__(self, views: Mapping[str, Any], *, feature_names=None, describe_row=None, missing: str = "refuse"):
        self.rows = RowBlocks(views)
        self.missing = check_missing(missing)
        self.feature_names, self.describe_row = feature_names, describe_row
        #: The first row of every view, shape (1, d_v), as read.
        self.first = [np.asarray(compute(a[:1])[0]) for a in self.rows.arrays]
        # Deviations from a reference row keep the moments accurate for data far from 0.
        self.shifts = [np.nan_to_num(np.asarray(r, dtype=np.float64)[0], nan=0.0, posinf=0.0, neginf=0.0)
                       for r in self.first]
        self.widths = [int(a.shape[1]) for a in self.rows.arrays]
        self.width = 5 * sum(self.widths) + 1

    def partial(self, blocks: list) -> np.ndarray:
        """The partial of one row block of every view (in ``rows.names`` order), shape (width,)."""
        return _moments(blocks, self.shifts)

    def finish(self, sums: np.ndarray) -> dict[str, dict]:
        """The per-view statistics of :func:`scan_views` from the summed partials; raises what
        it refuses (a second pass over one column finds the first bad row, on that path only)."""
        rows, feature_names, describe_row = self.rows, self.feature_names, self.describe_row
        views = rows.names
        widths, first = self.widths, self.shifts
        N = rows.n_samples
        parts: dict[str, tuple[np.ndarray, ...]] = {}
        start = 0
        for name, d in zip(rows.names, widths):
            parts[name] = tuple(sums[start + i * d:start + (i + 1) * d] for i in range(5))
            start += 5 * d
        if self.missing == "impute":
            _refuse_non_finite(rows, {name: p[4] for name, p in parts.items()}, feature_names, describe_row,
                               what="inf")
            _refuse_empty(rows, parts, int(round(sums[-1])), feature_names, describe_row)
        else:
            _refuse_non_finite(rows, {name: p[3] + p[4] for name, p in parts.items()}, feature_names, describe_row)
        out: dict[str, dict] = {}
        for (name, (s1, s2, sa, nan, inf)), d, s in zip(parts.items(), widths, first):
            if not np.all(np.isfinite(s2)):
                raise InputValidationError(
                    f"view {name!r} holds values whose squared deviations overflow float64 (magnitudes around "
                    "1e154 or larger): no distance-based kernel can be computed on it; rescale the view (divide "
                    "it by a constant) before clustering.")
            n = N - nan - inf  # the finite values of each column: all N unless missing="impute"
            mean = s + s1 / n
            var = np.maximum(s2 / n - (s1 / n) ** 2, 0.0)
            if np.all(var == 0) and np.any(sa > 0):
                raise InputValidationError(
                    f"view {name!r} varies only at a scale where squared deviations underflow float64 (largest "
                    f"mean absolute deviation {float(np.max(sa / n)):.3g}): rescale the view (multiply it by a "
                    "constant) before clustering.")
            if np.all(sa == 0):
                raise InputValidationError(
                    f"view {name!r} is constant: all {N} rows are the same, so it carries nothing to cluster; "
                    + ("drop it from the input." if len(views) > 1 else "there is nothing to cluster."))
            out[name] = {"n_rows": N, "n_features": d, "mean": mean.tolist(), "std": np.sqrt(var).tolist()}
            if nan.any():
                out[name]["missing"] = [int(c) for c in nan]
        return out
