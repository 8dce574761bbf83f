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

# Every method module registers its estimator at its bottom: importing them fills the registry.
from ._mkc import MKCModel, MultipleKernelClustering, default_n_landmarks, embed, spectral_diagnostics
from ._nystrom import NystromSpectralClustering
from ._power_kmeans import MultiViewRFFPowerKMeans, RFFKernelPowerKMeans
from ._late_fusion import LateFusionClustering
from ._io import load_views
from ._kernels import STANDARD_KERNEL_SETS, FittedKernel, KernelSpec, rbf_grid
from ._kmeans import KMeansResult, kmeans
from ._methods import MethodChoice, available_methods, choose_method, get_method
from ._pep import principal_eigenvalue_proportion
from ._simplemkkm import SimpleMKKMResult, average_kernel_kmeans, simple_mkkm
from .datasets import make_multiview_blobs
from .metrics import ari, clustering_accuracy, clustering_scores, nmi, purity
from .pipeline import ClusterResult, RunConfig, assign, cluster, load_estimator

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
