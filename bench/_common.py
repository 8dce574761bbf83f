"""Helpers shared by the benchmark scripts (data paths, timing, JSON output)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MKDIST_SHARED_DATA", REPO.parent / "shared" / "data"))


def load_mfeat():
    d = np.load(SHARED_DATA / "mfeat.npz")
    return [d[f"view{i}"] for i in range(6)], d["y"]


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def median(xs):
    return float(statistics.median(xs))


def machine():
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}


def emit(result: dict) -> None:
    """Print the benchmark result as one JSON document (the contract of every bench script)."""
    print(json.dumps(result, indent=2, default=float))


OUT = REPO / "bench" / "out"
#: Workload W1: two 32-feature float32 views, 10 clusters, rbf-grid kernels, 1000 landmarks.
W1 = dict(n_clusters=10, kernels="rbf-grid", n_landmarks=1000)


def w1_input(N: int, chunk_rows: int = 50_000) -> Path:
    """W1 data as an xarray-style Zarr dataset (views view0, view1; labels y), written once
    under bench/out/data and read by every run."""
    import xarray as xr
    from distributed import Client, LocalCluster

    from mkdist.datasets import make_multiview_blobs

    path = OUT / "data" / f"w1-{N}.zarr"
    if (path / "zarr.json").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    views, y = make_multiview_blobs(N, chunk_rows=chunk_rows, random_state=0, view_dims=(32, 32))
    ds = xr.Dataset({k: (("sample", f"feature_{k}"), v) for k, v in views.items()})
    ds["y"] = (("sample",), y)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c, Client(c):
        ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3)
    return path
