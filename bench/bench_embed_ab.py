"""A/B of the embed task's row function against another checkout (issue 34 item 1, last round).

    python bench/bench_embed_ab.py --n 200000 --rounds 5 --base-src /path/to/old/checkout
        fits W1's MKC model once (this checkout, seed 0, float32 views), pickles it, then runs
        ``embed_chunk`` over the same in-memory W1 rows in one process per checkout and round,
        this checkout and the base alternating (which goes first rotates each round); CPU time,
        one BLAS thread.  Prints JSON: us/row per round and medians, the ratio to the roofline
        roofline (``--roofline-us``; by default measured in this run: bench_roofline's primitives and
        ``roofline()`` in their own process each round, between the two sides, median of the
        rounds), and whether the two checkouts' embeddings are bit-identical (then so are the labels).

    python bench/bench_embed_ab.py --n 200000 --block-sweep 131,262 --rounds 10
        this checkout only, one process: the row function over sub-blocks of each size in turn
        (sizes up to the library's own, 262 rows for W1: larger ones are split by it)
        (alternating, ``--rounds`` passes each), CPU time per row, medians, and whether the sizes
        give the same bits.

The base runs with this interpreter and ``PYTHONPATH=<base-src>``, so only mkdist's code differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "embed_ab"


def _data(n: int):
    from mkdist.datasets import make_multiview_blobs

    views, y = make_multiview_blobs(n, random_state=0, view_dims=(32, 32), as_dask=False)
    return {k: np.ascontiguousarray(v) for k, v in views.items()}, y


def _prepare(n: int) -> Path:
    """W1's model fitted once on these rows (this checkout), pickled for both sides."""
    import mkdist

    path = OUT / f"model-{n}.pkl"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    views, _ = _data(n)
    est = mkdist.MultipleKernelClustering(n_clusters=10, kernels="rbf-grid", n_landmarks=1000, random_state=0)
    est.fit(views)
    path.write_bytes(pickle.dumps(est.model_))
    return path


def _child(n: int, model_path: str, repeats: int) -> dict:
    """In a fresh process: embed every row ``repeats`` times, CPU seconds of each, hash of the result."""
    from threadpoolctl import threadpool_limits

    import mkdist
    from mkdist.internals import embed_chunk

    model = pickle.loads(Path(model_path).read_bytes())
    views, _ = _data(n)
    blocks = [views[v] for v in model.view_names]
    with threadpool_limits(1):
        embed_chunk(model, *[b[:4096] for b in blocks])  # numba's load and the working arrays, untimed
        cpus = []
        for _ in range(repeats):
            c0 = time.process_time()
            H = embed_chunk(model, *blocks)
            cpus.append(time.process_time() - c0)
    digest = hashlib.sha256(np.ascontiguousarray(H).tobytes()).hexdigest()
    return {"mkdist": str(Path(mkdist.__file__).parent), "cpu_s": cpus, "us_per_row": median(cpus) / n * 1e6,
            "sha256": digest}


def _roofline_child() -> dict:
    """bench_roofline's primitives at the embed task's 262-row block, and the roofline from them."""
    from bench_roofline import primitives, roofline

    return roofline(primitives(262))


def _block_sweep(n: int, sizes: list[int], rounds: int) -> dict:
    from threadpoolctl import threadpool_limits

    from mkdist.internals import embed_chunk

    model = pickle.loads(_prepare(n).read_bytes())
    views, _ = _data(n)
    blocks = [views[v] for v in model.view_names]

    def embed(rows):
        # a call on at most the library's sub-block rows is one sub-block (sizes above it are split)
        return np.concatenate([embed_chunk(model, *[b[s:s + rows] for b in blocks]) for s in range(0, n, rows)])

    cpus: dict = {b: [] for b in sizes}
    sha = {}
    with threadpool_limits(1):
        for b in sizes:
            sha[b] = hashlib.sha256(embed(b).tobytes()).hexdigest()  # also warms numba and the buffers
        for r in range(rounds):
            for b in (sizes if r % 2 == 0 else sizes[::-1]):
                c0 = time.process_time()
                embed(b)
                cpus[b].append((time.process_time() - c0) / n * 1e6)
    return {"N": n, "rounds": rounds, "load_1min_end": os.getloadavg()[0],
            "us_per_row": {b: {"rounds": v, "median": median(v), "min": min(v)} for b, v in cpus.items()},
            "same_bits": len(set(sha.values())) == 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per process (its median is the round's)")
    ap.add_argument("--base-src", help="checkout to compare with (its mkdist/ is imported instead of this one)")
    ap.add_argument("--roofline-us", type=float, default=None,
                    help="us/row to compare with (default: measured each round, see above)")
    ap.add_argument("--block-sweep", help="comma-separated sub-block rows, timed in one process (see above)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--roofline-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.block_sweep:
        print(json.dumps(_block_sweep(args.n, [int(b) for b in args.block_sweep.split(",")], args.rounds), indent=1))
        return
    if args.child:
        print(json.dumps(_child(args.n, args.child, args.repeats)))
        return
    if args.roofline_child:
        print(json.dumps(_roofline_child()))
        return
    model = _prepare(args.n)
    sides = {"this": None, **({"base": args.base_src} if args.base_src else {})}
    runs: dict = {k: [] for k in sides}
    rooflines: list = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for i, side in enumerate(order):
            if i == 1 and args.roofline_us is None:  # between the sides: the same minute as both
                out = subprocess.run([sys.executable, __file__, "--roofline-child"], env=env, capture_output=True,
                                     text=True, check=True)
                rooflines.append(json.loads(out.stdout))
            side_env = {**env, "PYTHONPATH": sides[side]} if sides[side] else env
            out = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--repeats", str(args.repeats),
                                  "--child", str(model)], env=side_env, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(out.stdout))
    if args.roofline_us is None and not rooflines:  # one side only
        rooflines = [_roofline_child()]
    roof = args.roofline_us if args.roofline_us is not None else median(x["us_per_row"] for x in rooflines)
    res = {"N": args.n, "rounds": args.rounds, "load_1min_end": os.getloadavg()[0], "roofline_us_per_row": roof}
    if rooflines:
        res["roofline_rounds"] = rooflines
        # the distance GEMM at the input's own 32 columns instead of the augmented 34 (the least
        # the formula needs, at the rate measured for 34)
        res["roofline_us_per_row_k32"] = median(x["us_per_row"] - x["distance_gemm_us"] * 2 / 34 for x in rooflines)
    for side, rs in runs.items():
        us = [x["us_per_row"] for x in rs]
        res[side] = {"mkdist": rs[0]["mkdist"], "us_per_row_rounds": us, "us_per_row_median": median(us),
                     "over_roofline": median(us) / roof, "sha256": rs[0]["sha256"],
                     "same_bits_every_round": len({x["sha256"] for x in rs}) == 1}
        if rooflines:
            res[side]["over_roofline_k32"] = median(us) / res["roofline_us_per_row_k32"]
            res[side]["over_roofline_paired"] = median(u / x["us_per_row"] for u, x in zip(us, rooflines))
    if "base" in res:
        res["identical_embedding"] = res["this"]["sha256"] == res["base"]["sha256"]
        res["speedup_median"] = res["base"]["us_per_row_median"] / res["this"]["us_per_row_median"]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
