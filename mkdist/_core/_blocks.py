"""The one row engine: every per-row computation of every method, on NumPy or Dask views.

A method writes a *row function* ``fn(blocks, state)`` that takes one row block of every
view (a list of 2-D NumPy arrays, in the method's view order) and a small, read-only state
object, and returns either rows (``map``: shape (b, n_cols) or (b,)) or a partial sum
(``reduce``: shape (width,)).  :class:`RowBlocks` runs it:

* NumPy views: over consecutive sub-blocks of ``block_rows`` rows, in this process;
* Dask views: as ONE fused ``map_blocks`` task per row chunk (the task walks the same
  sub-blocks), with the state shipped as a single graph key; reductions are tree sums
  with one ``compute`` per call, so only ``width`` numbers reach the client.

So NumPy and Dask input run the same arithmetic on the same sub-blocks, and memory per
task is bounded by ``block_rows`` whatever the chunking.  The first pass over Dask chunks
checks them for NaN/inf inside the task and names the view, chunk and first bad row
(dask-ml spends a separate pass for a generic message).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError
from ._cluster import compute
from ._validation import is_dask_array
from ._worker_env import tune_malloc

__all__ = ["RowBlocks", "align_row_chunks", "check_chunk_finite", "cache_block_rows", "report_passes",
           "DEFAULT_BLOCK_ROWS"]

#: Rows per sub-block inside a task (and per step over NumPy input): a (4096, 1000) float32
#: kernel block is 16 MB, large enough for efficient GEMMs, small enough to stay in cache-
#: friendly territory and to bound a task's memory whatever the chunk size.
DEFAULT_BLOCK_ROWS = 4096
#: Fan-in of the tree reductions of partial sums.
SPLIT_EVERY = 16
#: Bytes of the (rows, n) working block a kernel row function should stay within: the
#: elementwise passes over a kernel block (exp, squarings, centring, the thin GEMM) are
#: memory-bound once the block leaves the per-core cache.  Measured on W1 (1000 landmarks,
#: float32, one thread): 512-row blocks (2 MiB) embed 25-45% faster than 4096-row ones.  The fused
#: embedding (issue 34) keeps two (rows, n) arrays live, sized together to this budget (262 rows
#: at n = 1000): its compiled route ran 4.6-5.1 us/row (medians of 5) from 128 to 512 rows and
#: 5.0-6.5 at 768, so the budget is not critical there once the arrays are reused.
CACHE_BLOCK_BYTES = 2 * 2**20


def cache_block_rows(n_cols: int, itemsize: int = 4, target: int = CACHE_BLOCK_BYTES) -> int:
    """Rows per sub-block so that a (rows, n_cols) working array stays about ``target`` bytes."""
    return int(min(8192, max(64, target // max(1, n_cols * itemsize))))

RowFunction = Callable[[list, Any], np.ndarray]

#: Called after every computed pass over Dask rows (``reduce``) with the pass's layer name and
#: seconds; set by :func:`report_passes`.  Iterative fits (power k-means, the distributed
#: k-means, Nystrom's reductions) make one such pass per iteration, so this is their progress.
_PASS_REPORTER: contextvars.ContextVar[Callable[[str, float], None] | None] = contextvars.ContextVar(
    "mkdist_pass_reporter", default=None)


@contextlib.contextmanager
def report_passes(callback: Callable[[str, float], None]) -> Iterator[None]:
    """Call ``callback(layer_name, seconds)`` after each pass over Dask rows in the block."""
    token = _PASS_REPORTER.set(callback)
    try:
        yield
    finally:
        _PASS_REPORTER.reset(token)


def check_chunk_finite(view_names: Sequence[str], blocks: Sequence[np.ndarray], chunk_index: int,
                       row_start: int) -> None:
    """Raise naming the view, the chunk and the first bad row if a block holds NaN/inf."""
    for name, b in zip(view_names, blocks):
        if np.issubdtype(b.dtype, np.floating) and not np.isfinite(b).all():
            row = int(np.argmax(~np.isfinite(b).all(axis=1)))
            raise InputValidationError(
                f"Input contains NaN or infinity: view {name!r}, chunk {chunk_index} "
                f"(first bad row {row_start + row})."
            )


def align_row_chunks(arrays: Sequence, names: Sequence[str] | None = None) -> list:
    """Check that Dask views share one row chunking; merge column chunks.

    Mismatched row chunks are an error (not silently rechunked: a rechunk of millions of
    rows is a shuffle the user should choose); column chunks are merged, which is cheap.
    """
    names = list(names) if names is not None else [f"view{i}" for i in range(len(arrays))]
    first = arrays[0].chunks[0]
    for name, a in zip(names, arrays):
        if a.chunks[0] != first:
            raise InputValidationError(
                f"view {name!r} is chunked {a.chunks[0][:4]}... along rows but view {names[0]!r} is "
                f"chunked {first[:4]}...; rechunk all views the same way, e.g. "
                f"X.rechunk({{0: {first[0]}}})."
            )
        if any(np.isnan(c) for c in a.chunks[0]):
            raise InputValidationError(
                f"view {name!r} has unknown chunk sizes; call .compute_chunk_sizes() first."
            )
    return [a if a.numblocks[1] == 1 else a.rechunk({1: -1}) for a in arrays]


# ----------------------------------------------------------------------------- block walkers
def _sub_blocks(blocks: Sequence[np.ndarray], block_rows: int):
    n = blocks[0].shape[0]
    if n == 0:
        yield 0, [b[:0] for b in blocks]
    for start in range(0, n, block_rows):
        yield start, [b[start:start + block_rows] for b in blocks]


def _map_rows(blocks: Sequence[np.ndarray], state: Any, fn: RowFunction, block_rows: int, dtype) -> np.ndarray:
    n = blocks[0].shape[0]
    if n <= block_rows:
        return np.asarray(fn(list(blocks), state), dtype=dtype)
    out = None
    for start, sub in _sub_blocks(blocks, block_rows):
        part = fn(sub, state)
        if out is None:
            out = np.empty((n,) + part.shape[1:], dtype=dtype)
        out[start:start + part.shape[0]] = part
    return out


def _reduce_rows(blocks: Sequence[np.ndarray], state: Any, fn: RowFunction, block_rows: int) -> np.ndarray:
    total = None
    for _, sub in _sub_blocks(blocks, block_rows):
        part = np.asarray(fn(sub, state), dtype=np.float64)
        total = part if total is None else total + part
    return total


def _check(names, blocks, block_info) -> None:
    if block_info is not None:
        loc = block_info[0]
        check_chunk_finite(names, blocks, loc["chunk-location"][0], loc["array-location"][0][0])


# Every Dask row task starts with tune_malloc(): the first one in a process keeps its multi-MiB
# temporaries off mmap (a nanny's MALLOC_TRIM_THRESHOLD_ sends them there; see _worker_env),
# on any cluster and with nothing for the user to set; later calls only read a flag.
def _map_task(*args, fn, names, block_rows, out_dtype, check, block_info=None):
    tune_malloc()
    *blocks, state = args
    if check:
        _check(names, blocks, block_info)
    return _map_rows(blocks, state, fn, block_rows, out_dtype)


def _reduce_task(*args, fn, names, block_rows, check, block_info=None):
    tune_malloc()
    *blocks, state = args
    if check:
        _check(names, blocks, block_info)
    return _reduce_rows(blocks, state, fn, block_rows)[None, :]


def _reduce_take_task(*args, fn, names, block_rows, check, block_info=None):
    """The chunk's partial sum and its rows among ``take``, as a (1, 1) object array.

    A Dask task has one output: the pair travels in one object block, which two light tasks
    per chunk then split into the partial (for the tree sum) and the rows.
    """
    tune_malloc()
    *blocks, state, take = args
    if check:
        _check(names, blocks, block_info)
    start, stop = block_info[0]["array-location"][0]
    local = take[np.searchsorted(take, start):np.searchsorted(take, stop)] - start
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = (_reduce_rows(blocks, state, fn, block_rows)[None, :], [np.asarray(b[local]) for b in blocks])
    return out


def _take_task(*args, block_info=None):
    """A chunk's rows among ``take`` (the last argument), as a (1, 1) object block."""
    *blocks, take = args
    start, stop = block_info[0]["array-location"][0]
    local = take[np.searchsorted(take, start):np.searchsorted(take, stop)] - start
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = [np.asarray(b[local]) for b in blocks]
    return out


def _as_take(take: Any, n: int) -> np.ndarray:
    """``take`` as int64 row indices, refused unless 1-D, integer, sorted and within [0, n).

    The Dask pass gives each chunk the indices between its bounds: an unsorted index would
    fail there with an unrelated IndexError, and one outside [0, n) would be dropped, so the
    rows returned would be fewer than asked (NumPy input would wrap or raise instead).
    """
    t = np.asarray(take)
    if t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
        raise ValueError(f"take must be a 1-D array of integer row indices; got shape {t.shape}, dtype {t.dtype}.")
    t = t.astype(np.int64)
    if t.size and (t[0] < 0 or t[-1] >= n or np.any(t[1:] < t[:-1])):
        raise ValueError(f"take must be sorted row indices in [0, {n}); got {t[:8].tolist()}"
                         f"{'...' if t.size > 8 else ''}.")
    return t


def _task_name(fn: Any) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    return name.strip("_").replace("_", "-")


# ----------------------------------------------------------------------------- the engine
class RowBlocks:
    """The views of one fit / transform / predict call, NumPy or row-chunked Dask.

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
        NumPy or Dask arrays with the same rows.  NumPy views mixed with Dask ones are
        chunked like the Dask ones.
    names : list of str, optional
        The views to use and their order (what row functions receive); default all, in order.
    block_rows : int, default=DEFAULT_BLOCK_ROWS
        Rows per sub-block.

    Attributes
    ----------
    names : list of str
    arrays : list of arrays
    is_dask : bool
    n_samples : int
    """

    def __init__(self, views: Mapping[str, Any], names: Sequence[str] | None = None, *,
                 block_rows: int = DEFAULT_BLOCK_ROWS):
        self.names = list(names) if names is not None else list(views)
        arrays = [views[n] for n in self.names]
        self.is_dask = any(is_dask_array(a) for a in arrays)
        if self.is_dask:
            import dask.array as da

            # The Dask views are checked (one known row chunking) before a NumPy view is chunked
            # like them: unknown chunk sizes would otherwise fail in from_array with a TypeError.
            lazy = [i for i, a in enumerate(arrays) if is_dask_array(a)]
            for i, a in zip(lazy, align_row_chunks([arrays[i] for i in lazy], [self.names[i] for i in lazy])):
                arrays[i] = a
            rows = arrays[lazy[0]].chunks[0]
            arrays = [a if is_dask_array(a) else da.from_array(np.asarray(a), chunks=(rows, -1))
                      for a in arrays]
        self.arrays = arrays
        self.n_samples = int(arrays[0].shape[0])
        self.block_rows = int(block_rows)

    @property
    def row_chunks(self) -> tuple[int, ...]:
        """Rows per chunk (one chunk of N rows for NumPy input)."""
        return tuple(self.arrays[0].chunks[0]) if self.is_dask else (self.n_samples,)

    def _state_key(self, state: Any):
        import dask

        # One graph key for the state: every task references it instead of embedding a copy.
        return dask.delayed(state, pure=True, traverse=False)

    def take(self, take: np.ndarray) -> list[np.ndarray]:
        """The rows ``take`` (sorted row indices) of every view, in memory, in one compute.

        Dask input: one task per chunk (fused with its read) keeps the chunk's rows; only those
        rows reach the client, and when most chunks hold none, those are not read.
        (A Dask fancy index of random rows is a shuffle: 4 tasks per chunk.)

        Returns
        -------
        list of ndarray of shape (n, d_v), one per view in ``names`` order
        """
        take = _as_take(take, self.n_samples)
        if not self.is_dask:
            return [np.asarray(a[take]) for a in self.arrays]
        import dask.array as da
        from dask.base import tokenize

        if take.size == 0:
            return [np.asarray(a[:0]) for a in self.arrays]
        bounds = np.cumsum((0,) + self.row_chunks)
        per_chunk = np.diff(np.searchsorted(take, bounds))
        held = np.flatnonzero(per_chunk)
        arrays = self.arrays
        if held.size < len(self.row_chunks) / 2:
            # Only the chunks that hold rows are read: the selection costs 2 tasks per chunk and
            # view, worth it when most chunks hold none (1000 landmarks in 10,000 chunks), not
            # to skip the few empty ones (159 of 160 chunks held landmarks at 8M W1 rows).
            # The indices move to the rows of the selected chunks.
            arrays = [a.blocks[held] for a in arrays]
            sizes = np.diff(bounds)[held]
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            take = take + np.repeat(starts - bounds[held], per_chunk[held])
        nb = int(arrays[0].numblocks[0])
        parts = da.map_blocks(_take_task, *arrays, self._state_key(take), chunks=((1,) * nb, (1,)),
                              dtype=object, meta=np.empty((0, 0), dtype=object),
                              name=f"mkdist-take-{tokenize(*arrays, take)}")
        parts = np.asarray(compute(parts)[0]).ravel()
        return [np.concatenate([p[j] for p in parts]) for j in range(len(self.arrays))]

    def map(self, fn: RowFunction, state: Any, *, n_cols: int | None, dtype, name: str | None = None,
            check_finite: bool = True):
        """``fn`` on every row block.

        Parameters
        ----------
        fn : callable ``fn(blocks, state) -> ndarray``
            Returns (b, n_cols) rows, or (b,) values when ``n_cols`` is None.
        state : object
            Read-only; shipped to Dask workers once.
        n_cols : int or None
        dtype : numpy dtype of the result
        name : str, optional
            Prefix of the Dask layer name (default: the function's name).
        check_finite : bool, default=True
            Dask input: raise on NaN/inf in the task, naming view, chunk and row.  Pass False
            in passes after the first.  (NumPy input is checked once by the estimators.)

        Returns
        -------
        ndarray, or a lazy dask.array.Array for Dask input, of shape (N, n_cols) or (N,)
        """
        dtype = np.dtype(dtype)
        if not self.is_dask:
            return _map_rows(self.arrays, state, fn, self.block_rows, dtype)
        import dask.array as da
        from dask.base import tokenize

        key = self._state_key(state)
        rows = self.row_chunks
        if n_cols is None:
            chunks, meta, extra = (rows,), np.empty((0,), dtype=dtype), {"drop_axis": 1}
        else:
            chunks, meta, extra = (rows, (n_cols,)), np.empty((0, n_cols), dtype=dtype), {}
        # The name must be unique per (state, input, function): Dask treats equal keys as equal results.
        layer = f"mkdist-{name or _task_name(fn)}-{tokenize(key, *self.arrays, fn, n_cols, dtype, self.block_rows)}"
        return da.map_blocks(_map_task, *self.arrays, key, fn=fn, names=self.names, block_rows=self.block_rows,
                             out_dtype=dtype, dtype=dtype, check=check_finite, chunks=chunks, meta=meta, name=layer,
                             **extra)

    def reduce(self, fn: RowFunction, state: Any, *, width: int, name: str | None = None,
               check_finite: bool = True, split_every: int = SPLIT_EVERY, take: np.ndarray | None = None):
        """Sum over all rows of ``fn(blocks, state)`` (a (width,) partial per sub-block).

        Dask input: one task per chunk, a tree reduction with fan-in ``split_every``, ONE
        compute; only ``width`` numbers reach the client.

        Parameters
        ----------
        take : ndarray of shape (n,), optional
            Sorted row indices whose rows of every view are read in the same pass (e.g. the
            landmarks): the task that sums a chunk also picks its rows, so each chunk is read
            once and freed when that task ends.  (A gather computed beside the sum would be a
            second consumer of every chunk, which Dask orders after the whole reduction: the
            workers then held every input chunk until the end of the pass, 1.2 GiB per worker
            at 10M W1 rows.)  Refused (ValueError) unless integer, sorted and in [0, N);
            repeated indices give repeated rows.

        Returns
        -------
        ndarray of shape (width,), float64
            The sum; with ``take``, a pair ``(sum, rows)`` where ``rows`` is a list of
            ndarrays of shape (n, d_v), one per view in ``names`` order.
        """
        if take is not None:
            take = _as_take(take, self.n_samples)
        if not self.is_dask:
            total = _reduce_rows(self.arrays, state, fn, self.block_rows)
            return total if take is None else (total, [np.asarray(a[take]) for a in self.arrays])
        import dask.array as da
        from dask.base import tokenize

        key = self._state_key(state)
        nb = len(self.row_chunks)
        token = tokenize(key, *self.arrays, fn, width, self.block_rows, take)
        layer = f"mkdist-{name or _task_name(fn)}-{token}"
        common = dict(fn=fn, names=self.names, block_rows=self.block_rows, check=check_finite)
        if take is None:
            partials = da.map_blocks(_reduce_task, *self.arrays, key, **common, chunks=((1,) * nb, (width,)),
                                     dtype=np.float64, meta=np.empty((0, width)), name=layer)
            # A named tree sum: the per-chunk tasks (fused with the row function) keep the layer's
            # name on the dashboard instead of a generic "sum".
            total = da.reduction(partials, chunk=np.sum, aggregate=np.sum, combine=np.sum, axis=0,
                                 dtype=np.float64, split_every=split_every, name=layer.rsplit("-", 1)[0])
            t0 = time.perf_counter()
            out = np.asarray(compute(total)[0])
        else:
            # One task per chunk, its (partial, rows) pair gathered as it is: split into a
            # partial and a row getter per view, the pair task was fused into each of its three
            # consumers by Dask's blockwise fusion, and every chunk was read and summed 3 times.
            parts = da.map_blocks(_reduce_take_task, *self.arrays, key, self._state_key(take), **common,
                                  chunks=((1,) * nb, (1,)), dtype=object, meta=np.empty((0, 0), dtype=object),
                                  name=f"{layer}-take")
            t0 = time.perf_counter()
            pairs = np.asarray(compute(parts)[0]).ravel()
            # Summed in chunk order on the client: nb small vectors.
            out = np.sum(np.concatenate([p[0] for p in pairs]), axis=0)
            out = (out, [np.concatenate([p[1][j] for p in pairs]) for j in range(len(self.arrays))])
        reporter = _PASS_REPORTER.get()
        if reporter is not None:
            reporter(layer.rsplit("-", 1)[0], time.perf_counter() - t0)
        return out
