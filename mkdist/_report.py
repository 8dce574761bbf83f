"""Human- and machine-readable summaries of runs and stores (CLI, flow artifacts).

Everything here reads the one summary schema of :meth:`mkdist._base.MkdistEstimator.summary`
(plus the run's sizes, timings and scores), so every method is reported the same way and a
method that lacks an item (no kernel weights, no objective history) simply shows less.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ._stages import REPORT_ROWS, as_store, load_estimator, refuse_overlap, writer_lease
from .errors import InputValidationError

__all__ = ["summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary", "report_data",
           "write_report", "ReportDraft", "load_labels"]


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _pep_lines(pep: dict) -> list[str]:
    t = pep.get("t") or "K"
    lines = [f"| PEP (t = {t}) of the combined kernel | {_fmt(pep.get('combined'))} |"]
    if pep.get("combined_filtered") is not None:
        lines.append(f"| PEP (t = {t}) of the combined kernel after the graph filter | "
                     f"{_fmt(pep['combined_filtered'])} |")
    dropped = set(pep.get("dropped") or ())
    lines += [f"| PEP (t = {t}) of {n}{' (dropped: degenerate)' if n in dropped else ''} | {_fmt(v)} |"
              for n, v in (pep.get("base") or {}).items()]
    return lines


def summary_markdown(summary: dict, store: str | None = None) -> str:
    """A markdown report of a run: sizes, weights, timings, cluster sizes, diagnostics."""
    lines = [f"# mkdist run{f' `{store}`' if store else ''}", "", "| quantity | value |", "|---|---|"]
    for key in ("method", "estimator", "N", "n_landmarks", "n_clusters", "n_iter", "converged"):
        if summary.get(key) is not None:
            lines.append(f"| {key} | {_fmt(summary[key])} |")
    if summary.get("resumed_stages"):
        lines.append(f"| resumed stages | {', '.join(summary['resumed_stages'])} |")
    for k, v in (summary.get("scores") or {}).items():
        lines.append(f"| {k} | {v:.4f} |")
    if summary.get("timings"):
        lines += ["", "## Stage timings (s)", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {k.removesuffix('_s')} | {v:.2f} |" for k, v in summary["timings"].items()]
    for w in summary.get("weights") or []:
        labels = w["labels"] if len(w.get("labels") or []) == len(w["values"]) else list(range(len(w["values"])))
        lines += ["", f"## {w['name'][:1].upper()}{w['name'][1:]}", "", "| kernel / view | weight |", "|---|---|"]
        lines += [f"| {n} | {v:.4f} |" for n, v in zip(labels, w["values"])]
    if summary.get("cluster_sizes"):
        lines += ["", "## Cluster sizes", "", "| cluster | points |", "|---|---|"]
        lines += [f"| {i} | {s} |" for i, s in enumerate(summary["cluster_sizes"])]
    diag = summary.get("diagnostics") or {}
    if "lambda_K" in diag:
        lines += ["", "## Spectral diagnostics (MKC-AE Theorem 5.2)", "", "| quantity | value |", "|---|---|"]
        for k in ("lambda_K", "gap_threshold", "min_gap_ratio", "relative_gap_K", "theorem_condition_met"):
            if k in diag:
                lines.append(f"| {k} | {_fmt(diag[k])} |")
        lines += ["", "lambda_K is the K-th eigenvalue of (1/n) K_alpha; the theorem wants eigen-gaps of at "
                  "least 4/sqrt(n) (`gap_threshold`). `min_gap_ratio` < 1 is typical of real data and means "
                  "the out-of-sample bound is loose, not that the clustering failed."]
    if summary.get("pep"):
        lines += ["", "## Principal eigenvalue proportion (GMLKM seed, Definition 2)", "",
                  "| quantity | value |", "|---|---|"] + _pep_lines(summary["pep"])
        lines += ["", "Share of each kernel's spectrum in its top t eigenvalues: near 1 means strong "
                  "cluster structure, t/n (chance) means none."]
    return "\n".join(lines) + "\n"


def inspect_store(url: str, *, verify: str = "quick", clean: bool = False) -> dict:
    """What a store holds: root attributes, stage status, model summary (JSON-able).

    Parameters
    ----------
    url : str
    verify : {"quick", "full"}, default="quick"
        "quick" checks every stage's arrays and chunk listing against its marker; "full" also
        reads every chunk and compares its checksum.  Damaged stages are listed in
        ``problems``, naming the array and chunks.
    clean : bool, default=False
        First remove what crashed writes left (taking the store's writer lease, so it is
        refused while a run is live); the removed paths are in ``cleaned``.
    """
    info: dict[str, Any] = {"url": str(url)}
    if clean:
        with writer_lease(url, owner="mkdist inspect --clean"):
            info["cleaned"] = as_store(url).clean_partials()
    store = as_store(url, mode="r")
    info["attrs"] = {k: v for k, v in store.attrs.items() if k != "input_stats"}
    info["stages"] = store.stage_status(verify=verify)
    info["problems"] = [p for name, state in info["stages"].items() if state == "damaged"
                        for p in store.verify_stage(name, full=verify == "full")]
    holder = store.lease_holder()
    info["live_run"] = holder.describe() if holder is not None else None
    if info["stages"].get("model") == "complete":
        summary = load_estimator(store).summary()
        info["model"] = {**summary, "has_centroids": info["stages"].get("labels") == "complete"}
    if info["stages"].get("metrics") == "complete":
        info["summary"] = json.loads(store.read_stage("metrics").attrs["summary"])
    return info


def inspect_markdown(info: dict) -> str:
    lines = [f"store: {info['url']}", f"schema_version: {info['attrs'].get('schema_version')}",
             f"mkdist_version: {info['attrs'].get('mkdist_version')}", "stages:"]
    if info.get("live_run"):
        lines.insert(1, f"live run: {info['live_run']}")
    lines += [f"  {name:<14} {status}" for name, status in info["stages"].items()]
    if info.get("problems"):
        lines.append("damaged (re-running the same run recomputes these stages and the ones after them):")
        lines += [f"  {p}" for p in info["problems"]]
    if info.get("cleaned") is not None:
        lines.append(f"cleaned: {len(info['cleaned'])} leftover(s) of crashed writes removed")
        lines += [f"  {p}" for p in info["cleaned"]]
    auto = (info["attrs"].get("params") or {}).get("auto")
    if auto:
        lines.append(f"method chosen by auto: {auto['method']} {auto['params']} -- {auto['reason']}")
    model = info.get("model")
    if model:
        lines.append("model:")
        for k in ("method", "estimator", "views", "n_landmarks", "n_components", "has_centroids", "n_iter"):
            lines.append(f"  {k:<14} {model.get(k)}")
        for w in model.get("weights") or []:
            labels = w["labels"] if len(w.get("labels") or []) == len(w["values"]) else range(len(w["values"]))
            lines.append(f"  {w['name']}:")
            lines += [f"    {str(n):<40} {v:.4f}" for n, v in zip(labels, w["values"])]
        diag = model.get("diagnostics") or {}
        for k in ("lambda_K", "min_gap_ratio", "relative_gap_K"):
            if k in diag:
                lines.append(f"  {k:<14} {_fmt(diag[k])}")
        check = diag.get("weights_check")
        if check:
            verdict = ("agree" if check["agree"] else
                       "DIFFER: the choice of weights matters here; compare with weights='uniform'")
            lines.append(f"  learned vs uniform weights: landmark partitions ARI {check['ari']:.2f} ({verdict})")
        pep = model.get("pep")
        if pep:
            t = pep.get("t") or "K"
            lines.append(f"  PEP (t = {t}), share of each kernel's spectrum in its top t eigenvalues:")
            lines.append(f"    {'combined kernel':<40} {_fmt(pep.get('combined'))}")
            if pep.get("combined_filtered") is not None:
                lines.append(f"    {'combined, after the graph filter':<40} {_fmt(pep['combined_filtered'])}")
            dropped = set(pep.get("dropped") or ())
            lines += [f"    {n:<40} {_fmt(v)}{'  (dropped: degenerate)' if n in dropped else ''}"
                      for n, v in (pep.get("base") or {}).items()]
    summary = info.get("summary")
    if summary:
        lines.append("summary:")
        for k in ("N", "cluster_sizes", "scores", "timings"):
            if summary.get(k) is not None:
                lines.append(f"  {k:<14} {json.dumps(summary[k], default=_fmt)}")
    return "\n".join(lines)


def assignment_summary(store) -> dict:
    """N, cluster sizes, drift and a markdown table for an assignment output store."""
    import dask.array as da

    labels = store.read_stage("labels")["labels"].data
    sizes = da.bincount(labels).compute()
    drift = store.attrs.get("drift")
    md = ["# mkdist assignment", "", f"output: `{store.url}`; model: `{store.params.get('model_store')}`", ""]
    if drift:
        md += [("**DRIFT**: " + "; ".join(drift["reasons"])) if drift["drifted"] else "No drift beyond the thresholds.",
               "", "| signal | value | threshold |", "|---|---|---|",
               f"| share beyond the fit's 99th percentile of distance | {drift['share_beyond_fit_p99']:.4f} | "
               f"{drift['thresholds']['share_beyond_fit_p99']:g} |",
               f"| cluster proportions, total variation | {drift['cluster_tv']:.4f} | "
               f"{drift['thresholds']['cluster_tv']:g} |",
               f"| cluster proportions, PSI | {drift['cluster_psi']:.4f} | {drift['thresholds']['cluster_psi']:g} |"]
        md += [f"| view {v}: mean shift (fitted sd) / scale ratio | {d['mean_shift_sd']:.3f} / {d['scale_ratio']:.3f} | "
               f"{drift['thresholds']['mean_shift_sd']:g} / {drift['thresholds']['scale_ratio_max']:g} |"
               for v, d in drift["views"].items()]
        md.append("")
    md += ["| cluster | points |", "|---|---|"] + [f"| {i} | {int(n)} |" for i, n in enumerate(sizes)]
    return {"N": int(labels.shape[0]), "cluster_sizes": [int(n) for n in sizes], "output": str(store.url),
            "drift": drift, "drifted": bool(drift and drift["drifted"]), "markdown": "\n".join(md) + "\n"}


def report_data(url: Any) -> dict:
    """What the run report shows, read from a store: a few small arrays, never all rows.

    A run store gives its summary (the model's ``summary()`` with sizes, timings, scores and
    parameters) and the 2-D view of its report sample; an assignment store gives its cluster
    sizes against the model's, the distance distribution against the fit's 99th percentile,
    and the drift statistics.
    """
    import datetime

    store = as_store(url, mode="r")
    data: dict[str, Any] = {"store": str(store.url), "generated": datetime.datetime.now().isoformat(timespec="seconds")}
    labels = store.read_stage("labels")
    if "model_store" in store.params:  # an assignment
        model_store = as_store(store.params["model_store"], mode="r")
        fitted = json.loads(model_store.read_stage("metrics").attrs["summary"])
        summary = assignment_summary(store)
        n = int(labels.sizes["sample"])
        step = max(1, n // REPORT_ROWS)
        distance = np.asarray(labels["distance"][::step].values, dtype=np.float64)
        counts, edges = np.histogram(distance, bins=50)
        drift = summary["drift"] or {}
        # "summary" stays the fitted run's (its N, sizes, timings, parameters: the page shows it
        # as "Fitted model run"); the batch's facts and parameters go in "assignment".
        data.update(kind="assignment", title=f"mkdist assignment {store.url}",
                    summary={**fitted, "params": fitted.get("params") or dict(model_store.params)},
                    embedding_sample=None,
                    assignment={"N": summary["N"], "cluster_sizes": summary["cluster_sizes"],
                                "fitted_sizes": fitted["cluster_sizes"], "params": dict(store.params),
                                "distance_hist": {"edges": edges.tolist(), "counts": counts.tolist()},
                                "fit_p99": drift.get("fit_p99"), "drift": drift})
        return data
    summary = json.loads(store.read_stage("metrics").attrs["summary"])
    summary.setdefault("params", dict(store.params))
    data.update(kind="run", title=f"mkdist run {store.url}", summary=summary,
                embedding_sample=_embedding_sample(labels), assignment=None)
    return data


def _embedding_sample(labels) -> dict:
    """The report's 2-D view of the embedding, from a run's ``labels`` stage (its sample rows)."""
    coords = np.asarray(labels["report_embedding"].values[:, :2], dtype=np.float64)
    index = np.asarray(labels["report_index"].values)
    if "report_labels" in labels:
        sample_labels = np.asarray(labels["report_labels"].values)
    else:  # a store written before the labels stage kept the sample's labels: one read of them all
        sample_labels = np.asarray(labels["labels"].data[index].compute()) if index.size else np.zeros(0, dtype=int)
    return {"coords": coords.tolist(), "labels": sample_labels.tolist(),
            "what": f"first two principal components of the embedding on {index.size:,} evenly spaced rows"}


def write_report(url: Any, output: Any = None, *, format: str = "html", draft: ReportDraft | None = None) -> str:
    """Write the run report of a store: one self-contained HTML page, or a directory of PNGs.

    Parameters
    ----------
    url : str or RunStore
    output : str or Path, optional
        Default: next to the store, ``<store>.report.html`` (or ``<store>.report/`` for PNGs).
    format : {"html", "png"}, default="html"
    draft : ReportDraft, optional
        The run's draft (figures drawn while it ran); its figures are reused where they show
        what the finished store holds.  Without it every figure is drawn now.

    Returns
    -------
    str
        Where the report was written.
    """
    from ._report_html import build_figures, render_png, write_html

    if format not in ("html", "png"):
        raise InputValidationError(f"report format {format!r}; choose 'html' or 'png'.")
    store = as_store(url, mode="r")
    base = str(store.url).rstrip("/")
    target = str(output) if output is not None else f"{base}.report.html" if format == "html" else f"{base}.report"
    refuse_overlap(target, store=store)
    data = report_data(store)
    figures = build_figures(data, drawn=draft.figures() if draft is not None else None)
    # Both write atomically (temporary name, then rename; one put on an object store).
    if format == "png":
        render_png(data, target, figures)
    else:
        write_html(data, target, figures)
    return target


class ReportDraft:
    """A run's report, drawn while the run goes on: each figure in a background thread as soon
    as the stage it shows is stored, the rest by :func:`write_report` at the end.

    Importing matplotlib and drawing the six figures of a run cost ~1.2 s of CPU whatever N
    is; drawn after a 1M-row run of 20 s that was 8-10% of it (bench/RESULTS.md, "Run report
    cost").  The model's four figures (weights, objective, spectrum, PEP) need only the model
    stage, and while the workers embed and cluster the rows this process only waits on them,
    so the draft draws them then; the embedding sample is drawn once the labels stage is
    stored, while the metrics are computed; the end of the run is left with the cluster
    sizes.  Drawing starts after the fit, never during it: a thread holding the GIL beside the
    fit (which runs in this process) slowed it by more than its own CPU time.

    Use::

        draft = ReportDraft(store)
        for name in plan:
            run_stage(name, store, views)
            draft.stage_complete(name)
        write_report(store, draft=draft)

    A figure that fails in the background is drawn again at the end (where a failure is
    reported as for any report); a draft never fails the run.

    Attributes
    ----------
    background_cpu_s : float
        CPU seconds the background drawing took so far, for benchmarks.
    """

    def __init__(self, store: Any) -> None:
        self.store = store  # opened when a stage completes: a new run's store does not exist yet
        self.background_cpu_s = 0.0
        self._started: set[str] = set()
        self._thread: Any = None
        self._parts: list[Any] = []

    def stage_complete(self, name: str | None = None) -> None:
        """Call after each stage: draws in the background what the stored stages now show."""
        import threading

        from ._report_html import MODEL_FIGURES

        # (stage, figure kinds, their data read from the store): read here, not in the thread
        # (the next stage reads the same cached model, and the store is not shared across threads).
        phases = (("model", MODEL_FIGURES, lambda st: {"summary": load_estimator(st).summary()}),
                  ("labels", ("embedding",), lambda st: {"embedding_sample": _embedding_sample(st.read_stage("labels"))}))
        try:
            store = None
            for stage, kinds, read in phases:
                if stage in self._started:
                    continue
                store = store or as_store(self.store, mode="r")
                if not store.is_complete(stage):
                    continue
                self._started.add(stage)
                data = {"kind": "run", **read(store)}
                # One drawing at a time (matplotlib's font cache is shared): each waits for the last.
                self._thread = threading.Thread(target=self._draw, args=(data, kinds, self._thread),
                                                name=f"mkdist-report-{stage}", daemon=True)
                self._thread.start()
        except Exception:  # noqa: BLE001 -- what was not drawn here is drawn at the end
            return

    def _draw(self, data: dict, kinds: tuple[str, ...], previous: Any) -> None:
        import time

        from ._report_html import build_figures

        if previous is not None:
            previous.join()
        t0 = time.thread_time()
        try:
            figures = build_figures(data, kinds=kinds)
            for fig in figures.figures.values():
                fig.png()  # encoded here too: the page reuses the bytes
            self._parts.append(figures)
        except Exception:  # noqa: BLE001 -- drawn again by write_report, which reports failures
            pass
        finally:
            self.background_cpu_s += time.thread_time() - t0

    def figures(self) -> Any:
        """The figures drawn in the background so far, as one ``ReportFigures`` (waits for the
        drawing under way), or None."""
        from ._report_html import ReportFigures

        if self._thread is not None:
            self._thread.join()
        if not self._parts:
            return None
        merged = ReportFigures(source={})
        for part in self._parts:
            merged.figures.update(part.figures)
            merged.omitted.update(part.omitted)
            merged.kinds += part.kinds
            merged.source.update(part.source)
        return merged


def load_labels(source: Any, key: str) -> np.ndarray:
    """Ground-truth labels stored beside the views (``y`` in an .npz or a dataset variable)."""
    if isinstance(source, (str, Path)):
        path = str(source)
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as d:
                return np.asarray(d[key])
        import xarray as xr

        return np.asarray(xr.open_zarr(path, consolidated=False)[key].values)
    if hasattr(source, "data_vars"):
        return np.asarray(source[key].values)
    raise ValueError(f"cannot read labels {key!r} from {type(source).__name__}; pass y_true instead.")
