"""GMLKM: graph-filtered late-fusion multiple kernel clustering, fitted on landmarks.

Seed: "Sharper Error Bounds in Late Fusion Multi-view Clustering Using Eigenvalue
Proportion" (Du et al.), eq. 21-27 and Algorithm 1; algorithms.md section 5.

Fit, on n landmarks (one node, one base kernel in memory at a time):

1. every base kernel K_p (the kernel specs of :class:`MultipleKernelClustering`, centred and
   normalised the same way) gives a base partition H_p, its top-d eigenvectors;
   near-identity kernels are detected by their principal eigenvalue proportion and dropped,
   and so are the kernels of views that are (nearly) constant on the landmarks;
2. per base partition, the adaptive-neighbour graph A_p of Nie, Wang & Huang (2014) on the
   rows of H_p and the low-pass filter G_p = sum_{o=1}^{o_bar} T_p^o, T_p = (I + D^-1/2 A_p
   D^-1/2) / 2, applied by repeated sparse products (never an n x n dense matrix;
   :mod:`mkdist._core._graph`);
3. Algorithm 1: alternate labels Y (k-means on H~ = G~ [gamma_1 H_1, ..., gamma_m H_m],
   G~ = sum_i mu_i G_i), view weights gamma (eq. 26) and filter weights mu (eq. 27);
4. (``normalize_embedding``, the default) the clusters of the row-normalised H~ of the
   landmarks, by k-means started from Algorithm 1's clusters and from k-means++ restarts.

Every row is then embedded out of sample through the row engine (NumPy or Dask,
:class:`mkdist._core._blocks.RowBlocks`): its base embeddings h_p(x) (MKC-AE, the kernel rows of
:class:`mkdist._core._kernels.ProjectedKernels`), its adaptive-neighbour weights to the landmarks
in every H_i space, the same filter polynomial (then scaled to unit length).  The final
k-means runs on the embedding of all N rows (``cluster_all_points``, as MKC-AE's k-means on
H_N), and new points go to the nearest centroid: the stage plan landmarks -> model ->
embedding -> labels of
:class:`mkdist._methods._base.LandmarkEmbeddingEstimator`.  See :class:`LateFusionClustering` (Notes)
for the derivation.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.sparse

from .._core._blocks import RowBlocks, cache_block_rows
from .._core._distances import nearest_center
from .._core._graph import (
    Graph,
    NeighborSpaces,
    adaptive_neighbor_weights,
    apply_filter,
    build_graph,
    filter_basis,
    simplex_qp,
)
from .._core._kernel_specs import FittedKernel, resolve_kernel_specs
from .._core._kernels import (
    KernelPreprocessing,
    ProjectedKernels,
    fit_kernels,
    fit_preprocessing,
    kernel_blocks,
    kernel_model_from_state,
    kernel_model_state,
)
from .._core._kmeans import KMeansResult
from .._core._linalg import largest_entry_signs, top_eigenpairs, top_eigenvalue_sum, unit_rows
from .._core._pep import excess_pep, principal_eigenvalue_proportion
from .._core._scaling import FeatureScaling
from .._core._state import StateArrays
from .._core._validation import check_finite, common_float_dtype
from ..errors import DegenerateKernelWarning, InputValidationError
from . import _params
from ._base import KernelLandmarkEstimator
from ._registry import register

__all__ = ["LateFusionClustering", "LateFusionModel", "adaptive_neighbor_weights"]

#: Landmarks used to decide the order in which base kernels are processed (see _fit_base).
_PILOT_SIZE = 256
#: Kernel q shares the base partition of an earlier kernel p of its view when the relative
#: Frobenius difference of their preprocessed pilot kernels is below 2x this and
#: ||K_q H_p - H_p Lambda_p||_F <= this x ||Lambda_p||_F on all landmarks.  "mkkm12"'s Gaussians
#: with t = 10, 50, 100 x D differ by 4e-4 / 1e-5 (proteinfold), its two degree-4
#: polynomials by 1.4e-4, its two degree-2 ones by 4.5e-3.  At 1e-2 (merging those too) orl
#: lost 2 ACC points and reuters1200 3 NMI points (5 / 3 seeds); at 1e-3 both equal the fit
#: without merging (bench/RESULTS.md).
_DUPLICATE_RTOL = 1e-3
#: An eigenpair of K_p is kept in H_p only if lambda_j > this x lambda_1: smaller ones span
#: the (numerical) null space, whose eigenvectors are arbitrary and whose 1/lambda_j would
#: blow up the out-of-sample embedding.
_EIG_RTOL = 1e-8


#: Neighbours of the adaptive-neighbour graphs when ``n_neighbors=None`` (at most n - 2).  The
#: paper fixes 5; 10 raised the mean ACC over the 28 shared sets from 0.654 to 0.667 and the
#: sets beating k-means from 22 to 23 (10 seeds; ORL 0.82 -> 0.90, Yale 0.78 -> 0.88; MSRC-v1
#: 0.92 -> 0.87) and UCI mfeat pix from 0.938 to 0.945 (bench/RESULTS.md, late-fusion defaults).
DEFAULT_N_NEIGHBORS = 10

#: Default ``min_pep_ratio``, below the PEP rule's 0.1 elsewhere (``DEGENERATE_PEP_RATIO``):
#: cosine kernels on sparse text/graph views cluster well but spread their spectrum (ACM: excess
#: k-PEP 0.03-0.04 of the best kernel's), and at 0.1 they were dropped, leaving ACM to a
#: near-constant view (ACC 0.38); "mkkm12"'s near-identity Gaussians stay below 0.02 (UCI
#: mfeat pix: excess ratio ~0.01), so they are still dropped (bench/RESULTS.md, late-fusion grid).
DEFAULT_MIN_PEP_RATIO = 0.02


def _fit_seeds(seed: int) -> tuple[int, int, int]:
    """Seeds of the landmark sample, the base partitions and the fusion (+ final k-means).

    Drawn from the fit's one integer seed exactly as ``fit`` drew them from an integer
    ``random_state`` before the estimator protocol, so the same seed makes the same choices
    (``bench/bench_late_fusion.py`` reproduces this sequence to reuse base partitions).
    """
    rng = np.random.RandomState(seed)
    return tuple(int(s) for s in rng.randint(np.iinfo(np.int32).max, size=3))


# ============================================================================ base partitions
@dataclasses.dataclass
class _Base:
    """Base partitions of every base kernel on the landmarks (step 1 of the fit)."""

    view_names: list[str]
    n_features: dict[str, int]
    landmarks: dict[str, np.ndarray]      # scaled, float64
    scaling: FeatureScaling | None
    kernels: list[FittedKernel]           # all m
    preprocessing: KernelPreprocessing    # (m, n) statistics of all m
    pep: np.ndarray                       # (m,) beta(K_p, k), or its upper bound if screened
    pep_exact: np.ndarray                 # (m,) bool
    kept: np.ndarray                      # (m',) indices of the kept kernels, increasing
    dropped: list[dict]                   # one record per dropped kernel
    merged: list[dict]                    # one record per kernel sharing a kept kernel's partition
    kernel_group: np.ndarray              # (m,) position in kept of the partition each kernel uses, -1: dropped
    H: dict[int, np.ndarray]              # p -> (n, d_p) eigenvectors (kept kernels; others when computed)
    eigenvalues: dict[int, np.ndarray]    # p -> (d_p,)
    n_clusters: int
    embedding_dim: int
    min_pep_ratio: float
    timings: dict[str, float]


def _check_constant_views(specs, landmark_views: Mapping[str, np.ndarray], center: bool, d: int) -> None:
    """A view constant on the landmarks makes every centred kernel on it zero: refuse early."""
    if not center:
        return
    for s in specs:
        L = landmark_views[str(s.view)]
        if L.shape[0] > 1 and not np.any(np.ptp(L, axis=0) > 0):
            raise InputValidationError(
                f"base kernel {s.kind!r} on view {s.view!r}: the view is constant on the landmarks, so "
                f"the centred kernel is zero and its top-{d} eigenvalues are all 0; drop the view "
                "or this kernel."
            )


#: A view is near-constant on the landmarks when at least this share of the pairs of its
#: landmark rows are identical (its median pairwise distance is 0: the "constant or nearly so"
#: of the power k-means bandwidth check).  Its kernels are dropped (``_near_constant_views``).
NEAR_CONSTANT_PAIR_SHARE = 0.5


def identical_pair_share(L: np.ndarray) -> float:
    """Share of the pairs of rows of L that are identical (0 for fewer than 2 rows).

    Rows are counted by their bytes in a dict (exact, O(n d): 0.05 s on a 2000 x 3025 view,
    where ``np.unique(axis=0)`` took 1.3 s); ``+ 0.0`` makes -0.0 and 0.0 the same bytes.
    """
    n = L.shape[0]
    if n < 2:
        return 0.0
    rows = np.ascontiguousarray(np.asarray(L, dtype=np.float64) + 0.0)
    c = np.fromiter(collections.Counter(r.tobytes() for r in rows).values(), dtype=np.float64)
    return float((c * (c - 1.0)).sum() / (n * (n - 1.0)))


def _near_constant_views(landmark_views: Mapping[str, np.ndarray]) -> dict[str, float]:
    """View -> identical-pair share of the views that are near-constant on the landmarks.

    Such a view (ACM's view4: 99.4% of the pairs of rows identical) has a base partition that
    lives on its few distinct rows: Algorithm 1 finds labels that leave it (almost) no
    k-means residual, alpha_p ~ 0, and eq. 26 then gives it all of gamma -- the fused
    clustering is that view's handful of odd rows (ACM, seed 2: ACC 0.35).  Its PEP is close
    to 1 (one giant block), so the PEP rule, which drops kernels with too little structure,
    keeps it and even measures every other kernel against it.
    """
    out = {}
    for name, L in landmark_views.items():
        share = identical_pair_share(np.asarray(L))
        if share >= NEAR_CONSTANT_PAIR_SHARE:
            out[str(name)] = share
    return out


def _same_partition(K: np.ndarray, reps: Sequence[int], H: Mapping[int, np.ndarray],
                    eigenvalues: Mapping[int, np.ndarray]) -> tuple[int, np.ndarray] | None:
    """(r, K H_r) for the first kernel r among ``reps`` whose eigenpairs are K's too, to
    ``_DUPLICATE_RTOL`` (a residual test: one n x n x d product instead of an eigensolve)."""
    for r in reps:
        lam = eigenvalues[r]
        KH = K @ H[r]
        if np.linalg.norm(KH - H[r] * lam[None, :]) <= _DUPLICATE_RTOL * np.linalg.norm(lam):
            return r, KH
    return None


def _fit_base(landmark_views: Mapping[str, np.ndarray], *, n_clusters: int, embedding_dim: int,
              kernels: Any, center: bool, normalize, scale, min_pep_ratio: float,
              random_state: int) -> _Base:
    """Step 1: preprocessed base kernels, one at a time; PEP screen; top-d eigenvectors.

    Kernels are generated by ``kernel_blocks`` (one GEMM per view) and preprocessed by
    ``fit_preprocessing`` one at a time, so memory is a few n x n arrays, never (m, n, n).

    Degenerate-kernel rule (documented in LateFusionClustering): with the excess PEP
    e_p = (beta(K_p, k) - k/n) / (1 - k/n), kernel p is dropped when
    e_p < min_pep_ratio * max_q e_q.  To skip the eigensolve of such kernels, kernels are
    processed in decreasing order of a pilot PEP on 256 landmarks, and a kernel whose upper
    bound beta <= sqrt(k) ||K_p||_F / tr(K_p) already fails the rule against the best exact
    PEP seen so far is dropped without eigensolve.  This changes only the cost: a kernel
    screened out would fail the rule with its exact PEP too (beta_p <= bound < ratio x running
    max <= ratio x final max).
    """
    rng = np.random.RandomState(random_state)
    t0 = time.perf_counter()
    names = list(landmark_views)
    specs = resolve_kernel_specs(kernels, names, landmark_views)  # "auto" reads the views' sparsity
    n = next(iter(landmark_views.values())).shape[0]
    _check_constant_views(specs, landmark_views, center, embedding_dim)
    near_constant = _near_constant_views(landmark_views)
    if near_constant and all(str(s.view) in near_constant for s in specs):
        raise InputValidationError(
            f"every view with a base kernel is constant or nearly so on the landmarks (share of identical pairs of "
            f"rows: {near_constant}): no kernel can show cluster structure; drop these views or add others.")
    scaling = FeatureScaling.fit(scale, landmark_views)
    lv = scaling.apply(landmark_views, np.float64) if scaling is not None else landmark_views
    lv = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in lv.items()}
    fitted = fit_kernels(specs, lv, random_state=int(rng.randint(np.iinfo(np.int32).max)))
    m = len(fitted)
    k = n_clusters
    chance = k / n

    # Pilot kernels on a few landmarks: their PEPs set the processing order, their differences
    # name the candidate duplicates (checked on all landmarks below).
    candidates: dict[int, list[int]] = {p: [] for p in range(m)}
    if m > 1:
        sub = np.sort(rng.choice(n, _PILOT_SIZE, replace=False)) if n > _PILOT_SIZE else np.arange(n)
        sv = {name: v[sub] for name, v in lv.items()}
        pilot = np.zeros(m)
        pilot_kernels = {}
        for p, blk in kernel_blocks(sv, sv, fitted, reuse=True):
            Kp, _ = fit_preprocessing(blk[None], center, normalize)
            tr = float(np.trace(Kp[0]))
            pilot[p] = top_eigenvalue_sum(Kp[0], k) / tr if tr > 0 else 0.0
            pilot_kernels[p] = Kp[0].astype(np.float32)
        order = [int(p) for p in np.argsort(-pilot, kind="stable")]
        norms = {p: float(np.linalg.norm(K)) for p, K in pilot_kernels.items()}
        for a, p in enumerate(order):
            for q in order[a + 1:]:
                if fitted[q].view == fitted[p].view and (
                        np.linalg.norm(pilot_kernels[q] - pilot_kernels[p])
                        <= 2 * _DUPLICATE_RTOL * max(norms[p], norms[q], 1e-300)):
                    candidates[q].append(p)
        del pilot_kernels
    else:
        order = list(range(m))

    stats: list[KernelPreprocessing | None] = [None] * m
    pep = np.zeros(m)
    pep_exact = np.zeros(m, dtype=bool)
    H: dict[int, np.ndarray] = {}
    eigenvalues: dict[int, np.ndarray] = {}
    screened: list[int] = []
    duplicate_of: dict[int, int] = {}
    best_excess = -np.inf
    t_eig = 0.0
    ordered = [fitted[p] for p in order]
    for j, blk in kernel_blocks(lv, lv, ordered, reuse=True):
        p = order[j]
        Kp, st = fit_preprocessing(blk[None], center, normalize)
        Kp = Kp[0]
        stats[p] = st
        trace = float(np.trace(Kp))
        if str(fitted[p].view) in near_constant:  # dropped below, without its eigensolve
            pep[p] = min(1.0, math.sqrt(k) * float(np.linalg.norm(Kp)) / trace) if trace > 0 else 1.0
            del Kp, blk
            continue
        if not trace > 1e-12 * n:
            raise InputValidationError(
                f"base kernel {fitted[p].name} is zero on the landmarks after preprocessing (trace "
                f"{trace:.3g}): its top-{embedding_dim} eigenvalues are all 0; drop this kernel or its view."
            )
        if min_pep_ratio > 0 and np.isfinite(best_excess):
            bound = min(1.0, math.sqrt(k) * float(np.linalg.norm(Kp)) / trace)
            if excess_pep(bound, chance) < min_pep_ratio * best_excess:
                pep[p] = bound
                screened.append(p)
                del Kp, blk
                continue
        same = _same_partition(Kp, [r for r in candidates[p] if r in H], H, eigenvalues)
        if same is not None:
            duplicate_of[p], KH = same
            ritz = (H[duplicate_of[p]][:, :k] * KH[:, :k]).sum(axis=0)  # Rayleigh quotients, top-k subspace
            pep[p] = min(float(np.clip(ritz, 0.0, None).sum()) / trace, 1.0)
            pep_exact[p] = True
            del Kp, blk
            continue
        te = time.perf_counter()
        vals, vecs = top_eigenpairs(Kp, embedding_dim)  # Lanczos: measured in mkdist._core._linalg
        t_eig += time.perf_counter() - te
        if not vals[0] > 1e-12 * max(trace / n, 1e-300):
            raise InputValidationError(
                f"base kernel {fitted[p].name}: its top-{embedding_dim} eigenvalues are all 0 "
                f"(largest {vals[0]:.3g}); the kernel carries nothing to cluster; drop it or its view."
            )
        keep = vals > _EIG_RTOL * vals[0]
        V = vecs[:, keep]
        H[p] = V * largest_entry_signs(V)[None, :]
        eigenvalues[p] = vals[keep]
        pep[p] = min(float(np.clip(vals[:k], 0.0, None).sum()) / trace, 1.0)
        pep_exact[p] = True
        best_excess = max(best_excess, float(excess_pep(pep[p], chance)))
        del Kp, blk

    excess = excess_pep(pep, chance)
    threshold = min_pep_ratio * best_excess
    kept, dropped, merged = [], [], []
    for p in range(m):
        view = str(fitted[p].view)
        if view in near_constant:
            dropped.append({"index": p, "name": fitted[p].name, "pep": float(pep[p]), "pep_exact": False,
                            "excess_pep": float(excess[p]), "threshold": float(threshold),
                            "reason": f"view {view!r} is constant or nearly so on the landmarks "
                                      f"({near_constant[view]:.1%} of the pairs of rows identical)"})
            continue
        fails = min_pep_ratio > 0 and excess[duplicate_of.get(p, p)] < threshold  # a duplicate follows its kernel
        if fails:
            dropped.append({"index": p, "name": fitted[p].name, "pep": float(pep[p]),
                            "pep_exact": bool(pep_exact[p]), "excess_pep": float(excess[p]),
                            "threshold": float(threshold),
                            "reason": "screened by the Frobenius bound" if p in screened
                            else "excess PEP below min_pep_ratio x the best kernel's"})
        elif p in duplicate_of:
            merged.append({"index": p, "name": fitted[p].name, "into": duplicate_of[p],
                           "into_name": fitted[duplicate_of[p]].name, "pep": float(pep[p])})
        else:
            kept.append(p)
    kernel_group = np.full(m, -1, dtype=np.int64)
    kernel_group[kept] = np.arange(len(kept))
    for rec in merged:
        kernel_group[rec["index"]] = kernel_group[rec["into"]]
    if dropped:
        why = f"excess PEP < {min_pep_ratio:g} x the best kernel's {best_excess:.3g}; chance level k/n = {chance:.3g}"
        if near_constant:
            why = f"views {sorted(near_constant)} constant or nearly so on the landmarks, or {why}"
        warnings.warn(
            f"{len(dropped)} of {m} base kernels carry (almost) no cluster structure and were dropped "
            f"({why}): {[d['name'] for d in dropped]}.  See dropped_kernels_.",
            DegenerateKernelWarning, stacklevel=4)
    if best_excess < 0.05:
        warnings.warn(
            f"the best base kernel's {k}-PEP is {chance + best_excess * (1 - chance):.3g}, close to the "
            f"chance level k/n = {chance:.3g}: no kernel shows cluster structure on the landmarks.",
            DegenerateKernelWarning, stacklevel=4)
    for p in list(H):
        if p not in kept:  # dropped by the final rule: keep memory small
            del H[p], eigenvalues[p]
    timings = {"kernels_s": time.perf_counter() - t0 - t_eig, "eigen_s": t_eig}
    return _Base(names, {k_: int(v.shape[1]) for k_, v in landmark_views.items()}, lv, scaling, fitted,
                 KernelPreprocessing.stack(stats), pep, pep_exact, np.asarray(kept, dtype=np.int64),
                 dropped, merged, kernel_group, H, eigenvalues, n_clusters, embedding_dim, float(min_pep_ratio),
                 timings)


# ============================================================================ fusion (Algorithm 1)
@dataclasses.dataclass
class _Fusion:
    gamma: np.ndarray        # (m',)
    mu: np.ndarray           # (m',)
    labels: np.ndarray       # (n,)
    centers: np.ndarray      # (k, D)
    embedding: np.ndarray    # (n, D) H~ at the optimum
    objective_history: list[float]
    objective_steps: list[tuple[str, float]]
    n_iter: int
    converged: bool


def _filtered(graphs: Sequence[Graph], weights: np.ndarray, Z: np.ndarray, order: int,
              cache: dict | None = None, capacity: int = 0) -> np.ndarray:
    """G~ Z = sum_i w_i G_i Z over the filters with w_i != 0.

    A filter costs o_bar sparse products over the columns it is applied to: Z's D columns,
    or, when D > n, the n columns of the identity -- G~ is then formed as a dense n x n
    matrix and applied in one GEMM (proteinfold, D = 7560 > n = 694: 11x fewer sparse
    products).  ``cache``: filter index -> G_i applied to those columns, read, and filled up
    to ``capacity`` entries.
    """
    n, D = Z.shape
    dense = D > n
    target = np.eye(n) if dense else Z
    out = np.zeros(target.shape)
    for i, (w, g) in enumerate(zip(weights, graphs)):
        if w == 0.0:
            continue
        GZ = cache.get(i) if cache is not None else None
        if GZ is None:
            GZ = apply_filter(g.S_hat, target, order)
            if cache is not None and len(cache) < capacity:
                cache[i] = GZ
        out += w * GZ
    return out @ Z if dense else out


#: Bytes of filtered partitions G_i H that Algorithm 1 keeps between sweeps.  The learned mu
#: has few non-zero weights (ccv: 5 of 31) that change little from sweep to sweep, and every
#: G_i H recomputed costs o_bar sparse products over n x D (ccv: 0.1 s each, 30 sweeps).
_FILTERED_CACHE_BYTES = 256 * 2**20


class _FilterMoments:
    """What Algorithm 1 needs of the filtered partitions G_i H_p, without holding them.

    Holding G_i H for every filter i costs m n D memory and every sweep m^2 n D for the mu
    step's Gram (proteinfold, 140 kernels: 6 GB and more than 15 minutes).  But with Ybar =
    Y (Y^T Y)^-1/2, I - P_Y = I - Ybar Ybar^T is a projector, so per partition p

        Q_p[i, j] = <(I - P_Y) G_i H_p, (I - P_Y) G_j H_p> = C_p[i, j] - B_p[i, j],
        C_p[i, j] = <G_i H_p, G_j H_p>                       (fixed, computed once here)
        B_p[i, j] = <Ybar^T G_i H_p, Ybar^T G_j H_p>        (per labelling, ``_Labelling``)

    and alpha_p = mu^T Q_p mu, J = sum_p gamma_p^2 alpha_p, M = sum_p gamma_p^2 Q_p (eq. 26,
    27).  Ybar^T G_i H_p = (G_i Ybar)^T H_p (G_i is symmetric): m filters on n x k and one GEMM.
    C is built one partition at a time (m filtered n x d_p blocks in memory), and the same
    pass yields G~ H for the uniform filter weights Algorithm 1 starts from.

    Parameters
    ----------
    H : ndarray of shape (n, D)
        The partitions side by side.
    slices : list of m' slices
        The columns of each partition in H.
    graphs : list of m Graph
    order : int
    mu0 : ndarray of shape (m,)
        Filter weights of ``GH0``.
    """

    def __init__(self, H: np.ndarray, slices: Sequence[slice], graphs: Sequence[Graph], order: int,
                 mu0: np.ndarray):
        self.H, self.slices, self.graphs, self.order = H, list(slices), list(graphs), int(order)
        self._cache: dict[int, np.ndarray] = {}
        m = len(graphs)
        self.C = np.empty((len(self.slices), m, m))
        self.GH0 = np.zeros(H.shape)  # G~ H at mu0, summed as ``_filtered`` sums
        for p, cols in enumerate(self.slices):
            Hp = H[:, cols]
            filt = np.stack([apply_filter(g.S_hat, Hp, order) for g in graphs])  # (m, n, d_p)
            flat = filt.reshape(m, -1)
            self.C[p] = flat @ flat.T
            for w, block in zip(mu0, filt):
                if w != 0.0:
                    self.GH0[:, cols] += w * block

    def filtered(self, mu: np.ndarray) -> np.ndarray:
        """G~ H for filter weights mu, keeping G_i H of recent filters (``_FILTERED_CACHE_BYTES``)."""
        capacity = _FILTERED_CACHE_BYTES // (8 * self.H.shape[0] * min(self.H.shape))
        for i in [i for i in self._cache if mu[i] == 0.0]:
            del self._cache[i]
        return _filtered(self.graphs, mu, self.H, self.order, self._cache, capacity)

    def labelling(self, labels: np.ndarray, k: int) -> _Labelling:
        """The cluster projections Ybar^T G_i H of ``labels``, for alpha and M (``_Labelling``)."""
        return _Labelling(self, labels, k)


class _Labelling:
    """alpha_p and M under one labelling, from F_i = G_i Ybar (n x k per filter).

    B_p[i, j] = <F_i^T H_p, F_j^T H_p>.  alpha_p = mu^T (C_p - B_p) mu needs only
    (sum_i mu_i F_i)^T H (k x D).  M = sum_p w_p (C_p - B_p) (w_p = c_p gamma_p^2) needs the
    w-weighted Gram of the F_i^T H: from E = F^T H (2 m k n D flops) when D <= n, else as
    <F_i, P_w F_j> with the n x n P_w = sum_p w_p H_p H_p^T (2 n^2 D + 2 n^2 m k flops;
    proteinfold: 8 instead of 23 GFlop per sweep).
    """

    def __init__(self, moments: _FilterMoments, labels: np.ndarray, k: int):
        self.moments = moments
        H = moments.H
        n, D = H.shape
        m = len(moments.graphs)
        counts = np.bincount(labels, minlength=k)
        Ybar = np.zeros((n, k))
        Ybar[np.arange(n), labels] = 1.0 / np.sqrt(counts[labels])
        self.F = np.stack([apply_filter(g.S_hat, Ybar, moments.order) for g in moments.graphs], axis=1)  # (n, m, k)
        self.starts = np.array([sl.start for sl in moments.slices])
        self.widths = np.array([sl.stop - sl.start for sl in moments.slices])
        self.E = None
        if D <= n:
            self.E = (self.F.reshape(n, m * k).T @ H).reshape(m, k, D)  # Ybar^T G_i H

    def alpha(self, mu: np.ndarray) -> np.ndarray:
        """alpha_p = ||(I - P_Y) G~ H_p||_F^2 for filter weights mu, shape (m',)."""
        C = self.moments.C
        if self.E is not None:
            T = np.tensordot(mu, self.E, axes=1)
        else:
            T = np.tensordot(self.F, mu, axes=([1], [0])).T @ self.moments.H  # (sum_i mu_i F_i)^T H
        B = np.add.reduceat((T * T).sum(axis=0), self.starts)
        return np.maximum(np.einsum("i,pij,j->p", mu, C, mu) - B, 0.0)  # >= 0 but for rounding

    def gram(self, w: np.ndarray) -> np.ndarray:
        """M = sum_p w_p <(I - P_Y) G_i H_p, (I - P_Y) G_j H_p>, shape (m, m)."""
        C = self.moments.C
        n, m, k = self.F.shape
        root = np.repeat(np.sqrt(w), self.widths)
        if self.E is not None:
            Ew = (self.E * root[None, None, :]).reshape(m, -1)
            B = Ew @ Ew.T
        else:
            Hw = self.moments.H * root[None, :]
            PF = ((Hw @ Hw.T) @ self.F.reshape(n, m * k)).reshape(n, m, k)
            B = np.tensordot(self.F, PF, axes=([0, 2], [0, 2]))
        return np.tensordot(w, C, axes=1) - B


def _objective(alpha: np.ndarray, gamma: np.ndarray, copies: np.ndarray) -> float:
    """J = sum_p c_p gamma_p^2 alpha_p."""
    return float((copies * gamma**2 * alpha).sum())


def _kmeans_step(Z: np.ndarray, k: int, init, n_init: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels and centres: k-means++ restarts (init=None) or Lloyd from given centres to a fixed point."""
    # Imported here, not at the top: `import mkdist` (and so every CLI refusal) skips sklearn.cluster.
    from sklearn.cluster import KMeans

    if init is None:
        km = KMeans(k, n_init=n_init, random_state=seed).fit(Z)
    else:
        # tol=0: Lloyd runs until no label changes, so labels and centres are consistent;
        # starting from the current cluster means it can only lower the k-means objective.
        km = KMeans(k, init=init, n_init=1, tol=0.0, max_iter=300).fit(Z)
    return km.labels_.astype(np.int64), km.cluster_centers_


def _fit_fusion(H_cat: np.ndarray, col_kernel: np.ndarray, graphs: Sequence[Graph], copies: np.ndarray, *,
                n_clusters: int, order: int, learn_mu: bool, n_init: int, max_iter: int, tol: float,
                random_state: int) -> _Fusion:
    """Algorithm 1: alternate Y (k-means), gamma (eq. 26) and mu (eq. 27) on eq. 23.

    Every step minimises J over its variable with the others fixed (gamma and mu exactly,
    Y by Lloyd from the current clusters), so J never increases.  J, alpha and M come from
    :class:`_FilterMoments`; G~ H is formed only for the k-means, with the filters whose
    weight is non-zero.

    Partition p stands for ``copies[p]`` base kernels with the same partition and graph
    (``_DUPLICATE_RTOL``), and the result is Algorithm 1's on all of them: equal partitions
    get equal gamma (eq. 26), only the sum of their mu matters (eq. 27), so with c_p copies
    J = sum_p c_p gamma_p^2 alpha_p, sum_p c_p gamma_p = 1, M = sum_p c_p gamma_p^2 Q_p,
    H~'s block p is sqrt(c_p) gamma_p G~ H_p (the same distances as c_p copies of it) and
    mu below is the copies' sum (it starts at c_p / sum c).
    """
    rng = np.random.RandomState(random_state)
    m = len(graphs)
    k = n_clusters
    c = np.asarray(copies, dtype=np.float64)
    bounds = np.flatnonzero(np.diff(np.r_[-1, col_kernel, m]))
    slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    gamma = np.full(m, 1.0 / c.sum())
    mu = c / c.sum()
    moments = _FilterMoments(H_cat, slices, graphs, order, mu)
    learn_mu = learn_mu and order > 0 and m > 1  # with G_i = I every mu gives the same H~
    GH = moments.GH0

    def columns(gamma):
        return (np.sqrt(c) * gamma)[col_kernel]

    labels, centers = _kmeans_step(GH * columns(gamma), k, None, n_init, rng.randint(np.iinfo(np.int32).max))
    lab = moments.labelling(labels, k)
    alpha = lab.alpha(mu)
    J = _objective(alpha, gamma, c)
    history = [J]
    steps = [("init", J)]
    converged = False
    n_iter = 0
    for _ in range(max_iter):
        n_iter += 1
        # gamma (eq. 25-26): min sum_p gamma_p^2 alpha_p on the simplex -> gamma_p ~ 1/alpha_p.
        tiny = np.finfo(np.float64).tiny
        if np.any(alpha <= tiny):
            gamma = (alpha <= tiny).astype(np.float64)
            gamma /= (c * gamma).sum()
        else:
            gamma = (1.0 / alpha) / np.sum(c / alpha)
        J_g = float((c * gamma**2 * alpha).sum())
        steps.append(("gamma", J_g))
        # mu (eq. 27): M_ij = <(I - P_Y) G_i H_g, (I - P_Y) G_j H_g>, H_g = [gamma_p H_p].
        if learn_mu:
            M = lab.gram(c * gamma**2)
            mu_new = simplex_qp(M, mu)
            if not np.array_equal(mu_new, mu):
                GH = moments.filtered(mu_new)
            mu = mu_new
            steps.append(("mu", float(mu @ M @ mu)))
        # Y (eq. 24): k-means on H~, warm-started at the current clusters' means.
        Z = GH * columns(gamma)
        init = _residual_means(Z, labels, k, centers)
        labels, centers = _kmeans_step(Z, k, init, 1, 0)
        lab = moments.labelling(labels, k)
        alpha = lab.alpha(mu)
        J_new = _objective(alpha, gamma, c)
        steps.append(("Y", J_new))
        history.append(J_new)
        if J - J_new <= tol * max(J, np.finfo(np.float64).tiny):
            converged = True
            J = J_new
            break
        J = J_new
    # Final labels and centres of the final H~ (the last step was a Lloyd fixed point).
    return _Fusion(gamma, mu, labels, centers, GH * columns(gamma), history, steps, n_iter, converged)


def _normalized_clusters(Z: np.ndarray, labels: np.ndarray, k: int, n_init: int,
                         seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Centroids of k-means on the unit rows Z of the landmarks' H~ (``normalize_embedding``).

    Two candidates, the one with the lower k-means objective on Z kept (ties: the first):
    Lloyd from the means of Algorithm 1's clusters (the paper's Y, carried into the
    normalised space) and ``n_init`` k-means++ restarts.  Neither is better on its own (5
    seeds, 5 graph neighbours, bench/RESULTS.md): from Algorithm 1's clusters alone Yale fell
    to 0.74 and BBCSport to 0.79 (restarts: 0.81 / 0.97); the restarts alone found a lower-ACC
    optimum on UCI mfeat pix in 3 of 5 seeds (0.85 against 0.93-0.95) -- and there the lower
    objective was the better partition in every seed.

    Returns
    -------
    centers : ndarray of shape (k, D)
    record : dict
        ``start`` ("algorithm1" or "kmeans++"), ``inertia`` of both candidates.
    """
    init = _residual_means(Z, labels, k, np.zeros(0))
    la, ca = _kmeans_step(Z, k, init, 1, 0)
    lb, cb = _kmeans_step(Z, k, None, n_init, seed)
    ia = float(((Z - ca[la]) ** 2).sum())
    ib = float(((Z - cb[lb]) ** 2).sum())
    record = {"start": "algorithm1" if ia <= ib else "kmeans++", "inertia_algorithm1": ia, "inertia_kmeans++": ib}
    return (ca if ia <= ib else cb), record


def _residual_means(Z: np.ndarray, labels: np.ndarray, k: int, fallback: np.ndarray) -> np.ndarray:
    """Cluster means of Z under labels (an empty cluster keeps its previous centre)."""
    counts = np.bincount(labels, minlength=k)
    Y = scipy.sparse.csr_matrix((np.ones(labels.size), (labels, np.arange(labels.size))),
                                shape=(k, labels.size))
    means = (Y @ Z) / np.maximum(counts, 1)[:, None]
    if fallback.shape == means.shape:
        means[counts == 0] = fallback[counts == 0]
    return means


# ============================================================================ fitted model
def _fingerprint_constants(view_index: int, n_features: int) -> np.ndarray:
    """Fixed odd 64-bit multipliers for the row fingerprint of one view."""
    rng = np.random.default_rng([0x6D6B64, view_index, n_features])
    return rng.integers(0, 2**63, size=n_features, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _fingerprints(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """A 64-bit fingerprint of every row of the (scaled, float64) view blocks, shape (b,).

    sum_j bits(x_j) * c_j modulo 2^64 over the IEEE bit patterns: integer arithmetic, so the
    value does not depend on the memory layout or summation order (a float dot product
    would).  ``+ 0.0`` maps -0.0 to 0.0, which are equal values with different bits.
    """
    b = blocks[0].shape[0]
    acc = np.zeros(b, dtype=np.uint64)
    for v, X in enumerate(blocks):
        bits = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0).view(np.uint64)
        acc += (bits * _fingerprint_constants(v, X.shape[1])[None, :]).sum(axis=1, dtype=np.uint64)
    return acc


def _partition_copies(kernel_group: np.ndarray, n_kept: int) -> np.ndarray:
    """Base kernels sharing each kept partition (itself included), shape (n_kept,), from
    ``kernel_group`` (position in ``kept`` of each kernel's partition, -1: dropped)."""
    return np.bincount(kernel_group[kernel_group >= 0], minlength=n_kept)


@dataclasses.dataclass
class _OutOfSample:
    """The out-of-sample structures of a LateFusionModel (``LateFusionModel.oos``)."""

    bases: dict[int, np.ndarray]    # filter i -> B_i (n, D), for the filters weighted > 0
    projected: ProjectedKernels     # kernel rows times H_p Lambda_p^-1
    filters: list[int]              # the filters a new point enters
    neighbors: NeighborSpaces       # the landmarks in those filters' H_i spaces
    filter_scale: np.ndarray        # (len(filters), n): mu_i / sqrt(deg_i)
    stacked_bases: np.ndarray       # (len(filters) n, D) in ``dtype``


@dataclasses.dataclass
class LateFusionModel:
    """Everything needed to place a new point: arrays + JSON, no pickle (see ``state``).

    Attributes
    ----------
    view_names : list of str
    n_features : dict of str to int
    landmarks : dict of str to ndarray of shape (n, d_v)
        Landmark rows, scaled, float64.
    landmark_indices : ndarray of shape (n,)
    scaling : FeatureScaling or None
    kernels : list of FittedKernel, length m
        All base kernels (dropped ones included).
    kept : ndarray of shape (m',)
        Indices (into ``kernels``) of the base kernels in the fusion.
    preprocessing : KernelPreprocessing
        Centring / normalisation statistics of all m kernels.
    partitions : ndarray of shape (n, D)
        [H_1, ..., H_m'], the kept base partitions side by side (D = sum_p d_p columns).
    column_kernel : ndarray of shape (D,)
        Position in ``kept`` of the partition each column belongs to.
    eigenvalues : ndarray of shape (D,)
        Eigenvalue of every column's eigenvector (for h_p(x) = P_p H_p Lambda_p^-1).
    view_weights, filter_weights : ndarray of shape (m',)
        gamma and mu of the kept kernels.
    graph_filter_order : int
    neighbor_indices, neighbor_weights : ndarray of shape (m', n, k)
        Each landmark's k nearest landmarks in every H_i space and its adaptive weights.
    cluster_centers : ndarray of shape (n_clusters, D)
    landmark_labels : ndarray of shape (n,)
        Nearest centroid of every landmark's fitted row H~: Algorithm 1's labels, or the
        final k-means' labels of the landmarks.
    dtype : {"float64", "float32"}
        Precision of the out-of-sample path: the kernel blocks, the neighbour distances and
        the embedding rows it returns (the landmark fit and every weight are float64).
    kernel_group : ndarray of shape (m,), optional
        Position in ``kept`` of the partition each base kernel uses (kernels with the same
        partition share one, see ``_DUPLICATE_RTOL``), -1 for a dropped kernel.  None: each
        kept kernel its own.  A partition shared by c kernels enters H~ with weight
        sqrt(c) gamma (Algorithm 1 on the c copies); ``filter_weights`` is the copies' sum.
    normalize_embedding : bool, default=False
        The clusters live in the row-normalised H~ (``LateFusionClustering``'s
        ``normalize_embedding``): ``transform_rows`` returns unit-length rows and
        ``cluster_embedding`` is the landmarks' H~ scaled so.  False (models saved before the
        option): raw H~.
    """

    view_names: list[str]
    n_features: dict[str, int]
    landmarks: dict[str, np.ndarray]
    landmark_indices: np.ndarray
    scaling: FeatureScaling | None
    kernels: list[FittedKernel]
    kept: np.ndarray
    preprocessing: KernelPreprocessing
    partitions: np.ndarray
    column_kernel: np.ndarray
    eigenvalues: np.ndarray
    view_weights: np.ndarray
    filter_weights: np.ndarray
    graph_filter_order: int
    neighbor_indices: np.ndarray
    neighbor_weights: np.ndarray
    cluster_centers: np.ndarray
    landmark_labels: np.ndarray
    dtype: str = "float64"
    kernel_group: np.ndarray | None = None
    normalize_embedding: bool = False

    def __post_init__(self):
        # Derived arrays, rebuilt by the same code as in the fit, so a model restored from its
        # state predicts bit for bit like the fitted one.
        n_kept = self.kept.size
        if self.kernel_group is None:  # every kept kernel its own partition
            self.kernel_group = np.full(len(self.kernels), -1, dtype=np.int64)
            self.kernel_group[self.kept] = np.arange(n_kept)
        #: base kernels sharing each kept partition (itself included), shape (m',)
        self.copies = _partition_copies(self.kernel_group, n_kept)
        self.graphs = [Graph.from_neighbors(self.neighbor_indices[i], self.neighbor_weights[i])
                       for i in range(n_kept)]
        self.gamma_cols = (np.sqrt(self.copies) * self.view_weights)[self.column_kernel]
        self.column_slices = [np.flatnonzero(self.column_kernel == i) for i in range(n_kept)]
        #: H~ of the landmarks (what the fit clustered)
        self.embedding = _filtered(self.graphs, self.filter_weights, self.partitions,
                                   self.graph_filter_order) * self.gamma_cols[None, :]
        #: the landmarks' rows in the space the clusters live in (``transform``'s rows)
        self.cluster_embedding = unit_rows(self.embedding) if self.normalize_embedding else self.embedding
        fp = _fingerprints([self.landmarks[v] for v in self.view_names])
        self.fingerprint_order = np.argsort(fp, kind="stable")
        self.fingerprints_sorted = fp[self.fingerprint_order]

    @functools.cached_property
    def oos(self) -> _OutOfSample:
        """What placing a point that is not a landmark needs, built on first use: a fit whose
        rows are all landmarks (every shared multi-view set) never pays for it."""
        n_kept = self.kept.size
        order = self.graph_filter_order
        Hg = self.partitions * self.gamma_cols[None, :]
        bases = {i: filter_basis(self.graphs[i].S_hat, Hg, order)
                 for i in range(n_kept) if order > 0 and self.filter_weights[i] > 0}
        # h_p(x) = kn_p(x, :) H_p Lambda_p^-1 of every kept kernel, in ``kept`` order.
        projected = ProjectedKernels(
            self.landmarks, self.kernels, self.preprocessing,
            {int(p): self.partitions[:, cols] / self.eigenvalues[cols][None, :]
             for p, cols in zip(self.kept, self.column_slices)}, dtype=self.dtype)
        # The filters a new point enters, the landmarks' coordinates in their H_i spaces, and
        # per filter mu_i / sqrt(deg_i) and B_i, stacked for one sparse product per block.
        filters = list(bases)
        neighbors = NeighborSpaces([self.partitions[:, self.column_slices[i]] for i in filters], dtype=self.dtype)
        filter_scale = np.array([self.filter_weights[i] / np.sqrt(self.graphs[i].degree)
                                 for i in filters]).reshape(len(filters), self.n_landmarks)
        # In ``dtype``: a block gathers ~m k random rows of it per point, a memory-bound product
        # (float32: 4 vs 9 us per point on W1).
        stacked_bases = np.ascontiguousarray(
            np.vstack([bases[i] for i in filters]) if filters else np.zeros((0, self.n_components)),
            dtype=self.dtype)
        return _OutOfSample(bases, projected, filters, neighbors, filter_scale, stacked_bases)

    # ------------------------------------------------------------------ helpers
    @property
    def n_landmarks(self) -> int:
        return self.partitions.shape[0]

    @property
    def n_components(self) -> int:
        return self.partitions.shape[1]

    @property
    def kept_kernels(self) -> list[FittedKernel]:
        return [self.kernels[p] for p in self.kept]

    # ------------------------------------------------------------------ out-of-sample rows
    def _scaled(self, blocks: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        views = dict(zip(self.view_names, blocks))
        if self.scaling is not None:
            return self.scaling.apply(views, np.float64)
        return {k: np.asarray(v, dtype=np.float64) for k, v in views.items()}

    def _match_landmarks(self, views: Mapping[str, np.ndarray]) -> np.ndarray:
        """Index of the landmark each row equals exactly (all views), or -1."""
        fp = _fingerprints([views[v] for v in self.view_names])
        pos = np.searchsorted(self.fingerprints_sorted, fp)
        pos_c = np.minimum(pos, self.fingerprints_sorted.size - 1)
        hit = self.fingerprints_sorted[pos_c] == fp
        match = np.full(fp.size, -1, dtype=np.int64)
        rows = np.flatnonzero(hit)
        if rows.size:
            cand = self.fingerprint_order[pos_c[rows]]
            same = np.ones(rows.size, dtype=bool)
            for v in self.view_names:  # a fingerprint collision is not a match
                same &= np.all(views[v][rows] == self.landmarks[v][cand], axis=1)
            match[rows[same]] = cand[same]
        return match

    def _base_rows(self, views: Mapping[str, np.ndarray]) -> np.ndarray:
        """[h_1(x), ..., h_m'(x)], h_p(x) = P_p(x) H_p Lambda_p^-1 (MKC-AE), shape (b, D).

        P_p(x) is the kernel row of x preprocessed like K_p (``ProjectedKernels``).
        """
        out = np.empty((next(iter(views.values())).shape[0], self.n_components))
        for i, G in self.oos.projected.rows(views):
            out[:, self.column_slices[i]] = G
        return out

    def _filtered_rows(self, Hx: np.ndarray) -> np.ndarray:
        """H~(x) = (1 - 2^-o) h_g(x) + sum_i mu_i sum_j a_i(x)_j B_i[j] for new points x.

        a_i(x)_j = s_xj / sqrt(deg_i[j]) over x's k nearest landmarks j in the H_i space,
        s_xj its adaptive-neighbour weights (derivation: Notes of LateFusionClustering).  The
        neighbours of every filter come from one search (``NeighborSpaces.query``).
        """
        Hg = Hx * self.gamma_cols[None, :]
        order = self.graph_filter_order
        if order == 0:
            return Hg
        k = self.neighbor_indices.shape[2]
        out = (1.0 - 2.0**-order) * Hg
        oos = self.oos
        if not oos.filters:
            return out
        idx, sqd = oos.neighbors.query([Hx[:, self.column_slices[i]] for i in oos.filters], k + 1)
        m, b = idx.shape[:2]
        idx = idx[:, :, :k]
        # coef[f, x, j] = mu_i s^i_xj / sqrt(deg^i_j); then sum_f,j coef B_i[j] is one sparse
        # (b, m n) x (m n, D) product over the stacked bases.
        coef = adaptive_neighbor_weights(sqd.reshape(m * b, k + 1), k).reshape(m, b, k)
        coef *= oos.filter_scale[np.arange(m)[:, None, None], idx]
        columns = idx + (np.arange(m) * self.n_landmarks)[:, None, None]
        S = scipy.sparse.csr_matrix((coef.transpose(1, 0, 2).ravel().astype(self.dtype, copy=False),
                                     columns.transpose(1, 0, 2).ravel(), np.arange(0, b * m * k + 1, m * k)),
                                    shape=(b, m * self.n_landmarks))
        out += S @ oos.stacked_bases
        return out

    def transform_rows(self, blocks: Sequence[np.ndarray]) -> np.ndarray:
        """H~ of one row block of every view (``view_names`` order), shape (b, D), in ``dtype``.

        A row equal to a landmark (bitwise, all views, after scaling) gets the landmark's
        fitted row: through the formula it would be its own nearest neighbour.
        """
        views = self._scaled(blocks)
        match = self._match_landmarks(views)
        out = np.empty((match.size, self.n_components), dtype=self.dtype)
        hit = match >= 0
        out[hit] = self.cluster_embedding[match[hit]]
        new = np.flatnonzero(~hit)
        if new.size:
            sub = {k: v[new] for k, v in views.items()} if new.size < match.size else views
            rows = self._filtered_rows(self._base_rows(sub))
            out[new] = unit_rows(rows) if self.normalize_embedding else rows
        return out

    @property
    def block_rows(self) -> int:
        """Rows per sub-block of the out-of-sample row functions: a (rows, n) kernel block
        stays cache-sized (``mkdist._core._blocks.cache_block_rows``)."""
        return cache_block_rows(self.n_landmarks, np.dtype(self.dtype).itemsize)

    # ------------------------------------------------------------------ state (no pickle)
    def state(self) -> tuple[dict, dict]:
        """(attrs, arrays) of the model, named arrays with dims (see ``model_state``).

        Dims are among "landmark", "component", "kernel", "kept_kernel", "neighbor",
        "cluster" and "feature__<view>".
        """
        attrs, arrays = kernel_model_state(self.view_names, self.landmarks, self.kernels, self.preprocessing,
                                           self.scaling)
        arrays.update({
            "landmark_indices": (("landmark",), np.asarray(self.landmark_indices, dtype=np.int64)),
            "kept": (("kept_kernel",), np.asarray(self.kept, dtype=np.int64)),
            "partitions": (("landmark", "component"), self.partitions),
            "column_kernel": (("component",), np.asarray(self.column_kernel, dtype=np.int64)),
            "eigenvalues": (("component",), self.eigenvalues),
            "view_weights": (("kept_kernel",), self.view_weights),
            "filter_weights": (("kept_kernel",), self.filter_weights),
            "neighbor_indices": (("kept_kernel", "landmark", "neighbor"), self.neighbor_indices),
            "neighbor_weights": (("kept_kernel", "landmark", "neighbor"), self.neighbor_weights),
            "cluster_centers": (("cluster", "component"), self.cluster_centers),
            "landmark_labels": (("landmark",), np.asarray(self.landmark_labels, dtype=np.int64)),
            "kernel_group": (("kernel",), np.asarray(self.kernel_group, dtype=np.int64)),
        })
        attrs.update({"n_features": {k: int(v) for k, v in self.n_features.items()},
                      "graph_filter_order": int(self.graph_filter_order), "dtype": str(self.dtype),
                      "normalize_embedding": bool(self.normalize_embedding)})
        return attrs, arrays

    @classmethod
    def from_state(cls, attrs: Mapping[str, Any], get: StateArrays) -> LateFusionModel:
        return cls(
            **kernel_model_from_state(attrs, get), n_features={k: int(v) for k, v in attrs["n_features"].items()},
            landmark_indices=get("landmark_indices", np.int64), kept=get("kept", np.int64),
            partitions=get("partitions"), column_kernel=get("column_kernel", np.int64),
            eigenvalues=get("eigenvalues"), view_weights=get("view_weights"), filter_weights=get("filter_weights"),
            graph_filter_order=int(attrs["graph_filter_order"]),
            neighbor_indices=get("neighbor_indices", np.int64), neighbor_weights=get("neighbor_weights"),
            cluster_centers=get("cluster_centers"), landmark_labels=get("landmark_labels", np.int64),
            dtype=attrs["dtype"], kernel_group=get("kernel_group", np.int64),
            normalize_embedding=bool(attrs["normalize_embedding"]))


# ============================================================================ row functions
def _embed_rows(blocks: list, model: LateFusionModel) -> np.ndarray:
    """H~ of one row block (RowBlocks row function), shape (b, D)."""
    return model.transform_rows(blocks)


def _label_rows(blocks: list, model: LateFusionModel) -> np.ndarray:
    """Nearest centroid of H~ of one row block (RowBlocks row function), shape (b,), int64."""
    return nearest_center(model.transform_rows(blocks), model.cluster_centers)


# ============================================================================ estimator
class LateFusionClustering(KernelLandmarkEstimator):
    """Graph-filtered late-fusion multiple kernel clustering (GMLKM) with out-of-sample assignment.

    Fits GMLKM (Du et al., Algorithm 1) on ``n_landmarks`` sampled points and assigns every
    other point out of sample, so the cost is linear in the number of points.

    On the landmarks, every base kernel K_p (centred and normalised like in
    :class:`MultipleKernelClustering`) gives a base partition H_p, its top-d eigenvectors.
    Base kernels without cluster structure are dropped (see Notes).  Each partition gets a
    sparse adaptive-neighbour graph A_p and a low-pass filter
    G_p = sum_{o=1}^{o_bar} ((I + D_p^-1/2 A_p D_p^-1/2) / 2)^o.  Then labels Y, view weights
    gamma and filter weights mu minimise eq. 23,

        J(Y, gamma, mu) = ||(I - P_Y) G~ [gamma_1 H_1, ..., gamma_m H_m]||_F^2,
        G~ = sum_i mu_i G_i,  gamma and mu on the simplex,

    by alternating k-means (Y), gamma_p = (1/alpha_p) / sum_q (1/alpha_q) with
    alpha_p = ||(I - P_Y) G~ H_p||_F^2 (eq. 26), and the simplex QP min mu^T M mu,
    M_ij = <(I - P_Y) G_i H_g, (I - P_Y) G_j H_g>_F, H_g = [gamma_p H_p] (eq. 27, with gamma
    entering squared as the restriction of eq. 23 requires).  Each step minimises J over its
    variable, so J never increases (``objective_history_``).

    Parameters
    ----------
    n_clusters : int, "auto" or (k_min, k_max), default=8
        k, the number of clusters (>= 2).  "auto" or a range: chosen from the uniform
        combination of the preprocessed base kernels on the landmarks, as
        :class:`MultipleKernelClustering` does (``n_clusters_``, ``n_clusters_choice_``).
    kernels : str or list of KernelSpec/dict, default="auto"
        Base kernels, as in :class:`MultipleKernelClustering`: "auto" is the cosine kernel on a
        sparse view (< 10% non-zero entries) and three RBF kernels (``"rbf-grid"``) on a dense
        one.  "mkkm12" is the GMLKM paper's standard set per view: 7 Gaussians with sigma = t D,
        t in {0.01, 0.05, 0.1, 1, 10, 50, 100}, D the largest pairwise distance; 4 polynomials;
        a cosine kernel -- the default before issue 15: it beat k-means on the min-max-scaled
        concatenation on 9 of the 28 shared multi-view sets and ran over 120 s on 4 of them
        (12 kernels per view), where the defaults below beat it on 18 with every fit <= 11 s
        (5 seeds, bench/RESULTS.md, late-fusion grid).
    embedding_dim : int, default=None
        d, eigenvectors per base partition, n_clusters <= d <= n_landmarks.  None: 2k for
        k <= 10, else k (:func:`mkdist._methods._base.default_embedding_dim`; the paper picks d from
        {k, 2k, 3k, 4k}).  With d = 2k for every k, ORL (k = 40) scored 0.66 and Yale (k = 15)
        0.60, with d = k 0.82 / 0.72 (5 seeds, bench/RESULTS.md).  Eigenpairs with
        lambda <= 1e-8 lambda_1 (numerical null space of a low-rank kernel) are left out of H_p.
    graph_filter_order : int, default=3
        o_bar >= 0.  0 gives plain late fusion (G~ = I), the ablation baseline on the same code
        path.  The paper picks o_bar from {1, 2, 3} per data set; 3 is the default because it
        measured best and most stable (UCI mfeat pix, mkkm12, min-max, d = 2k, 10 seeds: ACC
        0.866 / 0.873 / 0.928 for o_bar = 1 / 2 / 3, std 0.042 / 0.064 / 0.027; plain late
        fusion 0.846; bench/RESULTS.md).
    n_neighbors : int, default=None
        k of the adaptive-neighbour graphs, 1 <= k <= n_landmarks - 2 (the closed form needs the
        (k+1)-th neighbour).  None: min(10, n_landmarks - 2) (``DEFAULT_N_NEIGHBORS``).  The
        paper fixes 5; 10 measured better over the 28 shared sets (10 seeds: 23 sets beat
        k-means instead of 22, mean ACC 0.667 instead of 0.654; ORL 0.82 -> 0.90, Yale 0.78 ->
        0.88, MSRC-v1 0.92 -> 0.87) and on UCI mfeat pix (order 3: 0.945 (0.003) vs 0.938
        (0.005); bench/RESULTS.md, late-fusion defaults).
    n_landmarks : int, default=None
        Points the model is fitted on (n_clusters <= n <= N).  None: min(N, 2000).
    min_pep_ratio : float, default=0.02
        Degenerate-kernel rule (Notes): drop base kernel p when its excess k-PEP is below
        ``min_pep_ratio`` x the best kernel's.  0 keeps every kernel (the paper's method as
        printed; the ablation).  0.02 (``DEFAULT_MIN_PEP_RATIO``) keeps the cosine kernels of
        sparse views, whose spectrum is spread (ACM: 0.03-0.04 of its near-constant view4's),
        and still drops near-identity Gaussians (~0.01).  Independently of it, the kernels of a
        view that is constant or nearly so on the landmarks are dropped (Notes).
    filter_weights : {"learned", "uniform"}, default="learned"
        "learned": mu from eq. 27.  "uniform": mu = 1/m' fixed (a guard for data whose graphs
        are unreliable; the ablation of the mu step).
    center : bool, default=True
        Centre every kernel in feature space at the landmark mean.
    normalize : {"diagonal", "trace", None}, default="diagonal"
        Kernel normalisation after centring.
    scale : {"auto", None, "minmax", "standard"}, default="auto"
        Per-feature scaling estimated on the landmarks (``mkdist._core._scaling.FeatureScaling``).
        "auto": "minmax" on dense views, none on sparse ones (< 10% non-zero entries, the
        views ``kernels="auto"`` gives the cosine kernel): min-max scaling gives a word seen
        once the weight of the most frequent one.  "minmax" raised the mean ACC over the 28
        shared sets from 0.593 to 0.611 with ``kernels="auto"`` (5 seeds; uci_digit3 0.80 ->
        0.85); with the row-normalised embedding it took WebKB (2 classes) from 0.95 to 0.76
        (seed 0), which "auto" keeps at 0.95 (bench/RESULTS.md, late-fusion defaults).
    max_iter : int, default=30
        Maximum sweeps of Algorithm 1.
    tol : float, default=1e-6
        Stop when a sweep lowers J by <= tol x J.
    n_init : int, default=10
        k-means++ restarts of the first Y step; later Y steps are Lloyd from the current clusters.
    cluster_all_points : bool, default=True
        When there are fewer landmarks than rows: run the final k-means (k-means++ with
        ``n_init`` restarts, then Lloyd; across the Dask cluster for Dask input) on the
        embedding H~ of all N rows, as MKC-AE does on H_N, and keep its centroids; landmark
        rows get the label of their nearest final centroid.  False keeps the landmark
        clustering's centroids (``normalize_embedding``'s, else Algorithm 1's) and assigns
        every row to the nearest one; landmarks keep their labels, since both end with Lloyd
        run to a fixed point, where every landmark is nearest to its own cluster's centroid.
        With as many landmarks as rows there is nothing to add and the landmark clustering's
        centroids are kept either way.  Measured on UCI
        mfeat pix (500 of 2000 rows as landmarks, 10 seeds): ACC of the other 1500 rows 0.908
        with, 0.787 without, against 0.928 with all rows as landmarks -- the embedding of a 500-landmark fit is
        good, its 500-row clustering is not (bench/RESULTS.md).  For Dask input H~ (N x D, in
        ``dtype``) is persisted on the workers for the Lloyd passes.
    normalize_embedding : bool, default=True
        Cluster the rows of H~ scaled to unit length, as ``MultipleKernelClustering`` clusters
        its embedding and the SimpleMKKM authors' code its H (the spectral-clustering step of
        Ng, Jordan & Weiss): Algorithm 1 runs unchanged (its gamma, mu and labels Y), then the
        landmarks' clusters are those of k-means on their unit rows -- of two candidates the
        one with the lower k-means objective: Lloyd from the means of Algorithm 1's clusters,
        and ``n_init`` k-means++ restarts (``diagnostics_["normalized_kmeans"]``).
        ``transform`` returns the unit rows, the final k-means (``cluster_all_points``) and
        ``predict`` work on them.  With ``scale="auto"`` (and 5 graph neighbours, the default
        then) it raised the sets where late fusion beats k-means on the min-max-scaled
        concatenation from 18 to 23 of 28 (5 seeds; the mean ACC 0.624 -> 0.655: Citeseer
        0.34 -> 0.53, Yale 0.72 -> 0.81, leaves100 0.89 -> 0.95) and UCI mfeat pix ("mkkm12",
        order 3) from 0.917 (0.035) to 0.938 (0.005); either candidate alone lost sets
        (bench/RESULTS.md, late-fusion defaults).  False: the raw H~ and Algorithm 1's labels
        and centroids, the paper's discretisation.
    dtype : {None, "float32", "float64"}, default=None
        Precision of the out-of-sample embedding H~ (``transform``, the embedding the final
        k-means reads, ``predict``): its kernel blocks, its neighbour searches and the rows it
        returns.  None: float32 if every view is float32 (as ``MultipleKernelClustering``).
        The landmark fit, the filters' weights and the neighbour distances that set them are
        float64 either way.  Column j of h_p(x) carries the kernel rows' float32 rounding
        times lambda_1 / lambda_j: on W1 (2000 landmarks) H~ is within 7e-6 of float64 with
        the same labels, 3.6x faster per row (bench/RESULTS.md); pass "float64" when trailing
        eigenvalues are tiny.
    full_pep : bool, default=False
        Also record beta(G~ K_p G~, k) for every kept base kernel and for the combined kernel
        sum_p gamma_p^2 K_p, before and after filtering.  Costs a second pass over the base
        kernels (kernel, two sparse-dense products and a partial eigensolve each): for
        diagnostics on moderate n.
    random_state : int, RandomState or None, default=None
        Landmark sampling, bandwidth heuristic, pilot landmarks and k-means.

    Attributes
    ----------
    n_clusters_ : int
        K of the fit (``n_clusters``, or the K chosen for "auto" / a range).
    n_clusters_choice_ : NClustersChoice or None
        The K choice (confidence, runner-up, candidates, ambiguous); None for an integer K.
    labels_ : ndarray of shape (N,), int64, or dask.array.Array
        Cluster of every training row (lazy for Dask input): the final k-means on all rows
        (``cluster_all_points``), else the nearest of the landmark clustering's centroids (for
        the landmarks: their fitted labels).  Equal to ``predict`` on the training rows.
    cluster_centers_ : ndarray of shape (n_clusters, D)
        Centroids in the filtered late-fusion embedding H~ (D = sum of the kept d_p), its
        rows scaled to unit length with ``normalize_embedding``.
    inertia_ : float
        k-means inertia, in the space of ``cluster_centers_``, of the clustering the centroids
        come from: the final k-means over all rows, or the landmark clustering.
    view_weights_ : ndarray of shape (m,)
        gamma on the simplex over all base kernels (0 for dropped ones).
    filter_weights_ : ndarray of shape (m,)
        mu on the simplex over all base kernels (0 for dropped ones).
    objective_history_ : ndarray of shape (n_iter_ + 1,)
        J after initialisation and after every sweep; non-increasing.
    n_iter_ : int
    converged_ : bool
    landmark_indices_ : ndarray of shape (n,)
    kernels_ : list of FittedKernel, length m
    kept_kernels_ : ndarray of shape (m',)
        Indices of the base kernels used in the fusion.
    merged_kernels_ : list of dict
        One record per base kernel that shares the partition (and graph) of a kept one, its
        kernel matrix on the landmarks being that one's to ``_DUPLICATE_RTOL`` (1e-3): index,
        name, into (the kept kernel's index), into_name, pep.  Its gamma is that kernel's and
        the two split that kernel's mu -- Algorithm 1 on both -- without a second eigensolve,
        graph or out-of-sample kernel row (Notes).
    dropped_kernels_ : list of dict
        One record per dropped kernel: index, name, pep, pep_exact, excess_pep, threshold, reason.
    embedding_dim_ : int
    diagnostics_ : dict
        ``pep_kernels`` (m,): beta(K_p, k) of every base kernel (an upper bound where
        ``pep_kernels_exact`` is False); ``pep_chance`` = k/n; ``pep_partitions_filtered``:
        beta(G~ H_p, k) per kept partition (unfiltered: k/d_p); ``pep_combined_before`` /
        ``pep_combined_after``: beta of H_g H_g^T and of H~ H~^T (the linear kernels eq. 23
        clusters, before / after the learned filter); with ``full_pep`` also
        ``pep_kernels_filtered`` and ``pep_kernel_combined_before`` / ``_after``; the
        per-step objective ``objective_steps``; ``normalized_kmeans`` (which start won and
        both candidates' inertia; None without ``normalize_embedding``); ``final_kmeans``
        (rows, inertia, n_iter) when
        the final k-means ran; ``timings`` (s).
    model_ : LateFusionModel
    n_features_in_ : int
        Total features over all views.
    n_features_per_view_ : dict of str to int
    view_names_ : list of str

    See Also
    --------
    MultipleKernelClustering : SimpleMKKM (kernel fusion) on landmarks.
    principal_eigenvalue_proportion : the PEP of Definition 2.

    Notes
    -----
    **Degenerate base kernels.**  A Gaussian kernel whose bandwidth is far below the typical
    distance (t = 0.01, 0.05, 0.1 of the largest distance in "mkkm12") is close to the
    identity: its partition is noise and its kNN graph random.  A filter on a random graph
    averages unrelated rows, which shrinks H~ and with it the k-means residual, so the mu step
    of eq. 27 moves all weight onto those filters (measured on UCI mfeat pix: ACC 0.877).
    The PEP (Definition 2) detects such kernels before the fit: beta(I_n, k) = k/n, while a
    clusterable kernel concentrates its spectrum.  With the excess
    e_p = (beta(K_p, k) - k/n) / (1 - k/n), kernel p is dropped (with its partition and its
    filter, gamma_p = mu_p = 0, a ``DegenerateKernelWarning`` and a record in
    ``dropped_kernels_``) when e_p < min_pep_ratio x max_q e_q.  On mfeat pix the three
    near-identity kernels have beta in [0.008, 0.010] (chance 0.005) and every other kernel
    beta >= 0.40: their excess PEP (<= 0.005) is below the threshold (0.013 at the default
    0.02; 0.065 at 0.1).  Kernels are processed in the
    order of a pilot PEP on 256 landmarks, so a kernel the Frobenius bound
    beta <= sqrt(k) ||K||_F / tr K already condemns is dropped without its eigensolve.

    **Near-constant views.**  A view with at least half of the pairs of its landmark rows
    identical (``NEAR_CONSTANT_PAIR_SHARE``; its median pairwise distance is 0, the "constant or
    nearly so" of the power k-means bandwidth check) has its kernels dropped (a
    ``DegenerateKernelWarning``, records in ``dropped_kernels_``), and only such views is an
    error.  Its base partition lives on its few distinct rows, Algorithm 1 finds labels that
    leave it (almost) no residual, alpha_p ~ 0, and eq. 26 gives it all of gamma: on ACM (view4,
    99.4% of the pairs identical) seed 2 scored ACC 0.35, 0.68 with the view dropped.  Its PEP
    is close to 1 (one giant block), so the PEP rule above keeps it.  Of the 28 shared sets
    only ACM has such a view (the next highest share: 0.23).

    **Kernels with one partition.**  Standard kernel sets repeat themselves after centring and
    normalisation: "mkkm12"'s Gaussians with t = 10, 50, 100 x D are the same kernel to 4e-4,
    its degree-4 polynomials with c = 0 and c = 1 to 1e-4 on unscaled data.  A kernel equal to an
    earlier one of its view to 1e-3 (``_DUPLICATE_RTOL``: relative Frobenius difference on the
    pilot landmarks, then the residual of that kernel's eigenpairs on all landmarks) shares its
    partition, graph and filter (``merged_kernels_``).  Algorithm 1 on c copies of a partition
    is Algorithm 1 on one copy entering H~ with weight sqrt(c) gamma under
    sum_p c_p gamma_p = 1, with the copies' mu summed: the same objective, weights and H~
    distances, for one eigensolve, graph and out-of-sample kernel row instead of c
    (proteinfold, 12 views x 12 kernels: 140 partitions -> about 105).

    **Out-of-sample extension.**  With T = (I + S) / 2, S = D^-1/2 A D^-1/2, the filter obeys

        sum_{o=1}^{o_bar} T^o Z = (1 - 2^-o_bar) Z + S B,
        B = sum_{q=0}^{o_bar-1} (1 - 2^-(o_bar-q)) T^q Z

    (unroll r_o = (r_{o-1} + S T^{o-1} Z) / 2 from r_0 = Z), so a row of G Z depends on its
    node only through its own row of Z and its row of S; everything else is the landmarks'
    B.  A new point x enters graph i as a node linked to its k nearest landmarks in the H_i
    space (found from its base embedding h_i(x)) with its adaptive-neighbour weights s_xj:
    x cannot enter the landmarks' fixed neighbour lists, so the symmetrised affinity
    (s_xj + s_jx)/2 becomes x's own s_xj, its degree is sum_j s_xj = 1, and the landmarks'
    graph and degrees stay frozen.  Hence S_xj = s_xj / sqrt(deg_j) and

        H~(x) = (1 - 2^-o_bar) h_g(x) + sum_i mu_i sum_j s^i_xj / sqrt(deg^i_j) B_i[j],
        h_g(x) = [gamma_1 h_1(x), ..., gamma_m h_m(x)],  h_p(x) = P_p(x) H_p Lambda_p^-1,

    with B_i built from H_g on the landmarks and P_p(x) the kernel row of x preprocessed like
    K_p (MKC-AE, as ``MultipleKernelClustering``).  For a landmark the same formula with its
    row of S reproduces its fitted H~ row exactly; a point equal to a landmark (bitwise, all
    views, after scaling) is treated as that landmark -- otherwise it would be its own
    nearest neighbour -- and gets the landmark's fitted row, hence its label.  The label is the
    nearest centroid.  For o_bar = 0, H~(x) = h_g(x).  Per point: one kernel row per kept
    kernel (n values), one kNN search over n landmarks in d dimensions per filter, O(k D)
    for the filter.

    References
    ----------
    Du, Jiang, Li, Guo, Chen, Li, Zhou, Qian, "Sharper Error Bounds in Late Fusion Multi-view
    Clustering Using Eigenvalue Proportion" (GMLKM).  Nie, Wang, Huang, "Clustering and
    projected clustering with adaptive neighbors", KDD 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from mkdist import LateFusionClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.3, (30, 2)), rng.normal(4, 0.3, (30, 2))]
    >>> model = LateFusionClustering(2, kernels="rbf-grid", random_state=0).fit(X)
    >>> len(set(model.labels_[:30])), len(set(model.labels_))
    (1, 2)
    """

    method: ClassVar[str] = "late-fusion"
    multi_view: ClassVar[bool] = True
    state_format: ClassVar[str] = "mkdist.LateFusionClustering/2"
    #: Landmarks when ``n_landmarks=None``: min(N, 2000).  The fit costs one dense n x n kernel
    #: and one partial eigensolve per base kernel (O(m n^2) memory traffic), a few seconds at
    #: n = 2000.
    max_default_landmarks: ClassVar[int] = 2000
    _model_type: ClassVar[type] = LateFusionModel
    #: The adaptive-neighbour graphs need n_neighbors + 1 <= n - 1 other landmarks, n_neighbors >= 1.
    _min_samples: ClassVar[int] = 4
    _param_constraints: ClassVar[dict[str, list]] = _params.LATE_FUSION

    def __init__(self, n_clusters: int = 8, *, kernels: Any = "auto", embedding_dim: int | None = None,
                 graph_filter_order: int = 3, n_neighbors: int | None = None, n_landmarks: int | None = None,
                 min_pep_ratio: float = DEFAULT_MIN_PEP_RATIO, filter_weights: str = "learned", center: bool = True,
                 normalize: str | None = "diagonal", scale: str | None = "auto", max_iter: int = 30,
                 tol: float = 1e-6, n_init: int = 10, cluster_all_points: bool = True,
                 normalize_embedding: bool = True, dtype: str | None = None, full_pep: bool = False,
                 random_state=None):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.embedding_dim = embedding_dim
        self.graph_filter_order = graph_filter_order
        self.n_neighbors = n_neighbors
        self.n_landmarks = n_landmarks
        self.min_pep_ratio = min_pep_ratio
        self.filter_weights = filter_weights
        self.center = center
        self.normalize = normalize
        self.scale = scale
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.cluster_all_points = cluster_all_points
        self.normalize_embedding = normalize_embedding
        self.dtype = dtype
        self.full_pep = full_pep
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_params_vs_input(self, n_samples: int, views: dict) -> dict[str, Any]:
        checks = super()._check_params_vs_input(n_samples, views)
        n = checks["n_landmarks"]
        nb = self._n_neighbors(n)
        if nb > n - 2:
            raise InputValidationError(
                f"`n_neighbors`={nb} must be >= 1 and < n_landmarks - 1 = {n - 1} (the adaptive-neighbour "
                f"weights need the (k+1)-th nearest of the {n - 1} other landmarks).")
        return checks

    def _n_neighbors(self, n_landmarks: int) -> int:
        """k of the adaptive-neighbour graphs: ``n_neighbors``, or when None
        min(``DEFAULT_N_NEIGHBORS``, n_landmarks - 2) (the closed form needs the (k+1)-th
        nearest of the n - 1 other landmarks)."""
        if self.n_neighbors is None:
            return int(max(1, min(DEFAULT_N_NEIGHBORS, n_landmarks - 2)))
        return int(self.n_neighbors)

    # ------------------------------------------------------------------ the pipeline's hooks
    def _landmark_sampling(self, seed: int) -> dict[str, Any]:
        return {"random_state": _fit_seeds(seed)[0]}

    def fit_landmarks(self, landmark_views: dict, landmark_indices: np.ndarray, seed: int):
        """Base partitions, graphs and Algorithm 1 on the in-memory landmark rows.

        Sets every fitted attribute, Algorithm 1's centroids and landmark labels included
        (``fit_centroids`` may replace them by a k-means on all rows).
        """
        check_finite(landmark_views)  # Dask input: NaN among the landmarks is caught here
        indices = np.asarray(landmark_indices)
        _, seed_base, seed_fusion = _fit_seeds(seed)
        self.n_clusters_choice_ = None
        if self._check_k_range(indices.size) is not None:
            t0 = time.perf_counter()
            self._choose_n_clusters(self._uniform_landmark_kernel(landmark_views, seed_base), indices.size, seed)
            choose_s = time.perf_counter() - t0
        base = _fit_base(landmark_views, n_clusters=self.n_clusters_, embedding_dim=self._embedding_dim(indices.size),
                         kernels=self.kernels, center=bool(self.center), normalize=self.normalize, scale=self.scale,
                         min_pep_ratio=float(self.min_pep_ratio), random_state=seed_base)
        self._fit_from_base(base, indices, seed_fusion, landmark_views=landmark_views,
                            dtype=self.dtype or common_float_dtype(landmark_views).name)
        if self.n_clusters_choice_ is not None:
            self.diagnostics_["timings"]["choose_k_s"] = choose_s
        return self

    def _uniform_landmark_kernel(self, landmark_views: Mapping[str, np.ndarray], seed_base: int) -> np.ndarray:
        """The uniform combination of the preprocessed base kernels on the landmarks, (n, n): the
        kernel ``n_clusters="auto"`` chooses K on.  The kernels get the bandwidths ``_fit_base``
        gives them (same seed), formed one at a time (the fit never holds the (m, n, n) stack)."""
        from .._core._nclusters import average_landmark_kernel

        names = list(landmark_views)
        specs = resolve_kernel_specs(self.kernels, names, landmark_views)
        scaling = FeatureScaling.fit(self.scale, landmark_views)
        lv = scaling.apply(landmark_views, np.float64) if scaling is not None else landmark_views
        lv = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in lv.items()}
        rng = np.random.RandomState(seed_base)  # _fit_base's first draw seeds its kernels' bandwidths
        fitted = fit_kernels(specs, lv, random_state=int(rng.randint(np.iinfo(np.int32).max)))
        return average_landmark_kernel(lv, fitted, bool(self.center), self.normalize)

    def _fit_from_base(self, base: _Base, landmark_indices: np.ndarray, seed: int,
                       landmark_views: Mapping[str, np.ndarray] | None = None,
                       dtype: str | None = None) -> LateFusionModel:
        """Steps 2-3 (graphs, Algorithm 1) on fitted base partitions; sets the fitted attributes.

        Separate from ``fit_landmarks`` so that a benchmark can reuse one set of base
        partitions over several seeds / settings (they do not depend on the k-means seed).
        ``seed`` is the fusion seed (the third of ``_fit_seeds``); ``dtype`` that of the
        out-of-sample path (default: the ``dtype`` parameter, else float64).
        """
        order = int(self.graph_filter_order)
        kept = base.kept
        k_nb = self._n_neighbors(next(iter(base.landmarks.values())).shape[0])
        t0 = time.perf_counter()
        H_cat = np.hstack([base.H[p] for p in kept])
        column_kernel = np.repeat(np.arange(kept.size), [base.H[p].shape[1] for p in kept])
        eig = np.concatenate([base.eigenvalues[p] for p in kept])
        graphs = [build_graph(base.H[p], k_nb) for p in kept]
        t_graph = time.perf_counter() - t0
        t0 = time.perf_counter()
        fusion = _fit_fusion(H_cat, column_kernel, graphs, _partition_copies(base.kernel_group, kept.size),
                             n_clusters=self.n_clusters_, order=order,
                             learn_mu=self.filter_weights == "learned", n_init=int(self.n_init),
                             max_iter=int(self.max_iter), tol=float(self.tol), random_state=seed)
        t_fusion = time.perf_counter() - t0
        if not fusion.converged:
            warnings.warn(f"GMLKM did not converge in max_iter={self.max_iter} sweeps.", RuntimeWarning,
                          stacklevel=4)
        model = LateFusionModel(
            view_names=list(base.view_names), n_features=dict(base.n_features), landmarks=base.landmarks,
            landmark_indices=np.asarray(landmark_indices, dtype=np.int64), scaling=base.scaling,
            kernels=list(base.kernels), kept=kept, preprocessing=base.preprocessing, partitions=H_cat,
            column_kernel=column_kernel, eigenvalues=eig, view_weights=fusion.gamma, filter_weights=fusion.mu,
            graph_filter_order=order, neighbor_indices=np.stack([np.ascontiguousarray(g.indices) for g in graphs]),
            neighbor_weights=np.stack([g.weights for g in graphs]), cluster_centers=fusion.centers,
            landmark_labels=fusion.labels, dtype=dtype or self.dtype or "float64", kernel_group=base.kernel_group,
            normalize_embedding=bool(self.normalize_embedding))
        normalized_kmeans = None
        if model.normalize_embedding:
            model.cluster_centers, normalized_kmeans = _normalized_clusters(
                model.cluster_embedding, fusion.labels, self.n_clusters_, int(self.n_init), seed)
        # The landmarks' labels by the rule every other row follows (nearest centroid of H~), so
        # labels_, predict and assign_embedding agree by construction.  Algorithm 1 ends with Lloyd
        # run to a fixed point, where its labels are exactly these up to a distance tie at
        # rounding level (scikit-learn's distance arithmetic vs sq_distances).
        model.landmark_labels = nearest_center(model.cluster_embedding, model.cluster_centers)
        self._set_fitted_views(base.landmarks)
        self._set_model(model)
        self.__dict__.pop("kmeans_n_iter_", None)  # a previous fit's final k-means
        self.inertia_ = float(((model.cluster_embedding - model.cluster_centers[model.landmark_labels]) ** 2).sum())
        self.objective_history_ = np.asarray(fusion.objective_history)
        self.n_iter_ = int(fusion.n_iter)
        self.converged_ = bool(fusion.converged)
        self.embedding_dim_ = int(base.embedding_dim)
        self.dropped_kernels_ = list(base.dropped)
        self.merged_kernels_ = list(base.merged)
        k = self.n_clusters_
        n = model.n_landmarks
        pep_parts = [principal_eigenvalue_proportion(model.embedding[:, c], min(k, n), factor=True)
                     for c in model.column_slices]
        diag = {
            "n_landmarks": n,
            "pep_t": k,
            "pep_chance": k / n,
            "pep_kernels": base.pep.tolist(),
            "pep_kernels_exact": base.pep_exact.tolist(),
            "pep_threshold_excess":
                float(base.min_pep_ratio * max(excess_pep(base.pep[base.pep_exact], k / n).max(), 0))
                if base.pep_exact.any() else None,
            "kernel_names": [kk.name for kk in base.kernels],
            "kept_kernels": [base.kernels[p].name for p in kept],
            "pep_partitions_unfiltered": [k / c.size for c in model.column_slices],
            "pep_partitions_filtered": pep_parts,
            "pep_combined_before": principal_eigenvalue_proportion(H_cat * model.gamma_cols[None, :], k, factor=True),
            "pep_combined_after": principal_eigenvalue_proportion(model.embedding, k, factor=True),
            "eigenvalues": {base.kernels[p].name: (base.eigenvalues[p] / n).tolist() for p in kept},
            "objective_steps": [[name, float(v)] for name, v in fusion.objective_steps],
            "normalized_kmeans": normalized_kmeans,
            "timings": {**base.timings, "graphs_s": t_graph, "fusion_s": t_fusion},
        }
        if self.full_pep and landmark_views is not None:
            t0 = time.perf_counter()
            diag.update(_filtered_kernel_peps(model, base, landmark_views, k))
            diag["timings"]["full_pep_s"] = time.perf_counter() - t0
        self.diagnostics_ = diag
        return model

    def _set_model(self, model: LateFusionModel) -> None:
        group = model.kernel_group
        used = group >= 0
        gamma = np.zeros(group.size)
        mu = np.zeros(group.size)
        gamma[used] = model.view_weights[group[used]]
        mu[used] = (model.filter_weights / model.copies)[group[used]]
        self.model_ = model
        self.kernels_ = list(model.kernels)
        self.kept_kernels_ = np.asarray(model.kept, dtype=np.int64)
        self.view_weights_ = gamma
        self.filter_weights_ = mu
        self.cluster_centers_ = model.cluster_centers
        self.landmark_indices_ = model.landmark_indices

    def _kmeans_params(self) -> dict[str, Any]:
        return {"n_init": int(self.n_init), "max_iter": 300, "tol": 1e-4}

    def fit_centroids(self, embedding, seed: int) -> KMeansResult | None:
        """The final k-means on the embedding H~ of every row, when it applies.

        With ``cluster_all_points`` and more rows than landmarks: k-means (``n_init``
        restarts, NumPy or across the Dask cluster) on ``embedding``; its centroids replace
        Algorithm 1's, ``inertia_`` is over all rows and every landmark's label becomes its
        nearest final centroid.  Otherwise Algorithm 1's centroids stay (the landmark
        clustering; ``inertia_`` over the landmarks) and nothing is computed.

        Returns
        -------
        KMeansResult or None
            None when Algorithm 1's centroids are kept.
        """
        model = self.model_
        if not (self.cluster_all_points and embedding.shape[0] > model.n_landmarks):
            return None
        t0 = time.perf_counter()
        km = super().fit_centroids(embedding, _fit_seeds(seed)[2])
        model.cluster_centers = self.cluster_centers_
        model.landmark_labels = nearest_center(model.cluster_embedding, self.cluster_centers_)
        self.diagnostics_["final_kmeans"] = {"rows": int(embedding.shape[0]), "inertia": float(km.inertia),
                                             "n_iter": int(km.n_iter)}
        self.diagnostics_["timings"]["kmeans_all_s"] = time.perf_counter() - t0
        return km

    # ------------------------------------------------------------------ inference
    def transform(self, X):
        """Filtered late-fusion embedding H~ of every row (out of sample; no refit).

        Parameters
        ----------
        X : array-like of shape (N, d) or list/dict of views
            NumPy or Dask.

        Returns
        -------
        H : ndarray or dask.array.Array of shape (N, D), in ``model_.dtype``
            The space ``cluster_centers_`` live in; a landmark gets its fitted row.
        """
        views = self._predict_views(X)
        model = self.model_
        return RowBlocks(views, model.view_names, block_rows=model.block_rows).map(
            _embed_rows, model, n_cols=model.n_components, dtype=model.dtype, name="late-fusion-embed")

    def predict(self, X):
        """Cluster of every row: the nearest centroid of its H~ row (``transform`` and the
        assignment fused in one pass per row block, so H~ of all rows is never held).

        Returns
        -------
        labels : ndarray of shape (N,), int64, or lazy dask.array.Array
        """
        views = self._predict_views(X)
        model = self.model_
        return RowBlocks(views, model.view_names, block_rows=model.block_rows).map(
            _label_rows, model, n_cols=None, dtype=np.int64, name="late-fusion-predict")

    # ------------------------------------------------------------------ state and summary
    def _state(self) -> tuple[dict, dict]:
        attrs, arrays = super()._state()
        attrs.update(embedding_dim=int(self.embedding_dim_), dropped_kernels=list(self.dropped_kernels_),
                     merged_kernels=list(self.merged_kernels_))
        return attrs, arrays

    def _restore(self, attrs: dict, get: StateArrays) -> None:
        super()._restore(attrs, get)
        self.embedding_dim_ = int(attrs["embedding_dim"])
        self.dropped_kernels_ = list(attrs["dropped_kernels"])
        self.merged_kernels_ = list(attrs["merged_kernels"])

    def _summary_fields(self) -> dict[str, Any]:
        model = self.model_
        names = [k.name for k in self.kernels_]
        diag = self.diagnostics_
        k = int(self.n_clusters_)
        # The spectrum of the kernel the final clustering sees: H~ H~^T / n on the landmarks,
        # whose PEP is ``pep_combined_after`` (the squared singular values of H~, never n x n).
        s = np.linalg.svd(model.embedding, compute_uv=False)
        return {
            "n_landmarks": int(model.n_landmarks), "n_components": int(model.n_components),
            "kernel_names": names,
            "weights": [{"name": "view weights (gamma)", "labels": names, "values": self.view_weights_.tolist()},
                        {"name": "filter weights (mu)", "labels": names, "values": self.filter_weights_.tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(), "n_iter": int(self.n_iter_),
            "converged": bool(self.converged_),
            "spectrum": {"values": (s[: k + 1] ** 2 / model.n_landmarks).tolist(), "k": k,
                         "what": "top eigenvalues of (1/n) H~ H~^T, the linear kernel of the filtered "
                                 "late-fusion embedding on the landmarks"},
            "pep": {"t": diag.get("pep_t", k), "base": dict(zip(names, diag.get("pep_kernels", []))),
                    "combined": diag.get("pep_combined_before"), "combined_filtered": diag.get("pep_combined_after"),
                    "dropped": [d["name"] for d in self.dropped_kernels_]} if "pep_kernels" in diag else None,
        }


def _filtered_kernel_peps(model: LateFusionModel, base: _Base, landmark_views: Mapping[str, np.ndarray],
                          k: int) -> dict[str, Any]:
    """beta(K, k) vs beta(G~ K G~, k) for every kept base kernel and for sum_p gamma_p^2 K_p.

    G~ K G~ is the kernel of the filtered feature maps (K = Phi Phi^T -> G~ Phi); G~ is
    symmetric, so G~ K G~ = G~ (G~ K)^T.  One kernel in memory at a time plus the combination.
    """
    order = model.graph_filter_order

    def filt(Z):
        out = np.zeros_like(Z)
        for g, w in zip(model.graphs, model.filter_weights):
            if w != 0.0:
                out += w * apply_filter(g.S_hat, Z, order)
        return out

    n = model.n_landmarks
    lv = model.landmarks
    combined = np.zeros((n, n))
    before, after = [], []
    for i, blk in kernel_blocks(lv, lv, model.kept_kernels, reuse=True):
        K, _ = fit_preprocessing(blk[None], base.preprocessing.center, base.preprocessing.normalize)
        K = K[0]
        before.append(top_eigenvalue_sum(K, k) / float(np.trace(K)))
        combined += model.copies[i] * model.view_weights[i] ** 2 * K
        Kf = filt(filt(K).T)
        after.append(top_eigenvalue_sum(Kf, k) / float(np.trace(Kf)))
        del K, Kf
    cf = filt(filt(combined).T)
    return {
        "pep_kernels_filtered": dict(zip([kk.name for kk in model.kept_kernels], after)),
        "pep_kernels_kept_unfiltered": dict(zip([kk.name for kk in model.kept_kernels], before)),
        "pep_kernel_combined_before": top_eigenvalue_sum(combined, k) / float(np.trace(combined)),
        "pep_kernel_combined_after": top_eigenvalue_sum(cf, k) / float(np.trace(cf)),
    }


register(LateFusionClustering)
