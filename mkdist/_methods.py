"""The method registry: every estimator that ``mkdist.cluster``, the CLI and the flows can run.

Each method module registers its class at its bottom (``register(MyEstimator)``), as
xarray's backends fill ``BACKEND_ENTRYPOINTS``; ``mkdist/__init__.py`` imports every method
module, so importing ``mkdist`` fills the registry.  The class carries what the pipeline
needs to know (its ``method`` name, whether it takes several views, its stage plan, its
state format); the pipeline asks the registry instead of branching on names.

This module imports no method module (they import it), so the arrows point down.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._base import STAGE_PLANS
from .errors import InputValidationError

__all__ = ["DEFAULT_METHOD", "register", "unregister", "registered", "get_method", "available_methods", "method_table"]

_REGISTRY: dict[str, type] = {}

#: The method runs use when none is named: the project's main method, multiple kernel
#: clustering on landmarks (SimpleMKKM + MKC-AE).
DEFAULT_METHOD = "mkc"

#: What a registered class must declare (see ``mkdist._base.MkdistEstimator``).
_REQUIRED = ("method", "multi_view", "stage_plan", "state_format")


def register(cls: type) -> type:
    """Add an estimator class to the registry under ``cls.method``; returns the class.

    Raises
    ------
    ValueError
        The class lacks registry metadata, its stage plan is not one the pipeline runs, or
        another class holds the name.
    """
    missing = [a for a in _REQUIRED if not getattr(cls, a, None) and a != "multi_view"]
    if missing:
        raise ValueError(f"{cls.__name__} cannot be registered: it does not declare {missing}.")
    if tuple(cls.stage_plan) not in STAGE_PLANS:
        raise ValueError(f"{cls.__name__}.stage_plan={cls.stage_plan!r} is not one of {STAGE_PLANS}.")
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
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise InputValidationError(
            f"unknown method {name!r}; choose one of {available_methods()}.") from None


def available_methods() -> list[str]:
    """Registered method names, in registration order."""
    return list(_REGISTRY)


def method_table() -> list[dict]:
    """One row per registered method: name, class, views, stage plan, one-line description."""
    rows = []
    for name, cls in _REGISTRY.items():
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
