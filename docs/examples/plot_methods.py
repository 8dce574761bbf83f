"""
Five methods on one data set
============================

Every method of the registry has the same estimator API; here each one clusters the same
two-view data, and the figure compares their accuracy against the
generating labels (the power k-means methods run two restarts instead of their default ten,
sized for large data). :func:`mkdist.choose_method` says which one ``method="auto"`` would run.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import mkdist
from mkdist import clustering_scores, make_multiview_blobs

views, y = make_multiview_blobs(1000, n_clusters=5, view_dims=(8, 8), separation=1.0, random_state=1,
                                as_dask=False)
X = list(views.values())
print(mkdist.choose_method(X, 5))

scores, seconds = {}, {}
for name in mkdist.available_methods():
    method = mkdist.get_method(name)
    # The power k-means restarts are sized for large data: two are enough here.
    small = {"n_init": 2} if name in ("rff-power", "mv-rff-power") else {}
    estimator = method(n_clusters=5, random_state=0, **small)
    # Nystrom spectral clustering takes one view: it gets both, side by side.
    data = np.hstack(X) if method is mkdist.NystromSpectralClustering else X
    start = time.perf_counter()
    labels = estimator.fit_predict(data)
    seconds[name] = time.perf_counter() - start
    scores[name] = clustering_scores(y, labels)["acc"]
    print(f"{name}: ACC {scores[name]:.3f} in {seconds[name]:.1f} s")

fig, ax = plt.subplots(figsize=(7, 3))
ax.barh(list(scores), list(scores.values()))
ax.set_xlim(0, 1)
ax.set_xlabel("ACC against the generating labels")
ax.set_title("one data set, every method (defaults, two power k-means restarts)")
fig.tight_layout()
plt.show()
