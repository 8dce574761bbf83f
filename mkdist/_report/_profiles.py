"""Cluster profiles where people look: the terminal table of ``mkdist profile``, and the run
report's opening section, "Clusters at a glance" (a heatmap of standardised means, then a
card per cluster), with an assignment's batch profile beside the fit's.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from .._core._profile_tables import TOP_TRAITS, ClusterProfiles

__all__ = ["profile_text", "glance_html", "batch_beside_fit_html", "show_profile"]

#: Columns the heatmap and the terminal table show (the most separating first).
TOP_COLUMNS = 12


def _top_columns(profiles: ClusterProfiles, n: int = TOP_COLUMNS) -> list[str]:
    return profiles.separation["column"].tolist()[:n]


def _num(v: float) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    a = abs(v)
    return f"{v:,.0f}" if a >= 1000 else f"{v:.3g}" if a >= 0.01 or a == 0 else f"{v:.2e}"


def _cell(profiles: ClusterProfiles, cluster: int, column: str) -> str:
    """A column's value in a cluster: the mean of a number, the top category (share) of a category."""
    if column in {c.name for c in profiles.layout.numeric}:
        return _num(float(profiles.numeric.loc[(cluster, column), "mean"]))
    cats = profiles.categories.xs((cluster, column), level=("cluster", "column"))
    if cats.empty:
        return "-"
    top = cats["share"].idxmax()
    return f"{top} {cats.loc[top, 'share']:.0%}"


def profile_text(profiles: ClusterProfiles, store: str = "") -> str:
    """The compact terminal table of ``mkdist profile``: clusters (size, share, label), the
    columns that separate them, and each top column per cluster (mean or top category)."""
    lines = [f"{profiles.n_clusters} clusters, {profiles.n_rows:,} rows" + (f" ({store})" if store else "")]
    lines.append(f"{'cluster':>7}  {'size':>10}  {'share':>6}  label")
    for c, row in profiles.clusters.iterrows():
        lines.append(f"{c:>7}  {row['size']:>10,}  {row['share']:>6.1%}  {row['label']}")
    lines.append("")
    lines.append("columns that separate the clusters (eta^2 for numbers, Cramer's V for categories; 0 none, 1 all):")
    for _, row in profiles.separation.iterrows():
        lines.append(f"  {row['column']:<24} {row['kind']:<12} {row['score']:.3f}")
    columns = _top_columns(profiles)
    if columns:
        lines.append("")
        lines.append("by cluster (mean of a number; top category and its share):")
        width = max(8, *(len(c) for c in columns))
        header = f"  {'column':<{width}}  " + "  ".join(f"{'all' if c == -1 else c:>14}"
                                                     for c in [-1, *range(profiles.n_clusters)])
        lines.append(header)
        for col in columns:
            lines.append(f"  {col:<{width}}  " + "  ".join(f"{_cell(profiles, c, col):>14}"
                                                         for c in [-1, *range(profiles.n_clusters)]))
    lines.append("")
    lines.append(f"quantiles within {profiles.relative_error:.2%} (relative); the long table: "
                 "mkdist profile STORE --out profiles.parquet")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the report
def _heatmap_png(profiles: ClusterProfiles) -> tuple[bytes, int, int] | None:
    """Clusters x the top numeric columns, coloured by the standardised mean difference."""
    numeric = [c for c in _top_columns(profiles, 100) if c in {x.name for x in profiles.layout.numeric}]
    numeric = numeric[:TOP_COLUMNS]
    if not numeric:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = profiles.n_clusters
    smd = np.array([[float(profiles.numeric.loc[(c, col), "smd"]) for col in numeric] for c in range(k)])
    fig, ax = plt.subplots(figsize=(min(1.0 + 0.7 * len(numeric), 9.5), 0.9 + 0.38 * k), dpi=100)
    limit = max(1.0, float(np.nanmax(np.abs(smd))) if smd.size else 1.0)
    im = ax.imshow(smd, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_xticks(range(len(numeric)), numeric, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(k), [f"{c} ({profiles.sums.rows[c]:,})" for c in range(k)], fontsize=8)
    if k * len(numeric) <= 240:
        for (i, j), v in np.ndenumerate(smd):
            if np.isfinite(v):
                ax.text(j, i, f"{v:+.1f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(v) > 0.6 * limit else "black")
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, label="sd from all rows")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    width, height = (round(v * fig.dpi) for v in fig.get_size_inches())
    plt.close(fig)
    return buf.getvalue(), width, height


def _card(profiles: ClusterProfiles, c: int) -> str:
    row = profiles.clusters.loc[c]
    traits = profiles.traits(c)[:TOP_TRAITS + 2] if row["size"] else []
    items = "".join(f"<li>{html.escape(t['text'])}</li>" for t in traits)
    cats = []
    for col in profiles.layout.categorical:
        block = profiles.categories.xs((c, col.name), level=("cluster", "column"))
        if not block.empty:
            top = block.sort_values("share", ascending=False).head(3)
            cats.append(f"<li>{html.escape(col.name)}: " + ", ".join(
                f"{html.escape(str(v))} {r['share']:.0%} (lift {r['lift']:.1f})" for v, r in top.iterrows()) + "</li>")
    return (f'<div class="card"><h3>Cluster {c}: {row["size"]:,} rows ({row["share"]:.1%})</h3>'
            f'<p class="label">{html.escape(row["label"])}</p>'
            + (f"<p>Stands out by</p><ul>{items}</ul>" if items else "")
            + (f"<p>Top categories</p><ul>{''.join(cats)}</ul>" if cats else "") + "</div>")


_CARD_CSS = ('<style>.cards{display:flex;flex-wrap:wrap;gap:.8em}.card{border:1px solid #ddd;border-radius:6px;'
             'padding:.4em .9em;flex:1 1 280px;max-width:460px}.card h3{margin:.3em 0;font-size:1.05em}'
             '.card .label{font-weight:bold;color:#1f4e79}.card ul{margin:.2em 0 .5em 1.1em;padding:0}</style>')


def glance_html(profiles: ClusterProfiles | None) -> list[str]:
    """The report's first section: the heatmap of standardised means (clusters x the most
    separating numeric columns), the separation ranking, then one card per cluster."""
    if profiles is None:
        return []
    parts = [_CARD_CSS, "<h2>Clusters at a glance</h2>",
             f'<p class="note">{profiles.n_clusters} clusters of {profiles.n_rows:,} rows, described in the input\'s '
             "own columns (as given: before scaling, encoding and imputation; missing cells counted apart).</p>"]
    drawn = _heatmap_png(profiles)
    if drawn is not None:
        png, width, height = drawn
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<figure id="fig-profile-heatmap"><img src="data:image/png;base64,{data}" '
                     f'alt="standardised means" width="{width}" height="{height}"><figcaption>'
                     "<b>Standardised means.</b> Each cluster's mean minus the mean of all rows, in standard "
                     "deviations of all rows, for the columns that separate the clusters most (strongest left)."
                     "</figcaption></figure>")
    rows = "".join(f"<tr><th>{html.escape(r['column'])}</th><td>{r['kind']}</td><td class=\"num\">{r['score']:.3f}"
                   f"</td></tr>" for _, r in profiles.separation.head(TOP_COLUMNS).iterrows())
    parts.append("<details><summary>Which columns separate the clusters</summary><table><thead><tr><th>column</th>"
                 "<th>kind</th><th>score</th></tr></thead><tbody>" + rows + "</tbody></table>"
                 '<p class="note">eta&sup2; (share of a number\'s variance between clusters) and Cram&eacute;r\'s V '
                 "(association of a category with the cluster): 0 nothing, 1 all.</p></details>")
    parts.append('<div class="cards">' + "".join(_card(profiles, c) for c in range(profiles.n_clusters)) + "</div>")
    return parts


def batch_beside_fit_html(batch: ClusterProfiles | None, fit: ClusterProfiles | None) -> list[str]:
    """An assignment's profile beside its model's: per cluster the share of rows and the top
    columns' means (or top category), the fit's and the batch's side by side."""
    if batch is None or fit is None:
        return []
    columns = _top_columns(fit, 6)
    head = "".join(f"<th>{html.escape(c)}<br>fit / batch</th>" for c in columns)
    rows = []
    for c in range(fit.n_clusters):
        share_fit = fit.clusters.loc[c, "share"]
        share_batch = batch.clusters.loc[c, "share"] if c < batch.n_clusters else 0.0
        cells = "".join(f'<td class="num">{html.escape(_cell(fit, c, col))} / '
                        f"{html.escape(_cell(batch, c, col)) if c < batch.n_clusters else '-'}</td>"
                        for col in columns)
        rows.append(f"<tr><th>{c}</th><td class=\"num\">{share_fit:.1%} / {share_batch:.1%}</td>{cells}</tr>")
    return ["<h3>The batch's clusters beside the fit's</h3>",
            '<p class="note">Per cluster: share of rows, and the mean of a number (top category and its share for a '
            "category), in the fit and in this batch: how the clusters shifted in the table's own terms.</p>",
            f"<table><thead><tr><th>cluster</th><th>rows<br>fit / batch</th>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>"]


def show_profile(store: Any, *, as_json: bool = False, out: Any = None, overwrite: bool = False) -> str:
    """What ``mkdist profile STORE`` prints (the table, or JSON), after writing the long table
    to ``out`` when given (refused before any work if ``out`` holds a file mkdist did not write).

    Raises
    ------
    InputValidationError
        The store holds no profiles (a run that has not labelled its rows yet).
    """
    import json

    from mkdist.storage import RunStore

    from .._pipeline._profiles import check_profiles_out, read_profiles, write_profiles_out
    from ..errors import InputValidationError

    run = store if isinstance(store, RunStore) else RunStore.open(store, mode="r")
    if out is not None:
        check_profiles_out(out, overwrite, store=run)
    profiles = read_profiles(run)
    if profiles is None:
        raise InputValidationError(f"{run.url} holds no profiles: its labels stage is not complete (run it to its "
                                   "end; a store written before profiles existed gets them when run again)")
    if out is not None:
        write_profiles_out(out, run, overwrite=overwrite)
    text = json.dumps(profiles.to_json(), indent=2, default=float) if as_json else profile_text(profiles, str(store))
    return text + (f"\nlong table: {out}" if out is not None and not as_json else "")
