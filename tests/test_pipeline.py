"""The staged pipeline on a real Dask cluster (scheduler + 2 worker processes) with real Zarr stores."""

import collections
import json
import os
import re
import sys
import time

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import mkdist
from mkdist import MultipleKernelClustering
from mkdist.errors import InputValidationError, SchemaVersionError, StoreExistsError
from mkdist.metrics import clustering_accuracy
from mkdist.pipeline import assign, cluster, inspect_store, load_estimator
from mkdist.storage import RunStore

from .conftest import make_blobs_views, raise_if_dask_computes


@pytest.fixture(scope="module")
def data():
    views, y = make_blobs_views(n_per_cluster=400, n_clusters=3, seed=2, dtype=np.float32)
    return views, y


def _dask(views, rows=300):
    return [da.from_array(v, chunks=(rows, -1)) for v in views]


def test_cluster_end_to_end_and_store_contents(dask_client, data, tmp_path):
    views, y = data
    url = str(tmp_path / "run.zarr")
    res = cluster(_dask(views), url, 3, n_landmarks=200, random_state=0, y_true=y)
    labels = res.labels.compute()
    assert labels.shape == (1200,)
    assert clustering_accuracy(y, labels) == 1.0
    assert res.metrics["scores"]["acc"] == 1.0
    assert set(res.timings) >= {"sample_s", "fit_s", "embed_s", "kmeans_s", "write_s", "total_s"}
    assert res.skipped == []
    status = res.store.stage_status()
    assert all(status[s] == "complete" for s in ("landmarks", "model", "embedding", "labels", "metrics"))
    assert status["kernel_blocks"] == "missing"
    # Readable with xarray, with named dimensions (each stage's group is its current generation).
    def group(stage):
        return res.store.stage_group(stage)

    emb = xr.open_zarr(url, group=group("embedding"), consolidated=False)
    assert emb["embedding"].dims == ("sample", "component") and emb.sizes["sample"] == 1200
    model = xr.open_zarr(url, group=group("model"), consolidated=False)
    assert model["kernel_weights"].dims == ("kernel",)
    assert model["eigenvectors"].dims == ("landmark", "component")
    assert json.loads(model.attrs["mkdist_state"])["model"]["kernels"][0]["sigma"] > 0
    assert model.attrs["method"] == "mkc"
    # The centroids are stored with the labels (the model stage is written once).
    labels = xr.open_zarr(url, group=group("labels"), consolidated=False)
    assert labels["cluster_centers"].dims == ("cluster", "component") and labels["labels"].dims == ("sample",)
    # Each load rebuilds its own estimator (the arrays are read once): changing one leaves the next intact.
    first = load_estimator(url)
    first.cluster_centers_[:] = 0.0
    assert np.abs(load_estimator(url).cluster_centers_).sum() > 0
    # The report's sample keeps its rows' labels: a report reads no array of every row.
    index = labels["report_index"].values
    np.testing.assert_array_equal(labels["report_labels"].values, labels["labels"].values[index])
    assert labels["report_embedding"].shape[0] == index.size
    # The embedding is chunked like the input.
    assert emb["embedding"].encoding["chunks"][0] == 300
    # No pickle anywhere: every array in the store has a plain numeric dtype.
    for stage in ("landmarks", "model", "embedding", "labels", "metrics"):
        for var in xr.open_zarr(url, group=group(stage), consolidated=False).data_vars.values():
            assert var.dtype.kind in "iuf", (stage, var.name, var.dtype)


def test_rerun_resumes_every_stage(dask_client, data, tmp_path):
    views, _ = data
    url = str(tmp_path / "run.zarr")
    first = cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    again = cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    assert again.skipped == ["landmarks", "model", "embedding", "labels"]
    assert again.timings["fit_s"] == again.timings["embed_s"] == again.timings["kmeans_s"] == 0.0
    np.testing.assert_array_equal(first.labels.compute(), again.labels.compute())


def test_different_run_is_refused_unless_overwrite(dask_client, data, tmp_path):
    views, _ = data
    url = str(tmp_path / "run.zarr")
    cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    with pytest.raises(StoreExistsError):
        cluster(_dask(views), url, 4, n_landmarks=100, random_state=1)
    res = cluster(_dask(views), url, 4, n_landmarks=100, random_state=1, overwrite=True)
    assert res.model.cluster_centers_.shape[0] == 4


def test_store_of_another_schema_is_refused_unless_overwrite(dask_client, data, tmp_path):
    import zarr

    views, _ = data
    url = str(tmp_path / "run.zarr")
    cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    root = zarr.open_group(url, mode="r+")
    root.attrs["schema_version"] = 999
    with pytest.raises(SchemaVersionError, match="upgrade mkdist"):
        cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    with pytest.raises(SchemaVersionError):
        load_estimator(url)
    root.attrs["schema_version"] = 2  # written by a development version: re-created, not read
    with pytest.raises(SchemaVersionError, match="schema_version=2, written by an older mkdist.*overwrite"):
        cluster(_dask(views), url, 3, n_landmarks=100, random_state=1)
    with pytest.raises(SchemaVersionError):
        inspect_store(url, clean=True)
    res = cluster(_dask(views), url, 3, n_landmarks=100, random_state=1, overwrite=True)
    assert res.skipped == [] and RunStore.open(url).attrs["schema_version"] == 3


def _flaky_block(path: str, marker: str, start: int, stop: int) -> np.ndarray:
    """A chunk that fails once, after the marker's count of successful reads.

    The input scan reads this chunk first (with the landmark rows it holds); the embedding
    stage's read is the one that fails, and consumes the marker.
    """
    if os.path.exists(marker):
        with open(marker) as f:
            reads_left = int(f.read() or 0)
        if reads_left <= 0:
            os.remove(marker)
            raise RuntimeError("simulated worker crash in the embedding stage")
        with open(marker, "w") as f:
            f.write(str(reads_left - 1))
    return np.load(path, mmap_mode="r")[start:stop]


def _flaky_views(tmp_path, views, rows=300):
    out = []
    marker = str(tmp_path / "fail-once")
    for i, v in enumerate(views):
        path = str(tmp_path / f"v{i}.npy")
        np.save(path, v)
        blocks = []
        for start in range(0, v.shape[0], rows):
            stop = min(start + rows, v.shape[0])
            fn = _flaky_block if (i == 1 and start == 600) else (lambda p, m, a, b: np.load(p, mmap_mode="r")[a:b])
            blocks.append(da.from_delayed(dask.delayed(fn, pure=True)(path, marker, start, stop),
                                          shape=(stop - start, v.shape[1]), dtype=v.dtype))
        out.append(da.concatenate(blocks))
    with open(marker, "w") as f:
        # one successful read (the input scan, which also reads the landmark rows), then the
        # crash (embedding)
        f.write("1")
    return out, marker


def test_crash_in_embedding_keeps_model_and_resumes_without_refit(dask_client, data, tmp_path):
    views, y = data
    url = str(tmp_path / "run.zarr")
    flaky, marker = _flaky_views(tmp_path, views)
    with pytest.raises(RuntimeError, match="simulated worker crash"):
        cluster(flaky, url, 3, n_landmarks=100, random_state=3)
    from mkdist.storage import RunStore

    store = RunStore.open(url, mode="r")
    status = store.stage_status()
    assert status["model"] == "complete" and status["landmarks"] == "complete"
    assert status["embedding"] != "complete" and status["labels"] == "missing"
    weights = store.read_stage("model")["kernel_weights"].values.copy()
    assert not os.path.exists(marker)
    flaky2, _ = _flaky_views(tmp_path, views)
    os.remove(marker)  # the data is healthy now
    res = cluster(flaky2, url, 3, n_landmarks=100, random_state=3)
    assert res.skipped == ["landmarks", "model"]
    assert res.timings["fit_s"] == 0.0
    np.testing.assert_array_equal(res.model.kernel_weights_, weights)
    assert clustering_accuracy(y, res.labels.compute()) == 1.0


def test_embedding_is_streamed_through_the_store_not_kept_on_the_workers(dask_client, data, tmp_path):
    # The embedding (N x K floats) is written chunk by chunk as it is computed and read back
    # by k-means: nothing of size N stays on the workers between stages, so their memory does
    # not grow with N.  Stored uncompressed: k-means reads it once per pass.
    from mkdist.pipeline import (
        RunConfig,
        open_run,
        plan_run,
        run_context,
        stage_embedding,
        stage_labels,
        stage_landmarks,
        stage_model,
    )

    views, y = data
    url = str(tmp_path / "run.zarr")
    vs = _dask(views)
    ctx = open_run(plan_run(vs, url, RunConfig.from_options(n_clusters=3, n_landmarks=100, random_state=0)))
    stage_landmarks(ctx)
    stage_model(ctx)
    stage_embedding(ctx)
    # Keys are released asynchronously after a compute returns: wait for the release, then nothing
    # may be left (a persisted embedding would stay).
    deadline = time.monotonic() + 10
    while (held := dask_client.run(lambda dask_worker: list(dask_worker.data))) and any(held.values()):
        assert time.monotonic() < deadline, held
        time.sleep(0.1)
    emb = xr.open_zarr(url, group=ctx.store.stage_group("embedding"), consolidated=False)
    assert not emb["embedding"].encoding.get("compressors")
    # The last stage as a fresh process runs it: its context rebuilt from the store and the input.
    fresh = run_context(url, vs)
    assert fresh.config == ctx.config and fresh.plan is None
    stage_labels(fresh)
    assert clustering_accuracy(y, fresh.store.read_stage("labels")["labels"].values) == 1.0


def test_labels_above_the_held_size_are_recomputed_for_the_write_with_the_same_results(dask_client, data,
                                                                                       tmp_path, monkeypatch):
    # Above MKDIST_HELD_LABELS_BYTES the labels stage holds nothing of size N between its pass and
    # its store write (the write computes the labels again from the stored embedding): the
    # same stage, bit for bit, as when they are held.
    from mkdist._pipeline import _stages
    from mkdist._pipeline._profiles import read_profiles

    views, _ = data
    stores, persisted = {}, {}
    real = _stages._persist

    def recording(x, progress=False, stage="compute", n_rows=0):
        persisted[name].append(stage)
        return real(x, progress, stage, n_rows)

    monkeypatch.setattr(_stages, "_persist", recording)
    for name, held in (("held", None), ("recomputed", "1")):
        persisted[name] = []
        if held is None:
            monkeypatch.delenv("MKDIST_HELD_LABELS_BYTES", raising=False)
        else:
            monkeypatch.setenv("MKDIST_HELD_LABELS_BYTES", held)
        stores[name] = cluster(_dask(views), str(tmp_path / f"{name}.zarr"), 3, n_landmarks=100,
                               random_state=0).store
    assert "labels" in persisted["held"] and "labels" not in persisted["recomputed"]
    a, b = (stores[k].read_stage("labels").load(scheduler="threads") for k in ("held", "recomputed"))
    for var in ("labels", "distance", "cluster_sizes", "report_labels", "report_embedding"):
        np.testing.assert_array_equal(a[var].values, b[var].values)
    assert a.attrs["distance_p99"] == b.attrs["distance_p99"]
    pd = pytest.importorskip("pandas")
    pd.testing.assert_frame_equal(read_profiles(stores["held"]).numeric, read_profiles(stores["recomputed"]).numeric)


def test_nan_chunk_is_named(dask_client, data, tmp_path):
    views, _ = data
    bad = views[1].copy()
    bad[650, 2] = np.nan
    with pytest.raises(InputValidationError, match=r"view 'view1', feature 2 holds NaN or infinity in 1 row, "
                                                   r"first at row 650"):
        cluster(_dask([views[0], bad]), str(tmp_path / "run.zarr"), 3, n_landmarks=100, random_state=0)


def test_assign_new_points_with_stored_model(dask_client, data, tmp_path):
    views, _ = data
    url = str(tmp_path / "run.zarr")
    res = cluster(_dask(views), url, 3, n_landmarks=150, random_state=0)
    new, _ = make_blobs_views(n_per_cluster=50, n_clusters=3, seed=2, dtype=np.float32)
    out = assign(url, _dask(new, rows=70), str(tmp_path / "assigned.zarr"))
    got = out.read_stage("labels")["labels"].values
    np.testing.assert_array_equal(got, load_estimator(url).predict(new))
    np.testing.assert_array_equal(got, res.model.predict(new))
    # ... and the model store was not modified.
    assert res.store.stage_status()["labels"] == "complete"


def test_estimator_on_dask_matches_numpy_fit(dask_client, data):
    views, y = data
    a = MultipleKernelClustering(3, n_landmarks=120, random_state=4).fit(_dask(views))
    b = MultipleKernelClustering(3, n_landmarks=120, random_state=4).fit(views)
    assert isinstance(a.labels_, da.Array)
    np.testing.assert_array_equal(a.landmark_indices_, b.landmark_indices_)
    np.testing.assert_allclose(a.kernel_weights_, b.kernel_weights_)
    assert clustering_accuracy(y, a.labels_.compute()) == 1.0
    np.testing.assert_array_equal(a.predict(_dask(views)).compute(), a.labels_.compute())


def test_embedding_graph_is_lazy_and_fused(data):
    views, _ = data
    m = MultipleKernelClustering(3, n_landmarks=100, random_state=0).fit(views)
    dv = _dask(views)
    with raise_if_dask_computes():
        H = m.transform(dv)
    # One embedding task per row chunk, plus one key for the model.
    layer = [k for k in H.__dask_graph__().layers if k.startswith("mkdist-embed")]
    assert len(layer) == 1 and len(H.__dask_graph__().layers[layer[0]]) == dv[0].numblocks[0]
    np.testing.assert_allclose(H.compute(scheduler="sync"), m.transform(views), rtol=1e-5, atol=1e-6)


def test_optional_kernel_blocks(dask_client, data, tmp_path):
    views, _ = data
    url = str(tmp_path / "run.zarr")
    cluster(_dask(views[:1]), url, 3, n_landmarks=50, random_state=0, kernels="rbf", write_kernel_blocks=True)
    P = xr.open_zarr(url, group=RunStore.open(url).stage_group("kernel_blocks"), consolidated=False)["P"]
    assert P.dims == ("kernel", "sample", "landmark") and P.shape == (1, 1200, 50)
    idx = load_estimator(url).landmark_indices_
    # The landmark rows of P are the preprocessed landmark kernel: unit diagonal.
    np.testing.assert_allclose(P.values[0][idx, np.arange(50)], 1.0, rtol=1e-4)


def test_public_api_exports():
    for name in ("cluster", "assign", "load_views", "RunConfig", "MultipleKernelClustering", "load_estimator",
                 "available_methods"):
        assert hasattr(mkdist, name), name


def test_other_method_through_the_store(dask_client, data, tmp_path):
    """method= runs another estimator: fit in the model stage, predict in the labels stage."""
    views, y = data
    url = str(tmp_path / "nys.zarr")
    res = cluster(_dask(views[:1]), url, 3, random_state=0, method="nystrom", y_true=y)
    assert res.metrics["scores"]["acc"] == 1.0 and res.metrics["method"] == "nystrom"
    status = res.store.stage_status()
    assert status["model"] == status["labels"] == "complete" and status["embedding"] == "missing"
    est = load_estimator(url)
    np.testing.assert_array_equal(est.predict(views[0]), res.labels.compute())
    out = assign(url, _dask(views[:1]), str(tmp_path / "out.zarr"))
    np.testing.assert_array_equal(out.read_stage("labels")["labels"].values, res.labels.compute())
    again = cluster(_dask(views[:1]), url, 3, random_state=0, method="nystrom")
    assert again.skipped == ["model", "labels"]
    with pytest.raises(InputValidationError, match="clusters one view"):
        cluster(_dask(views), str(tmp_path / "two.zarr"), 3, random_state=0, method="nystrom")
    with pytest.raises(InputValidationError, match="unknown method"):
        cluster(_dask(views), str(tmp_path / "x.zarr"), 3, method="spectral")
    with pytest.raises(InputValidationError, match="does not take"):
        cluster(_dask(views[:1]), str(tmp_path / "y.zarr"), 3, method="nystrom", method_params={"gamma": 1})


@pytest.mark.parametrize("method, n_views, params", [
    ("late-fusion", 2, {"kernels": "rbf-grid", "n_landmarks": 200}),
    ("mv-rff-power", 2, {}),
    ("rff-power", 1, {}),
    ("nystrom", 1, {}),
])
def test_every_method_round_trips_and_reports_pep(dask_client, data, tmp_path, method, n_views, params):
    """Each method= fits, stores its model without pickle, assigns like its own predict, and
    reports the principal eigenvalue proportion in the summary artifact and in inspect."""
    from mkdist.pipeline import inspect_markdown, inspect_store, summary_markdown

    views, y = data
    url = str(tmp_path / "run.zarr")
    kernels = params.pop("kernels", None)
    res = cluster(_dask(views[:n_views]), url, 3, kernels=kernels, random_state=0, method=method,
                  method_params=params or None, y_true=y)
    assert res.metrics["scores"]["acc"] >= 0.95, res.metrics["scores"]
    est = load_estimator(url)
    labels = res.labels.compute()
    np.testing.assert_array_equal(np.asarray(est.predict(views[:n_views] if n_views > 1 else views[0])), labels)
    out = assign(url, _dask(views[:n_views]), str(tmp_path / "out.zarr"))
    np.testing.assert_array_equal(out.read_stage("labels")["labels"].values, labels)

    pep = res.metrics["pep"]
    assert pep["t"] == 3 and 0 < pep["combined"] <= 1 + 1e-9
    assert pep["base"] and all(0 < v <= 1 + 1e-9 for v in pep["base"].values())
    md = summary_markdown(res.metrics, url)
    assert "Principal eigenvalue proportion" in md and "of the combined kernel" in md
    text = inspect_markdown(inspect_store(url))
    assert "PEP (t = 3)" in text and method in text
    if method == "late-fusion":
        assert pep["combined_filtered"] is not None and "after the graph filter" in text
    # The model stage keeps the summary the run report draws the model from while the run goes
    # on; it must be what the finished run reports, or those figures are drawn a second time.
    stored = json.loads(res.store.read_stage("model").attrs["summary"])
    assert {k: res.metrics[k] for k in stored} == stored


def test_run_options_reach_other_methods_or_are_refused(data, tmp_path):
    """kernels / n_landmarks / scale mean the same for every method that has them."""
    from mkdist.pipeline import RunConfig

    est = RunConfig.from_options(n_clusters=3, kernels="rbf-grid", n_landmarks=100,
                                 method="late-fusion").make_estimator()
    assert est.kernels == "rbf-grid" and est.n_landmarks == 100
    with pytest.raises(InputValidationError, match="does not use `kernels`"):
        RunConfig.from_options(n_clusters=3, kernels="rbf-grid", method="rff-power")
    with pytest.raises(InputValidationError, match="give it once"):
        RunConfig.from_options(n_clusters=3, scale="minmax", method="late-fusion", method_params={"scale": "standard"})
    # Estimator parameters are run options too; the estimator's own defaults apply unless given (issue 36:
    # a run and the estimator fitted alike give the same labels).
    mkc = RunConfig.from_options(n_clusters=3, weights="uniform").make_estimator()
    assert mkc.weights == "uniform" and mkc.get_params() == {**MultipleKernelClustering(3).get_params(),
                                                             "weights": "uniform"}
    assert RunConfig.from_options(n_clusters=3, n_init=7).make_estimator().n_init == 7
    with pytest.raises(InputValidationError, match="does not take `gamma`"):
        RunConfig.from_options(n_clusters=3, gamma=1.0)
    views, _ = data
    with pytest.raises(InputValidationError, match="does not use `n_landmarks`"):
        cluster(_dask(views), str(tmp_path / "x.zarr"), 3, n_landmarks=10, method="mv-rff-power")
    assert not (tmp_path / "x.zarr").exists()


def test_iterative_fits_show_their_passes_as_progress(dask_client, data, tmp_path, capsys, monkeypatch):
    """A fit-predict method's model stage is a loop of passes over the rows: with progress on,
    the run counts them on one status line (no bar per pass, and nothing when progress is off)."""
    import re

    from mkdist._methods._power_kmeans import _estimators

    # Restarts on a 300-row sample, then the kept run refined by passes over the Dask rows.
    monkeypatch.setattr(_estimators, "INIT_SAMPLE_SIZE", 300)
    views, _ = data
    params = dict(method="rff-power", random_state=0, n_init=2)
    cluster(_dask(views), str(tmp_path / "quiet.zarr"), 3, **params)
    assert "passes over the rows" not in capsys.readouterr().err
    # On a terminal each pass redraws the line (in a log only the stage's last line is written).
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    cluster(_dask(views), str(tmp_path / "shown.zarr"), 3, progress=True, **params)
    err = capsys.readouterr().err
    assert "model: pass 1 over the rows (mkdist-" in err, err[-500:]
    total = re.findall(r"model: (\d+) passes over [\d,]+ rows in", err)
    shown = re.findall(r"model: pass (\d+) over the rows", err)
    assert total and int(total[0]) == max(map(int, shown)) >= 1, err[-500:]


@pytest.fixture(scope="module")
def iris():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y


@pytest.mark.parametrize("method", ["mkc", "nystrom", "rff-power", "mv-rff-power", "late-fusion"])
def test_pipeline_labels_are_the_estimators(dask_client, iris, tmp_path, method):
    """Issue 36: the same views, K, method and seed give the estimator's labels through
    ``mkdist.cluster``, in memory or on the cluster, whatever the chunking.  Seed 1 on standardised
    iris is where the pipeline's former k-means defaults (3 restarts) lost a third of the NMI."""
    X, _ = iris
    seed = 1
    want = np.asarray(mkdist.get_method(method)(n_clusters=3, random_state=seed).fit([X]).labels_)
    got = {"numpy": cluster([X], str(tmp_path / "numpy.zarr"), 3, method=method, random_state=seed).labels}
    got["dask, 40-row chunks"] = cluster([da.from_array(X, chunks=(40, -1))], str(tmp_path / "dask.zarr"), 3,
                                         method=method, random_state=seed).labels
    for how, labels in got.items():
        np.testing.assert_array_equal(np.asarray(labels), want, err_msg=how)
    if method == "mkc":
        # "auto" picks this method's branch on dense views: the same labels again.
        auto = cluster([X], str(tmp_path / "auto.zarr"), 3, method="auto", random_state=seed)
        np.testing.assert_array_equal(np.asarray(auto.labels), want)


class _TaskCount:
    """Scheduler plugin: the keys the workers computed (processing -> memory)."""

    name = "mkdist-test-task-count"

    def __init__(self):
        self.done = []

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "processing" and finish == "memory":
            self.done.append(key[0] if isinstance(key, tuple) else str(key))


def _computed_keys(dask_scheduler=None):
    return dask_scheduler.plugins[_TaskCount.name].done


def test_a_run_computes_at_most_16_tasks_per_chunk(dask_client, data, tmp_path):
    # Issue 34, item 2: each pass over the input or the embedding is one fused task per chunk
    # (landmark rows, embedding with the input scan, k-means sample, each Lloyd pass, labels),
    # no shuffles for row gathers, no separate checksum getters, no task computed twice.
    # Counted on the scheduler, for a whole run from Zarr input in 12 chunks of 1000 rows (the
    # whole embedding is the k-means sample below 50,000 rows: read as one pass too).
    from distributed.diagnostics.plugin import SchedulerPlugin

    views, y = make_blobs_views(n_per_cluster=4000, n_clusters=3, seed=2, dtype=np.float32)
    src = tmp_path / "input.zarr"
    xr.Dataset({f"view{i}": (("sample", f"feature{i}"), v) for i, v in enumerate(views)}).chunk(
        {"sample": 1000}).to_zarr(src, zarr_format=3, consolidated=False)
    plugin = type("TaskCount", (_TaskCount, SchedulerPlugin), {})()
    dask_client.register_plugin(plugin)
    try:
        res = cluster(str(src), str(tmp_path / "run.zarr"), 3, n_landmarks=100, random_state=0)
        done = dask_client.run_on_scheduler(_computed_keys)
    finally:
        dask_client.unregister_scheduler_plugin(_TaskCount.name)
    n_chunks = 12
    by_name = collections.Counter(re.sub(r"-[0-9a-f-]{32,}", "", k) for k in done)
    lloyd = sum(1 for k in done if k.startswith("mkdist-lloyd-") and not k.endswith(("partial", "aggregate")))
    assert lloyd // n_chunks == res.metrics["kmeans"]["n_iter"] <= 6
    assert not [k for k in done if "shuffle" in k]
    # One task per chunk embeds it, and one scans it: the same chunk's, not a second read.
    assert sum(1 for k in done if re.fullmatch(r"mkdist-embed-scan-[0-9a-f]{32}", k)) == n_chunks, by_name
    assert len(done) / n_chunks <= 16, by_name
    assert clustering_accuracy(y, res.labels.compute()) == 1.0
