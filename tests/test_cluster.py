"""Computing on a distributed cluster: opaque graphs, compute/persist semantics, a light scheduler."""

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import mkdist
from mkdist._core._cluster import compute, compute_here, opaque_graph_dict, persist_and_wait, run_opaque

from .conftest import dask_processes, make_blobs_views


def _data():
    x = da.from_array(np.arange(60.0).reshape(20, 3), chunks=(7, 3))
    return x, (x * 2).sum(axis=1)


def test_every_task_of_an_opaque_graph_calls_run_opaque_with_the_same_keys_and_dependencies():
    from dask.task_spec import Alias, DataNode, Task

    x, y = _data()
    both = [y + 1, dask.delayed(np.add)(1, 2)]
    plain = {}
    for c in dask.optimize(*both):
        plain.update(c.__dask_graph__())
    opaque = opaque_graph_dict(both)
    assert set(opaque) == set(plain)
    for key, node in opaque.items():
        assert node.dependencies == plain[key].dependencies, key
        if isinstance(node, Task):
            assert node.func is run_opaque, key
        elif not isinstance(node, Alias):  # kept: the scheduler reads NumPy arrays and plain values as they are
            assert isinstance(node, DataNode) and isinstance(node.value, (np.ndarray, int, float, str)), key
    assert any(isinstance(n, Task) for n in opaque.values())


def test_an_opaque_task_gives_what_the_task_gives():
    from dask.task_spec import Task

    x, y = _data()
    plain = {}
    for c in dask.optimize(y):
        plain.update(c.__dask_graph__())
    opaque = opaque_graph_dict([y])
    values: dict = {}
    for key in dask.order.order(plain):  # dependencies first
        node = opaque[key]
        got = node({k: values[k] for k in node.dependencies})
        want = plain[key]({k: values[k] for k in plain[key].dependencies})
        np.testing.assert_array_equal(got, want)
        values[key] = got
        assert not isinstance(node, Task) or node.func is run_opaque
    np.testing.assert_array_equal(np.concatenate([values[k] for k in y.__dask_keys__()]), (x * 2).sum(axis=1).compute())


def test_object_arrays_are_sent_opaque_numeric_arrays_as_they_are():
    from dask.task_spec import DataNode, Task

    objects = np.array([{"a": 1}, None], dtype=object)
    numbers = np.arange(3.0)
    graph = opaque_graph_dict([dask.delayed(len)(dask.delayed(objects)), dask.delayed(len)(dask.delayed(numbers))])
    data = [n.value for n in graph.values() if isinstance(n, DataNode)]
    assert any(v is numbers for v in data)
    assert not any(isinstance(v, np.ndarray) and v.dtype == object for v in data)
    opaque_data = [n() for n in graph.values() if isinstance(n, Task) and not n.dependencies]
    assert any(isinstance(v, np.ndarray) and v.dtype == object for v in opaque_data)


def test_compute_and_persist_on_a_cluster_give_what_dask_gives(dask_client):
    x, y = _data()
    expected = dask.compute({"x": x, "parts": [y, y.sum()]}, 7, x[3:5], scheduler="synchronous")
    got = compute({"x": x, "parts": [y, y.sum()]}, 7, x[3:5])
    assert got[1] == 7
    np.testing.assert_array_equal(got[0]["x"], expected[0]["x"])
    np.testing.assert_array_equal(got[0]["parts"][0], expected[0]["parts"][0])
    assert float(got[0]["parts"][1]) == float(expected[0]["parts"][1])
    np.testing.assert_array_equal(got[2], expected[2])

    persisted = persist_and_wait([x, y])  # then computed again, from the futures
    assert isinstance(persisted, list) and len(persisted) == 2
    np.testing.assert_array_equal(compute(persisted[1] + 1)[0], expected[0]["parts"][0] + 1)
    single = persist_and_wait(y)
    assert isinstance(single, da.Array)
    np.testing.assert_array_equal(compute(single)[0], expected[0]["parts"][0])
    assert compute(dask.delayed(sum)([1, 2, 3])) == (6,)
    assert compute() == () and compute(3, "a") == (3, "a")


def _fails(block):
    raise ValueError("bad block on purpose")


def test_a_failed_task_raises_its_own_error_and_the_same_graph_runs_again(dask_client):
    x, _ = _data()
    bad = x.map_blocks(_fails, dtype=float)
    for _ in range(2):  # the keys are released: the second run fails by running, not by memory
        with pytest.raises(ValueError, match="bad block on purpose"):
            compute(bad.sum())
    assert not [k for k in dask_client.who_has() if "_fails" in str(k)]  # nothing of it left on the workers


def test_compute_here_reads_in_this_process_even_with_a_cluster(dask_client, tmp_path):
    xr.Dataset({"a": (("r",), np.arange(5.0))}).to_zarr(tmp_path / "s.zarr", zarr_format=3, consolidated=False)
    a = xr.open_zarr(tmp_path / "s.zarr", consolidated=False)["a"].data
    with dask.config.set(scheduler=lambda *args, **kw: pytest.fail("went through the active scheduler")):
        (got,) = compute_here(a)
    np.testing.assert_array_equal(got, np.arange(5.0))


@pytest.fixture
def fresh_dask_scheduler():
    """A `dask scheduler` process that has run nothing yet, and one `dask worker`."""
    with dask_processes(1) as address:
        yield address


HEAVY = ("sklearn", "scipy", "xarray", "pandas", "zarr", "pyarrow", "dask.array")


def _heavy_modules_loaded(client) -> list:
    # Asked through builtins.eval: a function of this module would make the scheduler import
    # this module, and with it the numerical stack.
    return client.run_on_scheduler(eval, f"sorted(m for m in {HEAVY!r} if m in __import__('sys').modules)")


def test_a_whole_run_leaves_a_fresh_scheduler_without_the_numerical_stack(fresh_dask_scheduler, tmp_path):
    """The scheduler unpickles every graph it gets; a run's graphs must not make it import
    scikit-learn, SciPy, xarray, zarr or pandas (1.5 s + 0.9 s of a 1M-row run while the
    workers waited, on a fresh `dask scheduler`)."""
    from distributed import Client

    views, y = make_blobs_views(n_per_cluster=150, n_clusters=3, seed=1)
    src = tmp_path / "in.zarr"
    xr.Dataset({f"view{i}": (("sample", f"f{i}"), v) for i, v in enumerate(views)}).chunk({"sample": 150}).to_zarr(
        src, zarr_format=3, consolidated=False)
    with Client(fresh_dask_scheduler) as client:
        client.wait_for_workers(1, timeout=60)
        assert _heavy_modules_loaded(client) == []
        res = mkdist.cluster(str(src), str(tmp_path / "run.zarr"), n_clusters=3, n_landmarks=60, random_state=0)
        assert _heavy_modules_loaded(client) == []
        labels = np.asarray(res.labels.compute())
    assert mkdist.clustering_scores(y, labels)["acc"] > 0.95
