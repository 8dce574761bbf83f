"""Building blocks of the algorithms, for benchmarks and research scripts (``bench/``).

The estimators (``mkdist.MultipleKernelClustering``, ...) and the pipeline (``mkdist.pipeline``)
are mkdist's API.  The benchmarks also measure and recombine the pieces the estimators are
made of -- a kernel set-up, a landmark sample, the K rule's evidence, late fusion's base
partitions -- and this module is where they find them: every name here is documented and
kept importable (``tests/test_architecture.py`` checks that ``bench/`` imports mkdist only
through public modules and that every name below resolves).  Unlike the top-level names,
their signatures follow the algorithms: they change when an algorithm changes, together with
the benchmarks that use them.

======================================  =====================================================
kernels
-------------------------------------------------------------------------------------------
``resolve_kernel_specs``                ``kernels=`` -> specs for the given views
``fit_landmark_kernels``                specs -> scaling -> fitted kernels on landmark rows
``fit_kernels``                         bandwidth heuristics of specs turned into numbers
``landmark_kernels``                    the (m, n, n) stack of fitted kernels on landmarks
``fit_preprocessing``                   centring and normalisation of a kernel stack
``power_families``                      kernels that share one power of the Gram matrix
``view_density``, ``SPARSE_DENSITY``    share of non-zero entries; "auto"'s sparse threshold
rows, graphs, linear algebra
-------------------------------------------------------------------------------------------
``sample_landmark_indices``             the landmark sample of a fit
``build_graph``                         adaptive-neighbour graph of late fusion
``blas_threads``                        a context with this many BLAS threads
``is_dask_array``                       whether an array is a Dask array
``default_embedding_dim``               embedding columns for K clusters on n landmarks
methods
-------------------------------------------------------------------------------------------
``fit_landmark_model``, ``embed_chunk`` MKC's fit on landmark rows, its row embedding
``compiled_available``                  whether MKC's fused embedding takes its compiled step
``combine_compiled``                    that step itself (numba), e.g. to time its first call
``warm_compiled``                       compile / load that step now (fills numba's disk cache)
``cache_block_rows``                    rows per sub-block for a cache budget (row functions)
``late_fusion_seeds``                   late fusion's (landmark, base, fusion) seeds of a seed
``fit_base_partitions``                 late fusion's step 1 (base partitions)
``fit_late_fusion_from_base``           an estimator fitted on given base partitions
``fit_fusion``, ``partition_copies``    late fusion's Algorithm 1 on base partitions
``default_n_components``                power k-means' random frequencies per view for K
cluster profiles
-------------------------------------------------------------------------------------------
``ProfileLayout``, ``profile_partial``  the profile's columns; one row chunk's partial sums
the K rule (``n_clusters="auto"``)
-------------------------------------------------------------------------------------------
``choose_n_clusters``, ``default_k_max``, ``default_n_neighbors``, ``default_search``
``combined_kernel``, ``kernel_sq_distances``, ``knn_graph``, ``distinct_points``,
``graph_spectrum``, ``spectral_embedding``, ``cluster_qr``, ``modularity_curve``,
``scale_neighbors``, ``SCALES``
``evidence``, ``Evidence``, ``decide``, ``decide_range``: the rule's evidence and decision
``K_MAX_CAP``, ``TRUSTED_CONFIDENCE``, ``EVIDENCE_CONFIDENCE``, ``CLEAR_GAP_COVERAGE``,
``MIN_VOTES``; ``k_rule_constants``: the rule with other constants, for an ablation
missing cells (``missing="impute"``)
-------------------------------------------------------------------------------------------
``Imputer``, ``donor_indices``, ``missing_per_row``: the fill, its donor rows, cells per row
``IMPUTATION_NEIGHBORS``; ``imputation_neighbors``: the fill with another neighbour count
runs and workers
-------------------------------------------------------------------------------------------
``worker_malloc_settings``, ``worker_malloc_state``: the workers' allocator
``kmeans_failing_once``                 the next labels-stage k-means fails (resume benches)
======================================  =====================================================

Each name's own docstring (in the module it comes from) documents it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._core._blocks import cache_block_rows
from ._core._fused import combine_compiled, compiled_available, warm as warm_compiled
from ._core._graph import build_graph
from ._core._kernel_specs import SPARSE_DENSITY, resolve_kernel_specs, view_density
from ._core._kernels import (
    _power_families as power_families,
    fit_kernels,
    fit_landmark_kernels,
    fit_preprocessing,
    landmark_kernels,
)
from ._core._linalg import blas_threads
from ._core._missing import N_NEIGHBORS as IMPUTATION_NEIGHBORS, Imputer, donor_indices, missing_per_row
from ._core._nclusters import (
    CLEAR_GAP_COVERAGE,
    EVIDENCE_CONFIDENCE,
    K_MAX_CAP,
    MIN_VOTES,
    SCALES,
    TRUSTED_CONFIDENCE,
    _cluster_qr as cluster_qr,
    _combined_kernel as combined_kernel,
    _decide as decide,
    _decide_range as decide_range,
    _default_search as default_search,
    _distinct_points as distinct_points,
    _Evidence as Evidence,
    _evidence as evidence,
    _graph_spectrum as graph_spectrum,
    _kernel_sq_distances as kernel_sq_distances,
    _knn_graph as knn_graph,
    _modularity_curve as modularity_curve,
    _scale_neighbors as scale_neighbors,
    _spectral_embedding as spectral_embedding,
    choose_n_clusters,
    default_k_max,
    default_n_neighbors,
)
from ._core._profiles import ProfileLayout, profile_partial
from ._core._sampling import sample_landmark_indices
from ._core._validation import is_dask_array
from ._core._worker_env import _worker_malloc_state as worker_malloc_state, worker_malloc_settings
from ._methods._base import default_embedding_dim
from ._methods._late_fusion._fusion import fit_fusion, partition_copies
from ._methods._late_fusion._partitions import fit_base_partitions, fit_seeds as late_fusion_seeds
from ._methods._mkc import embed_chunk, fit_landmark_model
from ._methods._power_kmeans import default_n_components

__all__ = [
    # kernels
    "resolve_kernel_specs", "fit_landmark_kernels", "fit_kernels", "landmark_kernels", "fit_preprocessing",
    "power_families", "view_density", "SPARSE_DENSITY",
    # rows, graphs, linear algebra
    "sample_landmark_indices", "build_graph", "blas_threads", "is_dask_array", "default_embedding_dim",
    # methods
    "fit_landmark_model", "embed_chunk", "compiled_available", "combine_compiled", "warm_compiled",
    "cache_block_rows",
    "late_fusion_seeds", "fit_base_partitions", "fit_late_fusion_from_base",
    "fit_fusion", "partition_copies", "default_n_components",
    # the K rule
    "choose_n_clusters", "default_k_max", "default_n_neighbors", "default_search", "combined_kernel",
    "kernel_sq_distances", "knn_graph", "distinct_points", "graph_spectrum", "spectral_embedding", "cluster_qr",
    "modularity_curve", "scale_neighbors", "SCALES", "evidence", "Evidence", "decide", "decide_range", "K_MAX_CAP",
    "TRUSTED_CONFIDENCE", "EVIDENCE_CONFIDENCE", "CLEAR_GAP_COVERAGE", "MIN_VOTES", "k_rule_constants",
    # missing cells
    "Imputer", "donor_indices", "missing_per_row", "IMPUTATION_NEIGHBORS", "imputation_neighbors",
    # cluster profiles
    "ProfileLayout", "profile_partial",
    # runs and workers
    "worker_malloc_settings", "worker_malloc_state", "kmeans_failing_once",
]


def fit_late_fusion_from_base(estimator, base, landmark_indices, seed: int):
    """Fit a ``LateFusionClustering`` on base partitions computed beforehand.

    Steps 2-3 of its fit (graphs, Algorithm 1) on ``base`` (:func:`fit_base_partitions`, which
    do not depend on the fusion seed), so that a benchmark computes them once for several
    seeds or settings.

    Parameters
    ----------
    estimator : LateFusionClustering
        With ``n_clusters_`` set (an integer K).
    base : BasePartitions
    landmark_indices : ndarray of shape (n,)
    seed : int
        The fusion seed (the third of :func:`late_fusion_seeds`).

    Returns
    -------
    LateFusionModel
        Also set on ``estimator`` with every fitted attribute.
    """
    return estimator._fit_from_base(base, landmark_indices, seed)


@contextlib.contextmanager
def _module_constants(module, values: dict) -> Iterator[None]:
    """``module``'s constants set to ``values`` inside the block, restored after it."""
    saved = {name: getattr(module, name) for name in values}  # an unknown name: AttributeError
    try:
        for name, value in values.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def k_rule_constants(**values: float):
    """The K rule with other values of its module constants inside the block (an ablation).

    Parameters
    ----------
    **values
        Constant name -> value, e.g. ``NO_STRUCTURE_SHARE=float("inf")``; a name the rule
        does not have is refused (``AttributeError``).
    """
    from ._core import _nclusters

    return _module_constants(_nclusters, values)


def imputation_neighbors(k: int):
    """``missing="impute"`` filling a cell from ``k`` nearest donors inside the block (1: the
    nearest donor's value, 0: the column mean), in this process; default
    ``IMPUTATION_NEIGHBORS``."""
    from ._core import _missing

    return _module_constants(_missing, {"N_NEIGHBORS": k})


@contextlib.contextmanager
def kmeans_failing_once() -> Iterator[None]:
    """Inside the block, the first k-means of a labels stage raises ``RuntimeError``; later
    ones run.  For benchmarks of a run that fails in its last stage and is resumed."""
    from ._methods import _base

    real = _base.kmeans
    failed = []

    def failing_once(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise RuntimeError("injected failure in the k-means stage")
        return real(*args, **kwargs)

    _base.kmeans = failing_once
    try:
        yield
    finally:
        _base.kmeans = real
