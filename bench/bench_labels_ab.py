"""Issue 35: the five estimators' labels with this checkout and with an older one, exactly.

Three shared sets (mfeat: 2000 x 6 views; msrcv1: 210 x 5; bbcsport: 544 x 2 sparse text), every
built-in method with ``random_state=0`` and its defaults (Nystrom, one view, on view 0):
``fit`` on NumPy input, and on mfeat also ``fit`` on Dask input on a fresh 2-worker
LocalCluster (the graphs a run sends to the scheduler; ``labels_`` computed there).  Each
checkout runs in its own interpreter; the labels are compared by SHA-1 of their int64 bytes.

``python bench/bench_labels_ab.py OLD_PYTHON [--out PATH]`` (OLD_PYTHON: the interpreter of a checkout of
the older commit, with that checkout installed in it).  Prints JSON, also written to
``bench/results/labels_ab_five_estimators.json``.
"""

import argparse
import json
import sys

from _common import SHARED_DATA, run_job, write_result

SETS = {"mfeat": SHARED_DATA / "mfeat.npz", "msrcv1": SHARED_DATA / "multiview" / "msrcv1.npz",
        "bbcsport": SHARED_DATA / "multiview" / "bbcsport.npz"}

_JOB = r"""
import hashlib, json, sys, time
import numpy as np
import mkdist

sets = json.loads(sys.argv[1])
CLASSES = {"mkc": "MultipleKernelClustering", "nystrom": "NystromSpectralClustering",
           "rff-power": "RFFKernelPowerKMeans", "mv-rff-power": "MultiViewRFFPowerKMeans",
           "late-fusion": "LateFusionClustering"}


def sha(labels):
    return hashlib.sha1(np.asarray(labels).astype("<i8").tobytes()).hexdigest()


def views_of(path):
    d = np.load(path)
    return [d[k] for k in sorted((k for k in d.files if k.startswith("view")), key=lambda k: int(k[4:]))], d["y"]


def fit(method, views, dask=False):
    cls = getattr(mkdist, CLASSES[method])
    X = views[0] if method == "nystrom" else views
    if dask:
        import dask.array as da
        chunked = [da.from_array(v, chunks=(500, -1)) for v in views]
        X = chunked[0] if method == "nystrom" else chunked
    t0 = time.perf_counter()
    est = cls(n_clusters=int(np.unique(y).size), random_state=0).fit(X)
    labels = np.asarray(est.labels_.compute() if hasattr(est.labels_, "compute") else est.labels_)
    return labels, time.perf_counter() - t0


out = {}
for name, path in sets.items():
    views, y = views_of(path)
    for method in CLASSES:
        labels, s = fit(method, views)
        out[f"{name}/{method}/numpy"] = {"sha1": sha(labels), "acc": mkdist.clustering_accuracy(y, labels),
                                         "seconds": round(s, 2)}
from distributed import Client, LocalCluster
views, y = views_of(sets["mfeat"])
with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster):
    for method in CLASSES:
        labels, s = fit(method, views, dask=True)
        out[f"mfeat/{method}/dask"] = {"sha1": sha(labels), "acc": mkdist.clustering_accuracy(y, labels),
                                       "seconds": round(s, 2)}
print(json.dumps({"mkdist": mkdist.__file__, "labels": out}))
"""


def run(python: str) -> dict:
    return run_job(python, _JOB, json.dumps({k: str(v) for k, v in SETS.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old_python", help="the interpreter of a checkout of the older commit")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/labels_ab_five_estimators.json)")
    args = ap.parse_args()
    old, new = run(args.old_python), run(sys.executable)
    cells = {key: {"identical": old["labels"][key]["sha1"] == cell["sha1"], "acc": round(cell["acc"], 4),
                   "seconds_old": old["labels"][key]["seconds"], "seconds_new": cell["seconds"]}
             for key, cell in new["labels"].items()}
    out = {"old": old["mkdist"], "new": new["mkdist"], "cells": cells,
           "identical": sum(c["identical"] for c in cells.values()), "of": len(cells)}
    print(json.dumps(out, indent=1))
    write_result(out, "labels_ab_five_estimators", args.out)


if __name__ == "__main__":
    main()
