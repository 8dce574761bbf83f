"""The run report as one self-contained HTML page (:func:`render_html`).

The page shows the report data's tables (``mkdist._report._tables``) and its figures
(``mkdist._report._figures``) inline, with its CSS: no script and no external resource.
Writing it to a file or a URL is ``mkdist._report._files.write_html``.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from typing import Any

from ._figures import DPI, ReportFigure, ReportFigures, _mapping, build_figures
from ._profiles import batch_beside_fit_html, glance_html
from ._tables import _diagnostics_table, _drift_section, _fmt, _overview_rows, _params_table, _table, _timings_table

__all__ = ["render_html"]


_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:980px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.meta{color:#666;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
thead th{background:#f3f3f3}tbody th{font-weight:normal;color:#444}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total th,tr.total td{font-weight:bold}
.bar{display:inline-block;height:.8em;background:#1f77b4}
figure{margin:1.2em 0;padding:0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption,.caption{color:#555;font-size:.9em;max-width:760px}
.note{color:#666;font-size:.9em}
.verdict{padding:.5em .8em;border-radius:4px;font-weight:bold}
.verdict.drift{background:#fde2e1;color:#a4161a;border:1px solid #e5989b}
.verdict.ok{background:#e3f4e1;color:#1b5e20;border:1px solid #a5d6a7}
tr.drift th,tr.drift td{background:#fde2e1;color:#a4161a;font-weight:bold}
code{font-size:.9em}details summary{cursor:pointer}
"""


def _figure_html(fig: ReportFigure) -> str:
    data = base64.b64encode(fig.png()).decode("ascii")
    width, height = (round(v * DPI) for v in fig.size_inches())
    return (f'<figure id="fig-{html.escape(fig.name)}"><img src="data:image/png;base64,{data}" '
            f'alt="{html.escape(fig.title)}" width="{width}" height="{height}">'
            f"<figcaption><b>{html.escape(fig.title)}.</b> {html.escape(fig.caption)}</figcaption></figure>")


def render_html(data: Mapping[str, Any], figures: ReportFigures | None = None) -> str:
    """The report as one self-contained HTML page.

    Parameters
    ----------
    data : dict
        Report data (``mkdist.pipeline.report_data(store)``); any key may be missing or None.
    figures : ReportFigures, optional
        Figures already built from ``data`` by :func:`build_figures`, so a caller writing both
        the page and a PNG directory draws them once.

    Returns
    -------
    str
        An HTML5 page: inline CSS, every figure an inline ``data:image/png;base64`` image, no
        script and no external resource, so it opens from disk, from an e-mail or from a
        Prefect artifact with no server.

    Examples
    --------
    >>> from mkdist._report._page import render_html
    >>> page = render_html({"title": "demo", "summary": {"method": "m", "cluster_sizes": [2, 3]}})
    >>> page.startswith("<!DOCTYPE html>") and "data:image/png;base64," in page
    True
    """
    figures = build_figures(data) if figures is None else figures
    summary = _mapping(data.get("summary"))
    is_assignment = data.get("kind") == "assignment"
    title = str(data.get("title") or "mkdist report")
    meta = [f"{label}: <code>{html.escape(str(data[key]))}</code>" for key, label in
            (("store", "store"), ("kind", "kind"), ("generated", "generated")) if data.get(key)]
    by_section: dict[str, list[ReportFigure]] = {}
    for fig in figures.figures.values():
        by_section.setdefault(fig.section, []).append(fig)

    run_part = _run_summary_html(summary, data, heading="Fitted model run" if is_assignment else "Run summary")
    assignment = _mapping(data.get("assignment"))
    assignment_part = (_assignment_html(assignment, by_section.get("assignment", []))
                       if assignment or is_assignment else [])
    # An assignment report is read for its drift verdict: that comes first, then the batch's
    # clusters beside the fit's.  A run's report opens with its clusters in the input's columns.
    if is_assignment:
        body = assignment_part + batch_beside_fit_html(data.get("profiles"), data.get("fit_profiles")) + run_part
    else:
        body = glance_html(data.get("profiles")) + run_part + assignment_part
    for section, heading in (("model", "Model"), ("clusters", "Clusters")):
        if by_section.get(section):
            body.append(f"<h2>{'Fitted ' + heading.lower() if is_assignment else heading}</h2>")
            body += [_figure_html(f) for f in by_section[section]]
    diagnostics = _mapping(summary.get("diagnostics"))
    if diagnostics:
        body += ["<h2>Diagnostics</h2>", _diagnostics_table(diagnostics)]
    if figures.omitted:
        body.append('<h2>Not shown</h2><ul class="note">')
        body += [f"<li>{html.escape(reason)}</li>" for reason in figures.omitted.values()]
        body.append("</ul>")

    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>", f'<p class="meta">{" &middot; ".join(meta)}</p>' if meta else ""]
    # No clock read here: the same data gives the same page (``generated`` says when).
    tail = ['<p class="meta">Written by mkdist.</p></body></html>']
    return "\n".join(p for p in head + body + tail if p)


def _run_summary_html(summary: Mapping[str, Any], data: Mapping[str, Any], heading: str) -> list[str]:
    """Sizes, method, scores, timings per stage and parameters of the run (nothing if no summary)."""
    if not summary:
        return []
    parts = [f"<h2>{html.escape(heading)}</h2>", _table([(k, _fmt(v)) for k, v in _overview_rows(data)])]
    scores = {k: v for k, v in _mapping(summary.get("scores")).items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if scores:
        parts += ["<h3>Agreement with the given labels</h3>",
                  _table([(k, f"{v:.4f}") for k, v in scores.items()], ("metric", "score")),
                  '<p class="caption">1 is a perfect match; ARI is ~0 for a random partition.</p>']
    timings = _timings_table(_mapping(summary.get("timings")))
    if timings:
        parts += ["<h3>Time per stage</h3>", timings]
    if _mapping(summary.get("params")):
        parts += ["<h3>Parameters</h3>", _params_table(_mapping(summary.get("params")))]
    return parts


def _assignment_html(assignment: Mapping[str, Any], figures: list[ReportFigure]) -> list[str]:
    """The batch's size, the drift verdict and table, and the assignment figures."""
    parts = ["<h2>Assignment of new data</h2>"]
    rows = [("rows assigned", _fmt(assignment.get("N")))] if assignment.get("N") is not None else []
    if assignment.get("fit_p99") is not None:
        rows.append(("fit's 99th percentile of distance", _fmt(assignment.get("fit_p99"))))
    if rows:
        parts.append(_table(rows))
    drift = _mapping(assignment.get("drift"))
    if drift:
        parts += ["<h3>Drift against the fit</h3>", _drift_section(drift)]
    else:
        parts.append('<p class="note">No drift statistics were recorded with this assignment.</p>')
    parts += [_figure_html(f) for f in figures]
    if _mapping(assignment.get("params")):
        parts += ["<h3>Assignment parameters</h3>", _params_table(_mapping(assignment.get("params")))]
    return parts
