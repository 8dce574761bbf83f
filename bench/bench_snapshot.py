"""Snapshot reads of run stores (issue 23), printing JSON.

    python bench/bench_snapshot.py --part all

``--part poll``: a reader polls a stage (``is_complete``, then ``read_stage``) while another
writer overwrites it ``--overwrites`` times, on a local directory (the writer is a second process, as a
refit beside a scheduled
``assign``) and on ``memory://`` (a writer thread: memory:// lives in one process).  Each
version's arrays hold its version number everywhere, and so does its ``version`` attribute;
a read is whole when they all agree.  Each read opens the stage (``RunStore.read_stage``),
then computes all its arrays: the latency quoted is of both.  Reported per location: reads,
failed reads (by error), mixed reads, ``is_complete`` answers of False, the versions seen,
read latency (median, max), and the generations kept in the store afterwards.

``--part throughput``: what the pipeline's 1M-row run does with the embedding, 1M x 20
float32 in 50k-row chunks: write it once (``write_stage``), open it (``read_stage``), then
read every chunk ``--passes`` times (one verified pass each, as k-means's Lloyd passes
read it); the median open and pass.  Run it on the code before and after a change (the
same script: it uses only the public API) to see what resolving a pointer per open costs;
CPU seconds are quoted beside wall seconds, which a shared machine's other jobs inflate.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import xarray as xr
from _common import emit, machine, median

from mkdist.storage import RunStore

FP = "sha256:" + "0" * 64


def version(v: int, n: int, chunk: int) -> xr.Dataset:
    """Version ``v`` of the polled stage: an embedding-like array and labels, all equal to v."""
    return xr.Dataset({"embedding": (("sample", "component"),
                                     da.full((n, 20), v, dtype=np.float32, chunks=(chunk, 20))),
                       "labels": (("sample",), da.full((n,), v, dtype=np.int32, chunks=chunk))},
                      attrs={"version": v})


def overwrite(url: str, versions: list[int], n: int, chunk: int) -> None:
    """The writer: each version in turn, as one overwrite of the stage."""
    store = RunStore.open(url, mode="r+")
    for v in versions:
        store.write_stage("model", version(v, n, chunk), overwrite=True)


def poll(url: str, writing) -> dict:
    """Read the stage until ``writing()`` is false, then once more; before each read, ask
    ``is_complete`` (the stage exists all along: a snapshot says so every time)."""
    store = RunStore.open(url)
    latencies, seen, failures, mixed, not_complete = [], [], collections.Counter(), 0, 0
    while True:
        last = not writing()
        try:
            not_complete += not store.is_complete("model")
        except Exception as e:  # noqa: BLE001
            failures[f"is_complete: {type(e).__name__}: {str(e)[:160]}"] += 1
        t0 = time.perf_counter()
        try:
            ds = store.read_stage("model")
            values = ds.compute()
            found = {ds.attrs["version"], *np.unique(values["embedding"].values).tolist(),
                     *np.unique(values["labels"].values).tolist()}
        except Exception as e:  # noqa: BLE001 -- a failed read is what is counted
            failures[f"{type(e).__name__}: {str(e)[:160]}"] += 1
        else:
            latencies.append(time.perf_counter() - t0)
            if len(found) == 1:
                seen.append(int(found.pop()))
            else:
                mixed += 1
        if last:
            break
    failed = sum(n for k, n in failures.items() if not k.startswith("is_complete"))
    return {"reads": len(latencies) + failed, "failed_reads": failed,
            "is_complete_false": not_complete, "is_complete_failed": sum(failures.values()) - failed,
            "mixed_reads": mixed, "whole_reads": len(seen), "versions_seen": sorted(set(seen)),
            "reads_in_version_order": seen == sorted(seen), "read_latency_median_s": median(latencies),
            "read_latency_max_s": max(latencies), "failures": dict(failures)}


def part_poll(args) -> dict:
    out = {}
    for where in args.locations.split(","):
        if where == "local":
            url = str(Path(tempfile.mkdtemp(prefix="mkdist-bench-snap-")) / "run.zarr")
        else:
            url = f"memory://mkdist-bench/{uuid.uuid4().hex}/run.zarr"
        store = RunStore.create(url, fingerprint=FP, params={"bench": "snapshot"})
        store.write_stage("model", version(0, args.n, args.chunk))
        versions = list(range(1, args.overwrites + 1))
        t0 = time.perf_counter()
        if where == "local":
            writer = subprocess.Popen([sys.executable, __file__, "--writer", url, "--n", str(args.n),
                                       "--chunk", str(args.chunk), "--versions",
                                       ",".join(map(str, versions))])
            result = poll(url, lambda writer=writer: writer.poll() is None)
            if writer.wait() != 0:
                raise SystemExit(f"the writer process failed (exit {writer.returncode})")
        else:
            thread = threading.Thread(target=overwrite, args=(url, versions, args.n, args.chunk))
            thread.start()
            result = poll(url, thread.is_alive)
            thread.join()
        result["writer_s"] = time.perf_counter() - t0
        fs, path = store._fs, store._path
        result["generations_kept"] = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)
                                            if ".gen-" in p and not p.endswith(".json")
                                            or ".partial-" in p)
        result["n_generations_kept"] = len(result["generations_kept"])
        del result["generations_kept"]
        out[where] = result
    return out


def part_throughput(args) -> dict:
    url = str(Path(tempfile.mkdtemp(prefix="mkdist-bench-snap-")) / "run.zarr")
    store = RunStore.create(url, fingerprint=FP, params={"bench": "throughput"})
    rng = np.random.default_rng(0)
    H = da.from_array(rng.normal(size=(1_000_000, 20)).astype(np.float32), chunks=(50_000, 20))
    ds = xr.Dataset({"embedding": (("sample", "component"), H)})
    t0 = time.perf_counter()
    store.write_stage("embedding", ds)
    write_s = time.perf_counter() - t0
    opens, passes, open_cpu, pass_cpu = [], [], [], []
    for _ in range(args.passes):
        t0, c0 = time.perf_counter(), time.process_time()
        emb = store.read_stage("embedding")["embedding"].data
        opens.append(time.perf_counter() - t0)
        open_cpu.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        emb.sum(axis=0).compute()
        passes.append(time.perf_counter() - t0)
        pass_cpu.append(time.process_time() - c0)
    # One open, many passes, as k-means does: the pointer is resolved once.
    emb = RunStore.open(url).read_stage("embedding")["embedding"].data
    t0 = time.perf_counter()
    for _ in range(args.passes):
        emb.sum(axis=0).compute()
    one_open_s = time.perf_counter() - t0
    return {"shape": [1_000_000, 20], "chunk_rows": 50_000, "passes": args.passes, "write_s": write_s,
            "open_median_s": median(opens), "pass_median_s": median(passes),
            # CPU seconds of this process (the threaded scheduler runs here): less sensitive
            # than wall time to the other jobs of a shared machine.
            "open_cpu_median_s": median(open_cpu), "pass_cpu_median_s": median(pass_cpu),
            "tasks_per_pass": len(emb.sum(axis=0).__dask_graph__()),
            "passes_after_one_open_s": one_open_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["poll", "throughput", "all"], default="all")
    ap.add_argument("--locations", default="local,memory")
    ap.add_argument("--overwrites", type=int, default=10)
    ap.add_argument("--n", type=int, default=200_000, help="rows of the polled stage")
    ap.add_argument("--chunk", type=int, default=20_000)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--writer", help=argparse.SUPPRESS)  # the second process of --part poll
    ap.add_argument("--versions", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        overwrite(args.writer, [int(v) for v in args.versions.split(",")], args.n, args.chunk)
        return
    dask.config.set(scheduler="threads")  # memory:// lives in this process
    out: dict = {"machine": machine(), "load_1min": os.getloadavg()[0],
                 "n": args.n, "chunk": args.chunk, "overwrites": args.overwrites}
    if args.part in ("poll", "all"):
        out["poll"] = part_poll(args)
    if args.part in ("throughput", "all"):
        out["throughput"] = part_throughput(args)
    emit(out)


if __name__ == "__main__":
    main()
