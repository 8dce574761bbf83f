"""The data engineer's front door (issue 22), printing JSON.

    python bench/bench_frontdoor.py --part e2e --n 1000000        # customer table, 2 views, string ids:
                                                                   # CLI run -> labels joined by id vs mkdist.cluster
    python bench/bench_frontdoor.py --part cost --ns 200000,1000000 --repeats 3
                                     # `mkdist run` minus mkdist.cluster() on the same cluster; no-op re-run
    python bench/bench_frontdoor.py --part refusals --repeats 3    # each refusal: seconds to exit 2
    python bench/bench_frontdoor.py --part interrupt --n 1000000  # Ctrl-C at 4 points x once/twice
    python bench/bench_frontdoor.py --part s3 --n 1000000         # input, store, labels on a local S3
                                                                   # server (moto) vs local disk

The table is :func:`mkdist.datasets.write_customer_table` (string ``customer_id`` in shuffled
order, a string, a categorical and a date column, views ``a0..a7`` and ``b0..b7`` as float64,
``true_segment``), written once under ``bench/out/data``.  The cluster of ``cost`` is one
``dask scheduler`` and two plain ``dask worker --nthreads 1`` processes, as a data engineer
starts them; ``mkdist.cluster()`` runs in a Python process already connected to it, and
``mkdist run --dask-address`` from the shell, alternately, each on a fresh store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import OUT, DaskProcesses, MotoServer, cli_env, customer_table, emit, machine, median

MKDIST = [sys.executable, "-m", "mkdist.cli"]
VIEWS = ["--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id", "--label-key", "true_segment"]


def plain_cluster() -> DaskProcesses:
    """``dask scheduler`` + two ``dask worker`` processes on 127.0.0.1, as a data engineer starts
    them: dask's memory limits, one OpenMP thread."""
    return DaskProcesses(2, memory_limit=None, env={"OMP_NUM_THREADS": "1"})


def _cli(*args, timeout: float = 3600) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([*MKDIST, *args], capture_output=True, text=True, env=cli_env(), timeout=timeout)
    return r, time.perf_counter() - t0


def _table_arrays(path: Path):
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    views = {p: np.column_stack([t.column(f"{p}{j}").to_numpy() for j in range(8)]) for p in "ab"}
    return views, t.column("customer_id").to_numpy(zero_copy_only=False), t.column("true_segment").to_numpy()


# ----------------------------------------------------------------------------- e2e
def part_e2e(n: int) -> dict:
    """The whole table path from the shell, labels joined back by id, against mkdist.cluster on
    the same arrays (NumPy, same seed) in one process on the same plain cluster."""
    import pandas as pd
    from distributed import Client

    import mkdist

    table = customer_table(n)
    work = OUT / "frontdoor"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cluster = plain_cluster()
    try:
        r, cli_s = _cli("run", "--input", str(table), "--store", str(work / "cli.zarr"), "--n-clusters", "5",
                        *VIEWS, "--labels-out", str(work / "labels.parquet"), "--random-state", "0",
                        "--dask-address", cluster.scheduler_address, "--quiet")
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        labels = pd.read_parquet(work / "labels.parquet")
        truth = pd.read_parquet(table, columns=["customer_id", "true_segment"])
        joined = truth.merge(labels, on="customer_id", how="outer", indicator=True)
        views, _, y = _table_arrays(table)
        with Client(cluster.scheduler_address):
            t0 = time.perf_counter()
            res = mkdist.cluster(views, str(work / "py.zarr"), 5, random_state=0, chunk_rows=125_000)
            py_s = time.perf_counter() - t0
            py_labels = res.labels.compute()
    finally:
        cluster.close()
    both = joined["_merge"] == "both"
    return {"N": n, "cli_result": r.stdout.strip(), "cli_s": cli_s, "cluster_py_s": py_s,
            "rows_joined": int(both.sum()), "rows_only_in_one": int((~both).sum()),
            "labels_rows": len(labels), "id_dtype": str(labels["customer_id"].dtype),
            "acc_cli_by_id": mkdist.clustering_accuracy(joined.loc[both, "true_segment"].to_numpy(),
                                                        joined.loc[both, "cluster"].to_numpy()),
            "acc_cluster_same_arrays": mkdist.clustering_accuracy(y, py_labels)}


# ----------------------------------------------------------------------------- fixed cost
_PY_RUN = r"""
import sys, time, json
t_import = time.perf_counter()
from distributed import Client
import mkdist, mkdist.pipeline
for m in mkdist.available_methods():
    mkdist.get_method(m)
client = Client(sys.argv[1])
t0 = time.perf_counter()
res = mkdist.cluster(sys.argv[2], sys.argv[3], 5, random_state=0, views={"a": "a*", "b": "b*"},
                     id_column="customer_id", label_column="true_segment", labels_out=sys.argv[4],
                     report=sys.argv[5] == "report")
print(json.dumps({"cluster_s": time.perf_counter() - t0, "acc": res.metrics["scores"]["acc"]}))
"""


def part_cost(ns: list[int], repeats: int) -> dict:
    """``mkdist run --dask-address`` (wall time from the shell) minus ``mkdist.cluster()`` (timed
    inside a process whose imports and client are ready), on the same plain cluster, each on a
    fresh store, alternating; then the same command again (nothing to do).

    The CLI always writes the run report; ``mkdist.cluster()`` does so only with ``report=True``.
    Both are timed (``cluster_s``: ``report=False``, its default; ``cluster_report_s``:
    ``report=True``), so the CLI's fixed cost (``cli_s - cluster_report_s``: the same work) is
    not confused with the report's own cost (``cluster_report_s - cluster_s``)."""
    out = {}
    work = OUT / "frontdoor-cost"
    cluster = plain_cluster()

    def python_run(report: str) -> float:
        r = subprocess.run([sys.executable, "-c", _PY_RUN, cluster.scheduler_address, str(table),
                            str(work / f"py-{report}.zarr"), str(work / f"py-{report}-labels.parquet"), report],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])["cluster_s"]

    try:
        for n in ns:
            table = customer_table(n)
            rows = []
            for _ in range(repeats):
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                cluster_s = python_run("no-report")
                cluster_report_s = python_run("report")
                args = ("run", "--input", str(table), "--store", str(work / "cli.zarr"), "--n-clusters", "5",
                        "--random-state", "0", *VIEWS, "--labels-out", str(work / "cli-labels.parquet"),
                        "--dask-address", cluster.scheduler_address, "--quiet")
                r, cli_s = _cli(*args)
                if r.returncode:
                    raise RuntimeError(r.stderr)
                r2, noop_s = _cli(*args)
                rows.append({"cluster_s": cluster_s, "cluster_report_s": cluster_report_s, "cli_s": cli_s,
                             "fixed_cost_s": cli_s - cluster_report_s, "report_cost_s": cluster_report_s - cluster_s,
                             "noop_rerun_s": noop_s, "noop_says": r2.stdout.strip()[:80]})
            out[str(n)] = {"runs": rows, **{f"median_{k}": median([x[k] for x in rows])
                                            for k in ("cluster_s", "cluster_report_s", "cli_s", "fixed_cost_s",
                                                      "report_cost_s", "noop_rerun_s")}}
    finally:
        cluster.close()
    return out


# ----------------------------------------------------------------------------- refusals
def part_refusals(repeats: int) -> dict:
    """Each mistake of the issue, from the shell: seconds to the one-line refusal (exit 2), and
    that nothing was created on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = OUT / "frontdoor-refusals"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    table = customer_table(200_000)
    t = pq.read_table(table)
    a3 = t.column("a3").to_numpy().copy()
    a3[[1000, 150_000]] = np.nan
    nan_table = work / "nan.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("a3"), "a3", pa.array(a3, from_pandas=False)), nan_table)
    (work / "empty.parquet").write_bytes(b"")
    (work / "corrupt.parquet").write_bytes(b"PAR1" + os.urandom(100))
    (work / "a-file").write_text("not a store")
    small = work / "small.parquet"
    pq.write_table(t.slice(0, 4), small)
    store = str(work / "store.zarr")
    base = ["run", "--store", store, "--n-clusters", "5", "--quiet", "--n-workers", "2"]
    cases = {
        "missing input": ["--input", str(table).replace("customers", "customer")],
        "empty file": ["--input", str(work / "empty.parquet")],
        "corrupt file": ["--input", str(work / "corrupt.parquet")],
        "store is a file": ["--input", str(table), "--store", str(work / "a-file"), *VIEWS],
        "wrong column": ["--input", str(table), "--view", "a=a0,a99", "--id-column", "customer_id"],
        "K larger than rows": ["--input", str(small), *VIEWS],
        "NaN (needs a pass)": ["--input", str(nan_table), *VIEWS],
    }
    out = {}
    for name, args in cases.items():
        seconds, message = [], None
        for _ in range(repeats):
            full = list(base)
            if "--store" in args:
                full[1:3] = []
            r, s = _cli(*full, *args)
            assert r.returncode == 2, (name, r.returncode, r.stderr)
            seconds.append(s)
            message = r.stderr.strip()
        out[name] = {"median_s": median(seconds), "max_s": max(seconds), "stderr": message,
                     "lines": len(message.splitlines()), "store_created": os.path.exists(store)}
    return out


# ----------------------------------------------------------------------------- Ctrl-C
def _leftovers(pgid: int) -> list[int]:
    r = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def part_interrupt(n: int) -> dict:
    """SIGINT to the command's process group (as a terminal's Ctrl-C does) at four points, once
    or twice: seconds to exit, exit code, processes left, then the same command resumes and its
    labels equal an uninterrupted run's."""
    import pandas as pd

    table = customer_table(n)
    work = OUT / "frontdoor-interrupt"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = cli_env()

    def args(store: Path):
        return [*MKDIST, "run", "--input", str(table), "--store", str(store), "--n-clusters", "5", "--random-state",
                "0", *VIEWS, "--labels-out", str(store.with_suffix(".labels.parquet"))]

    reference = work / "reference.zarr"
    subprocess.run(args(reference), env=env, capture_output=True, check=True)
    ref = pd.read_parquet(reference.with_suffix(".labels.parquet")).set_index("customer_id")["cluster"]
    points = {"scan": "input:", "model": "[2/4] model", "embedding": "[3/4] embedding", "k-means": "[4/4] labels"}
    delays = {"scan": 1.0, "model": 0.5, "embedding": 1.5, "k-means": 0.3}
    out = {}
    for point, marker in points.items():
        for times in (1, 2):
            store = work / f"{point}-{times}.zarr"
            proc = subprocess.Popen(args(store), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if marker in line:
                    break
            time.sleep(delays[point])
            t0 = time.perf_counter()
            os.killpg(proc.pid, signal.SIGINT)
            if times == 2:
                time.sleep(0.3)
                os.killpg(proc.pid, signal.SIGINT)
            rest = proc.stderr.read()
            proc.wait(timeout=60)
            exit_s = time.perf_counter() - t0
            time.sleep(1.0)
            left = _leftovers(proc.pid)
            r = subprocess.run(args(store), env=env, capture_output=True, text=True)
            got = pd.read_parquet(store.with_suffix(".labels.parquet")).set_index("customer_id")["cluster"]
            out[f"{point}-x{times}"] = {
                "exit_code": proc.returncode, "exit_s": exit_s, "processes_left": left,
                "message": [x for x in rest.splitlines() if "interrupted" in x][-1:],
                "resume_exit_code": r.returncode, "resume_result": r.stdout.strip().splitlines()[-1:],
                "identical_labels": bool(got.reindex(ref.index).equals(ref))}
    return out


# ----------------------------------------------------------------------------- s3
def part_s3(n: int) -> dict:
    """One `mkdist run` with input, store and labels on local disk, then the same with all three on
    a local S3 server (credentials in the CLI's environment only: the workers have none), on one
    plain 2-worker cluster; wall time of each, and the labels joined by id."""
    import pandas as pd

    table = customer_table(n)
    work = OUT / "s3"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = MotoServer(work / "moto.log")
    creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
             "AWS_ENDPOINT_URL": server.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    options = {"key": "bench", "secret": "bench-secret", "endpoint_url": server.endpoint}
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("AWS_")}
    cluster = None
    try:
        import s3fs

        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("bench")
        t0 = time.perf_counter()
        fs.put(str(table), "bench/input/customers.parquet")
        upload_s = time.perf_counter() - t0
        cluster = plain_cluster()  # started without AWS variables: the workers get none
        common = ["--n-clusters", "5", *VIEWS, "--random-state", "0", "--dask-address", cluster.scheduler_address,
                  "--quiet"]
        load = {"before_local": os.getloadavg()}
        r, local_s = _cli("run", "--input", str(table), "--store", str(work / "local.zarr"), "--labels-out",
                          str(work / "labels.parquet"), *common)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        load["before_s3"] = os.getloadavg()
        before = server.requests()
        os.environ.update(creds)  # the CLI's environment (the cluster was started before)
        try:
            r3, s3_s = _cli("run", "--input", "s3://bench/input/customers.parquet", "--store",
                            "s3://bench/runs/run.zarr", "--labels-out", "s3://bench/out/labels.parquet", *common)
        finally:
            for k in creds:
                os.environ.pop(k, None)
        if r3.returncode != 0:
            raise RuntimeError(r3.stderr)
        load["after"] = os.getloadavg()
        requests = server.requests() - before
        local = pd.read_parquet(work / "labels.parquet")
        remote = pd.read_parquet("s3://bench/out/labels.parquet", storage_options=options)
        joined = local.merge(remote, on="customer_id", how="outer", suffixes=("_local", "_s3"), indicator=True)
        both = joined["_merge"] == "both"
        same = both & (joined["cluster_local"] == joined["cluster_s3"])
        objects = fs.find("bench/runs/run.zarr")
    finally:
        if cluster is not None:
            cluster.close()
        server.close()
        os.environ.update(saved)
    return {"N": n, "upload_s": upload_s, "local_s": local_s, "s3_s": s3_s, "s3_over_local": s3_s / local_s,
            "s3_requests": requests, "store_objects": len(objects), "load": load,
            "rows_joined": int(both.sum()), "rows_only_in_one": int((~both).sum()),
            "identical_labels": bool(same.sum() == len(local) == len(remote)),
            "max_distance_diff": float((joined["distance_local"] - joined["distance_s3"]).abs().max()),
            "local_result": r.stdout.strip().splitlines()[-1:], "s3_result": r3.stdout.strip().splitlines()[-1:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["e2e", "cost", "refusals", "interrupt", "s3"], required=True)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--ns", default="200000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    t0 = time.time()
    if a.part == "e2e":
        result = part_e2e(a.n)
    elif a.part == "cost":
        result = part_cost([int(x) for x in a.ns.split(",")], a.repeats)
    elif a.part == "refusals":
        result = part_refusals(a.repeats)
    elif a.part == "s3":
        result = part_s3(a.n)
    else:
        result = part_interrupt(a.n)
    emit({"bench": "frontdoor", "part": a.part, "machine": machine(), "load_before": os.getloadavg(),
          "wall_s": time.time() - t0, "result": result})


if __name__ == "__main__":
    main()
