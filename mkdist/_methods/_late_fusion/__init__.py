"""GMLKM: graph-filtered late-fusion multiple kernel clustering, fitted on landmarks.

One module per concern: the base partitions (:mod:`._partitions`, step 1), Algorithm 1
(:mod:`._fusion`, steps 2-4), the fitted model and its out-of-sample rows (:mod:`._model`)
and the estimator (:mod:`._estimator`).

Seed: "Sharper Error Bounds in Late Fusion Multi-view Clustering Using Eigenvalue
Proportion" (Du et al.), eq. 21-27 and Algorithm 1; algorithms.md section 5.

Fit, on n landmarks (one node, one base kernel in memory at a time):

1. every base kernel K_p (the kernel specs of :class:`MultipleKernelClustering`, centred and
   normalised the same way) gives a base partition H_p, its top-d eigenvectors;
   near-identity kernels are detected by their principal eigenvalue proportion and dropped,
   and so are the kernels of views that are (nearly) constant on the landmarks;
2. per base partition, the adaptive-neighbour graph A_p of Nie, Wang & Huang (2014) on the
   rows of H_p and the low-pass filter G_p = sum_{o=1}^{o_bar} T_p^o, T_p = (I + D^-1/2 A_p
   D^-1/2) / 2, applied by repeated sparse products (never an n x n dense matrix;
   :mod:`mkdist._core._graph`);
3. Algorithm 1: alternate labels Y (k-means on H~ = G~ [gamma_1 H_1, ..., gamma_m H_m],
   G~ = sum_i mu_i G_i), view weights gamma (eq. 26) and filter weights mu (eq. 27);
4. (``normalize_embedding``, the default) the clusters of the row-normalised H~ of the
   landmarks, by k-means started from Algorithm 1's clusters and from k-means++ restarts.

Every row is then embedded out of sample through the row engine (NumPy or Dask,
:class:`mkdist._core._blocks.RowBlocks`): its base embeddings h_p(x) (MKC-AE, the kernel rows of
:class:`mkdist._core._kernels.ProjectedKernels`), its adaptive-neighbour weights to the landmarks
in every H_i space, the same filter polynomial (then scaled to unit length).  The final
k-means runs on the embedding of all N rows (``cluster_all_points``, as MKC-AE's k-means on
H_N), and new points go to the nearest centroid: the stage plan landmarks -> model ->
embedding -> labels of
:class:`mkdist._methods._base.LandmarkEmbeddingEstimator`.  The derivation and the measured rules:
``docs/algorithms.md``, "Late fusion".
"""

from ._estimator import LateFusionClustering
from ._model import LateFusionModel

__all__ = ["LateFusionClustering", "LateFusionModel"]
