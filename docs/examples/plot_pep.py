"""
Which kernels carry cluster structure: the PEP
==============================================

The principal eigenvalue proportion (PEP) of a kernel is the share of its spectrum in its top
t eigenvalues (:func:`mkdist.principal_eigenvalue_proportion`). A Gaussian kernel whose
bandwidth is far below the typical distance is close to the identity (PEP near t / n), one far
above it close to a constant; in between the PEP rises where the kernel sees the clusters.
Late fusion drops kernels whose PEP is near the identity's.
"""

import matplotlib.pyplot as plt
import numpy as np
from scipy.spatial.distance import cdist

from mkdist import make_multiview_blobs, principal_eigenvalue_proportion

views, y = make_multiview_blobs(600, n_clusters=5, view_dims=(8, 8), separation=2.0, random_state=0, as_dask=False)
X = views[next(iter(views))].astype(np.float64)
D2 = cdist(X, X, "sqeuclidean")
typical = np.sqrt(np.mean(D2))
factors = np.geomspace(0.02, 20, 25)
pep = [principal_eigenvalue_proportion(np.exp(-D2 / (2 * (f * typical) ** 2)), 5) for f in factors]

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogx(factors, pep, "o-", ms=3)
ax.axhline(5 / X.shape[0], color="grey", ls=":", label="identity kernel (t / n)")
ax.set_xlabel("bandwidth / typical distance")
ax.set_ylabel("PEP, t = 5")
ax.legend()
fig.tight_layout()
plt.show()
