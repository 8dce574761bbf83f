"""Choose the number of clusters K from the kernel of the landmarks (issue 25).

The rule (``RULE``), on the n x n combined kernel of the n landmarks:

1. kernel distances d(i, j)^2 = K_ii + K_jj - 2 K_ij (unchanged by the centring of the base
   kernels and by a global scale of the weights), and the symmetric k-nearest-neighbour
   graph A of the landmarks in them (binary: i ~ j when either is among the other's
   ``n_neighbors`` nearest);
2. the eigenvalues mu_1 = 1 >= mu_2 >= ... of the normalised affinity D^-1/2 A D^-1/2
   (1 - mu are those of the normalised Laplacian) and the eigengaps g_k = mu_k - mu_{k+1};
   each graph's pick is the k in [k_min, k_max] with the largest gap (von Luxburg 2007,
   section 8.3).  K is the pick that at least two of three graphs on all landmarks agree
   on, with ``n_neighbors``, half and twice as many neighbours (``SCALES``; never fewer than
   5), else the pick of the ``n_neighbors`` graph: one neighbourhood size can bridge two
   touching clusters (W1, K = 50: 49 with 10 neighbours, 50 with 5 and with 20);
3. the ``n_neighbors`` graph and spectrum on ``n_resamples`` random subsets of 80% of the
   landmarks; each of these spectra and the full one votes for the k in [1, k_max] with its
   largest gap (k = 1: the graph looks like one connected group, no cluster structure);
4. ``votes`` = the share of the votes that went to K.  The runner-up is the k in range that the
   resamples chose most often after K;
5. K is instead the k whose spectral partition of the ``n_neighbors`` graph has the largest
   Newman modularity (White and Smyth 2005, "A spectral clustering approach to finding
   communities in graphs"; the top k eigenvectors of D^-1/2 A D^-1/2, scaled by D^-1/2,
   discretised by the deterministic column-pivoted QR of Damle, Minden and Ying (2019), for
   every k in range) when either
   a. at least half of the votes are for k = 1 (``NO_STRUCTURE_SHARE``: most spectra have no
      gap at all, so the in-range largest gap is an arbitrary small wiggle), or
   b. the gap's own partition is more than ``MODULARITY_MARGIN`` (5%) less modular than the best
      one, unless it keeps ``CLEAR_PARTITION_COVERAGE`` (99%) of the graph's edges inside its
      groups (the veto: a coarse split whose groups the graph divides further is over-ruled; a
      split that (nearly) disconnects the graph is not, since modularity's null model would
      also cut one large cluster among small ones).
   The eigengap pick becomes the runner-up.
6. What the choice rests on (``evidence``), and its calibrated ``confidence``: a "clear gap" when
   the eigengap chose K, at least half of the votes are for K (``MIN_VOTES``), two of the three
   neighbourhood sizes agree on it and its spectral partition keeps ``CLEAR_GAP_COVERAGE`` (95%) of
   the graph's edges inside its groups; else a "gap", an "unstable gap" (fewer votes), "no gap" or a
   "modularity veto" (step 5).  ``confidence`` is the share of exact choices the bench measured on
   that kind of evidence (``EVIDENCE_CONFIDENCE``); below ``min_confidence`` (0.9) the choice is
   ambiguous: a guess, said as such, with the next candidates.  Only a clear gap is trusted.

The range: K in [2, min(50, n // 15)] (at least 15 landmarks per cluster), read up to
min(50, n // 10) when the spectrum demands it (a clear gap there); the graph's neighbours follow
the searched range (:func:`default_n_neighbors`).  Only below 750 landmarks (small tables) does
this differ from min(50, n // 10), the range before the fifth round.

How the rule was chosen, round by round, with the measurements: the docs' performance page
(docs/performance.md, "How the K rule was chosen").

This module holds the rule: its constants (which ``mkdist.internals.k_rule_constants`` swaps),
the evidence at three graph sizes, the decision and its wording; the graph computations it reads
(kernels averaged, kNN graphs, spectra, partition curves) are :mod:`mkdist._core._k_graph`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

from ..errors import InputValidationError

# The landmark graph's computations (the "as" names: imported from here by mkdist.internals and tests).
from ._k_graph import (
    _argmax_gap,
    _cluster_qr as _cluster_qr,
    _combined_kernel,
    _distinct_points,
    _graph_spectrum,
    _kernel_sq_distances,
    _knn_graph,
    _knn_spectrum,
    _modularity_curve as _modularity_curve,
    _modularity_pick,
    _partition_curves,
    _spectral_embedding as _spectral_embedding,
    average_landmark_kernel,
)

__all__ = ["RULE", "NClustersChoice", "choose_n_clusters", "default_k_max", "demanded_k_max", "default_n_neighbors",
           "average_landmark_kernel", "how_chosen", "why_ambiguous", "next_candidates", "k_verdict", "k_headline"]

#: Name of the rule (recorded with every choice).
RULE = "knn-eigengap-votes-3sizes+modularity-veto+evidence"

#: At or above this share of spectra whose largest gap is after the first eigenvalue (no gap:
#: the graph looks like one connected group), K is chosen by modularity instead (step 5).
NO_STRUCTURE_SHARE = 0.5

#: The eigengap's K stands unless the most modular spectral partition is more than this share
#: more modular than K's own (step 5).  Screened at 0.02, 0.05, 0.1, 0.2 (bench/RESULTS.md,
#: "Fourth round"): 0.05-0.2 choose alike on all but 2-6 of 190 cells; 0.02 over-rules gaps whose
#: partition is as good as any within the curve's noise (bbcsport 7 -> 11, leaves100 50 -> 23).
MODULARITY_MARGIN = 0.05

#: ... but a gap whose partition keeps at least this share of the kNN graph's edges inside its
#: groups stands whatever modularity says: groups that (nearly) disconnect the graph are as clear
#: as clusters get, and modularity's null model prefers balanced groups, so it would split a large
#: cluster among small ones (700/200/60/40 points: 9 for 4).  Real coarse splits that the screen's
#: veto helps keep 91-98% (ccv, scene15, proteinfold); separated clusters >= 99.8% (W1, K <= 20).
CLEAR_PARTITION_COVERAGE = 0.99

#: Step 6 (fifth round): a gap is "clear" when at least this share of the votes put the largest
#: gap at K, two of the three neighbourhood sizes agree on it, and its partition keeps at least
#: ``CLEAR_GAP_COVERAGE`` of the kNN graph's edges inside its groups.  Below 0.95: bbcsport (7 for 5,
#: 0.914), msrcv1 (6 for 7, 0.893), iris (9 for 3, 0.853), but also wine and ngs (exact, 0.937, 0.862);
#: separated clusters keep >= 0.96 (W1, K = 50, 20 landmarks per cluster) and mfeat 0.965.
MIN_VOTES = 0.5
CLEAR_GAP_COVERAGE = 0.95

#: The calibrated confidence of each kind of evidence: the share of exact choices (K = the labels'
#: K) among the bench's choices on that evidence, measured on the "choose" half of its 235 cells
#: (shared sets, W1, small tables; bench/RESULTS.md, "Choosing K", fifth round; `python
#: bench/bench_auto_k_trust.py --part calibrate`), as (exact + 1) / (count + 2): 27 of 27 clear gaps
#: were exact there, 12 of 23 gaps, 4 of 23 unstable gaps, 8 of 38 choices without a gap, 0 of 14 vetoes.
EVIDENCE_CONFIDENCE = {"clear gap": 0.97, "gap": 0.52, "unstable gap": 0.2, "no gap": 0.23, "modularity veto": 0.06}

#: Below this confidence a choice is ambiguous (a guess), by default.
TRUSTED_CONFIDENCE = 0.9

#: Largest default k_max (see :func:`default_k_max`).
K_MAX_CAP = 50


#: Landmarks per cluster at the largest K searched by default (see :func:`default_k_max`) ...
MIN_PER_CLUSTER = 15
#: ... and at the largest K the spectrum may still show when it demands it (a trusted choice there).
MIN_PER_CLUSTER_DEMANDED = 10


def default_k_max(n_landmarks: int) -> int:
    """min(50, n // 15): at least fifteen landmarks per cluster at the largest K searched.

    Only below 750 landmarks (fewer rows) is this lower than 50.  The rule still reads the
    spectrum up to min(50, n // 10) (:func:`demanded_k_max`) and takes a K there when it is
    trusted (not ambiguous): a small table is searched where its clusters can be seen (iris,
    150 rows: K up to 10, not 15), but many small clusters that the graph shows clearly are found.
    """
    return int(min(K_MAX_CAP, n_landmarks // MIN_PER_CLUSTER))


def demanded_k_max(n_landmarks: int) -> int:
    """min(50, n // 10): the largest K a default search takes when the spectrum demands it."""
    return int(min(K_MAX_CAP, n_landmarks // MIN_PER_CLUSTER_DEMANDED))


def _default_search(n: int, k_min: int) -> tuple[int, int, int]:
    """(k_max searched, k_max read when the spectrum demands it, n_neighbors) of a default search."""
    k_max = max(default_k_max(n), k_min)
    return k_max, min(max(demanded_k_max(n), k_max), n - 1), default_n_neighbors(n, k_max)


def default_n_neighbors(n_landmarks: int, k_max: int) -> int:
    """Neighbours per landmark in the kNN graph: min(round(sqrt(n) / 2), n // (2 k_max)), at least 5.

    At most half the mean cluster size at the largest K tried (n / k_max landmarks), so that
    clusters that small can still form their own connected groups; at most sqrt(n) / 2 when
    k_max is small (a graph that dense blurs the gaps).  1000 landmarks, k_max = 50: 10.
    """
    return int(max(5, min(round(math.sqrt(n_landmarks) / 2), n_landmarks // (2 * k_max))))


@dataclasses.dataclass(frozen=True)
class NClustersChoice:
    """What :func:`choose_n_clusters` decided, and how sure it is.

    Attributes
    ----------
    n_clusters : int
        The chosen K (the best guess when ``ambiguous``), in [k_min, k_max].
    confidence : float in [0, 1]
        Calibrated: the share of the bench's choices made on the same kind of ``evidence``
        that were the labels' K (``EVIDENCE_CONFIDENCE``; bench/RESULTS.md, "Choosing K",
        fifth round).  0.97 on a clear gap, 0.43 or less otherwise.
    runner_up : int
        The next candidate in [k_min, k_max]: the k that the resamples' in-range picks
        (largest gap over [k_min, k_max]) chose most often besides ``n_clusters``, ties
        broken by the gap of the full spectrum; when modularity chose ``n_clusters``
        (``no_structure_share`` >= 1/2), the eigengap's pick.  Equal to ``n_clusters`` only
        when k_min == k_max.
    candidates : tuple of (int, float)
        ``n_clusters`` first, then the k in [k_min, k_max] that some resample picked, and
        the k of the five largest gaps of the full spectrum; each with the share of the
        spectra whose in-range pick it was.
    ambiguous : bool
        ``confidence < min_confidence`` (0.9 by default): K is a guess; say so, and give
        the next candidates.
    rule : str
        Name of the rule (``RULE``).
    k_range : tuple of (int, int)
        (k_min, k_max) searched.
    no_structure_share : float
        Share of the spectra whose largest gap over k = 1..k_max is after the first
        eigenvalue (one connected group, no cluster structure).  At 1/2 or more, K is the
        k of the largest modularity of the graph's spectral partitions (module docstring,
        step 5) rather than an eigengap.
    eigenvalues : tuple of float
        mu_1 >= ... >= mu_{k_max + 1} of D^-1/2 A D^-1/2 on all landmarks.
    n_landmarks : int
    n_neighbors : int
    n_resamples : int
    criterion : {"eigengap", "modularity"}
        What chose ``n_clusters``: the largest eigengap (steps 2-4 of the module docstring), or,
        when most spectra show no gap, the most modular spectral partition (step 5).
    votes : float in [0, 1] or None
        Of the n_resamples + 1 spectra (all landmarks, and each random 80% of them), the
        share whose largest eigengap over k = 1..k_max is at ``n_clusters`` (what
        ``confidence`` was before the fifth round; None in choices stored before it).
    evidence : str
        What the choice rests on (step 6 of the module docstring): "clear gap", "gap",
        "unstable gap", "no gap" or "modularity veto" ("" in choices stored before the fifth
        round).
    coverage : float or None
        Share of the landmark graph's edges inside the groups of K's spectral partition.
    sizes_agree : int or None
        How many of the three neighbourhood sizes' graphs have their in-range largest gap at K.
    """

    n_clusters: int
    confidence: float
    runner_up: int
    candidates: tuple[tuple[int, float], ...]
    ambiguous: bool
    rule: str
    k_range: tuple[int, int]
    no_structure_share: float
    eigenvalues: tuple[float, ...]
    n_landmarks: int
    n_neighbors: int
    n_resamples: int
    criterion: str = "eigengap"
    votes: float | None = None
    evidence: str = ""
    coverage: float | None = None
    sizes_agree: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain Python values (lists for tuples), JSON-serialisable."""
        return {
            "n_clusters": int(self.n_clusters), "confidence": float(self.confidence),
            "runner_up": int(self.runner_up),
            "candidates": [[int(k), float(s)] for k, s in self.candidates],
            "ambiguous": bool(self.ambiguous), "rule": self.rule, "k_range": list(self.k_range),
            "no_structure_share": float(self.no_structure_share),
            "eigenvalues": [float(v) for v in self.eigenvalues],
            "n_landmarks": int(self.n_landmarks), "n_neighbors": int(self.n_neighbors),
            "n_resamples": int(self.n_resamples), "criterion": self.criterion,
            "votes": None if self.votes is None else float(self.votes), "evidence": self.evidence,
            "coverage": None if self.coverage is None else float(self.coverage),
            "sizes_agree": None if self.sizes_agree is None else int(self.sizes_agree),
        }

    def to_json(self) -> str:
        """The choice as a JSON document (see :meth:`as_dict`)."""
        return json.dumps(self.as_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NClustersChoice:
        """The choice back from :meth:`as_dict` (a model state, a run store)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in fields}
        return cls(**{**d, "candidates": tuple((int(k), float(s)) for k, s in d["candidates"]),
                      "k_range": tuple(int(k) for k in d["k_range"]),
                      "eigenvalues": tuple(float(v) for v in d.get("eigenvalues") or ())})

    def verdict(self) -> str:
        """The choice in the user's words, one line (:func:`k_verdict`)."""
        return k_verdict(self)


# ============================================================================ wording
def _as_dict(choice: Any) -> dict[str, Any]:
    return choice if isinstance(choice, dict) else choice.as_dict()


def how_chosen(choice: Any) -> str:
    """" (the most modular partition of the landmark graph)" when modularity chose K, else "":
    for a :class:`NClustersChoice` or its :meth:`~NClustersChoice.as_dict` (inspect, reports)."""
    return " (the most modular partition of the landmark graph)" if _as_dict(choice).get("criterion") == "modularity" \
        else ""


def why_ambiguous(choice: Any) -> str:
    """What a choice rests on, in a few words, when it is not a clear gap: no clear eigengap, a gap
    whose partition is clearly less modular than another k's (step 5's veto), a gap that resampling
    does not keep, or a gap whose groups are not clearly apart."""
    d = _as_dict(choice)
    evidence = d.get("evidence") or ""
    if d.get("criterion") == "modularity" and float(d.get("no_structure_share") or 0.0) < NO_STRUCTURE_SHARE:
        return (f"the largest eigengap (K = {d.get('runner_up')}) gives a much less modular partition than "
                f"K = {d.get('n_clusters')}")
    if d.get("criterion") == "modularity" or not evidence:
        return "no clear eigengap"
    if evidence == "unstable gap":
        return f"its eigengap is the largest in only {float(d.get('votes') or 0):.0%} of the landmark resamples"
    if evidence == "gap":
        cov, agree = d.get("coverage"), d.get("sizes_agree")
        if agree is not None and agree < 2:
            return "the three neighbourhood sizes put the largest eigengap at different K"
        return (f"an eigengap, but its groups are not clearly apart ({float(cov or 0):.0%} of the landmark graph's "
                f"edges inside them; a clear gap keeps {CLEAR_GAP_COVERAGE:.0%})")
    return "no clear eigengap"


def next_candidates(choice: Any, count: int = 3) -> str:
    """The next candidates after K with their votes ("10 (votes 0.18), 11 (0.09)"), or "none"."""
    d = _as_dict(choice)
    rest = [(int(k), float(v)) for k, v in (d.get("candidates") or []) if int(k) != int(d["n_clusters"])][:count]
    if not rest:
        return "none"
    return ", ".join(f"{k} ({'votes ' if i == 0 else ''}{v:.2f})" for i, (k, v) in enumerate(rest))


def k_headline(choice: Any) -> str:
    """The short form of :func:`k_verdict` (figure titles): "K = 9 is a guess (confidence 0.52)"."""
    d = _as_dict(choice)
    conf = float(d.get("confidence") or 0.0)
    if d.get("ambiguous"):
        return f"K = {d['n_clusters']} is a guess (confidence {conf:.2f})"
    return f"K = {d['n_clusters']} (confidence {conf:.2f}{', a clear gap' if d.get('evidence') == 'clear gap' else ''})"


def k_verdict(choice: Any) -> str:
    """The K rule's verdict in the user's words, one line: what the CLI's result line, ``mkdist
    inspect``, the run report and the warning say.

    "K = 4 (confidence 0.97, a clear gap); next candidates 6 (votes 0.09), 3 (0.00)", or, when
    ambiguous, "K = 9 is a guess: <why> (confidence 0.43); next candidates 10 (votes 0.18), 11 (0.09)".
    ``choice``: a :class:`NClustersChoice` or its :meth:`~NClustersChoice.as_dict`.
    """
    d = _as_dict(choice)
    k, conf, nxt = d["n_clusters"], float(d.get("confidence") or 0.0), next_candidates(d)
    if d.get("ambiguous"):
        return f"K = {k} is a guess: {why_ambiguous(d)}{how_chosen(d)} (confidence {conf:.2f}); next candidates {nxt}"
    return f"{k_headline(d)}; next candidates {nxt}"


# ============================================================================ validation
def _check_int(name: str, value: Any, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputValidationError(f"`{name}` must be an integer, got {value!r}.")
    value = int(value)
    if low is not None and value < low:
        raise InputValidationError(f"`{name}`={value} must be >= {low}.")
    return value


# ============================================================================ the rule
def choose_n_clusters(kernel: Any, *, k_min: int = 2, k_max: int | None = None, kernel_weights: Any = None,
                      n_neighbors: int | None = None, n_resamples: int = 10, subsample: float = 0.8,
                      min_confidence: float = TRUSTED_CONFIDENCE, random_state: int | None = 0) -> NClustersChoice:
    """Choose the number of clusters from the kernel of the landmarks.

    Parameters
    ----------
    kernel : array-like of shape (n, n) or (m, n, n)
        The combined landmark kernel, or the stack of the m (preprocessed) base kernels on
        the n landmarks, which are then combined as sum_p gamma_p^2 K_p.
    k_min : int, default=2
        Smallest K returned (>= 1).
    k_max : int, default=None
        Largest K returned (k_min <= k_max < n).  None: min(50, n // 15)
        (:func:`default_k_max`), raised to k_min if smaller, and up to min(50, n // 10)
        (:func:`demanded_k_max`) when the spectrum shows a clear gap there (only below 750
        landmarks do the two differ).
    kernel_weights : array-like of shape (m,), default=None
        gamma for a stack (None: uniform weights, the average kernel).  SimpleMKKM's
        weights depend on K; choose K on the uniform combination, then fit.
    n_neighbors : int, default=None
        Neighbours per landmark in the graph (None: :func:`default_n_neighbors` for the k_max
        searched: 10 for 1000 landmarks, 6 for 150); K is also read from graphs with half and twice as many (at least 5)
        and goes to the pick two of the three agree on.  A resample of a share s of the
        landmarks uses round(s x n_neighbors) (at least 2), the same neighbourhood in terms of
        density.
    n_resamples : int, default=10
        Random subsets of the landmarks that vote besides the full set (0: only the full
        spectrum votes, and ``votes`` is 1 or 0).
    subsample : float in (0, 1), default=0.8
        Share of the landmarks in each resample.  Halves were tried: at K = 50 with 1000
        landmarks a half holds ~10 landmarks per cluster, some only 2-4, which merge into
        their neighbours, so even well separated clusters lost the vote.
    min_confidence : float in [0, 1], default=0.9
        Below this (calibrated) confidence the choice is flagged ``ambiguous``: with the
        default, only a clear gap is not.
    random_state : int or None, default=0
        Seed of the resamples.

    Returns
    -------
    NClustersChoice

    Raises
    ------
    InputValidationError
        If the kernel is not a finite symmetric (n, n) matrix or (m, n, n) stack, or
        ``k_min``/``k_max``/``n_neighbors``/``n_resamples``/``subsample``/``min_confidence``
        are out of range (k_min > k_max, k_max >= n).

    Notes
    -----
    Cost: the n x n kernel distances, and n_resamples + 3 sparse kNN graphs whose top
    k_max + 1 eigenvalues come from Lanczos (per connected component): about 0.03-0.05 s
    each at n = 1000, 0.4-1 s in all on one core (bench/RESULTS.md); when the spectra show no
    gap (step 5), one dense eigendecomposition of the top k_max vectors and k_max QR
    discretisations more (about 0.25 s at n = 1000).  No pass over the N rows.

    The eigengap heuristic is von Luxburg's (A tutorial on spectral clustering, 2007,
    section 8.3), on the symmetric kNN graph she recommends for it; the resampling votes
    follow the stability idea of Ben-Hur et al. (2002) and Lange et al. (2004), applied to
    the eigengap rather than to the partitions.  Without a gap, K maximises the modularity of
    the spectral partitions (White and Smyth 2005; discretised as Damle, Minden and Ying
    2019).  The combined kernel enters only through its distances, so centring and a global
    scale of the weights change nothing.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = np.repeat(rng.normal(0, 10, (4, 3)), 50, axis=0) + rng.normal(0, 1, (200, 3))
    >>> choice = choose_n_clusters(X @ X.T, k_max=10)
    >>> choice.n_clusters, choice.ambiguous
    (4, False)
    """
    K = _combined_kernel(kernel, kernel_weights)
    n = K.shape[0]
    if n < 4:
        raise InputValidationError(f"at least 4 landmarks are needed to choose K, got n={n}.")
    k_min = _check_int("k_min", k_min, 1)
    if k_max is None:
        k_max, k_read, default_nn = _default_search(n, k_min)
    else:
        k_max = k_read = _check_int("k_max", k_max, 1)
        default_nn = default_n_neighbors(n, k_max)
    if k_min > k_max:
        raise InputValidationError(f"k_min={k_min} must be <= k_max={k_max}.")
    if k_max >= n:
        raise InputValidationError(
            f"k_max={k_max} must be < the number of landmarks n={n} (the gap after the k_max-th "
            "eigenvalue needs one more); lower k_max or use more landmarks.")
    n_neighbors = default_nn if n_neighbors is None else _check_int("n_neighbors", n_neighbors, 1)
    if n_neighbors >= n:
        raise InputValidationError(f"n_neighbors={n_neighbors} must be < the number of landmarks n={n}.")
    n_resamples = _check_int("n_resamples", n_resamples, 0)
    if not (isinstance(subsample, (int, float, np.floating)) and 0.0 < float(subsample) < 1.0):
        raise InputValidationError(f"`subsample`={subsample!r} must be a share in (0, 1).")
    if not (isinstance(min_confidence, (int, float, np.floating)) and 0.0 <= float(min_confidence) <= 1.0):
        raise InputValidationError(f"`min_confidence`={min_confidence!r} must be in [0, 1].")
    ev = _evidence(K, k_min, k_read, n_neighbors, n_resamples, float(subsample), random_state)
    return _decide_range(ev, float(min_confidence), k_max)


def _decide_range(ev: _Evidence, min_confidence: float, k_max: int) -> NClustersChoice:
    """The choice in [k_min, k_max], or in the wider range the evidence was read for when the
    spectrum demands it: a clear gap beyond k_max (small data: many small clusters)."""
    choice = _decide(ev, min_confidence, k_max)
    if ev.k_max > k_max:
        wide = _decide(ev, min_confidence, ev.k_max)
        if wide.n_clusters > k_max and wide.evidence == "clear gap":
            return wide
    return choice


#: Neighbourhood sizes of the full-spectrum graphs, as multiples of ``n_neighbors`` (default first).
SCALES = (1.0, 0.5, 2.0)


def _scale_neighbors(n_neighbors: int, factor: float) -> int:
    """round(factor x n_neighbors), but not below 5 (the floor of :func:`default_n_neighbors`; a
    2-NN graph splits clusters of 60 landmarks into pieces) unless ``n_neighbors`` itself is."""
    return int(max(min(5, n_neighbors), round(factor * n_neighbors)))


@dataclasses.dataclass
class _Evidence:
    """What the rule reads off the landmark graph, before deciding (:func:`_decide`).

    Everything the decision needs is here, so that the bench can store it once per data set and
    try decisions on it (bench/bench_auto_k_trust.py); ``k_max`` is the widest K it was read for,
    and a decision may read less of it.
    """

    n: int
    k_min: int
    k_max: int
    n_neighbors: int
    n_resamples: int
    spectra: list          # the full spectrum at each of SCALES' sizes, k_max + 1 values each
    resampled: list        # the default size's spectrum of each resample (at most k_max + 1 values)
    modularity: np.ndarray  # modularity of the spectral partition at k = k_min..k_max
    coverage: np.ndarray    # share of the edges inside its groups, same k

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "k_min": self.k_min, "k_max": self.k_max, "n_neighbors": self.n_neighbors,
                "n_resamples": self.n_resamples, "spectra": [list(map(float, m)) for m in self.spectra],
                "resampled": [list(map(float, m)) for m in self.resampled],
                "modularity": list(map(float, self.modularity)), "coverage": list(map(float, self.coverage))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> _Evidence:
        return cls(**{**d, "spectra": [np.asarray(m) for m in d["spectra"]],
                      "resampled": [np.asarray(m) for m in d["resampled"]],
                      "modularity": np.asarray(d["modularity"]), "coverage": np.asarray(d["coverage"])})


def _evidence(K: np.ndarray, k_min: int, k_max: int, n_neighbors: int, n_resamples: int, subsample: float,
              random_state) -> _Evidence:
    """The spectra (three sizes, and the resamples) and the partition curves of the landmark graph."""
    n = K.shape[0]
    D2 = _kernel_sq_distances(K)
    # The spectrum of all landmarks at three neighbourhood sizes (n_neighbors, half, double): a
    # single size can bridge two touching clusters (W1, K = 50: 49 at 10 neighbours, 50 at 5 and 20).
    sizes = [min(_scale_neighbors(n_neighbors, f), n - 1) for f in SCALES]
    graphs = [_knn_graph(D2, s) for s in sizes]   # the first is also step 5's graph
    spectra = [_graph_spectrum(A, k_max + 1) for A in graphs]
    rng = np.random.default_rng(random_state)
    m = max(round(subsample * n), 4)
    top = min(k_max, m - 2)                      # a small resample cannot show gaps beyond m - 2
    # A resample keeps the neighbourhoods' share of the (distinct) landmarks: fewer neighbours.
    point = _distinct_points(D2)
    n_distinct = int(point.max()) + 1
    resampled = []
    for _ in range(n_resamples if top >= k_min else 0):
        idx = np.sort(rng.choice(n, size=m, replace=False))
        share_kept = np.unique(point[idx]).size / n_distinct
        k_sub = min(max(2, round(n_neighbors * share_kept)), m - 1)
        resampled.append(_knn_spectrum(D2[np.ix_(idx, idx)], k_sub, top + 1))
    curve, coverage = _partition_curves(graphs[0], k_min, k_max)
    return _Evidence(n, k_min, k_max, n_neighbors, n_resamples, spectra, resampled, curve, coverage)


def _decide(ev: _Evidence, min_confidence: float, k_max: int | None = None) -> NClustersChoice:
    """The choice from the evidence, reading K in [ev.k_min, k_max] (default: ev.k_max)."""
    k_min = ev.k_min
    k_max = ev.k_max if k_max is None else k_max
    mu = ev.spectra[0]
    full_picks = [_argmax_gap(m, k_min, k_max) for m in ev.spectra]
    # K: the pick that at least two of the three sizes agree on, else the default size's.
    counts = np.bincount(full_picks, minlength=k_max + 1)
    best = int(np.argmax(counts)) if counts.max() >= 2 else full_picks[0]
    # The votes: the default size's full spectrum and resamples, as before the sizes were added.
    overall = [_argmax_gap(mu, 1, k_max)]        # each spectrum's largest gap over [1, k_max]
    picks = [full_picks[0]]                      # ... and over [k_min, k_max]
    for mu_b in ev.resampled:
        top = min(k_max, mu_b.size - 1)
        overall.append(_argmax_gap(mu_b, 1, top))
        picks.append(_argmax_gap(mu_b, k_min, top))
    n_votes = len(picks)
    no_structure = sum(k == 1 for k in overall) / n_votes
    gap_pick = best
    modularity_chose = False
    if k_max > k_min:
        # Step 5: the most modular spectral partition over-rules the eigengap when the spectra show
        # no gap at all, or when the gap's own partition is clearly less modular (a coarse split
        # whose groups the graph divides further).
        curve, coverage = ev.modularity[:k_max - k_min + 1], ev.coverage[:k_max - k_min + 1]
        i_gap = gap_pick - k_min
        q_best = float(curve.max())
        veto = (q_best > 0 and curve[i_gap] < (1 - MODULARITY_MARGIN) * q_best
                and coverage[i_gap] < CLEAR_PARTITION_COVERAGE)
        if no_structure >= NO_STRUCTURE_SHARE or veto:
            best = _modularity_pick(curve, k_min)
            modularity_chose = True
    votes = sum(k == best for k in overall) / n_votes
    share = np.bincount(picks, minlength=k_max + 1) / n_votes
    gaps = mu[:k_max] - mu[1:k_max + 1]          # gaps[k - 1] = g_k
    in_range = np.arange(k_min, k_max + 1)
    # Candidates: K, then the eigengap pick when modularity chose K, then most in-range picks,
    # then the larger gap of the full spectrum.
    order = [int(k) for k in sorted(in_range, key=lambda k: (k != best, k != gap_pick, -share[k], -gaps[k - 1]))]
    runner = order[1] if len(order) > 1 else best
    by_gap = {int(k) for k in sorted(in_range, key=lambda k: -gaps[k - 1])[:5]}
    candidates = tuple((k, float(share[k])) for k in order if share[k] > 0 or k in by_gap or k in (best, gap_pick))
    # Step 6: what the choice rests on, and the bench's share of exact choices on such evidence.
    coverage = float(ev.coverage[best - k_min])
    sizes_agree = sum(p == best for p in full_picks)
    if modularity_chose:
        evidence = "no gap" if no_structure >= NO_STRUCTURE_SHARE else "modularity veto"
    elif votes < MIN_VOTES:
        evidence = "unstable gap"
    elif sizes_agree >= 2 and coverage >= CLEAR_GAP_COVERAGE:
        evidence = "clear gap"
    else:
        evidence = "gap"
    confidence = EVIDENCE_CONFIDENCE[evidence]
    return NClustersChoice(
        n_clusters=int(best), confidence=float(confidence), runner_up=int(runner), candidates=candidates,
        ambiguous=bool(confidence < min_confidence), rule=RULE, k_range=(k_min, k_max),
        no_structure_share=float(no_structure),
        eigenvalues=tuple(float(v) for v in mu[:k_max + 1]), n_landmarks=ev.n, n_neighbors=ev.n_neighbors,
        n_resamples=ev.n_resamples, criterion="modularity" if modularity_chose else "eigengap", votes=float(votes),
        evidence=evidence, coverage=coverage, sizes_agree=int(sizes_agree))
