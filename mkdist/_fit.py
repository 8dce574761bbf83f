"""Fit the multiple-kernel model on the landmarks (one node): kernels, preprocessing, SimpleMKKM."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._kernels import fit_kernels, fit_preprocessing, landmark_kernels, resolve_kernel_specs
from ._model import MKCModel, Scaling, spectral_diagnostics
from ._pep import DEGENERATE_PEP_RATIO, excess_pep, principal_eigenvalue_proportion
from ._simplemkkm import average_kernel_kmeans, simple_mkkm
from .errors import DegenerateKernelWarning, EmbeddingStabilityWarning

__all__ = ["fit_landmark_model"]

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
        DegenerateKernelWarning, stacklevel=3)


def fit_landmark_model(landmark_views: Mapping[str, np.ndarray], landmark_indices: np.ndarray, *,
                       n_clusters: int, kernels: Any = None, weights: str = "simplemkkm",
                       center: bool = True, normalize: str | None = "diagonal",
                       normalize_embedding: bool = True, scale: str | None = None,
                       max_iter: int = 200, tol: float = 1e-4, dtype: str = "float64",
                       random_state: int | None = 0) -> tuple[MKCModel, dict[str, Any]]:
    """Fit SimpleMKKM (or uniform weights) on in-memory landmarks.

    Parameters
    ----------
    landmark_views : dict of str to ndarray of shape (n, d_v)
        Landmark rows of every view (unscaled; ``scale`` is estimated on them).
    landmark_indices : ndarray of shape (n,)
        Their row numbers in the full input (stored with the model).
    n_clusters, kernels, weights, center, normalize, normalize_embedding, scale, max_iter, tol
        As in :class:`mkdist.MultipleKernelClustering` (validated by the caller).
    dtype : {"float32", "float64"}
        Precision of the out-of-sample embedding; the landmark fit runs in float64.
    random_state : int
        Seed of the bandwidth-heuristic subsample.

    Returns
    -------
    model : MKCModel
        Without centroids (k-means runs over all points afterwards).
    info : dict
        ``objective_history`` (list), ``n_iter``, ``converged``, ``diagnostics`` (see
        :func:`mkdist.spectral_diagnostics`) and ``timings`` (seconds).
    """
    t0 = time.perf_counter()
    names = list(landmark_views)
    specs = resolve_kernel_specs(kernels, names)
    scaling = Scaling.fit(scale, landmark_views)
    lv = scaling.apply(landmark_views, np.float64) if scaling is not None else landmark_views
    lv = {k: np.asarray(v, dtype=np.float64) for k, v in lv.items()}
    fitted = fit_kernels(specs, lv, random_state=random_state)
    stack = landmark_kernels(lv, fitted)
    stack, prep = fit_preprocessing(stack, center, normalize)
    t_kernels = time.perf_counter() - t0
    t0 = time.perf_counter()
    if weights == "uniform":
        result = average_kernel_kmeans(stack, n_clusters)
    else:
        result = simple_mkkm(stack, n_clusters, max_iter=max_iter, tol=tol)
    t_fit = time.perf_counter() - t0
    n = int(landmark_indices.shape[0])
    diag = spectral_diagnostics(result.eigenvalues, n, n_clusters)
    # Principal eigenvalue proportion (t = K) of every base kernel and of the combined one:
    # how much of each spectrum the K-dimensional embedding captures.
    combined_trace = float(np.einsum("p,pii->", result.kernel_weights**2, stack))
    diag["pep"] = {
        "t": int(n_clusters),
        "combined": float(result.eigenvalues[:n_clusters].sum() / combined_trace) if combined_trace > 0 else 0.0,
        "base": [principal_eigenvalue_proportion(stack[p], n_clusters) for p in range(stack.shape[0])],
    }
    del stack
    _warn_degenerate_kernels(diag["pep"]["base"], result.kernel_weights, [f.name for f in fitted], n_clusters, n)
    if not diag["lambda_K"] > 1e-10 * max(diag["eigenvalues"][0], 1e-300):
        warnings.warn(
            f"the {n_clusters}-th eigenvalue of the combined landmark kernel is {diag['lambda_K']:.3g}: "
            "fewer than n_clusters directions carry signal, so the out-of-sample embedding is "
            "unreliable; lower n_clusters or change the kernels.", EmbeddingStabilityWarning, stacklevel=3)
    model = MKCModel(
        view_names=names, n_features={k: int(v.shape[1]) for k, v in landmark_views.items()},
        landmarks={k: np.asarray(v, dtype=dtype) for k, v in lv.items()},
        landmark_indices=np.asarray(landmark_indices, dtype=np.int64), kernels=fitted, preprocessing=prep,
        kernel_weights=result.kernel_weights, eigenvectors=result.H, eigenvalues=result.eigenvalues,
        normalize_embedding=bool(normalize_embedding), scaling=scaling, dtype=dtype)
    info = {
        "objective_history": [float(j) for j in result.objective_history],
        "n_iter": int(result.n_iter),
        "converged": bool(result.converged),
        "diagnostics": diag,
        "timings": {"kernels_s": t_kernels, "simplemkkm_s": t_fit},
    }
    return model, info
