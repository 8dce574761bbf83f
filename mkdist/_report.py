"""Human- and machine-readable summaries of runs and stores (CLI, flow artifacts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["pep_overview", "summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary", "load_labels"]


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def pep_overview(diagnostics: dict | None, kernel_names: list[str] | None, t: int | None = None) -> dict | None:
    """The principal eigenvalue proportions of a fitted model, in one shape for every method.

    Returns ``{"t", "base": {kernel: PEP}, "combined": PEP}`` plus, for late fusion,
    ``"combined_filtered"`` (after the graph filter) and ``"dropped"`` (degenerate kernels),
    or None when the diagnostics hold no PEP.
    """
    diag = diagnostics or {}
    if "pep" in diag and isinstance(diag["pep"], dict):  # mkc, nystrom, rff power k-means
        pep = diag["pep"]
        base = list(pep.get("base", []))
        names = list(kernel_names or [])
        if len(names) != len(base):
            names = [f"kernel {i}" for i in range(len(base))]
        return {"t": pep.get("t", t), "base": dict(zip(names, base)), "combined": pep.get("combined")}
    if "pep_kernels" in diag:  # late fusion
        names = diag.get("kernel_names") or [f"kernel {i}" for i in range(len(diag["pep_kernels"]))]
        out = {"t": diag.get("pep_t", t), "base": dict(zip(names, diag["pep_kernels"])),
               "combined": diag.get("pep_combined_before"),
               "combined_filtered": diag.get("pep_combined_after")}
        kept = diag.get("kept_kernels")
        if kept is not None:
            out["dropped"] = [n for n in names if n not in set(kept)]
        return out
    return None


def _pep_lines(pep: dict) -> list[str]:
    t = pep.get("t") or "K"
    lines = [f"| PEP (t = {t}) of the combined kernel | {_fmt(pep.get('combined'))} |"]
    if pep.get("combined_filtered") is not None:
        lines.append(f"| PEP (t = {t}) of the combined kernel after the graph filter | "
                     f"{_fmt(pep['combined_filtered'])} |")
    dropped = set(pep.get("dropped") or ())
    lines += [f"| PEP (t = {t}) of {n}{' (dropped: degenerate)' if n in dropped else ''} | {_fmt(v)} |"
              for n, v in pep.get("base", {}).items()]
    return lines


def summary_markdown(summary: dict, store: str | None = None) -> str:
    """A markdown report of a run: sizes, kernel weights, timings, cluster sizes, diagnostics."""
    lines = [f"# mkdist run{f' `{store}`' if store else ''}", "", "| quantity | value |", "|---|---|"]
    for key in ("method", "estimator", "N", "n_landmarks", "n_clusters", "simplemkkm_n_iter"):
        if key in summary:
            lines.append(f"| {key} | {_fmt(summary[key])} |")
    if summary.get("resumed_stages"):
        lines.append(f"| resumed stages | {', '.join(summary['resumed_stages'])} |")
    if summary.get("scores"):
        for k, v in summary["scores"].items():
            lines.append(f"| {k} | {v:.4f} |")
    if summary.get("timings"):
        lines += ["", "## Stage timings (s)", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {k.removesuffix('_s')} | {v:.2f} |" for k, v in summary["timings"].items()]
    if summary.get("kernel_weights"):
        lines += ["", "## Kernel weights", "", "| kernel | weight |", "|---|---|"]
        names = summary.get("kernel_names") or [str(i) for i in range(len(summary["kernel_weights"]))]
        lines += [f"| {n} | {w:.4f} |" for n, w in zip(names, summary["kernel_weights"])]
    for key, title in (("view_weights", "View weights"), ("filter_weights", "Filter weights (mu)")):
        if summary.get(key):
            names = summary.get("kernel_names") or [str(i) for i in range(len(summary[key]))]
            if len(names) != len(summary[key]):
                names = [str(i) for i in range(len(summary[key]))]
            lines += ["", f"## {title}", "", "| kernel / view | weight |", "|---|---|"]
            lines += [f"| {n} | {w:.4f} |" for n, w in zip(names, summary[key])]
    if summary.get("cluster_sizes"):
        lines += ["", "## Cluster sizes", "", "| cluster | points |", "|---|---|"]
        lines += [f"| {i} | {s} |" for i, s in enumerate(summary["cluster_sizes"])]
    diag = summary.get("diagnostics")
    if diag and "lambda_K" in diag:
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


def inspect_store(url: str) -> dict:
    """What a store holds: root attributes, stage status, model summary (JSON-able)."""
    from mkdist.storage import RunStore

    store = RunStore.open(url, mode="r")
    info: dict[str, Any] = {"url": str(url), "attrs": store.attrs, "stages": store.stage_status()}
    if store.is_complete("model") and store.read_stage("model").attrs.get("method", "mkc") != "mkc":
        from ._pipeline import model_summary

        ds = store.read_stage("model")
        method = ds.attrs["method"]
        overview = model_summary(store, method)
        info["model"] = {
            "model_type": f"{overview['estimator']} (method {method!r})",
            "views": overview.get("views"),
            "n_landmarks": overview.get("n_landmarks"),
            "n_components": overview.get("n_components"),
            "kernels": overview.get("kernel_names"),
            "view_weights": overview.get("view_weights"),
            "filter_weights": overview.get("filter_weights"),
            "has_centroids": "cluster_centers" in ds or "centroids" in ds,
            "diagnostics": overview.get("diagnostics"),
            "pep": overview.get("pep"),
            "n_iter": overview.get("n_iter"),
        }
    elif store.is_complete("model"):
        ds = store.read_stage("model")
        model = json.loads(ds.attrs["mkdist_model"])
        fit = json.loads(ds.attrs["mkdist_fit"])
        info["model"] = {
            "model_type": model.get("model_type"),
            "views": model.get("view_names"),
            "n_features": model.get("n_features"),
            "n_landmarks": int(ds.sizes.get("landmark", 0)),
            "n_components": int(ds.sizes.get("component", 0)),
            "kernels": model.get("kernel_names"),
            "kernel_weights": [float(w) for w in ds["kernel_weights"].values] if "kernel_weights" in ds else None,
            "has_centroids": "cluster_centers" in ds,
            "diagnostics": fit.get("diagnostics"),
            "pep": pep_overview(fit.get("diagnostics"), model.get("kernel_names")),
            "n_iter": fit.get("n_iter"),
        }
    if store.is_complete("metrics"):
        info["summary"] = json.loads(store.read_stage("metrics").attrs["summary"])
    return info


def inspect_markdown(info: dict) -> str:
    lines = [f"store: {info['url']}", f"schema_version: {info['attrs'].get('schema_version')}",
             f"mkdist_version: {info['attrs'].get('mkdist_version')}", "stages:"]
    lines += [f"  {name:<14} {status}" for name, status in info["stages"].items()]
    model = info.get("model")
    if model:
        lines.append("model:")
        for k in ("model_type", "views", "n_landmarks", "n_components", "has_centroids", "n_iter"):
            lines.append(f"  {k:<14} {model[k]}")
        names = model.get("kernels") or []
        for key, title in (("kernel_weights", "kernel weights"), ("view_weights", "view weights"),
                           ("filter_weights", "filter weights (mu)")):
            weights = model.get(key)
            if weights:
                labels = names if len(names) == len(weights) else [str(i) for i in range(len(weights))]
                lines.append(f"  {title}:")
                lines += [f"    {n:<40} {w:.4f}" for n, w in zip(labels, weights)]
        diag = model.get("diagnostics") or {}
        for k in ("lambda_K", "min_gap_ratio", "relative_gap_K"):
            if k in diag:
                lines.append(f"  {k:<14} {_fmt(diag[k])}")
        pep = model.get("pep")
        if pep:
            t = pep.get("t") or "K"
            lines.append(f"  PEP (t = {t}), share of each kernel's spectrum in its top t eigenvalues:")
            lines.append(f"    {'combined kernel':<40} {_fmt(pep.get('combined'))}")
            if pep.get("combined_filtered") is not None:
                lines.append(f"    {'combined, after the graph filter':<40} {_fmt(pep['combined_filtered'])}")
            dropped = set(pep.get("dropped") or ())
            lines += [f"    {n:<40} {_fmt(v)}{'  (dropped: degenerate)' if n in dropped else ''}"
                      for n, v in pep.get("base", {}).items()]
    summary = info.get("summary")
    if summary:
        lines.append("summary:")
        for k in ("N", "cluster_sizes", "scores", "timings"):
            if summary.get(k) is not None:
                lines.append(f"  {k:<14} {json.dumps(summary[k], default=_fmt)}")
    return "\n".join(lines)


def assignment_summary(store) -> dict:
    """N, cluster sizes and a markdown table for an assignment output store."""
    import dask.array as da

    labels = store.read_stage("labels")["labels"].data
    sizes = da.bincount(labels).compute()
    md = ["# mkdist assignment", "", f"output: `{store.url}`; model: `{store.params.get('model_store')}`", "",
          "| cluster | points |", "|---|---|"] + [f"| {i} | {int(s)} |" for i, s in enumerate(sizes)]
    return {"N": int(labels.shape[0]), "cluster_sizes": [int(s) for s in sizes], "output": str(store.url),
            "markdown": "\n".join(md) + "\n"}


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
