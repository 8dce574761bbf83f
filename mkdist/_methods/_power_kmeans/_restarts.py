"""The restarts on the init sample, and the run the fit keeps of them.

Each restart draws its own frequencies, k-means start and annealing from one integer seed
(:class:`Restarter`); they run in memory on the init sample, as tasks on the workers for Dask
input (:func:`run_restarts`).  The fit keeps the medoid of their partitions or continues from
their consensus (:func:`select_restart`, :meth:`Restarter.from_consensus`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..._core._blocks import RowBlocks
from ..._core._cluster import active_client
from ..._core._pep import principal_eigenvalue_proportion
from ._loop import auto_s0, fit_loop
from ._passes import PassModel, assignment_costs, feature_map_of, row_labels, sq_feature_distances, view_features

__all__ = ["MAX_AUTO_RESTARTS", "MIN_AUTO_RESTARTS", "RESTART_WORK", "START_KMEANS_N_INIT", "START_SAMPLE_SIZE",
           "START_WORK", "Restarter", "consensus_labels", "feature_peps", "partition_centroids", "restart_counts",
           "run_restarts", "select_restart"]

#: k-means++ runs (scikit-learn ``KMeans`` n_init) behind the start of each power k-means
#: restart, at most (see ``START_WORK``); the restarts themselves are the estimator's ``n_init``.
START_KMEANS_N_INIT = 10

#: The work of one pass of a restart is n k F products (n sample rows, k clusters, F = 2 D L
#: features): a pass is two GEMMs of that size (the distances and the centroid sums), a
#: restart 100-200 passes.  ``n_init="auto"`` runs as many restarts as fit RESTART_WORK
#: products a pass, within [MIN_AUTO_RESTARTS, MAX_AUTO_RESTARTS]: 10 on every shared
#: multi-view set with n k F <= 1e8 (hw2sources, mfeat: 8.6e6) and on the 1M run (20,000
#: sample rows, k = 10: 8.6e7); 6 on ccv (n = 6773, K = 20: 1.6e8) and 3 on leaves100
#: (K = 100, D = 595: 5.7e8), where 10 restarts took 110 s and ~4 minutes (bench/RESULTS.md).
#: Three is the fewest partitions the consensus can vote with.
RESTART_WORK = 1e9
MIN_AUTO_RESTARTS = 3
MAX_AUTO_RESTARTS = 10

#: A restart's k-means start runs as many k-means++ inits (1 to START_KMEANS_N_INIT) as fit
#: START_WORK products n_start k F (n_start = min(n, START_SAMPLE_SIZE)).  At K = 100 one
#: init took 1.3 s (leaves100: 13 of a restart's 21 s), on ccv (no cluster structure) each
#: Lloyd run ~0.6 s; and the start hardly decides the partition: restarts that shared the
#: frequencies but not the start reached nearly the same ACC (bench/RESULTS.md, "Restarts
#: and the seed").  Sets with n_start k F <= 2.5e7 keep 10 inits (hw2sources, mfeat, hdigit,
#: the 1M run); ccv (2.4e8) and leaves100 (5.7e8) run one.
START_WORK = 2.5e8

#: Rows of the init sample (all when it has fewer) that the k-means of a restart's start
#: runs on: best-of-10 k-means on all 20,000 rows was 80% of a restart's time (11 of 14 s on
#: W1), and a start needs centroids, not a partition of the sample (500 rows per cluster at
#: k = 10).  The typicality and s0 are then taken over the whole sample.
START_SAMPLE_SIZE = 5_000


def restart_counts(n_init, n: int, k: int, D: int, L: int) -> tuple[int, int]:
    """Restarts of a fit and k-means++ inits of each restart's start, from the work of a pass.

    Parameters
    ----------
    n_init : int or "auto"
        The estimator's ``n_init``: "auto" runs as many restarts as fit ``RESTART_WORK``
        products a pass (n k 2D L), within [MIN_AUTO_RESTARTS, MAX_AUTO_RESTARTS].
    n, k, D, L : int
        Sample rows, clusters, frequencies per view, views.

    Returns
    -------
    n_restarts : int
    start_n_init : int
        1 to ``START_KMEANS_N_INIT``: as many as fit ``START_WORK`` products on the start's rows.
    """
    pass_work = n * k * 2 * D * L
    n_restarts = (int(n_init) if n_init != "auto"
                  else int(np.clip(RESTART_WORK // pass_work, MIN_AUTO_RESTARTS, MAX_AUTO_RESTARTS)))
    start_n_init = int(np.clip(START_WORK // (min(n, START_SAMPLE_SIZE) * k * 2 * D * L), 1, START_KMEANS_N_INIT))
    return n_restarts, start_n_init


def _start(phis: Sequence[np.ndarray], k: int, rs: np.random.RandomState, *, possibilistic: bool,
           fuzzifier: float, n_init: int = START_KMEANS_N_INIT) -> PassModel:
    """One restart's start: k-means (k-means++, ``n_init`` runs) on the view-averaged
    RFF features ``phis`` (float64, the init sample; START_SAMPLE_SIZE of its rows drawn by
    ``rs`` when it has more), uniform view weights and, for the possibilistic model, the
    typicality at these centroids over all of ``phis``.  The model reads feature rows."""
    # sklearn.cluster and sklearn.metrics are imported where they are used in this module:
    # `import mkdist` (and so every CLI refusal) does not pay for them.
    from sklearn.cluster import KMeans

    L, n = len(phis), phis[0].shape[0]
    rows = np.sort(rs.choice(n, START_SAMPLE_SIZE, replace=False)) if n > START_SAMPLE_SIZE else slice(None)
    stacked = np.hstack([phi[rows] for phi in phis]) * math.sqrt(1.0 / L)
    km = KMeans(k, n_init=n_init, random_state=rs.randint(np.iinfo(np.int32).max))
    with warnings.catch_warnings():
        # Fewer distinct points than k is handled by the fit (duplicate centroids are legal).
        warnings.simplefilter("ignore", ConvergenceWarning)
        km.fit(stacked)
    centroids = np.stack(np.split(km.cluster_centers_ / math.sqrt(1.0 / L), L, axis=1))
    return _model_at(phis, centroids, np.full(L, 1.0 / L), possibilistic=possibilistic, fuzzifier=fuzzifier)


def _model_at(phis: Sequence[np.ndarray], centroids: np.ndarray, view_weights: np.ndarray, *,
              possibilistic: bool, fuzzifier: float) -> PassModel:
    """A run's starting model at ``centroids`` (L, k, 2D): for the possibilistic model the
    typicality there over all rows ``phis``.  The model reads feature rows."""
    eta = None
    if possibilistic:
        # eta_{j,l} = mean_i ||phi_l(x_i) - theta_{j,l}||^2 at the start, kept fixed
        # (re-estimating it every iteration cost 5 ACC points on mfeat).
        eta = np.stack([d.mean(axis=0) for d in sq_feature_distances(phis, centroids)], axis=1)
    return PassModel(None, centroids, np.asarray(view_weights, dtype=np.float64), float("nan"), eta, fuzzifier)


def consensus_labels(labels: Sequence[np.ndarray], k: int, seed: int) -> np.ndarray:
    """The consensus of the restarts' partitions: k-means (k-means++, START_KMEANS_N_INIT
    runs) on their stacked one-hot memberships, a sparse (n, R k) matrix with R ones a row.

    Its k-means objective is, up to constants, minus the summed category utility of the
    partition with the R partitions (Topchy, Jain and Punch 2005, "Clustering ensembles:
    models of consensus and weak partitions"; Wu et al. 2015, K-means-based consensus
    clustering): two points end up together as often as the restarts put them together,
    pair by pair, so errors the restarts do not share are voted out.
    """
    from scipy import sparse
    from sklearn.cluster import KMeans

    R, n = len(labels), labels[0].size
    cols = (np.stack(labels, axis=1) + k * np.arange(R)).ravel()
    H = sparse.csr_matrix((np.ones(n * R), cols, np.arange(0, n * R + 1, R)), shape=(n, R * k))
    km = KMeans(k, n_init=START_KMEANS_N_INIT, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return km.fit(H).labels_.astype(np.int64)


def partition_centroids(phis: Sequence[np.ndarray], labels: np.ndarray, k: int) -> np.ndarray:
    """The means of each cluster of ``labels`` in every view's features, (L, k, 2D); an empty
    cluster sits at the mean of all rows."""
    from scipy import sparse

    n = labels.size
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    M = sparse.csr_matrix((1.0 / counts[labels], (labels, np.arange(n))), shape=(k, n))
    out = np.stack([np.asarray(M @ phi) for phi in phis])
    empty = counts == 0
    if empty.any():
        out[:, empty] = np.stack([phi.mean(axis=0) for phi in phis])[:, None, :]
    return out


def _final_objective(phis: Sequence[np.ndarray], model: PassModel, lam: float | None) -> float:
    """The objective a run anneals towards, at its final parameters, on rows ``phis``:
    sum_i min_j C_ij (+ lam sum_l alpha_l log alpha_l for the multi-view model).

    min_j C_ij is the limit of the power mean M_s(C_i) as s -> -infinity, so runs that
    stopped at different s are compared on one function, the k-means objective of the model
    (for the possibilistic model with d~, i.e. at the memberships u of eq. 26).
    """
    value = float(assignment_costs(phis, model).costs.min(axis=1).sum())
    if lam is not None:
        alpha = model.view_weights
        value += lam * float(np.sum(alpha * np.log(np.maximum(alpha, 1e-300))))
    return value


def select_restart(runs: Sequence[dict], rule: str) -> tuple[int, list[float]]:
    """Index of the kept restart and each restart's agreement with the others.

    ``agreement[r]`` is the mean adjusted Rand index of restart r's partition of the sample
    with those of the other restarts (1.0 for a single restart).  "agreement" keeps the most
    agreeing restart, the medoid of the partitions (ties, e.g. two restarts: the lower final
    objective); "objective" the lowest ``final_objective``.
    """
    from sklearn.metrics import adjusted_rand_score

    R = len(runs)
    ari = np.ones((R, R))
    for a in range(R):
        for b in range(a + 1, R):
            ari[a, b] = ari[b, a] = adjusted_rand_score(runs[a]["labels"], runs[b]["labels"])
    agreement = ((ari.sum(axis=1) - 1.0) / max(R - 1, 1)).tolist()
    objective = np.array([r["final_objective"] for r in runs])
    if rule == "objective" or R < 3:
        return int(np.argmin(objective)), agreement
    return int(np.lexsort((objective, -np.asarray(agreement)))[0]), agreement


@dataclasses.dataclass
class Restarter:
    """One restart on the init sample from one integer seed: its own frequencies W_l (drawn
    from the seed at the fit's bandwidths), its own k-means start, its own annealing."""

    sample: list            # L arrays (n, d_l), float64
    names: list
    centers: list
    scales: list
    sigmas: list
    D: int
    k: int
    possibilistic: bool
    fuzzifier: float
    s0: Any                 # "auto" or a float
    block_rows: int
    lam: float | None       # lambda for the sample's n rows
    loop: dict
    start_n_init: int = START_KMEANS_N_INIT

    def features(self, frequencies: list) -> tuple[list[np.ndarray], RowBlocks]:
        """float64 features of the sample (start, eta, s0, reseeding, objective) and its
        passes' features (``FEATURE_DTYPE``, block by block as over all rows)."""
        fmap = feature_map_of(frequencies, self.centers, self.scales)
        phis = fmap(self.sample, dtype=np.float64)
        raw = RowBlocks(dict(zip(self.names, self.sample)), block_rows=self.block_rows)
        return phis, RowBlocks(dict(zip(self.names, view_features(raw, fmap))), block_rows=self.block_rows)

    def __call__(self, seed: int) -> dict[str, Any]:
        rs = np.random.RandomState(seed)
        # W ~ N(0, sigma^-2 I) in the scaled coordinates (Gaussian kernel, bandwidth sigma).
        frequencies = [rs.standard_normal((v.shape[1], self.D)) / sigma
                       for v, sigma in zip(self.sample, self.sigmas)]
        phis, rows = self.features(frequencies)
        model = _start(phis, self.k, rs, possibilistic=self.possibilistic, fuzzifier=self.fuzzifier,
                       n_init=self.start_n_init)
        s0 = auto_s0(assignment_costs(phis, model).costs) if self.s0 == "auto" else float(self.s0)
        return self._run(phis, rows, model, s0, seed=int(seed), s0=s0, frequencies=frequencies)

    def _run(self, phis: list, rows: RowBlocks, model: PassModel, s: float, **info) -> dict[str, Any]:
        """The iterations on the sample from ``model`` at power ``s``, with ``info`` and the
        run's final objective and partition of the sample."""
        out = fit_loop(rows, model, s0=s, lam=self.lam, reseed_pool=phis, **self.loop)
        out.update(info, final_objective=_final_objective(phis, out["model"], self.lam),
                   labels=rows.map(row_labels, out["model"], n_cols=None, dtype=np.int64))
        return out

    def from_consensus(self, runs: Sequence[dict], seed: int) -> tuple[int, dict[str, Any], list[float]]:
        """The run continued from the restarts' consensus partition (``consensus_labels``).

        The restart whose partition agrees best with the consensus (adjusted Rand index)
        lends its frequencies, view weights and final power; its centroids are moved to the
        consensus clusters' means (the typicality taken there) and the iterations go on from
        its final s.  Returns that restart's index, the run and every restart's ARI with the
        consensus.
        """
        from sklearn.metrics import adjusted_rand_score

        consensus = consensus_labels([r["labels"] for r in runs], self.k, seed)
        ari = [float(adjusted_rand_score(consensus, r["labels"])) for r in runs]
        best = int(np.argmax(ari))
        base = runs[best]
        phis, rows = self.features(base["frequencies"])
        model = _model_at(phis, partition_centroids(phis, consensus, self.k), base["model"].view_weights,
                          possibilistic=self.possibilistic, fuzzifier=self.fuzzifier)
        run = self._run(phis, rows, model, base["s_next"], seed=base["seed"], s0=base["s0"],
                        frequencies=base["frequencies"])
        return best, run, ari


def run_restarts(restart: Restarter, seeds: Sequence[int], *, on_cluster: bool) -> list[dict[str, Any]]:
    """``restart(seed)`` for every seed: with ``on_cluster`` (Dask input) as tasks on the
    workers of a distributed cluster when one is the scheduler (the sample is shipped once; a
    restart is seconds of in-memory work), else one after the other in this process.  The same
    function either way.  NumPy input stays in this process, as it does for every mkdist
    estimator, whether or not a Client happens to be the default scheduler."""
    client = active_client() if on_cluster else None
    if client is None or len(seeds) < 2:
        return [restart(seed) for seed in seeds]
    remote = client.scatter(dataclasses.replace(restart, loop={**restart.loop, "trace": None}),
                            broadcast=True, hash=False)
    return client.gather(client.map(_call_restart, [remote] * len(seeds), seeds, pure=False))


def _call_restart(restart: Restarter, seed: int) -> dict[str, Any]:
    return restart(seed)


def feature_peps(phis: Sequence[np.ndarray], view_weights: np.ndarray, k: int) -> dict[str, Any]:
    """PEP (t = k) of each view's RFF kernel and of the alpha-weighted sum, from the factors.

    K_l = Phi_l Phi_l^T and sum_l alpha_l K_l = [sqrt(alpha_l) Phi_l]_l [..]^T, so both come
    from the (b x 2DL) factors without forming a b x b kernel.
    """
    t = min(k, phis[0].shape[0])
    base = [principal_eigenvalue_proportion(phi, t, factor=True) for phi in phis]
    combined = np.hstack([math.sqrt(a) * phi for a, phi in zip(view_weights, phis)])
    return {"t": int(t), "base": [float(b) for b in base],
            "combined": float(principal_eigenvalue_proportion(combined, t, factor=True))}
