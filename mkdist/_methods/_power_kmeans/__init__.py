"""RFF kernel power k-means (RFF-KPKM) and its improved possibilistic multi-view variant.

Algorithm 1 (RFF-KPKM) and Algorithm 2 (IP-RFF-MKPKM, eq. 20-31) of the RFF power k-means
seed (``seeds/rff-kernel-power-kmeans.txt``; see ``docs/algorithms.md`` section 4).  One module
per concern: a pass over the rows (:mod:`._passes`: feature maps, costs, power-mean weights,
one pass's partial sums), the iterations (:mod:`._loop`), the restarts on the init sample
(:mod:`._restarts`) and the estimators (:mod:`._estimators`).
A fit runs ``n_init`` restarts in memory on the init sample (each its own random frequencies,
k-means start and annealing), makes one run of them (``restart_selection``: by default
continued from the consensus of their partitions) and, when the sample is not all rows,
refines it by passes over all rows from its final centroids and power, as the
MKC k-means does (``mkdist._core._kmeans``): restarts cost no pass over the data.

Every iteration is one pass over the rows through the row engine (:class:`RowBlocks`).  A
row block's random Fourier features are computed once and kept between passes when they fit
a memory budget: NumPy input within ``FEATURE_CACHE_BYTES``; Dask input as a persisted Dask
array of features on the workers, up to ``FEATURE_PERSIST_FRACTION`` of the cluster's worker
memory (chunks beyond it are recomputed from the stored frequencies in every pass).  The row
function evaluates the power-mean weights and returns k x (L 2D + ...) partial sums; Dask
input runs it as one task per row chunk and adds the partials with a tree reduction (one
``compute`` per iteration).  So NumPy and Dask input give the same numbers up to summation
order.  The passes hold the features in ``FEATURE_DTYPE`` (float32: the feature products and
distances in single precision, the weights and every sum across blocks in float64); the
k-means start, the typicality and s0 use float64 features of the init sample.

Notation: N points, L views (view l has d_l features), k clusters, D frequencies per
view (2D features: a sine and a cosine per frequency), phi_l the feature map of view l,
theta_{j,l} (2D,) the centroid of cluster j in view l's feature space, s < 0 the power.
"""

from ._estimators import MultiViewRFFPowerKMeans, RFFKernelPowerKMeans, default_n_components

__all__ = ["RFFKernelPowerKMeans", "MultiViewRFFPowerKMeans", "default_n_components"]
