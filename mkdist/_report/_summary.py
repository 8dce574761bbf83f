"""Human- and machine-readable summaries of runs and stores (CLI, flow artifacts).

Everything here reads the one summary schema of :meth:`mkdist._methods._base.MkdistEstimator.summary`
(plus the run's sizes, timings and scores), so every method is reported the same way and a
method that lacks an item (no kernel weights, no objective history) simply shows less.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._core._cluster import compute
from .._pipeline._stages import REPORT_ROWS, as_store, load_estimator, refuse_overlap, writer_lease
from ..errors import InputValidationError
from ._tables import _fmt, missing_text

__all__ = ["summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary", "report_data",
           "write_report", "ReportDraft", "load_labels"]


#: What ``theorem_condition_met`` says, for the readers who see it False on a good clustering.
THEOREM_NOTE = ("`theorem_condition_met` False means only that a sufficient condition of the MKC-AE stability "
                "theorem (every eigen-gap up to K at least 4/sqrt(n)) does not hold, so its error bound does not "
                "apply; it is False on nearly all real data and says nothing about this clustering's quality.")


def _structure_lines(structure: dict | None, indent: str) -> list[str]:
    """The keep_structured test of a fit (``mkdist._core._structure``): its verdict, and per view
    its z (alignment with the other views, in null standard deviations)."""
    if not structure:
        return []
    lines = [f"{indent}views tested for structure the other views share: {structure['note']}"]
    lines += [f"{indent}  {v:<38} z {z:8.1f}{'' if kept else '  (weight 0)'}"
              for v, z, kept in zip(structure["views"], structure["z"], structure["kept"])]
    return lines


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


def choice_lines(choice: dict | None, indent: str = "  ") -> list[str]:
    """The K rule's verdict as ``mkdist inspect`` and the markdown summary show it: the verdict in
    the user's words (``k_verdict``), what the confidence means, the votes, the candidates, the rule."""
    if not choice:
        return []
    from .._core._nclusters import TRUSTED_CONFIDENCE, k_verdict  # scipy: not at `import mkdist.pipeline`

    asked = choice.get("asked")
    if choice.get("chosen_by_fit"):
        head = f"n_clusters={json.dumps(asked)}: {k_verdict(choice)}"
    else:
        head = f"K = {asked} given; the K rule says: {k_verdict(choice)}"
    cands = ", ".join(f"{k} ({s:.2f})" for k, s in (choice.get("candidates") or [])[:8])
    k_lo, k_hi = choice.get("k_range") or ("?", "?")
    spectra = choice.get("n_resamples", 0) + 1
    flat = choice.get("no_structure_share") or 0.0
    votes = choice.get("votes")
    evidence = choice.get("evidence")
    lines = [f"{indent}{head}"]
    if evidence:
        lines.append(f"{indent}  confidence {choice['confidence']:.2f}: of the bench's choices resting on a "
                     f"{evidence!r}, that share had the labels' K; below {TRUSTED_CONFIDENCE} K is a guess")
    if votes is not None or not evidence:
        share = float(votes if votes is not None else choice["confidence"])
        lines.append(f"{indent}  votes {share:.2f}: share of the {spectra} landmark spectra (all, and resamples "
                     f"of 80%) whose largest gap over k = 1..{k_hi} is at K"
                     + (f" ({flat:.2f} had it at k = 1: one connected group)" if flat else ""))
    lines += [f"{indent}  runner-up {choice['runner_up']}; candidates (K: share of the spectra whose largest gap "
              f"in {k_lo}..{k_hi} is there) {cands}",
              f"{indent}  rule {choice.get('rule')}, K searched in {k_lo}..{k_hi}, "
              f"{choice.get('n_landmarks')} landmarks, {choice.get('n_neighbors')} neighbours"]
    return lines


def summary_markdown(summary: dict, store: str | None = None) -> str:
    """A markdown report of a run: sizes, weights, timings, cluster sizes, diagnostics."""
    lines = [f"# mkdist run{f' `{store}`' if store else ''}", "", "| quantity | value |", "|---|---|"]
    for key in ("method", "estimator", "N", "n_landmarks", "n_clusters", "n_iter", "converged"):
        if summary.get(key) is not None:
            lines.append(f"| {key} | {_fmt(summary[key])} |")
    choice = summary.get("n_clusters_choice")
    if choice and choice.get("chosen_by_fit"):
        from .._core._nclusters import k_verdict

        lines.append(f"| K choice | {k_verdict(choice)} ({choice['rule']}) |")
    if summary.get("resumed_stages"):
        lines.append(f"| resumed stages | {', '.join(summary['resumed_stages'])} |")
    if summary.get("missing"):
        lines.append(f"| missing cells | {missing_text(summary['missing'])} |")
    if (summary.get("scheduler") or {}).get("description"):
        lines.append(f"| computed on | {summary['scheduler']['description']} |")
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
                  "the out-of-sample bound is loose, not that the clustering failed.",
                  "", THEOREM_NOTE]
    if diag.get("structure"):
        st = diag["structure"]
        lines += ["", "## Views tested for shared structure", "", st["note"], "", "| view | z | enters the fit |",
                  "|---|---|---|"]
        lines += [f"| {v} | {z:.1f} | {'yes' if kept else 'no (weight 0)'} |"
                  for v, z, kept in zip(st["views"], st["z"], st["kept"])]
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
    from mkdist.storage._remote import probe

    probe(url, what="store")  # a wrong key or an unreachable endpoint: one line, not a traceback
    info: dict[str, Any] = {"url": str(url)}
    # Opened before the lease is taken: a store this mkdist refuses gets no lease object written.
    store = as_store(url, mode="r")
    if clean:
        with writer_lease(url, owner="mkdist inspect --clean"):
            info["cleaned"] = as_store(url).clean_partials()
    info["attrs"] = {k: v for k, v in store.attrs.items() if k != "input_stats"}
    info["stages"] = store.stage_status(verify=verify)
    info["problems"] = [p for name, state in info["stages"].items() if state == "damaged"
                        for p in store.verify_stage(name, full=verify == "full")]
    holder = store.lease_holder()
    info["live_run"] = holder.describe() if holder is not None else None
    if info["stages"].get("model") == "complete":
        summary = load_estimator(store, k_hint=True).summary()
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
        for k in ("method", "estimator", "views", "n_clusters", "n_landmarks", "n_components", "has_centroids",
                  "n_iter"):
            lines.append(f"  {k:<14} {model.get(k)}")
        lines += choice_lines(model.get("n_clusters_choice"), "  ")
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
        lines += _structure_lines(diag.get("structure"), "  ")
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
    record = info["attrs"].get("missing")
    if record:
        # An assignment records its counts at the root; a run's are in its summary.
        counted = {**record, **((summary or {}).get("missing") or {})}
        lines.append(f"missing cells: {missing_text(counted)}" if "rows" in counted else
                     f"missing cells: imputed ({record.get('fill')}); {record.get('cells', 0):,} cells")
        if record.get("columns"):
            top = sorted(record["columns"].items(), key=lambda kv: -kv[1])
            lines.append("  by column: " + ", ".join(f"{c} {n:,}" for c, n in top[:8])
                         + (f" and {len(top) - 8} more" if len(top) > 8 else ""))
    params = info["attrs"].get("params") or {}
    if params.get("model_store"):
        lines.append(f"assignment of new rows with the model in {params['model_store']}")
    drift = info["attrs"].get("drift")
    if drift:
        lines += drift_lines(drift)
    return "\n".join(lines)


def drift_lines(drift: dict) -> list[str]:
    """An assignment's drift, as ``mkdist inspect`` shows it: the verdict, then each signal."""
    th = drift.get("thresholds") or {}
    verdict = ("DRIFTED: " + "; ".join(drift.get("reasons") or [])) if drift.get("drifted") else \
        "no drift beyond the thresholds"
    lines = [f"drift: {verdict}"]
    for key, what in (("share_beyond_fit_p99", "share beyond the fit's 99th percentile of distance"),
                      ("cluster_tv", "cluster proportions, total variation"),
                      ("cluster_psi", "cluster proportions, PSI")):
        if key in drift:
            lines.append(f"  {what:<54} {drift[key]:.4f} (threshold {th.get(key, float('nan')):g})")
    for view, d in (drift.get("views") or {}).items():
        lines.append(f"  {'view ' + view + ': mean shift (fitted sd) / scale ratio':<54} "
                     f"{d['mean_shift_sd']:.3f} / {d['scale_ratio']:.3f} (thresholds {th.get('mean_shift_sd', 0):g} / "
                     f"{th.get('scale_ratio_max', 0):g})")
    return lines


def assignment_summary(store) -> dict:
    """N, cluster sizes, drift and a markdown table for an assignment output store."""
    import dask.array as da

    labels = store.read_stage("labels")["labels"].data
    sizes = compute(da.bincount(labels))[0]
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
        md += [f"| view {v}: mean shift (fitted sd) / scale ratio | "
               f"{d['mean_shift_sd']:.3f} / {d['scale_ratio']:.3f} | "
               f"{drift['thresholds']['mean_shift_sd']:g} / {drift['thresholds']['scale_ratio_max']:g} |"
               for v, d in drift["views"].items()]
        md.append("")
    md += ["| cluster | points |", "|---|---|"] + [f"| {i} | {int(n)} |" for i, n in enumerate(sizes)]
    missing = store.attrs.get("missing")
    if missing:
        md += ["", f"Missing cells: {missing_text(missing)}."]
    return {"N": int(labels.shape[0]), "cluster_sizes": [int(n) for n in sizes], "output": str(store.url),
            "missing": missing,
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
                    summary=fitted,
                    embedding_sample=None,
                    assignment={"N": summary["N"], "cluster_sizes": summary["cluster_sizes"],
                                "fitted_sizes": fitted["cluster_sizes"], "params": dict(store.params),
                                "distance_hist": {"edges": edges.tolist(), "counts": counts.tolist()},
                                "fit_p99": drift.get("fit_p99"), "drift": drift})
        return data
    summary = json.loads(store.read_stage("metrics").attrs["summary"])
    _with_k_hint(summary, store)
    data.update(kind="run", title=f"mkdist run {store.url}", summary=summary,
                embedding_sample=_embedding_sample(labels), assignment=None)
    return data


def _embedding_sample(labels) -> dict:
    """The report's 2-D view of the embedding, from a run's ``labels`` stage (its sample rows):
    ``coords`` (n, 2) and ``labels`` (n,) as arrays (20k-row lists took 0.1 s to build)."""
    import dask

    # A few kB, read here: through the run's Dask cluster each read was a round trip to a
    # worker (0.2-0.3 s on a busy 2-core machine).
    with dask.config.set(scheduler="synchronous"):
        coords = np.asarray(labels["report_embedding"].values[:, :2], dtype=np.float64)
        sample_labels = np.asarray(labels["report_labels"].values, dtype=np.int64)
    return {"coords": coords, "labels": sample_labels,
            "what": f"first two principal components of the embedding on {coords.shape[0]:,} evenly spaced rows"}


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
    from ._figures import build_figures
    from ._files import render_png, write_html

    if format not in ("html", "png"):
        raise InputValidationError(f"report format {format!r}; choose 'html' or 'png'.")
    store = as_store(url, mode="r")
    base = str(store.url).rstrip("/")
    target = str(output) if output is not None else f"{base}.report.html" if format == "html" else f"{base}.report"
    refuse_overlap(target, store=store)
    data = report_data(store)
    figures = build_figures(data, drawn=draft.figures() if draft is not None else None)
    if format == "html":
        # The profiles (pandas frames) go to the page only: the report data stays JSON.
        data = {**data, **_profiles_of(store)}
    # Both write atomically (temporary name, then rename; one put on an object store).
    if format == "png":
        render_png(data, target, figures)
    else:
        write_html(data, target, figures)
    return target


def _profiles_of(store) -> dict[str, Any]:
    """The store's profiles (and an assignment's model's, as ``fit_profiles``) for the page."""
    from .._pipeline._profiles import read_profiles

    out: dict[str, Any] = {"profiles": read_profiles(store)}
    if "model_store" in store.params:
        out["fit_profiles"] = read_profiles(as_store(store.params["model_store"], mode="r"))
    return out


class ReportDraft:
    """A run's report, drawn while the run goes on: each figure by a drawing process as soon as
    the stage it shows is stored, the rest by :func:`write_report` at the end.

    Importing matplotlib and drawing the six figures of a run cost ~1.2 s of CPU whatever N
    is; drawn after a 1M-row run of 20 s that was 8-10% of it (bench/RESULTS.md, "Run report
    cost").  The model's four figures (weights, objective, spectrum, PEP) need only the model
    stage, the cluster sizes and the embedding sample only the labels stage, so a drawing process
    (``mkdist._report._worker``, started with the draft, at a lower priority) imports
    matplotlib while the model is fitted, draws the model's figures while the workers embed
    the rows, and the cluster sizes and the embedding sample while the metrics are computed;
    the end of the run is left with assembling the page.  A process, not a thread: a drawing
    thread held the GIL beside the Dask scheduler that a LocalCluster runs in this process and
    slowed the embed stage by more than its CPU time.

    Use::

        with ReportDraft(ctx) as draft:
            for name in ctx.stages:
                run_stage(name, ctx)
                draft.stage_complete(name)
            write_report(ctx.store, draft=draft)

    What the process does not deliver (it failed, it is slow, it could not start) is drawn by
    :func:`write_report`, which reports failures as for any report; a draft never fails a run.

    Attributes
    ----------
    background_cpu_s : float
        CPU seconds of the drawing process (its imports included), known once its figures
        were collected; for benchmarks.
    foreground_s : float
        Seconds the run spent in :meth:`stage_complete` (reading what to draw, sending it).
    timeline : dict of str to float
        ``time.time()`` of the events of the drawing: ``sent_<stage>`` (this process), and from
        the drawing process ``imported`` (its imports done) and ``answered_<stage>``; plus
        ``import_cpu_s``, the CPU seconds of its imports.  For benchmarks.
    """

    #: Seconds :meth:`figures` waits for the drawing process before drawing in this one.
    timeout_s = 60.0

    def __init__(self, store: Any) -> None:
        """``store``: the run's context (``RunContext``: its model is read once for the run and
        the K rule's hint drawn here is the one its summary shows), or a store or its URL."""
        import subprocess
        import sys
        import tempfile
        import weakref

        from .._pipeline._context import RunContext

        self._context = store if isinstance(store, RunContext) else None
        # A URL is opened when a stage completes: a new run's store does not exist yet.
        self.store = store.store if isinstance(store, RunContext) else store
        self.background_cpu_s = 0.0
        self.foreground_s = 0.0
        self.timeline: dict[str, float] = {}
        self._started: set[str] = set()
        self._sent: list[tuple[str, dict]] = []
        self._buffer = b""
        self._dir = tempfile.mkdtemp(prefix="mkdist-report-")
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "mkdist._report._worker"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        except OSError:
            self._proc = None
        self._finalizer = weakref.finalize(self, _stop_drawing, self._proc, self._dir)

    def __enter__(self) -> ReportDraft:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stage_complete(self, name: str | None = None) -> None:
        """Call after each stage: sends the drawing process what the stored stages now show."""
        from ._figures import MODEL_FIGURES
        from ._files import save_report_data

        # (stage, figure kinds, their data read from the store)
        estimator = self._context.estimator if self._context is not None else None
        phases = (("model", MODEL_FIGURES, lambda store: _model_report_data(store, estimator)),
                  ("labels", ("cluster_sizes", "embedding"), _labels_report_data))
        if self._proc is None or self._proc.poll() is not None:
            return
        t0 = time.perf_counter()
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
                request = {"data": save_report_data(data, Path(self._dir) / stage), "kinds": list(kinds),
                           "out_dir": self._dir}
                self._proc.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
                self._sent.append((stage, data))
                self.timeline[f"sent_{stage}"] = time.time()
        except Exception:  # noqa: BLE001 -- what was not sent is drawn at the end
            pass
        finally:
            self.foreground_s += time.perf_counter() - t0

    def figures(self) -> Any:
        """The figures the drawing process drew, as one ``ReportFigures`` (waits for those under
        way, at most ``timeout_s``), or None; then stops the process."""
        from ._figures import ReportFigure, ReportFigures

        merged = ReportFigures(source={})
        deadline = time.monotonic() + self.timeout_s
        try:
            for stage, data in self._sent:
                reply = json.loads(self._read_line(deadline))
                self.background_cpu_s = float(reply.get("cpu_s", 0.0))
                self.timeline.update(imported=reply.get("imported_at"), import_cpu_s=reply.get("import_cpu_s"))
                self.timeline[f"answered_{stage}"] = reply.get("answered")
                if "error" in reply:
                    continue
                for fig in reply["figures"]:
                    merged.figures[fig["name"]] = ReportFigure(
                        fig["name"], fig["title"], fig["caption"], fig["section"], None, kind=fig["kind"],
                        _png=Path(fig["png"]).read_bytes(), _size=tuple(fig["size"]))
                merged.omitted.update(reply["omitted"])
                merged.kinds += reply["kinds"]
                summary = {**merged.source.get("summary", {}), **data.get("summary", {})}
                merged.source.update(data, summary=summary)
        except (OSError, ValueError, KeyError, TimeoutError):  # a figure not read is drawn at the end
            pass
        finally:
            self.close()
        return merged if merged.kinds else None

    def _read_line(self, deadline: float) -> bytes:
        import select

        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if self._proc is None or remaining <= 0:
                raise TimeoutError("the report's drawing process did not answer")
            ready, _, _ = select.select([self._proc.stdout], [], [], remaining)
            if ready:
                chunk = self._proc.stdout.read(1 << 16)
                if not chunk:
                    raise OSError("the report's drawing process exited")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def close(self) -> None:
        """Stop the drawing process and remove its files (figures already read are kept)."""
        self._finalizer()


def _model_report_data(store, estimator=None) -> dict:
    """What the report draws from a run's model stage: the model's summary, stored with it,
    with the K rule's hint (``estimator``: the run context's, see :func:`_with_k_hint`)."""
    return {"summary": _with_k_hint(json.loads(store.read_stage("model").attrs["summary"]), store, estimator)}


def _with_k_hint(summary: dict, store, estimator=None) -> dict:
    """``summary`` (a run's stored summary, changed in place) with the K rule's verdict: a run
    stores it only when the fit chose K; on a K given by hand the rule runs now, on
    ``estimator(k_hint=True)`` (a run context's ``RunContext.estimator``, which keeps the hint
    for the run's summary), else on the store's model (``load_estimator``)."""
    if summary.get("n_clusters_choice") is None:
        est = estimator(k_hint=True) if estimator is not None else load_estimator(store, k_hint=True)
        summary["n_clusters_choice"] = est.summary()["n_clusters_choice"]
    return summary


def _labels_report_data(store) -> dict:
    """What the report draws from a run's labels stage: the cluster sizes and the embedding
    sample (keys as in :func:`report_data`)."""
    import dask

    labels = store.read_stage("labels")
    with dask.config.set(scheduler="synchronous"):  # (see _embedding_sample)
        sizes = [int(s) for s in labels["cluster_sizes"].values]
    return {"summary": {"N": int(labels.sizes["sample"]), "cluster_sizes": sizes},
            "embedding_sample": _embedding_sample(labels)}


def _stop_drawing(proc: Any, directory: str) -> None:
    import shutil
    import threading

    if proc is not None:
        try:
            proc.stdin.close()  # it exits when its input ends; its exit is not waited for here
        except OSError:
            pass
        if proc.poll() is None:
            threading.Thread(target=_reap, args=(proc,), name="mkdist-report-reap", daemon=True).start()
    shutil.rmtree(directory, ignore_errors=True)


def _reap(proc: Any) -> None:
    """Wait for the drawing process to exit (it was told to); kill it if it does not."""
    import subprocess

    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_labels(source: Any, key: str) -> np.ndarray:
    """Ground-truth labels stored beside the views (``y`` in an .npz, a dataset variable, a
    table's column)."""
    from .._pipeline._io import InputSource, as_input

    source = as_input(source)
    if isinstance(source, InputSource) and source.is_table:
        from .._pipeline._tables import ParquetTable

        table = ParquetTable.open(source.location, source.storage_options)
        if key not in table.columns:
            raise ValueError(f"label column {key!r} is not a column of {source.location}")
        return np.asarray(table._whole_column(key).to_numpy(zero_copy_only=False))
    options = None
    if isinstance(source, InputSource):
        source, options = source.location, source.storage_options
    if isinstance(source, (str, Path)):
        import fsspec

        from mkdist.storage._remote import options_for

        path = str(source)
        options = options_for(path, options)
        if path.endswith(".npz"):
            with fsspec.open(path, "rb", **options) as f, np.load(f, allow_pickle=False) as d:
                return np.asarray(d[key])
        import xarray as xr

        return np.asarray(xr.open_zarr(path, consolidated=False, storage_options=options or None)[key].values)
    if hasattr(source, "data_vars"):
        return np.asarray(source[key].values)
    raise ValueError(f"cannot read labels {key!r} from {type(source).__name__}; pass y_true instead.")
