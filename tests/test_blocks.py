"""The row engine (mkdist._core._blocks.RowBlocks) on NumPy, Dask and mixed views.

The data are small integers stored as floats, so every sum is exact whatever the order the
sub-blocks and chunks are added in: NumPy and Dask results, and results under any chunking
or ``block_rows``, are compared for equality, not closeness.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from mkdist._core._blocks import RowBlocks, align_row_chunks, cache_block_rows, report_passes
from mkdist.errors import InputValidationError

from .conftest import CountingScheduler, raise_if_dask_computes

N = 23
WIDTHS = {"a": 3, "b": 2, "c": 4}
#: (row chunk, block_rows): one chunk, 1-row chunks, N not a multiple of either, sub-blocks
#: of 1 row, a block larger than the chunk.
CHUNKINGS = [(N, 5), (1, 4), (7, 3), (8, 8), (5, 100), (6, 1)]


def _views(n: int = N, seed: int = 0) -> dict[str, np.ndarray]:
    """Three views of integer values: "b" in float32, the others in float64."""
    rng = np.random.default_rng(seed)
    return {name: rng.integers(-20, 20, size=(n, d)).astype(np.float32 if name == "b" else np.float64)
            for name, d in WIDTHS.items()}


def _chunked(views: dict, rows: int) -> dict:
    return {k: da.from_array(v, chunks=(rows, -1)) for k, v in views.items()}


# Row functions at module level: the distributed test ships them to worker processes.
def _moments(blocks, weights):
    """Per view: weighted column sums and column sums of squares, then the row count."""
    parts = [np.r_[(w * b).sum(axis=0), (b.astype(np.float64) ** 2).sum(axis=0)] for w, b in zip(weights, blocks)]
    return np.r_[np.concatenate(parts), blocks[0].shape[0]]


def _project(blocks, M):
    return np.concatenate(blocks, axis=1).astype(np.float64) @ M


def _row_max(blocks, _):
    return np.concatenate(blocks, axis=1).max(axis=1)


def _block_size(blocks, _):
    return np.full(blocks[0].shape[0], blocks[0].shape[0], dtype=np.int64)


def _first_values(blocks, _):
    return np.stack([b[:, 0].astype(np.float64) for b in blocks], axis=1)


def _weights() -> list[float]:
    return [1.0, -2.0, 3.0]


def _projection() -> np.ndarray:
    return np.arange(sum(WIDTHS.values()) * 2, dtype=np.float64).reshape(-1, 2) - 8


def _expected_moments(views: dict) -> np.ndarray:
    parts = [np.r_[w * v.astype(np.float64).sum(axis=0), (v.astype(np.float64) ** 2).sum(axis=0)]
             for w, v in zip(_weights(), views.values())]
    return np.r_[np.concatenate(parts), next(iter(views.values())).shape[0]]


WIDTH = 2 * sum(WIDTHS.values()) + 1


@pytest.mark.parametrize(("n_cols", "itemsize", "expected"), [
    (1000, 4, 524),       # 2 MiB / 4000 bytes a row
    (1000, 8, 262),
    (10, 4, 8192),        # capped
    (100_000, 8, 64),     # floored
    (0, 4, 8192),         # no columns: no division by zero
])
def test_cache_block_rows(n_cols, itemsize, expected):
    assert cache_block_rows(n_cols, itemsize) == expected


@pytest.mark.parametrize(("chunk", "block_rows"), CHUNKINGS)
def test_map_equals_numpy_whatever_the_chunks_and_sub_blocks(chunk, block_rows):
    views = _views()
    M = _projection()
    full = np.concatenate([v.astype(np.float64) for v in views.values()], axis=1)
    expected, expected_max = full @ M, full.max(axis=1)
    rows = RowBlocks(views, block_rows=block_rows)
    assert not rows.is_dask and rows.row_chunks == (N,) and rows.n_samples == N
    np.testing.assert_array_equal(rows.map(_project, M, n_cols=2, dtype=np.float64), expected)
    np.testing.assert_array_equal(rows.map(_row_max, None, n_cols=None, dtype=np.float32), expected_max)
    lazy = RowBlocks(_chunked(views, chunk), block_rows=block_rows)
    assert lazy.is_dask and sum(lazy.row_chunks) == N and max(lazy.row_chunks) == min(chunk, N)
    with raise_if_dask_computes():
        got = lazy.map(_project, M, n_cols=2, dtype=np.float64)
        got_max = lazy.map(_row_max, None, n_cols=None, dtype=np.float32)
    assert isinstance(got, da.Array) and got.chunks == (lazy.row_chunks, (2,))
    assert got_max.chunks == (lazy.row_chunks,) and got_max.dtype == np.float32
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(got.compute(), expected)
        out_max = got_max.compute()
    assert out_max.dtype == np.float32
    np.testing.assert_array_equal(out_max, expected_max)


@pytest.mark.parametrize("split_every", [2, 16])
@pytest.mark.parametrize(("chunk", "block_rows"), CHUNKINGS)
def test_reduce_equals_the_numpy_sum(chunk, block_rows, split_every):
    views = _views()
    expected = _expected_moments(views)
    got = RowBlocks(views, block_rows=block_rows).reduce(_moments, _weights(), width=WIDTH, split_every=split_every)
    assert got.dtype == np.float64 and got.shape == (WIDTH,)
    np.testing.assert_array_equal(got, expected)
    with dask.config.set(scheduler="threads"):
        got = RowBlocks(_chunked(views, chunk), block_rows=block_rows).reduce(
            _moments, _weights(), width=WIDTH, split_every=split_every)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("chunk", "block_rows", "sizes"), [
    (N, 5, [5] * 20 + [3] * 3),              # NumPy-like: 5+5+5+5+3
    (7, 3, ([3] * 6 + [1]) * 3 + [2] * 2),   # chunks 7,7,7,2: sub-blocks stop at every chunk end
    (1, 4, [1] * N),
    (5, 100, [5] * 20 + [3] * 3),            # a chunk is never split below block_rows
])
def test_sub_blocks_are_at_most_block_rows_and_stay_in_their_chunk(chunk, block_rows, sizes):
    views = _views()
    with dask.config.set(scheduler="synchronous"):
        got = RowBlocks(_chunked(views, chunk), block_rows=block_rows).map(
            _block_size, None, n_cols=None, dtype=np.int64).compute()
    np.testing.assert_array_equal(got, sizes)
    if chunk == N:
        np.testing.assert_array_equal(
            RowBlocks(views, block_rows=block_rows).map(_block_size, None, n_cols=None, dtype=np.int64), sizes)


@pytest.mark.parametrize("take", [
    [0, N - 1],                    # first and last rows
    [6, 7, 13, 14, 20, 21],        # both sides of every chunk boundary (chunks of 7)
    [0, 0, 7, 7, 7, N - 1, N - 1],  # repeated indices, repeated rows
    [8, 9, 10],                    # all in one chunk, none in the others
    list(range(N)),                # every row
    [],                            # nothing
])
@pytest.mark.parametrize("chunk", [7, 1, N])
def test_take_gathers_the_rows_in_the_same_pass(take, chunk):
    views = _views()
    idx = np.array(take, dtype=np.int64)
    expected = _expected_moments(views)
    plain = RowBlocks(views, block_rows=4).reduce(_moments, _weights(), width=WIDTH, take=idx)
    sched = CountingScheduler()
    with dask.config.set(scheduler=sched):
        lazy = RowBlocks(_chunked(views, chunk), block_rows=4).reduce(_moments, _weights(), width=WIDTH, take=idx)
    assert sched.calls == 1
    for total, rows in (plain, lazy):
        np.testing.assert_array_equal(total, expected)
        assert len(rows) == 3
        for got, (name, v) in zip(rows, views.items()):
            assert isinstance(got, np.ndarray) and got.dtype == v.dtype and got.shape == (len(take), WIDTHS[name])
            np.testing.assert_array_equal(got, v[idx])


@pytest.mark.parametrize(("take", "message"), [
    ([3, 1], r"sorted row indices in \[0, 23\); got \[3, 1\]"),
    ([-1, 4], r"sorted row indices in \[0, 23\); got \[-1, 4\]"),
    ([4, N], r"sorted row indices in \[0, 23\); got \[4, 23\]"),
    ([[1, 2]], r"1-D array of integer row indices; got shape \(1, 2\)"),
    ([1.0, 2.0], r"1-D array of integer row indices; got shape \(2,\), dtype float64"),
], ids=["unsorted", "negative", "past-the-end", "2-D", "float"])
@pytest.mark.parametrize("lazy", [False, True])
def test_take_out_of_range_or_unsorted_is_refused(take, message, lazy):
    """Not dropped from the Dask pass (fewer rows than asked) nor wrapped around by NumPy."""
    views = _chunked(_views(), 7) if lazy else _views()
    with dask.config.set(scheduler="synchronous"), pytest.raises(ValueError, match=message):
        RowBlocks(views).reduce(_moments, _weights(), width=WIDTH, take=np.array(take))


def _with_bad_value(view: str, rows: list[int], value: float) -> dict:
    views = _views()
    for r in rows:
        views[view][r, -1] = value
    return views


def _run_all(rows: RowBlocks, **kw):
    """Every kind of pass: a map, a reduction, a reduction with ``take``."""
    yield lambda: rows.map(_project, _projection(), n_cols=2, dtype=np.float64, **kw).compute()
    yield lambda: rows.reduce(_moments, _weights(), width=WIDTH, **kw)
    yield lambda: rows.reduce(_moments, _weights(), width=WIDTH, take=np.array([0, 9]), **kw)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(("view", "bad_rows", "chunk_index", "first_row"), [
    ("a", [0], 0, 0),
    ("b", [6], 0, 6),          # last row of a chunk, float32 view
    ("c", [7, 12], 1, 7),      # first row of a chunk; the first bad row is named
    ("b", [22], 3, 22),        # the short last chunk
])
def test_finite_check_names_the_view_the_chunk_and_the_row(value, view, bad_rows, chunk_index, first_row):
    rows = RowBlocks(_chunked(_with_bad_value(view, bad_rows, value), 7), block_rows=3)
    expected = (f"Input contains NaN or infinity: view '{view}', chunk {chunk_index} "
                f"(first bad row {first_row}).")
    with dask.config.set(scheduler="synchronous"):
        for run in _run_all(rows):
            with pytest.raises(InputValidationError) as err:
                run()
            assert str(err.value) == expected


def test_finite_check_names_a_numpy_view_mixed_with_dask_views():
    views = _with_bad_value("a", [15], np.nan)
    mixed = {"a": views["a"], "b": da.from_array(views["b"], chunks=(4, -1)), "c": views["c"]}
    with dask.config.set(scheduler="synchronous"), pytest.raises(
            InputValidationError, match=r"^Input contains NaN or infinity: view 'a', chunk 3 \(first bad row 15\)\.$"):
        RowBlocks(mixed).reduce(_moments, _weights(), width=WIDTH)


def test_bad_values_pass_without_the_check():
    """check_finite=False (passes after the first) and NumPy input (checked by the estimators)."""
    views = _with_bad_value("c", [9], np.inf)
    for input_ in (views, _chunked(views, 7)):
        rows = RowBlocks(input_)
        with dask.config.set(scheduler="synchronous"):
            values = np.asarray(rows.map(_row_max, None, n_cols=None, dtype=np.float64, check_finite=False))
            total = rows.reduce(_moments, _weights(), width=WIDTH, check_finite=False)
        assert np.isposinf(values[9]) and np.isfinite(np.delete(values, 9)).all()
        np.testing.assert_array_equal(values, np.concatenate(list(views.values()), axis=1).max(axis=1))
        # view c's sums start after a's 6 and b's 4: its last column's sum is 13, its squares' 17
        assert np.isposinf(total[13]) and np.isposinf(total[17])
        np.testing.assert_array_equal(np.isfinite(total), ~np.isin(np.arange(WIDTH), [13, 17]))


def test_integer_views_are_not_checked():
    views = {"i": np.arange(N * 2, dtype=np.int64).reshape(N, 2)}
    with dask.config.set(scheduler="synchronous"):
        got = RowBlocks(_chunked(views, 7)).reduce(_moments, [1], width=5)
    np.testing.assert_array_equal(got, _expected_moments(views))


@pytest.mark.parametrize("dask_views", [("b",), ("a", "c"), ("c",)])
def test_mixed_numpy_and_dask_views_give_the_numpy_results(dask_views):
    views = _views()
    uneven = (5, 9, 1, 8)
    mixed = {k: da.from_array(v, chunks=(uneven, -1)) if k in dask_views else v for k, v in views.items()}
    rows = RowBlocks(mixed, block_rows=4)
    assert rows.is_dask and rows.row_chunks == uneven
    assert all(isinstance(a, da.Array) and a.chunks[0] == uneven for a in rows.arrays)
    ref = RowBlocks(views, block_rows=4)
    take = np.array([2, 5, 5, 14, 15, 22])
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(rows.map(_project, _projection(), n_cols=2, dtype=np.float64).compute(),
                                      ref.map(_project, _projection(), n_cols=2, dtype=np.float64))
        total, taken = rows.reduce(_moments, _weights(), width=WIDTH, take=take)
    ref_total, ref_taken = ref.reduce(_moments, _weights(), width=WIDTH, take=take)
    np.testing.assert_array_equal(total, ref_total)
    for got, want in zip(taken, ref_taken):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lazy", [False, True])
def test_names_choose_the_views_and_their_order(lazy):
    views = _views()
    rows = RowBlocks(_chunked(views, 5) if lazy else views, ["c", "a"])
    assert rows.names == ["c", "a"]
    with dask.config.set(scheduler="synchronous"):
        got = np.asarray(rows.map(_first_values, None, n_cols=2, dtype=np.float64))
        _, taken = rows.reduce(_moments, [1.0, 1.0], width=2 * (4 + 3) + 1, take=np.array([1, 11]))
    np.testing.assert_array_equal(got, np.c_[views["c"][:, 0], views["a"][:, 0]])
    assert [t.shape for t in taken] == [(2, 4), (2, 3)]
    np.testing.assert_array_equal(taken[0], views["c"][[1, 11]])


@pytest.mark.parametrize("lazy", [False, True])
def test_empty_input_gives_empty_rows_and_a_zero_sum(lazy):
    """The row function still runs once, on empty blocks: it gives the shapes and the zeros."""
    views = _views(0)
    rows = RowBlocks(_chunked(views, 5) if lazy else views)
    assert rows.n_samples == 0 and rows.row_chunks == (0,)
    with dask.config.set(scheduler="synchronous"):
        mapped = np.asarray(rows.map(_project, _projection(), n_cols=2, dtype=np.float32))
        per_row = np.asarray(rows.map(_row_max, None, n_cols=None, dtype=np.float64))
        total, taken = rows.reduce(_moments, _weights(), width=WIDTH, take=np.array([], dtype=np.int64))
    assert mapped.shape == (0, 2) and mapped.dtype == np.float32
    assert per_row.shape == (0,)
    np.testing.assert_array_equal(total, np.zeros(WIDTH))
    assert [t.shape for t in taken] == [(0, 3), (0, 2), (0, 4)]


@pytest.mark.parametrize("lazy", [False, True])
def test_one_row_input(lazy):
    views = _views(1, seed=3)
    rows = RowBlocks(_chunked(views, 5) if lazy else views, block_rows=4)
    assert rows.n_samples == 1 and rows.row_chunks == (1,)
    full = np.concatenate([v.astype(np.float64) for v in views.values()], axis=1)
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(np.asarray(rows.map(_project, _projection(), n_cols=2, dtype=np.float64)),
                                      full @ _projection())
        total, taken = rows.reduce(_moments, _weights(), width=WIDTH, take=np.array([0, 0]))
    np.testing.assert_array_equal(total, _expected_moments(views))
    np.testing.assert_array_equal(taken[2], np.repeat(views["c"], 2, axis=0))
    if lazy:
        views["b"][0, 1] = np.nan
        with dask.config.set(scheduler="synchronous"), pytest.raises(
                InputValidationError, match=r"view 'b', chunk 0 \(first bad row 0\)"):
            RowBlocks(_chunked(views, 5)).reduce(_moments, _weights(), width=WIDTH)


def test_row_chunks_must_agree_and_column_chunks_are_merged():
    views = _views()
    a = da.from_array(views["a"], chunks=(7, 1))
    merged = align_row_chunks([a, da.from_array(views["c"], chunks=(7, 2))], ["a", "c"])
    assert [m.chunks for m in merged] == [((7, 7, 7, 2), (3,)), ((7, 7, 7, 2), (4,))]
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(merged[0].compute(), views["a"])
    with pytest.raises(InputValidationError, match=r"view 'c' is chunked \(5, 5, 5, 5\)\.\.\. along rows but view 'a' "
                                                   r"is chunked \(7, 7, 7, 2\)\.\.\.; .*X\.rechunk\(\{0: 7\}\)"):
        RowBlocks({"a": a, "b": views["b"], "c": da.from_array(views["c"], chunks=(5, -1))})


@pytest.mark.parametrize("with_numpy", [False, True])
def test_unknown_chunk_sizes_are_a_clear_error(with_numpy):
    x = da.from_array(_views()["a"], chunks=(7, -1))
    filtered = x[x[:, 0] > 0]
    views = {"f": filtered, "n": np.zeros((5, 2))} if with_numpy else {"f": filtered}
    with pytest.raises(InputValidationError, match=r"view 'f' has unknown chunk sizes; call \.compute_chunk_sizes"):
        RowBlocks(views)


def _plus(c):
    def fn(blocks, _):
        return blocks[0][:, 0] + c
    return fn


def test_each_function_and_state_is_its_own_layer():
    """Equal keys would be taken for equal results by Dask: computed together, they must not mix."""
    views = _chunked(_views(), 7)
    rows = RowBlocks(views)
    a0 = views["a"][:, 0].compute()
    with raise_if_dask_computes():
        outs = [rows.map(_plus(1.0), None, n_cols=None, dtype=np.float64),
                rows.map(_plus(2.0), None, n_cols=None, dtype=np.float64),
                rows.map(_project, _projection(), n_cols=2, dtype=np.float64),
                rows.map(_project, _projection() * 3, n_cols=2, dtype=np.float64)]
        again = rows.map(_project, _projection(), n_cols=2, dtype=np.float64, name="projection")
    assert len({o.name for o in outs}) == 4
    assert outs[2].name.startswith("mkdist-project-") and again.name.startswith("mkdist-projection-")
    with dask.config.set(scheduler="synchronous"):
        p1, p2, m1, m3 = dask.compute(*outs)
    np.testing.assert_array_equal(p1, a0 + 1)
    np.testing.assert_array_equal(p2, a0 + 2)
    np.testing.assert_array_equal(m3, 3 * m1)


def test_one_compute_per_reduction_and_its_pass_is_reported():
    views = _views()
    seen: list[tuple[str, float]] = []
    sched = CountingScheduler()
    with dask.config.set(scheduler=sched), report_passes(lambda name, seconds: seen.append((name, seconds))):
        RowBlocks(_chunked(views, 3)).reduce(_moments, _weights(), width=WIDTH, name="scan")
        RowBlocks(_chunked(views, 3)).reduce(_moments, _weights(), width=WIDTH, take=np.array([4]))
        RowBlocks(views).reduce(_moments, _weights(), width=WIDTH)  # NumPy: no Dask pass
    RowBlocks(_chunked(views, 3)).reduce(_moments, _weights(), width=WIDTH)  # outside the block
    assert sched.calls == 2
    assert [name for name, _ in seen] == ["mkdist-scan", "mkdist-moments"]
    assert all(0 <= seconds < 60 for _, seconds in seen)


def test_on_a_distributed_cluster(dask_client):
    """Row functions, state and the (sum, rows) pairs of ``take`` travel between processes;
    the finite check's error reaches the client with its message."""
    views = _views()
    lazy = _chunked(views, 5)
    take = np.array([0, 4, 5, 5, 22])
    total, taken = RowBlocks(lazy, block_rows=2).reduce(_moments, _weights(), width=WIDTH, take=take)
    np.testing.assert_array_equal(total, _expected_moments(views))
    for got, v in zip(taken, views.values()):
        np.testing.assert_array_equal(got, v[take])
    got = RowBlocks(lazy, block_rows=2).map(_project, _projection(), n_cols=2, dtype=np.float64).compute()
    np.testing.assert_array_equal(got, np.concatenate(list(views.values()), axis=1).astype(np.float64) @ _projection())
    bad = _chunked(_with_bad_value("c", [13], np.nan), 5)
    with pytest.raises(InputValidationError, match=r"^Input contains NaN or infinity: view 'c', chunk 2 "
                                                   r"\(first bad row 13\)\.$"):
        RowBlocks(bad).reduce(_moments, _weights(), width=WIDTH)


def test_take_gathers_rows_of_every_view_in_one_task_per_chunk():
    # RowBlocks.take: the rows of every view in order (repeats kept), whether every chunk holds
    # some (one task per chunk) or few do (only those chunks are read).
    x = np.arange(300.0).reshape(100, 3)
    y = -x[:, :2]
    rows = RowBlocks({"a": da.from_array(x, chunks=(7, -1)), "b": da.from_array(y, chunks=(7, -1))})
    for take in (np.arange(0, 100, 3), np.array([3, 3, 8, 99]), np.array([], dtype=np.int64)):
        got = rows.take(take)
        np.testing.assert_array_equal(got[0], x[take])
        np.testing.assert_array_equal(got[1], y[take])
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(rows.take(np.array([50]))[1], y[[50]])
