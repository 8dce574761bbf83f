"""Human- and machine-readable summaries of runs and stores (CLI, flow artifacts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["summary_markdown", "inspect_store", "inspect_markdown", "assignment_summary", "load_labels"]


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def summary_markdown(summary: dict, store: str | None = None) -> str:
    """A markdown report of a run: sizes, kernel weights, timings, cluster sizes, diagnostics."""
    lines = [f"# mkdist run{f' `{store}`' if store else ''}", "", "| quantity | value |", "|---|---|"]
    for key in ("N", "n_landmarks", "n_clusters", "simplemkkm_n_iter"):
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
    if summary.get("cluster_sizes"):
        lines += ["", "## Cluster sizes", "", "| cluster | points |", "|---|---|"]
        lines += [f"| {i} | {s} |" for i, s in enumerate(summary["cluster_sizes"])]
    diag = summary.get("diagnostics")
    if diag:
        lines += ["", "## Spectral diagnostics (MKC-AE Theorem 5.2)", "", "| quantity | value |", "|---|---|"]
        for k in ("lambda_K", "gap_threshold", "min_gap_ratio", "relative_gap_K", "theorem_condition_met"):
            if k in diag:
                lines.append(f"| {k} | {_fmt(diag[k])} |")
        if "pep" in diag:
            lines.append(f"| PEP (t = K) of the combined kernel | {_fmt(diag['pep']['combined'])} |")
            names = summary.get("kernel_names") or [f"kernel {i}" for i in range(len(diag["pep"].get("base", [])))]
            lines += [f"| PEP (t = K) of {n} | {_fmt(v)} |" for n, v in zip(names, diag["pep"].get("base", []))]
        lines += ["", "lambda_K is the K-th eigenvalue of (1/n) K_alpha; the theorem wants eigen-gaps of at "
                  "least 4/sqrt(n) (`gap_threshold`). `min_gap_ratio` < 1 is typical of real data and means "
                  "the out-of-sample bound is loose, not that the clustering failed."]
    return "\n".join(lines) + "\n"


def inspect_store(url: str) -> dict:
    """What a store holds: root attributes, stage status, model summary (JSON-able)."""
    from mkdist.storage import RunStore

    store = RunStore.open(url, mode="r")
    info: dict[str, Any] = {"url": str(url), "attrs": store.attrs, "stages": store.stage_status()}
    if store.is_complete("model"):
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
        if model.get("kernel_weights"):
            lines.append("  kernel weights:")
            lines += [f"    {n:<40} {w:.4f}" for n, w in zip(model["kernels"], model["kernel_weights"])]
        diag = model.get("diagnostics") or {}
        for k in ("lambda_K", "min_gap_ratio", "relative_gap_K"):
            if k in diag:
                lines.append(f"  {k:<14} {_fmt(diag[k])}")
        pep = diag.get("pep") or {}
        if pep:
            lines.append(f"  PEP combined   {_fmt(pep['combined'])}  (share of the combined kernel's spectrum in its top K)")
            lines += [f"  PEP {n:<36} {_fmt(v)}" for n, v in zip(model.get("kernels") or [], pep.get("base", []))]
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
