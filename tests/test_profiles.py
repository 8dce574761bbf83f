"""Cluster profiles (issue 42): the partials merge exactly, a run's profiles equal a pandas
groupby on the same rows and recover the generating segments, the stage resumes, the long
table out refuses what mkdist did not write."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import mkdist
from mkdist._core._profile_tables import ClusterProfiles
from mkdist._core._profiles import QUANTILES, RELATIVE_ERROR, ProfileLayout, merge_partials, profile_partial
from mkdist.errors import StoreExistsError

#: The generating segments: spend is log-normal around these medians (so their order is known),
#: visits normal around these means, and each segment's plan drawn with these shares.
SPEND = (20.0, 60.0, 180.0)
VISITS = (2.0, 6.0, 10.0)
PLANS = ("basic", "plus", "pro")
PLAN_SHARES = ((0.8, 0.15, 0.05), (0.12, 0.8, 0.08), (0.05, 0.15, 0.8))
VIEWS = {"usage": ["spend", "visits", "tenure"], "account": ["plan", "region"]}


def customer_table(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A customer table with known segments: string ids, three numbers, two categories, missing cells."""
    rng = np.random.default_rng(seed)
    segment = rng.integers(0, 3, n)
    spend = np.exp(rng.normal(np.log(np.take(SPEND, segment)), 0.25))
    visits = rng.normal(np.take(VISITS, segment), 1.0)
    plan = np.array([rng.choice(PLANS, p=PLAN_SHARES[s]) for s in segment])
    frame = pd.DataFrame({"customer_id": [f"C{i:06d}" for i in rng.permutation(n)], "spend": spend,
                          "visits": visits, "tenure": rng.gamma(2.0, 3.0, n),
                          "plan": plan, "region": rng.choice(["north", "south", "east", "west"], n)})
    frame.loc[rng.random(n) < 0.04, "visits"] = np.nan
    frame.loc[rng.random(n) < 0.03, "region"] = None
    return frame, segment


def _within_sketch_error(values: pd.Series, q: float, estimate: float) -> bool:
    """The estimate lies within RELATIVE_ERROR of pandas' linear interpolation between the two
    order statistics around the rank (float32 input rounding allowed for)."""
    x = np.sort(values.dropna().to_numpy())
    r = q * (x.size - 1)
    lo, hi = x[int(np.floor(r))], x[int(np.ceil(r))]
    tol = (RELATIVE_ERROR + 1e-6) * max(abs(lo), abs(hi))
    return lo - tol <= estimate <= hi + tol


def test_partials_of_any_chunking_merge_to_the_profile_of_all_rows():
    rng = np.random.default_rng(1)
    n, k = 5000, 4
    labels = rng.integers(0, k, n)
    X = (rng.normal(size=(n, 3)) * [1.0, 100.0, 1e-3] + labels[:, None]).astype(np.float32)
    X[rng.random((n, 3)) < 0.05] = np.nan
    cats = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
    cats[:7] = 0.0       # unseen categories
    cats[7:20] = np.nan  # missing
    layout = ProfileLayout.of_views({"a": 3, "b": 3}, {"b": ["c"]}, {"c": ["x", "y", "z"]})
    assert [c.name for c in layout.numeric] == ["a:0", "a:1", "a:2"]  # no column names: view:index
    whole = profile_partial(labels, [X, cats], layout, k)
    for size in (1, 333, 1024):
        parts = [profile_partial(labels[i:i + size], [X[i:i + size], cats[i:i + size]], layout, k)
                 for i in range(0, n, size)]
        merged = merge_partials(parts, split_every=3)
        np.testing.assert_array_equal(merged.count, whole.count)
        np.testing.assert_array_equal(merged.missing, whole.missing)
        np.testing.assert_array_equal(merged.codes, whole.codes)
        np.testing.assert_array_equal(merged.counts, whole.counts)
        np.testing.assert_array_equal(merged.categories, whole.categories)
        np.testing.assert_array_equal(merged.vmin, whole.vmin)
        np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(merged.m2, whole.m2, rtol=1e-9)
    frame = pd.DataFrame(X.astype(np.float64), columns=["a:0", "a:1", "a:2"]).assign(cluster=labels)
    profiles = ClusterProfiles(whole, layout)
    expected = frame.groupby("cluster").agg(["mean", "std", "min", "max", "count"])
    for name in ["a:0", "a:1", "a:2"]:
        got = profiles.numeric.xs(name, level="column").loc[range(k)]
        for stat in ("mean", "std", "min", "max", "count"):
            np.testing.assert_allclose(got[stat], expected[(name, stat)], rtol=1e-9)
    cat = profiles.categories.xs("c", level="column")
    assert cat.loc[(-1, "(unseen)"), "count"] == 7
    assert profiles.missing.loc[(-1, "c"), "missing"] == 13


@pytest.fixture(scope="module")
def customer_run(tmp_path_factory):
    frame, segment = customer_table(3000)
    store = tmp_path_factory.mktemp("profiles") / "customers.zarr"
    result = mkdist.cluster(frame, store, 3, views=VIEWS, id_column="customer_id", missing="impute",
                            random_state=0, n_landmarks=300)
    return frame, segment, result


def test_profiles_equal_a_pandas_groupby_on_the_same_rows(customer_run):
    frame, _, result = customer_run
    profiles = result.profiles
    assert result.model.profiles_ is not None
    labels = np.asarray(result.labels.compute())
    # The rows as the user gave them (float32 as the views read them; the missing cells not filled).
    rows = frame.assign(cluster=labels)
    for c in ("spend", "visits", "tenure"):
        rows[c] = rows[c].astype(np.float32).astype(np.float64)
    grouped = rows.groupby("cluster")
    numeric = profiles.numeric
    for column in ("spend", "visits", "tenure"):
        got = numeric.xs(column, level="column").loc[[0, 1, 2]]
        for stat in ("mean", "std", "min", "max", "count"):
            np.testing.assert_allclose(got[stat].to_numpy(), grouped[column].agg(stat).to_numpy(), rtol=1e-6)
        np.testing.assert_array_equal(got["missing"].to_numpy(), grouped[column].apply(lambda s: s.isna().sum()))
        for c in range(3):
            for q in QUANTILES:
                estimate = got.loc[c, f"q{round(q * 100):02d}"]
                assert _within_sketch_error(rows.loc[rows.cluster == c, column], q, estimate), (column, c, q)
    shares = pd.crosstab(rows["cluster"], rows["plan"], normalize="index")
    cats = profiles.categories.xs("plan", level="column")
    for c in range(3):
        for plan in PLANS:
            assert cats.loc[(c, plan), "share"] == pytest.approx(shares.loc[c, plan], abs=1e-12)
    assert profiles.missing.loc[(-1, "region"), "missing"] == frame["region"].isna().sum()
    assert profiles.clusters["size"].tolist() == np.bincount(labels, minlength=3).tolist()


def test_profiles_recover_the_segments_spend_order_and_plan_shares(customer_run):
    frame, segment, result = customer_run
    profiles = result.profiles
    labels = np.asarray(result.labels.compute())
    # Each cluster's segment by majority; the profile alone must tell the segments apart.
    matched = [np.bincount(segment[labels == c], minlength=3).argmax() for c in range(3)]
    assert sorted(matched) == [0, 1, 2]
    medians = profiles.numeric.xs("spend", level="column").loc[[0, 1, 2], "q50"].to_numpy()
    assert [matched[c] for c in np.argsort(medians)] == [0, 1, 2]
    visits = profiles.numeric.xs("visits", level="column").loc[[0, 1, 2], "mean"].to_numpy()
    assert [matched[c] for c in np.argsort(visits)] == [0, 1, 2]
    # Plan is a clustering view too, so a cluster is purer in it than its segment (the clusters
    # agree with the segments on ~90% of rows, and rows of another plan go elsewhere): its
    # segment's dominant plan is recovered, its share no lower than the segment's less 0.1.
    cats = profiles.categories.xs("plan", level="column")
    for c in range(3):
        truth = np.asarray(PLAN_SHARES[matched[c]])
        got = np.array([cats.loc[(c, plan), "share"] for plan in PLANS])
        assert got.argmax() == truth.argmax()
        assert truth.max() - 0.1 <= got.max() <= 1.0
    top = profiles.separation["column"].tolist()
    assert set(top[:3]) == {"spend", "visits", "plan"} and top.index("tenure") > 2  # noise columns rank last
    pro = [c for c in range(3) if matched[c] == 2][0]
    assert "spend +" in profiles.clusters.loc[pro, "label"] or "plan = pro" in profiles.clusters.loc[pro, "label"]


def test_the_profiles_stage_is_verified_and_recomputed_when_lost(customer_run, tmp_path):
    frame, _, result = customer_run
    before = result.profiles.numeric
    store = result.store
    store.delete_stage("profiles")
    again = mkdist.cluster(frame, store.url, 3, views=VIEWS, id_column="customer_id", missing="impute",
                           random_state=0, n_landmarks=300)
    assert "labels" in again.skipped
    pd.testing.assert_frame_equal(again.profiles.numeric, before)


def test_profiles_out_writes_the_long_table_and_refuses_a_foreign_file(customer_run, tmp_path):
    from mkdist._pipeline._profiles import write_profiles_out

    _, _, result = customer_run
    out = tmp_path / "profiles.parquet"
    write_profiles_out(out, result.store)
    table = pd.read_parquet(out)
    assert list(table.columns) == ["cluster", "column", "statistic", "category", "value"]
    assert {"mean", "q50", "share", "lift", "eta_squared", "cramers_v"} <= set(table["statistic"])
    write_profiles_out(out, result.store)  # its own output: left as it is
    csv = tmp_path / "profiles.csv"
    write_profiles_out(csv, result.store)
    assert pd.read_csv(csv).shape == table.shape
    foreign = tmp_path / "mine.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(StoreExistsError, match="mkdist did not write"):
        write_profiles_out(foreign, result.store)
    assert foreign.read_text() == "a,b\n1,2\n"


def test_the_report_opens_with_the_clusters_at_a_glance(customer_run, tmp_path):
    from mkdist.pipeline import write_report

    _, _, result = customer_run
    page = open(write_report(result.store, tmp_path / "r.html")).read()
    headings = [page.index(h) for h in ("<h2>Clusters at a glance</h2>", "<h2>Run summary</h2>", "<h2>Model</h2>")]
    assert headings == sorted(headings)  # the model diagnostics come below it
    assert 'id="fig-profile-heatmap"' in page
    for c, label in result.profiles.clusters["label"].items():
        assert f"Cluster {c}:" in page and label.replace("&", "&amp;") in page


def test_an_assignment_profiles_its_batch_beside_the_fit(customer_run, tmp_path):
    from mkdist.pipeline import write_report

    _, _, result = customer_run
    batch, _ = customer_table(900, seed=5)
    out = mkdist.assign(result.store.url, batch, tmp_path / "batch.zarr")
    profiles = out.read_stage("profiles")
    assert int(profiles["rows"].sum()) == 900
    labels = np.asarray(out.read_stage("labels")["labels"].values)
    from mkdist._pipeline._profiles import read_profiles

    batch_profiles = read_profiles(out)
    means = batch.assign(cluster=labels).groupby("cluster")["spend"].mean()
    got = batch_profiles.numeric.xs("spend", level="column")["mean"]
    np.testing.assert_allclose(got.loc[means.index], means, rtol=1e-6)
    page = open(write_report(out, tmp_path / "a.html")).read()
    assert "The batch's clusters beside the fit's" in page


def test_an_assignment_whose_profiles_were_lost_gets_them_back_on_the_same_command(customer_run, tmp_path):
    from mkdist._pipeline._profiles import read_profiles

    _, _, result = customer_run
    batch, _ = customer_table(700, seed=6)
    out = mkdist.assign(result.store.url, batch, tmp_path / "batch.zarr")
    before = read_profiles(out).numeric
    labels_token = out.stage_token("labels")
    out.delete_stage("profiles")
    again = mkdist.assign(result.store.url, batch, tmp_path / "batch.zarr")
    assert again.stage_token("labels") == labels_token  # the labels were not computed again
    pd.testing.assert_frame_equal(read_profiles(again).numeric, before)
    # In the fit's columns (the batch's views may come in another order).
    assert set(read_profiles(again).layout.columns) == set(read_profiles(result.store).layout.columns)


def test_the_profile_command_prints_the_table_and_refuses_a_foreign_out(customer_run, tmp_path):
    from click.testing import CliRunner

    from mkdist.cli import main

    _, _, result = customer_run
    store = str(result.store.url)
    shown = CliRunner().invoke(main, ["profile", store])
    assert shown.exit_code == 0, shown.output
    assert "columns that separate the clusters" in shown.output
    for label in result.profiles.clusters["label"]:
        assert label in shown.output
    as_json = CliRunner().invoke(main, ["profile", store, "--json"])
    assert json.loads(as_json.output)["n_clusters"] == 3
    foreign = tmp_path / "p.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(foreign)
    refused = CliRunner().invoke(main, ["profile", store, "--out", str(foreign)])
    assert refused.exit_code != 0 and "mkdist did not write" in refused.output
    assert pd.read_parquet(foreign).columns.tolist() == ["a"]


def test_an_in_memory_fit_has_profiles_in_its_own_columns():
    frame, segment = customer_table(600, seed=3)
    numbers = frame[["spend", "visits", "tenure"]].dropna()
    model = mkdist.MultipleKernelClustering(3, random_state=0).fit(numbers)
    got = model.profiles_.numeric.xs("spend", level="column").loc[[0, 1, 2], "mean"]
    expected = numbers.assign(cluster=model.labels_).groupby("cluster")["spend"].mean()
    np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-6)
    arrays = mkdist.MultipleKernelClustering(2, random_state=0).fit([numbers.to_numpy(), numbers.to_numpy()[:, :1]])
    assert [c.name for c in arrays.profiles_.layout.columns] == ["view0:0", "view0:1", "view0:2", "view1:0"]
