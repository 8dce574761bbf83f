"""The method registry: every estimator that ``mkdist.cluster``, the CLI and the flows can run.

Each method module registers its class at its bottom (``register(MyEstimator)``), as
xarray's backends fill ``BACKEND_ENTRYPOINTS``.  The built-in methods are named without being
imported: the registry starts with one entry per name of
:data:`mkdist._methods._params.BUILTIN_PARAMETERS` (its module and parameter table, which
need neither scikit-learn nor Dask), holding None until the class is loaded, and
:func:`get_method` imports a built-in method's module the first time its class is asked for.
``mkdist/__init__.py`` imports no method module either: it loads its public names lazily
(lazy_loader), so ``import mkdist``, listing the methods (:func:`available_methods`) and
checking a method's parameters (:func:`method_parameters`) load no estimator class, and the
CLI refuses a bad argument before scikit-learn is imported.  The class carries what the
pipeline needs to know (its ``method`` name, whether it takes several views, its stage plan,
its state format); the pipeline asks the registry instead of branching on names.

This module imports no method module at import time (they import it; :func:`get_method`
imports a built-in one by its module name when first asked), so the arrows point down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._core._cluster import compute
from .._core._kernel_specs import SPARSE_DENSITY, view_density
from .._core._validation import as_views, collect_constraints
from ..errors import InputValidationError
from ._params import BUILTIN_PARAMETERS

__all__ = ["DEFAULT_METHOD", "AUTO_METHOD", "register", "unregister", "registered", "get_method",
           "available_methods", "method_parameters", "method_table", "MethodChoice", "data_facts", "choose_method"]

#: Method name -> its estimator class; None for a built-in method whose module is not imported
#: yet (importing it registers the class; see :func:`get_method`).  Built-in classes load on
#: first use so that naming and checking a method needs no scikit-learn (mkdist._methods._params).
_REGISTRY: dict[str, type | None] = dict.fromkeys(BUILTIN_PARAMETERS)

#: The method runs use when none is named: the project's main method, multiple kernel
#: clustering on landmarks (SimpleMKKM + MKC-AE).
DEFAULT_METHOD = "mkc"

#: The method name that asks :func:`choose_method` to pick the method from the data.
AUTO_METHOD = "auto"

#: What a registered class must declare (see ``mkdist._methods._base.MkdistEstimator``).
_REQUIRED = ("method", "multi_view", "stage_plan", "state_format")


def register(cls: type) -> type:
    """Add an estimator class to the registry under ``cls.method``; returns the class.

    Raises
    ------
    ValueError
        The class lacks registry metadata, its stage plan is not one the pipeline runs, its
        constraint table does not name exactly its ``__init__`` parameters, or another class
        holds the name.
    """
    from ._base import STAGE_PLANS

    missing = [a for a in _REQUIRED if not getattr(cls, a, None) and a != "multi_view"]
    if missing:
        raise ValueError(f"{cls.__name__} cannot be registered: it does not declare {missing}.")
    if tuple(cls.stage_plan) not in STAGE_PLANS:
        raise ValueError(f"{cls.__name__}.stage_plan={cls.stage_plan!r} is not one of {STAGE_PLANS}.")
    # The pipeline and the CLI accept exactly the parameters of the table (method_parameters).
    declared = set(collect_constraints(cls, "_param_constraints"))
    taken = {p.name for p in inspect.signature(cls.__init__).parameters.values()
             if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if declared != taken:
        raise ValueError(f"{cls.__name__}'s _param_constraints must name exactly its __init__ parameters: "
                         f"missing {sorted(taken - declared)}, extra {sorted(declared - taken)}.")
    other = _REGISTRY.get(cls.method)
    if other is not None and other is not cls:
        raise ValueError(f"method name {cls.method!r} is taken by {other.__name__}.")
    _REGISTRY[cls.method] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a method (tests register temporary ones)."""
    _REGISTRY.pop(name, None)


@contextlib.contextmanager
def registered(cls: type) -> Iterator[type]:
    """Register ``cls`` for the duration of a ``with`` block."""
    register(cls)
    try:
        yield cls
    finally:
        unregister(cls.method)


def get_method(name: str) -> type:
    """The estimator class registered as ``name``.

    Raises
    ------
    InputValidationError
        Unknown name; the message lists the valid ones.
    """
    try:
        cls = _REGISTRY[name]
    except (KeyError, TypeError):
        raise InputValidationError(
            f"unknown method {name!r}; choose one of {available_methods()}.") from None
    if cls is None:  # a built-in method not loaded yet: its module registers it
        import importlib

        importlib.import_module(BUILTIN_PARAMETERS[name][0])
        cls = _REGISTRY[name]
    return cls


def method_parameters(name: str) -> dict[str, list]:
    """The constraint table of a method's parameters (its estimator's ``__init__`` arguments),
    merged along the class's bases, without importing a built-in class that is not loaded yet.

    Raises
    ------
    InputValidationError
        Unknown name; the message lists the valid ones.
    """
    if isinstance(name, str) and name in _REGISTRY and _REGISTRY[name] is None:
        return BUILTIN_PARAMETERS[name][1]
    return collect_constraints(get_method(name), "_param_constraints")


def available_methods() -> list[str]:
    """Registered method names, in registration order."""
    return list(_REGISTRY)


def method_table() -> list[dict]:
    """One row per registered method: name, class, views, stage plan, one-line description."""
    rows = []
    for name in list(_REGISTRY):
        cls = get_method(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        rows.append({"method": name, "estimator": cls.__name__,
                     "views": "several" if cls.multi_view else "one",
                     "stages": " -> ".join(cls.stage_plan), "description": doc[0].rstrip(".") if doc else ""})
    return rows


def method_table_markdown() -> str:
    """The registry as the README's markdown table."""
    lines = ["| method | estimator | views | stages | what |", "|---|---|---|---|---|"]
    lines += [f"| `{r['method']}` | `{r['estimator']}` | {r['views']} | {r['stages']} | {r['description']} |"
              for r in method_table()]
    return "\n".join(lines) + "\n"


# ============================================================================ method="auto"
#: Rows read to measure the views' sparsity (the first rows: one chunk of a Dask input).
FACT_ROWS = 1000


@dataclasses.dataclass
class MethodChoice:
    """What ``method="auto"`` picked for an input, and why.

    Attributes
    ----------
    method : str
        A registered method.
    params : dict
        Estimator parameters the rule sets (the user's own parameters override them).
    reason : str
        One sentence: the facts of the data that decided, and the measurement behind the rule.
    facts : dict
        ``n_samples``, ``n_views``, ``dims``, ``density`` (per view, on the first rows).
    """

    method: str
    params: dict[str, Any]
    reason: str
    facts: dict[str, Any]

    def make_estimator(self, n_clusters: int, **params: Any):
        """The chosen estimator with the rule's parameters (``params`` override them)."""
        return get_method(self.method)(n_clusters, **{**self.params, **params})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def data_facts(views: Any) -> dict[str, Any]:
    """The shape of an input that :func:`choose_method` decides on, reading at most FACT_ROWS rows.

    Parameters
    ----------
    views : array or list/dict of arrays (NumPy or Dask) of shape (N, d_v)

    Returns
    -------
    dict
        ``n_samples`` N, ``n_views``, ``dims`` (list of d_v), ``density`` (list: share of
        non-zero entries of each view on its first rows), ``sparse_views`` (names of the views
        below ``mkdist._core._kernel_specs.SPARSE_DENSITY``).
    """
    views = as_views(views)
    n = int(next(iter(views.values())).shape[0])
    rows = min(n, FACT_ROWS)
    density = []
    for v in views.values():
        head = v[:rows]
        head = np.asarray(compute(head)[0])
        density.append(round(view_density(head), 4))
    return {"n_samples": n, "n_views": len(views), "dims": [int(v.shape[1]) for v in views.values()],
            "density": density,
            "sparse_views": [name for name, d in zip(views, density) if d < SPARSE_DENSITY]}


#: ``method="auto"`` picks late fusion when every view is dense with at least this many
#: features (raw images: the two MNIST/USPS sets, where GMLKM reaches ACC 0.965-0.972 against
#: 0.70-0.86 for MultipleKernelClustering and 0.91 for k-means; bench/RESULTS.md, quality).
LATE_FUSION_MIN_DIM = 256

def choose_method(views: Any, n_clusters: int) -> MethodChoice:
    """The method (and kernels) ``method="auto"`` runs on an input, from its shape alone.

    The rule, measured on the 28 shared multi-view sets (``bench/bench_quality.py``):

    * every view dense (at least 10% non-zero entries) with >= ``LATE_FUSION_MIN_DIM``
      features: ``late-fusion`` with its defaults;
    * otherwise ``mkc`` with ``kernels="auto"`` (cosine on sparse views, three RBF kernels on
      dense ones) and its default embedding (2K columns for K <= 10, K above).

    Parameters
    ----------
    views : array or list/dict of arrays (NumPy or Dask) of shape (N, d_v)
        Only the shapes and the first ``FACT_ROWS`` rows are read.
    n_clusters : int

    Returns
    -------
    MethodChoice
    """
    facts = data_facts(views)
    dims, sparse = facts["dims"], facts["sparse_views"]
    if not sparse and min(dims) >= LATE_FUSION_MIN_DIM:
        return MethodChoice(
            "late-fusion", {},
            f"every view is dense with >= {LATE_FUSION_MIN_DIM} features (dims {dims}), like the raw images "
            "where graph-filtered late fusion beat the other methods (bench/RESULTS.md, quality)", facts)
    what = (f"views {sparse} are sparse (cosine kernel), the others dense (RBF kernels)" if sparse
            else "every view is dense (RBF kernels)")
    return MethodChoice("mkc", {"kernels": "auto"},
                        f"{what}: multiple kernel clustering with its default embedding (bench/RESULTS.md, quality)",
                        facts)
