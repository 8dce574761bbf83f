"""Fitting MKC on the landmarks (one node): base kernels, SimpleMKKM's weights, the top
eigenvectors of the combined kernel, and the warnings about degenerate kernels, collapsed weights
and a partition that differs from the uniform weights'."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._core._kernels import fit_landmark_kernels, fit_preprocessing, landmark_kernels
from .._core._kmeans import kmeans
from .._core._linalg import top_eigenpairs, unit_rows
from .._core._pep import DEGENERATE_PEP_RATIO, excess_pep, principal_eigenvalue_proportion
from .._core._simplemkkm import average_kernel_kmeans, combine_kernels, simple_mkkm
from .._core._structure import shared_structure
from ..errors import DegenerateKernelWarning, EmbeddingStabilityWarning, InputValidationError
from ..metrics import ari
from ._base import default_embedding_dim
from ._mkc_model import MKCModel, spectral_diagnostics


def _warn_degenerate_kernels(pep_base, kernel_weights, names, n_clusters: int, n: int) -> None:
    """Warn when near-identity base kernels hold weight.

    SimpleMKKM's min-max objective favours a kernel with a flat spectrum (measured on UCI mfeat
    pix with ``kernels="mkkm12"``: 92% of the weight on the three narrowest Gaussians, ACC 0.55),
    so such kernels are reported, with their weight, rather than silently used.  They are not
    dropped: the kernel set is the user's choice here.
    """
    chance = n_clusters / n
    excess = excess_pep(pep_base, chance)
    best = float(excess.max()) if excess.size else 0.0
    if best <= 0:
        return
    bad = np.flatnonzero(excess < DEGENERATE_PEP_RATIO * best)
    if bad.size == 0:
        return
    share = float((np.asarray(kernel_weights)[bad]).sum())
    listed = ", ".join(f"{names[p]} (PEP {pep_base[p]:.3f})" for p in bad)
    warnings.warn(
        f"{bad.size} base kernel(s) are near the identity on the landmarks (PEP at t={n_clusters} close "
        f"to the chance level {chance:.3g}): {listed}; they hold {share:.0%} of the kernel weight. "
        "Their bandwidth is too small for this data: remove them from `kernels`.",
        DegenerateKernelWarning, stacklevel=4)


#: A learned combination counts as collapsed when one kernel holds this share of gamma^2.
COLLAPSE_SHARE = 0.9


def _warn_collapsed_weights(kernel_weights, names, weights: str) -> None:
    """Say so when SimpleMKKM put (nearly) all the weight on one kernel.

    The combined kernel is then that kernel: the multiple-kernel fit brings nothing, and
    whether the rest of the kernels would have helped is what ``weights="uniform"`` tells.
    """
    if weights != "simplemkkm" or len(kernel_weights) < 2:
        return
    w2 = np.asarray(kernel_weights, dtype=np.float64) ** 2
    top = int(np.argmax(w2))
    share = float(w2[top] / w2.sum())
    if share >= COLLAPSE_SHARE:
        warnings.warn(
            f"the learned kernel weights collapsed onto {names[top]} ({share:.0%} of sum gamma^2): the combined "
            "kernel is nearly that one kernel; compare with weights='uniform' (the average kernel), which uses "
            "every kernel.", DegenerateKernelWarning, stacklevel=4)


#: Learned and uniform weights whose landmark partitions agree less than this (adjusted Rand
#: index) are reported as clustering differently (``diagnostics_["weights_check"]``).
WEIGHTS_AGREEMENT_ARI = 0.8


def _landmark_partition(H: np.ndarray, n_clusters: int, normalize: bool, seed: int) -> np.ndarray:
    """k-means on the rows of a landmark embedding (row-normalised as the full embedding is)."""
    if normalize:
        H = unit_rows(H)
    return np.asarray(kmeans(H, n_clusters, n_init=3, random_state=seed).labels)


def compare_with_uniform(stack: np.ndarray, learned, n_clusters: int, *, normalize_embedding: bool = True,
                         random_state: int | None = 0) -> dict[str, Any]:
    """How far the learned weights move the landmark clustering away from uniform weights.

    SimpleMKKM's weights do not always pay: on the 28 shared multi-view sets learned weights
    won on 17, uniform weights on 6, 5 ties (bench/RESULTS.md, quality section), and no
    unsupervised quantity measured there (the K-th eigen-gap, PEP, silhouette, this agreement)
    told the winner in more than 15 of 25 sets.  What can be known without labels is whether
    the choice matters: the landmarks are clustered with both combined kernels (one more
    eigensolve of the uniform kernel, k-means on n rows) and the two partitions compared.  It
    is a diagnostic, not a warning: the partitions differ (ARI < 0.8) on 23 of the 28 sets (in
    at least one of 5 seeds), whichever weighting won there.

    Parameters
    ----------
    stack : ndarray of shape (m, n, n)
        The preprocessed landmark kernels.
    learned : SimpleMKKMResult
    n_clusters : int

    Returns
    -------
    dict
        ``ari`` (learned vs uniform landmark partitions), ``objective_learned`` /
        ``objective_uniform`` (SimpleMKKM's J), ``agree`` (ari >= WEIGHTS_AGREEMENT_ARI).
    """
    uniform = average_kernel_kmeans(stack, n_clusters)
    seed = 0 if random_state is None else int(random_state)
    a = _landmark_partition(learned.H, n_clusters, normalize_embedding, seed)
    b = _landmark_partition(uniform.H, n_clusters, normalize_embedding, seed)
    agreement = ari(a, b)
    return {"ari": agreement, "objective_learned": float(learned.objective_history[-1]),
            "objective_uniform": float(uniform.objective_history[-1]),
            "agree": bool(agreement >= WEIGHTS_AGREEMENT_ARI)}


def _refuse_constant_views(specs, views: Mapping[str, np.ndarray]) -> None:
    """A view whose landmark rows are all the same carries nothing to cluster: refused, naming it."""
    for name in dict.fromkeys(s.view for s in specs):
        X = views[name]
        if X.shape[0] > 1 and np.array_equal(X, np.broadcast_to(X[:1], X.shape)):
            # Caught here for every kernel kind: a cosine or linear kernel on such a view is 0 or
            # constant, and the eigensolver then failed with "ARPACK error -9: Starting vector is zero".
            raise InputValidationError(
                f"view {name!r} is constant on the landmarks: all {X.shape[0]} landmark rows are the same (a view of "
                "zeros, or of one repeated row), so no kernel on it carries anything to cluster"
                + ("; drop the view" if len(views) > 1 else ": there is nothing to cluster"))


def fit_landmark_model(landmark_views: Mapping[str, np.ndarray], landmark_indices: np.ndarray, *,
                       n_clusters: int | Callable[[np.ndarray], int], kernels: Any = None,
                       weights: str = "simplemkkm",
                       center: bool = True, normalize: str | None = "diagonal",
                       normalize_embedding: bool = True, scale: str | None = None,
                       keep_structured: bool = True, max_iter: int = 200, tol: float = 1e-4, dtype: str = "float64",
                       random_state: int | None = 0, embedding_dim: int | None = None,
                       embedding_scale: str = "unit") -> tuple[MKCModel, dict[str, Any]]:
    """Fit SimpleMKKM (or uniform weights) on in-memory landmarks.

    Parameters
    ----------
    landmark_views : dict of str to ndarray of shape (n, d_v)
        Landmark rows of every view (unscaled; ``scale`` is estimated on them).
    landmark_indices : ndarray of shape (n,)
        Their row numbers in the full input (stored with the model).
    n_clusters : int or callable
        K; or a function that receives the preprocessed landmark kernel stack, shape
        (m, n, n), and returns K (the estimator's K choice for ``n_clusters="auto"``, run
        before SimpleMKKM, whose weights depend on K).
    kernels, weights, center, normalize, normalize_embedding, scale, keep_structured, max_iter, tol
        As in :class:`mkdist.MultipleKernelClustering` (validated by the caller).
    dtype : {"float32", "float64"}
        Precision of the out-of-sample embedding; the landmark fit runs in float64.
    random_state : int
        Seed of the bandwidth-heuristic subsample.
    embedding_dim : int, optional
        Eigenvectors of the combined kernel in the embedding (>= n_clusters); None: K with
        ``embedding_scale="eigenvalue"``, else :func:`mkdist._methods._base.default_embedding_dim`.
    embedding_scale : {"unit", "eigenvalue"}
        How the embedding's columns are weighed (see :class:`MKCModel`).

    Returns
    -------
    model : MKCModel
        Without centroids (k-means runs over all points afterwards).
    info : dict
        ``objective_history`` (list), ``n_iter``, ``converged``, ``diagnostics`` (see
        :func:`mkdist.spectral_diagnostics`), ``n_clusters`` (K) and ``timings`` (seconds;
        ``choose_k_s`` when K was chosen).
    """
    t0 = time.perf_counter()
    names = list(landmark_views)
    setup = fit_landmark_kernels(kernels, landmark_views, scale=scale, random_state=random_state,
                                 check=_refuse_constant_views)
    lv, fitted, scaling = setup.views, setup.kernels, setup.scaling
    stack = landmark_kernels(lv, fitted)
    stack, prep = fit_preprocessing(stack, center, normalize)
    t_kernels = time.perf_counter() - t0
    timings = {"kernels_s": t_kernels}
    # Which kernels enter the weight fit (mkdist._core._structure): a view that agrees with the
    # other views no more than chance would otherwise draw the min-max objective's weight.
    t0 = time.perf_counter()
    kernel_views = [f.view for f in fitted]
    structure = shared_structure(stack, kernel_views) if keep_structured else None
    entering = structure.kernel_mask(kernel_views) if structure is not None else np.ones(len(fitted), dtype=bool)
    fit_stack = stack if entering.all() else stack[entering]
    timings["structure_s"] = time.perf_counter() - t0
    if callable(n_clusters):
        # On the uniform combination: SimpleMKKM's weights depend on K, so K comes first
        # (choosing again on the learned weights did no better: bench/RESULTS.md, issue 25).
        t0 = time.perf_counter()
        n_clusters = int(n_clusters(fit_stack))
        timings["choose_k_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if weights == "uniform":
        result = average_kernel_kmeans(fit_stack, n_clusters)
    else:
        result = simple_mkkm(fit_stack, n_clusters, max_iter=max_iter, tol=tol)
    if not entering.all():
        gamma = np.zeros(len(fitted))
        gamma[entering] = result.kernel_weights
        result = dataclasses.replace(result, kernel_weights=gamma)
    n = int(landmark_indices.shape[0])
    if embedding_dim is not None:
        d = int(embedding_dim)
    elif embedding_scale == "eigenvalue":
        # Kernel PCA coordinates: k-means on them is kernel k-means, whose relaxed solution
        # lies in the top K eigenvectors (Ding & He 2004; Zha et al. 2001).  Further columns
        # add within-cluster directions, down-weighted but not gone: on Palmer penguins the
        # place view's sex x island combinations (species NMI 0.59 with 2K, 0.73 with K; the
        # customer table alike, bench/RESULTS.md).  2K was measured for the unit-weighted H_N.
        d = int(n_clusters)
    else:
        d = default_embedding_dim(n_clusters, n)
    combined = combine_kernels(stack, result.kernel_weights)
    # The report's spectrum: enough eigenvalues past K to see whether K is where the gap is.
    spectrum = top_eigenpairs(combined, min(n, max(2 * n_clusters, n_clusters + 10, d + 1)), vectors=False)
    eigenvalues, eigenvectors = result.eigenvalues, result.H
    if d > n_clusters:
        # A wider embedding: the weights are SimpleMKKM's (learned with K eigenvectors), the
        # embedding the top d eigenvectors of their combined kernel.
        eigenvalues, eigenvectors = top_eigenpairs(combined, min(n, d + 1))
        eigenvectors = eigenvectors[:, :d]
    del combined
    t_fit = time.perf_counter() - t0
    diag = spectral_diagnostics(eigenvalues, n, n_clusters)
    diag["spectrum"] = (np.asarray(spectrum) / n).tolist()
    # Principal eigenvalue proportion (t = K) of every base kernel and of the combined one:
    # how much of each spectrum the K-dimensional embedding captures.
    combined_trace = float(np.einsum("p,pii->", result.kernel_weights**2, stack))
    diag["pep"] = {
        "t": int(n_clusters),
        "combined": float(result.eigenvalues[:n_clusters].sum() / combined_trace) if combined_trace > 0 else 0.0,
        "base": [principal_eigenvalue_proportion(stack[p], n_clusters) for p in range(stack.shape[0])],
    }
    diag["structure"] = structure.to_json() if structure is not None else None
    if weights == "simplemkkm" and fit_stack.shape[0] > 1:
        diag["weights_check"] = compare_with_uniform(fit_stack, result, n_clusters,
                                                     normalize_embedding=normalize_embedding,
                                                     random_state=random_state)
    del stack, fit_stack
    _warn_degenerate_kernels(diag["pep"]["base"], result.kernel_weights, [f.name for f in fitted], n_clusters, n)
    _warn_collapsed_weights(result.kernel_weights, [f.name for f in fitted], weights)
    if not diag["lambda_K"] > 1e-10 * max(diag["eigenvalues"][0], 1e-300):
        warnings.warn(
            f"the {n_clusters}-th eigenvalue of the combined landmark kernel is {diag['lambda_K']:.3g}: "
            "fewer than n_clusters directions carry signal, so the out-of-sample embedding is "
            "unreliable; lower n_clusters or change the kernels.", EmbeddingStabilityWarning, stacklevel=4)
    model = MKCModel(
        view_names=names, n_features={k: int(v.shape[1]) for k, v in landmark_views.items()},
        landmarks={k: np.asarray(v, dtype=dtype) for k, v in lv.items()},
        landmark_indices=np.asarray(landmark_indices, dtype=np.int64), kernels=fitted, preprocessing=prep,
        kernel_weights=result.kernel_weights, eigenvectors=eigenvectors, eigenvalues=eigenvalues,
        normalize_embedding=bool(normalize_embedding), embedding_scale=embedding_scale, scaling=scaling,
        dtype=dtype)
    info = {
        "objective_history": [float(j) for j in result.objective_history],
        "n_iter": int(result.n_iter),
        "converged": bool(result.converged),
        "diagnostics": diag,
        "n_clusters": int(n_clusters),
        "timings": {**timings, "simplemkkm_s": t_fit},
    }
    return model, info
