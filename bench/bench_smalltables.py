"""Small tables (issue 33, item 4): where a run given no scheduler should compute, printing JSON.

    python bench/bench_smalltables.py --part cli --ns 300,5000,50000,200000 --repeats 3
        # `mkdist run` end to end (a fresh process, as a user types it): in this process
        # (MKDIST_IN_PROCESS_MAX_ROWS above N) against a LocalCluster of 2 workers
        # (--n-workers 2), alternately, each on a fresh store
    python bench/bench_smalltables.py --part inproc --ns 50000,200000 --repeats 3
        # mkdist.cluster in one process: Dask's threads with one BLAS thread each (what
        # mkdist does), synchronous with BLAS's own threads, threads with BLAS's own threads

The table is :func:`mkdist.datasets.write_customer_table` (views ``a0..a7``, ``b0..b7``;
5 clusters), written once under ``bench/out/data``.  Labels of every run are compared with
the first mode's (same seed): ``labels_identical``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
from _common import OUT, cli_env, customer_table, emit, machine, median

VIEWS = ["--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id", "--label-key", "true_segment"]
#: mkdist run's ways to compute: environment and extra arguments.
CLI_MODES = {"in-process": ({"MKDIST_IN_PROCESS_MAX_ROWS": str(10**12)}, []),
             "local-cluster": ({"MKDIST_IN_PROCESS_MAX_ROWS": "0"}, ["--n-workers", "2"])}


def _labels(store) -> np.ndarray:
    from mkdist.storage import RunStore

    return RunStore.open(str(store)).read_stage("labels")["labels"].values


def _load() -> float:
    return os.getloadavg()[0]


def _compare_modes(ns: list[int], repeats: int, modes: list[str], run) -> dict:
    """``run(mode, n) -> (record, labels)`` for every n of ``ns``: each mode in turn, ``repeats``
    rounds.  Per n: per mode the median of the records' ``wall_s`` and the records (with the load
    before each run), and ``labels_identical``: every run's labels equal the first run's."""
    out = {}
    for n in ns:
        runs: dict[str, list] = {mode: [] for mode in modes}
        reference, identical = None, True
        for r in range(repeats):
            for mode in modes:
                load = _load()
                record, labels = run(mode, n)
                if reference is None:
                    reference = labels
                identical &= bool(np.array_equal(labels, reference))
                runs[mode].append({**record, "load_before": load})
                print(f"n={n} {mode} r{r}: {record['wall_s']:.1f} s (load {load:.1f})", file=sys.stderr)
        out[str(n)] = {mode: {"median_wall_s": median([x["wall_s"] for x in v]), "runs": v}
                       for mode, v in runs.items()}
        out[str(n)]["labels_identical"] = identical
    return out


def _cli_run(mode: str, n: int) -> tuple[dict, np.ndarray]:
    env_extra, args = CLI_MODES[mode]
    table = customer_table(n)  # written by the first run, outside its clock
    store = OUT / "smalltables" / f"{mode}-{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(f"{store}.report.html", ignore_errors=True)
    store.parent.mkdir(parents=True, exist_ok=True)  # GNU time writes its file before mkdist makes the store
    rss = store.with_suffix(".rss")
    # GNU time: the command's peak resident memory (in-process: the whole run's; with a
    # LocalCluster, the client's only: its workers are not waited for by this process).
    timer = ["/usr/bin/time", "-f", "%M", "-o", str(rss)] if os.path.exists("/usr/bin/time") else []
    t0 = time.perf_counter()
    p = subprocess.run([*timer, sys.executable, "-m", "mkdist.cli", "run", "--input", str(table),
                        "--store", str(store), "--n-clusters", "5", "--random-state", "0", *VIEWS, *args,
                        "--json"], capture_output=True, text=True, env=cli_env(**env_extra), timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{mode} n={n}: {p.stderr}")
    summary = json.loads(p.stdout)
    peak = int(rss.read_text().split()[-1]) / 2**20 if timer else None
    return ({"wall_s": wall, "run_s": summary["timings"]["total_s"], "peak_rss_gib": peak,
             "acc": (summary.get("scores") or {}).get("acc"), "scheduler": summary["scheduler"]["description"]},
            _labels(store))


def part_cli(ns: list[int], repeats: int) -> dict:
    out = _compare_modes(ns, repeats, list(CLI_MODES), _cli_run)
    for res in out.values():
        res["in_process_minus_cluster_s"] = res["in-process"]["median_wall_s"] - res["local-cluster"]["median_wall_s"]
    return out


def part_inproc(ns: list[int], repeats: int) -> dict:
    import dask
    from threadpoolctl import threadpool_limits

    import mkdist

    def threads_blas1():
        return mkdist.pipeline.in_process()

    def sync_blas_all():
        return dask.config.set(scheduler="synchronous")

    class threads_blas_all:
        def __enter__(self):
            self._c = dask.config.set(scheduler="threads")
            self._c.__enter__()
            self._l = threadpool_limits(limits=os.cpu_count(), user_api="blas")
            self._l.__enter__()

        def __exit__(self, *exc):
            self._l.__exit__(*exc)
            self._c.__exit__(*exc)

    modes = {"threads, 1 BLAS thread each": threads_blas1, "synchronous, BLAS threads": sync_blas_all,
             "threads, BLAS threads": threads_blas_all}

    def run(mode: str, n: int) -> tuple[dict, np.ndarray]:
        table = customer_table(n)  # written by the first run, outside its clock
        store = OUT / "smalltables" / f"inproc-{n}.zarr"
        shutil.rmtree(store, ignore_errors=True)
        t0 = time.perf_counter()
        with modes[mode]():
            mkdist.cluster(str(table), str(store), 5, random_state=0, views={"a": "a*", "b": "b*"},
                           id_column="customer_id", label_column="true_segment")
        return {"wall_s": time.perf_counter() - t0}, _labels(store)

    return _compare_modes(ns, repeats, list(modes), run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["cli", "inproc"], required=True)
    ap.add_argument("--ns", default="300,5000,50000,200000")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    ns = [int(x) for x in a.ns.split(",")]
    result = {"machine": machine(), "part": a.part, "repeats": a.repeats}
    result["results"] = part_cli(ns, a.repeats) if a.part == "cli" else part_inproc(ns, a.repeats)
    emit(result)


if __name__ == "__main__":
    main()
