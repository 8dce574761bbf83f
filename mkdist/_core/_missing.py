"""Missing cells (NaN) filled from donor rows: the k nearest donors on the row's observed cells.

A run with ``missing="impute"`` clusters every row, also those with missing cells.  The fill
is decided once, from the input scan (one pass, before anything is stored): per feature the
mean and standard deviation over the finite values, and a uniform sample of donor rows read
in the same pass.  A missing cell then gets the mean of that feature over the row's
``n_neighbors`` nearest donors (k-NN imputation, Troyanskaya et al. 2001), the distance
being the mean squared difference of the standardised features both rows observe, across
all views; a donor that misses the feature is not used for it, and a cell no donor can
fill gets the feature's mean.  ``n_neighbors=0`` is mean imputation.

Why the neighbours' mean and not the column mean: the neighbours estimate the feature's
mean *given* what the row shows (its other views and columns), which the column mean
ignores.  On the customer table of ``bench/bench_missing.py`` (20,000 rows, 3 seeds) the
rows with missing cells trailed the complete rows' ACC by 0.002 with the mean of 10
neighbours in both layouts measured; the column mean did as well with a categorical view
(0.001) but trailed by 0.137 with numbers and indicator columns in one view (a missing
category became "half of each", between the two segments it splits), the single nearest
donor's value by 0.03 in both (``bench/RESULTS.md``, "Missing cells").  (Not the
incomplete multiple kernel clustering line, which learns the fill with the kernels: its cost
grows faster than N and every method would need its own; this fill feeds all five methods as
they are.)

The cost is linear in N: rows without a missing cell are passed through; each row with one
costs its share of one (1024 rows x n_donors) distance GEMM and a partial sort, 13-18 CPU us
(the mkc embedding of a row of that table: 9 us; ``bench/RESULTS.md``).  Only NumPy here: the
fill runs inside the row tasks on the workers (see :func:`fill_views`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ._validation import is_dask_array

__all__ = ["Imputer", "N_DONORS", "N_NEIGHBORS", "missing_per_row", "all_missing_rows", "donor_indices", "fill_views",
           "count_missing"]

#: Donor rows per run: a uniform sample read in the input scan's pass.  1000 rows x 20
#: features is 160 kB in the store; the distances of a row with a missing cell cost one
#: (1000 x d) product.
N_DONORS = 1000
#: Neighbours averaged per missing cell (0: the column mean).
N_NEIGHBORS = 10
#: Rows with missing cells filled at once (bounds the (rows, n_donors) distance arrays).
FILL_BATCH_ROWS = 1024
#: Nearest donors looked at per row, in multiples of ``n_neighbors``: a feature averages the
#: first ``n_neighbors`` of them that observe it (searched again among the donors that observe
#: it when more than 2/3 of the candidates miss it).
CANDIDATES = 3


def missing_per_row(blocks: Sequence[np.ndarray], counted: Sequence | None = None) -> np.ndarray:
    """Missing (NaN) cells of every row over all views, int32, shape (b,).

    ``counted`` (per view: None, or a bool mask of its features) names the features that
    stand for a table cell: a categorical column's indicators are all NaN when its cell is
    missing, and only its first counts, so the count is of the table's cells.
    """
    total = np.zeros(blocks[0].shape[0], dtype=np.int32)
    for j, b in enumerate(blocks):
        if np.issubdtype(np.asarray(b).dtype, np.floating):
            mask = None if counted is None else counted[j]
            total += np.isnan(b if mask is None else b[:, mask]).sum(axis=1, dtype=np.int32)
    return total


def all_missing_rows(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Per row: whether every cell of every view is missing, bool, shape (b,)."""
    width = sum(int(b.shape[1]) for b in blocks)
    return missing_per_row(blocks) == width


@dataclasses.dataclass
class Imputer:
    """How a run fills its missing cells: feature statistics and donor rows, per view.

    Parameters
    ----------
    view_names : list of str
        The views, in the order of the blocks :meth:`fill` and :meth:`fill_view` take.
    means : list of ndarray of shape (d_v,)
        Per feature, the mean over its finite values (the fill where no donor helps).
    scales : list of ndarray of shape (d_v,)
        Per feature, its standard deviation (1 where 0): the distances are on standardised
        features, so no column outweighs another by its unit.
    donors : list of ndarray of shape (n_donors, d_v)
        The donor rows as read (they may miss cells themselves).
    n_neighbors : int, default=N_NEIGHBORS
        Donors averaged per cell; 0 fills every cell with its feature's mean.
    """

    view_names: list[str]
    means: list[np.ndarray]
    scales: list[np.ndarray]
    donors: list[np.ndarray]
    n_neighbors: int = N_NEIGHBORS

    def __post_init__(self):
        self.view_names = list(self.view_names)
        self.means = [np.asarray(m, dtype=np.float64) for m in self.means]
        self.scales = [np.where(np.asarray(s, dtype=np.float64) > 0, np.asarray(s, dtype=np.float64), 1.0)
                       for s in self.scales]
        self.donors = [np.asarray(d, dtype=np.float64) for d in self.donors]
        self.n_neighbors = int(self.n_neighbors)
        widths = [m.size for m in self.means]
        self._offsets = np.concatenate([[0], np.cumsum(widths)]).astype(int)
        # The donors standardised once (here, not per row block): NaN where they miss a cell.
        Z = np.hstack([(d - m) / s for d, m, s in zip(self.donors, self.means, self.scales)]) \
            if self.donors else np.empty((0, int(self._offsets[-1])))
        self._donor_seen = ~np.isnan(Z)
        Zd = np.where(self._donor_seen, Z, 0.0)
        Sd = self._donor_seen.astype(np.float64)
        # The donors' side of the distance GEMM (see _estimates): rows [seen; z^2; -2 z].
        self._donor_terms = np.vstack([Sd.T, (Zd * Zd).T, -2.0 * Zd.T]).astype(np.float32)
        self._incomplete = np.flatnonzero(~self._donor_seen.all(axis=1))
        self._donor_unseen_t = (~self._donor_seen).T.astype(np.float32)
        self._observing = self._donor_seen.sum(axis=0)
        self._donor_raw = np.where(self._donor_seen, np.hstack(self.donors) if self.donors else Z, 0.0)

    @property
    def n_donors(self) -> int:
        return int(self._donor_seen.shape[0])

    def fill_view(self, blocks: Sequence[np.ndarray], view: int) -> np.ndarray:
        """One view of a row block with its missing cells filled (a copy; the block itself
        when it misses nothing).

        Parameters
        ----------
        blocks : list of ndarray of shape (b, d_v)
            The same rows of every view (in ``view_names`` order): the neighbours are found on
            what the row shows in all of them.
        view : int
            Which view to return.

        Returns
        -------
        ndarray of shape (b, d_view), the block's dtype
        """
        X = np.asarray(blocks[view])
        if not np.issubdtype(X.dtype, np.floating):
            return X
        holes = np.isnan(X)
        rows = np.flatnonzero(holes.any(axis=1))
        if rows.size == 0:
            return X
        out = X.copy()
        # In batches: a batch's distances to the donors are (rows, n_donors) floats, a few of
        # them at once, so a chunk whose every row misses a cell stays within ~50 MB.
        for start in range(0, rows.size, FILL_BATCH_ROWS):
            batch = rows[start:start + FILL_BATCH_ROWS]
            values = self._estimates([np.asarray(b)[batch] for b in blocks], view, holes[batch])
            sub = out[batch]
            sub[holes[batch]] = values[holes[batch]].astype(X.dtype, copy=False)
            out[batch] = sub
        return out

    def fill(self, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every view of a row block filled (:meth:`fill_view` of each)."""
        return [self.fill_view(blocks, j) for j in range(len(blocks))]

    def _estimates(self, rows: Sequence[np.ndarray], view: int, holes: np.ndarray) -> np.ndarray:
        """(r, d_view) fill values of view ``view`` for rows that miss cells in it (only the
        entries under ``holes`` are used)."""
        out = np.broadcast_to(self.means[view], holes.shape).copy()
        if self.n_neighbors <= 0 or self.n_donors == 0:
            return out
        lo = int(self._offsets[view])
        Z = np.hstack([(np.asarray(r, dtype=np.float64) - m) / s for r, m, s in zip(rows, self.means, self.scales)])
        seen = ~np.isnan(Z)
        Z = np.where(seen, Z, 0.0)
        # Mean squared difference over the features both observe: the sum over them of
        # z_r^2 - 2 z_r z_d + z_d^2 (each term masked by the other side's observed cells) as one
        # GEMM, divided by how many they share; no shared feature, no neighbour.  float32: only
        # the order of the distances matters, and the (rows, donors) passes are memory-bound.
        left = np.hstack([Z * Z, seen, Z]).astype(np.float32)
        dist = left @ self._donor_terms
        np.maximum(dist, 0.0, out=dist)
        observed = seen.sum(axis=1, dtype=np.float32)[:, None]
        dist /= np.maximum(observed, 1.0)
        if self._incomplete.size:
            # A donor that misses cells shares fewer features with a row: only those columns
            # need their own count (all of them, without indexing, when most donors miss some).
            every = self._incomplete.size > self.n_donors // 2
            cols = slice(None) if every else self._incomplete
            shared = observed - seen.astype(np.float32) @ self._donor_unseen_t[:, cols]
            part = dist if every else dist[:, cols]
            part *= observed / np.maximum(shared, 1.0)
            part[shared == 0] = np.inf
            if not every:
                dist[:, cols] = part
        dist[observed[:, 0] == 0] = np.inf
        # The nearest few times k donors, nearest first; each feature averages the first k of
        # them that observe it (all k when the donors miss nothing, as most do).
        k = self.n_neighbors
        m = min(self.n_donors, CANDIDATES * k)
        near = np.argpartition(dist, m - 1, axis=1)[:, :m] if m < self.n_donors else \
            np.broadcast_to(np.arange(m), dist.shape).copy()
        d = np.take_along_axis(dist, near, axis=1)
        order = np.argsort(d, axis=1, kind="stable")
        near, d = np.take_along_axis(near, order, axis=1), np.take_along_axis(d, order, axis=1)
        cols = np.flatnonzero(holes.any(axis=0))
        has = self._donor_seen[:, lo + cols][near] & np.isfinite(d)[:, :, None]  # (r, m, c)
        use = has & (np.cumsum(has, axis=1) <= k)
        count = use.sum(axis=1)
        total = np.where(use, self._donor_raw[:, lo + cols][near], 0.0).sum(axis=1)
        out[:, cols] = np.where(count > 0, total / np.maximum(count, 1), out[:, cols])
        # A feature that most donors miss can leave fewer than k among the candidates: those
        # cells get their own search over the donors that observe it (rare unless a column is
        # mostly missing).
        short = (count < k) & (count < self._observing[lo + cols])
        for c in np.flatnonzero(short.any(axis=0)):
            f, rows_c = lo + cols[c], np.flatnonzero(short[:, c])
            sub = np.where(self._donor_seen[:, f], dist[rows_c], np.inf)
            m = min(k, int(self._observing[f]))
            nn = np.argpartition(sub, m - 1, axis=1)[:, :m]
            ok = np.isfinite(np.take_along_axis(sub, nn, axis=1))
            n_ok = ok.sum(axis=1)
            mean = np.where(ok, self._donor_raw[nn, f], 0.0).sum(axis=1) / np.maximum(n_ok, 1)
            out[rows_c, cols[c]] = np.where(n_ok > 0, mean, out[rows_c, cols[c]])
        return out

    # ------------------------------------------------------------------ state
    def arrays(self) -> dict[str, np.ndarray]:
        """The fill as named arrays (``mean__v``, ``scale__v``, ``donors__v`` per view v)."""
        out = {}
        for name, m, s, d in zip(self.view_names, self.means, self.scales, self.donors):
            out[f"mean__{name}"], out[f"scale__{name}"], out[f"donors__{name}"] = m, s, d
        return out

    @classmethod
    def from_arrays(cls, view_names: Sequence[str], arrays: Mapping[str, np.ndarray], n_neighbors: int) -> Imputer:
        """The inverse of :meth:`arrays`."""
        names = list(view_names)
        return cls(names, [arrays[f"mean__{v}"] for v in names], [arrays[f"scale__{v}"] for v in names],
                   [arrays[f"donors__{v}"] for v in names], n_neighbors)


def donor_indices(n_rows: int, seed: int, n_donors: int = N_DONORS) -> np.ndarray:
    """The donor rows of a run: a uniform sample without replacement, sorted, shape
    (min(N, n_donors),); its own stream of the run's seed (not the landmarks')."""
    rng = np.random.default_rng([int(seed), 0x6D697373])  # "miss": a stream apart from the landmarks'
    return np.sort(rng.choice(int(n_rows), size=min(int(n_rows), int(n_donors)), replace=False)).astype(np.int64)


def _fill_task(*args, view: int):
    *blocks, imputer = args
    return imputer.fill_view(blocks, view)


def _count_task(*blocks, counted=None):
    return missing_per_row(blocks, counted)


def fill_views(views: Mapping[str, object], imputer: Imputer) -> dict[str, object]:
    """The views with their missing cells filled, lazily for Dask views.

    Each filled view is one ``map_blocks`` over the row chunks of every view (a row's
    neighbours are found on all its views), which Dask fuses into the task that consumes it:
    the fill adds no pass over the data and no task per chunk (``tests/test_missing.py``).

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
        NumPy, or Dask with one row chunking; the imputer's views, in any order.
    imputer : Imputer

    Returns
    -------
    dict of str to array of shape (N, d_v), like ``views``
    """
    names = imputer.view_names
    arrays = [views[n] for n in names]
    if not is_dask_array(arrays[0]):
        filled = imputer.fill([np.asarray(a) for a in arrays])
        return {n: filled[names.index(n)] for n in views}
    import dask
    import dask.array as da
    from dask.base import tokenize

    key = dask.delayed(imputer, pure=True, traverse=False)
    token = tokenize(key, *arrays)
    out = {}
    for j, (name, a) in enumerate(zip(names, arrays)):
        out[name] = da.map_blocks(_fill_task, *arrays, key, view=j, dtype=a.dtype, chunks=a.chunks,
                                  meta=np.empty((0, 0), dtype=a.dtype), name=f"mkdist-impute-{j}-{token}")
    return {n: out[n] for n in views}


def count_missing(views: Mapping[str, object], cells: Mapping[str, np.ndarray] | None = None):
    """Missing cells per row over all views, int32, shape (N,) (lazy for Dask views).

    ``cells``: view -> bool mask of the features that stand for a table cell (see
    :func:`missing_per_row`); a view not named counts every feature.
    """
    arrays = list(views.values())
    counted = None if not cells else [cells.get(name) for name in views]
    if not is_dask_array(arrays[0]):
        return missing_per_row([np.asarray(a) for a in arrays], counted)
    import dask.array as da
    from dask.base import tokenize

    return da.map_blocks(_count_task, *arrays, counted=counted, dtype=np.int32, drop_axis=1,
                         chunks=(arrays[0].chunks[0],), meta=np.empty((0,), dtype=np.int32),
                         name=f"mkdist-missing-cells-{tokenize(*arrays, counted)}")
