"""
A table in, labels out by id
============================

A Parquet table as a data engineer has one (a string id, a string, a categorical and a date
column beside the numbers) clustered by :func:`mkdist.cluster` with two declared views and the
id column; the labels come back as Parquet keyed by the id, and the run store is resumable:
the same call again does nothing.
"""

import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import mkdist
from mkdist.datasets import write_customer_table

work = Path(tempfile.mkdtemp())
truth = write_customer_table(work / "customers.parquet", 5000, n_clusters=4)
print(pd.read_parquet(work / "customers.parquet").head(3).T)

result = mkdist.cluster(str(work / "customers.parquet"), str(work / "run.zarr"), 4, id_column="customer_id",
                        views={"behaviour": "a*", "profile": ["b0", "b1", "b2"]},
                        labels_out=str(work / "labels.parquet"), random_state=0)
labels = pd.read_parquet(work / "labels.parquet")
print(labels.head())
print("stages:", {k: round(v, 2) for k, v in result.timings.items()})

start = time.perf_counter()
again = mkdist.cluster(str(work / "customers.parquet"), str(work / "run.zarr"), 4, id_column="customer_id",
                       views={"behaviour": "a*", "profile": ["b0", "b1", "b2"]},
                       labels_out=str(work / "labels.parquet"), random_state=0)
print(f"the same call again: {time.perf_counter() - start:.2f} s, skipped {again.skipped}")

table = pd.read_parquet(work / "customers.parquet", columns=["customer_id", "true_segment"])
joined = table.merge(labels, on="customer_id")
fig, ax = plt.subplots(figsize=(5, 3.5))
pd.crosstab(joined["true_segment"], joined["cluster"]).plot.bar(stacked=True, ax=ax)
ax.set_xlabel("generating segment")
ax.set_ylabel("rows")
ax.set_title("labels joined back to the table on customer_id")
fig.tight_layout()
plt.show()
