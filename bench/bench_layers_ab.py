"""W1 through ``mkdist.cluster`` with this checkout and with an older one, alternating: the
labels must be identical and the time not worse (issue 24 at 1M rows; issue 35 items 1-2, one
plan and one context, at 200k).

``PYTHONPATH=bench python bench/bench_layers_ab.py OLD_PYTHON [--n N] [--repeats R] [--out PATH]``
(OLD_PYTHON: the interpreter of a checkout of the older commit, with that checkout installed in
it; each run a fresh process on its own 2-worker LocalCluster, seed 0).  Prints JSON, also
written to ``--out`` (default ``bench/results/layers_labels_and_speed_1m.json``).
"""

import argparse
import json
import statistics
import sys

import bench_speed
import numpy as np
from _common import W1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old_python")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench/results/layers_labels_and_speed_1m.json")
    args = parser.parse_args()
    pythons = {"old": args.old_python, "new": sys.executable}
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    labels: dict[str, np.ndarray] = {}
    for i in range(args.repeats):
        for tag in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            lab, info = bench_speed._labels_with(pythons[tag], args.n, tag, W1)
            seconds[tag].append(info["seconds"])
            assert np.array_equal(lab, labels.setdefault(tag, lab)), "a checkout gave different labels run to run"
            print(tag, round(info["seconds"], 2), info["version"], file=sys.stderr, flush=True)
    out = {"N": args.n, "params": W1, "seconds": seconds,
           "median_s": {k: statistics.median(v) for k, v in seconds.items()},
           "identical_labels": bool(np.array_equal(labels["old"], labels["new"])),
           "n_labels": int(labels["new"].size)}
    print(json.dumps(out))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
