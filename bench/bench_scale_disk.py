"""W1 from disk at 1M, 10M, 100M rows through `mkdist run` on real `dask` processes, and its peers (issue 45).

    python bench/bench_scale_disk.py --ns 1000000,10000000 --formats zarr,parquet --peers 1000000,10000000
    python bench/bench_scale_disk.py --ns 100000000 --formats zarr --peers none
    python bench/bench_scale_disk.py --ns 10000000 --formats zarr --peers 10000000 --peer-methods kmeans

For each N and format the script

1. writes W1 (:data:`_common.W1`'s data: ``mkdist.datasets.make_multiview_blobs``, two views of 32
   float32 features, 10 clusters) to ``--dir`` chunk by chunk (131,072 rows at a time, never the
   whole table in memory): Zarr as an xarray dataset (``view0``, ``view1``, ``y``; chunks of
   131,072 rows), Parquet as files of 1,048,576 rows in row groups of 131,072 (columns
   ``a0..a31``, ``b0..b31``, ``y``) -- 131,072 x 64 float32 is mkdist's 32 MiB chunk, so both
   formats run with the same chunks;
2. starts ``dask scheduler`` and ```dask worker --nworkers 2 --nthreads 1``` (distributed's
   defaults otherwise), and runs ``mkdist run --input ... --dask-address ...`` as a subprocess:
   wall time of that command, us per row, the run's own stage timings;
3. samples every 0.25 s the RSS of every process involved (scheduler, nanny, worker processes,
   the ``mkdist run`` process and its children) and records the peak of their sum; bytes read
   and written are the processes' own I/O counters (``read_chars``: bytes through ``read()``,
   page cache included; ``read_bytes``: bytes from the block device) and CPU seconds (user +
   system, last seen: a process's CPU after its last sample is missed);
4. scores ACC on an evenly spaced sample of rows (``--acc-sample``) from the stored labels
   (the run is given no label column: scoring all rows would load them all into the client);
5. optionally (``--peers``: the N where the data fit in memory) runs the peers on the same rows,
   in the same run (Zarr data): scikit-learn ``KMeans`` and ``MiniBatchKMeans`` on the
   ``StandardScaler``'d 64 columns (this process, 2 BLAS/OpenMP threads, ``OMP_WAIT_POLICY=PASSIVE``),
   and dask-ml ``KMeans`` after dask-ml's ``StandardScaler`` on a fresh ``dask worker --nworkers 2
   --nthreads 1``, reading the Zarr input; each peer's time includes its scaling; ACC on all rows.
6. records, per task prefix, the workers' seconds (distributed's fine performance metrics:
   thread-cpu, thread-noncpu, deserialize, ...) and tasks: where a run's time goes.

The data of one N and format are deleted after its runs (``--keep`` keeps them): 100M rows are
~26 GB a format.  Prints one JSON document; ``--jsonl`` also appends each record as it finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _common import W1, DaskWorkerCommand, emit, machine

#: Rows a chunk (Zarr), a row group (Parquet) and a generation step: 131,072 x 64 float32 = 32 MiB.
CHUNK_ROWS = 131_072
#: Parquet rows per file (8 row groups).
FILE_ROWS = 8 * CHUNK_ROWS
VIEW_DIMS = (32, 32)
SEED = 0


# ----------------------------------------------------------------------------- writing W1
def _blocks(n: int):
    """W1's chunks in order, two at a time computed on two threads: (y, view0, view1) per chunk."""
    import dask

    from mkdist.datasets import make_multiview_blobs

    views, y = make_multiview_blobs(n, chunk_rows=CHUNK_ROWS, random_state=SEED, view_dims=VIEW_DIMS)
    n_chunks = len(y.chunks[0])
    for start in range(0, n_chunks, 2):
        idx = range(start, min(start + 2, n_chunks))
        parts = dask.compute(*[(y.blocks[i], views["view0"].blocks[i], views["view1"].blocks[i]) for i in idx],
                             scheduler="threads", num_workers=2)
        yield from parts


def write_zarr(n: int, path: Path) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    arrays = {}
    for name, d in (("view0", VIEW_DIMS[0]), ("view1", VIEW_DIMS[1])):
        arrays[name] = root.create_array(name, shape=(n, d), chunks=(CHUNK_ROWS, d), dtype="float32",
                                         dimension_names=("sample", f"feature_{name}"))
    arrays["y"] = root.create_array("y", shape=(n,), chunks=(CHUNK_ROWS,), dtype="int16", dimension_names=("sample",))
    row = 0
    for y, v0, v1 in _blocks(n):
        rows = slice(row, row + len(y))
        arrays["view0"][rows] = v0
        arrays["view1"][rows] = v1
        arrays["y"][rows] = y.astype(np.int16)
        row += len(y)


def write_parquet(n: int, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    names = [f"a{j}" for j in range(VIEW_DIMS[0])] + [f"b{j}" for j in range(VIEW_DIMS[1])]
    writer, row = None, 0
    try:
        for y, v0, v1 in _blocks(n):
            if row % FILE_ROWS == 0:
                if writer is not None:
                    writer.close()
                writer = None
            X = np.concatenate([v0, v1], axis=1)
            columns = {name: pa.array(X[:, j]) for j, name in enumerate(names)}
            columns["y"] = pa.array(y.astype(np.int16))
            table = pa.table(columns)
            if writer is None:
                writer = pq.ParquetWriter(str(path / f"part-{row // FILE_ROWS:05d}.parquet"), table.schema)
            writer.write_table(table, row_group_size=CHUNK_ROWS)
            row += len(y)
    finally:
        if writer is not None:
            writer.close()


def true_labels(path: Path, fmt: str, index: np.ndarray) -> np.ndarray:
    """y at the rows ``index`` (sorted), read column by column, never all rows of the features."""
    if fmt == "zarr":
        import zarr

        return np.asarray(zarr.open_group(str(path), mode="r")["y"].get_orthogonal_selection((index,)))
    import pyarrow.parquet as pq

    ys = [pq.read_table(f, columns=["y"])["y"].to_numpy() for f in sorted(path.glob("*.parquet"))]
    return np.concatenate(ys)[index]


def load_in_memory(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """The 64 features (float32) and y of a data set that fits in memory."""
    if fmt == "zarr":
        import zarr

        g = zarr.open_group(str(path), mode="r")
        return np.concatenate([g["view0"][:], g["view1"][:]], axis=1), g["y"][:]
    import pyarrow.parquet as pq

    t = pq.read_table(str(path))
    return np.column_stack([t[c].to_numpy() for c in t.column_names if c != "y"]), t["y"].to_numpy()


# ----------------------------------------------------------------------------- processes and sampling
class Sampler:
    """Every 0.25 s: RSS of the given processes and all their descendants (peak of the sum), and
    each process's last I/O counters (a process that exits keeps the counters last seen)."""

    FIELDS = ("read_chars", "write_chars", "read_bytes", "write_bytes")

    def __init__(self, roots: list[int], period: float = 0.25):
        import psutil

        self.psutil = psutil
        self.roots = list(roots)
        self.period = period
        self.peak = 0
        self.peak_by_role: dict = {}
        self.io: dict[int, dict] = {}
        self.io0: dict[int, dict] = {}
        self._stop = threading.Event()
        self._sample(first=True)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add_root(self, pid: int) -> None:
        self.roots.append(pid)

    def _procs(self):
        out = []
        for pid in list(self.roots):
            try:
                p = self.psutil.Process(pid)
                out.append(p)
                out.extend(p.children(recursive=True))
            except self.psutil.NoSuchProcess:
                pass
        return out

    def _sample(self, first: bool = False):
        total = 0
        for p in self._procs():
            try:
                rss = p.memory_info().rss
                io = p.io_counters()
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                continue
            total += rss
            cpu = p.cpu_times()
            counters = {**{f: getattr(io, f) for f in self.FIELDS},
                        "cpu_s": cpu.user + cpu.system + cpu.children_user + cpu.children_system}
            if first or p.pid not in self.io0 and p.pid not in self.io:
                # a process alive before the measurement counts from here; one born later from 0
                self.io0[p.pid] = counters if first else dict.fromkeys(counters, 0)
            self.io[p.pid] = counters
        self.peak = max(self.peak, total)

    def _run(self):
        while not self._stop.wait(self.period):
            self._sample()

    def close(self) -> dict:
        self._stop.set()
        self.thread.join()
        self._sample()
        return {"peak_rss_gib": round(self.peak / 2**30, 3),
                **{f: int(sum(self.io[p][f] - self.io0.get(p, {}).get(f, 0) for p in self.io)) for f in self.FIELDS},
                "cpu_s": round(sum(self.io[p]["cpu_s"] - self.io0.get(p, {}).get("cpu_s", 0) for p in self.io), 2)}


def load() -> float:
    return round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------- runs
def run_mkdist(path: Path, fmt: str, n: int, work: Path, acc_sample: int) -> dict:
    store = work / f"store-{fmt}-{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    cmd = [str(Path(sys.executable).with_name("mkdist")), "run", "--input", str(path), "--store", str(store),
           "--n-clusters", str(W1["n_clusters"]), "--kernels", W1["kernels"], "--n-landmarks", str(W1["n_landmarks"]),
           "--random-state", "0", "--json", "--quiet"]
    if fmt == "parquet":
        cmd += ["--view", "a=a*", "--view", "b=b*"]
    load_before = load()
    cluster = DaskWorkerCommand(2)
    try:
        sampler = Sampler(cluster.pids)
        env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.pop("PREFECT_API_URL", None)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd + ["--dask-address", cluster.address], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        sampler.add_root(proc.pid)
        out, err = proc.communicate()
        wall = time.perf_counter() - t0
        measured = sampler.close()
        profile = task_profile(cluster.address)
    finally:
        cluster.close()
    if proc.returncode:
        raise SystemExit(f"mkdist run failed ({proc.returncode}): {err[-3000:]}")
    summary = json.loads(out)
    from mkdist.storage import RunStore

    labels = RunStore.open(str(store)).read_stage("labels")["labels"]
    index = np.unique(np.linspace(0, n - 1, min(acc_sample, n)).astype(np.int64))
    import mkdist

    pred = np.asarray(labels.isel(sample=index).values)
    acc = mkdist.clustering_scores(true_labels(path, fmt, index), pred)["acc"]
    shutil.rmtree(store, ignore_errors=True)
    Path(f"{store}.report.html").unlink(missing_ok=True)  # the run report `mkdist run` writes by default
    return {"n": n, "format": fmt, "method": "mkdist", "wall_s": round(wall, 2), "us_per_row": round(1e6 * wall / n, 3),
            **measured, "acc_sample": round(float(acc), 4), "acc_sample_rows": int(len(index)),
            "stages": {k: round(float(v), 2) for k, v in (summary.get("timings") or {}).items()
                       if isinstance(v, (int, float))},
            "load_before": load_before, "load_after": load(), "task_profile": profile}


def _scheduler_metrics(dask_scheduler=None) -> dict:
    metrics: dict = {}
    for key, value in dask_scheduler.cumulative_worker_metrics.items():
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "execute" and key[3] == "seconds":
            metrics.setdefault(str(key[1]), {})[str(key[2])] = float(value)
    counts = {str(name): int(sum(tp.state_counts.values())) for name, tp in dask_scheduler.task_prefixes.items()}
    return {"seconds": metrics, "tasks": counts}


def task_profile(address: str) -> dict:
    """Per task prefix (a stage's kind of task): tasks, and the workers' seconds in each activity
    (distributed's fine performance metrics: thread-cpu, thread-noncpu, deserialize, ...)."""
    from distributed import Client

    with Client(address) as client:
        raw = client.run_on_scheduler(_scheduler_metrics)
    out = {}
    for prefix, activities in raw["seconds"].items():
        total = sum(activities.values())
        tasks = raw["tasks"].get(prefix, 0)
        out[prefix] = {"tasks": tasks, "seconds": round(total, 2),
                       "ms_per_task": round(1e3 * total / tasks, 2) if tasks else None,
                       **{k: round(v, 2) for k, v in sorted(activities.items(), key=lambda kv: -kv[1])[:4]}}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))


def _acc(y, pred) -> float:
    import mkdist

    return round(float(mkdist.clustering_scores(y, pred)["acc"]), 4)


def _scaled(X):
    from sklearn.preprocessing import StandardScaler

    return StandardScaler(copy=False).fit_transform(X)


PEERS = ("kmeans", "minibatch", "dask-ml")


def run_peers(path: Path, n: int, methods=PEERS, threads: int = 2) -> list[dict]:
    """scikit-learn KMeans, MiniBatchKMeans (in this process, 2 BLAS/OpenMP threads) and dask-ml KMeans
    (on a fresh ``dask worker --nworkers 2 --nthreads 1``) on the Zarr data, standardised."""
    rows = []
    X, y = load_in_memory(path, "zarr")
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from threadpoolctl import threadpool_limits

    for key, name, make in (("kmeans", "sklearn KMeans", lambda: KMeans(W1["n_clusters"], random_state=0)),
                            ("minibatch", "sklearn MiniBatchKMeans",
                             lambda: MiniBatchKMeans(W1["n_clusters"], random_state=0))):
        if key not in methods:
            continue
        load_before = load()
        X_copy = X.copy()  # scaled in place, inside the timing
        with threadpool_limits(threads):
            t0, c0 = time.perf_counter(), time.process_time()
            pred = make().fit_predict(_scaled(X_copy))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        del X_copy
        rows.append({"n": n, "format": "zarr (in memory)", "method": name, "threads": threads, "wall_s": round(wall, 2),
                     "cpu_s": round(cpu, 2),
                     "us_per_row": round(1e6 * wall / n, 3), "acc": _acc(y, pred),
                     "load_before": load_before, "load_after": load()})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    del X
    if "dask-ml" not in methods:
        return rows
    try:
        import dask_ml  # noqa: F401
    except ImportError:
        rows.append({"n": n, "method": "dask-ml KMeans", "skipped": "dask-ml not installed (pip install -e .[bench])"})
        return rows
    import dask.array as da
    from dask_ml.cluster import KMeans as DaskKMeans
    from dask_ml.preprocessing import StandardScaler as DaskScaler
    from distributed import Client

    cluster = DaskWorkerCommand(2)
    load_before = load()
    try:
        with Client(cluster.address):
            t0 = time.perf_counter()
            Xd = da.concatenate([da.from_zarr(str(path), component="view0"),
                                 da.from_zarr(str(path), component="view1")], axis=1).rechunk({1: -1})
            Xs = DaskScaler().fit_transform(Xd)
            km = DaskKMeans(n_clusters=W1["n_clusters"], random_state=0).fit(Xs)
            pred = np.asarray(km.labels_.compute() if hasattr(km.labels_, "compute") else km.labels_)
            wall = time.perf_counter() - t0
    finally:
        cluster.close()
    rows.append({"n": n, "format": "zarr", "method": "dask-ml KMeans", "wall_s": round(wall, 2),
                 "us_per_row": round(1e6 * wall / n, 3), "acc": _acc(y, pred),
                 "load_before": load_before, "load_after": load()})
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="1000000,10000000")
    ap.add_argument("--formats", default="zarr,parquet")
    ap.add_argument("--peers", default="1000000,10000000", help="the N of the peers table ('none': no peers)")
    ap.add_argument("--peer-methods", default=",".join(PEERS), help="which peers (of %(default)s)")
    ap.add_argument("--peer-threads", type=int, default=2,
                    help="BLAS/OpenMP threads of the scikit-learn peers (1: their CPU seconds, robust to load)")
    ap.add_argument("--no-mkdist", action="store_true", help="the peers only")
    ap.add_argument("--repeats", type=int, default=1, help="mkdist runs per N and format")
    ap.add_argument("--acc-sample", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/mkdist-scale-disk", help="where data and stores go (deleted after)")
    ap.add_argument("--keep", action="store_true", help="keep the written data (reused by the next call)")
    ap.add_argument("--jsonl", help="also append each record to this file as it finishes")
    args = ap.parse_args()
    # scikit-learn's OpenMP threads spin at their barriers by default: on this shared 2-core machine
    # (load 10-20 from other work) KMeans took 79 s at 1M rows against 2.8 s on a quiet machine;
    # passive waiting is what a busy machine needs (read when the OpenMP runtime loads: set first).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    peers = set() if args.peers == "none" else {int(x) for x in args.peers.split(",")}
    records = []

    def record(r: dict) -> None:
        records.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")

    for n in [int(x) for x in args.ns.split(",")]:
        for fmt in args.formats.split(","):
            path = work / f"w1-{n}.{fmt}"
            done = path / ".complete"
            if not done.exists():
                shutil.rmtree(path, ignore_errors=True)
                t0 = time.perf_counter()
                (write_zarr if fmt == "zarr" else write_parquet)(n, path)
                done.touch()
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                record({"n": n, "format": fmt, "write_s": round(time.perf_counter() - t0, 1),
                        "bytes_on_disk": int(size), "load_after": load()})
            for _ in range(0 if args.no_mkdist else args.repeats):
                record(run_mkdist(path, fmt, n, work, args.acc_sample))
            if fmt == "zarr" and n in peers:
                for r in run_peers(path, n, args.peer_methods.split(","), args.peer_threads):
                    record(r)
            if not args.keep:
                shutil.rmtree(path, ignore_errors=True)
    emit({"bench": "scale_disk", "machine": machine(), "args": vars(args),
          "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "records": records})


if __name__ == "__main__":
    main()
