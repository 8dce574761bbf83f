"""Speed at the hardware's limit, second round (issue 34): a roofline for the embedding, and scaling.

    python bench/bench_roofline.py --part roofline --n 300000 --repeats 3
        per core (one BLAS thread): GEMM FLOP/s at the embed task's shapes, exp throughput, memory
        bandwidth -> the best achievable W1 embed rows/s; in the same run the embed row function on
        in-memory blocks (compiled route, NumPy route, the per-kernel route of before, the NumPy
        floor's embed) and the embed stage of ``mkdist.cluster`` on a plain LocalCluster(1 x 1)
    python bench/bench_roofline.py --part labels --n 1000000 --reference-python OLD/.venv/bin/python \
            --sets hw2sources,mfeat,uci_digit3,yale_a3,webkb
        the same labels as an older checkout? W1 through ``mkdist.cluster`` on LocalCluster(2 x 1),
        and MKC's defaults on shared multi-view sets (seed 0) as float64 and as float32 views; each
        interpreter in its own processes, this one with the compiled route and with NumPy's
    python bench/bench_roofline.py --part scaling --n 1000000 --workers 1,2 --repeats 3
        W1 end to end on plain LocalCluster(W x 1) against the NumPy floor split over W processes:
        per-worker rows/s of the embed and k-means stages, speedup over 1 worker (default
        --workers: 1, 2, 4, ... up to the machine's cores)

Workload W1 (``_common.W1``): two 32-feature float32 views, 10 clusters, ``rbf-grid`` (3 RBF
kernels per view, one exp each by squarings / square roots), 1000 landmarks, K = 10, d = 2K = 20
embedding columns.  The floor is ``bench_speed.floor``: the same model's embedding and 20 Lloyd
passes in NumPy, data already in memory, in W single-thread processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
from _common import OUT, W1, emit, machine, median, multiview_sets, run_pipeline, w1_input
from bench_speed import _floor_embed, _labels_with, floor

N_LANDMARKS, DIM, VIEWS, N_COMPONENTS = 1000, 32, 2, 20


# ----------------------------------------------------------------------------- primitives
def _best(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def gemm_rate(m: int, k: int, n: int, dtype, reps: int = 30) -> float:
    """FLOP/s of (m, k) @ (k, n) into a preallocated output, one thread."""
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(m, k)).astype(dtype), rng.normal(size=(k, n)).astype(dtype)
    C = np.empty((m, n), dtype=dtype)
    return 2.0 * m * k * n / _best(lambda: np.matmul(A, B, out=C), reps)


def elementwise_ns(rows: int, cols: int, reps: int = 30) -> dict:
    """ns per element of the embed task's elementwise operations on a cache-sized float32 block."""
    rng = np.random.default_rng(0)
    out = {}
    for dt in (np.float32, np.float64):
        a = -rng.uniform(0, 5, size=(rows, cols)).astype(dt)
        b = np.empty_like(a)
        name = np.dtype(dt).name
        out[f"exp_numpy_{name}"] = _best(lambda a=a, b=b: np.exp(a, out=b), reps) / a.size * 1e9
    a = rng.uniform(0, 1, size=(rows, cols)).astype(np.float32)
    b = np.empty_like(a)
    out["multiply_float32"] = _best(lambda: np.multiply(a, a, out=b), reps) / a.size * 1e9
    out["sqrt_float32"] = _best(lambda: np.sqrt(a, out=b), reps) / a.size * 1e9
    out["copy_float32"] = _best(lambda: np.copyto(b, a), reps) / a.size * 1e9
    x = -a * 5
    try:
        import numexpr

        numexpr.set_num_threads(1)
        ne_exp = lambda: numexpr.evaluate("exp(x)", local_dict={"x": x}, out=b)  # noqa: E731
        out["exp_numexpr_float32"] = _best(ne_exp, reps) / a.size * 1e9
    except ImportError:
        out["exp_numexpr_float32"] = None
    try:
        import numba

        @numba.njit(fastmath=True)
        def nexp(src, dst):
            for i in range(src.shape[0]):
                for j in range(src.shape[1]):
                    dst[i, j] = np.exp(src[i, j])

        out["exp_numba_float32"] = _best(lambda: nexp(x, b), reps) / a.size * 1e9
    except ImportError:
        out["exp_numba_float32"] = None
    return out


def bandwidth_gbs(n: int = 2**25, reps: int = 5) -> dict:
    """Streaming memory bandwidth of one core (arrays of n float64 = 256 MiB, far past the caches):
    copy (2 x 8 bytes an element) and add (3 x 8 bytes), write-allocate traffic not counted."""
    a = np.ones(n)
    b = np.ones(n)
    c = np.empty(n)
    return {"copy": 16.0 * n / _best(lambda: np.copyto(c, a), reps) / 1e9,
            "add": 24.0 * n / _best(lambda: np.add(a, b, out=c), reps) / 1e9}


def primitives(block_rows: int) -> dict:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        rates = {}
        for dt in (np.float32, np.float64):
            name = np.dtype(dt).name
            rates[name] = {
                # the view's augmented distance GEMM ([x, |x|^2, 1] against [2cL, -c, -c|l|^2])
                "distance": gemm_rate(block_rows, DIM + 2, N_LANDMARKS, dt),
                # the one projection of the combined kernel rows on H_n D_n^-1
                "projection": gemm_rate(block_rows, N_LANDMARKS, N_COMPONENTS, dt),
                # the NumPy route's per-kernel projection ([dl Q, 1/n] padded to 24 columns)
                "projection_per_kernel": gemm_rate(block_rows, N_LANDMARKS, 24, dt),
                "square_1024": gemm_rate(1024, 1024, 1024, dt, reps=5),
            }
        elem = elementwise_ns(block_rows, N_LANDMARKS)
        bw = bandwidth_gbs()
    return {"block_rows": block_rows, "gemm_flops": rates, "elementwise_ns_per_element": elem,
            "bandwidth_gb_s": bw}


def roofline(prim: dict) -> dict:
    """The best achievable W1 embed rows/s of one core from the measured primitives.

    Arithmetic of a W1 row, the least the formula needs: per view one distance GEMM row
    (2 x 34 x 1000 FLOP) and one exp per landmark (the view's three RBF kernels from one exp:
    2000 exps a row), and one projection row of the combined kernel (2 x 1000 x 20 FLOP); each
    at the rate measured at the embed task's block shape.  Memory: the input row read and the
    embedding row written (2 x 32 x 4 + 20 x 4 bytes) at the streaming bandwidth.  The squarings,
    square roots, row sums and the weighted sum of the kernels are left out (they are the gap
    a perfect kernel would still pay: ~4 x 1000 elementwise operations a row).
    """
    r = prim["gemm_flops"]["float32"]
    e = prim["elementwise_ns_per_element"]
    t = {
        "distance_gemm_us": VIEWS * 2 * (DIM + 2) * N_LANDMARKS / r["distance"] * 1e6,
        "projection_gemm_us": 2 * N_LANDMARKS * N_COMPONENTS / r["projection"] * 1e6,
        "exp_us": VIEWS * N_LANDMARKS * e["exp_numpy_float32"] / 1e3,
    }
    compute = sum(t.values())
    memory = (VIEWS * DIM * 4 + N_COMPONENTS * 4) / (prim["bandwidth_gb_s"]["copy"] * 1e9) * 1e6
    best = max(compute, memory)
    return {**t, "compute_us": compute, "memory_us": memory, "bound": "compute" if compute >= memory else "memory",
            "us_per_row": best, "rows_per_s": 1e6 / best}


# ----------------------------------------------------------------------------- the embed task
def _per_kernel_rows(blocks: list, model) -> np.ndarray:
    """The embed row function before issue 34: each kernel projected on its own, then summed."""
    proj = model.projected_kernels
    w2 = model.kernel_weights**2
    H = np.zeros((blocks[0].shape[0], model.n_components))
    for j, G in proj.rows(dict(zip(model.view_names, blocks))):
        H += w2[proj.index[j]] * G
    H /= np.maximum(np.linalg.norm(H, axis=1, keepdims=True), np.finfo(np.float64).tiny)
    return H.astype(model.dtype)


def _rows_per_s(fn, N: int, repeats: int) -> dict:
    """Wall and CPU time of fn() over N rows, one thread, best and median of ``repeats``."""
    from threadpoolctl import threadpool_limits

    walls, cpus = [], []
    with threadpool_limits(1):
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
    return {"wall_s": walls, "cpu_s": cpus, "rows_per_s_median": N / median(walls),
            "rows_per_s_best": N / min(walls), "us_per_row_cpu_median": median(cpus) / N * 1e6,
            "rows_per_s_cpu_median": N / median(cpus)}


#: The compiled step's first call in a fresh process, with numba's cache in NUMBA_CACHE_DIR.
_FIRST_CALL = """
import time
import numpy as np
from mkdist.internals import combine_compiled
src = np.random.default_rng(0).uniform(0, 1, (8, 16)).astype(np.float32)
t0 = time.perf_counter()
combine_compiled(src, np.array([0, 2, 4]), np.ones((3, 16), np.float32), np.zeros(3), np.ones(3),
                        np.ones((8, 3)), 1, True, np.zeros((8, 16), np.float32), np.empty((8, 3)), np.empty((8, 3)),
                        0, 1e-12)
print(time.perf_counter() - t0)
"""


def first_call_s() -> dict:
    """Seconds from mkdist imported to the compiled step's first result in a new process (numba's
    import included):
    with an empty cache (compiles and writes it) and then with that cache (loads it)."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        run = [float(subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                                    check=True).stdout) for _ in range(2)]
    return {"cold_cache_s": run[0], "warm_cache_s": run[1]}


def _embed_task_s(run: dict) -> float:
    """Worker seconds in the embed stage's row tasks (the embedding written by the same task)."""
    return sum(v for k, v in (run.get("task_compute_s") or {}).items() if "embed" in k)


def _warm_args(dtype) -> tuple:
    src = np.ones((2, 4), dtype=dtype)
    return (src, np.array([0]), np.ones((1, 4), dtype=dtype), np.zeros(1), np.ones(1), np.ones((2, 1)), 1, True,
            np.zeros((2, 4), dtype=dtype), np.empty((2, 1)), np.empty((2, 1)), 0, 1e-12)


def _with_route(route: str):
    """Set which route of the fused step runs (the environment is read at every block)."""
    os.environ["MKDIST_NUMBA"] = "0" if route == "numpy" else "1"


def part_roofline(args) -> dict:
    import xarray as xr

    import mkdist
    from mkdist.internals import cache_block_rows, combine_compiled, compiled_available, embed_chunk

    block_rows = cache_block_rows(N_LANDMARKS, 2 * 4)  # what MKC's embed uses at 1000 float32 landmarks
    prim = primitives(block_rows)
    roof = roofline(prim)
    N = args.n
    routes = ["compiled", "numpy"] if compiled_available() else ["numpy"]
    first_call = first_call_s() if "compiled" in routes else None
    if first_call is not None:
        # Compiled once into numba's cache before any timing: the workers of every run load it,
        # as they do on a machine where mkdist has run before (the cold cost is reported apart).
        combine_compiled(*_warm_args(np.float32))
    # The embed stage on one worker (a plain LocalCluster(1 x 1)), each route in a fresh cluster
    # (the workers read MKDIST_NUMBA when they start).
    stages = {}
    for route in routes:
        _with_route(route)
        runs = [run_pipeline(N, OUT / "stores" / f"roofline-{route}-{N}.zarr", cluster="plain", n_workers=1)
                for _ in range(args.repeats)]
        stages[route] = {"embed_s": [r["stages"]["embed_s"] for r in runs],
                         # the workers' seconds in the embed tasks themselves (task stream)
                         "embed_task_compute_s": [_embed_task_s(r) for r in runs],
                         "task_compute_s": runs[-1].get("task_compute_s"),
                         "end_to_end_s": [r["end_to_end_s"] for r in runs],
                         "rows_per_s_median": N / median([r["stages"]["embed_s"] for r in runs]),
                         "scores": runs[-1]["scores"], "load_1min_after": os.getloadavg()[0]}
    store = runs[-1]["store"]
    est = mkdist.load_estimator(store)
    model = est.model_
    ds = xr.open_zarr(w1_input(N), consolidated=False)
    views = [np.ascontiguousarray(ds[v].values) for v in model.view_names]

    def over_blocks(fn, rows):
        return lambda: [fn([v[s:s + rows] for v in views], model) for s in range(0, N, rows)]

    task = {}
    for route in routes:
        _with_route(route)
        # the library's own walk over sub-blocks, as in a task
        task[route] = _rows_per_s(lambda: embed_chunk(model, *views), N, args.repeats)
    _with_route(routes[0])
    task["per_kernel_before"] = _rows_per_s(over_blocks(_per_kernel_rows, cache_block_rows(N_LANDMARKS, 4)), N,
                                            args.repeats)
    named = dict(zip(model.view_names, views))
    task["numpy_floor"] = _rows_per_s(lambda: _floor_embed(model, named, 512), N, args.repeats)
    # Same rows, same model: how far the routes are from each other and from the code before.
    ref = np.concatenate(over_blocks(_per_kernel_rows, 4096)())
    got = {}
    for route in routes:
        _with_route(route)
        got[route] = embed_chunk(model, *views)
    _with_route(routes[0])
    diffs = {r: float(np.abs(g - ref).max()) for r, g in got.items()}
    best_route = routes[0]
    table = {
        "roofline": {"rows_per_s": roof["rows_per_s"], "us_per_row": roof["us_per_row"]},
        # CPU time, one thread: the machine is shared, and a wall clock counts the other jobs' turns.
        **{f"embed_task_{k}": {"rows_per_s": v["rows_per_s_cpu_median"], "us_per_row": v["us_per_row_cpu_median"],
                               "over_roofline": roof["rows_per_s"] / v["rows_per_s_cpu_median"],
                               "rows_per_s_wall": v["rows_per_s_median"]}
           for k, v in task.items()},
        **{f"embed_stage_1_worker_{k}": {"rows_per_s": v["rows_per_s_median"],
                                         "us_per_row": 1e6 / v["rows_per_s_median"],
                                         "over_roofline": roof["rows_per_s"] / v["rows_per_s_median"]}
           for k, v in stages.items()},
    }
    return {"N": N, "primitives": prim, "roofline": roof, "compiled_first_call": first_call, "embed_task": task,
            "embed_stage_1_worker": stages,
            "table": table, "max_abs_diff_vs_per_kernel_route": diffs,
            "target": "embed task within 2x of the roofline at 1 worker",
            "embed_task_over_roofline": table[f"embed_task_{best_route}"]["over_roofline"],
            "embed_stage_over_roofline": table[f"embed_stage_1_worker_{best_route}"]["over_roofline"]}


# ----------------------------------------------------------------------------- scaling
def part_scaling(args) -> dict:
    workers = [int(w) for w in args.workers.split(",")]
    N = args.n
    rounds = []
    for _ in range(args.repeats):
        row = {}
        for W in workers:
            store = OUT / "stores" / f"scaling-{W}-{N}.zarr"
            load = os.getloadavg()[0]
            pipe = run_pipeline(N, store, cluster="plain", n_workers=W)
            fl = floor(N, pipe["store"], 512, n_procs=W)
            shutil.rmtree(store, ignore_errors=True)
            row[W] = {"load_1min_before": load, "pipeline": pipe, "floor": fl,
                      "ratio_over_floor": pipe["end_to_end_s"] / fl["total_s"]}
        rounds.append(row)

    def med(W, f):
        return median([f(rd[W]) for rd in rounds])

    table = {}
    for W in workers:
        e2e, emb = med(W, lambda x: x["pipeline"]["end_to_end_s"]), med(W, lambda x: x["pipeline"]["stages"]["embed_s"])
        km = med(W, lambda x: x["pipeline"]["stages"]["kmeans_s"])
        f_tot, f_emb = med(W, lambda x: x["floor"]["total_s"]), med(W, lambda x: x["floor"]["embed_s"])
        f_lloyd = med(W, lambda x: x["floor"]["lloyd_s"])
        named = sum(med(W, lambda x, k=k: x["pipeline"]["stages"][k]) for k in ("sample_s", "fit_s", "embed_s",
                                                                                  "kmeans_s", "write_s"))
        task = med(W, lambda x: _embed_task_s(x["pipeline"]))
        table[W] = {"end_to_end_s": e2e, "embed_s": emb, "kmeans_s": km, "named_stages_s": named,
                    "embed_task_compute_s": task, "embed_task_rows_per_s_per_worker": N / task if task else None,
                    "outside_named_stages_s": e2e - named,
                    "embed_rows_per_s_per_worker": N / (W * emb), "kmeans_rows_per_s_per_worker": N / (W * km),
                    "floor_total_s": f_tot, "floor_embed_s": f_emb, "floor_lloyd_s": f_lloyd,
                    "floor_embed_rows_per_s_per_process": N / (W * f_emb),
                    "ratio_over_floor": med(W, lambda x: x["ratio_over_floor"]),
                    "scores": rounds[-1][W]["pipeline"]["scores"]}
    one = workers[0]
    for W in workers:
        t = table[W]
        t["embed_speedup"] = table[one]["embed_s"] / t["embed_s"]
        t["kmeans_speedup"] = table[one]["kmeans_s"] / t["kmeans_s"]
        t["end_to_end_speedup"] = table[one]["end_to_end_s"] / t["end_to_end_s"]
        t["floor_embed_speedup"] = table[one]["floor_embed_s"] / t["floor_embed_s"]
        t["floor_speedup"] = table[one]["floor_total_s"] / t["floor_total_s"]
    return {"N": N, "workers": workers, "speedup_over": one, "rounds": rounds, "table": table,
            "targets": ">= 12x embed from 1 to 16 workers; end to end <= 1.0x the floor at every W"}


def _cpu() -> dict:
    """The CPU model and the BLAS NumPy calls (its kernel family decides the GEMM rates)."""
    from threadpoolctl import threadpool_info

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 None) if os.path.exists("/proc/cpuinfo") else None
    blas = [{k: i.get(k) for k in ("internal_api", "version", "architecture")} for i in threadpool_info()
            if i.get("user_api") == "blas"]
    return {"cpu_model": model, "blas": blas}


# ----------------------------------------------------------------------------- same labels
#: Run by each interpreter: MKC's defaults (seed 0) on shared sets, float64 and float32 views,
#: labels saved to argv[2] (an .npz); only API every mkdist version has.
_SETS_JOB = """
import json, sys
import numpy as np
from mkdist import MultipleKernelClustering
sets, out = json.loads(sys.argv[1]), sys.argv[2]
labels = {}
for name, path in sets.items():
    d = np.load(path)
    views = [d[k] for k in sorted((k for k in d.files if k.startswith("view")), key=lambda k: int(k[4:]))]
    k = len(np.unique(d["y"]))
    for dt in ("float64", "float32"):
        v = [np.asarray(x, dtype=dt) for x in views]
        labels[f"{name}/{dt}"] = MultipleKernelClustering(k, random_state=0).fit(v).labels_
np.savez(out, **labels)
"""


def _sets_labels(python: str, sets: dict, tag: str, numba: str) -> dict:
    import json
    import subprocess

    out = OUT / f"labels-sets-{tag}.npz"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "MKDIST_NUMBA": numba}
    r = subprocess.run([python, "-c", _SETS_JOB, json.dumps({k: str(v) for k, v in sets.items()}), str(out)],
                       capture_output=True, text=True, env=env, cwd=str(OUT), timeout=3600)
    if r.returncode:
        raise SystemExit(f"{python}: {r.stderr[-2000:]}")
    with np.load(out) as d:
        return {k: d[k] for k in d.files}


def part_labels(args) -> dict:
    import sys

    import xarray as xr

    import mkdist

    if not args.reference_python:
        raise SystemExit("--part labels needs --reference-python (the interpreter of an older checkout)")
    OUT.mkdir(parents=True, exist_ok=True)
    y = xr.open_zarr(w1_input(args.n), consolidated=False)["y"].values
    # W1 end to end, each run its own process and LocalCluster(2 x 1): the older checkout, this
    # one compiled and this one on NumPy, in an order that rotates every round (the machine is
    # shared: only the same round compares).
    kinds = {"reference": (args.reference_python, None), "compiled": (sys.executable, "1"),
             "numpy": (sys.executable, "0")}
    names = list(kinds)
    seconds: dict = {k: [] for k in kinds}
    labels: dict = {}
    for r in range(args.repeats):
        for kind in names[r % 3:] + names[:r % 3]:
            python, flag = kinds[kind]
            if flag is not None:
                os.environ["MKDIST_NUMBA"] = flag
            lab, info = _labels_with(python, args.n, kind, W1)
            seconds[kind].append(info["seconds"])
            # a checkout and route gives the same labels every run (same seed, same bits)
            assert np.array_equal(lab, labels.setdefault(kind, lab)), f"{kind}: labels differ run to run"
    ref = labels["reference"]
    out = {"N": args.n, "w1": {"seconds": seconds, "seconds_median": {k: median(v) for k, v in seconds.items()},
                               "reference": {"scores": mkdist.clustering_scores(y, ref)}}}
    routes = {"compiled": "1", "numpy": "0"}
    for route in routes:
        lab = labels[route]
        out["w1"][route] = {"scores": mkdist.clustering_scores(y, lab),
                            "identical_labels": bool(np.array_equal(lab, ref)),
                            "rows_differing_up_to_renaming": int(round((1 - mkdist.clustering_accuracy(ref, lab))
                                                                       * len(ref))),
                            "ari_vs_reference": mkdist.ari(ref, lab)}
    os.environ["MKDIST_NUMBA"] = "1"
    every = multiview_sets()
    sets = {name: every[name] for name in args.sets.split(",")}
    old = _sets_labels(args.reference_python, sets, "reference", "1")
    new = {route: _sets_labels(sys.executable, sets, route, flag) for route, flag in routes.items()}
    cells = {}
    for key, lab in old.items():
        truth = np.load(sets[key.split("/")[0]])["y"]
        cells[key] = {"acc_reference": mkdist.clustering_accuracy(truth, lab), **{
            route: {"identical_labels": bool(np.array_equal(new[route][key], lab)),
                    "acc": mkdist.clustering_accuracy(truth, new[route][key]),
                    "ari_vs_reference": mkdist.ari(lab, new[route][key])} for route in routes}}
    out["sets"] = cells
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True, choices=["roofline", "scaling", "labels"])
    ap.add_argument("--reference-python", help="--part labels: the Python of an older mkdist checkout")
    ap.add_argument("--sets", default="hw2sources,mfeat,uci_digit3,yale_a3,webkb",
                    help="--part labels: shared multi-view sets (bench/_common.multiview_sets names)")
    ap.add_argument("--n", type=int, default=None, help="rows (default: 300000 roofline, 1000000 scaling)")
    ap.add_argument("--repeats", type=int, default=3)
    cores = os.cpu_count() or 1
    default_workers = ",".join(str(w) for w in (1, 2, 4, 8, 16, 32, 64) if w <= cores)
    ap.add_argument("--workers", default=default_workers, help=f"scaling: worker counts (default {default_workers})")
    args = ap.parse_args()
    if args.n is None:
        args.n = {"roofline": 300_000, "labels": 300_000}.get(args.part, 1_000_000)
    from mkdist.internals import compiled_available

    where = {**machine(), **_cpu(), "load_1min_at_start": os.getloadavg()[0]}
    emit({"bench": f"roofline/{args.part}", "machine": where,
          "numba": compiled_available(), "workload": W1, **globals()[f"part_{args.part}"](args)})


if __name__ == "__main__":
    main()
