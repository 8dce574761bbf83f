"""The HTML / PNG run report (mkdist._report: _figures, _tables, _page, _files), rendered for real
and read back.

Every registered method is fitted on small data, its ``summary()`` plus plausible run facts
becomes the report data, and the page is parsed with ``html.parser``: every figure the summary
supports is there as an inline PNG that decodes, nothing is fetched from elsewhere, there is no
script.  Assignment reports show the distance histogram, the cluster shift and a drift table
that flags exactly the signals above their thresholds; data with most keys missing still
renders; ``render_png`` writes files that decode.
"""

from __future__ import annotations

import base64
import io
import re
import warnings
from html.parser import HTMLParser

import numpy as np
import pytest
from matplotlib.image import imread

import mkdist
from mkdist._report._figures import DPI, build_figures
from mkdist._report._files import render_png, write_html
from mkdist._report._page import render_html
from mkdist.errors import DegenerateKernelWarning, EmbeddingStabilityWarning

from .conftest import make_blobs_views

METHODS = mkdist.available_methods()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_PNG = "data:image/png;base64,"
#: Elements HTML never closes.
VOID = {"meta", "img", "br", "hr", "link", "input", "source", "wbr", "col", "area", "base", "embed"}


# ----------------------------------------------------------------------------- helpers
class PageParser(HTMLParser):
    """Collects what the checks need: tag balance, images by figure id, drift-table rows."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.unbalanced: list[str] = []
        self.tags: set[str] = set()
        self.url_attrs: list[tuple[str, str, str]] = []
        self.figure_images: dict[str, dict] = {}
        self.drift_rows: list[dict] = []
        self._figure: str | None = None
        self._in_drift_table = False
        self._row: dict | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        if tag not in VOID:
            self.open.append(tag)
        for name in ("src", "href", "srcset", "action", "poster", "data"):
            if name in attrs:
                self.url_attrs.append((tag, name, attrs[name] or ""))
        if tag == "figure":
            self._figure = (attrs.get("id") or "").removeprefix("fig-")
        if tag == "img" and self._figure is not None:
            self.figure_images[self._figure] = attrs
        if tag == "table" and "drift-table" in (attrs.get("class") or ""):
            self._in_drift_table = True
        if tag == "tr" and self._in_drift_table:
            self._row = {"class": attrs.get("class") or "", "cells": []}
        if tag in ("th", "td") and self._row is not None:
            self._text = []

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.unbalanced.append(f"</{tag}> with open {self.open[-3:]}")
        else:
            self.open.pop()
        if tag == "figure":
            self._figure = None
        if tag in ("th", "td") and self._row is not None:
            self._row["cells"].append("".join(self._text).strip())
        if tag == "tr" and self._row is not None:
            if self._row["cells"] and self._row["cells"][0] != "signal":
                self.drift_rows.append(self._row)
            self._row = None
        if tag == "table":
            self._in_drift_table = False

    def handle_data(self, data):
        self._text.append(data)


def parse_page(page: str) -> PageParser:
    """Parse the page and check what every report must hold: well formed, self-contained."""
    parser = PageParser()
    parser.feed(page)
    parser.close()
    assert page.startswith("<!DOCTYPE html>")
    assert not parser.unbalanced and not parser.open, (parser.unbalanced, parser.open)
    # Self-contained: no script, no external resource of any kind, every image inline.
    assert "<script" not in page.lower() and "script" not in parser.tags
    assert not re.search(r"https?://", page), re.search(r".{40}https?://.{40}", page)
    assert not {"link", "iframe", "object", "embed", "audio", "video"} & parser.tags
    assert "@import" not in page and "url(" not in page
    for tag, name, value in parser.url_attrs:
        assert tag == "img" and name == "src" and value.startswith(DATA_PNG), (tag, name, value[:60])
    return parser


def decode_png(payload: bytes) -> np.ndarray:
    """The pixels of a PNG, after checking its signature (a real decode, by Pillow)."""
    assert payload[:8] == PNG_SIGNATURE
    pixels = imread(io.BytesIO(payload), format="png")
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    return pixels


def check_figures(parser: PageParser, expected: set[str]) -> None:
    """Exactly the expected figures, each an inline PNG of the size its tag announces."""
    assert set(parser.figure_images) == expected
    for name, attrs in parser.figure_images.items():
        src = attrs["src"]
        assert src.startswith(DATA_PNG), name
        pixels = decode_png(base64.b64decode(src.removeprefix(DATA_PNG), validate=True))
        assert pixels.shape[:2] == (int(attrs["height"]), int(attrs["width"])), name
        assert attrs.get("alt"), name


def _quiet_fit(est, X):
    with warnings.catch_warnings():
        # Tiny test data: near-identity kernels and weak eigen-gaps are expected, not the point.
        warnings.simplefilter("ignore", DegenerateKernelWarning)
        warnings.simplefilter("ignore", EmbeddingStabilityWarning)
        return est.fit(X)


def run_report_data(est, X, y) -> dict:
    """Report data as ``pipeline.report_data`` builds it: the summary plus the run's facts."""
    labels = np.asarray(est.labels_)
    H = np.asarray(est.transform(X), dtype=np.float64)
    # The 2-D view: first two principal components of the embedding, as the pipeline samples it.
    centred = H - H.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ vt[:2].T if vt.shape[0] >= 2 else np.c_[centred[:, :1], np.zeros(len(H))]
    summary = {
        **est.summary(),
        "N": int(labels.size),
        "cluster_sizes": np.bincount(labels, minlength=est.n_clusters).tolist(),
        "timings": {"sample_s": 0.01, "fit_s": 0.8, "embed_s": 0.3, "kmeans_s": 0.2, "write_s": 0.05, "total_s": 1.4},
        "scores": mkdist.clustering_scores(y, labels),
        "params": {"method": est.method, **{k: v for k, v in est.get_params().items() if v is not None}},
        "kmeans": {"inertia": 12.5, "n_iter": 4},
        "resumed_stages": ["landmarks"],
    }
    return {"title": f"mkdist run ({est.method})", "store": "/tmp/runs/blobs.zarr", "kind": "run",
            "generated": "2026-05-01T12:00:00+00:00", "summary": summary,
            "embedding_sample": {"coords": coords.tolist(), "labels": labels.tolist(),
                                 "what": f"first two principal components of H_N on {labels.size} rows"},
            "assignment": None}


def expected_run_figures(summary: dict) -> set[str]:
    """The figures a run report must show, worked out from the summary alone."""
    names = {"cluster_sizes", "embedding"}
    weights = [w for w in summary["weights"] if w["values"]]
    if weights:
        assert len({w["name"] for w in weights}) == len(weights)
        names |= {"weights_" + re.sub(r"[^a-z0-9]+", "_", w["name"].lower()).strip("_") for w in weights}
    for key in ("objective_history", "spectrum", "pep"):
        if summary.get(key):
            names.add(key)
    if (summary.get("n_clusters_choice") or {}).get("eigenvalues"):
        names.add("k_choice")  # the K rule's verdict, stored by the model stage
    return names


@pytest.fixture(scope="module")
def fitted_reports():
    """Report data of every registered method, fitted once for the module."""
    views, y = make_blobs_views(n_per_cluster=30, n_clusters=3, seed=4)
    out = {}
    for name in METHODS:
        cls = mkdist.get_method(name)
        params = {"n_clusters": 3, "random_state": 0}
        if "n_init" in cls().get_params():
            params["n_init"] = 2
        X = list(views) if cls.multi_view else views[0]
        out[name] = run_report_data(_quiet_fit(cls(**params), X), X, y)
    return out


@pytest.fixture(scope="module")
def rendered_reports(fitted_reports):
    """(data, figures, page) of every method; figures drawn once and shared, as the CLI does."""
    out = {}
    for name, data in fitted_reports.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a figure left out of real data is a bug
            figures = build_figures(data)
            out[name] = (data, figures, render_html(data, figures))
    return out


# ----------------------------------------------------------------------------- run reports
@pytest.mark.parametrize("method", METHODS)
def test_run_report_shows_every_figure_the_method_records(method, rendered_reports):
    data, _, page = rendered_reports[method]
    parser = parse_page(page)
    summary = data["summary"]
    check_figures(parser, expected_run_figures(summary))
    # The summary tables: sizes, method, parameters, timings per stage, metrics.
    for text in (summary["estimator"], f"{summary['N']:,}", "Time per stage", "embed", "Parameters",
                 "random_state", "Agreement with the given labels", "nmi", "resumed stages"):
        assert text in page, text
    # What the method lacks is said, once, in a note (not silently dropped, not an error).
    notes = page.split("<h2>Not shown</h2>")[-1] if "<h2>Not shown</h2>" in page else ""
    for key, word in (("objective_history", "objective history"), ("spectrum", "eigen-spectrum"),
                      ("pep", "PEP")):
        assert (word in notes) == (not summary.get(key)), (key, notes)
    assert ("weights:" in notes) == (not summary["weights"])


def test_figures_mark_what_the_reader_must_see(rendered_reports):
    """K on the spectrum, dropped kernels on PEP, one bar chart per weights entry."""
    for method, (data, built, _) in rendered_reports.items():
        summary = data["summary"]
        figures = built.figures
        if summary.get("spectrum") and summary["spectrum"]["k"] < len(summary["spectrum"]["values"]):
            ax = figures["spectrum"].figure.axes[0]
            k_lines = [line for line in ax.get_lines() if line.get_label() == f"K = {summary['n_clusters']}"]
            assert k_lines and k_lines[0].get_xdata()[0] == summary["n_clusters"] + 0.5, method
        if summary.get("pep"):
            labels = [t.get_text() for t in figures["pep"].figure.axes[0].get_yticklabels()]
            assert labels[0] == "combined kernel"
            assert {lab.removesuffix(" (dropped)") for lab in labels[1:]} >= set(summary["pep"]["base"])
            for name in summary["pep"].get("dropped") or []:
                assert f"{name} (dropped)" in labels, method
            if "combined_filtered" in summary["pep"]:
                assert labels[1] == "combined, after the graph filter"
        for entry in summary["weights"]:
            bars = [f for n, f in figures.items() if n.startswith("weights_") and f.title.lower() == entry["name"]]
            assert len(bars) == 1, (method, entry["name"])
            heights = [p.get_width() for p in bars[0].figure.axes[0].patches]
            np.testing.assert_allclose(heights, entry["values"])


# ----------------------------------------------------------------------------- assignment
def assignment_data(*, drifted: bool) -> dict:
    """An assignment report: the model's summary, the batch's distances, sizes and drift."""
    rng = np.random.default_rng(0)
    distances = rng.gamma(2.0, 0.5, size=5000) * (1.6 if drifted else 1.0)
    counts, edges = np.histogram(distances, bins=40)
    fit_p99 = float(np.quantile(rng.gamma(2.0, 0.5, size=5000), 0.99))
    share = float((distances > fit_p99).mean())
    thresholds = {"share_beyond_fit_p99": 0.05, "cluster_tv": 0.1, "cluster_psi": 0.2,
                  "mean_shift_sd": 0.25, "scale_ratio_max": 1.25}
    if drifted:
        sizes, views = [3000, 1000, 1000], {"a": {"mean_shift_sd": 1.02, "scale_ratio": 1.01},
                                            "b": {"mean_shift_sd": 0.03, "scale_ratio": 0.5}}
        tv, psi = 0.267, 0.31
        reasons = [f"{share:.1%} of the rows lie beyond the fit's 99th percentile of distance to their centre",
                   "cluster proportions moved by total variation 0.267 (threshold 0.1)",
                   "cluster population stability index 0.310 (threshold 0.2)",
                   "view 'a': feature means moved by 1.02 fitted sd on average (threshold 0.25)",
                   "view 'b': feature scales changed by a factor 0.50 (threshold 1.25)"]
    else:
        sizes, views = [1690, 1650, 1660], {"a": {"mean_shift_sd": 0.02, "scale_ratio": 1.01},
                                            "b": {"mean_shift_sd": 0.03, "scale_ratio": 0.99}}
        tv, psi, reasons = 0.005, 0.0002, []
    return {
        "title": "mkdist assignment", "store": "/tmp/runs/nightly.zarr", "kind": "assignment",
        "generated": "2026-05-02T03:00:00+00:00",
        # The fitted model's summary, as the run stored it.
        "summary": {"method": "model-method", "estimator": "SomeEstimator", "n_clusters": 3, "N": 5000,
                    "cluster_sizes": [1700, 1650, 1650], "pep": {"t": 3, "base": {"a:rbf": 0.9}, "combined": 0.95}},
        "assignment": {"N": 5000, "cluster_sizes": sizes, "fitted_sizes": [1700, 1650, 1650],
                       "params": {"model_store": "/tmp/runs/blobs.zarr", "input": "/data/nightly.parquet"},
                       "distance_hist": {"edges": edges.tolist(), "counts": counts.tolist()}, "fit_p99": fit_p99,
                       "drift": {"share_beyond_fit_p99": share, "cluster_tv": tv, "cluster_psi": psi, "views": views,
                                 "thresholds": thresholds, "drifted": drifted, "reasons": reasons}},
    }


@pytest.mark.parametrize("drifted", [True, False])
def test_assignment_report_shows_distances_shift_and_drift(drifted):
    data = assignment_data(drifted=drifted)
    parser = parse_page(page := render_html(data))
    # The batch's sizes are drawn against the fitted ones (cluster_shift), not on their own.
    check_figures(parser, {"distance_histogram", "cluster_shift", "pep"})
    # The batch's figures lead the page and the figure list (render_png writes that order).
    assert list(build_figures(data).figures) == ["distance_histogram", "cluster_shift", "pep"]
    assert page.index("Drift against the fit") < page.index('id="fig-distance_histogram"') < page.index(
        'id="fig-pep"')
    assert "Assignment parameters" in page and "model_store" in page
    rows = {row["cells"][0]: row for row in parser.drift_rows}
    assert len(rows) == 3 + 2 * 2  # share, TV, PSI, then mean shift and scale ratio per view
    flagged = {name for name, row in rows.items() if "drift" in row["class"].split()}
    if drifted:
        assert "Drift detected" in page and "feature means moved by 1.02" in page
        # Exactly the signals above their thresholds; a halved scale counts like a doubled one.
        assert flagged == {"share of rows beyond the fit's 99th percentile",
                           "cluster proportions: total variation", "cluster proportions: PSI",
                           "view a: mean shift (fitted sd)", "view b: scale ratio (batch sd / fit sd)"}
        assert all("DRIFT" in rows[name]["cells"][-1] for name in flagged)
    else:
        assert "No drift" in page and "Drift detected" not in page
        assert flagged == set() and all(row["cells"][-1] == "ok" for row in rows.values())
    # The fit's 99th percentile is drawn where the data says.
    ax = build_figures(data).figures["distance_histogram"].figure.axes[0]
    p99 = data["assignment"]["fit_p99"]
    assert any(line.get_xdata()[0] == p99 for line in ax.get_lines())


# ----------------------------------------------------------------------------- missing data
SPARSE = {
    "empty": {},
    "all none": {"title": None, "store": None, "kind": None, "summary": None, "embedding_sample": None,
                 "assignment": None},
    "summary of nulls": {"kind": "run", "summary": {
        "method": "m", "estimator": None, "n_clusters": None, "views": None, "n_features": None, "weights": [],
        "kernel_names": None, "objective_history": None, "n_iter": None, "converged": None, "spectrum": None,
        "pep": None, "diagnostics": {}, "N": None, "cluster_sizes": None, "timings": None, "scores": None,
        "params": None}},
    "assignment without anything": {"kind": "assignment", "summary": None, "assignment": None},
    "assignment without drift": {"kind": "assignment", "assignment": {
        "N": 10, "cluster_sizes": [6, 4], "fitted_sizes": None, "distance_hist": None, "drift": None}},
    "spectrum shorter than K": {"summary": {"n_clusters": 5, "spectrum": {"values": [3.0, 2.0], "k": 5}}},
    "weights labels mismatched": {"summary": {"weights": [{"name": "w", "labels": ["a"], "values": [0.2, 0.8]}]}},
    "embedding labels mismatched": {"embedding_sample": {"coords": [[0, 0], [1, 1]], "labels": [0]}},
}


@pytest.mark.parametrize("name", list(SPARSE))
def test_report_renders_when_most_keys_are_missing(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        page = render_html(SPARSE[name])
    parser = parse_page(page)
    for attrs in parser.figure_images.values():
        decode_png(base64.b64decode(attrs["src"].removeprefix(DATA_PNG)))
    if name == "embedding labels mismatched":
        assert "1 labels for 2 sampled rows" in page
    if name == "spectrum shorter than K":
        assert "spectrum" in parser.figure_images and "cannot be shown" in page
    if name == "assignment without drift":
        assert "No drift statistics were recorded" in page


def test_malformed_figure_data_is_left_out_with_a_warning():
    data = {"summary": {"cluster_sizes": [3, 4], "objective_history": ["not", "numbers"]}}
    with pytest.warns(RuntimeWarning, match="objective_history.*could not be drawn"):
        page = render_html(data)
    parser = parse_page(page)
    assert set(parser.figure_images) == {"cluster_sizes"}
    assert "could not be drawn" in page


# ----------------------------------------------------------------------------- PNG directory
def test_render_png_writes_decodable_figures_and_an_index(tmp_path, fitted_reports):
    data = {**fitted_reports[METHODS[0]], "assignment": assignment_data(drifted=True)["assignment"]}
    figures = build_figures(data)
    out = tmp_path / "report"
    paths = render_png(data, out, figures)
    assert paths[-1] == out / "index.md"
    assert [p.stem for p in paths[:-1]] == list(figures.figures)
    index = paths[-1].read_text()
    for path in paths[:-1]:
        fig = figures.figures[path.stem]
        pixels = decode_png(path.read_bytes())
        assert pixels.shape[:2] == tuple(round(float(v) * DPI) for v in fig.figure.get_size_inches()[::-1])
        assert f"]({path.name})" in index
    assert "DRIFT DETECTED" in index
    # Written again into the same directory: replaced in place, no temporary files left.
    assert render_png(data, out, figures) == paths
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)


def test_write_html_writes_the_page_whole(tmp_path):
    """Local: a new directory, one file, no temporary left; an fsspec URL: one object."""
    import fsspec

    data = assignment_data(drifted=True)
    figures = build_figures(data)
    page = render_html(data, figures)
    target = tmp_path / "reports" / "nightly.report.html"
    assert write_html(data, target, figures) == str(target)
    assert target.read_text(encoding="utf-8") == page and [p.name for p in target.parent.iterdir()] == [target.name]
    write_html(data, "memory://reports/nightly.report.html", figures)
    fs = fsspec.filesystem("memory")
    assert fs.cat_file("/reports/nightly.report.html").decode("utf-8") == page
    fs.rm("/reports", recursive=True)


def test_render_png_writes_next_to_a_remote_store():
    """An fsspec URL (here the in-memory filesystem) gets the same files, named by URL."""
    import fsspec

    data = assignment_data(drifted=False)
    urls = render_png(data, "memory://reports/nightly.report")
    fs = fsspec.filesystem("memory")
    assert [u.rsplit("/", 1)[1] for u in urls] == [f"{n}.png" for n in build_figures(data).figures] + ["index.md"]
    for url in urls[:-1]:
        decode_png(fs.cat_file(url))
    assert "No drift" not in fs.cat_file(urls[-1]).decode() and "no drift" in fs.cat_file(urls[-1]).decode()
    fs.rm("/reports", recursive=True)


# ----------------------------------------------------------------------------- a full-size sample
def test_page_with_a_20k_point_embedding_sample_shows_it(fitted_reports):
    """The largest sample a run stores (20k rows) is drawn, with the caption of its rows.  What the
    report costs at N = 1M is measured by bench/bench_speed.py --part floor, not timed here."""
    data = dict(fitted_reports[METHODS[0]])
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, 20_000)
    coords = rng.normal(size=(20_000, 2)) + 3 * np.c_[np.cos(labels), np.sin(labels)]
    data["embedding_sample"] = {"coords": coords.tolist(), "labels": labels.tolist(), "what": "20k rows"}
    page = render_html(data)
    assert "fig-embedding" in page
    assert "20k rows. Compact, separate colour groups" in page


# ----------------------------------------------------------------------------- drawn as the run goes
@pytest.fixture(scope="module")
def drafted_run(dask_client, tmp_path_factory):
    """A run through ``mkdist.cluster(report=True)`` on a real Dask cluster."""
    views, _ = make_blobs_views(n_per_cluster=400, n_clusters=3, seed=5)
    store = tmp_path_factory.mktemp("drafted") / "run.zarr"
    result = mkdist.cluster(list(views), str(store), 3, n_landmarks=60, random_state=0, chunk_rows=300,
                            report=True)
    return store, result


def _without_time_stamp(page: str) -> str:
    return re.sub(r"generated: <code>[^<]*</code>", "", page)


def test_report_drawn_during_the_run_is_the_report_drawn_after_it(drafted_run, tmp_path):
    """``mkdist.cluster(report=True)`` draws the model's figures in the background once the model
    stage is stored, the cluster sizes and the embedding sample once the labels are; the page
    equals one drawn whole from the finished store (but for its time stamp), and no figure is
    drawn twice."""
    from mkdist._report._figures import MODEL_FIGURES

    store, result = drafted_run
    assert result.report == f"{store}.report.html"
    assert result.report_timings["background_cpu_s"] > 0 and result.report_timings["tail_s"] > 0
    page = open(result.report).read()
    again = mkdist.pipeline.write_report(str(store), tmp_path / "again.html")
    assert _without_time_stamp(page) == _without_time_stamp(open(again).read())
    parser = parse_page(page)
    # The run's figures, and first the clusters' profiles at a glance (issue 42).
    check_figures(parser, expected_run_figures(result.metrics) | {"profile-heatmap"})
    assert page.index('id="fig-profile-heatmap"') < page.index("<h2>Model</h2>")

    draft = mkdist.pipeline.ReportDraft(str(store))
    draft.stage_complete("model")
    early = draft.figures()
    assert set(early.kinds) == {*MODEL_FIGURES, "cluster_sizes", "embedding"}
    data = mkdist.pipeline.report_data(str(store))
    final = build_figures(data, drawn=early)
    assert list(final.figures) == list(build_figures(data).figures)  # same figures, same order
    for name, fig in final.figures.items():
        assert fig is early.figures[name] and fig.figure is None  # drawn by the drawing process
    assert draft.background_cpu_s > 0


def test_report_is_whole_when_the_drawing_process_dies(drafted_run, tmp_path):
    """A drawing process killed with requests under way (it is still importing matplotlib)
    leaves their figures to write_report: the same page; and one that is gone gets none."""
    import os
    import signal

    store, result = drafted_run
    for kill_before_sending in (False, True):
        draft = mkdist.pipeline.ReportDraft(str(store))
        if kill_before_sending:
            os.kill(draft._proc.pid, signal.SIGKILL)
            draft._proc.wait()
        draft.stage_complete("labels")  # a finished store: both phases at once
        assert len(draft._sent) == (0 if kill_before_sending else 2)
        if not kill_before_sending:
            os.kill(draft._proc.pid, signal.SIGKILL)
        page = mkdist.pipeline.write_report(str(store), tmp_path / "killed.html", draft=draft)
        assert _without_time_stamp(open(page).read()) == _without_time_stamp(open(result.report).read())
        assert not os.path.exists(draft._dir)  # its files are removed


@pytest.mark.parametrize("report", ["store", "inside", 3])
def test_report_that_would_overwrite_the_store_is_refused_before_the_run(tmp_path, report):
    from mkdist.errors import InputValidationError

    views, _ = make_blobs_views(n_per_cluster=20, n_clusters=3, seed=5)
    store = tmp_path / "run.zarr"
    path = {"store": str(store), "inside": str(store / "report.html")}.get(report, report)
    with pytest.raises(InputValidationError, match="report|the output"):
        mkdist.cluster(list(views), str(store), 3, random_state=0, report=path)
    assert not store.exists()


def test_figures_drawn_from_other_data_are_drawn_again(fitted_reports):
    """A figure drawn early is reused only if the summary it was drawn from still holds."""
    data = fitted_reports["mkc"]
    early = build_figures({"kind": "run", "summary": dict(data["summary"])}, kinds=("weights", "spectrum"))
    assert set(early.kinds) == {"weights", "spectrum"} and "cluster_sizes" not in early.kinds
    same = build_figures(data, drawn=early)
    assert all(same.figures[n] is f for n, f in early.figures.items())
    changed = dict(data, summary={**data["summary"], "weights": [
        {**w, "values": list(np.roll(w["values"], 1))} for w in data["summary"]["weights"]]})
    redrawn = build_figures(changed, drawn=early)
    assert not any(redrawn.figures[n] is f for n, f in early.figures.items())
    assert redrawn.figures["spectrum"].png() == early.figures["spectrum"].png()  # same data, same picture
