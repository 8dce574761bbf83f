"""mkdist: multiple kernel clustering for 100k to millions of points.

SimpleMKKM on landmarks, out-of-sample embedding of every point across a Dask
cluster (MKC-AE), distributed k-means, Zarr run stores and Prefect flows; beside it the
other methods of the same research line with the same API.

Public API
----------
Estimators : MultipleKernelClustering, NystromSpectralClustering, RFFKernelPowerKMeans,
             MultiViewRFFPowerKMeans, LateFusionClustering (the method registry:
             available_methods, get_method; choose_method, the rule of method="auto")
Pipeline   : cluster, assign, load_views, load_estimator, RunConfig, ClusterResult
             (and the stage functions in mkdist.pipeline)
Functions  : simple_mkkm, average_kernel_kmeans, embed, spectral_diagnostics, kmeans,
             principal_eigenvalue_proportion
Kernels    : KernelSpec, FittedKernel, rbf_grid, STANDARD_KERNEL_SETS
Metrics    : clustering_accuracy, nmi, ari, purity, clustering_scores
Data       : make_multiview_blobs
Submodules : mkdist.pipeline, mkdist.storage (Zarr run stores), mkdist.flows (Prefect flows),
             mkdist.errors
"""

from importlib.metadata import PackageNotFoundError, version as _version

import lazy_loader as _lazy

# Names load on first use (PEP 562), so `import mkdist` and the CLI's argument checks need
# neither scikit-learn nor Dask: importing them takes 2-3 s on a 2-core machine, longer than a
# refused argument may take.  The method registry names every built-in method without importing
# it (mkdist._methods._registry); a method's module registers its class when it is first used.
__getattr__, __dir__, _ = _lazy.attach(
    __name__,
    submodules=["pipeline", "errors", "datasets", "metrics", "storage", "flows"],
    submod_attrs={
        "_methods._mkc": ["MKCModel", "MultipleKernelClustering", "embed", "spectral_diagnostics"],
        "_methods._base": ["default_n_landmarks"],
        "_methods._nystrom": ["NystromSpectralClustering"],
        "_methods._power_kmeans": ["MultiViewRFFPowerKMeans", "RFFKernelPowerKMeans"],
        "_methods._late_fusion": ["LateFusionClustering"],
        "_pipeline._io": ["load_views"],
        "_core._kernel_specs": ["STANDARD_KERNEL_SETS", "FittedKernel", "KernelSpec", "rbf_grid"],
        "_core._kmeans": ["KMeansResult", "kmeans"],
        "_methods._registry": ["MethodChoice", "available_methods", "choose_method", "get_method"],
        "_core._pep": ["principal_eigenvalue_proportion"],
        "_core._simplemkkm": ["SimpleMKKMResult", "average_kernel_kmeans", "simple_mkkm"],
        "datasets": ["make_multiview_blobs"],
        "metrics": ["ari", "clustering_accuracy", "clustering_scores", "nmi", "purity"],
        "pipeline": ["ClusterResult", "RunConfig", "assign", "cluster", "load_estimator"],
    },
)

try:
    __version__ = _version("mkdist")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "MultipleKernelClustering",
    "NystromSpectralClustering",
    "RFFKernelPowerKMeans",
    "MultiViewRFFPowerKMeans",
    "LateFusionClustering",
    "available_methods",
    "get_method",
    "choose_method",
    "MethodChoice",
    "principal_eigenvalue_proportion",
    "default_n_landmarks",
    "cluster",
    "assign",
    "load_views",
    "load_estimator",
    "RunConfig",
    "ClusterResult",
    "KernelSpec",
    "FittedKernel",
    "STANDARD_KERNEL_SETS",
    "rbf_grid",
    "MKCModel",
    "embed",
    "spectral_diagnostics",
    "kmeans",
    "KMeansResult",
    "SimpleMKKMResult",
    "simple_mkkm",
    "average_kernel_kmeans",
    "make_multiview_blobs",
    "clustering_accuracy",
    "nmi",
    "ari",
    "purity",
    "clustering_scores",
]
