"""The run report's tables, and the one short-text format of a value.

:func:`_fmt` writes a value as the report shows it (4 significant digits, thousands separators
for counts); the page, the PNG directory's ``index.md`` and the markdown summaries and
``mkdist inspect`` text of ``mkdist._report._summary`` all use it.  The rest builds the tables of
the page (run overview, timings, parameters, diagnostics, drift) from the report data
(see ``mkdist._report._figures``); the overview and drift rows serve ``index.md`` as well.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from typing import Any

from ._figures import _mapping


def _fmt(x: Any) -> str:
    """A value as short text: 4 significant digits, thousands separators for counts."""
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.4g}" if math.isfinite(x) else str(x)
    if isinstance(x, (list, tuple)) and all(isinstance(v, (str, int)) for v in x) and len(x) <= 12:
        return ", ".join(str(v) for v in x)
    if isinstance(x, (Mapping, list, tuple)):
        return json.dumps(x, default=str)
    return str(x)


def _choice_text(choice: Mapping) -> str | None:
    """The K rule's verdict in one table cell, in the words of the CLI and ``mkdist inspect``
    (``k_verdict``), then the rule."""
    if not choice:
        return None
    from .._core._nclusters import k_verdict  # scipy: not at `import mkdist.pipeline`

    head = k_verdict(choice) if choice.get("chosen_by_fit") else f"given by hand; the K rule says: {k_verdict(choice)}"
    return f"{head} (rule {choice.get('rule')})"


def missing_text(missing: dict) -> str:
    """'412 rows with missing cells, 530 cells imputed (mean of the 10 nearest of 1000 donor rows)'."""
    how = f" ({missing['fill']})" if missing.get("fill") else ""
    return f"{missing.get('rows', 0):,} rows with missing cells, {missing.get('cells', 0):,} cells imputed{how}"


def _overview_rows(data: Mapping) -> list[tuple[str, Any]]:
    """(quantity, value) rows of the run summary table; None values are left out."""
    s = _mapping(data.get("summary"))
    n_features = _mapping(s.get("n_features"))
    views = s.get("views")
    view_text = (", ".join(f"{v} ({n_features[v]} features)" if v in n_features else str(v) for v in views)
                 if isinstance(views, list) else None)
    kmeans = _mapping(s.get("kmeans"))
    kernels = s.get("kernel_names")
    rows = [
        ("method", s.get("method")), ("estimator", s.get("estimator")), ("rows (N)", s.get("N")),
        ("clusters (K)", s.get("n_clusters")), ("K choice", _choice_text(_mapping(s.get("n_clusters_choice")))),
        ("views", view_text),
        ("landmarks", s.get("n_landmarks")), ("embedding width", s.get("n_components")),
        ("kernels", len(kernels) if isinstance(kernels, list) else None),
        ("iterations", s.get("n_iter")), ("converged", s.get("converged")),
        ("k-means inertia", kmeans.get("inertia")), ("k-means iterations", kmeans.get("n_iter")),
        ("resumed stages", ", ".join(map(str, s["resumed_stages"])) if s.get("resumed_stages") else None),
        ("missing cells", missing_text(_mapping(s.get("missing"))) if s.get("missing") else None),
    ]
    return [(k, v) for k, v in rows if v is not None]


def _table(rows: list[tuple[str, str]], header: tuple[str, str] = ("quantity", "value"),
           raw_html: bool = False) -> str:
    """An HTML table of two columns; the cells are escaped unless ``raw_html``."""
    esc = (lambda t: t) if raw_html else html.escape
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return (f"<table><thead><tr><th>{html.escape(header[0])}</th><th>{html.escape(header[1])}</th></tr>"
            f"</thead><tbody>{body}</tbody></table>")


def _timings_table(timings: Mapping[str, Any]) -> str:
    """Seconds per stage with a CSS bar of its share of the total (no JavaScript needed)."""
    items = [(str(k), float(v)) for k, v in timings.items() if isinstance(v, (int, float)) and math.isfinite(v)]
    if not items:
        return ""
    stages = [(k, v) for k, v in items if k != "total_s"]
    total = dict(items).get("total_s", sum(v for _, v in stages)) or 0.0
    rows = []
    for k, v in stages + [(k, v) for k, v in items if k == "total_s"]:
        share = v / total if total > 0 else 0.0
        bar = f'<span class="bar" style="width:{min(share, 1.0) * 12:.2f}em"></span>' if k != "total_s" else ""
        row_class = ' class="total"' if k == "total_s" else ""
        rows.append(f"<tr{row_class}><th>{html.escape(k.removesuffix('_s'))}</th>"
                    f'<td class="num">{v:,.2f}</td><td class="num">{share:.0%}</td><td>{bar}</td></tr>')
    return ("<table><thead><tr><th>stage</th><th>seconds</th><th>share</th><th></th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _params_table(params: Mapping[str, Any]) -> str:
    """The run's parameters; long values fold into a <details> element."""
    rows = []
    for key in params:
        text = _fmt(params[key])
        cell = (f"<details><summary>{html.escape(text[:80])}…</summary><code>{html.escape(text)}</code></details>"
                if len(text) > 120 else f"<code>{html.escape(text)}</code>")
        rows.append((str(key), cell))
    return _table(rows, ("parameter", "value"), raw_html=True)


def _diagnostics_table(diagnostics: Mapping[str, Any]) -> str:
    """Scalar diagnostics as a table, and the names of the larger ones left to ``mkdist inspect``."""
    scalars = [(str(k), _fmt(v)) for k, v in diagnostics.items()
               if isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 120)]
    others = [str(k) for k, v in diagnostics.items()
              if not (isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 120)) and v is not None]
    out = _table(scalars) if scalars else ""
    if diagnostics.get("theorem_condition_met") is False:
        out += ("<p class=\"note\"><code>theorem_condition_met</code> False: a sufficient condition of the MKC-AE "
                "stability theorem (every eigen-gap of (1/n) K up to K at least 4/&radic;n, "
                "<code>gap_threshold</code>) does not hold, so its error bound does not apply. It is False on "
                "nearly all real data and says nothing about this clustering's quality.</p>")
    if others:
        out += (f"<p class=\"note\">Also recorded (lists and tables, see <code>mkdist inspect STORE --json</code>): "
                f"{html.escape(', '.join(others))}.</p>")
    return out


def _drift_rows(drift: Mapping[str, Any]) -> list[tuple[str, float, float | None, bool]]:
    """(signal, value, threshold, crossed) for every drift signal present.

    A value is flagged with the thresholds stored beside it, exactly as the assignment judged
    it; a signal without a stored threshold is shown unflagged rather than judged here.
    """
    limits = _mapping(drift.get("thresholds"))
    rows = []

    def add(label: str, value: Any, key: str, symmetric: bool = False) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        limit = limits.get(key)
        limit = float(limit) if isinstance(limit, (int, float)) else None
        # scale_ratio_max is symmetric (as in mkdist._pipeline._drift): a halved scale drifts like a doubled one.
        score = max(value, 1.0 / value) if symmetric and value > 0 else value
        rows.append((label, float(value), limit, limit is not None and score > limit))

    add("share of rows beyond the fit's 99th percentile", drift.get("share_beyond_fit_p99"), "share_beyond_fit_p99")
    add("cluster proportions: total variation", drift.get("cluster_tv"), "cluster_tv")
    add("cluster proportions: PSI", drift.get("cluster_psi"), "cluster_psi")
    for view, stats in _mapping(drift.get("views")).items():
        stats = _mapping(stats)
        add(f"view {view}: mean shift (fitted sd)", stats.get("mean_shift_sd"), "mean_shift_sd")
        add(f"view {view}: scale ratio (batch sd / fit sd)", stats.get("scale_ratio"), "scale_ratio_max",
            symmetric=True)
    return rows


def _drift_section(drift: Mapping[str, Any]) -> str:
    rows = _drift_rows(drift)
    drifted = drift.get("drifted")
    if drifted is True:
        banner = '<p class="verdict drift">&#9888; Drift detected: this batch differs from the fit data.</p>'
    elif drifted is False:
        banner = '<p class="verdict ok">No drift: every signal is within its threshold.</p>'
    else:
        banner = ""
    reasons = [str(r) for r in drift.get("reasons") or []]
    reason_html = ("<ul class=\"reasons\">" + "".join(f"<li>{html.escape(r)}</li>" for r in reasons) + "</ul>"
                   if reasons else "")
    body = []
    for label, value, limit, crossed in rows:
        cls = ' class="drift"' if crossed else ""
        status = "&#9650; DRIFT" if crossed else ("ok" if limit is not None else "")
        body.append(f"<tr{cls}><th>{html.escape(label)}</th><td class=\"num\">{value:.4g}</td>"
                    f"<td class=\"num\">{'' if limit is None else f'{limit:.4g}'}</td><td>{status}</td></tr>")
    table = ("<table class=\"drift-table\"><thead><tr><th>signal</th><th>value</th><th>threshold</th>"
             "<th>status</th></tr></thead><tbody>" + "".join(body) + "</tbody></table>") if body else ""
    note = ("<p class=\"caption\">Each signal is ~0 (the scale ratio ~1, the share beyond the 99th percentile "
            "~1%) for a batch drawn like the fit data. Rows in red crossed their threshold, which is what "
            "a scheduled deployment can act on (refit the model).</p>")
    return banner + reason_html + table + note
