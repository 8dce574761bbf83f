import json
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from mkdist._core._distances import nearest_center
from mkdist._core._graph import apply_filter, build_graph
from mkdist._core._state import StateArrays
from mkdist._methods._late_fusion import LateFusionClustering, LateFusionModel
from mkdist._methods._late_fusion._fusion import FilterMoments, fit_fusion
from mkdist._methods._late_fusion._partitions import fit_seeds
from mkdist._methods._registry import get_method
from mkdist.errors import DegenerateKernelWarning, InputValidationError
from mkdist.metrics import clustering_accuracy

from .conftest import make_blobs_views, raise_if_dask_computes

# Few, cheap kernels keep every fit well under a second on the test data (180 x 2 views).
FAST = {"kernels": "rbf-grid", "n_init": 3}


@pytest.fixture(scope="module")
def blobs_views():
    return make_blobs_views()


@pytest.fixture(scope="module")
def fitted(blobs_views):
    views, _ = blobs_views
    return LateFusionClustering(3, n_landmarks=120, random_state=0, **FAST).fit(views)


# ----------------------------------------------------------------------------- the estimator
def test_fit_recovers_clusters_and_learned_state(blobs_views, fitted):
    views, y = blobs_views
    m = fitted
    assert clustering_accuracy(y, m.labels_) == 1.0
    n_kernels = len(m.kernels_)
    for w in (m.view_weights_, m.filter_weights_):
        assert w.shape == (n_kernels,) and w.sum() == pytest.approx(1.0) and np.all(w >= 0)
    assert m.landmark_indices_.shape == (120,)
    D = m.model_.n_components
    assert m.model_.column_kernel.shape == (D,)
    assert m.cluster_centers_.shape == (3, D)
    assert m.embedding_dim_ == 6
    assert len(m.objective_history_) == m.n_iter_ + 1
    diag = m.diagnostics_
    assert len(diag["pep_kernels"]) == n_kernels
    assert diag["pep_chance"] == pytest.approx(3 / 120)
    assert 0 < diag["pep_combined_before"] <= 1 and 0 < diag["pep_combined_after"] <= 1
    assert m.transform(views).shape == (len(y), D)


def test_default_kernels_read_the_views_sparsity(blobs_views):
    # kernels="auto" (the default) must see the landmark rows: cosine on a bag-of-words-like
    # view (< 10% non-zero), three RBF kernels on the dense one.
    views, y = blobs_views
    rng = np.random.default_rng(0)
    words = np.zeros((y.size, 200))
    for c in range(3):  # each cluster uses its own 30 words, 8 per row
        rows = np.flatnonzero(y == c)
        words[rows[:, None], rng.integers(30 * c, 30 * c + 30, size=(rows.size, 8))] = 1.0
    m = LateFusionClustering(3, n_landmarks=120, random_state=0, n_init=3).fit([views[0], words])
    assert sorted((k.view, k.kind) for k in m.kernels_) == [("view0", "rbf")] * 3 + [("view1", "cosine")]
    assert m.embedding_dim_ == 6 and m.get_params()["scale"] == "auto"
    assert clustering_accuracy(y, m.labels_) == 1.0
    # scale="auto" (the default): min-max on the dense view, the bag of words as it is.
    sc = m.model_.scaling
    lm = m.landmark_indices_
    np.testing.assert_allclose(sc.offset["view0"], views[0][lm].min(axis=0))
    np.testing.assert_allclose(sc.scale["view0"], np.ptp(views[0][lm], axis=0))
    np.testing.assert_array_equal(sc.offset["view1"], 0.0)
    np.testing.assert_array_equal(sc.scale["view1"], 1.0)
    np.testing.assert_array_equal(m.model_.landmarks["view1"], words[lm])


@pytest.mark.parametrize("params", [{}, {"graph_filter_order": 0}, {"graph_filter_order": 3},
                                    {"filter_weights": "uniform"}])
def test_objective_never_increases(blobs_views, params):
    views, _ = blobs_views
    m = LateFusionClustering(3, n_landmarks=120, random_state=2, **{**FAST, **params}).fit(views)
    hist = m.objective_history_
    assert np.all(np.diff(hist) <= 1e-10 * hist[0])
    steps = np.array([v for _, v in m.diagnostics_["objective_steps"]])
    assert np.all(np.diff(steps) <= 1e-10 * steps[0])  # every single step (Y, gamma, mu)


@pytest.mark.parametrize("n", [40, 6])  # D = 9 <= n (through Ybar^T G_i H) and D > n (through P_w)
def test_filter_moments_give_the_residual_grams_of_the_filtered_partitions(n):
    # alpha_p and M from the moments equal <(I - P_Y) G_i H_p, (I - P_Y) G_j H_p> with the filters applied.
    rng = np.random.default_rng(0)
    k, order = 2, 2  # k != the 3 filters: the contractions must pick the right axis
    parts = [np.linalg.qr(rng.normal(size=(n, d)))[0] for d in (3, 4, 2)]
    H = np.hstack(parts)
    slices = [slice(0, 3), slice(3, 7), slice(7, 9)]
    graphs = [build_graph(P, min(4, n - 2)) for P in parts]
    mu0 = np.array([0.5, 0.3, 0.2])
    moments = FilterMoments(H, slices, graphs, order, mu0)
    labels = np.r_[np.arange(k), rng.integers(0, k, n - k)]
    same = labels[:, None] == labels[None, :]
    R = np.eye(n) - same / np.bincount(labels)[labels][None, :]  # I - P_Y
    Q = []
    for cols in slices:
        W = np.stack([(R @ apply_filter(g.S_hat, H[:, cols], order)).ravel() for g in graphs])
        Q.append(W @ W.T)
    lab = moments.labelling(labels, k)
    mu, w = np.array([0.2, 0.7, 0.1]), np.array([0.5, 2.0, 1.0])
    np.testing.assert_allclose(lab.alpha(mu), [mu @ q @ mu for q in Q], atol=1e-12)
    np.testing.assert_allclose(lab.gram(w), sum(wp * q for wp, q in zip(w, Q)), atol=1e-12)
    direct = sum(m_ * apply_filter(g.S_hat, H, order) for m_, g in zip(mu0, graphs))
    np.testing.assert_allclose(moments.GH0, direct, atol=1e-14)


def test_order_zero_is_plain_late_fusion(blobs_views):
    views, _ = blobs_views
    m = LateFusionClustering(3, n_landmarks=120, graph_filter_order=0, random_state=0, **FAST).fit(views)
    model = m.model_
    # G~ = I: H~ is the gamma-weighted concatenation of the base partitions; mu stays uniform.
    np.testing.assert_allclose(model.embedding, model.partitions * model.gamma_cols[None, :])
    kept = m.kept_kernels_
    np.testing.assert_allclose(m.filter_weights_[kept], 1.0 / kept.size)


def test_predict_and_transform_reproduce_the_fit_on_landmarks(blobs_views, fitted):
    views, _ = blobs_views
    m = fitted
    lm = [v[m.landmark_indices_] for v in views]
    np.testing.assert_array_equal(m.predict(lm), m.model_.landmark_labels)
    np.testing.assert_array_equal(m.predict(lm), m.labels_[m.landmark_indices_])
    np.testing.assert_array_equal(m.transform(lm), m.model_.cluster_embedding)
    # The whole training set: landmarks keep their labels, the rest out of sample.
    np.testing.assert_array_equal(m.predict(views), m.labels_)
    # Row order changes nothing.
    perm = np.random.default_rng(0).permutation(120)
    np.testing.assert_array_equal(m.predict([v[perm] for v in lm]), m.model_.landmark_labels[perm])


def test_out_of_sample_formula_reproduces_landmark_rows(fitted):
    """Without the landmark shortcut, the formula with a landmark's own graph row gives its H~ row."""
    model = fitted.model_
    views = model.landmarks  # already scaled
    # h_p(x_j) = P_p(x_j) H_p Lambda_p^-1 = H_p[j] for a landmark (MKC-AE).
    np.testing.assert_allclose(model._base_rows(views), model.partitions, atol=1e-9)
    order = model.graph_filter_order
    Hg = model.partitions * model.gamma_cols[None, :]
    rebuilt = (1 - 2.0**-order) * Hg
    for i, B in model.oos.bases.items():
        rebuilt += model.filter_weights[i] * (model.graphs[i].S_hat @ B)
    np.testing.assert_allclose(rebuilt, model.embedding, atol=1e-12)


def test_out_of_sample_points_are_assigned_well(blobs_views):
    views, y = blobs_views
    m = LateFusionClustering(3, n_landmarks=60, random_state=1, **FAST).fit(views)
    rest = np.setdiff1d(np.arange(len(y)), m.landmark_indices_)
    assert rest.size == 120
    assert clustering_accuracy(y[rest], m.labels_[rest]) == 1.0
    # A point next to a landmark is embedded next to that landmark's fitted row, and shares its label.
    for j in m.landmark_indices_[:10]:
        near = [v[[j]] + 1e-7 for v in views]
        H_near = m.transform(near)
        nearest = np.argmin(((m.model_.cluster_embedding - H_near) ** 2).sum(axis=1))
        assert m.landmark_indices_[nearest] == j
        assert m.predict(near)[0] == m.labels_[j]


def test_final_kmeans_on_all_points_or_landmark_clustering(blobs_views):
    """cluster_all_points: centroids from k-means on H~ of all N rows, labels_ == predict."""
    views, y = blobs_views
    N = len(y)
    kw = dict(n_clusters=3, n_landmarks=60, random_state=1, **FAST)
    m = LateFusionClustering(**kw).fit(views)
    assert m.diagnostics_["final_kmeans"]["rows"] == N
    np.testing.assert_array_equal(m.predict(views), m.labels_)
    H = m.transform(views)
    inertia = ((H - m.cluster_centers_[m.labels_]) ** 2).sum()
    assert inertia == pytest.approx(m.diagnostics_["final_kmeans"]["inertia"], rel=1e-6)
    # Landmark rows carry the label of their nearest final centroid.
    np.testing.assert_array_equal(m.model_.landmark_labels, m.labels_[m.landmark_indices_])

    off = LateFusionClustering(**kw, cluster_all_points=False).fit(views)
    assert "final_kmeans" not in off.diagnostics_
    # Same landmarks and Algorithm 1; every row goes to the landmark clustering's centroids and
    # the landmarks keep their fitted labels.
    np.testing.assert_array_equal(off.landmark_indices_, m.landmark_indices_)
    np.testing.assert_array_equal(off.predict(views), off.labels_)
    np.testing.assert_array_equal(off.labels_[off.landmark_indices_], off.model_.landmark_labels)
    E, C = off.model_.cluster_embedding, off.cluster_centers_
    assert off.inertia_ == pytest.approx(((E - C[off.model_.landmark_labels]) ** 2).sum())
    assert clustering_accuracy(y, m.labels_) == clustering_accuracy(y, off.labels_) == 1.0
    # With every row a landmark there is nothing to add: no second k-means, the fit's own labels.
    full = LateFusionClustering(3, random_state=1, **FAST).fit(views)
    assert "final_kmeans" not in full.diagnostics_
    np.testing.assert_array_equal(full.landmark_indices_, np.arange(N))
    np.testing.assert_array_equal(full.labels_, full.model_.landmark_labels)


def test_clusters_live_in_the_row_normalised_embedding(blobs_views):
    """normalize_embedding (default): H~ rows scaled to unit length before every k-means and
    every assignment; False: Algorithm 1's labels and centroids in the raw H~."""
    from mkdist._core._linalg import unit_rows

    views, y = blobs_views
    for n_landmarks in (60, None):
        m = LateFusionClustering(3, n_landmarks=n_landmarks, random_state=2, **FAST).fit(views)
        model = m.model_
        assert m.get_params()["normalize_embedding"] and model.normalize_embedding
        np.testing.assert_allclose(model.cluster_embedding, unit_rows(model.embedding))
        H = m.transform(views)
        np.testing.assert_allclose(np.linalg.norm(H, axis=1), 1.0)
        lm = [v[m.landmark_indices_] for v in views]
        np.testing.assert_array_equal(m.transform(lm), model.cluster_embedding)
        np.testing.assert_array_equal(m.predict(views), m.labels_)
        np.testing.assert_array_equal(nearest_center(H, m.cluster_centers_), m.labels_)
        assert clustering_accuracy(y, m.labels_) == 1.0
        # Saved and restored with the model.
        r = LateFusionClustering.from_model_state(m.model_state())
        assert r.model_.normalize_embedding
        new = [v + 0.01 for v in views]
        np.testing.assert_array_equal(r.transform(new), m.transform(new))
    raw = LateFusionClustering(3, random_state=2, normalize_embedding=False, **FAST).fit(views)
    assert raw.model_.cluster_embedding is raw.model_.embedding
    np.testing.assert_array_equal(raw.transform(views), raw.model_.embedding)
    fusion = fit_fusion(raw.model_.partitions, raw.model_.column_kernel, raw.model_.graphs, raw.model_.copies,
                         n_clusters=3, order=3, learn_mu=True, n_init=3, max_iter=30, tol=1e-6,
                         random_state=fit_seeds(2)[2])
    np.testing.assert_array_equal(raw.labels_, fusion.labels)  # all rows landmarks: Algorithm 1's labels


def test_default_neighbours_are_ten_or_what_the_landmarks_allow(blobs_views):
    views, y = blobs_views
    m = LateFusionClustering(3, random_state=0, **FAST).fit(views)
    assert m.get_params()["n_neighbors"] is None and m.model_.neighbor_indices.shape[2] == 10
    small = LateFusionClustering(3, n_landmarks=8, embedding_dim=3, random_state=0, **FAST).fit(views)
    assert small.model_.neighbor_indices.shape[2] == 6  # n_landmarks - 2
    five = LateFusionClustering(3, n_neighbors=5, random_state=0, **FAST).fit(views)
    assert five.model_.neighbor_indices.shape[2] == 5 and clustering_accuracy(y, five.labels_) == 1.0


def test_near_constant_views_are_dropped(blobs_views):
    """A view with at least half of its pairs of landmark rows identical has its kernels dropped
    (else eq. 26 hands it all of gamma: ACM's view4); only such views is an error."""
    from mkdist._methods._late_fusion._partitions import identical_pair_share

    views, y = blobs_views
    rng = np.random.default_rng(0)
    flat = np.zeros((y.size, 4))
    odd = rng.choice(y.size, 12, replace=False)
    flat[odd] = rng.normal(size=(12, 4))
    assert identical_pair_share(flat) > 0.8 and identical_pair_share(views[0]) == 0.0
    assert identical_pair_share(np.array([[0.0, 1.0], [-0.0, 1.0], [1.0, 1.0]])) == pytest.approx(1 / 3)
    with pytest.warns(DegenerateKernelWarning, match="constant or nearly so"):
        m = LateFusionClustering(3, random_state=0, **FAST).fit([views[0], flat, views[1]])
    dropped = [d["index"] for d in m.dropped_kernels_]
    assert [m.kernels_[p].view for p in dropped] == ["view1"] * 3
    assert all("constant or nearly so" in d["reason"] for d in m.dropped_kernels_)
    assert np.all(m.view_weights_[dropped] == 0) and np.all(m.filter_weights_[dropped] == 0)
    assert clustering_accuracy(y, m.labels_) == 1.0
    with pytest.raises(InputValidationError, match="constant or nearly so"):
        LateFusionClustering(3, **FAST).fit([flat, flat + 1.0])


@pytest.mark.parametrize("order, filter_weights, seed", [(0, "learned", 0), (1, "learned", 1), (3, "learned", 2),
                                                         (3, "uniform", 3)])
def test_algorithm1_labels_are_the_nearest_centroid_labels(fitted, order, filter_weights, seed):
    """Algorithm 1 ends with Lloyd run to a fixed point, so its (scikit-learn) labels are the
    nearest-centroid labels the estimator gives the landmarks (and predict gives every row)."""
    model = fitted.model_
    fusion = fit_fusion(model.partitions, model.column_kernel, model.graphs, model.copies, n_clusters=3, order=order,
                         learn_mu=filter_weights == "learned", n_init=3, max_iter=30, tol=1e-6, random_state=seed)
    np.testing.assert_array_equal(fusion.labels, nearest_center(fusion.embedding, fusion.centers))


def test_fit_seeds_follow_the_integer_seed(blobs_views):
    """One integer seed -> (landmarks, base partitions, fusion) seeds, as bench_late_fusion.fit_seeds draws them."""
    from mkdist._core._sampling import sample_landmark_indices

    views, _ = blobs_views
    assert fit_seeds(7) == tuple(int(s) for s in np.random.RandomState(7).randint(np.iinfo(np.int32).max, size=3))
    m = LateFusionClustering(3, n_landmarks=100, random_state=7, **FAST).fit(views)
    expected = sample_landmark_indices(dict(zip(m.view_names_, views)), 100, random_state=fit_seeds(7)[0])
    np.testing.assert_array_equal(m.landmark_indices_, expected)


@pytest.mark.parametrize("n_landmarks", [60, None])
def test_stage_by_stage_through_a_saved_model_equals_fit(blobs_views, n_landmarks):
    """The pipeline's stages (landmarks -> model -> embedding -> labels), with the model reloaded
    from its state between stages, give fit's labels."""
    from mkdist._core._sampling import gather_rows
    from mkdist._methods._base import LANDMARK_EMBEDDING

    views, _ = blobs_views
    kw = dict(n_clusters=3, n_landmarks=n_landmarks, random_state=4, **FAST)
    ref = LateFusionClustering(**kw).fit(views)
    assert LateFusionClustering.stage_plan == LANDMARK_EMBEDDING
    named = dict(zip(["view0", "view1"], views))
    est = LateFusionClustering(**kw)
    seed = 4
    idx = est.sample_landmarks(named, seed)
    est.fit_landmarks(gather_rows(named, idx), idx, seed)
    stage = LateFusionClustering.from_model_state(est.model_state())
    H = stage.transform(named)
    stage.fit_centroids(H, seed)
    stage = LateFusionClustering.from_model_state(stage.model_state())
    np.testing.assert_array_equal(stage.assign_embedding(H), ref.labels_)
    np.testing.assert_array_equal(stage.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(stage.model_.landmark_labels, ref.model_.landmark_labels)


def test_registered_and_summary(blobs_views, fitted):
    assert get_method("late-fusion") is LateFusionClustering
    assert LateFusionClustering.multi_view
    s = fitted.summary()
    json.dumps(s)
    names = [k.name for k in fitted.kernels_]
    assert s["method"] == "late-fusion" and s["views"] == ["view0", "view1"]
    assert s["n_landmarks"] == 120 and s["n_components"] == fitted.model_.n_components
    assert s["kernel_names"] == names
    assert [w["name"] for w in s["weights"]] == ["view weights (gamma)", "filter weights (mu)"]
    np.testing.assert_allclose(s["weights"][0]["values"], fitted.view_weights_)
    np.testing.assert_allclose(s["weights"][1]["values"], fitted.filter_weights_)
    assert s["objective_history"] == fitted.objective_history_.tolist() and s["n_iter"] == fitted.n_iter_
    spec = np.array(s["spectrum"]["values"])
    assert spec.size == 4 and s["spectrum"]["k"] == 3 and np.all(np.diff(spec) <= 0)
    # The spectrum is that of H~ H~^T / n, whose top-k share is the filtered PEP.
    H = fitted.model_.embedding
    assert spec[:3].sum() * 120 / (H**2).sum() == pytest.approx(s["pep"]["combined_filtered"])
    assert s["pep"] == {"t": 3, "base": dict(zip(names, fitted.diagnostics_["pep_kernels"])),
                        "combined": fitted.diagnostics_["pep_combined_before"],
                        "combined_filtered": fitted.diagnostics_["pep_combined_after"], "dropped": []}
    # A reloaded model reports the same.
    assert LateFusionClustering.from_model_state(fitted.model_state()).summary() == s


def test_degenerate_kernels_are_dropped_and_recorded(blobs_views):
    views, _ = blobs_views
    kernels = [{"view": 0, "kind": "rbf", "bandwidth_rule": "max", "multiplier": 0.005},  # ~identity
               {"view": 0, "kind": "rbf"}, {"view": 1, "kind": "rbf"}]
    with pytest.warns(DegenerateKernelWarning, match="dropped"):
        m = LateFusionClustering(3, kernels=kernels, n_landmarks=120, random_state=0, n_init=3).fit(views)
    assert [d["index"] for d in m.dropped_kernels_] == [0]
    assert m.view_weights_[0] == 0 and m.filter_weights_[0] == 0
    np.testing.assert_array_equal(m.kept_kernels_, [1, 2])
    pep = m.diagnostics_["pep_kernels"]
    assert pep[0] < 3 * m.diagnostics_["pep_chance"] < pep[1]
    # The ablation: min_pep_ratio=0 keeps every kernel and warns about nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateKernelWarning)
        m0 = LateFusionClustering(3, kernels=kernels, n_landmarks=120, min_pep_ratio=0.0, random_state=0,
                                  n_init=3).fit(views)
    assert m0.dropped_kernels_ == [] and m0.kept_kernels_.size == 3


def test_kernels_with_one_partition_are_merged_into_algorithm1_on_all_copies(blobs_views, monkeypatch):
    views, _ = blobs_views
    # Gaussians 50 and 100 x the largest distance: the same normalised kernel to 1e-4.
    kernels = [{"view": 0, "kind": "rbf"}, {"view": 0, "kind": "rbf", "bandwidth_rule": "max", "multiplier": 50},
               {"view": 0, "kind": "rbf", "bandwidth_rule": "max", "multiplier": 100}, {"view": 1, "kind": "rbf"}]
    params = dict(kernels=kernels, n_landmarks=120, random_state=0, n_init=3)
    merged = LateFusionClustering(3, **params).fit(views)
    assert [(r["index"], r["into"]) for r in merged.merged_kernels_] in ([(2, 1)], [(1, 2)])
    assert merged.kept_kernels_.size == 3 and merged.model_.copies.tolist().count(2) == 1
    q, p = merged.merged_kernels_[0]["index"], merged.merged_kernels_[0]["into"]
    assert merged.view_weights_[q] == merged.view_weights_[p] > 0
    assert merged.filter_weights_[q] == merged.filter_weights_[p]
    assert merged.view_weights_.sum() == pytest.approx(1.0) and merged.filter_weights_.sum() == pytest.approx(1.0)
    # The same as Algorithm 1 on both copies (merging off): objective, gamma, the copies' summed mu, H~'s distances.
    monkeypatch.setattr("mkdist._methods._late_fusion._partitions._DUPLICATE_RTOL", -1.0)
    apart = LateFusionClustering(3, **params).fit(views)
    assert apart.merged_kernels_ == [] and apart.kept_kernels_.size == 4
    np.testing.assert_allclose(merged.objective_history_, apart.objective_history_, rtol=1e-4)
    np.testing.assert_allclose(merged.view_weights_, apart.view_weights_, atol=1e-4)
    mu_m, mu_a = merged.filter_weights_, apart.filter_weights_
    np.testing.assert_allclose(mu_m[q] + mu_m[p], mu_a[q] + mu_a[p], atol=1e-4)
    np.testing.assert_array_equal(merged.labels_, apart.labels_)
    Hm, Ha = merged.model_.embedding, apart.model_.embedding
    np.testing.assert_allclose(Hm @ Hm.T, Ha @ Ha.T, atol=1e-4 * np.abs(Ha @ Ha.T).max())


def test_same_seed_same_result_and_float32(blobs_views):
    views, y = blobs_views
    a = LateFusionClustering(3, n_landmarks=100, random_state=7, **FAST).fit(views)
    b = LateFusionClustering(3, n_landmarks=100, random_state=7, **FAST).fit(views)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    c = LateFusionClustering(3, n_landmarks=100, random_state=7, **FAST).fit([v.astype(np.float32) for v in views])
    assert clustering_accuracy(y, c.labels_) == 1.0


def test_float32_out_of_sample_path(blobs_views):
    """dtype=None follows the views (float32 views: float32 kernel blocks, neighbour ranking and
    embedding); the landmark fit is float64 either way, so the two models differ only in the
    out-of-sample rows, by float32 rounding, and assign the same labels.  The dtype is saved."""
    views, y = blobs_views
    v32 = [v.astype(np.float32) for v in views]
    kw = dict(n_clusters=3, n_landmarks=100, random_state=7, cluster_all_points=False, **FAST)
    a = LateFusionClustering(**kw, dtype="float64").fit(v32)
    b = LateFusionClustering(**kw).fit(v32)
    assert a.model_.dtype == "float64" and b.model_.dtype == "float32"
    assert LateFusionClustering(**kw).fit(views).model_.dtype == "float64"
    np.testing.assert_array_equal(a.model_.embedding, b.model_.embedding)
    new = [v + np.float32(0.01) for v in v32]
    Ha, Hb = a.transform(new), b.transform(new)
    assert Ha.dtype == np.float64 and Hb.dtype == np.float32
    # float32 rounding of the kernel rows, amplified by lambda_1 / lambda_j in column j (the
    # trailing eigenpairs of these small fits): 4e-5 of the embedding's scale here.
    np.testing.assert_allclose(Hb, Ha, rtol=0, atol=2e-4 * np.abs(Ha).max())
    np.testing.assert_array_equal(b.predict(new), a.predict(new))
    np.testing.assert_array_equal(b.labels_, a.labels_)
    state = b.model_state()
    assert state["attrs"]["model"]["dtype"] == "float32"
    r = LateFusionClustering.from_model_state(state)
    np.testing.assert_array_equal(r.transform(new), Hb)
    with pytest.raises(InputValidationError, match="dtype"):
        LateFusionClustering(3, dtype="float16").fit(views)


def test_full_pep_diagnostics(blobs_views):
    views, _ = blobs_views
    m = LateFusionClustering(3, n_landmarks=90, full_pep=True, random_state=0, **FAST).fit(views)
    d = m.diagnostics_
    names = [m.kernels_[p].name for p in m.kept_kernels_]
    assert list(d["pep_kernels_filtered"]) == names
    for key in ("pep_kernel_combined_before", "pep_kernel_combined_after"):
        assert 0 < d[key] <= 1
    for name, p in zip(names, m.kept_kernels_):
        assert d["pep_kernels_kept_unfiltered"][name] == pytest.approx(d["pep_kernels"][p], rel=1e-6)


# ----------------------------------------------------------------------------- bad input
def _small():
    return make_blobs_views(n_per_cluster=10)[0]


@pytest.mark.parametrize("X, params, match", [
    (lambda: _small(), {"n_neighbors": 0}, "`n_neighbors`=0 must be >= 1"),
    (lambda: _small(), {"n_neighbors": 29}, r"`n_neighbors`=29 must be >= 1 and < n_landmarks - 1 = 29"),
    (lambda: _small(), {"n_neighbors": 5, "n_landmarks": 6}, "`n_neighbors`=5"),
    (lambda: _small(), {"graph_filter_order": -1}, "`graph_filter_order`=-1 must be >= 0"),
    (lambda: _small(), {"graph_filter_order": 1.5}, "must be a non-negative integer, got 1.5"),
    (lambda: _small(), {"graph_filter_order": True}, "must be a non-negative integer"),
    (lambda: _small(), {"embedding_dim": 2}, "embedding_dim=2 must be >= n_clusters=3"),
    (lambda: _small(), {"embedding_dim": 31}, r"embedding_dim=31 .* <= the number of landmarks \(30\)"),
    (lambda: _small(), {"embedding_dim": 21, "n_landmarks": 20}, "embedding_dim=21"),
    (lambda: [_small()[0], np.ones((30, 3))], {"kernels": [{"view": 1, "kind": "linear"}]},
     "view 'view1': the view is constant .* top-6 eigenvalues are all 0"),
    (lambda: [_small()[0], np.zeros((30, 3))], {"kernels": [{"view": 1, "kind": "linear"}], "center": False},
     "eigenvalues are all 0|zero on the landmarks|constant or nearly so"),
    (lambda: [np.r_[_small()[0][:-1], [[np.nan] * 5]], _small()[1]], {}, "NaN"),
    (lambda: _small(), {"filter_weights": "fixed"}, "filter_weights"),
    (lambda: _small(), {"min_pep_ratio": 1.0}, "min_pep_ratio"),
    (lambda: _small(), {"n_clusters": 1}, "n_clusters"),
    (lambda: _small(), {"scale": "robust"}, "scale"),
    (lambda: _small(), {"cluster_all_points": "yes"}, "`cluster_all_points`='yes' must be True or False"),
    (lambda: _small(), {"normalize_embedding": 1}, "normalize_embedding"),
    (lambda: _small(), {"kernels": [{"view": "nope", "kind": "rbf"}]}, "does not exist"),
])
def test_bad_input_raises_before_heavy_work(X, params, match):
    with pytest.raises(InputValidationError, match=match):
        LateFusionClustering(**{"n_clusters": 3, "kernels": "rbf-grid", **params}).fit(X())


def test_predict_errors(blobs_views, fitted):
    views, _ = blobs_views
    with pytest.raises(NotFittedError):
        LateFusionClustering(3).predict(views)
    with pytest.raises(InputValidationError, match="X has 4 features, but LateFusionClustering is expecting 5"):
        fitted.predict([views[0], views[1][:, :4]])
    with pytest.raises(InputValidationError, match="fitted on 2 views"):
        fitted.predict(views[0])
    bad = views[1].copy()
    bad[3, 2] = np.nan
    with pytest.raises(InputValidationError, match="NaN"):
        fitted.predict([views[0], bad])


# ----------------------------------------------------------------------------- state, Dask
def test_model_state_round_trip(blobs_views):
    views, y = blobs_views
    m = LateFusionClustering(3, n_landmarks=80, scale="minmax", random_state=0, **FAST).fit(views)
    state = m.model_state()
    json.dumps(state["attrs"])
    for name, (dims, arr) in state["arrays"].items():
        assert isinstance(arr, np.ndarray) and len(dims) == arr.ndim, name
    # Through plain arrays (as a store would hand them back).
    plain = {"attrs": json.loads(json.dumps(state["attrs"])),
             "arrays": {k: (dims, np.array(a)) for k, (dims, a) in state["arrays"].items()}}
    r = LateFusionClustering.from_model_state(plain)
    new = [v + 0.01 for v in views]
    np.testing.assert_array_equal(r.predict(views), m.predict(views))
    np.testing.assert_array_equal(r.predict(new), m.predict(new))
    np.testing.assert_array_equal(r.transform(new), m.transform(new))
    np.testing.assert_array_equal(r.view_weights_, m.view_weights_)
    assert r.get_params() == m.get_params()
    with pytest.raises(InputValidationError, match="format"):
        LateFusionClustering.from_model_state({"attrs": {}, "arrays": {}})


def test_dask_predict_is_lazy_and_matches_numpy(blobs_views, fitted):
    da = pytest.importorskip("dask.array")
    import dask

    views, _ = blobs_views
    dviews = [da.from_array(v, chunks=(50, -1)) for v in views]
    with raise_if_dask_computes():
        lazy = fitted.predict(dviews)
        lazy_H = fitted.transform(dviews)
    assert lazy.chunks == ((50, 50, 50, 30),)
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(lazy.compute(), fitted.predict(views))
        # Other row blocks, other GEMM blocking: equal up to rounding.
        np.testing.assert_allclose(lazy_H.compute(), fitted.transform(views), rtol=1e-10, atol=1e-13)
        bad = views[0].copy()
        bad[77, 1] = np.inf
        with pytest.raises(InputValidationError, match=r"chunk 1 \(first bad row 77\)"):
            fitted.predict([da.from_array(bad, chunks=(50, -1)), dviews[1]]).compute()


def test_dask_fit_matches_numpy_fit(blobs_views):
    da = pytest.importorskip("dask.array")
    import dask

    views, _ = blobs_views
    kw = dict(n_clusters=3, n_landmarks=100, random_state=3, **FAST)
    ref = LateFusionClustering(**kw).fit(views)
    with dask.config.set(scheduler="synchronous"):
        m = LateFusionClustering(**kw).fit([da.from_array(v, chunks=(64, -1)) for v in views])
        assert hasattr(m.labels_, "dask")
        assert m.diagnostics_["final_kmeans"]["rows"] == len(views[0])
        np.testing.assert_array_equal(m.labels_.compute(), ref.labels_)
    np.testing.assert_array_equal(m.landmark_indices_, ref.landmark_indices_)


def test_model_is_a_plain_dataclass(fitted):
    assert isinstance(fitted.model_, LateFusionModel)
    attrs, arrays = fitted.model_.state()
    restored = LateFusionModel.from_state(json.loads(json.dumps(attrs)), StateArrays(arrays))
    np.testing.assert_array_equal(restored.embedding, fitted.model_.embedding)


# scikit-learn's estimator checks run once per registered method, in
# tests/test_common.py::test_sklearn_compatible (LateFusionClustering(n_clusters=2, n_init=2,
# random_state=0): its default kernels are rbf-grid on dense views, cosine on sparse ones).
