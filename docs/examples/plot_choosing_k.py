"""
Choosing K, and reading its confidence
======================================

With ``n_clusters="auto"`` the estimator chooses K from the spectrum of the landmarks'
k-nearest-neighbour graph: the largest eigengap, voted on by resamples. The choice comes with
its evidence and a calibrated confidence (``n_clusters_choice_``); below 0.9 K is a guess, and
the run says so. Well separated clusters give a clear gap; overlapping ones do not.
"""

import matplotlib.pyplot as plt
import numpy as np

from mkdist import MultipleKernelClustering, make_multiview_blobs

fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
for ax, separation in zip(axes, (3.0, 0.4)):
    views, y = make_multiview_blobs(1500, n_clusters=6, view_dims=(8, 8), separation=separation,
                                    random_state=0, as_dask=False)
    model = MultipleKernelClustering(n_clusters="auto", n_landmarks=300, random_state=0).fit(list(views.values()))
    choice = model.n_clusters_choice_
    print(f"separation {separation}: K = {choice.n_clusters} ({choice.evidence}, confidence {choice.confidence:.2f})")
    mu = np.asarray(choice.eigenvalues)
    k = np.arange(1, mu.size + 1)
    ax.plot(k, mu, "o-", ms=3)
    ax.axvline(choice.n_clusters + 0.5, color="C3", ls="--")
    ax.set_title(f"separation {separation}: K = {choice.n_clusters}, confidence {choice.confidence:.2f}", fontsize=9)
    ax.set_xlabel("k")
axes[0].set_ylabel("eigenvalue of the kNN graph")
fig.tight_layout()
plt.show()
