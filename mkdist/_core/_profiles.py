"""Per-cluster profiles in the input's own columns: partials of one row chunk that add across
chunks and workers, and what is read from their total.

A profile is computed from the rows as the user gave them (the views as read: before any
scaling, encoding into kernels or imputation; a missing cell is counted, never filled).  For
every cluster it holds the rows, and

* per numeric column: the values' count, mean, sum of squared deviations (``m2``), min, max,
  the missing cells and a fixed histogram of the values (:func:`bucket_keys`);
* per categorical column (a table's strings, categoricals or declared integer codes, read
  from their indicators): the count of every category of its vocabulary, of values outside
  it ("unseen") and of missing cells.

A chunk's partial (:func:`profile_partial`) and any number of partials merge
(:meth:`ProfileSums.merge`) exactly: counts and histograms add, means and ``m2`` combine by
Chan's pairwise rule, min and max by min and max.  So the labels pass accumulates them per
chunk and one tree merge gives the profile of every row, whatever the chunking.

The histogram's bins are fixed by the float32 format, not by the data, which is what makes
them add: a value's bin is its sign, exponent and first ``MANTISSA_BITS`` mantissa bits (of the
top 16 bits of its float32), so a bin spans at most ``2**-MANTISSA_BITS`` of its lower edge
and the bin's midpoint is within ``RELATIVE_ERROR`` (1.6%) of any value in it.  A quantile
read from it (:meth:`ProfileSums.quantiles`, pandas' linear interpolation between the two
order statistics around the rank) is within ``RELATIVE_ERROR`` of the exact one, relative
to the larger of those two order statistics' magnitudes.  A chunk counts its values per
(column, cluster, bin) code, so the histograms do not depend on the chunking; compiled (numba)
a chunk's counts are one row-major pass per group of columns into a dense counter, and partials
merge by a linear merge of their sorted codes (NumPy's route: one sort).
Written here because no library keeps such histograms per group in one vectorised pass
(DDSketch's and KLL's Python packages add values one call at a time).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ProfileColumn", "ProfileLayout", "ProfileSums", "profile_partial", "merge_partials", "QUANTILES",
           "RELATIVE_ERROR", "MANTISSA_BITS"]

#: The quantiles every profile reports.
QUANTILES = (0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99)
#: Mantissa bits of a histogram bin (of the float32's 23).  5, not the 7 of the float32's
#: high half: measured on W1 (64 columns, 10 clusters, 1M rows), 7 bits made ~925k bins per
#: 50k-row chunk and their merge alone cost 2.6 s of a 10 s run; 5 bits bound a quantile
#: within 1.6% and keep the partials 3-4x smaller.
MANTISSA_BITS = 5
#: The bin of a value: the top ``16 - _BIN_SHIFT`` bits of its float32's high half.
_BIN_SHIFT = 7 - MANTISSA_BITS
#: Bound on a quantile's relative error (half a bin's relative width).
RELATIVE_ERROR = 2.0 ** -(MANTISSA_BITS + 1)


@dataclasses.dataclass(frozen=True)
class ProfileColumn:
    """One column of a profile: its name, the view and feature(s) it is read from.

    ``kind`` "numeric" (feature ``start`` of ``view``) or "categorical" (features ``start`` ..
    ``start + len(categories)`` of ``view``: one indicator per category).
    """

    name: str
    view: str
    kind: str
    start: int
    categories: tuple = ()


@dataclasses.dataclass(frozen=True)
class ProfileLayout:
    """The columns of a profile and where each is read in the views (in ``views`` order)."""

    views: tuple[str, ...]
    columns: tuple[ProfileColumn, ...]

    @property
    def numeric(self) -> list[ProfileColumn]:
        return [c for c in self.columns if c.kind == "numeric"]

    @property
    def categorical(self) -> list[ProfileColumn]:
        return [c for c in self.columns if c.kind == "categorical"]

    def to_json(self) -> dict[str, Any]:
        return {"views": list(self.views), "columns": [
            {"name": c.name, "view": c.view, "kind": c.kind, "start": c.start, "categories": list(c.categories)}
            for c in self.columns]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProfileLayout:
        return cls(tuple(data["views"]), tuple(ProfileColumn(c["name"], c["view"], c["kind"], int(c["start"]),
                                                             tuple(c["categories"])) for c in data["columns"]))

    @classmethod
    def of_views(cls, widths: dict[str, int], columns: dict[str, Sequence[str]] | None = None,
                 categories: dict[str, Sequence] | None = None) -> ProfileLayout:
        """The layout of views ``{name: width}``: a table's columns per view (``columns``) with
        their vocabularies (``categories``: a view whose columns all have one is categorical),
        else one numeric column per feature, named ``view:index``."""
        out = []
        for view, width in widths.items():
            names = list((columns or {}).get(view) or [])
            vocab = categories or {}
            if names and all(n in vocab for n in names):
                start = 0
                for n in names:
                    out.append(ProfileColumn(str(n), view, "categorical", start, tuple(vocab[n])))
                    start += len(vocab[n])
            elif names and len(names) == width:
                out += [ProfileColumn(str(n), view, "numeric", j) for j, n in enumerate(names)]
            else:
                out += [ProfileColumn(f"{view}:{j}", view, "numeric", j) for j in range(width)]
        return cls(tuple(widths), tuple(out))


@dataclasses.dataclass
class ProfileSums:
    """The mergeable profile of some rows (one chunk, or all of them after merging).

    Attributes (k clusters, m numeric and q categorical columns, c categories in all)
    ----------
    rows : ndarray of shape (k,), int64
    count, missing : ndarray of shape (k, m), int64
        Values present / missing per cluster and numeric column.
    mean, m2, vmin, vmax : ndarray of shape (k, m), float64
        Over the values present (NaN where a cluster has none).
    codes, counts : ndarray of shape (h,), int64
        The histograms, sparse and sorted: ``codes = (column * k + cluster) << 16 | bin``
        (a bin: the top 16 bits of the value's float32), ``counts`` the values in that bin.
    categories : ndarray of shape (k, c + q), int64
        Per categorical column in layout order: its vocabulary's counts, then the unseen ones.
    cat_missing : ndarray of shape (k, q), int64
    mantissa_bits : int
        Of the histograms' bins (a store written before 0.2 holds 7).
    """

    rows: np.ndarray
    count: np.ndarray
    missing: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    codes: np.ndarray
    counts: np.ndarray
    categories: np.ndarray
    cat_missing: np.ndarray
    mantissa_bits: int = MANTISSA_BITS

    @property
    def n_clusters(self) -> int:
        return int(self.rows.shape[0])

    @property
    def relative_error(self) -> float:
        """Bound on a quantile's relative error with these bins (``RELATIVE_ERROR`` for today's)."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @classmethod
    def merge(cls, parts: Sequence[ProfileSums]) -> ProfileSums:
        """The profile of the rows of all ``parts`` (exact: see the module docstring)."""
        parts = [p for p in parts if p is not None]
        if len(parts) == 1:
            return parts[0]
        bits = {p.mantissa_bits for p in parts}
        if len(bits) > 1:
            raise ValueError(f"profiles with histograms of {sorted(bits)} mantissa bits do not merge")
        count = np.sum([p.count for p in parts], axis=0)
        safe = np.maximum(count, 1)
        mean = np.sum([p.count * np.nan_to_num(p.mean) for p in parts], axis=0) / safe
        m2 = np.sum([np.nan_to_num(p.m2) + p.count * (np.nan_to_num(p.mean) - mean) ** 2 for p in parts], axis=0)
        empty = count == 0
        mean[empty], m2[empty] = np.nan, np.nan
        with np.errstate(invalid="ignore"):
            vmin = np.fmin.reduce([p.vmin for p in parts])
            vmax = np.fmax.reduce([p.vmax for p in parts])
        codes, counts = _add_sparse([p.codes for p in parts], [p.counts for p in parts])
        return cls(np.sum([p.rows for p in parts], axis=0), count, np.sum([p.missing for p in parts], axis=0),
                   mean, m2, vmin, vmax, codes, counts, np.sum([p.categories for p in parts], axis=0),
                   np.sum([p.cat_missing for p in parts], axis=0), bits.pop())

    def overall(self) -> ProfileSums:
        """The profile of every row as one cluster."""
        count = self.count.sum(axis=0)
        safe = np.maximum(count, 1)
        mean = (self.count * np.nan_to_num(self.mean)).sum(axis=0) / safe
        m2 = (np.nan_to_num(self.m2) + self.count * (np.nan_to_num(self.mean) - mean) ** 2).sum(axis=0)
        k = self.n_clusters
        column = (self.codes >> 16) // k
        codes, counts = _add_sparse([(column << 16) | (self.codes & 0xFFFF)], [self.counts])
        with np.errstate(invalid="ignore"):
            vmin, vmax = np.fmin.reduce(self.vmin, axis=0), np.fmax.reduce(self.vmax, axis=0)
        empty = count == 0
        mean[empty], m2[empty] = np.nan, np.nan
        return ProfileSums(self.rows.sum(keepdims=True), count[None], self.missing.sum(axis=0)[None], mean[None],
                           m2[None], vmin[None], vmax[None], codes, counts, self.categories.sum(axis=0)[None],
                           self.cat_missing.sum(axis=0)[None], self.mantissa_bits)

    def std(self) -> np.ndarray:
        """Standard deviation per cluster and numeric column, shape (k, m): the sample's (n - 1
        degrees of freedom, as pandas' ``std``); NaN below two values."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 1, np.sqrt(self.m2 / np.maximum(self.count - 1, 1)), np.nan)

    def quantiles(self, qs: Sequence[float] = QUANTILES) -> np.ndarray:
        """Quantiles per cluster and numeric column from the histograms, shape (k, m, len(qs));
        NaN where a cluster has no value (error: see the module docstring)."""
        k, m = self.count.shape
        out = np.full((k, m, len(qs)), np.nan)
        if self.codes.size == 0:
            return out
        group = self.codes >> 16
        bounds = np.flatnonzero(np.diff(group)) + 1
        starts, stops = np.r_[0, bounds], np.r_[bounds, group.size]
        mid = _bin_midpoints(self.codes & 0xFFFF, self.mantissa_bits)
        q = np.asarray(qs, dtype=np.float64)
        for a, b in zip(starts, stops):
            g = int(group[a])
            j, c = divmod(g, k)
            order = np.argsort(mid[a:b], kind="stable")  # bins by value (negative ones run backwards)
            values, cum = mid[a:b][order], np.cumsum(self.counts[a:b][order])
            rank = q * (cum[-1] - 1)
            lo, hi = np.floor(rank), np.ceil(rank)
            v_lo = values[np.searchsorted(cum, lo, side="right")]
            v_hi = values[np.searchsorted(cum, hi, side="right")]
            est = v_lo + (rank - lo) * (v_hi - v_lo)
            out[c, j] = np.clip(est, self.vmin[c, j], self.vmax[c, j])  # the exact extremes bound it
        return out


def _add_sparse(codes: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sparse histograms added: sorted unique codes and their summed counts."""
    merge_two = _compiled("merge")
    if merge_two is not None and len(codes) > 1 and all(_is_sorted_unique(c) for c in codes):
        # Sorted inputs (every partial's are): pairwise linear merges, no sort and no packing.
        level = [(np.asarray(c, np.int64), np.asarray(n, np.int64)) for c, n in zip(codes, counts)]
        while len(level) > 1:
            level = [merge_two(*level[i], *level[i + 1]) if i + 1 < len(level) else level[i]
                     for i in range(0, len(level), 2)]
        return level[0]
    code = np.concatenate(codes) if len(codes) > 1 else np.asarray(codes[0])
    count = np.concatenate(counts) if len(counts) > 1 else np.asarray(counts[0])
    if code.size == 0:
        return code.astype(np.int64), count.astype(np.int64)
    if code.max() < 2**32 and count.max() < 2**32:
        # Code and count packed in one uint64: one plain sort (NumPy's vectorised one), no
        # argsort and gathers; 5-10x faster on the tree merge of W1's partials.
        packed = (code.astype(np.uint64) << np.uint64(32)) | count.astype(np.uint64)
        packed.sort()
        code = (packed >> np.uint64(32)).astype(np.int64)
        count = (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)
    else:
        order = np.argsort(code, kind="stable")
        code, count = code[order], count[order]
    first = np.r_[0, np.flatnonzero(np.diff(code)) + 1]
    return code[first], np.add.reduceat(count, first)


def _is_sorted_unique(codes: np.ndarray) -> bool:
    return codes.size < 2 or bool(np.all(codes[1:] > codes[:-1]))


def _bin_midpoints(bins: np.ndarray, mantissa_bits: int = MANTISSA_BITS) -> np.ndarray:
    """The midpoint of each bin (float64), from its 16 bits (a float32's high half, the
    mantissa's bits after the first ``mantissa_bits`` zero)."""
    bins = np.asarray(bins, dtype=np.int64)
    magnitude = bins & 0x7FFF
    low = (magnitude << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    high = ((magnitude + (1 << (7 - mantissa_bits))) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    mid = np.where(np.isfinite(high), (low + high) / 2, low)
    return np.where(bins >> 15 == 1, -mid, mid)


def _histograms(Xs: np.ndarray, cluster: np.ndarray, k: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The sparse histograms of a block (rows of ``Xs`` in clusters ``cluster``; its columns
    numeric columns ``first``, ``first + 1``, ...), NaN left out: one sort of the (column,
    cluster, bin) codes of every value, then run lengths."""
    n, m = Xs.shape
    if n == 0 or m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    X32 = np.ascontiguousarray(Xs, dtype=np.float32)
    loops = _compiled("histogram")
    if loops is not None:
        dense, group = _counter(int(k))
        return loops(X32.view(np.uint32), np.asarray(cluster, np.int64), int(k), int(first), _BIN_SHIFT, group, dense)
    high = X32.view(np.uint16)[:, 1::2] if np.little_endian else X32.view(np.uint16)[:, 0::2]
    high = high & np.uint16(0xFFFF & ~((1 << _BIN_SHIFT) - 1))
    # uint32 codes while they fit (a 32-bit sort is the fastest NumPy has), else 64-bit.
    dtype = np.uint32 if (first + m) * k < 2**16 else np.uint64
    group = np.arange(first, first + m, dtype=dtype)[None, :] * dtype(k) + cluster[:, None].astype(dtype)
    codes = ((group << dtype(16)) | high).ravel()
    codes.sort()
    starts = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]
    counts = np.diff(np.r_[starts, codes.size]).astype(np.int64)
    codes = codes[starts].astype(np.int64)
    keep = (codes & 0x7F80) != 0x7F80  # exponent all ones: NaN (infinity is refused by the scan)
    return codes[keep], counts[keep]


def profile_partial(labels: np.ndarray, blocks: Sequence[np.ndarray], layout: ProfileLayout,
                    n_clusters: int) -> ProfileSums:
    """The profile of one row chunk.

    Parameters
    ----------
    labels : ndarray of shape (n,)
        The chunk's clusters.
    blocks : list of ndarray of shape (n, d_v)
        The chunk of every view of ``layout.views``, as read (NaN: a missing cell).
    layout : ProfileLayout
    n_clusters : int

    Returns
    -------
    ProfileSums
    """
    k = int(n_clusters)
    lab = np.asarray(labels).astype(np.int64, copy=False)
    n = lab.size
    rows = np.bincount(lab, minlength=k).astype(np.int64)
    present = np.flatnonzero(rows)
    starts = (np.cumsum(rows) - rows)[present]
    by_view = dict(zip(layout.views, blocks))
    numeric = layout.numeric
    m = len(numeric)
    count = np.zeros((k, m), np.int64)
    missing = np.zeros((k, m), np.int64)
    mean = np.full((k, m), np.nan)
    m2 = np.full((k, m), np.nan)
    vmin = np.full((k, m), np.nan)
    vmax = np.full((k, m), np.nan)
    codes = np.zeros(0, np.int64)
    counts = np.zeros(0, np.int64)
    if m and n:
        pieces = _numeric_pieces(by_view, layout)
        loops = _compiled("moments")
        if loops is not None:
            # One pass per view in compiled code (numba, when installed), no copy of the rows.
            # Deviations from each cluster's first value in the column keep the sums accurate.
            shift, s1, s2 = np.zeros((k, m)), np.zeros((k, m)), np.zeros((k, m))
            vmin[:], vmax[:] = np.inf, -np.inf
            for X, first in pieces:
                loops(X, lab, first, shift, count, missing, s1, s2, vmin, vmax)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean[:] = np.where(count > 0, shift + s1 / count, np.nan)
                m2[:] = np.where(count > 0, np.maximum(s2 - s1 * s1 / count, 0.0), np.nan)
            vmin[count == 0], vmax[count == 0] = np.nan, np.nan
        else:
            order = np.argsort(lab.astype(np.int16) if k < 2**15 else lab, kind="stable")
            X = pieces[0][0] if len(pieces) == 1 else np.concatenate([p for p, _ in pieces], axis=1)
            _sorted_moments(X[order], rows, present, starts, count, missing, mean, m2, vmin, vmax)
        hists = [_histograms(X, lab, k, first) for X, first in pieces]
        codes = np.concatenate([h[0] for h in hists])
        counts = np.concatenate([h[1] for h in hists])
    categorical = layout.categorical
    width = sum(len(c.categories) + 1 for c in categorical)
    cats = np.zeros((k, width), np.int64)
    cat_missing = np.zeros((k, len(categorical)), np.int64)
    at = 0
    if categorical and n:
        # The rows sorted by cluster (a radix sort on 16-bit labels): counts over row ranges.
        order = np.argsort(lab.astype(np.int16) if k < 2**15 else lab, kind="stable")
    for i, col in enumerate(categorical):
        c = len(col.categories)
        if n:
            ind = by_view[col.view][order, col.start:col.start + c]
            absent = np.isnan(ind[:, 0]) if c else np.zeros(n, bool)
            hits = np.nan_to_num(ind).astype(np.int64)
            cats[present, at:at + c] = np.add.reduceat(hits, starts, axis=0)
            cat_missing[present, i] = np.add.reduceat(absent.astype(np.int64), starts)
            cats[:, at + c] = rows - cats[:, at:at + c].sum(axis=1) - cat_missing[:, i]
        at += c + 1
    return ProfileSums(rows, count, missing, mean, m2, vmin, vmax, codes, counts, cats, cat_missing)


def _numeric_pieces(by_view: dict, layout: ProfileLayout) -> list[tuple[np.ndarray, int]]:
    """The numeric columns of a chunk, per view: (block (n, d), index of its first column
    among the numeric columns); a view whose features are all numeric columns as it is."""
    out, first = [], 0
    for view in layout.views:
        idx = [c.start for c in layout.numeric if c.view == view]
        if idx:
            block = by_view[view]
            out.append((block if idx == list(range(block.shape[1])) else np.asarray(block)[:, idx], first))
            first += len(idx)
    return out


def _sorted_moments(Xs, rows, present, starts, count, missing, mean, m2, vmin, vmax) -> None:
    """The moments, min and max of rows sorted by cluster, NumPy reductions over their ranges
    (the route without numba; written into the (k, m) arrays given)."""
    nan = np.isnan(Xs)
    has_nan = bool(nan.any())
    X64 = Xs.astype(np.float64)
    if has_nan:
        X64[nan] = 0.0
        missing[present] = np.add.reduceat(nan, starts, axis=0, dtype=np.int64)
    cnt = rows[present][:, None] - missing[present]
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.add.reduceat(X64, starts, axis=0) / cnt
    dev = X64 - np.repeat(np.nan_to_num(mu), rows[present], axis=0)
    if has_nan:
        dev[nan] = 0.0
    np.multiply(dev, dev, out=dev)
    count[present] = cnt
    mean[present] = np.where(cnt > 0, mu, np.nan)
    m2[present] = np.where(cnt > 0, np.add.reduceat(dev, starts, axis=0), np.nan)
    with np.errstate(invalid="ignore"):
        vmin[present] = np.fmin.reduceat(Xs, starts, axis=0)
        vmax[present] = np.fmax.reduceat(Xs, starts, axis=0)


def _moment_loops(X, labels, first, shift, count, missing, s1, s2, vmin, vmax):  # pragma: no cover - compiled
    n, width = X.shape
    for i in range(n):
        c = labels[i]
        for jj in range(width):
            j = first + jj
            x = X[i, jj]
            if x != x:
                missing[c, j] += 1
            else:
                if count[c, j] == 0:
                    shift[c, j] = x
                d = x - shift[c, j]
                count[c, j] += 1
                s1[c, j] += d
                s2[c, j] += d * d
                if x < vmin[c, j]:
                    vmin[c, j] = x
                if x > vmax[c, j]:
                    vmax[c, j] = x


def _histogram_loops(bits, labels, k, first, shift, group, dense):  # pragma: no cover - compiled
    """The sparse histograms of a block (``bits``: its float32 values as uint32), in the
    codes of :func:`_histograms`.  Row by row over ``group`` columns at a time (a row's values
    of the group share a cache line; a pass per column read the chunk 64 times on W1), each
    value counted in a dense (column, cluster, bin) counter (``dense``: zeros, at least
    ``group * k * 2**(16 - shift)``, left zero) that is read and reset through the list of
    the bins it touched: a chunk costs its values, not the bins."""
    n, width = bits.shape
    nb = 1 << (16 - shift)
    codes = np.empty(width * min(n, k * nb), np.int64)
    counts = np.empty(codes.size, np.int64)
    touched = np.empty(min(n * group, group * k * nb), np.int64)
    at = 0
    for j0 in range(0, width, group):
        g_n = min(group, width - j0)
        t = 0
        for i in range(n):
            base = labels[i] * nb
            for g in range(g_n):
                b = bits[i, j0 + g]
                if (b & 0x7F800000) == 0x7F800000:  # NaN (infinity is refused by the scan)
                    continue
                idx = g * k * nb + base + (b >> (16 + shift))
                if dense[idx] == 0:
                    touched[t] = idx
                    t += 1
                dense[idx] += 1
        seen = np.sort(touched[:t])
        for u in range(t):
            idx = seen[u]
            g, rest = idx // (k * nb), idx % (k * nb)
            c, b = rest // nb, rest % nb
            codes[at] = (((first + j0 + g) * k + c) << 16) | (b << shift)
            counts[at] = dense[idx]
            dense[idx] = 0
            at += 1
    return codes[:at].copy(), counts[:at].copy()


#: Bytes of the dense counter of :func:`_histogram_loops` (one per thread, reused: fresh
#: pages cost ~13 us each to fault here, more than the counting).
_COUNTER_BYTES = 8 << 20
_COUNTERS = threading.local()


def _counter(k: int) -> tuple[np.ndarray, int]:
    """This thread's dense counter and how many columns it counts at once for ``k`` clusters."""
    per_column = k << (16 - _BIN_SHIFT)
    group = max(1, min(16, _COUNTER_BYTES // (4 * per_column)))
    size = group * per_column
    buf = getattr(_COUNTERS, "buf", None)
    if buf is None or buf.size < size:
        buf = _COUNTERS.buf = np.zeros(size, np.int32)
    return buf, group


def _merge_loops(ca, na, cb, nb):  # pragma: no cover - compiled
    """Two sparse histograms (sorted unique codes, counts) added: one linear merge."""
    out_c = np.empty(ca.size + cb.size, np.int64)
    out_n = np.empty(ca.size + cb.size, np.int64)
    i = j = at = 0
    while i < ca.size and j < cb.size:
        if ca[i] < cb[j]:
            out_c[at], out_n[at] = ca[i], na[i]
            i += 1
        elif cb[j] < ca[i]:
            out_c[at], out_n[at] = cb[j], nb[j]
            j += 1
        else:
            out_c[at], out_n[at] = ca[i], na[i] + nb[j]
            i += 1
            j += 1
        at += 1
    while i < ca.size:
        out_c[at], out_n[at] = ca[i], na[i]
        i += 1
        at += 1
    while j < cb.size:
        out_c[at], out_n[at] = cb[j], nb[j]
        j += 1
        at += 1
    return out_c[:at].copy(), out_n[:at].copy()


_LOOPS = {"moments": _moment_loops, "histogram": _histogram_loops, "merge": _merge_loops}
_COMPILED: dict = {}


def _compiled(name: str):
    """A compiled loop of this module (numba, cached on disk), or None without numba or with
    ``MKDIST_NUMBA=0`` (then the NumPy route: the same numbers up to float rounding)."""
    if os.environ.get("MKDIST_NUMBA", "1") == "0":
        return None
    if name not in _COMPILED:
        try:
            import numba
        except ImportError:
            _COMPILED[name] = None
        else:
            _COMPILED[name] = numba.njit(cache=True, nogil=True)(_LOOPS[name])
    return _COMPILED[name]


def merge_partials(parts: Sequence[ProfileSums], split_every: int = 16) -> ProfileSums:
    """:meth:`ProfileSums.merge` as a tree of ``split_every`` partials a node (bounded memory)."""
    parts = list(parts)
    while len(parts) > 1:
        parts = [ProfileSums.merge(parts[i:i + split_every]) for i in range(0, len(parts), split_every)]
    return parts[0]


def warm_loops(dtype=np.float32) -> None:
    """Load (or compile) this module's loops for views of ``dtype`` now, on one-row inputs:
    the embedding's prefetch calls it on each worker while the model is fitted, so the labels
    pass does not wait for numba's load (0.2-1.4 s per fresh worker measured on W1)."""
    lab = np.zeros(1, np.int64)
    X = np.ones((1, 1), dtype=dtype)
    layout = ProfileLayout.of_views({"v": 1})
    a = profile_partial(lab, [X], layout, 1)
    ProfileSums.merge([a, a])
