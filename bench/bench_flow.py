"""Flow overhead and resume (issue 4), printing JSON.

    python bench/bench_flow.py --part overhead --n 1000000 [--repeats 2]
    python bench/bench_flow.py --part resume --n 1000000

overhead: W1 end to end through `mkdist.cluster` (library, own LocalCluster) vs through
`cluster_flow` (the same LocalCluster settings, started by the flow), with a Prefect server
already running (the production set-up; started by this script, outside the timings) and
with Prefect's ephemeral mode (no server: a temporary one starts inside the run).
resume: the k-means stage fails once (an exception injected into the library's k-means
call, in this process), the flow fails; the re-run resumes. Stage timings of both runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from _common import emit, free_port, machine, median  # noqa: E402
from bench_pipeline import OUT, W1, w1_input  # noqa: E402


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(OUT / "prefect-home")}
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api"
    import urllib.request

    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise RuntimeError("prefect server did not start")


def library_run(src: str, store: str) -> float:
    from distributed import Client, LocalCluster

    import mkdist

    t0 = time.perf_counter()
    from mkdist.internals import worker_malloc_settings

    with worker_malloc_settings(), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c, Client(c):
        mkdist.cluster(src, store, random_state=0, overwrite=True, **W1)
    return time.perf_counter() - t0


def flow_run(src: str, store: str, api_url: str | None) -> float:
    code = (
        "import time, sys; t0 = time.perf_counter();"
        "from mkdist.flows import cluster_flow;"
        f"cluster_flow(source={src!r}, store={store!r}, random_state=0, overwrite=True, n_workers=2, **{W1!r});"
        "print(time.perf_counter() - t0)"
    )
    env = {**os.environ}
    if api_url:
        env["PREFECT_API_URL"] = api_url
    else:
        env.pop("PREFECT_API_URL", None)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    return wall, float(out.stdout.strip().splitlines()[-1])


def part_overhead(args):
    src = str(w1_input(args.n))
    store = str(OUT / "stores" / "flow-overhead.zarr")
    proc, url = start_server()
    rows = []
    try:
        for _ in range(args.repeats):
            for kind in ("library", "flow_server", "flow_ephemeral"):
                if os.path.exists(store):
                    shutil.rmtree(store)
                if kind == "library":
                    # In a fresh process too, so imports count the same way as in the flow runs.
                    code = ("import sys; sys.path.insert(0, 'bench'); import time; t0 = time.perf_counter();"
                            "from bench_flow import library_run;"
                            f"library_run({src!r}, {store!r}); print(time.perf_counter() - t0)")
                    t0 = time.perf_counter()
                    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                         cwd=str(OUT.parents[1]))
                    rows.append({"kind": kind, "wall_s": time.perf_counter() - t0,
                                 "in_process_s": float(out.stdout.strip().splitlines()[-1])})
                else:
                    wall, inner = flow_run(src, store, url if kind == "flow_server" else None)
                    rows.append({"kind": kind, "wall_s": wall, "in_process_s": inner})
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    med = {k: median([r["wall_s"] for r in rows if r["kind"] == k])
           for k in ("library", "flow_server", "flow_ephemeral")}
    # The three kinds run back to back within a repeat, so a per-repeat ratio cancels most of
    # the drift of a shared machine; its median is the figure to quote.
    per_repeat = [rows[i:i + 3] for i in range(0, len(rows), 3)]
    ratios = {kind: [r[j]["wall_s"] / r[0]["wall_s"] - 1 for r in per_repeat]
              for j, kind in ((1, "flow_server"), (2, "flow_ephemeral"))}
    return {"N": args.n, "runs": rows, "median_wall_s": med,
            "per_repeat_overhead": ratios,
            "median_per_repeat_overhead": {k: median(v) for k, v in ratios.items()},
            "overhead_flow_with_server": med["flow_server"] / med["library"] - 1,
            "overhead_flow_ephemeral": med["flow_ephemeral"] / med["library"] - 1, "target": "<= 0.10"}


def part_resume(args):
    from mkdist.flows import cluster_flow
    from mkdist.internals import kmeans_failing_once

    src = str(w1_input(args.n))
    store = str(OUT / "stores" / "flow-resume.zarr")
    if os.path.exists(store):
        shutil.rmtree(store)
    from mkdist.storage import RunStore

    t0 = time.perf_counter()
    try:
        with kmeans_failing_once():
            cluster_flow(source=src, store=store, random_state=0, n_workers=2, **W1)
        raise AssertionError("the first run should have failed")
    except RuntimeError as exc:
        run = RunStore.open(store)
        first = {"error": str(exc), "wall_s": time.perf_counter() - t0, "stage_status_after": run.stage_status(),
                 "stage_seconds": {s: float(run.read_stage(s).attrs["elapsed_s"])
                                   for s in ("landmarks", "model", "embedding")}}
    t0 = time.perf_counter()
    summary = cluster_flow(source=src, store=store, random_state=0, n_workers=2, **W1)
    second = {"wall_s": time.perf_counter() - t0, "timings": summary["timings"],
              "resumed_stages": summary["resumed_stages"]}
    fit = RunStore.open(store).read_stage("model").attrs
    return {"N": args.n, "first_run": first, "second_run": second,
            "model_fit_recorded_once": "mkdist_fit" in fit}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True, choices=["overhead", "resume"])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    emit({"bench": f"flow/{args.part}", "machine": machine(), "workload": W1, **globals()[f"part_{args.part}"](args)})


if __name__ == "__main__":
    main()
