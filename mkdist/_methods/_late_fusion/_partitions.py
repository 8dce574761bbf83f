"""Step 1 of the GMLKM fit: the base partitions of every base kernel on the landmarks.

Every base kernel K_p (the kernel specs of :class:`mkdist.MultipleKernelClustering`, centred
and normalised the same way) gives a base partition H_p, its top-d eigenvectors; kernels
without cluster structure (by their principal eigenvalue proportion), kernels that repeat an
earlier one of their view, and the kernels of (nearly) constant views are set aside
(:func:`fit_base_partitions`; the rules: ``docs/algorithms.md``, "Late fusion").
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._core._kernel_specs import FittedKernel
from ..._core._kernels import (
    KernelPreprocessing,
    LandmarkKernels,
    fit_landmark_kernels,
    fit_preprocessing,
    kernel_blocks,
)
from ..._core._linalg import largest_entry_signs, top_eigenpairs, top_eigenvalue_sum
from ..._core._pep import excess_pep
from ..._core._scaling import FeatureScaling
from ...errors import DegenerateKernelWarning, InputValidationError

__all__ = ["BasePartitions", "DEFAULT_MIN_PEP_RATIO", "NEAR_CONSTANT_PAIR_SHARE", "base_kernels",
           "fit_base_partitions", "fit_seeds", "identical_pair_share"]

#: Landmarks used to decide the order in which base kernels are processed (see fit_base_partitions).
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


#: Default ``min_pep_ratio``, below the PEP rule's 0.1 elsewhere (``DEGENERATE_PEP_RATIO``):
#: cosine kernels on sparse text/graph views cluster well but spread their spectrum (ACM: excess
#: k-PEP 0.03-0.04 of the best kernel's), and at 0.1 they were dropped, leaving ACM to a
#: near-constant view (ACC 0.38); "mkkm12"'s near-identity Gaussians stay below 0.02 (UCI
#: mfeat pix: excess ratio ~0.01), so they are still dropped (bench/RESULTS.md, late-fusion grid).
DEFAULT_MIN_PEP_RATIO = 0.02


def fit_seeds(seed: int) -> tuple[int, int, int]:
    """Seeds of the landmark sample, the base partitions and the fusion (+ final k-means).

    Drawn from the fit's one integer seed exactly as ``fit`` drew them from an integer
    ``random_state`` before the estimator protocol, so the same seed makes the same choices
    (``bench/bench_late_fusion.py`` reproduces this sequence to reuse base partitions).
    """
    rng = np.random.RandomState(seed)
    return tuple(int(s) for s in rng.randint(np.iinfo(np.int32).max, size=3))



def base_kernels(landmark_views: Mapping[str, np.ndarray], *, kernels: Any, scale, random_state: int,
                 check=None) -> tuple[LandmarkKernels, np.random.RandomState]:
    """The kernel set-up of the base partitions, and the random state the fit goes on with.

    The random state's first draw seeds the bandwidth heuristics
    (:func:`mkdist._core._kernels.fit_landmark_kernels`); the base partitions draw their pilot
    landmarks from it next.  ``n_clusters="auto"`` chooses K on kernels set up by this same
    function with the same seed, so they have the bandwidths the fit then uses.

    Returns
    -------
    setup : LandmarkKernels
    rng : numpy.random.RandomState
    """
    rng = np.random.RandomState(random_state)
    setup = fit_landmark_kernels(kernels, landmark_views, scale=scale,
                                 random_state=int(rng.randint(np.iinfo(np.int32).max)), check=check)
    return setup, rng


@dataclasses.dataclass
class BasePartitions:
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


def fit_base_partitions(landmark_views: Mapping[str, np.ndarray], *, n_clusters: int, embedding_dim: int,
              kernels: Any, center: bool, normalize, scale, min_pep_ratio: float,
              random_state: int) -> BasePartitions:
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
    t0 = time.perf_counter()
    names = list(landmark_views)
    n = next(iter(landmark_views.values())).shape[0]
    near_constant = _near_constant_views(landmark_views)

    def refuse(specs, _scaled):
        _check_constant_views(specs, landmark_views, center, embedding_dim)
        if near_constant and all(str(s.view) in near_constant for s in specs):
            raise InputValidationError(
                f"every view with a base kernel is constant or nearly so on the landmarks (share of identical pairs "
                f"of rows: {near_constant}): no kernel can show cluster structure; drop these views or add others.")

    setup, rng = base_kernels(landmark_views, kernels=kernels, scale=scale, random_state=random_state, check=refuse)
    lv, fitted, scaling = setup.views, setup.kernels, setup.scaling
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
    return BasePartitions(names, {k_: int(v.shape[1]) for k_, v in landmark_views.items()}, lv, scaling, fitted,
                 KernelPreprocessing.stack(stats), pep, pep_exact, np.asarray(kept, dtype=np.int64),
                 dropped, merged, kernel_group, H, eigenvalues, n_clusters, embedding_dim, float(min_pep_ratio),
                 timings)

