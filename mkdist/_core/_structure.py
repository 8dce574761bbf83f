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
kernels, <HAH, HBH>_F / (||HAH|| ||HBH||).  Its null distribution comes from permuting the
landmarks of that view alone (A[pi, pi]): the view's own structure stays, its link to the rest of
the data goes.  A view is kept when its alignment stands at least ``Z_MIN`` null standard
deviations above the null mean.  Why this test rather than a kernel's own spectrum (PEP, GMLKM's
Definition 2): a column-shuffled copy of a noise view has the same spectrum as the view, but so
does an informative view whose columns are independent given nothing else, and the absolute PEP of
a wide RBF kernel on 10 noise columns (0.94 at K = 10) is above that of the informative views of
``make_multiview_blobs`` (0.38-0.40): the spectrum alone cannot tell noise from weak structure;
agreement with the other views can, and it is what multi-view clustering assumes (the views see
the same clusters).

With one view there is nothing to compare with and every kernel is kept; when no view passes
(two views, one of them noise, cannot be told apart by agreement), every kernel is kept too, and
the check says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["StructureCheck", "Z_MIN", "N_PERMUTATIONS", "shared_structure"]

#: A view is kept when its alignment with the other views is this many null standard deviations
#: above the null mean.  Under the null z is about standard normal: the noise views measured at
#: |z| <= 1.6 (wine + 10 noise columns, blobs + noise, 3 seeds each); the lowest informative view
#: of the 28 shared sets, cora's word counts beside its citation graphs, at z = 5.2-7.1 on 600 rows.
Z_MIN = 4.0
#: Landmark permutations of the null distribution (each costs one n x n inner product).
N_PERMUTATIONS = 30
#: The test reads at most this many landmarks (a uniform subset): the alignment's z grows with
#: sqrt(n) (cora's word view: z 5.2-7.1 on 600 rows), and the permutations cost O(n^2) each.
MAX_ROWS = 1000


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


def shared_structure(stack: np.ndarray, kernel_views: Sequence[str], *, random_state: int | None = 0,
                     z_min: float = Z_MIN, n_permutations: int = N_PERMUTATIONS,
                     max_rows: int = MAX_ROWS) -> StructureCheck | None:
    """Test every view's kernels for structure shared with the other views.

    Parameters
    ----------
    stack : ndarray of shape (m, n, n)
        The preprocessed landmark kernels.
    kernel_views : sequence of str, length m
        The view of each kernel.
    random_state : int or None
        Seed of the row subset and the permutations.
    z_min, n_permutations, max_rows
        See :data:`Z_MIN`, :data:`N_PERMUTATIONS`, :data:`MAX_ROWS`.

    Returns
    -------
    StructureCheck, or None with fewer than two views (nothing to compare with).
    """
    views = list(dict.fromkeys(kernel_views))
    if len(views) < 2:
        return None
    rng = np.random.default_rng(random_state)
    n = stack.shape[1]
    rows = np.sort(rng.choice(n, max_rows, replace=False)) if n > max_rows else np.arange(n)
    owner = np.asarray(kernel_views)
    per_view = {v: _centred(stack[np.ix_(np.flatnonzero(owner == v), rows, rows)].mean(axis=0)) for v in views}
    total = sum(per_view.values())
    alignment, null_mean, null_std, z = [], [], [], []
    for v in views:
        A = per_view[v]
        # The other views' mean kernel: centring is linear, so the mean of centred kernels is centred.
        B = (total - A) / (len(views) - 1)
        norm = float(np.linalg.norm(A) * np.linalg.norm(B))
        if norm <= 0:
            alignment.append(0.0), null_mean.append(0.0), null_std.append(0.0), z.append(0.0)
            continue
        stat = float(np.vdot(A, B)) / norm
        null = np.empty(n_permutations)
        for r in range(n_permutations):
            pi = rng.permutation(A.shape[0])
            null[r] = float(np.vdot(A[np.ix_(pi, pi)], B)) / norm
        mu, sd = float(null.mean()), float(null.std(ddof=1))
        alignment.append(stat)
        null_mean.append(mu)
        null_std.append(sd)
        z.append((stat - mu) / sd if sd > 0 else (np.inf if stat > mu else 0.0))
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
    return StructureCheck(views, alignment, null_mean, null_std, [float(x) for x in z], kept, note)
