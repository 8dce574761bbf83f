"""Base kernels evaluated block by block, their preprocessing and their projection.

Kernel specs are *fitted* once on the landmarks (:func:`fit_kernels`: bandwidth heuristics
become numbers; the specs are in :mod:`mkdist._core._kernel_specs`) and every later block --
landmark kernel, out-of-sample rows, any chunk on any worker -- uses the fitted values, so all
blocks come from the same kernel.

Kernel blocks are computed per view from one GEMM ``X_block @ landmarks.T``: the
squared distances (RBF, Laplacian), the inner products (linear, polynomial) and
the cosines all derive from it, so a view with five kernels costs one GEMM.

The landmark kernels are then centred and normalised (:func:`fit_preprocessing`,
:class:`KernelPreprocessing`), an out-of-sample block exactly alike (:func:`preprocess_block`),
and :class:`ProjectedKernels` gives the preprocessed kernel rows of new points times a
landmark-side projection without keeping a (b, n) block.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError
from ._distances import _sq_from_gram, bandwidth_statistic, check_bandwidth, row_sq_norms
from ._fused import (
    MODE_CONSTANT,
    MODE_DIAGONAL,
    MODE_DIAGONAL_CENTRED,
    combine_compiled,
    combine_numpy,
    compiled_available,
    finish_compiled,
)
from ._kernel_specs import FittedKernel, KernelSpec, resolve_kernel_specs
from ._scaling import FeatureScaling

__all__ = [
    "LandmarkKernels",
    "fit_landmark_kernels",
    "ProjectedKernels",
    "CombinedProjection",
    "KernelPreprocessing",
    "fit_kernels",
    "kernel_blocks",
    "self_kernel",
    "fit_preprocessing",
    "preprocess_block",
    "landmark_kernels",
    "kernel_model_state",
    "kernel_model_from_state",
]


@dataclasses.dataclass(frozen=True)
class LandmarkKernels:
    """The kernel set-up of a fit on the landmarks (:func:`fit_landmark_kernels`).

    Attributes
    ----------
    specs : list of KernelSpec, length m
        The user's ``kernels=`` resolved against the views ("auto" decided on the landmarks).
    scaling : FeatureScaling or None
        Per-feature scaling estimated on the landmarks.
    views : dict of str to ndarray of shape (n, d_v)
        The landmark rows scaled, float64, C-contiguous: what the kernels are evaluated on.
    kernels : list of FittedKernel, length m
        The specs with their bandwidth heuristics turned into numbers.
    """

    specs: list[KernelSpec]
    scaling: FeatureScaling | None
    views: dict[str, np.ndarray]
    kernels: list[FittedKernel]


def fit_landmark_kernels(kernels: Any, landmark_views: Mapping[str, np.ndarray], *, scale: str | None,
                         random_state: int | None,
                         check: Callable[[list[KernelSpec], dict[str, np.ndarray]], None] | None = None,
                         ) -> LandmarkKernels:
    """Specs -> scaling -> fitted kernels on the landmark rows: the set-up every kernel method shares.

    Parameters
    ----------
    kernels : str, list of KernelSpec/dict, or None
        The estimator's ``kernels`` (:func:`mkdist._core._kernel_specs.resolve_kernel_specs`).
    landmark_views : dict of str to ndarray of shape (n, d_v)
        The landmark rows of every view, in memory.
    scale : {None, "minmax", "standard", "auto"}
        :meth:`FeatureScaling.fit` on the landmarks.
    random_state : int or None
        Seed of the bandwidth heuristics' subsample (:func:`fit_kernels`).
    check : callable, optional
        Called with the specs and the scaled views before the bandwidths are estimated: a
        method's own refusals (a constant view) come before any kernel work.

    Returns
    -------
    LandmarkKernels
    """
    specs = resolve_kernel_specs(kernels, list(landmark_views), landmark_views)  # "auto" reads the views' sparsity
    scaling = FeatureScaling.fit(scale, landmark_views)
    views = scaling.apply(landmark_views, np.float64) if scaling is not None else landmark_views
    views = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in views.items()}
    if check is not None:
        check(specs, views)
    return LandmarkKernels(specs, scaling, views, fit_kernels(specs, views, random_state=random_state))


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


def _power_families(kernels: Sequence[FittedKernel], base: str = "median") -> dict[int, tuple[int, int]]:
    """For distance kernels of one kind whose exponents differ by powers of two: kernel -> (base, p).

    exp(-c' r) = exp(-c r)^(c'/c), and for c'/c = 2^p that is p squarings (p > 0) or -p
    square roots (p < 0) of the base kernel: one ``exp`` serves the whole family (the
    ``rbf-grid`` multipliers 0.5, 1, 2 are such a family).  The base is the family's median
    exponent (``base="median"``, the kernels of the fit): squaring doubles float rounding, a
    square root halves it, and starting from the middle keeps both few.  A base that underflows
    to 0 makes its wider relatives 0 too, where their true value is below 1e-10 (float32) -- far
    below any kernel value that matters.  ``base="widest"`` (the fused embedding) starts from the
    smallest exponent and squares only: a square root costs about what an ``exp`` does, a
    squaring a tenth of that (measured on W1: the float32 embedding's largest error against
    float64 went from 2.6e-6 to 2.8e-6, float32 noise; the combination step 1.6 -> 1.25 us a row
    and view).
    """
    out: dict[int, tuple[int, int]] = {}
    for kind in ("rbf", "laplacian"):
        idx = [i for i, k in enumerate(kernels) if k.kind == kind]
        scales = {i: _exponent_scale(kernels[i]) for i in idx}
        while idx:
            i0 = idx[0]
            octaves = {i: math.log2(scales[i] / scales[i0]) for i in idx}
            family = [i for i in idx if abs(octaves[i] - round(octaves[i])) < 1e-9]
            ranked = sorted(family, key=lambda i: scales[i])
            b = ranked[0] if base == "widest" else ranked[len(family) // 2]
            for i in family:
                out[i] = (b, round(math.log2(scales[i] / scales[b])))
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


class CombinedProjection:
    """sum_p w_p kn_p(x, :) @ Q for kernels that share one projection Q (MKC-AE's H_n D_n^-1), fused.

    :class:`ProjectedKernels` projects each kernel's rows on its own (late fusion needs them
    side by side).  When every kernel shares Q, the weighted sum can be formed before the
    projection (:mod:`mkdist._core._fused`): per row block, one GEMM per view for its kernels,
    one ``exp`` per RBF family, one combination step per view, and ONE thin GEMM with Q,
    where the per-kernel route did one thin GEMM per kernel.  With kn_p the preprocessed
    kernel (centring at the landmark mean, normalisation), row factor a_p(x) and column scale
    dl_p (see :class:`ProjectedKernels`):

        sum_p w_p kn_p(x, :) Q = [sum_p a_p(x) dl_p * k_p(x, :)] Q - sum_p a_p(x) ((m_p(x) - s_p) u_p + v_p)

    with u_p = dl_p @ Q and v_p = (dl_p r_p) @ Q.  An RBF view's squared distances come out of
    its GEMM already scaled: [x, ||x||^2, 1] @ [2c L, -c, -c ||l||^2]^T = -c ||x - l||^2, so no
    elementwise pass precedes the ``exp``.  Other kernel kinds come from :func:`_view_kernels`.

    Parameters
    ----------
    landmarks : dict of str to ndarray of shape (n, d_v)
    kernels : list of FittedKernel, length m
    preprocessing : KernelPreprocessing
    weights : ndarray of shape (m,)
        w_p; kernels with weight 0 are never computed.
    projection : ndarray of shape (n, c)
        Q.
    dtype : numpy dtype
        Precision of the kernel blocks, the combination and the GEMM with Q; results are float64.
    """

    def __init__(self, landmarks: Mapping[str, np.ndarray], kernels: Sequence[FittedKernel],
                 preprocessing: KernelPreprocessing, weights: np.ndarray, projection: np.ndarray, dtype=np.float64):
        dt = self.dtype = np.dtype(dtype)
        prep = preprocessing
        Q = np.asarray(projection, dtype=np.float64)
        n = Q.shape[0]
        self.n_landmarks = n
        self.Q = np.ascontiguousarray(Q, dtype=dt)
        self._Q64 = Q
        self.center = bool(prep.center)
        if prep.normalize == "diagonal":
            self.mode = MODE_DIAGONAL_CENTRED if prep.center else MODE_DIAGONAL
        else:
            self.mode = MODE_CONSTANT  # trace normalisation: a constant, folded into the weights
        active = [p for p in range(len(kernels)) if weights[p] > 0]
        self.sources: list[dict] = []  # per view: RBF families, then the other kernels
        order: list[int] = []  # kernel p of every slot t, in the order the sources fill them
        for view in dict.fromkeys(kernels[p].view for p in active):
            idx = [p for p in active if kernels[p].view == view]
            L = np.asarray(landmarks[view], dtype=np.float64)
            rbf = [p for p in idx if kernels[p].kind == "rbf"]
            fam = _power_families([kernels[p] for p in rbf], base="widest")
            bases = list(dict.fromkeys(fam[i][0] for i in range(len(rbf))))
            c0 = _exponent_scale(kernels[rbf[bases[0]]]) if rbf else 0.0
            families = []
            for base in bases:
                members = [i for i in range(len(rbf)) if fam[i][0] == base]
                families.append((_exponent_scale(kernels[rbf[base]]) / c0, self._slots(
                    [rbf[i] for i in members], [fam[i][1] for i in members], order, prep, weights)))
            LaT = None
            if rbf:
                LaT = np.vstack([2.0 * c0 * L.T, np.full((1, n), -c0), -c0 * np.einsum("ij,ij->i", L, L)[None, :]])
                LaT = np.ascontiguousarray(LaT, dtype=dt)
            other = [p for p in idx if kernels[p].kind != "rbf"]
            self.sources.append({
                "view": view, "LaT": LaT, "c0": c0, "families": families,
                "landmarks": np.asarray(landmarks[view], dtype=dt),
                "other": [(kernels[p], self._slots([p], [0], order, prep, weights)) for p in other]})
        self.n_slots = len(order)
        dl = np.stack([_column_scale(prep, p, n) for p in order]) if order else np.zeros((0, n))
        self.U = dl @ Q
        self.V = (dl * prep.row_means[order]) @ Q if self.center else np.zeros_like(self.U)

    def _buffers(self, b: int) -> dict:
        """This thread's (rows, n) working arrays, reused from block to block.

        A fresh 1 MB array per block is a fresh mapping whenever malloc's mmap threshold is
        below it (a nanny's MALLOC_TRIM_THRESHOLD_ pins it at 128 KiB): its first touch faults
        every page, which cost more than the GEMM that fills it.  Per thread, since a Dask
        worker may run several tasks at once.
        """
        local = self.__dict__.setdefault("_local", threading.local())
        work = getattr(local, "work", None)
        if work is None or work["arg"].shape[0] < b:
            shape = (b, self.n_landmarks)
            work = local.work = {k: np.empty(shape, dtype=self.dtype) for k in ("arg", "C", "other", "derived")}
        return work

    def _ones(self, b: int, s: dict) -> np.ndarray:
        """k(x, x) = 1 of an RBF family's kernels, shape (b, q), made once per size (nothing writes it)."""
        key = (b, len(s["kernels"]))
        cache = self.__dict__.setdefault("_ones_cache", {})
        if key not in cache:
            cache[key] = np.ones(key)
        return cache[key]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)  # the working arrays stay with their threads
        state.pop("_ones_cache", None)
        return state

    def _slots(self, ps, powers, order, prep, weights) -> dict:
        """The combination step's arrays for kernels ``ps`` of one source, filling slots from len(order)."""
        n = self.n_landmarks
        offset = len(order)
        order.extend(ps)
        scale = [prep.scale[p] if prep.normalize == "trace" else 1.0 for p in ps]
        dl = np.stack([_column_scale(prep, p, n) for p in ps])
        c = self.Q.shape[1]
        dlQ = np.zeros((len(ps), n, -(-(c + 1) // 8) * 8))  # NumPy route: [dl Q, 1/n, zero padding]
        dlQ[:, :, :c] = dl[:, :, None] * self._Q64[None, :, :]
        dlQ[:, :, c] = 1.0 / n
        return {"offset": offset, "kernels": list(ps), "powers": np.asarray(powers, dtype=np.int64),
                "dl": np.ascontiguousarray(dl, dtype=self.dtype), "dlQ": np.ascontiguousarray(dlQ, dtype=self.dtype),
                "shift": np.asarray([prep.grand_means[p] if prep.center else 0.0 for p in ps], dtype=np.float64),
                "weight": np.asarray([weights[p] / s for p, s in zip(ps, scale)], dtype=np.float64)}

    def __call__(self, views_block: Mapping[str, np.ndarray], unit_rows: bool = False,
                 out_dtype=np.float64) -> np.ndarray:
        """The weighted, projected kernel rows of one row block.

        Parameters
        ----------
        views_block : dict of str to ndarray of shape (b, d_v)
        unit_rows : bool, default=False
            Scale each row to unit length (in float64, before the cast to ``out_dtype``).
        out_dtype : numpy dtype, default=float64

        Returns
        -------
        ndarray of shape (b, c), ``out_dtype``
        """
        dt = self.dtype
        b = next(iter(views_block.values())).shape[0]
        compiled = compiled_available()
        work = self._buffers(b)
        # The compiled step sums the kernels into C for one GEMM with Q; the NumPy one projects
        # each kernel and sums the projections in H (see mkdist._core._fused).
        C = None
        if compiled:
            C = work["C"][:b]  # not zeroed: the first combination stores into it
        first = True
        H = None if compiled else np.zeros((b, self.Q.shape[1]))
        coef = np.empty((b, self.n_slots))
        cent = np.empty((b, self.n_slots))

        def combine(blk, s, kxx, clip, exp_of=None):
            nonlocal first
            if compiled:
                combine_compiled(blk, s["powers"], s["dl"], s["shift"], s["weight"], kxx, self.mode, clip, C,
                                 coef, cent, s["offset"], _DIAG_FLOOR, accumulate=not first, exp_of=exp_of)
                first = False
            else:
                combine_numpy(blk, s["powers"], s["dlQ"], s["shift"], s["weight"], kxx, self.mode, clip, H,
                              coef, cent, s["offset"], _DIAG_FLOOR, work=work["derived"][:b])

        buffer = None
        # float32 with numba: the exp is formed inside the compiled step from the distance GEMM
        # X (2 c L^T) and the two squared-norm terms (no [x, ||x||^2, 1] copy, no exp pass).
        exp_inside = compiled and dt == np.float32
        for src in self.sources:
            X = np.asarray(views_block[src["view"]], dtype=dt)
            if src["families"] and exp_inside:
                LaT, c0 = src["LaT"], src["c0"]
                X = np.ascontiguousarray(X)
                G = np.matmul(X, LaT[:-2], out=work["arg"][:b])  # 2 c0 x . l
                for ratio, s in src["families"]:
                    combine(G, s, self._ones(b, s), True, exp_of=(X, LaT[-1], c0, ratio))
            elif src["families"]:
                Xa = np.empty((b, X.shape[1] + 2), dtype=dt)
                Xa[:, :-2] = X
                Xa[:, -2] = row_sq_norms(X)
                Xa[:, -1] = 1.0
                arg = np.matmul(Xa, src["LaT"], out=work["arg"][:b])  # -c0 ||x - l||^2
                single = len(src["families"]) == 1
                for ratio, s in src["families"]:
                    blk = np.exp(arg, out=arg) if single else np.exp(arg * ratio)
                    combine(blk, s, self._ones(b, s), True)
            if src["other"]:
                if buffer is None:
                    buffer = work["other"][:b]
                ks = [k for k, _ in src["other"]]
                for (k, s), blk in zip(src["other"], _view_kernels(X, src["landmarks"], ks, buffer)):
                    combine(blk, s, self_kernel(views_block, k, dtype=np.float64)[:, None], False)
        if compiled:
            if first:  # no kernel with a weight: nothing was stored into C
                C.fill(0)
            P = C @ self.Q
            out = P if P.dtype == np.dtype(out_dtype) else np.empty(P.shape, dtype=out_dtype)
            return finish_compiled(P, cent, coef, self.U, self.V, self.center, unit_rows, out)
        if self.center:
            H -= cent @ self.U + coef @ self.V
        if unit_rows:
            from ._linalg import unit_rows as to_unit_rows  # scipy.linalg stays out of this module's import

            H = to_unit_rows(H)
        return H.astype(out_dtype, copy=False)


def _column_scale(prep: KernelPreprocessing, p: int, n: int) -> np.ndarray:
    """dl_p: the landmark side of diagonal normalisation (ones without it), shape (n,)."""
    if prep.normalize == "diagonal":
        return 1.0 / np.sqrt(np.maximum(prep.diag[p], _DIAG_FLOOR))
    return np.ones(n)
