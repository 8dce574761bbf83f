"""Requests one `mkdist run` makes to an object store, and what they cost.

A local moto S3 server (its own process) holds the input table, the run store and the labels;
`mkdist run` runs as a user runs it (its own local Dask cluster).  The server's access log
counts every request, the workers' included.  With ``--python`` (another environment's
interpreter, e.g. one installed from an older commit) the runs alternate between the two
codes on the same table.

    python bench/bench_s3_requests.py --n 2000 --repeats 2 [--python /path/to/old/python]

Prints JSON: per code, per run, wall seconds and requests by method and by object kind.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import MotoServer


def _kind(path: str) -> str:
    path = re.sub(r"\?.*", "", path)
    if path.endswith("zarr.json"):
        return "zarr.json"
    if "/c/" in path:
        return "chunk"
    if path.endswith(".json"):
        return "pointer/lease/manifest"
    if "/input/" in path or "/out/" in path:
        return "table"
    return "bucket/listing" if path.count("/") <= 1 else "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--python", default=None, help="a second interpreter to compare against")
    args = ap.parse_args()
    import s3fs

    from mkdist.datasets import write_customer_table

    work = Path(tempfile.mkdtemp(prefix="mkdist-s3req-"))
    server = MotoServer(work / "moto.log")
    try:
        fs = s3fs.S3FileSystem(key="k", secret="s", endpoint_url=server.endpoint, skip_instance_cache=True)
        fs.mkdir("bench")
        local = work / "customers.parquet"
        write_customer_table(local, args.n, n_clusters=4, row_group_rows=max(700, args.n // 20))
        fs.put(str(local), "s3://bench/input/customers.parquet", recursive=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        run_env = {**env, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": server.endpoint,
                   "AWS_DEFAULT_REGION": "us-east-1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        codes = {"this": sys.executable, **({"other": args.python} if args.python else {})}
        out: dict = {"n": args.n, "codes": codes, "runs": {c: [] for c in codes}}
        for rep in range(args.repeats):
            for code, python in codes.items():
                start = server.log_size()
                store = f"s3://bench/runs/{code}-{rep}.zarr"
                cmd = [python, "-m", "mkdist.cli", "run", "--input", "s3://bench/input/customers.parquet",
                       "--store", store, "--labels-out", f"s3://bench/out/{code}-{rep}.parquet",
                       "--n-clusters", "4", "--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id",
                       "--random-state", "0", "--quiet"]
                t0 = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
                wall = time.perf_counter() - t0
                if r.returncode != 0:
                    raise SystemExit(f"{code} run failed:\n{r.stderr[-3000:]}")
                time.sleep(0.5)  # the server logs a request after answering it
                reqs = server.request_lines(start)
                out["runs"][code].append({
                    "wall_s": round(wall, 2), "requests": len(reqs),
                    "by_method": dict(collections.Counter(m for m, _ in reqs)),
                    "by_kind": dict(collections.Counter(_kind(p) for _, p in reqs))})
                print(code, rep, out["runs"][code][-1], file=sys.stderr, flush=True)
        out["median"] = {c: {"wall_s": statistics.median(r["wall_s"] for r in runs),
                             "requests": statistics.median(r["requests"] for r in runs)}
                         for c, runs in out["runs"].items()}
        print(json.dumps(out, indent=1))
    finally:
        server.close()


if __name__ == "__main__":
    main()
