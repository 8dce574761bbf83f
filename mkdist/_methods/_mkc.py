"""Multiple kernel clustering on landmarks with out-of-sample embedding (SimpleMKKM + MKC-AE).

Fit (one node): base kernels on n landmarks, centred and normalised, SimpleMKKM learns the
kernel weights gamma; H_n holds the top eigenvectors of K_gamma = sum_p gamma_p^2 K_p (2K of
them for K <= 10 by default, see :func:`mkdist._methods._base.default_embedding_dim`).
Embed (every row, NumPy or Dask through the row engine): H_N = (sum_p gamma_p^2 P_p) H_n D_n^-1,
linear in N and never an N x n x m array.  k-means on the rows of H_N gives the labels.
The fitted :class:`MKCModel` is plain arrays + JSON (the estimator's ``model_state``).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._core._blocks import RowBlocks, cache_block_rows
from .._core._fused import prefetch_where_embedded
from .._core._kernel_specs import FittedKernel
from .._core._kernels import (
    CombinedProjection,
    KernelPreprocessing,
    ProjectedKernels,
    fit_landmark_kernels,
    fit_preprocessing,
    kernel_blocks,
    kernel_model_from_state,
    kernel_model_state,
    landmark_kernels,
    preprocess_block,
    self_kernel,
)
from .._core._kmeans import KMeansResult, assign_labels, kmeans
from .._core._linalg import blas_threads, top_eigenpairs, unit_rows
from .._core._pep import DEGENERATE_PEP_RATIO, excess_pep, principal_eigenvalue_proportion
from .._core._scaling import SCALE_UNITS, FeatureScaling
from .._core._simplemkkm import average_kernel_kmeans, combine_kernels, simple_mkkm
from .._core._state import StateArrays
from .._core._structure import shared_structure
from .._core._validation import check_finite, common_float_dtype
from ..errors import DegenerateKernelWarning, EmbeddingStabilityWarning, InputValidationError
from ..metrics import ari
from . import _params
from ._base import DEFAULT_MAX_LANDMARKS, KernelLandmarkEstimator, default_embedding_dim
from ._registry import register

__all__ = ["MultipleKernelClustering", "MKCModel", "embed", "embed_chunk", "fit_landmark_model",
           "spectral_diagnostics"]

# ============================================================================ the fitted model
@dataclasses.dataclass
class MKCModel:
    """A fitted MKC-AE model (SimpleMKKM on landmarks + out-of-sample projection).

    Attributes
    ----------
    view_names : list of str
    n_features : dict of str to int
        Columns per view.
    landmarks : dict of str to ndarray of shape (n, d_v)
        Landmark rows of every view, after scaling, in ``dtype``.
    landmark_indices : ndarray of shape (n,)
        Row numbers of the landmarks in the training input.
    kernels : list of FittedKernel, length m
    preprocessing : KernelPreprocessing
    kernel_weights : ndarray of shape (m,)
        gamma (alpha in the MKC-AE paper); the combined kernel weights are gamma^2.
    eigenvectors : ndarray of shape (n, K)
        H_n, top-K eigenvectors of the combined landmark kernel K_alpha.
    eigenvalues : ndarray of shape (K + 1,) or (K,)
        Top eigenvalues of K_alpha (not divided by n), decreasing.
    normalize_embedding : bool
        Rows of H_N are scaled to unit norm before k-means.
    embedding_scale : {"unit", "eigenvalue"}
        "unit": every eigenvector direction of H_N counts alike (the paper's H_N); "eigenvalue":
        column j is scaled by sqrt(lambda_j) (kernel PCA coordinates, so k-means follows the
        combined kernel's own distances).
    cluster_centers : ndarray of shape (n_clusters, K) or None
    scaling : FeatureScaling or None
    dtype : str
        Floating type of the embedding computation ("float32" or "float64").
    """

    view_names: list[str]
    n_features: dict[str, int]
    landmarks: dict[str, np.ndarray]
    landmark_indices: np.ndarray
    kernels: list[FittedKernel]
    preprocessing: KernelPreprocessing
    kernel_weights: np.ndarray
    eigenvectors: np.ndarray
    eigenvalues: np.ndarray
    normalize_embedding: bool = True
    embedding_scale: str = "unit"
    cluster_centers: np.ndarray | None = None
    scaling: FeatureScaling | None = None
    dtype: str = "float64"

    @property
    def n_components(self) -> int:
        return self.eigenvectors.shape[1]

    @property
    def n_landmarks(self) -> int:
        return self.eigenvectors.shape[0]

    @property
    def projection(self) -> np.ndarray:
        """H_n D_n^-1 with the 1/n of eq. 8 folded in: H_n / eigenvalues of K_alpha, shape (n, K)."""
        lam = self.eigenvalues[: self.n_components]
        # A zero eigenvalue would blow the embedding up; it only occurs for a rank-deficient
        # combined kernel, which the fit diagnostics report.
        lam = np.maximum(lam, np.finfo(np.float64).tiny)
        if self.embedding_scale == "eigenvalue":
            # H_N D^(1/2): sqrt(lambda_j / n) per column (the 1/n keeps the scale of H_N's).
            return self.eigenvectors * (np.sqrt(lam / self.n_landmarks) / lam)[None, :]
        return self.eigenvectors / lam[None, :]

    @property
    def projected_kernels(self) -> ProjectedKernels:
        """Every kernel's projected rows on their own (the per-kernel route; the embedding itself
        goes through :attr:`combined_projection`); kernels with weight 0 are never computed."""
        cached = self.__dict__.get("_projected")
        if cached is None:
            P = self.projection
            cached = ProjectedKernels(self.landmarks, self.kernels, self.preprocessing,
                                      {p: P for p in np.flatnonzero(self.kernel_weights > 0)}, dtype=self.dtype)
            self.__dict__["_projected"] = cached
        return cached

    @property
    def combined_projection(self) -> CombinedProjection:
        """sum_p alpha_p^2 P_p(x) H_n D_n^-1 of a row block, fused (one thin GEMM per block), built
        once per model: every block of every worker reuses it."""
        cached = self.__dict__.get("_combined")
        if cached is None:
            cached = CombinedProjection(self.landmarks, self.kernels, self.preprocessing, self.kernel_weights**2,
                                        self.projection, dtype=self.dtype)
            self.__dict__["_combined"] = cached
        return cached

    def __getstate__(self):
        # Ship the model to workers without the caches (they are rebuilt there once).
        state = dict(self.__dict__)
        state.pop("_projected", None)
        state.pop("_combined", None)
        return state

    def state(self) -> tuple[dict, dict]:
        """(attrs, arrays) of the model, named arrays with dims (see ``model_state``)."""
        attrs, arrays = kernel_model_state(self.view_names, self.landmarks, self.kernels, self.preprocessing,
                                           self.scaling)
        arrays.update({
            "landmark_indices": (("landmark",), np.asarray(self.landmark_indices, dtype=np.int64)),
            "kernel_weights": (("kernel",), self.kernel_weights),
            "eigenvectors": (("landmark", "component"), self.eigenvectors),
            "eigenvalues": (("eigenvalue",), self.eigenvalues),
        })
        if self.cluster_centers is not None:
            arrays["cluster_centers"] = (("cluster", "component"), self.cluster_centers)
        attrs.update({"n_features": {k: int(v) for k, v in self.n_features.items()},
                      "normalize_embedding": bool(self.normalize_embedding), "dtype": self.dtype,
                      "embedding_scale": self.embedding_scale})
        return attrs, arrays

    @classmethod
    def from_state(cls, attrs: Mapping[str, Any], get: StateArrays) -> MKCModel:
        return cls(
            **kernel_model_from_state(attrs, get),
            n_features={k: int(v) for k, v in attrs["n_features"].items()},
            landmark_indices=get("landmark_indices", np.int64),
            kernel_weights=get("kernel_weights"),
            eigenvectors=get("eigenvectors"),
            eigenvalues=get("eigenvalues"),
            normalize_embedding=bool(attrs["normalize_embedding"]),
            embedding_scale=attrs.get("embedding_scale", "unit"),
            cluster_centers=get("cluster_centers") if "cluster_centers" in get else None,
            dtype=attrs.get("dtype", "float64"),
        )


# ============================================================================ embedding
def _embed_rows(blocks: list, model: MKCModel) -> np.ndarray:
    """H_N rows of one row block (eq. 8): (sum_p alpha_p^2 P_p) H_n D_n^-1, shape (b, K).

    ``blocks`` are the blocks of every view in ``model.view_names`` order.  Per view one GEMM and
    one exp per RBF family, the kernels summed before ONE thin GEMM with H_n D_n^-1
    (:class:`~mkdist._core._kernels.CombinedProjection`).
    """
    dtype = np.dtype(model.dtype)
    views = dict(zip(model.view_names, blocks))
    views = model.scaling.apply(views, dtype) if model.scaling is not None else views
    return model.combined_projection(views, unit_rows=model.normalize_embedding, out_dtype=dtype)


def _kernel_block_rows(blocks: list, model: MKCModel) -> np.ndarray:
    """Every preprocessed kernel block of one row block side by side, shape (b, m * n)."""
    dtype = np.dtype(model.dtype)
    views = dict(zip(model.view_names, blocks))
    views = model.scaling.apply(views, dtype) if model.scaling is not None else views
    n = model.n_landmarks
    out = np.empty((blocks[0].shape[0], len(model.kernels) * n), dtype=dtype)
    for p, block in kernel_blocks(views, model.landmarks, model.kernels, dtype=dtype, reuse=True):
        out[:, p * n:(p + 1) * n] = preprocess_block(block, self_kernel(views, model.kernels[p], dtype=dtype), p,
                                                     model.preprocessing)
    return out


def embed(views: Mapping[str, Any], model: MKCModel):
    """Embed every row of the views with a fitted model; NumPy in -> NumPy out, Dask in -> lazy Dask.

    Parameters
    ----------
    views : dict of str to array of shape (N, d_v)
        At least the model's views (by name).
    model : MKCModel

    Returns
    -------
    H_N : ndarray or dask.array.Array of shape (N, K), in ``model.dtype``
    """
    missing = [n for n in model.view_names if n not in views]
    if missing:
        raise InputValidationError(f"views {missing} are missing; the model was fitted on {model.view_names}.")
    # Two (rows, n) arrays are live per sub-block (the kernel source and the sum C, or the source
    # and a derived kernel): both stay within the cache budget together.
    rows = cache_block_rows(model.n_landmarks, 2 * np.dtype(model.dtype).itemsize)
    return RowBlocks(views, model.view_names, block_rows=rows).map(
        _embed_rows, model, n_cols=model.n_components, dtype=np.dtype(model.dtype), name="embed")


def embed_chunk(model: MKCModel, *view_blocks: np.ndarray) -> np.ndarray:
    """H_N of one in-memory row block of every view (``model.view_names`` order), shape (b, K)."""
    return embed(dict(zip(model.view_names, view_blocks)), model)


def spectral_diagnostics(eigenvalues: np.ndarray, n_landmarks: int, n_clusters: int) -> dict[str, Any]:
    """The quantities behind the stability theorem (MKC-AE, Theorem 5.2).

    The theorem assumes lambda_K of (1/n) K_alpha bounded away from 0 and eigen-gaps
    lambda_k - lambda_{k+1} >= 4 / sqrt(n) for k <= K.  On real data with centred,
    normalised kernels the gaps are orders of magnitude smaller, so a pass/fail verdict
    is uninformative; the measured values are reported instead.

    Returns
    -------
    dict with ``lambda_K``, ``eigenvalues`` (of (1/n) K_alpha), ``eigengaps``
    (lambda_k - lambda_{k+1}, k = 1..K), ``gap_threshold`` (4/sqrt(n)), ``min_gap_ratio``
    (smallest gap / threshold), ``relative_gap_K`` (lambda_K / lambda_{K+1}) and
    ``theorem_condition_met``.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64) / n_landmarks
    threshold = 4.0 / np.sqrt(n_landmarks)
    gaps = (lam[:-1] - lam[1:])[:n_clusters]
    lam_K = float(lam[n_clusters - 1])
    rel = (float(lam[n_clusters - 1] / lam[n_clusters]) if lam.size > n_clusters and lam[n_clusters] > 0
           else float("inf"))
    return {
        "lambda_K": lam_K,
        "eigenvalues": lam.tolist(),
        "eigengaps": gaps.tolist(),
        "gap_threshold": float(threshold),
        "min_gap_ratio": float(gaps.min() / threshold) if gaps.size else float("nan"),
        "relative_gap_K": rel,
        "theorem_condition_met": bool(lam_K > 0 and gaps.size and gaps.min() >= threshold),
    }


# ============================================================================ landmark fit
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


# ============================================================================ estimator
class MultipleKernelClustering(KernelLandmarkEstimator):
    """Multiple kernel clustering on landmarks with out-of-sample embedding (SimpleMKKM + MKC-AE).

    Fits SimpleMKKM on ``n_landmarks`` sampled points: kernel weights gamma on the simplex and
    the top-K spectral embedding H_n of the combined kernel sum_p gamma_p^2 K_p.  Every point
    is then embedded with H_N = (sum_p gamma_p^2 P_p) H_n D_n^-1 (linear in N) and clustered
    by k-means on the rows of H_N.

    Parameters
    ----------
    n_clusters : int, "auto" or (k_min, k_max), default=8
        K, number of clusters.  "auto": chosen from the landmark kernel (the uniform
        combination of the preprocessed base kernels) by the eigengap of its kNN graph with
        resampling votes, or the modularity of its spectral partitions when the spectra show no
        gap or the gap's partition is clearly less modular (``mkdist._core._nclusters``), in
        [2, min(50, n_landmarks // 10)]; a pair (k_min, k_max) searches that range (k_max <
        n_landmarks).  The choice is in ``n_clusters_`` and ``n_clusters_choice_``; when it is
        ambiguous (no clear gap, or the two criteria disagree) the
        fit uses the best guess and warns (``AmbiguousNClustersWarning``).
    kernels : str or list of KernelSpec/dict, default=None
        Base kernels.  None: "auto": on a view with fewer than 10% non-zero entries (text,
        graph adjacency) the cosine kernel, on the others "rbf-grid", three RBF kernels with
        sigma = sqrt(mean squared pairwise distance) x {0.5, 1, 2}; decided on the landmarks.
        A string names a kernel set applied to every view ("auto", "rbf", "rbf-median",
        "rbf-grid", "rbf-grid5", "linear", "mkkm12").  Measured on the 28 shared multi-view
        sets (bench/RESULTS.md, quality): the cosine kernel on sparse views lifts the mean ACC
        of the default fit from 0.598 to 0.636 and changes nothing on dense views.
    n_landmarks : int, default=None
        Landmarks n (<= N).  None: ``min(N, 1000)`` (see :func:`mkdist.default_n_landmarks`).
    embedding_dim : int, default=None
        Columns of the embedding H_N: the top ``embedding_dim`` eigenvectors of the combined
        kernel (n_clusters <= embedding_dim <= n_landmarks); the weights are SimpleMKKM's,
        learned with n_clusters eigenvectors.  None: n_clusters when the embedding's columns
        are kernel PCA coordinates (``embedding_scale`` "eigenvalue", "auto" with a categorical
        view), else 2 x n_clusters for n_clusters <= 10, n_clusters above
        (:func:`mkdist._methods._base.default_embedding_dim`; measured on the shared
        multi-view sets, bench/RESULTS.md).
    landmark_method : {"uniform", "kmeans++"}, default="uniform"
        How landmarks are drawn (see ``mkdist._core._sampling.sample_landmark_indices``).
    weights : {"simplemkkm", "uniform"}, default="simplemkkm"
        Learn gamma with SimpleMKKM, or use uniform weights (average-kernel k-means baseline).
    center : bool, default=True
        Centre every kernel in feature space at the landmark mean.
    normalize : {"auto", "diagonal", "trace", None}, default="auto"
        Kernel normalisation after centring: "diagonal", every landmark's centred
        self-similarity 1 (as the SimpleMKKM authors' code); "trace", each kernel divided by its
        mean self-similarity, so kernels are comparable in scale and keep their own geometry.
        "auto": "trace" when a view is categorical, "diagonal" otherwise (see below).
    normalize_embedding : {"auto", True, False}, default="auto"
        Scale rows of H_N to unit length before k-means (as the authors' code does with H).
        "auto": False when a view is categorical, True otherwise.
    embedding_scale : {"auto", "unit", "eigenvalue"}, default="auto"
        How the embedding's columns are weighed for k-means: "unit", the paper's H_N, every
        eigenvector alike; "eigenvalue", column j scaled by sqrt(lambda_j) (kernel PCA
        coordinates: k-means then follows the combined kernel's distances).  "auto":
        "eigenvalue" when a view is categorical (``categories_``: DataFrame or table input
        with categorical columns), "unit" otherwise.  Why: a categorical view has a few
        distinct rows, each a point mass; in the unit-weighted embedding its weakest
        directions (a noisy column's categories) are as wide as the strongest and k-means
        cuts along them (ACC 0.51 on a mixed table where the eigenvalue scaling gives 0.92-0.96,
        ``bench/bench_tables.py``).  On the numeric shared sets the unit scaling is the measured
        default.

        The three "auto"s decide together: with a categorical view, mkc clusters as kernel
        k-means on the combined kernel (its top K kernel PCA coordinates, ``embedding_dim``
        None), and both the diagonal normalisation and the unit rows would put every row on a
        sphere (cosine geometry) instead.  On the customer table of ``bench/bench_tables.py`` the
        sphere moved the boundary between two numeric clusters into the one nearer the
        kernel's mean (pair accuracy 0.983, one-hot + k-means 0.987; kernel k-means 0.989):
        ACC 0.884 -> 0.890 on seeds 0-2 (one-hot + k-means 0.888), 0.886 -> 0.890 on seeds 3-7
        (0.889).  With K columns rather than 2K, Palmer penguins' species NMI 0.59 -> 0.73
        (``docs/algorithms.md``).  Numeric inputs keep the paper's geometry (the 28-set
        measurements).
    scale : {"auto", None, "none", "minmax", "standard", "units"}, default="auto"
        Per-feature scaling estimated on the landmarks.  "units": "standard" on a dense view
        whose columns come in different units (the widest column's standard deviation over 10x
        the median column's, :func:`mkdist._core._scaling.units_differ`: wine's proline beside
        its hue), the features as given on the others (pixels, counts, one-unit descriptors).
        "auto": "standard" when a view is categorical (a table: its numbers come in their own
        units, and one RBF bandwidth per view cannot weigh dollars against visits;
        standardised indicators weigh a category by its rarity, as FAMD does), else "units"
        (wine 0.68 -> 0.97 ACC, breast_cancer 0.83 -> 0.91; iris and digits as given, where
        standardising costs 0.18 and 0.08; ``bench/bench_baselines.py``).  On the customer table of
        ``bench/bench_tables.py`` without scaling, the kernel k-means geometry cut a pair of
        segments by spend on one seed of 8 (ACC 0.725; ``docs/algorithms.md``).  None or "none":
        the features as given ("none" is how a run's options say it: there ``scale=None`` means
        the default).
    keep_structured : bool, default=True
        Before the weights are learned, test every view's kernels for structure the other
        views share (centred kernel alignment against a landmark-permutation null,
        :func:`mkdist._core._structure.shared_structure`); a view at chance gets weight 0.
        Why: SimpleMKKM's min-max objective gives the most weight to the flattest spectrum, and
        a view of pure noise has it (wine + 10 noise columns: 72-80% of the weight on the noise,
        ACC 0.96 -> 0.54-0.76).  With one view, or when no view passes, every kernel enters.
        The test is in ``diagnostics_["structure"]``.
    max_iter : int, default=200
        SimpleMKKM descent steps.
    tol : float, default=1e-4
        SimpleMKKM stopping rule, max |delta gamma|.
    n_init : int, default=10
        k-means++ restarts, run to convergence on a uniform sample of at most 50,000 embedded
        rows (``mkdist._core._kmeans``); the best is refined by Lloyd passes over all rows, so
        the restarts cost no pass over the data.  ``mkdist.cluster`` uses the same default (it
        used 3 until issue 36, and gave other labels than this estimator: standardised iris,
        K = 3, seed 1, NMI 0.49 against 0.61).
    kmeans_max_iter : int, default=300
        Lloyd iterations (per restart on the sample, then over all rows).
    kmeans_tol : float, default=1e-4
        k-means stopping rule (scikit-learn's, relative to the feature variance).
    dtype : {None, "float32", "float64"}, default=None
        Precision of the out-of-sample embedding; None: float32 if every view is float32.
        The landmark fit always runs in float64.
    random_state : int, RandomState or None, default=None
        Landmark sampling, bandwidth sampling and k-means initialisation (one seed for all;
        the same integer seed makes the same choices as ``mkdist.cluster``).

    Attributes
    ----------
    n_clusters_ : int
        K of the fit (``n_clusters``, or the K chosen for "auto" / a range).
    n_clusters_choice_ : NClustersChoice or None
        The K choice (K, confidence, runner-up, candidates with their vote shares, whether
        it is ambiguous); None when ``n_clusters`` is an integer.
    kernel_weights_ : ndarray of shape (m,)
    kernels_ : list of FittedKernel
        Base kernels with their fitted bandwidths.
    landmark_indices_ : ndarray of shape (n,)
    eigenvalues_ : ndarray of shape (K + 1,)
        Top eigenvalues of (1/n) K_alpha (the normalised kernel of the MKC-AE paper).
    cluster_centers_ : ndarray of shape (n_clusters_, embedding_dim)
        Centroids in the embedding.
    labels_ : ndarray of shape (N,), or a lazy dask.array.Array for Dask input
    inertia_ : float
        k-means inertia in the embedding.
    objective_history_ : ndarray of shape (n_iter_ + 1,)
        SimpleMKKM objective J(gamma); non-increasing.
    n_iter_ : int
    converged_ : bool
    diagnostics_ : dict
        Spectral quantities behind the MKC-AE stability theorem (see ``spectral_diagnostics``),
        the principal eigenvalue proportions (``pep``), fit timings and, for learned weights,
        ``weights_check`` (see :func:`compare_with_uniform`: whether uniform weights would
        cluster the landmarks the same way; when they would not, compare with
        ``weights="uniform"``).
    model_ : MKCModel
        The fitted model (arrays + JSON; see ``model_state``).
    view_names_ : list of str
    n_features_per_view_ : dict of str to int
    n_features_in_ : int
        Total number of features over all views.

    Examples
    --------
    >>> import numpy as np
    >>> from mkdist import MultipleKernelClustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.1, (20, 2)), rng.normal(3, 0.1, (20, 2))]
    >>> model = MultipleKernelClustering(n_clusters=2, random_state=0).fit([X, X**2])
    >>> len(set(model.labels_[:20])), len(set(model.labels_))
    (1, 2)
    """

    method: ClassVar[str] = "mkc"
    state_format: ClassVar[str] = "mkdist.MultipleKernelClustering/2"
    optional_stages: ClassVar[tuple[str, ...]] = ("kernel_blocks",)
    max_default_landmarks: ClassVar[int] = DEFAULT_MAX_LANDMARKS
    _model_type: ClassVar[type] = MKCModel
    _param_constraints: ClassVar[dict[str, list]] = _params.MKC

    def __init__(self, n_clusters: int = 8, *, kernels: Any = None, n_landmarks: int | None = None,
                 embedding_dim: int | None = None, landmark_method: str = "uniform", weights: str = "simplemkkm",
                 center: bool = True,
                 normalize: str | None = "auto", normalize_embedding: bool | str = "auto",
                 embedding_scale: str = "auto", scale: str | None = "auto", keep_structured: bool = True,
                 max_iter: int = 200, tol: float = 1e-4, n_init: int = 10, kmeans_max_iter: int = 300,
                 kmeans_tol: float = 1e-4, dtype: str | None = None, random_state=None):
        self.n_clusters = n_clusters
        self.kernels = kernels
        self.n_landmarks = n_landmarks
        self.embedding_dim = embedding_dim
        self.landmark_method = landmark_method
        self.weights = weights
        self.center = center
        self.normalize = normalize
        self.normalize_embedding = normalize_embedding
        self.embedding_scale = embedding_scale
        self.scale = scale
        self.keep_structured = keep_structured
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.kmeans_max_iter = kmeans_max_iter
        self.kmeans_tol = kmeans_tol
        self.dtype = dtype
        self.random_state = random_state

    # ------------------------------------------------------------------ the pipeline's hooks
    def _landmark_sampling(self, seed: int) -> dict[str, Any]:
        return {"method": self.landmark_method, "random_state": seed}

    def fit_landmarks(self, landmark_views: dict, landmark_indices: np.ndarray, seed: int):
        """SimpleMKKM on the in-memory landmark rows; sets every fitted attribute but the centroids."""
        check_finite(landmark_views, row_numbers=landmark_indices)  # Dask input: NaN among the landmarks
        n = int(np.asarray(landmark_indices).shape[0])
        k_range = self._check_k_range(n)
        self.n_clusters_choice_ = None
        n_clusters = self.n_clusters if k_range is None else (
            lambda stack: self._choose_n_clusters(stack, n, seed))
        dtype = self.dtype or str(common_float_dtype(landmark_views))
        # The workers (or this process) load the embedding's compiled step while the model is fitted.
        prefetch_where_embedded(dtype)
        geometry = self._geometry()
        with blas_threads(1):  # faster than two on a quiet machine, and 10x faster on a busy one (mkdist._core._linalg)
            model, info = fit_landmark_model(
                landmark_views, np.asarray(landmark_indices), n_clusters=n_clusters, kernels=self.kernels,
                weights=self.weights, center=self.center, keep_structured=self.keep_structured,
                max_iter=self.max_iter,
                tol=self.tol, dtype=dtype, random_state=seed, embedding_dim=self.embedding_dim, **geometry)
        self._set_fitted_views(landmark_views)
        self._set_model(model)
        self.objective_history_ = np.asarray(info["objective_history"])
        self.n_iter_ = int(info["n_iter"])
        self.converged_ = bool(info["converged"])
        self.diagnostics_ = {**info["diagnostics"], "timings": dict(info["timings"])}
        return self

    def _geometry(self) -> dict[str, Any]:
        """``normalize``, ``normalize_embedding``, ``embedding_scale`` and ``scale`` of this
        fit, each "auto" resolved by one fact: whether a view is categorical (``categories_``).

        With one, the fit is kernel k-means on the combined kernel: trace-normalised kernels,
        kernel PCA coordinates (K of them unless ``embedding_dim`` says otherwise), rows as
        they are.  A categorical view's rows are a few point
        masses, which the unit-weighted H_N spreads as wide as the real clusters; and both
        the diagonal normalisation and the unit rows project every row onto a sphere, which
        on a numeric view beside it moves the rows near the kernel's mean (a cluster between
        two others) towards their neighbours (bench/RESULTS.md, "Tables as they come").
        Numeric inputs keep the paper's spectral geometry, measured on the 28 shared sets.
        """
        categorical = bool(getattr(self, "categories_", None))
        pick = {"normalize": ("trace", "diagonal"), "normalize_embedding": (False, True),
                "embedding_scale": ("eigenvalue", "unit"), "scale": ("standard", SCALE_UNITS)}
        return {name: (choice[0] if categorical else choice[1]) if getattr(self, name) == "auto"
                else getattr(self, name) for name, choice in pick.items()}

    def _embedding_dim(self, n_landmarks: int, k: int | None = None) -> int:
        if self.embedding_dim is None and self._geometry()["embedding_scale"] == "eigenvalue":
            return self.n_clusters_ if k is None else k  # as fit_landmark_model decides
        return super()._embedding_dim(n_landmarks, k)

    def _set_model(self, model: MKCModel) -> None:
        self.model_ = model
        self.kernels_ = model.kernels
        self.kernel_weights_ = model.kernel_weights
        self.landmark_indices_ = model.landmark_indices
        self.eigenvalues_ = model.eigenvalues / model.n_landmarks
        if model.cluster_centers is not None:
            self.cluster_centers_ = model.cluster_centers

    def _kmeans_params(self) -> dict[str, Any]:
        return {"n_init": self.n_init, "max_iter": self.kmeans_max_iter, "tol": self.kmeans_tol}

    def fit_centroids(self, embedding, seed: int) -> KMeansResult:
        km = super().fit_centroids(embedding, seed)
        self.model_.cluster_centers = self.cluster_centers_
        return km

    # ------------------------------------------------------------------ inference
    def transform(self, X):
        """Embed points with the fitted model (no refit).

        Parameters
        ----------
        X : array-like of shape (N, d) or list/dict of views, NumPy or Dask

        Returns
        -------
        H_N : ndarray or dask.array.Array of shape (N, embedding_dim)
            Rows of the out-of-sample spectral embedding (unit length when
            ``normalize_embedding``), the space ``cluster_centers_`` live in.
        """
        return embed(self._predict_views(X), self.model_)

    def predict(self, X):
        """Nearest-centroid cluster of every point in the embedding.

        Returns
        -------
        labels : ndarray of shape (N,), int64 (a lazy Dask array for Dask input)
        """
        check_is_fitted(self, "cluster_centers_")
        return assign_labels(self.transform(X), self.cluster_centers_)

    def kernel_blocks(self, X):
        """Every preprocessed partial kernel block P_p(x, landmarks) (the optional ``kernel_blocks`` stage).

        Returns
        -------
        P : ndarray or lazy dask.array.Array of shape (m, N, n_landmarks), in the model's dtype
        names : list of str
            The m kernel names.
        """
        views = self._predict_views(X)
        model = self.model_
        m, n = len(model.kernels), model.n_landmarks
        flat = RowBlocks(views, model.view_names).map(_kernel_block_rows, model, n_cols=m * n,
                                                      dtype=np.dtype(model.dtype), name="kernel-blocks")
        return flat.reshape(flat.shape[0], m, n).transpose(1, 0, 2), [k.name for k in model.kernels]

    # ------------------------------------------------------------------ state and summary
    def _summary_fields(self) -> dict[str, Any]:
        names = [k.name for k in self.kernels_]
        diag = self.diagnostics_
        pep = diag.get("pep") or {}
        return {
            "n_landmarks": int(self.model_.n_landmarks), "n_components": int(self.model_.n_components),
            "kernel_names": names,
            "weights": [{"name": "kernel weights", "labels": names, "values": self.kernel_weights_.tolist()}],
            "objective_history": np.asarray(self.objective_history_).tolist(), "n_iter": int(self.n_iter_),
            "converged": bool(self.converged_),
            "spectrum": {"values": list(diag.get("spectrum") or np.asarray(self.eigenvalues_).tolist()),
                         "k": int(self.n_clusters_),
                         "what": "top eigenvalues of (1/n) K_gamma, the combined landmark kernel"},
            "pep": {"t": pep.get("t"), "base": dict(zip(names, pep.get("base", []))),
                    "combined": pep.get("combined")} if pep else None,
        }


register(MultipleKernelClustering)
