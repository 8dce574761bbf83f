"""``n_clusters="auto"`` and ``n_clusters=(k_min, k_max)`` (issue 25) through every surface: the
estimators, ``mkdist.cluster`` and its store, the CLI with ``mkdist inspect``, and the report.

The rule itself (``mkdist._core._nclusters.choose_n_clusters``) is tested in ``test_nclusters.py``;
here the data are small and well separated (or one blob, for "ambiguous") so that what is
checked is the plumbing: who chooses, what is kept, what is shown, what is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import dask.array as da
import numpy as np
import pytest

import mkdist
from mkdist._core._nclusters import RULE, NClustersChoice
from mkdist._pipeline._config import RunConfig
from mkdist._report._figures import build_figures
from mkdist.errors import AmbiguousNClustersWarning, InputValidationError
from mkdist.metrics import clustering_accuracy

#: Methods that choose K from their landmark kernel, and those that refuse to.
AUTO_METHODS = ("mkc", "nystrom", "late-fusion")
NO_AUTO_METHODS = ("rff-power", "mv-rff-power")


def _four_blobs(n_per_cluster=100, seed=0):
    """Four separated clusters in two views (the W1 generator at separation 1.0, where the rule
    was exact on every K of bench/RESULTS.md).  Not ``conftest.make_blobs_views``: its second
    view is a noisy non-linear map whose kNN graph splits each cluster, and the rule calls the
    uniform combination ambiguous (a limitation the bench records)."""
    from mkdist.datasets import make_multiview_blobs

    views, y = make_multiview_blobs(4 * n_per_cluster, n_clusters=4, separation=1.0, random_state=seed,
                                    as_dask=False)
    return [np.asarray(views[k], dtype=np.float64) for k in sorted(views)], np.asarray(y)


def _fit_input(method, views):
    return np.hstack(views) if not mkdist.get_method(method).multi_view else views


def _params(method):
    # Enough landmarks (anchors) for "auto" to search past K = 4: its k_max is n // 10.
    return {"nystrom": {"n_anchors": 120}}.get(method, {"n_landmarks": 200})


# ----------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("method", AUTO_METHODS)
@pytest.mark.parametrize("n_clusters", ["auto", (3, 8)])
def test_estimator_chooses_k_and_keeps_the_choice_in_its_state(method, n_clusters):
    views, y = _four_blobs()
    est = mkdist.get_method(method)(n_clusters=n_clusters, random_state=0, **_params(method))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AmbiguousNClustersWarning)  # separated blobs: a clear gap
        est.fit(_fit_input(method, views))
    choice = est.n_clusters_choice_
    assert est.n_clusters_ == 4 and isinstance(choice, NClustersChoice)
    assert not choice.ambiguous and choice.confidence >= 0.5 and choice.runner_up != 4
    assert choice.candidates[0][0] == 4 and choice.rule == RULE
    lo, hi = (3, 8) if n_clusters != "auto" else (2, choice.k_range[1])
    assert choice.k_range == (lo, hi)
    assert clustering_accuracy(y, np.asarray(est.labels_)) == 1.0
    assert est.get_params()["n_clusters"] == n_clusters  # the parameter is left as given
    summary = est.summary()
    assert summary["n_clusters"] == 4 and summary["n_clusters_choice"]["chosen_by_fit"]
    again = type(est).from_model_state(est.model_state())
    assert again.n_clusters_ == 4 and again.n_clusters_choice_ == choice
    np.testing.assert_array_equal(again.predict(_fit_input(method, views)), est.predict(_fit_input(method, views)))


def test_integer_k_is_used_as_given_and_the_rule_only_hints():
    views, _ = _four_blobs()
    est = mkdist.MultipleKernelClustering(n_clusters=3, n_landmarks=200, random_state=0).fit(views)
    assert est.n_clusters_ == 3 and est.n_clusters_choice_ is None
    assert est.summary()["n_clusters_choice"] is None  # the hint is computed on demand only
    hint = est.n_clusters_hint()
    assert hint.n_clusters == 4 and not hint.ambiguous
    s = est.summary()["n_clusters_choice"]
    assert s["chosen_by_fit"] is False and s["n_clusters"] == 4 and s["asked"] == 3
    assert mkdist.MultipleKernelClustering.from_model_state(est.model_state()).n_clusters_hint() == hint


def test_no_clear_gap_still_fits_the_best_guess_and_warns_ambiguous():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))  # one Gaussian blob: no cluster structure
    with pytest.warns(AmbiguousNClustersWarning, match=r"K = \d+ is a guess: .*next candidates \d+ \(votes") as w:
        est = mkdist.MultipleKernelClustering(n_clusters="auto", n_landmarks=300, random_state=0).fit(X)
    assert est.n_clusters_choice_.ambiguous
    assert est.n_clusters_choice_.verdict() in str(w[0].message)  # the same words as the CLI, inspect, report
    assert len(np.unique(est.labels_)) == est.n_clusters_ == est.n_clusters_choice_.n_clusters


@pytest.mark.parametrize("method", NO_AUTO_METHODS)
@pytest.mark.parametrize("n_clusters", ["auto", (2, 5)])
def test_methods_without_a_landmark_kernel_refuse_auto_with_why(method, n_clusters):
    views, _ = _four_blobs(20)
    est = mkdist.get_method(method)(n_clusters=n_clusters)
    with pytest.raises(InputValidationError, match="cannot choose K.*mkc, nystrom, late-fusion"):
        est.fit(_fit_input(method, views))
    # ... and a run refuses it from the table, before the input is opened
    with pytest.raises(InputValidationError, match="cannot choose K"):
        RunConfig.from_options(n_clusters=n_clusters, method=method).check_params()


#: The one message of every K a method that chooses K refuses (0, 1, a bad range, not a number).
ONE_K_MESSAGE = (r'give K as an integer >= 2 \(e\.g\. 10\), or `"auto"` or a range `\(k_min, k_max\)` \(e\.g\. '
                 r"`\(3, 20\)`\) to choose K from the landmarks, with 2 <= k_min <= k_max\.$")


#: ONE_K_MESSAGE as the command line words it.
ONE_K_LINE = ("give K as an integer >= 2 (e.g. 10), or auto or a range K_MIN:K_MAX (e.g. 3:20) to choose K from the "
              "landmarks, with 2 <= k_min <= k_max.")


@pytest.mark.parametrize("n_clusters, match", [
    ((5, 3), r"^`n_clusters`=\(5, 3\): " + ONE_K_MESSAGE),
    ((1, 3), r"^`n_clusters`=\(1, 3\): " + ONE_K_MESSAGE),
    ("bogus", r"^`n_clusters`='bogus': " + ONE_K_MESSAGE),
    ((2, 3, 4), r"^`n_clusters`=\(2, 3, 4\): " + ONE_K_MESSAGE),
    (True, r"^`n_clusters`=True: " + ONE_K_MESSAGE),
    (0, r"^`n_clusters`=0: " + ONE_K_MESSAGE),
    (1, r"^`n_clusters`=1: " + ONE_K_MESSAGE),
    ((3, 60), r"searching K up to 60 needs more than 60 landmarks.*there are 50: raise `n_landmarks`"),
])
def test_bad_n_clusters_are_refused_before_any_work(n_clusters, match):
    views, _ = _four_blobs(20)
    est = mkdist.MultipleKernelClustering(n_clusters=n_clusters, n_landmarks=50)
    with pytest.raises(InputValidationError, match=match):
        est.validate_input(views)


def test_set_of_methods_that_choose_k_is_the_tables():
    from mkdist._methods._params import AUTO_N_CLUSTERS_METHODS
    from mkdist._methods._registry import method_parameters

    chooses = {m for m in mkdist.available_methods() if method_parameters(m)["n_clusters"][0].auto}
    assert chooses == set(AUTO_N_CLUSTERS_METHODS) == set(AUTO_METHODS)


# ----------------------------------------------------------------------------- mkdist.cluster
def test_cluster_auto_writes_the_choice_to_the_model_stage(dask_client, tmp_path):
    views, y = _four_blobs(100)
    url = str(tmp_path / "run.zarr")
    res = mkdist.cluster([da.from_array(v, chunks=(150, -1)) for v in views], url, "auto", n_landmarks=200,
                         random_state=0, y_true=y)
    assert clustering_accuracy(y, res.labels.compute()) == 1.0
    model = res.store.read_stage("model")
    assert model.attrs["n_clusters"] == 4
    stored = json.loads(model.attrs["n_clusters_choice"])
    assert stored["n_clusters"] == 4 and stored["chosen_by_fit"] and stored["asked"] == "auto"
    assert {"confidence", "runner_up", "candidates", "rule", "ambiguous", "k_range"} <= set(stored)
    assert res.metrics["n_clusters"] == 4 and res.metrics["n_clusters_choice"]["n_clusters"] == 4
    assert res.store.params["n_clusters"] == "auto"
    assert len(res.metrics["cluster_sizes"]) == 4
    # a given K: the run does not spend the rule's time on it; inspect and the report show the
    # rule's hint, and a run that draws its report has it in its summary too
    from mkdist.pipeline import inspect_store, report_data

    url = str(tmp_path / "k3.zarr")
    res = mkdist.cluster([da.from_array(v, chunks=(150, -1)) for v in views], url, 3, n_landmarks=200,
                         random_state=0)
    assert json.loads(res.store.read_stage("model").attrs["n_clusters_choice"]) is None
    assert res.metrics["n_clusters"] == 3 and res.metrics["n_clusters_choice"] is None
    for hint in (inspect_store(url)["model"]["n_clusters_choice"], report_data(url)["summary"]["n_clusters_choice"]):
        assert hint["chosen_by_fit"] is False and hint["n_clusters"] == 4 and hint["asked"] == 3
    res = mkdist.cluster([da.from_array(v, chunks=(150, -1)) for v in views], str(tmp_path / "k3r.zarr"), 3,
                         n_landmarks=200, random_state=0, report=True)
    hint = res.metrics["n_clusters_choice"]
    assert hint["chosen_by_fit"] is False and hint["n_clusters"] == 4 and res.metrics["n_clusters"] == 3


# ----------------------------------------------------------------------------- CLI
def _cli(*args, timeout=600):
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def npz_input(tmp_path_factory):
    views, y = _four_blobs(150, seed=3)
    path = tmp_path_factory.mktemp("auto_cli") / "blobs.npz"
    np.savez(path, a=views[0].astype(np.float32), b=views[1].astype(np.float32), y=y)
    return path


@pytest.mark.slow
def test_cli_n_clusters_auto_end_to_end_and_inspect_shows_the_choice(npz_input, dask_address, tmp_path):
    from mkdist.pipeline import inspect_store

    store = tmp_path / "run.zarr"
    r = _cli("run", "--input", str(npz_input), "--store", str(store), "--n-clusters", "auto", "--label-key", "y",
             "--n-landmarks", "200", "--random-state", "0", "--dask-address", dask_address, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "into 4 clusters (mkc) in" in r.stdout
    assert "; K = 4 (confidence 0.97, a clear gap); next candidates " in r.stdout
    r = _cli("inspect", str(store))
    assert r.returncode == 0, r.stderr
    assert 'n_clusters="auto": K = 4 (confidence 0.97, a clear gap); next candidates' in r.stdout
    assert "confidence" in r.stdout and "runner-up" in r.stdout and "candidates" in r.stdout
    assert "knn-eigengap-votes" in r.stdout
    # What `inspect --json` prints is this dict (the CLI's --json output: tests/test_flows.py).
    choice = json.loads(json.dumps(inspect_store(str(store)), default=float))["model"]["n_clusters_choice"]
    assert choice["n_clusters"] == 4 and not choice["ambiguous"]


@pytest.mark.parametrize("value, expected", [("auto", "auto"), ("3:9", [3, 9]), ("7", 7), (5, 5),
                                             ([3, 9], [3, 9]), ("many", "many"), ("2.5", "2.5")])
def test_cli_parses_n_clusters(value, expected):
    from mkdist.cli import parse_n_clusters

    assert parse_n_clusters(value) == expected


@pytest.mark.parametrize("args, message", [
    (["--n-clusters", "many"], "--n-clusters many: give K as an integer >= 2"),
    (["--n-clusters", "auto", "--method", "rff-power"], "--n-clusters auto: power k-means on random Fourier features "
                                                        "cannot choose K"),
    (["--n-clusters", "9:3"], "--n-clusters 9:3: " + ONE_K_LINE),
    # 0 and 1 alike (they were ">= 1" and ">= 2", naming the Python parameter)
    (["--n-clusters", "0"], "--n-clusters 0: " + ONE_K_LINE),
    (["--n-clusters", "1"], "--n-clusters 1: " + ONE_K_LINE),
    (["--n-clusters", "-4"], "--n-clusters -4: " + ONE_K_LINE),
    (["--n-clusters", "2.5"], "--n-clusters 2.5: " + ONE_K_LINE),
    (["--n-clusters", "1:5"], "--n-clusters 1:5: " + ONE_K_LINE),
    (["--n-clusters", "60", "--n-landmarks", "50"],
     "--n-clusters 60: K is more than the 50 landmarks; raise --n-landmarks or lower --n-clusters."),
    (["--n-clusters", "3:60", "--n-landmarks", "50"],
     "--n-clusters 3:60: searching K up to 60 needs more than 60 landmarks (and at least 4); there are 50: raise "
     "--n-landmarks, lower k_max or give K as an integer."),
    (["--n-clusters", "700"], "--n-clusters 700: K is more than the 600 rows; lower --n-clusters."),
])
def test_cli_refuses_bad_n_clusters_in_one_line(npz_input, tmp_path, args, message):
    store = tmp_path / "never.zarr"
    r = _cli("run", "--input", str(npz_input), "--store", str(store), *args, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(f"mkdist: bad input: {message}") and r.stderr.count("\n") == 1, r.stderr
    assert not store.exists()


def test_a_parameter_error_keeps_its_parameter_across_processes():
    # A refusal raised in a Dask worker reaches the client pickled; the CLI still needs its parts.
    import pickle

    from mkdist.errors import ParameterError

    with pytest.raises(ParameterError) as info:
        mkdist.MultipleKernelClustering(n_clusters=(5, 3)).validate_input(_four_blobs(20)[0])
    again = pickle.loads(pickle.dumps(info.value))
    assert (type(again), str(again), again.parameter, again.value, again.rest) == (
        ParameterError, str(info.value), "n_clusters", (5, 3), info.value.rest)


# ----------------------------------------------------------------------------- report
def _choice(**kw):
    base = {"n_clusters": 4, "confidence": 0.9, "runner_up": 6, "ambiguous": False, "chosen_by_fit": True,
            "candidates": [[4, 0.9], [6, 0.1]], "k_range": [2, 20], "rule": "knn-eigengap-votes",
            "eigenvalues": [1, 1, 1, 1, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.28, 0.26, 0.24, 0.22, 0.2,
                            0.19, 0.18, 0.17, 0.16, 0.15],
            "n_landmarks": 200, "n_neighbors": 7, "n_resamples": 10, "asked": "auto"}
    return {**base, **kw}


def _spectrum_text(choice, k=4):
    values = list(np.geomspace(1.0, 0.01, 12))  # a smooth decay: the old ratio rule's "K = 1?" case
    figs = build_figures({"summary": {"n_clusters": k, "n_landmarks": 200, "spectrum": {"values": values, "k": k},
                                      "n_clusters_choice": choice}})
    spec = figs.figures["spectrum"]
    texts = " ".join(t.get_text() for t in spec.figure.axes[0].texts)
    return texts, spec.caption, figs


@pytest.mark.parametrize("choice, k, shown", [
    (_choice(), 4, "K rule: K = 4 (confidence 0.90)\nnext: 6 (votes 0.10)"),
    (_choice(ambiguous=True, confidence=0.2), 4, "K rule: K = 4 is a guess (confidence 0.20)\nnext: 6 (votes 0.10)"),
    (_choice(chosen_by_fit=False, asked=4), 4, "K rule (K given): K = 4 (confidence 0.90)"),
    (_choice(chosen_by_fit=False, asked=3), 3, "K rule (K given): K = 4 (confidence 0.90)"),
    (_choice(chosen_by_fit=False, asked=3, ambiguous=True, confidence=0.1), 3, "K rule (K given): K = 4 is a guess"),
])
def test_report_spectrum_hint_is_the_k_rules_verdict(choice, k, shown):
    texts, caption, figs = _spectrum_text(choice, k)
    assert shown in texts
    assert "largest ratio" not in texts and "K = 1?" not in texts  # never the old ratio heuristic
    assert "knn-eigengap-votes" in caption
    assert "k_choice" in figs.figures and "next 6 (votes 0.10)" in figs.figures["k_choice"].figure.axes[0].get_title()


def test_a_modularity_choice_says_so_in_the_report_and_inspect():
    from mkdist._report._summary import choice_lines
    from mkdist._report._tables import _choice_text

    choice = _choice(ambiguous=True, confidence=0.1, no_structure_share=0.8, criterion="modularity")
    _, _, figs = _spectrum_text(choice)
    caption = figs.figures["k_choice"].caption
    assert "most modular" in caption and "has the largest gap" not in caption
    assert "most modular partition" in choice_lines(choice)[0] and "most modular" in _choice_text(choice)
    eigengap = _choice(criterion="eigengap")
    assert "has the largest gap" in build_figures({"summary": {
        "n_clusters": 4, "n_landmarks": 200, "spectrum": {"values": list(np.geomspace(1.0, 0.01, 12)), "k": 4},
        "n_clusters_choice": eigengap}}).figures["k_choice"].caption
    assert "modular" not in choice_lines(eigengap)[0] and "modular" not in _choice_text(eigengap)
    # Modularity over-ruling a gap (step 5's veto) says that, not "no gap".
    veto = _choice(ambiguous=True, confidence=0.0, no_structure_share=0.1, criterion="modularity")
    _, _, figs = _spectrum_text(veto)
    assert "clearly less modular" in figs.figures["k_choice"].caption
    assert "no gap" not in figs.figures["k_choice"].caption
    for text in (choice_lines(veto)[0], _choice_text(veto)):
        assert f"largest eigengap (K = {veto['runner_up']}) gives a much less modular partition" in text
        assert "no clear" not in text


@pytest.mark.parametrize("choice", [
    _choice(n_clusters=9, ambiguous=True, confidence=0.52, evidence="gap", coverage=0.85, sizes_agree=3, votes=0.82,
            candidates=[[9, 0.82], [10, 0.09], [8, 0.09]]),
    _choice(confidence=0.97, evidence="clear gap", coverage=1.0, sizes_agree=3, votes=0.9),
])
def test_cli_line_inspect_report_and_summary_say_the_same_verdict(choice):
    """Issue 36: one helper words the verdict ("K = 9 is a guess: ..." with the next candidates and
    their votes) for the CLI's result line, ``mkdist inspect``, the report's table and the markdown."""
    from mkdist._core._nclusters import k_verdict
    from mkdist._report._summary import choice_lines, summary_markdown
    from mkdist._report._tables import _choice_text
    from mkdist.cli import _result_line

    verdict = k_verdict(choice)
    assert verdict.startswith("K = 9 is a guess: an eigengap, but its groups are not clearly apart (85%")  \
        if choice["ambiguous"] else verdict.startswith("K = 4 (confidence 0.97, a clear gap); next candidates 6")
    assert "next candidates 10 (votes 0.09), 8 (0.09)" in verdict if choice["ambiguous"] else True
    summary = {"N": 150, "n_clusters": choice["n_clusters"], "method": "mkc", "n_clusters_choice": choice,
               "computed_stages": ["model"]}
    shown = {"cli": _result_line(summary, "s.zarr", 1.0, False), "inspect": choice_lines(choice)[0],
             "report": _choice_text(choice), "markdown": summary_markdown(summary)}
    for where, text in shown.items():
        assert verdict in text, where
    given = _choice_text({**choice, "chosen_by_fit": False, "asked": 3})
    assert given.startswith(f"given by hand; the K rule says: {verdict}")


def test_report_without_a_k_rule_verdict_shows_no_guess():
    texts, caption, figs = _spectrum_text(None)
    assert texts == "" and "not run" in caption and "k_choice" not in figs.figures


@pytest.mark.parametrize("value", ["auto", [3, 9], 10])
def test_flow_parameter_takes_auto_ranges_and_integers(value):
    from flows.cluster import cluster_flow
    from mkdist.pipeline import RunConfig

    # K travels in the plan's config: the flow's parameter schema keeps it, the config reads it.
    plan = {"source": "in.zarr", "store": "run.zarr", "config": {"n_clusters": value}}
    params = cluster_flow.validate_parameters({"plan": plan})
    assert RunConfig.from_json(params["plan"]["config"]).n_clusters == value
