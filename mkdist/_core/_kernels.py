"""Base kernels, kernel specs, bandwidth heuristics and block-wise kernel evaluation.

A *kernel spec* names the view it reads, its type and its parameters.  Specs are
*fitted* once on the landmarks (bandwidth heuristics become numbers) and every
later block -- landmark kernel, out-of-sample rows, any chunk on any worker --
uses the fitted values, so all blocks come from the same kernel.

Kernel blocks are computed per view from one GEMM ``X_block @ landmarks.T``: the
squared distances (RBF, Laplacian), the inner products (linear, polynomial) and
the cosines all derive from it, so a view with five kernels costs one GEMM.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..errors import InputValidationError

__all__ = [
    "row_sq_norms",
    "sq_distances",
    "nearest_center",
    "bandwidth_statistic",
    "check_bandwidth",
    "FeatureScaling",
    "SCALINGS",
    "SCALE_AUTO",
    "ProjectedKernels",
    "KernelSpec",
    "FittedKernel",
    "KernelPreprocessing",
    "KERNEL_KINDS",
    "BANDWIDTH_RULES",
    "STANDARD_KERNEL_SETS",
    "DATA_KERNEL_SETS",
    "SPARSE_DENSITY",
    "view_density",
    "rbf_grid",
    "resolve_kernel_specs",
    "fit_kernels",
    "kernel_blocks",
    "self_kernel",
    "fit_preprocessing",
    "preprocess_block",
    "landmark_kernels",
    "kernel_model_state",
    "kernel_model_from_state",
]

KernelKind = Literal["rbf", "laplacian", "polynomial", "linear", "cosine"]
KERNEL_KINDS = ("rbf", "laplacian", "polynomial", "linear", "cosine")
#: The bandwidth heuristics of :func:`bandwidth_statistic` (a kernel spec's ``bandwidth_rule``):
#: "mean": sigma^2 = mean squared pairwise distance (bipartite-spectral paper eq. 24, and the
#: SimpleMKKM authors' large-scale code); "median": sigma = median pairwise distance;
#: "max": sigma = largest pairwise distance (the D of the standard 12-kernel set).
BANDWIDTH_RULES = ("mean", "median", "max")
#: Per-feature scalings every estimator with a ``scale`` parameter offers (see FeatureScaling).
SCALINGS = ("minmax", "standard")
#: ``scale="auto"`` (late fusion): "minmax" on the dense views, none on the sparse ones
#: (``view_density`` < ``SPARSE_DENSITY``, as the "auto" kernel set decides); see FeatureScaling.
SCALE_AUTO = "auto"
#: Rows used to estimate the median / max heuristics (pairwise distances are O(n^2)).
_HEURISTIC_SAMPLE = 2000


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


def row_sq_norms(X: np.ndarray) -> np.ndarray:
    """||x_i||^2 for every row, shape (n,)."""
    return np.einsum("ij,ij->i", X, X)


def sq_distances(A: np.ndarray, B: np.ndarray, *, a_sq: np.ndarray | None = None,
                 b_sq: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between the rows of A (a, d) and B (b, d), shape (a, b).

    One GEMM, then ``-2 A B^T + ||a||^2 + ||b||^2`` in place (in the GEMM's dtype), clipped
    at 0: the cancellation of that formula leaves tiny negatives for nearly equal rows.
    ``a_sq`` / ``b_sq`` are precomputed squared row norms; ``out`` a buffer of shape (a, b).
    The one formula every method uses (kernel blocks, k-means, nearest neighbours, RFF).
    """
    if a_sq is None:
        a_sq = row_sq_norms(A)
    if b_sq is None:
        b_sq = row_sq_norms(B)
    return _sq_from_gram(np.matmul(A, B.T, out=out), a_sq, b_sq)


def _sq_from_gram(gram: np.ndarray, a_sq: np.ndarray, b_sq: np.ndarray) -> np.ndarray:
    """gram <- max(||a||^2 + ||b||^2 - 2 gram, 0), in place."""
    gram *= -2.0
    gram += a_sq[:, None]
    gram += b_sq[None, :]
    return np.maximum(gram, 0.0, out=gram)


def nearest_center(X: np.ndarray, centers: np.ndarray, *, return_distance: bool = False):
    """Index of the nearest centre for every row of X, in float64 whatever X's dtype.

    Parameters
    ----------
    X : ndarray of shape (b, K)
    centers : ndarray of shape (k, K)
    return_distance : bool, default=False
        Also return the squared distance to that centre.

    Returns
    -------
    labels : ndarray of shape (b,), int64
    sqdist : ndarray of shape (b,), float64
        Only with ``return_distance``.
    """
    X = np.asarray(X, dtype=np.float64)
    d = sq_distances(X, np.asarray(centers, dtype=np.float64))
    labels = np.argmin(d, axis=1) if d.shape[1] else np.zeros(X.shape[0], dtype=np.int64)
    labels = labels.astype(np.int64, copy=False)
    if return_distance:
        return labels, d[np.arange(X.shape[0]), labels]
    return labels


def bandwidth_statistic(X: np.ndarray, rule: str, *, rng: Any = None,
                        pair_rows: int = _HEURISTIC_SAMPLE) -> float:
    """A Gaussian bandwidth heuristic of the rows of X (the one definition every method uses).

    Parameters
    ----------
    X : ndarray of shape (n, d)
    rule : {"mean", "median", "max"}
        "mean": sqrt of the mean squared distance over pairs i != j, from O(n d) moments
        (mean_{i != j} ||x_i - x_j||^2 = 2n/(n-1) (mean ||x||^2 - ||mean x||^2));
        "median" / "max": median / largest distance over the pairs of at most ``pair_rows``
        rows drawn without replacement.
    rng : numpy Generator or RandomState
        Draws the rows of the pairwise rules when n > ``pair_rows``.

    Returns
    -------
    float
        sigma of k(x, y) = exp(-||x - y||^2 / (2 sigma^2)) before any multiplier; 0 for a
        constant sample, inf when the distances overflow float64.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    if rule == "mean":
        mu = X.mean(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            msq = 2.0 * n / max(n - 1, 1) * (np.einsum("ij,ij->", X, X) / n - mu @ mu)
        if not np.isfinite(msq):
            return float("inf")
        return float(math.sqrt(max(msq, 0.0)))
    if n > pair_rows:
        rng = np.random.default_rng(0) if rng is None else rng
        X = X[np.sort(rng.choice(n, pair_rows, replace=False))]
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.sqrt(sq_distances(X, X)[np.triu_indices(X.shape[0], k=1)])
    if not d.size:
        return 0.0
    if not np.isfinite(d).all():
        return float("inf")
    return float(np.median(d)) if rule == "median" else float(d.max())


@dataclasses.dataclass
class FeatureScaling:
    """Per-feature affine scaling ``(x - offset) / scale`` of every view.

    Attributes
    ----------
    kind : {"minmax", "standard", "auto"}
    offset, scale : dict of str to ndarray of shape (d_v,)
        Minimum and range ("minmax") or mean and standard deviation ("standard"); a
        constant feature keeps scale 1: it maps to 0 and carries no distance either way.
        "auto": "minmax" on a dense view, offset 0 and scale 1 (the identity) on a sparse one
        (share of non-zero entries < ``SPARSE_DENSITY``: bag of words, graph adjacency), whose
        counts or tf-idf weights are kept as they are -- min-max scaling would give a word
        seen once the weight of the most frequent one.
    """

    kind: str
    offset: dict[str, np.ndarray]
    scale: dict[str, np.ndarray]

    @classmethod
    def fit(cls, kind: str | None, views: Mapping[str, np.ndarray]) -> FeatureScaling | None:
        """Estimate the scaling on in-memory rows (landmarks or a sample); None for ``kind=None``."""
        if kind is None:
            return None
        if kind not in (*SCALINGS, SCALE_AUTO):
            raise InputValidationError(f"`scale`={kind!r} must be one of {(*SCALINGS, SCALE_AUTO)}.")
        offset, scale = {}, {}
        for name, L in views.items():
            L = np.asarray(L, dtype=np.float64)
            if kind == SCALE_AUTO and view_density(L) < SPARSE_DENSITY:
                lo, span = np.zeros(L.shape[1]), np.ones(L.shape[1])
            elif kind in ("minmax", SCALE_AUTO):
                lo, span = L.min(axis=0), L.max(axis=0) - L.min(axis=0)
            else:
                lo, span = L.mean(axis=0), L.std(axis=0)
            offset[name] = lo
            scale[name] = np.where(span > 0, span, 1.0)
        return cls(kind, offset, scale)

    @property
    def factor(self) -> dict[str, np.ndarray]:
        """1 / scale per view (multiplying is what the row blocks do)."""
        return {k: 1.0 / v for k, v in self.scale.items()}

    def apply(self, views: Mapping[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
        """Scaled copies of the views in ``dtype``."""
        factor = self.__dict__.setdefault("_factor", self.factor)
        return {name: ((np.asarray(v, dtype=dtype) - self.offset[name].astype(dtype))
                       * factor[name].astype(dtype)) for name, v in views.items()}

    def state_arrays(self) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        """Named arrays for a model state (dims ``feature__<view>``)."""
        out = {}
        for name in self.offset:
            out[f"scale_offset__{name}"] = ((f"feature__{name}",), self.offset[name])
            out[f"scale_span__{name}"] = ((f"feature__{name}",), self.scale[name])
        return out

    @classmethod
    def from_state(cls, kind: str | None, view_names: Sequence[str], get) -> FeatureScaling | None:
        if not kind:
            return None
        return cls(kind, {n: get(f"scale_offset__{n}") for n in view_names},
                   {n: get(f"scale_span__{n}") for n in view_names})


def check_bandwidth(sigma: float, view: str, what: str) -> None:
    """Refuse a bandwidth heuristic of 0 (constant view) or inf (overflowing values), saying which."""
    if sigma > 0 and np.isfinite(sigma):
        return
    if not np.isfinite(sigma):
        raise InputValidationError(
            f"view {view!r}: {what} is {sigma} because squared distances overflow float64 (values around "
            "1e154 or larger); rescale the view (e.g. scale='standard', or divide it by a constant).")
    if "median" in what:
        # A zero median needs only half of the pairs to coincide, not a constant view (e.g. the
        # shared ACM set's view4: 99.4% of its rows are one and the same row).
        raise InputValidationError(
            f"view {view!r} is constant or nearly so ({what} is 0: at least half of the pairs of points "
            "are identical in this view), so a bandwidth from it would be 0; drop the view, give an "
            "explicit bandwidth, or use the 'mean' rule.")
    raise InputValidationError(
        f"view {view!r} is constant ({what} is 0): every point is the same, so a distance-based "
        "kernel on it carries nothing to cluster; drop the view or give an explicit bandwidth.")


def fit_kernels(specs: Sequence[KernelSpec], landmark_views: Mapping[str, np.ndarray],
                random_state: int | None = 0) -> list[FittedKernel]:
    """Estimate every bandwidth heuristic once, on the landmarks.

    Raises
    ------
    InputValidationError
        If a heuristic is 0 (a constant view), naming the view.
    """
    rng = np.random.default_rng(random_state)
    cache: dict[tuple[str, str], float] = {}
    fitted = []
    for s in specs:
        view = str(s.view)
        if s.kind in ("rbf", "laplacian"):
            if s.bandwidth is not None:
                stat, sigma, rule = float(s.bandwidth), float(s.bandwidth) * s.multiplier, None
            else:
                key = (view, s.bandwidth_rule)
                if key not in cache:
                    cache[key] = bandwidth_statistic(landmark_views[view], s.bandwidth_rule, rng=rng)
                stat = cache[key]
                check_bandwidth(stat, view, f"the {s.bandwidth_rule!r} bandwidth heuristic on the landmarks")
                sigma, rule = stat * s.multiplier, s.bandwidth_rule
            fitted.append(FittedKernel(view=view, kind=s.kind, sigma=sigma, bandwidth_rule=rule,
                                       multiplier=s.multiplier, statistic=stat))
        else:
            fitted.append(FittedKernel(view=view, kind=s.kind, degree=float(s.degree), coef0=float(s.coef0)))
    return fitted


def _gram(Xb: np.ndarray, L: np.ndarray) -> np.ndarray:
    """The one GEMM of a view: inner products of block rows and landmarks, shape (b, n)."""
    return Xb @ L.T


def _exponent_scale(k: FittedKernel) -> float:
    """c in k(x, y) = exp(-c * r(x, y)), r the squared distance (rbf) or the distance (laplacian)."""
    return 0.5 / k.sigma**2 if k.kind == "rbf" else 1.0 / k.sigma


def _power_families(kernels: Sequence[FittedKernel]) -> dict[int, tuple[int, int]]:
    """For distance kernels of one kind whose exponents differ by powers of two: kernel -> (base, p).

    exp(-c' r) = exp(-c r)^(c'/c), and for c'/c = 2^p that is p squarings (p > 0) or -p
    square roots (p < 0) of the base kernel: one ``exp`` serves the whole family (the
    ``rbf-grid`` multipliers 0.5, 1, 2 are such a family).  The base is the family's median
    exponent: squaring doubles float rounding, a square root halves it, and starting from the
    middle keeps both few.  A base that underflows to 0 makes its wider relatives 0 too, where
    their true value is below 1e-10 (float32) -- far below any kernel value that matters.
    """
    out: dict[int, tuple[int, int]] = {}
    for kind in ("rbf", "laplacian"):
        idx = [i for i, k in enumerate(kernels) if k.kind == kind]
        scales = {i: _exponent_scale(kernels[i]) for i in idx}
        while idx:
            i0 = idx[0]
            family = [i for i in idx if abs(math.log2(scales[i] / scales[i0]) - round(math.log2(scales[i] / scales[i0])))
                      < 1e-9]
            base = sorted(family, key=lambda i: scales[i])[len(family) // 2]
            for i in family:
                out[i] = (base, round(math.log2(scales[i] / scales[base])))
            idx = [i for i in idx if i not in family]
    return out


def _view_kernels(Xb: np.ndarray, L: np.ndarray, kernels: Sequence[FittedKernel],
                  buffer: np.ndarray | None = None):
    """Yield each kernel block of one view from a single GEMM.

    Every block is computed in place in one (b, n) array: a fresh one per kernel, or
    ``buffer`` for all of them.  Large fresh arrays are costly here: first-touch page faults
    of an 800 MB array (n = 10,000 landmarks) take about 2 s on this machine, more than the
    arithmetic, so temporaries are avoided and large callers pass a buffer.  Distance kernels
    whose bandwidths differ by powers of two share one ``exp`` (see ``_power_families``):
    measured on W1 (two views of 32 features, 1000 landmarks, ``rbf-grid``), one ``exp`` and
    two squarings / square roots per view instead of three ``exp``.
    """
    gram = _gram(Xb, L)
    xx = row_sq_norms(Xb)
    ll = row_sq_norms(L)
    families = _power_families(kernels)
    # The squared distances overwrite the Gram matrix unless another kernel still needs it.
    keep_gram = any(k.kind in ("linear", "polynomial", "cosine") for k in kernels)
    sq = None
    bases: dict[int, np.ndarray] = {}
    for i, k in enumerate(kernels):
        out = np.empty_like(gram) if buffer is None else buffer
        if k.kind in ("rbf", "laplacian"):
            if sq is None:
                sq = _sq_from_gram(gram.copy() if keep_gram else gram, xx, ll)
            base, p = families[i]
            if base not in bases:
                e = np.empty_like(sq)
                if kernels[base].kind == "rbf":
                    np.multiply(sq, -_exponent_scale(kernels[base]), out=e)
                else:
                    np.sqrt(sq, out=e)
                    e *= -_exponent_scale(kernels[base])
                bases[base] = np.exp(e, out=e)
            np.copyto(out, bases[base])
            for _ in range(abs(p)):
                if p > 0:
                    np.multiply(out, out, out=out)
                else:
                    np.sqrt(out, out=out)
            yield out
        elif k.kind == "linear":
            np.copyto(out, gram)
            yield out
        elif k.kind == "polynomial":
            np.add(gram, k.coef0, out=out)
            if float(k.degree).is_integer() and 1 <= k.degree <= 16:
                # Integer degree by repeated multiplication in place: float ** calls pow(),
                # several times slower on (b, n) blocks.
                d = int(k.degree)
                if d & (d - 1) == 0:  # a power of two (the usual 2 and 4): square in place
                    while d > 1:
                        out *= out
                        d //= 2
                else:
                    base_values = out.copy()
                    for _ in range(d - 1):
                        out *= base_values
                yield out
            else:
                yield np.power(out, k.degree, out=out)
        else:  # cosine; a zero row has a zero kernel row
            with np.errstate(divide="ignore"):
                inv_x = np.where(xx > 0, 1.0 / np.sqrt(xx), 0.0).astype(gram.dtype, copy=False)
                inv_l = np.where(ll > 0, 1.0 / np.sqrt(ll), 0.0).astype(gram.dtype, copy=False)
            np.multiply(gram, inv_x[:, None], out=out)
            out *= inv_l[None, :]
            yield out


def kernel_blocks(X_block: Mapping[str, np.ndarray], landmarks: Mapping[str, np.ndarray],
                  kernels: Sequence[FittedKernel], dtype=np.float64, reuse: bool = False):
    """Yield ``(p, block)`` for every base kernel p: block = k_p(X_block rows, landmarks), shape (b, n).

    One GEMM per view serves all of that view's kernels.  Blocks are produced one at a
    time so a caller that sums them never holds (m, b, n).  ``reuse=True``: every block is
    written into the same array, so a block is only valid until the next one is requested
    (for callers that consume each block at once; it saves a fresh (b, n) array per kernel).
    """
    by_view: dict[str, list[int]] = {}
    for p, k in enumerate(kernels):
        by_view.setdefault(k.view, []).append(p)
    buffer = None
    for view, idx in by_view.items():
        Xb = np.asarray(X_block[view], dtype=dtype)
        L = np.asarray(landmarks[view], dtype=dtype)
        if reuse and buffer is None:
            buffer = np.empty((Xb.shape[0], L.shape[0]), dtype=np.result_type(Xb, L))
        for p, block in zip(idx, _view_kernels(Xb, L, [kernels[i] for i in idx], buffer)):
            yield p, block.astype(dtype, copy=False)


def self_kernel(X_block: Mapping[str, np.ndarray], kernel: FittedKernel, dtype=np.float64) -> np.ndarray:
    """k(x, x) for every row of the block, shape (b,)."""
    Xb = np.asarray(X_block[kernel.view], dtype=dtype)
    b = Xb.shape[0]
    if kernel.kind in ("rbf", "laplacian"):
        return np.ones(b, dtype=dtype)
    xx = np.einsum("ij,ij->i", Xb, Xb)
    if kernel.kind == "linear":
        return xx
    if kernel.kind == "polynomial":
        return (xx + kernel.coef0) ** kernel.degree
    return (xx > 0).astype(dtype)  # cosine: 1, or 0 for a zero row (its kernel row is 0 too)


@dataclasses.dataclass
class KernelPreprocessing:
    """Statistics that make landmark and out-of-sample kernels consistent.

    Attributes
    ----------
    center : bool
        Double-centre each kernel in feature space around the landmark mean.
    normalize : {"diagonal", "trace", None}
        "diagonal": K_ij / sqrt(K_ii K_jj) (unit diagonal, as the SimpleMKKM authors' ``knorm``);
        "trace": K / (tr K / n).
    row_means : ndarray of shape (m, n)
        Mean over landmarks of the raw kernel row of each landmark (used by centring).
    grand_means : ndarray of shape (m,)
        Mean of the raw landmark kernel.
    diag : ndarray of shape (m, n)
        Diagonal of the (centred) landmark kernel (used by diagonal normalisation).
    scale : ndarray of shape (m,)
        tr / n of the (centred) landmark kernel (used by trace normalisation).

    Notes
    -----
    With r_j = (1/n) sum_l k(x_j, x_l) and s = (1/n^2) sum_jl k(x_j, x_l), centring the
    feature map at the landmark mean gives, for any point x and landmark x_j,

        kc(x, x_j) = k(x, x_j) - (1/n) sum_l k(x, x_l) - r_j + s
        kc(x, x)   = k(x, x) - (2/n) sum_l k(x, x_l) + s

    which for x = x_i is exactly (I - 11'/n) K (I - 11'/n).  Diagonal normalisation then
    divides by sqrt(kc(x, x) kc(x_j, x_j)).  Both need only the block row and k(x, x).
    """

    center: bool
    normalize: str | None
    row_means: np.ndarray
    grand_means: np.ndarray
    diag: np.ndarray
    scale: np.ndarray

    @classmethod
    def stack(cls, parts: Sequence[KernelPreprocessing]) -> KernelPreprocessing:
        """The statistics of several kernels (fitted one at a time) as one object."""
        return cls(parts[0].center, parts[0].normalize,
                   np.concatenate([s.row_means for s in parts]), np.concatenate([s.grand_means for s in parts]),
                   np.concatenate([s.diag for s in parts]), np.concatenate([s.scale for s in parts]))

    def state_attrs(self) -> dict[str, Any]:
        return {"center": bool(self.center), "normalize": self.normalize}

    def state_arrays(self) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        return {
            "prep_row_means": (("kernel", "landmark"), self.row_means),
            "prep_grand_means": (("kernel",), self.grand_means),
            "prep_diag": (("kernel", "landmark"), self.diag),
            "prep_scale": (("kernel",), self.scale),
        }

    @classmethod
    def from_state(cls, attrs: Mapping[str, Any], get) -> KernelPreprocessing:
        return cls(bool(attrs["center"]), attrs["normalize"], get("prep_row_means"), get("prep_grand_means"),
                   get("prep_diag"), get("prep_scale"))


def kernel_model_state(view_names: Sequence[str], landmarks: Mapping[str, np.ndarray],
                       kernels: Sequence[FittedKernel], preprocessing: KernelPreprocessing,
                       scaling: FeatureScaling | None) -> tuple[dict[str, Any], dict[str, tuple]]:
    """(attrs, arrays) of what every model fitted on landmark kernels saves: the landmark rows,
    the fitted kernels, their preprocessing statistics and the feature scaling (MKC, late fusion)."""
    arrays = dict(preprocessing.state_arrays())
    for name in view_names:
        arrays[f"landmarks__{name}"] = (("landmark", f"feature__{name}"), landmarks[name])
    if scaling is not None:
        arrays.update(scaling.state_arrays())
    attrs = {"view_names": list(view_names), "kernels": [k.to_json() for k in kernels],
             "kernel_names": [k.name for k in kernels], "preprocessing": preprocessing.state_attrs(),
             "scaling": None if scaling is None else scaling.kind}
    return attrs, arrays


def kernel_model_from_state(attrs: Mapping[str, Any], get) -> dict[str, Any]:
    """``view_names``, ``landmarks``, ``kernels``, ``preprocessing`` and ``scaling`` as saved by
    :func:`kernel_model_state` (constructor arguments of the model)."""
    names = list(attrs["view_names"])
    return {"view_names": names, "landmarks": {n: get(f"landmarks__{n}") for n in names},
            "kernels": [FittedKernel.from_json(k) for k in attrs["kernels"]],
            "preprocessing": KernelPreprocessing.from_state(attrs["preprocessing"], get),
            "scaling": FeatureScaling.from_state(attrs.get("scaling"), names, get)}


#: Floor for kc(x, x) before dividing: a point at the landmark mean has kc(x, x) ~ 0.
_DIAG_FLOOR = 1e-12


def fit_preprocessing(raw: np.ndarray, center: bool, normalize: str | None) -> tuple[np.ndarray, KernelPreprocessing]:
    """Preprocess a raw landmark kernel stack in place and return it with its statistics.

    Parameters
    ----------
    raw : ndarray of shape (m, n, n)
        Raw landmark kernels (overwritten).
    """
    if normalize not in (None, "diagonal", "trace"):
        raise InputValidationError(f"`normalize`={normalize!r} must be 'diagonal', 'trace' or None.")
    m, n, _ = raw.shape
    row_means = raw.mean(axis=2)
    grand = row_means.mean(axis=1)
    if center:
        raw -= row_means[:, :, None]
        raw -= row_means[:, None, :]
        raw += grand[:, None, None]
    diag = np.einsum("mii->mi", raw).copy()
    scale = np.maximum(diag.mean(axis=1), _DIAG_FLOOR)
    if normalize == "diagonal":
        d = 1.0 / np.sqrt(np.maximum(diag, _DIAG_FLOOR))
        raw *= d[:, :, None]
        raw *= d[:, None, :]
    elif normalize == "trace":
        raw /= scale[:, None, None]
    # Symmetrise: the row/column operations above are exact in theory, not in floating point.
    for K in raw:
        _symmetrize(K)
    return raw, KernelPreprocessing(center, normalize, row_means, grand, diag, scale)


def _symmetrize(K: np.ndarray, block: int = 512) -> None:
    """K <- (K + K^T) / 2 in place, tile by tile.

    ``K += K.T`` on a large matrix walks one operand column-wise (cache misses on every
    element) and NumPy copies the overlapping operand first; cache-sized tile pairs do the
    same arithmetic without the copy (measured 2.9 s -> 0.4 s at n = 10,000, bit-identical).
    """
    n = K.shape[0]
    for i in range(0, n, block):
        ii = slice(i, min(i + block, n))
        for j in range(i, n, block):
            jj = slice(j, min(j + block, n))
            avg = K[ii, jj] + K[jj, ii].T
            avg *= 0.5
            K[ii, jj] = avg
            K[jj, ii] = avg.T


def preprocess_block(block: np.ndarray, kxx: np.ndarray, p: int, prep: KernelPreprocessing) -> np.ndarray:
    """Apply kernel p's landmark preprocessing to an out-of-sample block (b, n), in place."""
    if prep.center:
        row_mean = block.mean(axis=1)
        kxx = kxx - 2.0 * row_mean + prep.grand_means[p]
        block -= row_mean[:, None]
        block -= prep.row_means[p][None, :].astype(block.dtype, copy=False)
        block += prep.grand_means[p]
    if prep.normalize == "diagonal":
        dx = 1.0 / np.sqrt(np.maximum(kxx, _DIAG_FLOOR))
        dl = (1.0 / np.sqrt(np.maximum(prep.diag[p], _DIAG_FLOOR))).astype(block.dtype, copy=False)
        block *= dx[:, None]
        block *= dl[None, :]
    elif prep.normalize == "trace":
        block /= prep.scale[p]
    return block


def landmark_kernels(landmarks: Mapping[str, np.ndarray], kernels: Sequence[FittedKernel],
                     dtype=np.float64) -> np.ndarray:
    """The raw landmark kernel stack, shape (m, n, n)."""
    n = next(iter(landmarks.values())).shape[0]
    out = np.empty((len(kernels), n, n), dtype=dtype)
    for p, block in kernel_blocks(landmarks, landmarks, kernels, dtype=dtype, reuse=True):
        out[p] = block
    return out


class ProjectedKernels:
    """Kernel rows of new points, preprocessed like the landmark kernels, times a projection.

    For a base kernel p with a landmark-side projection Q_p of shape (n, c_p) (MKC-AE's
    H_n D_n^-1, late fusion's H_p Lambda_p^-1), :meth:`rows` yields kn_p(x, :) @ Q_p for a
    block of points, where kn_p is k_p centred at the landmark mean and normalised exactly as
    the landmark kernel was (see :class:`KernelPreprocessing`).  Centring and diagonal
    normalisation are rank-one and diagonal operations, so they go through Q_p as vectors:

        kn_p(x, :) Q_p = dx [ k_p(x, :) (dl Q_p) - (m_x - s)(dl @ Q_p) - (dl r) @ Q_p ]

    with m_x the row mean of the raw block, dl_j = 1/sqrt(kc(x_j, x_j)) and dx the same for x.
    Each kernel then costs one exp pass, one row mean and one thin GEMM over its (b, n)
    block; no (b, n) accumulator is kept.  Shared by MultipleKernelClustering (which sums the
    kernels' rows with weights) and LateFusionClustering (which keeps them side by side).

    Parameters
    ----------
    landmarks : dict of str to ndarray of shape (n, d_v)
        Landmark rows (after any feature scaling).
    kernels : list of FittedKernel
        All m base kernels of the preprocessing statistics.
    preprocessing : KernelPreprocessing
    projections : dict of int to ndarray of shape (n, c_p)
        Q_p for the kernels to project (other kernels are never computed).
    dtype : numpy dtype
        Precision of the kernel blocks and of the GEMM with Q_p; results are float64.
    """

    def __init__(self, landmarks: Mapping[str, np.ndarray], kernels: Sequence[FittedKernel],
                 preprocessing: KernelPreprocessing, projections: Mapping[int, np.ndarray], dtype=np.float64):
        self.dtype = np.dtype(dtype)
        self.index = [int(p) for p in projections]
        self.kernels = [kernels[p] for p in self.index]
        self.landmarks = {k: np.asarray(v, dtype=self.dtype) for k, v in landmarks.items()}
        self.prep = preprocessing
        n = next(iter(landmarks.values())).shape[0]
        prep = preprocessing
        self.terms = []
        for p, Q in projections.items():
            dl = (1.0 / np.sqrt(np.maximum(prep.diag[p], _DIAG_FLOOR)) if prep.normalize == "diagonal"
                  else np.ones(n))
            r = prep.row_means[p] if prep.center else np.zeros(n)
            dlQ = dl[:, None] * Q
            if prep.center:
                # One more column, 1/n: the same GEMM yields the row mean the centring needs,
                # instead of a separate reduction over the (b, n) block.
                dlQ = np.hstack([dlQ, np.full((n, 1), 1.0 / n)])
            self.terms.append((np.ascontiguousarray(dlQ, dtype=self.dtype), dl @ Q, (dl * r) @ Q))

    def rows(self, views_block: Mapping[str, np.ndarray]):
        """Yield ``(j, G)``: G = kn_p(x, :) @ Q_p of shape (b, c_p), float64, p = ``index[j]``."""
        prep = self.prep
        for j, block in kernel_blocks(views_block, self.landmarks, self.kernels, dtype=self.dtype, reuse=True):
            p = self.index[j]
            dlQ, u, v = self.terms[j]
            G = (block @ dlQ).astype(np.float64, copy=False)
            if prep.center:
                G, m = G[:, :-1], G[:, -1]
                s = prep.grand_means[p]
                G -= (m - s)[:, None] * u[None, :] + v[None, :]
            if prep.normalize == "diagonal":
                kxx = self_kernel(views_block, self.kernels[j], dtype=np.float64)
                if prep.center:
                    kxx = kxx - 2.0 * m + s
                G *= (1.0 / np.sqrt(np.maximum(kxx, _DIAG_FLOOR)))[:, None]
            elif prep.normalize == "trace":
                G /= prep.scale[p]
            yield j, G
