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
ignores; on the customer table of ``bench/bench_missing.py`` rows with missing cells lost
0.036 ACC to the complete rows with the column mean, none with 10 neighbours; copying the
single nearest donor's value was worse than both on a missing category.  (Not the
incomplete multiple kernel clustering line, which learns the fill with the kernels: its
cost grows with N^2 and would need every method changed; this fill feeds all five as is.)

The cost is linear in N: rows without a missing cell are passed through; each row with
one costs one (n_donors x features) product.  Only NumPy here: the fill runs inside the row
tasks on the workers (see :meth:`Imputer.fill_view`).
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


def missing_per_row(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Missing (NaN) cells of every row over all views, int32, shape (b,)."""
    total = np.zeros(blocks[0].shape[0], dtype=np.int32)
    for b in blocks:
        if np.issubdtype(np.asarray(b).dtype, np.floating):
            total += np.isnan(b).sum(axis=1, dtype=np.int32)
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
        self._donor_z = np.where(self._donor_seen, Z, 0.0)
        self._donor_raw = np.where(self._donor_seen, np.hstack(self.donors) if self.donors else Z, 0.0)

    @property
    def n_donors(self) -> int:
        return int(self._donor_z.shape[0])

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
        values = self._estimates([np.asarray(b)[rows] for b in blocks], view, holes[rows])
        sub = out[rows]
        sub[holes[rows]] = values[holes[rows]].astype(X.dtype, copy=False)
        out[rows] = sub
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
        Sd, Zd = self._donor_seen.astype(np.float64), self._donor_z
        seen_f = seen.astype(np.float64)
        shared = seen_f @ Sd.T
        # Mean squared difference over the features both observe: sum over shared features of
        # z_r^2 - 2 z_r z_d + z_d^2, each term masked by the other side's observed cells.
        sq = (Z * Z) @ Sd.T - 2.0 * (Z @ Zd.T) + seen_f @ (Zd * Zd).T
        dist = np.where(shared > 0, np.maximum(sq, 0.0) / np.maximum(shared, 1.0), np.inf)
        cols = np.flatnonzero(holes.any(axis=0))
        complete = self._donor_seen[:, lo + cols].all(axis=0)
        # Features every donor has: one neighbour search serves them all.
        if complete.any():
            need = np.flatnonzero(holes[:, cols[complete]].any(axis=1))
            self._average(out, dist[need], need, lo, cols[complete], np.arange(self.n_donors))
        for f in cols[~complete]:
            need = np.flatnonzero(holes[:, f])
            has = np.flatnonzero(self._donor_seen[:, lo + f])
            if has.size:
                self._average(out, dist[np.ix_(need, has)], need, lo, np.array([f]), has)
        return out

    def _average(self, out: np.ndarray, dist: np.ndarray, rows: np.ndarray, lo: int, cols: np.ndarray,
                 donors: np.ndarray) -> None:
        """Write the mean of the ``n_neighbors`` nearest donors' values into ``out[rows, cols]``
        (donors sharing no observed feature with a row are not neighbours; a row with none
        keeps its fallback)."""
        k = min(self.n_neighbors, donors.size)
        near = np.argpartition(dist, k - 1, axis=1)[:, :k] if k < donors.size else \
            np.broadcast_to(np.arange(donors.size), (rows.size, donors.size))
        d = np.take_along_axis(dist, near, axis=1)
        usable = np.isfinite(d)
        values = self._donor_raw[:, lo + cols][donors[near]]  # (r, k, c)
        weight = usable[:, :, None].astype(np.float64)
        count = weight.sum(axis=1)
        filled = (values * weight).sum(axis=1) / np.maximum(count, 1.0)
        keep = count[:, 0] > 0
        out[np.ix_(rows[keep], cols)] = filled[keep]

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


def _count_task(*blocks):
    return missing_per_row(blocks)


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


def count_missing(views: Mapping[str, object]):
    """Missing cells per row over all views, int32, shape (N,) (lazy for Dask views)."""
    arrays = list(views.values())
    if not is_dask_array(arrays[0]):
        return missing_per_row([np.asarray(a) for a in arrays])
    import dask.array as da
    from dask.base import tokenize

    return da.map_blocks(_count_task, *arrays, dtype=np.int32, drop_axis=1, chunks=(arrays[0].chunks[0],),
                         meta=np.empty((0,), dtype=np.int32), name=f"mkdist-missing-cells-{tokenize(*arrays)}")
