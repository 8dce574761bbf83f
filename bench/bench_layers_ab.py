"""Issue 24: W1 at 1M rows through ``mkdist.cluster`` with this checkout and with an older one,
alternating, 3 runs each: the labels must be identical and the time not worse.

``PYTHONPATH=bench python bench/bench_layers_ab.py OLD_PYTHON`` (OLD_PYTHON: the interpreter of a
checkout of the older commit, with that checkout installed in it).  Prints JSON, also written to
``bench/results/layers_labels_and_speed_1m.json``.
"""

import json
import statistics
import sys

import bench_speed
import numpy as np
from _common import W1


def main() -> None:
    pythons = {"old": sys.argv[1], "new": sys.executable}
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    labels: dict[str, np.ndarray] = {}
    for i in range(3):
        for tag in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            lab, info = bench_speed._labels_with(pythons[tag], 1_000_000, tag, W1)
            seconds[tag].append(info["seconds"])
            assert np.array_equal(lab, labels.setdefault(tag, lab)), "a checkout gave different labels run to run"
            print(tag, round(info["seconds"], 2), info["version"], file=sys.stderr, flush=True)
    out = {"N": 1_000_000, "params": W1, "seconds": seconds,
           "median_s": {k: statistics.median(v) for k, v in seconds.items()},
           "identical_labels": bool(np.array_equal(labels["old"], labels["new"]))}
    print(json.dumps(out))
    with open("bench/results/layers_labels_and_speed_1m.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
