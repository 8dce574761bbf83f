"""The run report's figures, drawn from the report data.

Input is the *report data* dict (``mkdist.pipeline.report_data(store)``): the run summary (the
one schema of :meth:`mkdist._methods._base.MkdistEstimator.summary` plus the run's sizes, timings,
scores and parameters), a 2-D sample of the embedding and, for assignment runs, the
distance histogram and the drift signals.  Every figure is drawn from a key of that dict, so
every method gets the figures its summary supports and a method that lacks a key (no
weights, no objective history, no spectrum) simply gets fewer figures, with a one-line note.

The figures are drawn once (:func:`build_figures`) and encoded to PNG once; the HTML page
(``mkdist._report._page``) and the PNG directory (``mkdist._report._files``) reuse them.
Matplotlib is used through ``matplotlib.figure.Figure`` and the Agg canvas, never pyplot:
rendering does not change the caller's matplotlib state (the global backend, pyplot's list of
open figures), and a figure is freed as soon as it is dropped.

This module imports nothing from mkdist (and matplotlib only when a figure is drawn), so the
drawing process (``mkdist._report._worker``) and any module of the report layer import it
cheaply.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn: `import mkdist` stays fast
    from matplotlib.figure import Figure

__all__ = ["ReportFigure", "ReportFigures", "MODEL_FIGURES", "build_figures"]

#: Resolution of the PNGs: 100 dpi gives ~700 px wide figures, sharp on a laptop screen and
#: small enough (tens of kB each) to inline in the page.
DPI = 100
#: Colours: blue for the quantities shown, grey for context (beyond K, dropped, the fit), orange
#: and red for what to look at (combined kernel, K, thresholds, drift).
_BLUE, _ORANGE, _GREY, _RED = "#1f77b4", "#ff7f0e", "#9a9a9a", "#d62728"
#: At most this many bar labels are written on an axis; beyond, labels would overlap.
_MAX_TICK_LABELS = 60
#: Interleaved drawing rounds of the embedding sample (see ``_embedding_figures``).
_SCATTER_ROUNDS = 4
#: Up to this many clusters the embedding is drawn as one marker line per cluster and round.
_MAX_MARKER_LINES = 40
#: Values written at the end of each bar up to this many bars (beyond, the numbers crowd the
#: chart and each label costs a text render; the grid gives the scale).
_MAX_BAR_VALUES = 12


@dataclass
class ReportFigure:
    """One figure of the report and how to read it.

    Attributes
    ----------
    name : str
        Stable identifier, also the PNG file stem (e.g. ``"spectrum"``, ``"weights_kernel_weights"``).
    title : str
        Heading shown above the figure.
    caption : str
        One or two sentences saying how to read the figure.
    section : {"model", "clusters", "assignment"}
        Where the page places it.
    figure : matplotlib.figure.Figure or None
        The figure (Agg canvas attached); shown directly in a notebook.  None for a figure
        drawn in another process (``mkdist._report._worker``), which is its PNG bytes only.
    kind : str
        The builder that drew it (``"weights"``, ``"spectrum"``, ...; see ``_BUILDERS``).
    """

    name: str
    title: str
    caption: str
    section: str
    figure: Figure | None
    kind: str = ""
    _png: bytes | None = field(default=None, repr=False)
    _size: tuple[float, float] | None = field(default=None, repr=False)

    def png(self) -> bytes:
        """The figure as PNG bytes, encoded on first use and cached (HTML and PNG share it)."""
        if self._png is None:
            buffer = io.BytesIO()
            self.figure.savefig(buffer, format="png", dpi=DPI)
            self._png = buffer.getvalue()
        return self._png

    def size_inches(self) -> tuple[float, float]:
        """(width, height) of the figure in inches."""
        if self.figure is not None:
            width, height = self.figure.get_size_inches()
            return float(width), float(height)
        return self._size


@dataclass
class ReportFigures:
    """The figures that apply to a report's data, and why the others were left out.

    Attributes
    ----------
    figures : dict of str to ReportFigure
        In page order.
    omitted : dict of str to str
        Figure kind -> one-line reason it is not shown (e.g. the method records no spectrum).
    source : dict or None
        The report data the figures were drawn from (what :func:`build_figures` compares
        before it reuses them).
    kinds : list of str
        The figure kinds whose builders ran (drawn or omitted).
    """

    figures: dict[str, ReportFigure] = field(default_factory=dict)
    omitted: dict[str, str] = field(default_factory=dict)
    source: dict | None = field(default=None, repr=False)
    kinds: list[str] = field(default_factory=list)


#: The figures drawn from the fitted model alone (its summary): a run can draw them as soon as
#: its model stage is complete (``mkdist._report._summary.ReportDraft``), while the rows are embedded.
MODEL_FIGURES = ("weights", "objective_history", "spectrum", "k_choice", "pep")


def build_figures(data: Mapping[str, Any], *, kinds: tuple[str, ...] | None = None,
                  drawn: ReportFigures | None = None) -> ReportFigures:
    """Draw every figure the report data supports.

    Parameters
    ----------
    data : dict
        Report data (see the module docstring); any key may be missing or None.
    kinds : tuple of str, optional
        Draw only these figure kinds (e.g. ``MODEL_FIGURES``); default: all.
    drawn : ReportFigures, optional
        Figures drawn earlier from part of this data (a run draws its model's figures while
        it embeds the rows).  A kind among ``drawn.kinds`` is reused, PNG included, when every
        summary key of ``drawn.source`` has the same value in ``data``; otherwise it is drawn
        again, so the result never depends on what was drawn before.

    Returns
    -------
    ReportFigures
        The figures, keyed by name in page order, and the reasons for the figures left out.
        A figure that cannot be drawn from malformed data is left out with a
        ``RuntimeWarning`` instead of failing the report: the report is drawn during and at
        the end of a clustering run, which must not fail for a picture.

    Examples
    --------
    >>> from mkdist._report._figures import build_figures
    >>> out = build_figures({"summary": {"cluster_sizes": [5, 3], "N": 8}})
    >>> list(out.figures)
    ['cluster_sizes']
    """
    out = ReportFigures(source=dict(data))
    summary = _mapping(data.get("summary"))
    is_assignment = data.get("kind") == "assignment"
    reusable = set(drawn.kinds) if drawn is not None and _drawn_from_same(drawn.source, data) else set()
    if not summary and not is_assignment:
        out.omitted["model"] = "the report data holds no run summary, so no model figure is drawn."
    # Page order: an assignment report leads with the batch's figures (what a scheduled run
    # is read for), then the model's; render_png lists the files in the same order.
    builders = sorted(_BUILDERS, key=lambda b: b[2] != "assignment") if is_assignment else _BUILDERS
    for kind, builder, needs in builders:
        if kinds is not None and kind not in kinds:
            continue
        if needs == "summary" and not summary:
            continue
        if needs == "assignment" and not is_assignment and not data.get("assignment"):
            continue
        out.kinds.append(kind)
        if kind in reusable:
            if kind in drawn.omitted:
                out.omitted[kind] = drawn.omitted[kind]
            for name, fig in drawn.figures.items():
                if fig.kind == kind:
                    out.figures[_unique(name, out.figures)] = fig
            continue
        try:
            result = builder(data)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            reason = f"could not be drawn from the report data ({type(exc).__name__}: {exc})."
            warnings.warn(f"report figure {kind!r} {reason}", RuntimeWarning, stacklevel=2)
            out.omitted[kind] = reason
            continue
        if isinstance(result, str):
            out.omitted[kind] = result
        else:
            for fig in result:
                fig.kind = kind
                out.figures[_unique(fig.name, out.figures)] = fig
    return out


def _drawn_from_same(source: Mapping[str, Any] | None, data: Mapping[str, Any]) -> bool:
    """Whether figures drawn from ``source`` show ``data``: every key of ``source`` equal in
    ``data``, the summary key by key (``data``'s may hold more: sizes, timings)."""
    if not source:
        return False
    for key, value in source.items():
        if key == "summary":
            final = _mapping(data.get("summary"))
            if not all(k in final and _same(final[k], v) for k, v in _mapping(value).items()):
                return False
        elif key not in data or not _same(data[key], value):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equality of report data values, arrays (compared whole) included."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _unique(name: str, taken: Mapping[str, Any]) -> str:
    """``name``, or ``name_2``, ``name_3``... if it is taken."""
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def _new_figure(width: float, height: float, *, left: float = 0.8, right: float = 0.25, bottom: float = 0.55,
                top: float = 0.4):
    """A pyplot-free figure on the Agg canvas with one axes, margins given in inches.

    Margins are set from the label lengths instead of by a layout engine: constrained or
    tight layout makes ``savefig`` draw every figure twice and measure every label, which
    was most of the report's rendering time.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    left, right = min(left, 0.5 * width), min(right, 0.4 * width)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height)
    return fig, fig.add_subplot()


def _set_title(ax, text: str, *, fontsize: float = 11, **kwargs) -> None:
    """The axes title at a fixed height.  Matplotlib places a title with no ``y`` by measuring
    every tick label of the axes (to clear labels on top, which these figures never have):
    that measurement was ~30% of the report's drawing time."""
    ax.set_title(text, fontsize=fontsize, y=1.0, **kwargs)


def _label_width(labels: list[str], fontsize: float = 8.0) -> float:
    """Inches a column of tick labels needs (DejaVu Sans averages ~0.6 em per character)."""
    if len(labels) > _MAX_TICK_LABELS:  # not labelled (see _hbar): room for the axis title only
        return 0.6
    longest = max((len(str(label)) for label in labels), default=0)
    return 0.62 * fontsize / 72 * longest + 0.25


def _mapping(x: Any) -> dict:
    return dict(x) if isinstance(x, Mapping) else {}


def _floats(values: Any) -> np.ndarray:
    """A 1-D float array; None entries become NaN."""
    return np.asarray([np.nan if v is None else float(v) for v in (values or [])], dtype=np.float64)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "figure"


def _bar_height(n: int) -> float:
    """Inches for n horizontal bars: readable labels, but never a page-long figure."""
    return min(max(1.3 + 0.24 * n, 2.4), 13.0)


def _hbar(ax, labels: list[str], values: np.ndarray, colors: list[str], *, hatches: list[str] | None = None,
          value_fmt: str = "{:.3g}") -> None:
    """Horizontal bars, first label at the top, values written at the bar ends when few."""
    y = np.arange(len(values))
    bars = ax.barh(y, np.nan_to_num(values), color=colors, height=0.75)
    for bar, hatch in zip(bars, hatches or []):
        if hatch:
            bar.set_hatch(hatch)
            bar.set_edgecolor("white")
    ax.invert_yaxis()
    if len(values) <= _MAX_TICK_LABELS:
        ax.set_yticks(y, labels, fontsize=8)
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{len(values)} entries (too many to label)")
    if len(values) <= _MAX_BAR_VALUES:
        top = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
        for yi, v in zip(y, values):
            if np.isfinite(v):
                ax.text(v + 0.01 * (top or 1.0), yi, value_fmt.format(v), va="center", fontsize=7)
        ax.margins(x=0.12)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)


def _view_colors(labels: list[str], views: list[str]) -> tuple[list[str], dict[str, str]]:
    """One colour per view for labels named ``"view:kernel"`` (so a kernel's view is visible)."""
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    view_of = [lab.split(":", 1)[0] if ":" in lab and lab.split(":", 1)[0] in views else None for lab in labels]
    seen = [v for v in dict.fromkeys(view_of) if v is not None]
    legend = {v: palette[i % len(palette)] for i, v in enumerate(seen)}
    return [legend.get(v, _BLUE) for v in view_of], legend


# --------------------------------------------------------------------------- per figure
def _weights_figures(data: Mapping) -> list[ReportFigure] | str:
    summary = _mapping(data.get("summary"))
    entries = [w for w in summary.get("weights") or [] if isinstance(w, Mapping) and w.get("values")]
    if not entries:
        return "weights: the method learns no kernel, view or filter weights."
    from matplotlib.patches import Patch

    views = [str(v) for v in summary.get("views") or []]
    figures = []
    for entry in entries:
        values = _floats(entry["values"])
        labels = [str(x) for x in entry.get("labels") or []]
        if len(labels) != len(values):
            labels = [str(i) for i in range(len(values))]
        colors, legend = _view_colors(labels, views)
        # The view legend sits right of the axes: inside, it would cover the longest bars.
        fig, ax = _new_figure(7.0, _bar_height(len(values)), left=_label_width(labels),
                              right=_label_width(list(legend)) + 0.45 if len(legend) > 1 else 0.25)
        _hbar(ax, labels, values, colors)
        ax.set_xlabel("weight")
        if len(legend) > 1:
            ax.legend(handles=[Patch(color=c, label=v) for v, c in legend.items()], title="view",
                      fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        name = str(entry.get("name") or "weights")
        total = float(np.nansum(values))
        # Only weights on the simplex have a meaningful "equal share" to compare with.
        uniform = (f" Equal weights would be {1.0 / len(values):.3g} each." if abs(total - 1.0) < 1e-3 else "")
        _set_title(ax, f"{name[:1].upper()}{name[1:]}", fontsize=11)
        figures.append(ReportFigure(
            name=f"weights_{_slug(name)}", title=f"{name[:1].upper()}{name[1:]}", section="model", figure=fig,
            caption=(f"The weight the fit gave each of the {len(values)} entries"
                     f"{' (colour: its view)' if len(legend) > 1 else ''}. Long bars are what the clustering "
                     f"relies on; bars near 0 were switched off.{uniform}")))
    return figures


def _objective_figures(data: Mapping) -> list[ReportFigure] | str:
    summary = _mapping(data.get("summary"))
    history = _floats(summary.get("objective_history"))
    finite = np.isfinite(history)
    if not finite.any():
        return "objective history: the method records none (it is not an iterative alternating fit)."
    converged, n_iter = summary.get("converged"), summary.get("n_iter")
    # Methods record the starting objective too when the history is one longer than n_iter.
    first = 0 if n_iter is not None and history.size == int(n_iter) + 1 else 1
    it = np.arange(first, first + history.size)
    fig, ax = _new_figure(7.0, 3.4)
    ax.plot(it[finite], history[finite], marker="o", markersize=3, color=_BLUE, lw=1.5)
    h = history[finite]
    # A log axis only when the values are positive and span decades: otherwise the tail,
    # where convergence is decided, would be a flat line at the bottom.
    if (h > 0).all() and h.max() / h.min() > 100:
        ax.set_yscale("log")
    ax.set_xlabel("iteration (0: before the first update)" if first == 0 else "iteration")
    ax.set_ylabel("objective")
    ax.grid(alpha=0.3)
    # Whole iterations only, and no more labels than fit: one tick per iteration collided from
    # about 25 iterations on (28 in the demo run).
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    state = {True: "converged", False: "did NOT converge", None: "convergence not recorded"}.get(converged, "")
    change = abs(h[-1] - h[-2]) / max(abs(h[-2]), 1e-300) if h.size > 1 else float("nan")
    _set_title(ax, f"Objective history: {state}" + (f" after {n_iter} iterations" if n_iter is not None else ""),
                 fontsize=11, color=_RED if converged is False else "black")
    caption = ("The objective after each iteration of the fit. A curve that flattens out means the "
               "optimisation settled; one still moving at the last iteration means it stopped at its "
               "iteration limit.")
    if np.isfinite(change):
        caption += f" Relative change over the last iteration: {change:.2g}."
    return [ReportFigure("objective_history", "Objective history", caption, "model", fig)]


def _choice_hint(choice: Mapping, k: int) -> tuple[str, int | None]:
    """(text box, K to mark) of the K rule's verdict for the spectrum figure.

    The verdict comes from the run (``summary["n_clusters_choice"]``: the choice of
    ``n_clusters="auto"``, or the same rule run on the landmark kernel when K was given), never
    from this figure's eigenvalue ratios: the ratio of consecutive kernel eigenvalues put the
    largest gap after the first eigenvalue on most data sets (bench/RESULTS.md, issue 25).
    """
    from .._core._nclusters import k_headline, next_candidates

    best = int(choice.get("n_clusters") or 0)
    nxt = f"next: {next_candidates(choice)}"
    if choice.get("chosen_by_fit"):
        return f"K rule: {k_headline(choice)}\n{nxt}", None
    if choice.get("ambiguous") or best == k:
        return f"K rule (K given): {k_headline(choice)}\n{nxt}", None
    return f"K rule (K given): {k_headline(choice)}\n{nxt}", best


def _spectrum_figures(data: Mapping) -> list[ReportFigure] | str:
    summary = _mapping(data.get("summary"))
    spectrum = _mapping(summary.get("spectrum"))
    values = _floats(spectrum.get("values"))
    values = values[np.isfinite(values)]
    if values.size == 0:
        return "eigen-spectrum: the method records none (it computes no eigendecomposition)."
    k = int(spectrum.get("k") or summary.get("n_clusters") or 0)
    idx = np.arange(1, values.size + 1)
    positive = (values > 0).all()
    log = bool(positive and values.max() / values.min() > 20)
    # A log axis labels its ticks 10^-3 style and a linear one 0.0035: both need more room left
    # of the axes than the default 0.8 in, which clipped the y label.
    fig, ax = _new_figure(7.0, 3.6, left=1.0)
    ax.bar(idx, values, color=[_BLUE if i <= k else _GREY for i in idx], width=0.7)
    ax.plot(idx, values, color="black", lw=0.8, marker="o", markersize=3)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("eigenvalue index")
    ax.set_ylabel("eigenvalue (log scale)" if log else "eigenvalue")
    if values.size <= 40:
        ax.set_xticks(idx)
    ax.grid(axis="y", alpha=0.3)
    choice = _mapping(summary.get("n_clusters_choice"))
    gap_text = ""
    if 1 <= k < values.size:
        ax.axvline(k + 0.5, color=_RED, ls="--", lw=1.5, label=f"K = {k}")
        if choice:
            gap_text, other = _choice_hint(choice, k)
            if other is not None and other < values.size:
                ax.axvline(other + 0.5, color=_ORANGE, ls=":", lw=1.5, label=f"K rule ({other})")
        ax.legend(fontsize=8, loc="upper right")
    if gap_text:
        ax.text(0.98, 0.86, gap_text, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#ccc"})
    _set_title(ax, "Top eigenvalues and K", fontsize=11)
    what = str(spectrum.get("what") or "eigenvalues of the combined kernel")
    caption = (f"{what[:1].upper()}{what[1:]}, largest first; the first K (blue) span the clustering "
               "(red dashed line after the K-th).")
    if choice:
        caption += (" The box is the verdict of the K rule (" + str(choice.get("rule") or "knn-eigengap-votes")
                    + ": the largest eigengap of the landmarks' k-nearest-neighbour graph, voted on by "
                    f"{int(choice.get('n_resamples') or 0)} resamples of the landmarks; when most of "
                    "them see no gap, or when the gap's partition is clearly less modular than another "
                    "k's, the k of the graph's most modular spectral partition), the rule "
                    "n_clusters=\"auto\" uses; it reads the graph's spectrum (next figure), not these "
                    "eigenvalues, whose decay is smooth on most data even when the clusters are clear.")
    else:
        caption += " The K rule was not run for this model (its method has no landmark kernel)."
    if k >= values.size:
        caption += f" Only {values.size} eigenvalues are recorded, so the gap at K = {k} cannot be shown."
    return [ReportFigure("spectrum", "Eigen-spectrum and K", caption, "model", fig)]


def _k_choice_figures(data: Mapping) -> list[ReportFigure] | str:
    """The K rule's evidence: the eigengaps of the landmarks' kNN graph and the resamples' votes."""
    summary = _mapping(data.get("summary"))
    choice = _mapping(summary.get("n_clusters_choice"))
    mu = _floats(choice.get("eigenvalues"))
    if not choice or mu.size < 2:
        return "K choice: not recorded (the method has no landmark kernel, or the run predates the K rule)."
    from .._core._nclusters import MODULARITY_MARGIN, NO_STRUCTURE_SHARE

    k_lo, k_hi = (int(v) for v in (choice.get("k_range") or (1, mu.size - 1)))
    gaps = mu[:-1] - mu[1:]                       # gaps[k - 1] = mu_k - mu_{k+1}
    ks = np.arange(1, gaps.size + 1)
    best, runner = int(choice["n_clusters"]), int(choice["runner_up"])
    k_fit = int(summary.get("n_clusters") or best)
    votes = {int(kk): float(v) for kk, v in choice.get("candidates") or []}
    fig, ax = _new_figure(7.0, 3.6, left=0.9, right=0.9)
    colors = [_GREY if not k_lo <= kk <= k_hi else (_ORANGE if kk == best else _BLUE) for kk in ks]
    ax.bar(ks, gaps, color=colors, width=0.7)
    ax.set_xlabel("k")
    ax.set_ylabel(r"eigengap $\mu_k - \mu_{k+1}$")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=20, integer=True))
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if votes:
        ax2 = ax.twinx()
        vk = sorted(votes)
        ax2.plot(vk, [votes[v] for v in vk], ls="none", marker="D", markersize=5, color=_RED,
                 label="share of resamples picking k")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("share of votes", color=_RED)
        ax2.legend(fontsize=8, loc="upper right")
    from .._core._nclusters import k_headline, next_candidates

    title = f"K rule: {k_headline(choice)}; next {next_candidates(choice)}"
    _set_title(ax, title, fontsize=10, color=_RED if choice.get("ambiguous") else "black")
    given = "" if choice.get("chosen_by_fit") else f" K = {k_fit} was given by hand; this is what the rule says."
    caption = ("The K rule (" + str(choice.get("rule")) + "): bars are the gaps between consecutive eigenvalues "
               "μ of the normalised k-nearest-neighbour graph of the landmarks (from the uniform combination "
               f"of the base kernels; {choice.get('n_landmarks')} landmarks, {choice.get('n_neighbors')} "
               f"neighbours). " + (
                   ("Most spectra have no gap at all (their largest is after μ1), so the best guess (orange) "
                    if float(choice.get("no_structure_share") or 0.0) >= NO_STRUCTURE_SHARE else
                    f"The largest gap in {k_lo}..{k_hi} (at k = {runner}) splits the graph into groups that it "
                    f"divides further: their partition is clearly less modular (by over "
                    f"{MODULARITY_MARGIN:.0%}) than the best one, so the best guess (orange) ") +
                   f"is the k in {k_lo}..{k_hi} whose spectral partition of the graph is the most modular "
                   f"(its edges stay inside the groups most often beyond chance); the runner-up is the "
                   f"largest gap in that range (grey: outside). "
                   if choice.get("criterion") == "modularity" else
                   f"The chosen K (orange) has the largest gap in {k_lo}..{k_hi} (grey: outside). ") +
               "Red diamonds: the share of resampled landmark sets (80% each) whose largest gap falls at each "
               "candidate (the votes). The confidence is calibrated: the share of the bench's choices resting on "
               f"the same evidence ({choice.get('evidence') or 'not recorded'}) that had the labels' K; under 0.9 "
               "K is a guess: the fit still uses it, and the next candidates are worth trying." + given)
    return [ReportFigure("k_choice", "Choosing K", caption, "model", fig)]


def _pep_figures(data: Mapping) -> list[ReportFigure] | str:
    summary = _mapping(data.get("summary"))
    pep = _mapping(summary.get("pep"))
    base = _mapping(pep.get("base"))
    if not pep or (not base and pep.get("combined") is None):
        return "PEP: the method records no principal eigenvalue proportions."
    dropped = {str(d) for d in pep.get("dropped") or []}
    labels, values, colors, hatches = [], [], [], []
    for title, key, color in (("combined kernel", "combined", _ORANGE),
                              ("combined, after the graph filter", "combined_filtered", _RED)):
        if pep.get(key) is not None:
            labels.append(title)
            values.append(float(pep[key]))
            colors.append(color)
            hatches.append("")
    for name, v in base.items():
        gone = str(name) in dropped
        labels.append(f"{name} (dropped)" if gone else str(name))
        values.append(np.nan if v is None else float(v))
        colors.append(_GREY if gone else _BLUE)
        hatches.append("//" if gone else "")
    fig, ax = _new_figure(7.0, _bar_height(len(values)), left=_label_width(labels))
    _hbar(ax, labels, np.asarray(values), colors, hatches=hatches)
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("PEP: share of the kernel's spectrum in its top t eigenvalues")
    chance = _mapping(summary.get("diagnostics")).get("pep_chance")
    t_, n_ = pep.get("t"), summary.get("n_landmarks")
    if not isinstance(chance, (int, float)) and isinstance(t_, int) and isinstance(n_, int) and n_ > 0:
        chance = t_ / n_  # the reference a reader needs to read the bars (t/n: no structure)
    if isinstance(chance, (int, float)) and math.isfinite(chance):
        ax.axvline(chance, color="black", ls=":", lw=1, label=f"chance (t/n = {chance:.2g})")
        ax.legend(fontsize=8, loc="lower right")
    t = pep.get("t") or "K"
    _set_title(ax, f"Principal eigenvalue proportion (t = {t})", fontsize=11)
    caption = ("How concentrated each kernel's spectrum is: the share of its trace in its top t eigenvalues, "
               "for each base kernel (blue) and the combined kernel (orange). 1 means t eigenvectors carry the "
               "whole kernel; the chance level t/n means no more than a random t-dimensional subspace.")
    caption += _pep_reading(pep, summary, chance)
    if "combined_filtered" in pep:
        caption += " Red: the combined kernel after the graph filter."
    if dropped:
        caption += f" Grey hatched: {len(dropped)} kernel(s) dropped as degenerate."
    return [ReportFigure("pep", "Principal eigenvalue proportion of the kernels", caption, "model", fig)]


def _pep_reading(pep: Mapping, summary: Mapping, chance: Any) -> str:
    """What the PEP numbers mean for this run (they measure concentration, not whether fusing worked)."""
    n, t = summary.get("n_landmarks"), pep.get("t")
    combined = pep.get("combined")
    base = _mapping(pep.get("base"))
    out = ""
    if isinstance(chance, (int, float)) and chance > 0 and isinstance(combined, (int, float)):
        ref = f"t/n = {t}/{n} = {chance:.3g}" if isinstance(n, int) and isinstance(t, int) else f"{chance:.3g}"
        out += (f" Here the chance level is {ref}; the combined kernel's {combined:.3g} is "
                f"{combined / chance:.0f} times it.")
    # Ky Fan: the top-t eigenvalue sum of a sum of PSD kernels is at most the sum of theirs, so the
    # combined PEP is at most the trace-weighted mean of the base PEPs (unit-diagonal kernels: the
    # weights are gamma^2): it can never beat the best base kernel.
    weights = next((w for w in summary.get("weights") or [] if w.get("name") == "kernel weights"), None)
    if weights and isinstance(combined, (int, float)) and len(weights.get("values") or []) == len(base):
        g2 = np.asarray(weights["values"], dtype=np.float64) ** 2
        peps = np.asarray([np.nan if v is None else float(v) for v in base.values()])
        if g2.sum() > 0 and np.isfinite(peps).all():
            bound = float(g2 @ peps / g2.sum())
            out += (f" A weighted sum of kernels cannot have a larger PEP than the weighted mean of theirs "
                    f"(Ky Fan's inequality; here {bound:.3g} with these weights), and lands below it when the "
                    "kernels' top eigenvectors differ: a combined bar shorter than the base kernels' is expected, "
                    "not a failed fusion.")
    elif base:
        out += (" PEP measures how concentrated a spectrum is, not whether the clusters are right: a combined bar "
                "shorter than some base kernels' is not by itself a failed fusion.")
    scores = _mapping(summary.get("scores"))
    if isinstance(scores.get("acc"), (int, float)):
        out += f" What the clustering is worth is its agreement with labels: ACC {scores['acc']:.3f} on this run."
    return out


def _cluster_size_figures(data: Mapping) -> list[ReportFigure] | str:
    if _mapping(data.get("assignment")).get("cluster_sizes"):
        return []  # an assignment's sizes are drawn against the fitted ones (_cluster_shift_figures)
    summary = _mapping(data.get("summary"))
    sizes = _floats(summary.get("cluster_sizes"))
    if sizes.size == 0:
        return "cluster sizes: not in the run summary (the labels stage has not finished)."
    n = float(summary.get("N") or np.nansum(sizes))
    k = sizes.size
    fig, ax = _new_figure(7.0, 3.4, left=0.9, right=0.8)
    if k <= 200:
        ax.bar(np.arange(k), sizes, color=_BLUE, width=0.8)
    else:  # one filled outline instead of thousands of rectangles
        ax.stairs(np.nan_to_num(sizes), np.arange(k + 1) - 0.5, fill=True, color=_BLUE)
    ax.axhline(n / k, color=_RED, ls="--", lw=1)
    # Named at its right end, outside the bars: a legend placed "best" searched every bar for
    # room (a third of this figure's drawing time) and could still sit on one.
    ax.annotate(f"even split\nN/K = {n / k:,.0f}", xy=(1.0, n / k), xycoords=("axes fraction", "data"),
                xytext=(4, 0), textcoords="offset points", va="center", fontsize=7, color=_RED)
    ax.set_xlabel("cluster")
    ax.set_ylabel("points")
    if k <= _MAX_TICK_LABELS:
        ax.set_xticks(np.arange(k))
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    smallest, largest = np.nanmin(sizes), np.nanmax(sizes)
    _set_title(ax, f"Cluster sizes: smallest {smallest / n:.1%}, largest {largest / n:.1%} of {n:,.0f} points",
                 fontsize=11)
    caption = ("Points per cluster. Sizes need not be equal, but a nearly empty cluster often means K "
               "is too large, and one cluster holding most points that K is too small or a kernel "
               "bandwidth is off.")
    return [ReportFigure("cluster_sizes", "Cluster sizes", caption, "clusters", fig)]


def _cluster_colors(k: int) -> np.ndarray:
    """k distinguishable RGBA colours: tab10/tab20, then a hue wheel stepped so neighbours differ."""
    from matplotlib import colormaps

    if k <= 10:
        return np.asarray(colormaps["tab10"].colors)[:k]
    if k <= 20:
        return np.asarray(colormaps["tab20"].colors)[:k]
    # Stepping the hue by the golden ratio keeps clusters with adjacent ids far apart in colour.
    hues = (np.arange(k) * 0.618033988749895) % 1.0
    return colormaps["hsv"](hues)[:, :3]


def _embedding_figures(data: Mapping) -> list[ReportFigure] | str:
    sample = _mapping(data.get("embedding_sample"))
    if not sample or sample.get("coords") is None:
        return "embedding view: the report data holds no embedding sample."
    coords = np.asarray(sample["coords"], dtype=np.float64)
    labels = np.asarray(sample.get("labels") if sample.get("labels") is not None else [], dtype=np.int64)
    if coords.ndim != 2 or coords.shape[1] < 2 or coords.shape[0] == 0:
        return f"embedding view: the sample's coordinates have shape {coords.shape}, not (n, 2)."
    if labels.shape != (coords.shape[0],):
        return (f"embedding view: {labels.size} labels for {coords.shape[0]} sampled rows; "
                "cannot colour the points by cluster.")
    keep = np.isfinite(coords[:, :2]).all(axis=1) & (labels >= 0)
    xy, lab = coords[keep, :2], labels[keep]
    if xy.shape[0] == 0:
        return "embedding view: no finite sampled coordinates."
    k = int(lab.max()) + 1
    palette = _cluster_colors(k)
    fig, ax = _new_figure(6.8, 5.6, right=1.0 if k <= 20 else 0.25)
    # One marker line per cluster uses Agg's draw_markers path (one stamped marker), about
    # twice as fast as a scatter with a colour per point at 20k rows.  Drawing cluster after
    # cluster would paint the last clusters over the first wherever they overlap, so the
    # (randomly ordered) sample is drawn in interleaved rounds, each round every cluster.
    # Beyond _MAX_MARKER_LINES clusters the per-artist overhead wins: one scatter call, whose
    # cost does not grow with K.
    size = 1.8 if xy.shape[0] > 5000 else 3.5
    handles = {}
    if k <= _MAX_MARKER_LINES:
        for start in range(_SCATTER_ROUNDS):
            part_xy, part_lab = xy[start::_SCATTER_ROUNDS], lab[start::_SCATTER_ROUNDS]
            for c in np.unique(part_lab):
                rows = part_lab == c
                (line,) = ax.plot(part_xy[rows, 0], part_xy[rows, 1], ls="", marker="o", ms=size, mew=0,
                                  color=palette[c], alpha=0.7)
                handles.setdefault(int(c), line)
    else:
        ax.scatter(xy[:, 0], xy[:, 1], c=palette[lab], s=size**2, linewidths=0, alpha=0.7)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("component 1")
    ax.set_ylabel("component 2")
    ax.grid(alpha=0.2)
    if k <= 20:
        ordered = [handles[c] for c in sorted(handles)]
        ax.legend(ordered, [str(c) for c in sorted(handles)], title="cluster", fontsize=7, title_fontsize=8,
                  loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, markerscale=3)
    _set_title(ax, f"Embedding: {xy.shape[0]:,} sampled rows coloured by cluster", fontsize=11)
    what = str(sample.get("what") or "a 2-D projection of the embedding")
    caption = (f"{what[:1].upper()}{what[1:]}. Compact, separate colour groups mean the clusters are "
               "well defined in the embedding; mixed colours show where clusters overlap (the 2-D "
               "projection can hide separation that exists in more dimensions).")
    return [ReportFigure("embedding", "Embedding sample by cluster", caption, "clusters", fig)]


def _distance_histogram_figures(data: Mapping) -> list[ReportFigure] | str:
    assignment = _mapping(data.get("assignment"))
    hist = _mapping(assignment.get("distance_hist"))
    edges, counts = _floats(hist.get("edges")), _floats(hist.get("counts"))
    if counts.size == 0 or edges.size != counts.size + 1:
        return "distance histogram: the assignment records no distance histogram."
    p99 = assignment.get("fit_p99")
    share = _mapping(assignment.get("drift")).get("share_beyond_fit_p99")
    fig, ax = _new_figure(7.0, 3.4, left=0.9)
    ax.stairs(counts, edges, fill=True, color=_BLUE, alpha=0.8)
    if isinstance(p99, (int, float)) and math.isfinite(p99):
        ax.axvline(p99, color=_RED, ls="--", lw=1.5, label=f"fit's 99th percentile ({p99:.3g})")
        ax.axvspan(p99, max(edges[-1], p99), color=_RED, alpha=0.08)
        ax.legend(fontsize=8, loc="upper right")
    ax.set_xlabel("distance to the nearest cluster centre")
    ax.set_ylabel("rows")
    ax.grid(axis="y", alpha=0.3)
    title = "Distance to the nearest centre"
    if isinstance(share, (int, float)) and math.isfinite(share):
        title += f": {share:.1%} of rows beyond the fit's 99th percentile"
    _set_title(ax, title, fontsize=10)
    caption = ("How far each new row lies from the centre it was assigned to. A batch like the fit data "
               "puts about 1% of its rows right of the red line (the fit's 99th percentile); a heavy "
               "tail there means rows the model has not seen the like of.")
    return [ReportFigure("distance_histogram", "Assignment distances", caption, "assignment", fig)]


def _cluster_shift_figures(data: Mapping) -> list[ReportFigure] | str:
    assignment = _mapping(data.get("assignment"))
    batch, fitted = _floats(assignment.get("cluster_sizes")), _floats(assignment.get("fitted_sizes"))
    if batch.size == 0 or fitted.size == 0:
        return "cluster-size shift: the assignment records no batch or fitted cluster sizes."
    k = max(batch.size, fitted.size)
    batch, fitted = np.pad(batch, (0, k - batch.size)), np.pad(fitted, (0, k - fitted.size))
    p_batch, p_fit = batch / max(np.nansum(batch), 1.0), fitted / max(np.nansum(fitted), 1.0)
    x = np.arange(k)
    # The legend sits right of the axes, in a margin of its own: inside ("upper right") it
    # covered the last cluster's bars.
    fig, ax = _new_figure(7.0, 3.4, right=1.2)
    ax.bar(x - 0.2, p_fit, width=0.4, color=_GREY, label="fit")
    ax.bar(x + 0.2, p_batch, width=0.4, color=_BLUE, label="this batch")
    ax.set_xlabel("cluster")
    ax.set_ylabel("share of rows")
    if k <= _MAX_TICK_LABELS:
        ax.set_xticks(x)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    drift = _mapping(assignment.get("drift"))
    stats = [f"{label} {drift[key]:.3g}" for key, label in (("cluster_tv", "total variation"),
                                                            ("cluster_psi", "PSI"))
             if isinstance(drift.get(key), (int, float))]
    _set_title(ax, "Cluster proportions, fit vs batch" + (f": {', '.join(stats)}" if stats else ""), fontsize=11)
    caption = ("Share of rows per cluster when the model was fitted (grey) and in this batch (blue). "
               "Pairs of bars of the same height mean the batch has the fit's mix of clusters; a cluster "
               "that grows or shrinks markedly is a shift the drift table scores.")
    return [ReportFigure("cluster_shift", "Cluster-size shift", caption, "assignment", fig)]


#: (figure kind, builder, what it needs) in page order.  A builder returns its figures or a
#: one-line reason it has none.
_BUILDERS: list[tuple[str, Callable[[Mapping], list[ReportFigure] | str], str]] = [
    ("weights", _weights_figures, "summary"),
    ("objective_history", _objective_figures, "summary"),
    ("spectrum", _spectrum_figures, "summary"),
    ("k_choice", _k_choice_figures, "summary"),
    ("pep", _pep_figures, "summary"),
    ("cluster_sizes", _cluster_size_figures, "summary"),
    ("embedding", _embedding_figures, "any"),
    ("distance_histogram", _distance_histogram_figures, "assignment"),
    ("cluster_shift", _cluster_shift_figures, "assignment"),
]
