"""mkdist: multiple kernel clustering for 100k to millions of points.

SimpleMKKM on landmarks, out-of-sample embedding of every point across a Dask
cluster (MKC-AE), distributed k-means, Zarr storage and Prefect flows.
"""

from ._estimator import MultipleKernelClustering, default_n_landmarks
from ._kernels import STANDARD_KERNEL_SETS, FittedKernel, KernelSpec, rbf_grid
from ._model import MKCModel, embed, spectral_diagnostics
from ._simplemkkm import SimpleMKKMResult, average_kernel_kmeans, simple_mkkm
from .metrics import ari, clustering_accuracy, clustering_scores, nmi, purity

__version__ = "0.1.0"

__all__ = [
    "MultipleKernelClustering",
    "default_n_landmarks",
    "KernelSpec",
    "FittedKernel",
    "STANDARD_KERNEL_SETS",
    "rbf_grid",
    "MKCModel",
    "embed",
    "spectral_diagnostics",
    "SimpleMKKMResult",
    "simple_mkkm",
    "average_kernel_kmeans",
    "clustering_accuracy",
    "nmi",
    "ari",
    "purity",
    "clustering_scores",
]
