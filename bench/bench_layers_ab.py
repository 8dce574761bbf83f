"""Issue 24: W1 at 1M rows through mkdist.cluster with this checkout and with an older one,
alternating, 3 runs each: the labels must be identical and the time not worse.

PYTHONPATH=bench python bench/bench_layers_ab.py OLD_PYTHON   (OLD_PYTHON: the interpreter of a
checkout of the older commit, with that checkout installed in it; run from outside that tree)
"""
import sys, json, statistics
sys.path.insert(0, "bench")
import numpy as np
import bench_speed as B
from _common import W1
old, new = sys.argv[1], sys.executable
res = {"old": [], "new": []}
labels = {}
for i in range(3):
    for tag in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
        lab, info = B._labels_with(old if tag == "old" else new, 1_000_000, tag, W1)
        res[tag].append(info["seconds"]); labels.setdefault(tag, lab)
        assert np.array_equal(lab, labels[tag])
        print(tag, round(info["seconds"], 2), info["version"], flush=True)
out = {"seconds": res, "median_s": {k: statistics.median(v) for k, v in res.items()},
       "identical_labels": bool(np.array_equal(labels["old"], labels["new"])), "N": 1_000_000, "params": W1,
       "old_commit": "df9bfff (before the layer move)", "new_commit": "main after the issue-24 merges"}
print(json.dumps(out))
json.dump(out, open("bench/results/layers_labels_and_speed_1m.json", "w"), indent=1)
