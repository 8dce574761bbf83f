"""
Two views, learned kernel weights
=================================

:class:`mkdist.MultipleKernelClustering` on two views of the same clusters, the second a
non-linear image of the first. SimpleMKKM learns one weight per base kernel (three RBF
bandwidths per view by default); the figure shows the weights and the clusters found, on the
first two embedding columns.
"""

import matplotlib.pyplot as plt
import numpy as np

from mkdist import MultipleKernelClustering, clustering_scores, make_multiview_blobs

views, y = make_multiview_blobs(2000, n_clusters=6, view_dims=(8, 8), separation=1.5, random_state=0, as_dask=False)
X = list(views.values())
model = MultipleKernelClustering(n_clusters=6, n_landmarks=300, random_state=0).fit(X)
print(clustering_scores(y, model.labels_))

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.5))
names = [f"view {v}\nkernel {k}" for v in range(2) for k in range(len(model.kernel_weights_) // 2)]
ax0.bar(np.arange(len(model.kernel_weights_)), model.kernel_weights_)
ax0.set_xticks(np.arange(len(names)), names, fontsize=7)
ax0.set_ylabel("weight")
ax0.set_title("learned kernel weights")
Z = model.transform(X)
ax1.scatter(Z[:, 0], Z[:, 1], c=model.labels_, s=4, cmap="tab10")
ax1.set_title("embedding, coloured by cluster")
fig.tight_layout()
plt.show()
