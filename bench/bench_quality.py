"""Quality of every method with its defaults on every shared multi-view data set (issue 15).

    python bench/bench_quality.py [--datasets a,b] [--methods m1,m2] [--seeds 5] [--jobs 1]
                                  [--tag NAME] [--timeout 120] [--markdown]

Every data set of ``shared/data/multiview/`` and UCI mfeat (6 views); every registered
method with its defaults (and with ``scale="minmax"`` / ``"standard"`` where it has
``scale``), ``method="auto"`` (the rule of ``mkdist.choose_method``), and two baselines:

* ``kmeans``: scikit-learn ``KMeans(n_init=10)`` on the min-max-scaled concatenation of the views;
* ``avg-kernel``: average-kernel k-means, i.e. ``MultipleKernelClustering(weights="uniform")``
  with the same (default) kernels as ``mkc``.

``nystrom`` clusters one view: it gets the min-max-scaled concatenation (what its refusal of
several views tells a user to do).  Every fit runs in a child process (forked after the
imports and the data load, one BLAS thread) with a hard ``--timeout``; a fit that times out
stops the other seeds of that method on that data set (they are recorded as not run).
Results are appended as JSON lines to ``bench/out/quality/<tag>.jsonl``; cells already there
are skipped, so an interrupted run continues where it stopped.  Errors are recorded with the
exception class and message; an exception that is not an ``mkdist.errors.MkdistError`` is a
bug and is counted as such.

Prints JSON (every cell aggregated over seeds, plus the summary per method); ``--markdown``
prints the tables of bench/RESULTS.md instead.
"""

from __future__ import annotations

import os

# One BLAS thread per process (set before NumPy loads): the machine is shared, and forked
# children inherit it.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import OUT, emit, load_multiview, machine, multiview_sets, read_jsonl, run_forked  # noqa: E402

RESULTS_DIR = OUT / "quality"
BASELINES = ("kmeans", "avg-kernel")
#: Methods with a ``scale`` parameter get two more columns.
SCALED = ("mkc", "rff-power", "mv-rff-power", "late-fusion")


def dataset_names() -> list[str]:
    return list(multiview_sets())


def load_dataset(name: str) -> tuple[list[np.ndarray], np.ndarray]:
    return load_multiview(multiview_sets()[name])


def describe(views, y) -> dict:
    dense = [float(np.count_nonzero(v)) / v.size for v in views]
    return {"n": int(y.shape[0]), "views": len(views), "dims": [int(v.shape[1]) for v in views],
            "K": int(np.unique(y).size), "density": [round(x, 4) for x in dense]}


def method_names() -> list[str]:
    import mkdist

    names = []
    for m in mkdist.available_methods():
        names.append(m)
        if m in SCALED:
            names += [f"{m}+minmax", f"{m}+standard"]
    return ["auto", *names, *BASELINES]


def minmax_concat(views) -> np.ndarray:
    from sklearn.preprocessing import MinMaxScaler

    return MinMaxScaler().fit_transform(np.hstack([np.asarray(v, dtype=np.float64) for v in views]))


def fit_one(method: str, views, K: int, seed: int) -> tuple[np.ndarray, dict]:
    """Fit one method with its defaults; returns (labels, extra facts to record)."""
    import mkdist

    extra: dict = {}
    if method == "kmeans":
        from sklearn.cluster import KMeans

        return KMeans(K, n_init=10, random_state=seed).fit(minmax_concat(views)).labels_, extra
    if method == "avg-kernel":
        est = mkdist.MultipleKernelClustering(K, weights="uniform", random_state=seed)
    elif method == "auto":
        choice = mkdist.choose_method(views, K)
        extra["auto"] = {"method": choice.method, "params": choice.params, "reason": choice.reason}
        est = choice.make_estimator(K, random_state=seed)
    else:
        name, _, scale = method.partition("+")
        cls = mkdist.get_method(name)
        est = cls(K, random_state=seed, **({"scale": scale} if scale else {}))
    X = [minmax_concat(views)] if not type(est).multi_view else views
    est.fit(X)
    if hasattr(est, "kernel_weights_") and method in ("mkc", "avg-kernel"):
        w2 = np.asarray(est.kernel_weights_) ** 2
        extra["top_weight_share"] = float(w2.max() / w2.sum())
    diag = getattr(est, "diagnostics_", None) or {}
    if "weights_check" in diag:
        extra["weights_check"] = diag["weights_check"]
    return np.asarray(est.labels_), extra


def _child(conn, method, views, y, seed):
    """Run one fit in the forked child; send a JSON-able record back."""
    from mkdist.errors import MkdistError
    from mkdist.metrics import clustering_scores

    rec: dict = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            labels, extra = fit_one(method, views, int(np.unique(y).size), seed)
            rec["fit_s"] = time.perf_counter() - t0
        rec.update(status="ok", **clustering_scores(y, labels), **extra)
        names = sorted({type(w.message).__name__ if isinstance(w.message, Warning) else w.category.__name__
                        for w in caught if issubclass(w.category, (RuntimeWarning, UserWarning))})
        rec["warnings"] = names
    except MkdistError as exc:
        rec = {"status": "refused", "error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # noqa: BLE001 - not an mkdist error: a bug, recorded as such
        rec = {"status": "bug", "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc(limit=6)[-3000:]}
    conn.send(rec)
    conn.close()


def run_cell(method, views, y, seed, timeout) -> dict:
    return run_forked(_child, (method, views, y, seed), timeout)


def run(args) -> None:
    import mkdist  # noqa: F401 - imported once here, before the children fork

    path = RESULTS_DIR / f"{args.tag.split(',')[-1]}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["dataset"], r["method"], r["seed"]) for r in read_jsonl(path)}
    for ds in args.datasets:
        todo = [(m, s) for m in args.methods for s in range(args.seeds) if (ds, m, s) not in done]
        if not todo:
            continue
        views, y = load_dataset(ds)
        info = describe(views, y)
        stopped: set[str] = set()
        for method, seed in todo:
            if method in stopped:
                rec = {"status": "not-run", "error": "an earlier seed timed out"}
            else:
                rec = run_cell(method, views, y, seed, args.timeout)
                if rec["status"] == "timeout":
                    stopped.add(method)
            rec.update(dataset=ds, method=method, seed=seed, **info)
            with path.open("a") as f:
                f.write(json.dumps(rec, default=float) + "\n")
            print(f"{ds:18s} {method:22s} seed {seed}: {rec['status']:8s} "
                  f"acc={rec.get('acc', float('nan')):.3f} fit={rec.get('fit_s', float('nan')):.1f}s",
                  flush=True)


# ----------------------------------------------------------------------------- aggregation
def aggregate(records: list[dict], seeds: int) -> dict:
    """Per (dataset, method): mean/std of ACC and NMI over seeds, median fit time, status."""
    cells: dict[tuple[str, str], list[dict]] = {}
    info: dict[str, dict] = {}
    for r in records:
        if r["seed"] >= seeds:
            continue
        cells.setdefault((r["dataset"], r["method"]), []).append(r)
        info[r["dataset"]] = {k: r[k] for k in ("n", "views", "dims", "K", "density")}
    out = {}
    for key, rs in cells.items():
        ok = [r for r in rs if r["status"] == "ok"]
        bad = [r for r in rs if r["status"] != "ok"]
        cell = {"runs": len(rs), "ok": len(ok), "status": "ok" if not bad else bad[0]["status"]}
        if bad:
            cell["error"] = bad[0].get("error")
        if ok and not bad:
            for k in ("acc", "nmi"):
                v = np.array([r[k] for r in ok])
                cell[k] = {"mean": float(v.mean()), "std": float(v.std())}
            cell["fit_s"] = float(np.median([r["fit_s"] for r in ok]))
            cell["fit_s_max"] = float(np.max([r["fit_s"] for r in ok]))
            if "auto" in ok[0]:
                cell["auto"] = ok[0]["auto"]
            if "top_weight_share" in ok[0]:
                cell["top_weight_share"] = float(np.mean([r["top_weight_share"] for r in ok]))
            if "weights_check" in ok[0]:
                cell["weights_check"] = ok[0]["weights_check"]
        out[key] = cell
    return {"info": info, "cells": out}


def summarize(agg: dict, datasets: list[str], methods: list[str]) -> dict:
    """Per method: data sets where it beats each baseline (mean ACC), mean rank, counts."""
    cells = agg["cells"]

    def acc(ds, m):
        c = cells.get((ds, m))
        return c["acc"]["mean"] if c and "acc" in c else None

    ranks: dict[str, list[float]] = {m: [] for m in methods}
    for ds in datasets:
        # Ranked among the methods run on this set; one without a result (refused, timeout)
        # ranks last, ties share the mean rank.
        ran = [m for m in methods if (ds, m) in cells]
        score = {m: acc(ds, m) if acc(ds, m) is not None else -1.0 for m in ran}
        for m in ran:
            better = sum(1 for o in ran if score[o] > score[m])
            ties = sum(1 for o in ran if score[o] == score[m])
            ranks[m].append(better + (ties + 1) / 2)
    out = {}
    for m in methods:
        row = {"mean_rank": float(np.mean(ranks[m])) if ranks[m] else None}
        for b in BASELINES:
            if b == m:
                continue
            wins = sum(1 for ds in datasets if acc(ds, m) is not None and acc(ds, b) is not None
                       and acc(ds, m) > acc(ds, b))
            row[f"beats_{b}"] = wins
        statuses = [cells.get((ds, m), {}).get("status", "missing") for ds in datasets]
        row["counts"] = {s: statuses.count(s) for s in sorted(set(statuses))}
        times = [cells[(ds, m)].get("fit_s_max") for ds in datasets if (ds, m) in cells
                 and "fit_s_max" in cells[(ds, m)]]
        row["over_60s"] = sum(1 for t in times if t > 60)
        row["n_datasets"] = len(datasets)
        out[m] = row
    return out


def learned_vs_uniform(agg: dict, datasets: list[str]) -> dict:
    """SimpleMKKM weights (mkc) against uniform weights (avg-kernel), same kernels: mean ACC."""
    cells = agg["cells"]
    wins = {"learned": [], "uniform": [], "tie": []}
    for ds in datasets:
        a, b = cells.get((ds, "mkc"), {}), cells.get((ds, "avg-kernel"), {})
        if "acc" not in a or "acc" not in b:
            continue
        d = a["acc"]["mean"] - b["acc"]["mean"]
        wins["learned" if d > 0.005 else "uniform" if d < -0.005 else "tie"].append(ds)
    return wins


def _fmt(c: dict | None, key: str) -> str:
    if c is None:
        return ""
    if key in c:
        return f"{c[key]['mean']:.3f}±{c[key]['std']:.3f}"
    return {"timeout": "timeout", "refused": "refused", "bug": "**bug**", "not-run": "timeout"}.get(
        c["status"], c["status"])


def markdown(agg: dict, datasets: list[str], methods: list[str], summary: dict, lvu: dict) -> str:
    cells, info = agg["cells"], agg["info"]
    lines = []
    head = "| data set | n | views | dims | K | " + " | ".join(f"`{m}`" for m in methods) + " |"
    sep = "|---" * (5 + len(methods)) + "|"
    notes: dict[str, str] = {}
    for what, title in (("acc", "ACC (mean±std over seeds)"), ("nmi", "NMI (mean±std over seeds)")):
        lines += [f"**{title}**", "", head, sep]
        for ds in datasets:
            i = info.get(ds)
            if i is None:
                continue
            dims = ",".join(str(d) for d in i["dims"])
            if len(dims) > 24:
                dims = dims[:21] + "..."
            row = [ds, str(i["n"]), str(i["views"]), dims, str(i["K"])]
            for m in methods:
                c = cells.get((ds, m))
                text = _fmt(c, what)
                if c is not None and "error" in c:
                    notes.setdefault(c["error"], f"E{len(notes) + 1}")
                    text += f" ({notes[c['error']]})"
                if c is not None and what == "acc" and "acc" in c:
                    best = max((cells[(ds, o)]["acc"]["mean"] for o in methods
                                if (ds, o) in cells and "acc" in cells[(ds, o)]), default=None)
                    if best is not None and c["acc"]["mean"] == best:
                        text = f"**{text}**"
                row.append(text)
            lines.append("| " + " | ".join(row) + " |")
        if what == "acc":
            for b in BASELINES:
                lines.append(f"| beats `{b}` (data sets) | | | | | " + " | ".join(
                    "" if m == b else str(summary[m][f"beats_{b}"]) for m in methods) + " |")
            lines.append("| mean rank (ACC) | | | | | " + " | ".join(
                f"{summary[m]['mean_rank']:.1f}" for m in methods) + " |")
            lines.append("| ran / refused / timeout / bug | | | | | " + " | ".join(
                "/".join(str(summary[m]["counts"].get(s, 0) + (summary[m]["counts"].get("not-run", 0)
                                                             if s == "timeout" else 0))
                         for s in ("ok", "refused", "timeout", "bug"))
                + (f" ({summary[m]['counts']['missing']} not run)" if summary[m]["counts"].get("missing") else "")
                for m in methods) + " |")
        lines.append("")
    lines += ["**Fit time, median over seeds (s)**", "", head, sep]
    for ds in datasets:
        i = info.get(ds)
        if i is None:
            continue
        row = [ds, str(i["n"]), str(i["views"]), "", str(i["K"])]
        for m in methods:
            c = cells.get((ds, m))
            row.append(f"{c['fit_s']:.1f}" if c and "fit_s" in c else _fmt(c, "fit_s"))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("| fits over 60 s (data sets) | | | | | " + " | ".join(
        str(summary[m]["over_60s"]) for m in methods) + " |")
    lines.append("")
    if notes:
        lines += ["Errors:", ""]
        lines += [f"- {tag}: {err}" for err, tag in notes.items()]
        lines.append("")
    lines.append(f"Learned (SimpleMKKM, `mkc`) vs uniform weights (`avg-kernel`), mean ACC, ties within "
                 f"0.005: learned wins on {len(lvu['learned'])} ({', '.join(lvu['learned'])}), uniform on "
                 f"{len(lvu['uniform'])} ({', '.join(lvu['uniform'])}), tie on {len(lvu['tie'])}.")
    auto = [(ds, cells[(ds, 'auto')]['auto']) for ds in datasets if (ds, "auto") in cells
            and "auto" in cells[(ds, "auto")]]
    if auto:
        lines += ["", "`method=\"auto\"` chose:", ""]
        lines += [f"- {ds}: `{a['method']}` {a['params']} ({a['reason']})" for ds, a in auto]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="all", help="comma-separated names, or 'all'")
    ap.add_argument("--methods", default="all", help="comma-separated columns, or 'all'")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="data sets run side by side (the machine is shared)")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--tag", default="current",
                    help="results file bench/out/quality/<tag>.jsonl; a comma-separated list is read in order "
                         "(later files replace earlier records of the same cell) and runs append to the last")
    ap.add_argument("--markdown", action="store_true", help="print the RESULTS.md tables (no fits)")
    ap.add_argument("--report-only", action="store_true", help="print the JSON of the stored results (no fits)")
    args = ap.parse_args()
    args.datasets = dataset_names() if args.datasets == "all" else args.datasets.split(",")
    args.methods = method_names() if args.methods == "all" else args.methods.split(",")
    if not (args.markdown or args.report_only):
        if args.jobs > 1:
            # Each job appends whole lines to the same file (O_APPEND writes of one line do not
            # interleave), so the results file and its resume logic stay one.
            ctx = mp.get_context("fork")
            procs = [ctx.Process(target=run,
                                 args=(argparse.Namespace(**{**vars(args), "datasets": args.datasets[j::args.jobs]}),))
                     for j in range(args.jobs)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        else:
            run(args)
    # Several tags: a later file's record replaces an earlier one's for the same cell and seed.
    latest = {}
    for tag in args.tag.split(","):
        for r in read_jsonl(RESULTS_DIR / f"{tag}.jsonl"):
            latest[(r["dataset"], r["method"], r["seed"])] = r
    records = [r for r in latest.values() if r["dataset"] in args.datasets and r["method"] in args.methods]
    present = [m for m in args.methods if any(r["method"] == m for r in records)]
    agg = aggregate(records, args.seeds)
    datasets = [d for d in args.datasets if d in agg["info"]]
    summary = summarize(agg, datasets, present)
    lvu = learned_vs_uniform(agg, datasets)
    if args.markdown:
        print(markdown(agg, datasets, present, summary, lvu))
        return
    emit({"bench": "quality", "machine": machine(), "tag": args.tag, "seeds": args.seeds,
          "timeout_s": args.timeout, "datasets": agg["info"],
          "cells": {f"{d}/{m}": c for (d, m), c in agg["cells"].items()},
          "summary": summary, "learned_vs_uniform": lvu})


if __name__ == "__main__":
    main()
