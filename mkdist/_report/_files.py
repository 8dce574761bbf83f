"""Where the run report goes: the HTML page as a file, the PNG directory, and the report data
files of the drawing process.

:func:`write_html` and :func:`render_png` write to a local path (a temporary name, then
renamed, so a reader never sees half a file) or to an fsspec URL next to a remote store (one
put per object).  :func:`save_report_data` / :func:`load_report_data` carry the report data to
the drawing process (``mkdist._report._worker``) as JSON with its arrays in ``.npz``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._figures import ReportFigures, _mapping, build_figures
from ._page import render_html
from ._tables import _drift_rows, _fmt, _overview_rows

__all__ = ["write_html", "render_png", "save_report_data", "load_report_data"]


def write_html(data: Mapping[str, Any], target: str | os.PathLike, figures: ReportFigures | None = None) -> str:
    """Write the page of :func:`render_html` to a local path or an fsspec URL.

    Parameters
    ----------
    data : dict
        Report data (``mkdist.pipeline.report_data(store)``).
    target : str or path-like
        A local file (written to a temporary name, then renamed, so a reader never sees half a
        page; its directory is created) or an fsspec URL (one put, atomic per object).
    figures : ReportFigures, optional
        Figures already built from ``data`` (see :func:`render_html`).

    Returns
    -------
    str
        ``target``.
    """
    payload = render_html(data, figures).encode("utf-8")
    if "://" in str(target) and not str(target).startswith("file://"):
        import fsspec

        from mkdist.storage._remote import options_for

        # Next to an object-store run: written there with the run's options (one put).
        fs, path = fsspec.core.url_to_fs(str(target), **options_for(str(target)))
        fs.pipe_file(path, payload)
        return str(target)
    path = Path(str(target).removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, payload)
    return str(target)


def save_report_data(data: dict, stem: Path) -> str:
    """Report data for the drawing process: ``<stem>.json``, its arrays in ``<stem>.npz`` (an
    array is ``{"__array__": key}`` in the JSON); returns the JSON's path."""
    arrays: dict[str, np.ndarray] = {}

    def encode(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            arrays[f"a{len(arrays)}"] = x
            return {"__array__": f"a{len(arrays) - 1}"}
        if isinstance(x, dict):
            return {k: encode(v) for k, v in x.items()}
        return x

    doc = encode(data)
    if arrays:
        np.savez(stem.with_suffix(".npz"), **arrays)
    stem.with_suffix(".json").write_text(json.dumps(doc), encoding="utf-8")
    return str(stem.with_suffix(".json"))


def load_report_data(path: str) -> dict:
    """What :func:`save_report_data` wrote (the drawing process reads it)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    npz = Path(path).with_suffix(".npz")
    arrays = dict(np.load(npz, allow_pickle=False)) if npz.exists() else {}

    def decode(x: Any) -> Any:
        if isinstance(x, dict):
            return arrays[x["__array__"]] if set(x) == {"__array__"} else {k: decode(v) for k, v in x.items()}
        return x

    return decode(doc)


def _atomic_write(path: Path, payload: bytes) -> None:
    """Write to a temporary sibling, then rename: a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    try:
        tmp.write_bytes(payload)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def render_png(data: Mapping[str, Any], directory: str | os.PathLike, figures: ReportFigures | None = None
               ) -> list[Path] | list[str]:
    """The report's figures as PNG files, plus an ``index.md`` that shows them with captions.

    Parameters
    ----------
    data : dict
        Report data (``mkdist.pipeline.report_data(store)``).
    directory : str or path-like
        A local directory, created if missing, or an fsspec URL (``s3://bucket/run.report``,
        next to a remote store).  Files of the same names are replaced (locally each is
        written to a temporary name, then renamed; an object store's put is atomic per
        object); other files in it are left alone.
    figures : ReportFigures, optional
        Figures already built from ``data`` (see :func:`render_html`).

    Returns
    -------
    list of Path, or list of str for a URL
        The PNG files in page order, then ``index.md``.
    """
    figures = build_figures(data) if figures is None else figures
    files = {f"{name}.png": fig.png() for name, fig in figures.figures.items()}
    files["index.md"] = _index_markdown(data, figures).encode("utf-8")
    if "://" in str(directory) and not str(directory).startswith("file://"):
        import fsspec

        from mkdist.storage._remote import options_for

        fs, root = fsspec.core.url_to_fs(str(directory), **options_for(str(directory)))
        fs.makedirs(root, exist_ok=True)
        base = str(directory).rstrip("/")
        for name, payload in files.items():
            fs.pipe_file(f"{root.rstrip('/')}/{name}", payload)
        return [f"{base}/{name}" for name in files]
    directory = Path(str(directory).removeprefix("file://"))
    directory.mkdir(parents=True, exist_ok=True)
    for name, payload in files.items():
        _atomic_write(directory / name, payload)
    return [directory / name for name in files]


def _index_markdown(data: Mapping[str, Any], figures: ReportFigures) -> str:
    """The PNG directory's index: summary rows, drift verdict, then each figure and its caption."""
    title = str(data.get("title") or "mkdist report")
    lines = [f"# {title}", ""]
    if data.get("store"):
        lines += [f"store: `{data['store']}`" + (f" · generated {data['generated']}" if data.get("generated") else ""),
                  ""]
    rows = _overview_rows(data)
    if rows:
        lines += ["| quantity | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in rows] + [""]
    drift = _mapping(_mapping(data.get("assignment")).get("drift"))
    if drift:
        verdict = {True: "**DRIFT DETECTED**", False: "no drift"}.get(drift.get("drifted"), "not judged")
        lines += [f"Drift: {verdict}", ""] + [f"- {r}" for r in drift.get("reasons") or []] + [""]
        lines += ["| signal | value | threshold | status |", "|---|---|---|---|"]
        lines += [f"| {label} | {value:.4g} | {'' if limit is None else f'{limit:.4g}'} | "
                  f"{'**DRIFT**' if crossed else ('ok' if limit is not None else '')} |"
                  for label, value, limit, crossed in _drift_rows(drift)] + [""]
    for name, fig in figures.figures.items():
        lines += [f"## {fig.title}", "", f"![{fig.title}]({name}.png)", "", fig.caption, ""]
    if figures.omitted:
        lines += ["## Not shown", ""] + [f"- {reason}" for reason in figures.omitted.values()] + [""]
    return "\n".join(lines)
