"""Tables as they come: categorical views with a kernel of their own, DataFrames in (pandas and
dask) through the same table path as Parquet, and a new batch encoded with the model's
categories."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import mkdist
from mkdist._core._columns import MAX_CATEGORIES, ArrowTable, encode_categories, frame_to_arrow, plan_views
from mkdist.errors import InputValidationError


def _mixed_table(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Six segments: a numeric view that separates three pairs, two categorical columns that
    split each pair (with noise), a string id."""
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, 6, n)
    pair, odd = seg // 2, seg % 2
    X = rng.normal(size=(n, 2)) * 0.5 + np.array([[0, 0], [4, 0], [0, 4]])[pair]
    plan = np.where(odd == 1, "pro", "basic")
    flip = rng.random(n) < 0.05
    plan[flip] = np.where(plan[flip] == "pro", "basic", "pro")
    channel = np.where(odd == 1, rng.choice(["store", "phone"], n, p=[0.8, 0.2]),
                       rng.choice(["web", "phone"], n, p=[0.8, 0.2]))
    return pd.DataFrame({"customer_id": [f"C{i:05d}" for i in rng.permutation(n)], "x0": X[:, 0], "x1": X[:, 1],
                         "plan": plan, "channel": pd.Categorical(channel), "tier": (odd * 2 + 1).astype(np.int64),
                         "segment": seg})


VIEWS = {"num": ["x0", "x1"], "profile": ["plan", "channel"]}


@pytest.fixture(scope="module")
def mixed():
    return _mixed_table()


@pytest.fixture(scope="module")
def mixed_parquet(mixed, tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "customers.parquet"
    mixed.to_parquet(path, index=False)
    return str(path)


# ----------------------------------------------------------------------------- the plan
def test_string_and_categorical_columns_form_a_categorical_view(mixed):
    plan = plan_views(ArrowTable(frame_to_arrow(mixed)), VIEWS, id_column="customer_id")
    assert plan.kind("profile") == "categorical" and plan.kind("num") == "numeric"
    assert plan.categories == {"plan": ["basic", "pro"], "channel": ["phone", "store", "web"]}
    assert plan.widths() == {"num": 2, "profile": 5}
    assert plan.feature_names()["profile"][:2] == ["plan=basic", "plan=pro"]
    assert "profile = plan, channel (2 categorical columns, 5 categories)" in plan.message()


def test_integer_codes_are_categories_only_when_the_view_says_so(mixed):
    table = ArrowTable(frame_to_arrow(mixed))
    assert plan_views(table, {"t": ["tier"]}).kind("t") == "numeric"
    plan = plan_views(table, {"t:categorical": ["tier"]})
    assert plan.kind("t") == "categorical" and plan.categories == {"tier": [1, 3]}
    with pytest.raises(InputValidationError, match="the kind after ':' must be one of numeric, categorical"):
        plan_views(table, {"t:cat": ["tier"]})
    with pytest.raises(InputValidationError, match="column 'x0' is numeric, not a category"):
        plan_views(table, {"t:categorical": ["tier", "x0"]})
    with pytest.raises(InputValidationError, match="column 'plan' is string, not a number.*--view t_cat=plan"):
        plan_views(table, {"t:numeric": ["plan"]})


def test_a_column_with_too_many_categories_is_refused_naming_it(mixed):
    wide = mixed.assign(note=[f"free text {i}" for i in range(len(mixed))])
    wide = pd.concat([wide] * (MAX_CATEGORIES // len(mixed) + 1), ignore_index=True)
    wide["note"] = [f"free text {i}" for i in range(len(wide))]
    with pytest.raises(InputValidationError, match=f"column 'note' has more than {MAX_CATEGORIES:,} distinct values"):
        plan_views(ArrowTable(frame_to_arrow(wide)), {"n": ["note"]})


def test_indicators_mark_unseen_categories_as_zero_and_missing_ones_as_nan():
    import pyarrow as pa

    out = encode_categories(pa.array(["b", "a", None, "z"]), ["a", "b"])
    np.testing.assert_array_equal(out[:2], [[0, 1], [1, 0]])
    assert np.isnan(out[2]).all()
    np.testing.assert_array_equal(out[3], [0, 0])
    # A dictionary column and integer codes against a model's vocabulary.
    np.testing.assert_array_equal(encode_categories(pa.array(["a", "b"]).dictionary_encode(), ["b", "a"]),
                                  [[0, 1], [1, 0]])
    np.testing.assert_array_equal(encode_categories(pa.array([3, 1], pa.int32()), [1, 3]), [[0, 1], [1, 0]])


# ----------------------------------------------------------------------------- estimators
def test_estimator_learns_the_categories_and_predicts_new_rows_with_them(mixed):
    y = mixed["segment"].to_numpy()
    X = {"num": mixed[["x0", "x1"]], "profile": mixed[["plan", "channel"]]}
    est = mkdist.MultipleKernelClustering(n_clusters=6, n_landmarks=300, random_state=0).fit(X)
    assert est.categories_ == {"plan": ["basic", "pro"], "channel": ["phone", "store", "web"]}
    assert est.n_features_per_view_ == {"num": 2, "profile": 5}
    numbers_only = mkdist.MultipleKernelClustering(n_clusters=6, n_landmarks=300, random_state=0).fit(X["num"])
    # The categories split each pair of segments that the numbers cannot tell apart.
    assert mkdist.clustering_accuracy(y, est.labels_) > mkdist.clustering_accuracy(y, numbers_only.labels_) + 0.2
    batch = mixed.head(20).copy()
    np.testing.assert_array_equal(est.predict({"num": batch[["x0", "x1"]], "profile": batch[["plan", "channel"]]}),
                                  est.labels_[:20])
    # A category the fit never saw is a defined outcome (no indicator set), not a crash; the
    # restored model encodes like the fitted one.
    batch["plan"] = batch["plan"].astype(object)
    batch.loc[batch.index[0], "plan"] = "enterprise"
    restored = mkdist.MultipleKernelClustering.from_model_state(est.model_state())
    new = {"num": batch[["x0", "x1"]], "profile": batch[["plan", "channel"]]}
    np.testing.assert_array_equal(restored.predict(new), est.predict(new))


def test_one_dataframe_is_one_view_of_its_numbers(mixed):
    est = mkdist.MultipleKernelClustering(n_clusters=3, n_landmarks=200, random_state=0)
    est.fit(mixed[["x0", "x1", "plan"]])
    assert est.view_names_ == ["features"] and est.n_features_per_view_ == {"features": 2}


def _pairs_in_a_row(n: int, seed: int) -> pd.DataFrame:
    """Six segments in three pairs, as the customer table of bench/bench_tables.py: four numbers
    separate the pairs, whose centres lie on a line (the middle pair near the numbers' mean);
    two string columns split each pair, each flipped for 10% of the rows."""
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, 6, n)
    centres = np.array([[40.0, 3.0, 12.0, 20.0], [90.0, 6.0, 30.0, 35.0], [160.0, 10.0, 50.0, 55.0]])
    X = centres[seg // 2] + rng.normal(size=(n, 4)) * np.array([20.0, 1.5, 8.0, 7.0])
    side = lambda: (seg % 2) ^ (rng.random(n) < 0.1)  # noqa: E731
    return pd.DataFrame({"spend": X[:, 0], "visits": X[:, 1], "tenure": X[:, 2], "basket": X[:, 3],
                         "plan": np.where(side(), "premium", "basic"), "channel": np.where(side(), "store", "web"),
                         "segment": seg})


def test_a_categorical_view_clusters_as_kernel_kmeans_and_numbers_keep_the_spectral_geometry(mixed, tmp_path):
    from sklearn.cluster import KMeans

    df = _pairs_in_a_row(2000, 0)
    y = df["segment"].to_numpy()
    X = {"usage": df[["spend", "visits", "tenure", "basket"]], "profile": df[["plan", "channel"]]}
    kwargs = dict(n_clusters=6, n_landmarks=300, scale="table", random_state=0)
    est = mkdist.MultipleKernelClustering(**kwargs).fit(X)
    model = est.model_
    assert (model.preprocessing.normalize, model.normalize_embedding, model.embedding_scale, model.n_components) == (
        "trace", False, "eigenvalue", 6)
    # Not set, the scale of a table with a categorical view is "table" (its numbers standardised:
    # they come in their own units; its indicators as given): the same fit as asking for it.
    default_scale = mkdist.MultipleKernelClustering(n_clusters=6, n_landmarks=300, random_state=0).fit(X)
    assert default_scale.model_.scaling.kind == "table"
    np.testing.assert_array_equal(default_scale.model_.scaling.scale["profile"], 1.0)
    assert not np.all(default_scale.model_.scaling.scale["usage"] == 1.0)
    np.testing.assert_array_equal(default_scale.labels_, est.labels_)
    # ... and its kernel the linear one on the indicators (the columns add, not multiply).
    assert [k.kind for k in default_scale.kernels_ if k.view == "profile"] == ["linear"]
    # "none": the columns as they are, asked for through a run's options (where None is the default).
    raw = mkdist.cluster(df, tmp_path / "raw.zarr", 6, views={"usage": ["spend", "visits", "tenure", "basket"],
                                                              "profile": ["plan", "channel"]},
                         n_landmarks=300, scale="none", random_state=0)
    assert raw.model.model_.scaling is None and raw.model.get_params()["scale"] == "none"
    # Set by hand, each is kept: the geometry before, the paper's, on the same table.
    sphere = mkdist.MultipleKernelClustering(normalize="diagonal", normalize_embedding=True, embedding_dim=12,
                                             **kwargs).fit(X)
    assert (sphere.model_.preprocessing.normalize, sphere.model_.normalize_embedding,
            sphere.model_.n_components) == ("diagonal", True, 12)

    def pairs(labels):  # share of rows whose pair (what the numbers tell) is right
        return float(np.mean(_matched(y, labels) // 2 == y // 2))

    # The sphere pulls rows of the middle pair into an outer one; kernel k-means keeps the
    # boundary where k-means on the numbers has it (bench/RESULTS.md, "Tables as they come").
    assert pairs(est.labels_) >= pairs(sphere.labels_) + 0.002
    Z = X["usage"].to_numpy()
    onehot = np.hstack([(Z - Z.mean(0)) / Z.std(0), pd.get_dummies(X["profile"]).to_numpy(float)])
    kmeans_acc = mkdist.clustering_accuracy(y, KMeans(6, n_init=10, random_state=0).fit_predict(onehot))
    assert mkdist.clustering_accuracy(y, est.labels_) >= kmeans_acc - 0.01
    # Numbers alone: the paper's geometry, as measured on the 28 shared sets.
    numeric = mkdist.MultipleKernelClustering(n_clusters=3, n_landmarks=200, random_state=0).fit(
        mixed[["x0", "x1"]].to_numpy())
    assert (numeric.model_.preprocessing.normalize, numeric.model_.normalize_embedding,
            numeric.model_.embedding_scale, numeric.model_.n_components) == ("diagonal", True, "unit", 6)
    assert numeric.model_.scaling is None  # the data as passed


def _matched(y: np.ndarray, labels) -> np.ndarray:
    """Every label replaced by the segment it is matched to (one matching of clusters to segments)."""
    from scipy.optimize import linear_sum_assignment

    labels = np.asarray(labels)
    counts = np.zeros((labels.max() + 1, y.max() + 1))
    np.add.at(counts, (labels, y), 1)
    rows, cols = linear_sum_assignment(-counts)
    mapping = np.zeros(labels.max() + 1, dtype=int)
    mapping[rows] = cols
    return mapping[labels]


# ----------------------------------------------------------------------------- the pipeline
def test_pandas_dask_and_parquet_of_one_table_give_the_same_views(mixed, mixed_parquet):
    import dask.dataframe as dd

    from_pandas = mkdist.load_views(mixed, views=VIEWS, id_column="customer_id")
    from_dask = mkdist.load_views(dd.from_pandas(mixed, npartitions=3), views=VIEWS, id_column="customer_id")
    from_file = mkdist.load_views(mixed_parquet, views=VIEWS, id_column="customer_id")
    for name in VIEWS:
        expected = from_file[name].compute()
        np.testing.assert_array_equal(from_pandas[name].compute(), expected)
        np.testing.assert_array_equal(from_dask[name].compute(), expected)
        assert len(set(from_dask[name].chunks[0][:-1])) <= 1  # uniform chunks, as a run store needs


def test_a_dataframe_runs_like_its_parquet_and_resumes(mixed, mixed_parquet, tmp_path):
    kwargs = dict(views=VIEWS, id_column="customer_id", random_state=0, n_landmarks=300)
    from_frame = mkdist.cluster(mixed, tmp_path / "frame.zarr", 6, labels_out=tmp_path / "frame-labels.parquet",
                                **kwargs)
    from_file = mkdist.cluster(mixed_parquet, tmp_path / "file.zarr", 6, **kwargs)
    np.testing.assert_array_equal(np.asarray(from_frame.labels), np.asarray(from_file.labels))
    # The stored model knows its categorical view, so its embedding follows the kernel's own
    # distances (embedding_scale="auto"); the categories split the pairs the numbers cannot.
    assert mkdist.load_estimator(tmp_path / "frame.zarr").model_.embedding_scale == "eigenvalue"
    assert mkdist.clustering_accuracy(mixed["segment"], np.asarray(from_frame.labels)) > 0.85
    again = mkdist.cluster(mixed, tmp_path / "frame.zarr", 6, **kwargs)
    assert again.skipped == ["landmarks", "model", "embedding", "labels"]
    out = pd.read_parquet(tmp_path / "frame-labels.parquet")
    assert out["customer_id"].tolist() == mixed["customer_id"].tolist()
    # The model keeps the vocabulary: a batch with an unseen category is assigned, not refused.
    store = mkdist.storage.RunStore.open(str(tmp_path / "frame.zarr"), mode="r")
    assert store.attrs["input"]["categories"]["channel"] == ["phone", "store", "web"]
    batch = mixed.head(50).copy()
    batch["channel"] = batch["channel"].astype(str)
    batch.loc[batch.index[0], "channel"] = "kiosk"
    assigned = mkdist.assign(tmp_path / "frame.zarr", batch, tmp_path / "batch.zarr")
    labels = np.asarray(assigned.read_stage("labels")["labels"])
    np.testing.assert_array_equal(labels[1:], np.asarray(from_frame.labels)[1:50])


@pytest.mark.parametrize("levels", [5, 50])
def test_a_noise_column_beside_an_informative_one_does_not_sink_the_categorical_view(levels):
    """Issue 41: segments split by the numbers and by ``plan``; ``region`` is noise (uniform over
    ``levels``, independent of everything). With the RBF of the indicators (a product over the
    columns) ``plan,region`` fell to ACC 0.57 against 0.89 for ``plan`` alone; the linear
    kernel on the indicators as given counts each column once, as one-hot k-means does."""
    from sklearn.cluster import KMeans

    df = _pairs_in_a_row(2000, 1)
    rng = np.random.default_rng(7)
    df["region"] = np.asarray([f"R{i:02d}" for i in range(levels)], dtype=object)[rng.integers(0, levels, len(df))]
    y = df["segment"].to_numpy()
    usage = df[["spend", "visits", "tenure", "basket"]]

    def acc(profile):
        est = mkdist.MultipleKernelClustering(6, n_landmarks=300, random_state=0).fit({"usage": usage,
                                                                                        "profile": df[profile]})
        return mkdist.clustering_scores(y, est.labels_)["acc"]

    with_noise, plan_alone = acc(["plan", "region"]), acc(["plan"])
    onehot = np.hstack([(usage - usage.mean()) / usage.std(), pd.get_dummies(df[["plan", "region"]]).to_numpy(float)])
    kmeans = mkdist.clustering_scores(y, KMeans(6, n_init=10, random_state=0).fit_predict(onehot))["acc"]
    assert plan_alone > 0.85
    assert with_noise >= plan_alone - 0.01, (with_noise, plan_alone)
    assert with_noise >= kmeans - 0.01, (with_noise, kmeans)
