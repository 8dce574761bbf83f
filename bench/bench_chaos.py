"""Chaos at scale (issue 44, item 5): runs that are disturbed end with the labels of undisturbed ones.

    python bench/bench_chaos.py --rows 1000000 --kill-every 20 --s3-rows 100000 --fail-every 20

Prints one JSON object with two parts:

- ``worker_kills``: W1 data (two 32-feature views, 10 clusters, ``--rows`` rows) clustered
  by ``mkdist.cluster`` on a plain cluster (``dask scheduler`` + 2 ``dask worker`` processes, as an
  operator starts them).  First undisturbed, then with one worker process SIGKILLed every
  ``--kill-every`` seconds while the run lasts (its nanny starts another).  A worker restart
  takes seconds: killed more often than it restarts, a task can die on 4 workers and the run
  fails with KilledWorker (distributed's allowed-failures, 3; seen with a kill every 4 s on
  this machine).  Reports both wall
  times, the overhead, the kills and whether the labels are identical.
- ``s3_faults``: the same kind of run with input and store on a moto S3 server that every process
  reaches through a TCP proxy (``tests/conftest.py::TcpProxy``).  The proxy drops one HTTP request
  in ``--fail-every`` (5% at 20) by resetting its connection before the server sees it.  Runs
  undisturbed, then with the failures; reports the requests, the injected failures (each one was
  retried by s3fs/botocore, or the run would have failed), the overhead and whether the labels are
  identical.

Each part starts with an untimed warm-up run of 20,000 rows on the same cluster.  Needs the test
extras (moto).  The machine's figures: ``machine`` in the output.  On a shared
2-core machine use sizes that fit: the issue's 10M rows take tens of minutes per run there.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import W1, DaskProcesses, emit, free_port, machine, w1_input, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
#: Rows of the untimed warm-up run each part starts with.
WARMUP_ROWS = 20_000


def _cluster_run(source, store: str, client, **extra) -> tuple[np.ndarray, float]:
    import mkdist

    t0 = time.perf_counter()
    result = mkdist.cluster(source, store, W1["n_clusters"], kernels=W1["kernels"],
                            n_landmarks=extra.pop("n_landmarks", W1["n_landmarks"]), random_state=0, report=False,
                            **extra)
    labels = np.asarray(result.labels.compute())
    return labels, time.perf_counter() - t0


def _stop(procs: list) -> None:
    """Stop the scheduler and workers: SIGTERM, then SIGKILL what is still there after 30 s
    (a nanny restarting a killed worker can outlast DaskProcesses.close's wait)."""
    for p in procs[::-1]:
        p.terminate()
    deadline = time.monotonic() + 30
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_kills(rows: int, kill_every: float, workdir: Path) -> dict:
    from distributed import Client

    source = str(w1_input(rows))
    procs = DaskProcesses(2)
    try:
        with Client(procs.scheduler_address) as client:
            # Warm-up (imports, compilation in the workers), untimed, so the first timed run is not
            # charged for it.
            _cluster_run(str(w1_input(WARMUP_ROWS)), str(workdir / "warmup.zarr"), client)
            reference, undisturbed_s = _cluster_run(source, str(workdir / "undisturbed.zarr"), client)
            kills: list[float] = []
            done = threading.Event()

            def killer() -> None:
                t0 = time.perf_counter()
                while not done.wait(kill_every):
                    pids = sorted(client.run(os.getpid).values())
                    if not pids:
                        continue
                    # alternate between the workers, one at a time (each nanny restarts its own)
                    os.kill(pids[len(kills) % len(pids)], signal.SIGKILL)
                    kills.append(round(time.perf_counter() - t0, 1))

            thread = threading.Thread(target=killer, daemon=True)
            thread.start()
            t0 = time.perf_counter()
            try:
                labels, disturbed_s = _cluster_run(source, str(workdir / "disturbed.zarr"), client)
                error = None
            except Exception as exc:  # noqa: BLE001 - what ended the disturbed run is the measurement
                labels, disturbed_s, error = None, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
            finally:
                done.set()
                thread.join()
    finally:
        _stop(procs.procs)
    out = {"rows": rows, "workers": 2, "kill_every_s": kill_every, "kills": len(kills), "killed_at_s": kills,
           "undisturbed_s": round(undisturbed_s, 1), "disturbed_s": round(disturbed_s, 1),
           "finished": error is None}
    if error is not None:
        out["error"] = error[:400]
        return out
    return {**out, "overhead": round(disturbed_s / undisturbed_s, 3),
            "labels_identical": bool(np.array_equal(labels, reference))}


def s3_faults(rows: int, fail_every: int, workdir: Path) -> dict:
    import s3fs
    import xarray as xr
    from distributed import Client, LocalCluster

    sys.path.insert(0, str(ROOT))
    from tests.conftest import TcpProxy

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    log = open(workdir / "moto.log", "w")
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=log, stderr=log)
    proxy = TcpProxy(port)
    try:
        wait_for_port(port, "moto server", moto)
        credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": proxy.endpoint}
        os.environ.update(credentials)  # this process and the workers it starts reach s3 through the proxy
        fs = s3fs.S3FileSystem(endpoint_url=f"http://127.0.0.1:{port}", key="bench", secret="bench",
                               skip_instance_cache=True)
        fs.mkdir("chaos")
        local = w1_input(rows)
        source = "s3://chaos/input.zarr"
        xr.open_zarr(local, consolidated=False).to_zarr(source, mode="w", consolidated=False, zarr_format=3,
                                                        storage_options={"endpoint_url": f"http://127.0.0.1:{port}"})
        out = {"rows": rows, "fail_every": fail_every, "failed_share": round(1 / fail_every, 3)}
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, \
                Client(lc) as client:
            runs = {}
            _cluster_run(str(w1_input(WARMUP_ROWS)), str(workdir / "warmup.zarr"), client, n_landmarks=500)
            for name, every in (("undisturbed", 0), ("disturbed", fail_every)):
                proxy.fail_every, proxy.requests, proxy.failed = every, 0, 0
                labels, seconds = _cluster_run(source, f"s3://chaos/{name}.zarr", client, n_landmarks=500)
                runs[name] = labels
                out[f"{name}_s"] = round(seconds, 1)
                out[f"{name}_requests"] = proxy.requests
                out[f"{name}_failed_requests"] = proxy.failed
        out["retried_requests"] = out["disturbed_failed_requests"]  # each was retried: the run finished
        out["overhead"] = round(out["disturbed_s"] / out["undisturbed_s"], 3)
        out["labels_identical"] = bool(np.array_equal(runs["disturbed"], runs["undisturbed"]))
        return out
    finally:
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
            os.environ.pop(k, None)
        proxy.close()
        moto.terminate()
        moto.wait(timeout=30)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the worker-kill runs")
    ap.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker kills")
    ap.add_argument("--s3-rows", type=int, default=100_000, help="rows of the S3 runs (moto is slow)")
    ap.add_argument("--fail-every", type=int, default=20, help="one HTTP request in this many fails (20: 5%%)")
    ap.add_argument("--part", choices=["all", "worker-kills", "s3-faults"], default="all")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mkdist-bench-chaos-"))
    result = {"bench": "chaos", "machine": machine()}
    if args.part in ("all", "worker-kills"):
        result["worker_kills"] = worker_kills(args.rows, args.kill_every, workdir)
    if args.part in ("all", "s3-faults"):
        result["s3_faults"] = s3_faults(args.s3_rows, args.fail_every, workdir)
    emit(result)


if __name__ == "__main__":
    main()
