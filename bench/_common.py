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
