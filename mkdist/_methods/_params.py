"""The parameter tables of the built-in estimators, importable without scikit-learn.

Each estimator class declares its parameters as a constraint table (``_param_constraints``,
see :mod:`mkdist._core._validation`), merged along its bases.  The tables live here rather than in
the class bodies for one reason: every estimator class subclasses scikit-learn's
``BaseEstimator``, and importing scikit-learn (which loads scipy.stats and pandas) takes
1.7-2.0 s on this project's 2-core machine, so a CLI that imported the classes to refuse
``--n-clusters 1`` could not answer within the 2 s a bad argument deserves (issue 13).  This
module needs only NumPy and the constraint classes; each class takes its table from here,
and :func:`mkdist._methods._registry.method_parameters` reads the merged table of a built-in method
without importing its class.  ``tests/test_architecture.py`` checks that every built-in
method's merged table here is exactly the one its class collects, and names exactly the
parameters of its ``__init__``.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from .._core._kernel_specs import KernelSpec
from .._core._sampling import LANDMARK_METHODS
from .._core._scaling import SCALE_AUTO, SCALE_NONE, SCALE_TABLE, SCALE_UNITS, SCALINGS
from .._core._validation import Boolean, Interval, NClusters, Options, RandomStateLike, Types

__all__ = ["AUTO_N_CLUSTERS_METHODS", "LANDMARK_METHODS", "POWER_BANDWIDTH_RULES", "D_RULES", "RESTART_RULES",
           "ESTIMATOR", "MKC", "NYSTROM", "RFF_POWER_KMEANS", "MV_RFF_POWER_KMEANS", "LATE_FUSION",
           "BUILTIN_PARAMETERS"]

#: The bandwidth heuristics power k-means' ``bandwidth`` accepts by name: a subset of the rules
#: of ``mkdist._core._distances.bandwidth_statistic`` (``mkdist._core._kernel_specs.BANDWIDTH_RULES``,
#: which also holds "max", the rule of the kernel specs' ``bandwidth_rule``).
POWER_BANDWIDTH_RULES = ("median", "mean")
#: The rules for D, power k-means' random frequencies per view (``default_n_components``).
D_RULES = ("main", "appendix")
#: The rules of power k-means' ``restart_selection`` (``mkdist._methods._power_kmeans._restarts.select_restart``).
RESTART_RULES = ("consensus", "agreement", "objective")

_KERNELS = Types(str, list, tuple, dict, KernelSpec, noun="a kernel set name or a list of kernel specs")

#: The methods whose ``n_clusters`` may be "auto" or a range (k_min, k_max): K is chosen from
#: the spectrum of the kernel of their landmarks (anchors), which they compute before K is
#: needed (``mkdist._core._nclusters``; ``MkdistEstimator._choose_n_clusters``).
AUTO_N_CLUSTERS_METHODS = ("mkc", "nystrom", "late-fusion")

#: Every estimator (``MkdistEstimator``).
ESTIMATOR: dict[str, list] = {
    "n_clusters": [NClusters(2)],
    "random_state": [RandomStateLike()],
}

#: ``MultipleKernelClustering``.
MKC: dict[str, list] = {
    "kernels": [None, _KERNELS],
    "n_landmarks": [Interval(Integral, 2, None), None],
    "embedding_dim": [Interval(Integral, 1, None), None],
    "landmark_method": [Options(*LANDMARK_METHODS)],
    "weights": [Options("simplemkkm", "uniform")],
    "center": [Boolean()],
    "normalize": [Options("auto", "diagonal", "trace", None)],
    "normalize_embedding": [Options("auto"), Boolean()],
    "embedding_scale": [Options("auto", "unit", "eigenvalue")],
    "scale": [Options(None, SCALE_NONE, *SCALINGS, SCALE_AUTO, SCALE_UNITS, SCALE_TABLE)],
    "keep_structured": [Boolean()],
    "max_iter": [Interval(Integral, 1, None)],
    "tol": [Interval(Real, 0, None, closed="neither")],
    "n_init": [Interval(Integral, 1, None)],
    "kmeans_max_iter": [Interval(Integral, 1, None)],
    "kmeans_tol": [Interval(Real, 0, None)],
    "dtype": [Options(None, "float32", "float64")],
}

#: ``NystromSpectralClustering``.
NYSTROM: dict[str, list] = {
    "n_anchors": [Interval(Integral, 2, None), None],
    "anchor_factor": [Interval(Real, 0, None, closed="neither")],
    "bandwidth": [Interval(Real, 0, None, closed="neither"), None],
    "n_init": [Interval(Integral, 1, None)],
    "kmeans_max_iter": [Interval(Integral, 1, None)],
    "persist_embedding": [Boolean()],
}

#: Both RFF power k-means estimators (``_RFFPowerKMeansBase``).
RFF_POWER_KMEANS: dict[str, list] = {
    "n_clusters": [NClusters(1, auto_reason=(
        "power k-means on random Fourier features cannot choose K: it has no landmark kernel whose spectrum "
        "shows K, and K shapes its annealing from the first step, so choosing it would mean one full fit per "
        "candidate. Give an integer, or use a method that chooses K from its landmarks: "
        + ", ".join(AUTO_N_CLUSTERS_METHODS) + "."))],
    "n_components": [Interval(Integral, 1, None), Options(None, *D_RULES)],
    "bandwidth": [Options(*POWER_BANDWIDTH_RULES), Interval(Real, 0, None, closed="neither"),
                  Types(list, tuple, np.ndarray, noun="one rule or positive number per view")],
    "s0": [Options("auto"), Interval(
        Real, None, 0, closed="neither",
        hint="power k-means anneals s towards -infinity from a negative start (s >= 0 does not approximate "
             "k-means). Use s0='auto' or e.g. s0=-3.")],
    "annealing": [Interval(Real, 1, None)],
    "anneal_every": [Interval(Integral, 1, None)],
    "max_iter": [Interval(Integral, 1, None)],
    "tol": [Interval(Real, 0, None)],
    "scale": [Options(None, SCALE_NONE, *SCALINGS)],
    "n_init": [Options("auto"), Interval(Integral, 1, None)],
    "restart_selection": [Options(*RESTART_RULES)],
    "chunk_size": [Interval(Integral, 1, None)],
}

#: ``MultiViewRFFPowerKMeans`` beyond ``RFF_POWER_KMEANS``.
MV_RFF_POWER_KMEANS: dict[str, list] = {
    "lam": [Options("auto"), Interval(Real, 0, None, closed="neither")],
    "fuzzifier": [Interval(Real, 1, None, closed="neither")],
}

#: ``LateFusionClustering``.
LATE_FUSION: dict[str, list] = {
    "kernels": [None, _KERNELS],
    "embedding_dim": [Interval(Integral, 1, None), None],
    "graph_filter_order": [Interval(Integral, 0, None)],
    "n_neighbors": [Interval(Integral, 1, None), None],
    "n_landmarks": [Interval(Integral, 2, None), None],
    "min_pep_ratio": [Interval(Real, 0, 1, closed="left")],
    "filter_weights": [Options("learned", "uniform")],
    "center": [Boolean()],
    "normalize": [Options("diagonal", "trace", None)],
    "scale": [Options(None, SCALE_NONE, *SCALINGS, SCALE_AUTO)],
    "max_iter": [Interval(Integral, 1, None)],
    "tol": [Interval(Real, 0, None)],
    "n_init": [Interval(Integral, 1, None)],
    "cluster_all_points": [Boolean()],
    "normalize_embedding": [Boolean()],
    "dtype": [Options(None, "float32", "float64")],
    "full_pep": [Boolean()],
}

#: Built-in method -> (module that defines and registers its class, its merged table: the
#: bases' tables first, as ``mkdist._core._validation.collect_constraints`` merges a class's).
BUILTIN_PARAMETERS: dict[str, tuple[str, dict[str, list]]] = {
    "mkc": ("mkdist._methods._mkc", {**ESTIMATOR, **MKC}),
    "nystrom": ("mkdist._methods._nystrom", {**ESTIMATOR, **NYSTROM}),
    "rff-power": ("mkdist._methods._power_kmeans._estimators", {**ESTIMATOR, **RFF_POWER_KMEANS}),
    "mv-rff-power": ("mkdist._methods._power_kmeans._estimators",
                     {**ESTIMATOR, **RFF_POWER_KMEANS, **MV_RFF_POWER_KMEANS}),
    "late-fusion": ("mkdist._methods._late_fusion._estimator", {**ESTIMATOR, **LATE_FUSION}),
}
