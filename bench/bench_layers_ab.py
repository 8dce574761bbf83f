"""W1 through ``mkdist.cluster`` with this checkout and with an older one, alternating: the
labels must be identical and the time not worse (issue 24 at 1M rows; issue 35 items 1-2, one
plan and one context, at 200k).

``PYTHONPATH=bench python bench/bench_layers_ab.py OLD_PYTHON [--n N] [--rounds R] [--out PATH]``
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
from _common import W1, alternate, write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old_python", help="the interpreter of a checkout of the older commit")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", "--repeats", dest="rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/layers_labels_and_speed_1m.json)")
    args = ap.parse_args()
    labels: dict[str, np.ndarray] = {}

    def run(tag: str, python: str) -> dict:
        lab, info = bench_speed._labels_with(python, args.n, tag, W1)
        assert np.array_equal(lab, labels.setdefault(tag, lab)), "a checkout gave different labels run to run"
        return info

    runs, _ = alternate({"old": args.old_python, "new": sys.executable}, args.rounds, run,
                        progress=lambda info: f"{info['seconds']:.2f} s {info['version']}")
    seconds = {tag: [info["seconds"] for info in infos] for tag, infos in runs.items()}
    out = {"N": args.n, "params": W1, "seconds": seconds,
           "median_s": {k: statistics.median(v) for k, v in seconds.items()},
           "identical_labels": bool(np.array_equal(labels["old"], labels["new"])),
           "n_labels": int(labels["new"].size)}
    print(json.dumps(out))
    write_result(out, "layers_labels_and_speed_1m", args.out)


if __name__ == "__main__":
    main()
