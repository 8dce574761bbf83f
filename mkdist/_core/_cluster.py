"""Computing on the Dask cluster: which client computes, graphs its scheduler can read, persisting.

Fits and stages keep a few results between passes (an embedding before the k-means passes,
power k-means' features, a stage's labels before they are written).  They all ask Dask the
same way which distributed client, if any, computes (:func:`active_client`), persist the same
way (:func:`persist_and_wait`) and compute the same way (:func:`compute`).

Graphs go to a distributed scheduler *opaque* (:func:`opaque_graph_dict`): every task is pickled on
the client and unpickled only by the worker that runs it.  Left to itself, the scheduler
unpickles and materializes every graph, so the first graph of a run makes a fresh ``dask
scheduler`` process import what the tasks reference - scikit-learn, SciPy, xarray, zarr,
pandas, about 1,400 modules: 1.5 s before the first task and 0.9 s before the embedding's on a
1M-row run, with the workers idle (``bench/RESULTS.md``, "Plain clusters").  This module
imports only the standard library at the top, so the scheduler's only import is this light one.
Only Dask's and distributed's public API is used (the collection protocol, ``dask.optimize``,
:mod:`dask.task_spec`, ``Client.get``), so a Dask release changes nothing here unannounced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["active_client", "compute", "compute_here", "opaque_graph_dict", "persist_and_wait", "unfused"]


def active_client():
    """The distributed ``Client`` that is the current Dask scheduler, else None.

    Asked of ``dask.base.get_scheduler`` rather than ``distributed.get_client``: inside
    ``dask.config.set(scheduler=...)`` (a test's synchronous scheduler, a user's threads) a
    default client exists but does not compute, and ``dask.persist`` would not use it either.

    Returns
    -------
    distributed.Client or None
    """
    from dask.base import get_scheduler

    client = getattr(get_scheduler(), "__self__", None)
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    return client if isinstance(client, Client) else None


def persist_and_wait(x: Any, *, watch: Callable[[Any], None] | None = None) -> Any:
    """Persist Dask collections on the active scheduler and return once they are computed.

    On a distributed cluster the graph goes to the scheduler opaque (:func:`opaque_graph_dict`)
    and the results stay on the workers as futures; a failed task's own exception is raised
    here, after every key of ``x`` is released: the scheduler would otherwise hand the same
    error to a re-run (same input, same deterministic keys) instead of recomputing.  On a
    local scheduler ``dask.persist`` computes in this process.

    Parameters
    ----------
    x : Dask collection, or a list/tuple of them (or Delayed objects)
    watch : callable, optional
        Called with the persisted collection(s) before waiting, on a cluster only (e.g. a
        progress bar over their futures); an exception or interrupt in it releases the keys too.

    Returns
    -------
    The persisted collection(s): the same structure as ``x`` (a list for a list or tuple on
    a cluster).
    """
    import dask

    client = active_client()
    if client is None:
        return dask.persist(x)[0]
    from distributed import futures_of, wait

    many = isinstance(x, (list, tuple))
    x = _submit_opaque(client, list(x) if many else [x])
    futures = futures_of(x)
    try:
        if watch is not None:
            watch(x if many else x[0])
        wait(futures)
        failed = [f for f in futures if f.status == "error"]
        if failed:
            failed[0].result()  # raises the task's own exception
    except BaseException:
        # Released, not cancelled: a release goes to the scheduler on the same stream as the
        # next graph, so a re-run of the same keys right after is a new computation; a
        # cancel's report comes back later and cancelled the re-run's futures too.
        for f in futures:
            f.release()
        raise
    return x if many else x[0]


def compute(*args: Any) -> tuple:
    """``dask.compute(*args)``; on a distributed cluster through :func:`persist_and_wait`
    (the graph sent opaque, a failed task's keys released) and the chunks gathered here.

    Arguments are traversed as ``dask.compute`` does (collections inside lists, tuples and
    dicts are computed); anything else passes through.
    """
    import dask

    client = active_client()
    if client is None:
        return dask.compute(*args)
    from distributed import futures_of

    collections: list = []
    _traverse(args, collections.append)
    if not collections:
        return args
    persisted = persist_and_wait(collections)
    futures = {f.key: f for f in futures_of(persisted)}
    data = dict(zip(futures, client.gather(list(futures.values()))))
    results = []
    for c in collections:
        finalize, extra = c.__dask_postcompute__()
        results.append(finalize(_nested(c.__dask_keys__(), data), *extra))
    done = iter(results)
    return _traverse(args, lambda _: next(done))


def _traverse(obj: Any, visit: Callable[[Any], Any]) -> Any:
    """``obj`` with every Dask collection in it (inside lists, tuples and dicts) replaced by
    ``visit(collection)``, in a fixed order (the order :func:`compute` relies on)."""
    from dask import is_dask_collection

    if is_dask_collection(obj):
        return visit(obj)
    if isinstance(obj, list):
        return [_traverse(v, visit) for v in obj]
    if isinstance(obj, tuple):
        items = [_traverse(v, visit) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)  # namedtuples keep their type
    if isinstance(obj, dict):
        return {k: _traverse(v, visit) for k, v in obj.items()}
    return obj


def unfused(x: Any) -> Any:
    """The Dask array ``x``, optimized now and sealed: its tasks (each already fused with its own
    inputs, e.g. a chunk's read) are never fused into the tasks that use them.

    Blockwise fusion puts a blockwise layer into *each* blockwise layer that uses it: a task
    whose result two tasks use (a chunk's embedding and its scan partial, say) was computed
    twice, reads included.  Sealed, it is computed once and its result passed to both.
    """
    import dask
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    (opt,) = dask.optimize(x)
    graph = HighLevelGraph({opt.name: MaterializedLayer(dict(opt.__dask_graph__()))}, {opt.name: set()})
    return da.Array(graph, opt.name, opt.chunks, meta=opt._meta)


def compute_here(*arrays: Any) -> list:
    """Small stored arrays (a model, landmark rows, centroids) read into memory in this process.

    Read with threads here, not through the cluster: each would be a round trip to the
    workers (a run's model stage holds a dozen arrays; read through a fresh cluster they
    took 0.5 s of a 1M-row run, two reads of a 200k-row re-run 9 s on a busy machine).
    The process reading a run store can read it: it opened the store.

    Parameters
    ----------
    *arrays : NumPy or Dask arrays (or xarray variables' ``.data``)

    Returns
    -------
    list of ndarray, one per argument
    """
    import dask
    import numpy as np

    return [np.asarray(a) for a in dask.compute(*arrays, scheduler="threads")]


def _nested(keys: Any, data: dict) -> Any:
    """The values of ``keys`` (a key or nested lists of keys, as ``__dask_keys__`` gives)."""
    return [_nested(k, data) for k in keys] if isinstance(keys, list) else data[keys]


def _submit_opaque(client, collections: list) -> list:
    """The collections computed on ``client`` from an opaque graph, rebuilt on their futures.

    Sent as a low-level graph (``Client.get``): a collection would travel with its own
    objects (a Dask array's finalize step imports ``dask.array``, which imports xarray and
    pandas on the scheduler), a plain dict of opaque tasks with nothing but this module.
    """
    from distributed import futures_of

    graph = opaque_graph_dict(collections)
    keys = [_flat(c.__dask_keys__()) for c in collections]
    # Output keys missing from the optimized graph are already on the cluster (a collection
    # persisted earlier): their futures are taken as they are.  Looked up only then, since
    # futures_of walks (and materializes) every graph.
    missing = any(k not in graph for ks in keys for k in ks)
    held = {f.key: f for f in futures_of(collections)} if missing else {}
    wanted = list(dict.fromkeys(k for ks in keys for k in ks if k in graph or k not in held))
    futures = dict(zip(wanted, client.get(graph, wanted, sync=False))) if wanted else {}
    futures = {**held, **futures}
    rebuilt = []
    for c, ks in zip(collections, keys):
        rebuild, extra = c.__dask_postpersist__()
        rebuilt.append(rebuild({k: futures[k] for k in ks}, *extra))
    return rebuilt


def _flat(keys: Any) -> list:
    """The keys of ``__dask_keys__()`` (a key or nested lists of keys) in one list."""
    return [k for sub in keys for k in _flat(sub)] if isinstance(keys, list) else [keys]


def opaque_graph_dict(collections: list) -> dict:
    """The low-level graph of ``collections``, materialized and optimized here, every task opaque.

    Optimized together (``dask.optimize``), as ``Client.persist`` would have the scheduler do it
    (shared upstream tasks stay shared, fused tasks keep their output keys), and materialized
    through the collection protocol (``__dask_graph__``).  Each task becomes a
    :class:`dask.task_spec.Task` calling :func:`run_opaque` on its pickled self, with the same
    key and the same dependencies, so the scheduler orders and places nothing differently but
    never unpickles what a task calls or holds (why: see the module docstring).  Aliases and
    data nodes holding NumPy arrays (not of objects) or plain Python values stay as they are:
    the scheduler reads those without imports.  Dask annotations (``dask.annotate``) and the
    data-producer mark of input tasks are not carried over; mkdist sets no annotation, and the
    scheduler's root-task heuristic (groups much larger than the cluster) covers the row tasks.

    Only the public Dask API is used: ``dask.optimize``, the collection protocol and the task
    classes of :mod:`dask.task_spec` (a node called with its dependencies' values).

    Parameters
    ----------
    collections : list of Dask collections

    Returns
    -------
    dict
        Key -> :class:`dask.task_spec.GraphNode`, for ``Client.get``.
    """
    import dask

    graph: dict = {}
    for c in dask.optimize(*collections):
        # Collections optimized together usually share one graph: materialized once.
        if graph and all(k in graph for k in _flat(c.__dask_keys__())):
            continue
        graph.update(c.__dask_graph__())
    return {key: _opaque_node(key, node) for key, node in graph.items()}


#: Values the scheduler unpickles without importing anything beyond NumPy.
_PLAIN = (type(None), bool, int, float, complex, str, bytes, slice, range)


def _opaque_node(key, node):
    import cloudpickle
    import numpy as np
    from dask.task_spec import Alias, DataNode, GraphNode, Task, TaskRef

    if not isinstance(node, GraphNode):
        # A legacy tuple or a persisted collection's future: left for the scheduler to read.
        return node
    if isinstance(node, Alias):
        return node
    if isinstance(node, DataNode):
        value = node.value
        if isinstance(value, _PLAIN) or (isinstance(value, np.ndarray) and value.dtype != object):
            return node
    deps = tuple(node.dependencies)
    return Task(key, run_opaque, cloudpickle.dumps((deps, node)), *(TaskRef(k) for k in deps))


def run_opaque(payload: bytes, *values: Any) -> Any:
    """Run a task pickled by :func:`opaque_graph_dict` on its dependencies' values (on a worker).

    Parameters
    ----------
    payload : bytes
        The pickled pair (dependency keys, task node).
    *values
        The dependencies' values, in the order of their keys.
    """
    import pickle

    keys, node = pickle.loads(payload)
    return node(dict(zip(keys, values)))
