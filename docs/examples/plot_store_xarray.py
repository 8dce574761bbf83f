"""
Reading a run store with xarray
===============================

Every stage of a run is an xarray Dataset with named dimensions inside the Zarr store;
:class:`mkdist.storage.RunStore` names the group of its current version. Here a small run is
stored, then its embedding and labels are read back with :func:`xarray.open_zarr`.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import xarray as xr

import mkdist
from mkdist import make_multiview_blobs
from mkdist.storage import RunStore

views, y = make_multiview_blobs(3000, n_clusters=5, view_dims=(8, 8), random_state=0, as_dask=False)
path = str(Path(tempfile.mkdtemp()) / "run.zarr")
mkdist.cluster(list(views.values()), path, 5, n_landmarks=300, random_state=0)

store = RunStore.open(path)
embedding = xr.open_zarr(path, group=store.stage_group("embedding"), consolidated=False)
labels = xr.open_zarr(path, group=store.stage_group("labels"), consolidated=False)
print(embedding)
print(labels)

name = next(v for v in embedding.data_vars if embedding[v].ndim == 2)
Z = embedding[name].values
fig, ax = plt.subplots(figsize=(5, 4))
ax.scatter(Z[:, 0], Z[:, 1], c=labels["labels"].values, s=3, cmap="tab10")
ax.set_xlabel(f"{name}[:, 0]")
ax.set_ylabel(f"{name}[:, 1]")
ax.set_title("the stored embedding, coloured by the stored labels")
fig.tight_layout()
plt.show()
