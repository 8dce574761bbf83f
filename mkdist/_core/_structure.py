"""Which views carry structure the rest of the data shares: the step between fitting the
landmark kernels and learning their weights (``keep_structured``).

SimpleMKKM minimises, over the kernel weights, the top-K eigenvalue sum of the combined kernel.
A kernel whose spectrum is flat -- a view of pure noise -- has the least top-K energy, so the
min-max objective gives it the most weight (wine's 13 columns as two views plus 10 columns of
N(0, 1): 72-80% of the weight on the noise view, ACC 0.96 -> 0.54-0.76; ``bench/bench_baselines.py
--noise``).  Which kernels enter the fit is therefore decided first, by a test that does not look
at the weights: does a view's kernel agree with the other views' kernels more than chance?

The statistic is the centred kernel alignment (Cortes, Mohri & Rostamizadeh 2012) of the view's
kernel A (the mean of its preprocessed base kernels) with the mean B of every other view's
kernels, <HAH, HBH>_F / (||HAH|| ||HBH||) over the off-diagonal entries.  Its null distribution
is that of permuting the landmarks of that view alone (A[pi, pi]): the view's own structure stays,
its link to the rest of the data goes; the null's mean and variance are exact
(:func:`permutation_moments`), so the test draws no random numbers.  A view is kept when its
alignment stands at least ``Z_MIN`` null standard deviations above the null mean.

Why this test rather than a kernel's own spectrum (PEP, GMLKM's Definition 2): the absolute
PEP of a wide RBF kernel on 10 noise columns (0.94 at K = 10) is above that of the informative
views of ``make_multiview_blobs`` (0.38-0.40), and against a column-shuffled copy of each view
the noise and the weakest informative kernels overlapped (excess PEP 0.015 vs 0.007).  Agreement
with the other views tells them apart (|z| <= 1.3 against >= 7.6, :data:`Z_MIN`), and it is what multi-view
clustering assumes: the views see the same clusters.

With one view there is nothing to compare with and every kernel is kept; when no view passes
(two views, one of them noise, cannot be told apart by agreement), every kernel is kept too, and
the check says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["StructureCheck", "Z_MIN", "permutation_moments", "shared_structure"]

#: A view is kept when its alignment with the other views is this many null standard deviations
#: above the null mean.  Under the null z is about standard normal: the noise views measured at
#: |z| <= 1.3 (wine + 10 noise columns, blobs + noise, 3 landmark seeds each); the lowest
#: informative view of the 28 shared sets, cora's word counts beside its citation graphs, at
#: z = 7.6-9.0 (1000 landmarks, 3 seeds); every other informative view at z >= 12.
Z_MIN = 4.0


@dataclasses.dataclass(frozen=True)
class StructureCheck:
    """The outcome of :func:`shared_structure`, recorded with the fit (``diagnostics_["structure"]``).

    Attributes
    ----------
    views : list of str
    alignment : list of float
        Centred alignment of each view's kernel with the other views' mean kernel.
    null_mean, null_std : list of float
        Of the alignment with that view's landmarks permuted.
    z : list of float
        (alignment - null_mean) / null_std.
    kept : list of bool
    note : str
        What was decided, in a sentence.
    """

    views: list[str]
    alignment: list[float]
    null_mean: list[float]
    null_std: list[float]
    z: list[float]
    kept: list[bool]
    note: str

    def kernel_mask(self, kernel_views: Sequence[str]) -> np.ndarray:
        """Per kernel (by its view): whether it enters the weight fit."""
        keep = dict(zip(self.views, self.kept))
        return np.array([keep.get(v, True) for v in kernel_views], dtype=bool)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _centred(K: np.ndarray) -> np.ndarray:
    K = K - K.mean(axis=0, keepdims=True)
    return K - K.mean(axis=1, keepdims=True)


def permutation_moments(A: np.ndarray, B: np.ndarray) -> tuple[float, float, float]:
    """The statistic sum_{i != j} A_ij B_ij and its exact mean and variance over the n! joint
    permutations of A's rows and columns (Mantel 1967, in Hubert's form), for symmetric A, B.

    Written out rather than sampled: 30 sampled permutations cost 30 n x n copies (a third of the
    SimpleMKKM fit on 1000 landmarks) and estimate the spread they divide by with 20% error;
    the moments cost three sums per kernel.  ``tests/test_structure.py`` checks them against
    sampled permutations.

    Returns
    -------
    statistic, mean, variance : float
    """
    n = A.shape[0]
    A, B = A.copy(), B.copy()
    np.fill_diagonal(A, 0.0)
    np.fill_diagonal(B, 0.0)

    def sums(M):
        rows = M.sum(axis=1)
        return float(M.sum()), float(np.vdot(M, M)), float(np.vdot(rows, rows))

    a1, a2, a3 = sums(A)
    b1, b2, b3 = sums(B)
    n1, n2, n3 = n * (n - 1), n * (n - 1) * (n - 2), n * (n - 1) * (n - 2) * (n - 3)
    mean = a1 * b1 / n1
    var = (2 * a2 * b2 / n1 + 4 * (a3 - a2) * (b3 - b2) / n2
           + (a1 * a1 + 2 * a2 - 4 * a3) * (b1 * b1 + 2 * b2 - 4 * b3) / n3 - mean * mean)
    return float(np.vdot(A, B)), mean, max(var, 0.0)


def shared_structure(stack: np.ndarray, kernel_views: Sequence[str], *, z_min: float = Z_MIN) -> StructureCheck | None:
    """Test every view's kernels for structure shared with the other views.

    Parameters
    ----------
    stack : ndarray of shape (m, n, n)
        The preprocessed landmark kernels (n >= 4).
    kernel_views : sequence of str, length m
        The view of each kernel.
    z_min : float
        See :data:`Z_MIN`.

    Returns
    -------
    StructureCheck, or None with fewer than two views (nothing to compare with) or fewer than 4
    landmarks (no permutation variance to measure against).
    """
    views = list(dict.fromkeys(kernel_views))
    if len(views) < 2 or stack.shape[1] < 4:
        return None
    owner = np.asarray(kernel_views)
    per_view = {v: _centred(stack[owner == v].mean(axis=0)) for v in views}
    total = sum(per_view.values())
    alignment, null_mean, null_std, z = [], [], [], []
    for v in views:
        A = per_view[v]
        # The other views' mean kernel: centring is linear, so the mean of centred kernels is centred.
        B = (total - A) / (len(views) - 1)
        stat, mu, var = permutation_moments(A, B)
        norm = float(np.linalg.norm(A) * np.linalg.norm(B))
        scale = 1.0 / norm if norm > 0 else 0.0
        sd = np.sqrt(var)
        alignment.append(stat * scale)
        null_mean.append(mu * scale)
        null_std.append(sd * scale)
        z.append(float((stat - mu) / sd) if sd > 0 else 0.0)
    kept = [bool(x >= z_min) for x in z]
    if not any(kept):
        kept = [True] * len(views)
        note = (f"no view's kernels agree with the other views' beyond chance (z < {z_min:g}): every kernel is "
                "kept, since agreement cannot tell which view is noise")
    elif all(kept):
        note = f"every view agrees with the others beyond chance (z >= {z_min:g})"
    else:
        dropped = [v for v, k in zip(views, kept) if not k]
        note = (f"view(s) {dropped} agree with the other views no more than chance (z < {z_min:g}): their kernels "
                "get weight 0")
    return StructureCheck(views, alignment, null_mean, null_std, z, kept, note)
