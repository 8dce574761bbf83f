"""Kernel specs: what a base kernel is before and after it is fitted, and the named kernel sets.

A *kernel spec* (:class:`KernelSpec`) names the view it reads, its type and its parameters;
fitted once on the landmarks (``mkdist._core._kernels.fit_kernels``) it becomes a
:class:`FittedKernel`, whose bandwidth heuristics are numbers.  The named sets
(:data:`STANDARD_KERNEL_SETS`, and :data:`DATA_KERNEL_SETS` whose set depends on a view's rows,
judged sparse or dense by :func:`view_density`) expand into specs for every view
(:func:`resolve_kernel_specs`).

This module needs only NumPy: the parameter tables (``mkdist._methods._params``), which the CLI
reads without scikit-learn or scipy, import :class:`KernelSpec` from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..errors import InputValidationError

__all__ = [
    "KernelSpec",
    "FittedKernel",
    "KERNEL_KINDS",
    "BANDWIDTH_RULES",
    "STANDARD_KERNEL_SETS",
    "DATA_KERNEL_SETS",
    "SPARSE_DENSITY",
    "view_density",
    "rbf_grid",
    "resolve_kernel_specs",
    "auto_specs_for_table",
    "is_indicator_block",
]

KernelKind = Literal["rbf", "laplacian", "polynomial", "linear", "cosine"]
KERNEL_KINDS = ("rbf", "laplacian", "polynomial", "linear", "cosine")
#: "mean": sigma^2 = mean squared pairwise distance (bipartite-spectral paper eq. 24, and the
#: SimpleMKKM authors' large-scale code); "median": sigma = median pairwise distance;
#: "max": sigma = largest pairwise distance (the D of the standard 12-kernel set).
BANDWIDTH_RULES = ("mean", "median", "max")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """What one base kernel is, before it is fitted to the landmarks.

    Parameters
    ----------
    view : str or int
        Name (or position) of the view the kernel reads.
    kind : {"rbf", "laplacian", "polynomial", "linear", "cosine"}
        ``rbf``: exp(-||x - y||^2 / (2 sigma^2)); ``laplacian``: exp(-||x - y|| / sigma)
        (Euclidean distance, so it shares the view's GEMM); ``polynomial``: (x.y + coef0)^degree;
        ``linear``: x.y; ``cosine``: x.y / (||x|| ||y||) (0 for a zero row).
    bandwidth : float or None, default=None
        Explicit sigma (> 0) for rbf/laplacian.  ``None`` uses ``bandwidth_rule``.
    bandwidth_rule : {"mean", "median", "max"}, default="mean"
        Heuristic estimated once on the landmarks (see ``BANDWIDTH_RULES``).
    multiplier : float, default=1.0
        sigma = multiplier * heuristic (or explicit bandwidth): a grid of multipliers
        turns one view into several base kernels (see :func:`rbf_grid`).
    degree, coef0 : float
        Polynomial parameters.
    """

    view: str | int
    kind: KernelKind = "rbf"
    bandwidth: float | None = None
    bandwidth_rule: str = "mean"
    multiplier: float = 1.0
    degree: float = 2.0
    coef0: float = 1.0

    def __post_init__(self):
        if self.kind not in KERNEL_KINDS:
            raise InputValidationError(f"unknown kernel kind {self.kind!r}; choose one of {KERNEL_KINDS}.")
        if self.kind in ("rbf", "laplacian"):
            if self.bandwidth is not None and not (np.isfinite(self.bandwidth) and self.bandwidth > 0):
                raise InputValidationError(
                    f"kernel on view {self.view!r}: bandwidth={self.bandwidth!r} must be > 0."
                )
            if self.bandwidth is None and self.bandwidth_rule not in BANDWIDTH_RULES:
                raise InputValidationError(
                    f"unknown bandwidth_rule {self.bandwidth_rule!r}; choose one of {BANDWIDTH_RULES}."
                )
            if not (np.isfinite(self.multiplier) and self.multiplier > 0):
                raise InputValidationError(f"kernel multiplier={self.multiplier!r} must be > 0.")
        if self.kind == "polynomial" and not (np.isfinite(self.degree) and self.degree > 0):
            raise InputValidationError(f"polynomial degree={self.degree!r} must be > 0.")

    @classmethod
    def from_any(cls, spec: Any) -> KernelSpec:
        """Build a spec from a KernelSpec, a dict, or a ``(view, kind)`` pair."""
        if isinstance(spec, KernelSpec):
            return spec
        if isinstance(spec, Mapping):
            unknown = set(spec) - {f.name for f in dataclasses.fields(cls)}
            if unknown:
                raise InputValidationError(f"unknown kernel spec keys {sorted(unknown)} in {dict(spec)!r}.")
            if "view" not in spec:
                raise InputValidationError(f"kernel spec {dict(spec)!r} must name its `view`.")
            return cls(**spec)
        if isinstance(spec, tuple) and len(spec) == 2:
            return cls(view=spec[0], kind=spec[1])
        raise InputValidationError(
            f"cannot read a kernel spec from {spec!r}; pass a KernelSpec, a dict with 'view' and "
            "'kind', or a (view, kind) tuple."
        )


@dataclasses.dataclass(frozen=True)
class FittedKernel:
    """A base kernel with every parameter fixed (bandwidth estimated on the landmarks).

    ``sigma`` is the final bandwidth (rule value x multiplier); ``statistic`` the raw
    heuristic value it came from (stored so a user can see it).
    """

    view: str
    kind: str
    sigma: float | None = None
    degree: float = 2.0
    coef0: float = 1.0
    bandwidth_rule: str | None = None
    multiplier: float = 1.0
    statistic: float | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping) -> FittedKernel:
        return cls(**d)

    @property
    def name(self) -> str:
        if self.kind in ("rbf", "laplacian"):
            return f"{self.view}:{self.kind}(sigma={self.sigma:.4g})"
        if self.kind == "polynomial":
            return f"{self.view}:poly(d={self.degree:g},c={self.coef0:g})"
        return f"{self.view}:{self.kind}"


def rbf_grid(view: str | int, multipliers: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
             rule: str = "mean", kind: KernelKind = "rbf") -> list[KernelSpec]:
    """Several RBF (or Laplacian) kernels on one view: sigma = heuristic * multiplier.

    >>> [k.multiplier for k in rbf_grid("pix", [0.5, 1, 2])]
    [0.5, 1, 2]
    """
    return [KernelSpec(view=view, kind=kind, bandwidth_rule=rule, multiplier=m) for m in multipliers]


def _mkkm12(view: str) -> list[KernelSpec]:
    # Du et al. 2015 / GMLKM experiments: 7 Gaussians exp(-d^2 / (2 (t D)^2)), D the largest
    # pairwise distance; 4 polynomials (x.y + a)^b; one cosine.
    specs = [KernelSpec(view=view, kind="rbf", bandwidth_rule="max", multiplier=t)
             for t in (0.01, 0.05, 0.1, 1.0, 10.0, 50.0, 100.0)]
    specs += [KernelSpec(view=view, kind="polynomial", coef0=a, degree=b) for a in (0.0, 1.0) for b in (2.0, 4.0)]
    specs.append(KernelSpec(view=view, kind="cosine"))
    return specs


#: ``kernels=None``: cosine on sparse views, ``rbf-grid`` on the others ("auto" below; on
#: dense views it is exactly the earlier default "rbf-grid").
DEFAULT_KERNEL_SET = "auto"

#: Named kernel sets, expanded for every view: ``kernels="rbf"`` etc.
STANDARD_KERNEL_SETS = {
    "rbf": lambda v: [KernelSpec(view=v, kind="rbf", bandwidth_rule="mean")],
    "rbf-median": lambda v: [KernelSpec(view=v, kind="rbf", bandwidth_rule="median")],
    "rbf-grid": lambda v: rbf_grid(v, (0.5, 1.0, 2.0)),
    "rbf-grid5": lambda v: rbf_grid(v),
    "linear": lambda v: [KernelSpec(view=v, kind="linear")],
    "mkkm12": _mkkm12,
}


#: A view whose share of non-zero entries is below this is "sparse" (bag of words, graph
#: adjacency).  The shared multi-view sets split cleanly there: every text and graph view has
#: 0.001-0.056, every image or descriptor view 0.19 or more (bench/RESULTS.md, quality).
SPARSE_DENSITY = 0.1


def view_density(X: Any) -> float:
    """Share of non-zero entries of an in-memory block of rows."""
    X = np.asarray(X)
    return float(np.count_nonzero(X)) / max(X.size, 1)


def _auto_set(view: str, rows: np.ndarray | None) -> list[KernelSpec]:
    # A sparse view (text, graph) gets the cosine kernel: Euclidean distances between
    # bag-of-words rows are dominated by the rows' lengths, cosines are not.
    if rows is not None and view_density(rows) < SPARSE_DENSITY:
        return [KernelSpec(view=view, kind="cosine")]
    return rbf_grid(view, (0.5, 1.0, 2.0))


#: Kernel sets that look at the data: the set of each view depends on its rows (the
#: landmarks).  Resolved without rows (parameter checks), every view counts as dense.
DATA_KERNEL_SETS = {"auto": _auto_set}


def is_indicator_block(rows: Any) -> bool:
    """Whether the rows are a categorical view's one-hot indicators: every value in [0, 1] and
    at least 99% of them exactly 0 or 1 (an imputed cell may hold a share in between)."""
    X = np.asarray(rows)
    if X.size == 0 or not np.all((X >= 0) & (X <= 1)):
        return False
    return float(np.mean((X == 0) | (X == 1))) >= 0.99


def auto_specs_for_table(landmark_views: Mapping[str, np.ndarray]) -> list[KernelSpec]:
    """``kernels="auto"`` for a table with categorical columns: the linear kernel on each
    categorical view (its one-hot indicators), the auto set on the others.

    Why: an RBF of one-hot rows is exp(-(d_1 + d_2 + ...)/2 sigma^2), a *product* over the
    view's columns, whose clusters are the joint cells of all its columns, so one noise column
    beside an informative one splits every cluster (issue 41's customer table: ACC 0.57 with
    ``profile=plan,region`` against 0.89 with ``plan`` alone).  The linear kernel on the
    indicators adds the columns; on the indicators as given (``scale="table"``,
    :data:`mkdist._core._scaling.SCALE_TABLE`) its distance counts the columns that differ, as
    k-modes' matching dissimilarity and one-hot k-means do: the same table gives 0.89 with 5 or
    50 noise levels, as ``plan`` alone (docs/guide/quality.md).
    """
    return [s for v, rows in landmark_views.items()
            for s in ([KernelSpec(view=v, kind="linear")] if is_indicator_block(rows) else _auto_set(v, rows))]


def kernel_set_names() -> list[str]:
    return sorted([*STANDARD_KERNEL_SETS, *DATA_KERNEL_SETS])


def resolve_kernel_specs(kernels: Any, view_names: Sequence[str],
                         views: Mapping[str, np.ndarray] | None = None) -> list[KernelSpec]:
    """Turn the user's ``kernels=`` argument into specs whose views exist.

    ``None`` gives ``"auto"`` (:data:`DATA_KERNEL_SETS`, decided on ``views``, the in-memory
    landmark rows): the cosine kernel on a sparse view (under :data:`SPARSE_DENSITY` non-zero
    entries), ``"rbf-grid"`` on the others -- three RBF kernels, sigma = sqrt(mean squared
    distance) x {0.5, 1, 2} (measured on UCI mfeat: SimpleMKKM ACC 0.907 with it vs 0.889 with
    one RBF per view; on the 13 shared sets with sparse views the cosine kernel raised
    MultipleKernelClustering's mean ACC, e.g. 20 Newsgroups 0.57 -> 0.95; bench/RESULTS.md).
    A string names a set from :data:`STANDARD_KERNEL_SETS` applied to every view, or
    ``"auto"``; otherwise a list of specs (KernelSpec, dict or (view, kind) tuple).  Integer
    views are positions.
    """
    view_names = list(view_names)
    if kernels is None:
        kernels = DEFAULT_KERNEL_SET
    if isinstance(kernels, str):
        if kernels in DATA_KERNEL_SETS:
            return [s for v in view_names
                    for s in DATA_KERNEL_SETS[kernels](v, None if views is None else views[v])]
        if kernels not in STANDARD_KERNEL_SETS:
            raise InputValidationError(
                f"unknown kernel set {kernels!r}; choose one of {kernel_set_names()} or pass a list of specs."
            )
        return [s for v in view_names for s in STANDARD_KERNEL_SETS[kernels](v)]
    if isinstance(kernels, (KernelSpec, Mapping)):
        kernels = [kernels]
    specs = [KernelSpec.from_any(k) for k in kernels]
    if not specs:
        raise InputValidationError("`kernels` is empty; give at least one kernel spec.")
    out = []
    for s in specs:
        view = s.view
        if isinstance(view, (int, np.integer)) and not isinstance(view, bool):
            if not 0 <= int(view) < len(view_names):
                raise InputValidationError(
                    f"kernel spec names view {view} but there are {len(view_names)} views {view_names}."
                )
            view = view_names[int(view)]
        elif view not in view_names:
            raise InputValidationError(
                f"kernel spec names view {view!r}, which does not exist; views are {view_names}."
            )
        out.append(dataclasses.replace(s, view=view))
    return out
