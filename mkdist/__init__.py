"""mkdist: multiple kernel clustering for 100k to millions of points.

SimpleMKKM on landmarks, out-of-sample embedding of every point across a Dask
cluster (MKC-AE), distributed k-means, Zarr run stores and Prefect flows.

Public API
----------
Estimators : MultipleKernelClustering, NystromSpectralClustering, RFFKernelPowerKMeans,
             MultiViewRFFPowerKMeans, LateFusionClustering
Pipeline   : cluster, assign, load_views, load_model, RunConfig, ClusterResult
Functions  : simple_mkkm, average_kernel_kmeans, embed, spectral_diagnostics, kmeans,
             principal_eigenvalue_proportion
Kernels    : KernelSpec, FittedKernel, rbf_grid, STANDARD_KERNEL_SETS
Metrics    : clustering_accuracy, nmi, ari, purity, clustering_scores
Data       : make_multiview_blobs
Submodules : mkdist.storage (Zarr run stores), mkdist.flows (Prefect flows), mkdist.errors
"""

from ._estimator import MultipleKernelClustering, default_n_landmarks
from ._io import load_views
from ._kernels import STANDARD_KERNEL_SETS, FittedKernel, KernelSpec, rbf_grid
from ._kmeans import KMeansResult, kmeans
from ._late_fusion import LateFusionClustering
from ._nystrom import NystromSpectralClustering
from ._model import MKCModel, embed, spectral_diagnostics
from ._pep import principal_eigenvalue_proportion
from ._pipeline import ClusterResult, RunConfig, assign, cluster, load_model
from ._power_kmeans import MultiViewRFFPowerKMeans, RFFKernelPowerKMeans
from ._simplemkkm import SimpleMKKMResult, average_kernel_kmeans, simple_mkkm
from .datasets import make_multiview_blobs
from .metrics import ari, clustering_accuracy, clustering_scores, nmi, purity

__version__ = "0.1.0"

__all__ = [
    "MultipleKernelClustering",
    "NystromSpectralClustering",
    "RFFKernelPowerKMeans",
    "MultiViewRFFPowerKMeans",
    "LateFusionClustering",
    "principal_eigenvalue_proportion",
    "default_n_landmarks",
    "cluster",
    "assign",
    "load_views",
    "load_model",
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
