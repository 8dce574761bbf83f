"""Steps 2-4 of the GMLKM fit: Algorithm 1 on the filtered base partitions (Du et al., eq. 21-27).

Alternate labels Y (k-means on H~ = G~ [gamma_1 H_1, ..., gamma_m H_m], G~ = sum_i mu_i G_i),
view weights gamma (eq. 26) and filter weights mu (eq. 27) (:func:`fit_fusion`), then, with
``normalize_embedding``, the clusters of the row-normalised H~ (:func:`normalized_clusters`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse

from ..._core._graph import Graph, apply_filter, simplex_qp

__all__ = ["FilterMoments", "Fusion", "apply_filters", "fit_fusion", "normalized_clusters", "partition_copies"]


@dataclasses.dataclass
class Fusion:
    gamma: np.ndarray        # (m',)
    mu: np.ndarray           # (m',)
    labels: np.ndarray       # (n,)
    centers: np.ndarray      # (k, D)
    embedding: np.ndarray    # (n, D) H~ at the optimum
    objective_history: list[float]
    objective_steps: list[tuple[str, float]]
    n_iter: int
    converged: bool


def apply_filters(graphs: Sequence[Graph], weights: np.ndarray, Z: np.ndarray, order: int,
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


class FilterMoments:
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
        self.GH0 = np.zeros(H.shape)  # G~ H at mu0, summed as ``apply_filters`` sums
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
        return apply_filters(self.graphs, mu, self.H, self.order, self._cache, capacity)

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

    def __init__(self, moments: FilterMoments, labels: np.ndarray, k: int):
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


def fit_fusion(H_cat: np.ndarray, col_kernel: np.ndarray, graphs: Sequence[Graph], copies: np.ndarray, *,
                n_clusters: int, order: int, learn_mu: bool, n_init: int, max_iter: int, tol: float,
                random_state: int) -> Fusion:
    """Algorithm 1: alternate Y (k-means), gamma (eq. 26) and mu (eq. 27) on eq. 23.

    Every step minimises J over its variable with the others fixed (gamma and mu exactly,
    Y by Lloyd from the current clusters), so J never increases.  J, alpha and M come from
    :class:`FilterMoments`; G~ H is formed only for the k-means, with the filters whose
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
    moments = FilterMoments(H_cat, slices, graphs, order, mu)
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
    return Fusion(gamma, mu, labels, centers, GH * columns(gamma), history, steps, n_iter, converged)


def normalized_clusters(Z: np.ndarray, labels: np.ndarray, k: int, n_init: int,
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




def partition_copies(kernel_group: np.ndarray, n_kept: int) -> np.ndarray:
    """Base kernels sharing each kept partition (itself included), shape (n_kept,), from
    ``kernel_group`` (position in ``kept`` of each kernel's partition, -1: dropped)."""
    return np.bincount(kernel_group[kernel_group >= 0], minlength=n_kept)
