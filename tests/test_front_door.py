"""The command line as a data engineer uses it: a Parquet table with string ids and two declared
views, run on a real `dask scheduler` + two `dask worker` processes, labels joined back by id;
the same command again; new batches assigned; mistakes refused; Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mkdist.metrics import clustering_accuracy
from mkdist.storage import RunStore

pytestmark = pytest.mark.slow

VIEWS = ["--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id", "--label-key", "true_segment"]


def _cli(*args, timeout=600, api=None):
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    if api:
        env["PREFECT_API_URL"] = api
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    from mkdist.datasets import write_customer_table

    root = tmp_path_factory.mktemp("tables")
    path = root / "customers.parquet"
    y = write_customer_table(path, 3000, n_clusters=4, row_group_rows=700)
    return root, path, y


@pytest.fixture(scope="module")
def finished(table, dask_address):
    root, path, _ = table
    store, labels = root / "run.zarr", root / "labels.parquet"
    r = _cli("run", "--input", str(path), "--store", str(store), "--n-clusters", "4", *VIEWS, "--labels-out",
             str(labels), "--n-landmarks", "300", "--random-state", "0", "--dask-address", dask_address)
    assert r.returncode == 0, r.stderr
    return {"store": store, "labels": labels, "run": r}


def test_table_run_labels_join_back_by_id(table, finished):
    _, path, y = table
    r = finished["run"]
    # One line about the columns, the stages' progress, then the summary and the result line.
    assert ("input: views: a = a0, a1, a2, ..., a7 (8 columns); b = b0, b1, b2, ..., b7 (8 columns); ignored: "
            "customer_id (id), true_segment (labels), segment (string), region (categorical), signup (date32[day])"
            ) in r.stderr
    assert "[3/4] embedding" in r.stderr and "rows/s" in r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("clustered 3,000 rows into 4 clusters (mkc)")
    labels = pd.read_parquet(finished["labels"])
    assert list(labels.columns) == ["customer_id", "cluster", "distance"]
    assert pq.read_schema(next(finished["labels"].glob("*.parquet"))).field("customer_id").type == pa.string()
    truth = pd.read_parquet(path, columns=["customer_id", "true_segment"])
    joined = truth.merge(labels, on="customer_id", how="outer", indicator=True)
    assert (joined["_merge"] == "both").all() and len(joined) == 3000
    assert clustering_accuracy(joined["true_segment"].to_numpy(), joined["cluster"].to_numpy()) >= 0.99
    stored = RunStore.open(finished["store"]).attrs["input"]
    assert stored["views"]["b"] == [f"b{j}" for j in range(8)] and stored["id_column"] == "customer_id"


def test_the_same_command_again_does_nothing_and_writes_only_what_is_missing(table, finished, dask_address):
    root, path, _ = table
    args = ["run", "--input", str(path), "--store", str(finished["store"]), "--n-clusters", "4", *VIEWS,
            "--labels-out", str(finished["labels"]), "--n-landmarks", "300", "--random-state", "0",
            "--dask-address", dask_address, "--quiet"]
    before = {p.name: p.stat().st_mtime_ns for p in finished["labels"].iterdir()}
    r = _cli(*args)
    assert r.returncode == 0 and r.stdout.startswith("nothing to do:"), r.stdout + r.stderr
    assert r.stderr == ""  # --quiet: the result line only
    assert {p.name: p.stat().st_mtime_ns for p in finished["labels"].iterdir()} == before
    # The labels output is gone: written again from the stored labels, no stage recomputed.
    moved = root / "moved.parquet"
    finished["labels"].rename(moved)
    try:
        r = _cli(*args)
        assert r.returncode == 0, r.stderr
        assert "already holds this run; wrote what was missing" in r.stdout
        pd.testing.assert_frame_equal(pd.read_parquet(finished["labels"]), pd.read_parquet(moved))
    finally:
        import shutil

        shutil.rmtree(moved)


def test_labels_out_of_another_run_is_refused_and_overwrite_replaces_it(table, finished, dask_address, tmp_path):
    _, path, _ = table
    store = tmp_path / "other.zarr"
    args = ["run", "--input", str(path), "--store", str(store), "--n-clusters", "3", *VIEWS, "--labels-out",
            str(finished["labels"]), "--n-landmarks", "300", "--random-state", "0", "--dask-address", dask_address,
            "--quiet"]
    r = _cli(*args)
    assert r.returncode == 2 and "holds the labels of the run in" in r.stderr and "--overwrite" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not store.exists()
    # The help says what --overwrite replaces.
    assert "--labels-out of another run" in _cli("run", "--help").stdout.replace("\n", " ").replace("  ", " ")


def test_assign_prints_its_result_drift_and_report_even_when_it_exits_3(table, finished, dask_address, tmp_path):
    from mkdist.datasets import write_customer_table

    # New rows of the fit's distribution: the same generator, rows after the 3000 fitted ones.
    write_customer_table(tmp_path / "more.parquet", 3800, n_clusters=4)
    batch = tmp_path / "batch.parquet"
    pq.write_table(pq.read_table(tmp_path / "more.parquet").slice(3000), batch)
    shifted = tmp_path / "shifted.parquet"
    t = pq.read_table(batch)
    for j in range(8):
        i = t.schema.get_field_index(f"a{j}")
        t = t.set_column(i, f"a{j}", pa.array(t.column(f"a{j}").to_numpy() + 3.0))
    pq.write_table(t, shifted)
    # The model's views and id column are used for the batch: nothing to declare again.
    r = _cli("assign", "--model-store", str(finished["store"]), "--input", str(batch), "--output",
             str(tmp_path / "a.zarr"), "--labels-out", str(tmp_path / "a.parquet"), "--dask-address", dask_address)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("assigned 800 rows") and "no drift" in line and "report " in line
    assert list(pd.read_parquet(tmp_path / "a.parquet").columns) == ["customer_id", "cluster", "distance"]
    r = _cli("assign", "--model-store", str(finished["store"]), "--input", str(shifted), "--output",
             str(tmp_path / "s.zarr"), "--fail-on-drift", "--dask-address", dask_address, "--quiet")
    assert r.returncode == 3, r.stderr
    assert "DRIFTED:" in r.stdout and "report " in r.stdout and str(tmp_path / "s.zarr") in r.stdout
    # What `inspect` prints (the CLI's text inspect runs in tests/test_n_clusters_auto.py).
    from mkdist.pipeline import inspect_markdown, inspect_store

    info = inspect_markdown(inspect_store(str(tmp_path / "s.zarr")))
    assert "drift: DRIFTED" in info and "view a: mean shift" in info


@pytest.mark.parametrize("case", ["missing", "store is a file", "wrong column", "nan", "k > rows"])
def test_mistakes_are_refused_in_one_line_with_nothing_created(table, tmp_path, case):
    _, path, _ = table
    store = tmp_path / "store.zarr"
    args = ["--input", str(path), "--store", str(store), "--n-clusters", "4", *VIEWS]
    expect = {"missing": "not found: ", "store is a file": "is a file; a run store is a directory",
              "wrong column": "column 'a99' is not in", "nan": "column 'b2' holds NaN or infinity in 2 rows, first at "
              "row 10 (customer_id '",
              "k > rows": "--n-clusters 4: K is more than the 3 rows; lower --n-clusters."}[case]
    if case == "missing":
        args[1] = str(path).replace("customers", "customer")
        expect += args[1]
    elif case == "store is a file":
        store.write_text("x")
    elif case == "wrong column":
        args[args.index("a=a*")] = "a=a0,a99"
    elif case == "nan":
        t = pq.read_table(path)
        b2 = t.column("b2").to_numpy().copy()
        b2[[10, 2000]] = np.nan
        args[1] = str(tmp_path / "nan.parquet")
        pq.write_table(t.set_column(t.schema.get_field_index("b2"), "b2", pa.array(b2, from_pandas=False)), args[1])
    elif case == "k > rows":
        args[1] = str(tmp_path / "tiny.parquet")
        pq.write_table(pq.read_table(path).slice(0, 3), args[1])
    r = _cli("run", *args, "--n-workers", "1", "--quiet")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not store.exists() or store.is_file()


def _group_processes(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("where", ["in-process", "local-cluster"])
def test_ctrl_c_exits_130_leaves_nothing_and_the_same_command_resumes(table, finished, tmp_path, where):
    """SIGINT to the process group, as a terminal's Ctrl-C, on a run in the command's own process
    (the 3000-row table's default) and on the command's own LocalCluster (``--n-workers``):
    once while the rows are embedded, then (the same command again) twice while the labels are
    computed: exit 130 within 5 s each time, no process left, then the same command resumes to
    the labels of an uninterrupted run."""
    _, path, _ = table
    store, labels = tmp_path / "run.zarr", tmp_path / "labels.parquet"
    args = [sys.executable, "-m", "mkdist.cli", "run", "--input", str(path), "--store", str(store), "--n-clusters",
            "4", *VIEWS, "--labels-out", str(labels), "--n-landmarks", "300", "--random-state", "0",
            *(["--n-workers", "2"] if where == "local-cluster" else [])]
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    for stage, times in (("[3/4] embedding", 1), ("[4/4] labels", 2)):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if stage in line:
                break
        said = {"in-process": "computing on: in-process (", "local-cluster": "starting a local Dask cluster"}
        assert any(line.startswith(said[where]) for line in seen), seen
        t0 = time.perf_counter()
        for i in range(times):
            time.sleep(0.2 * i)
            os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        proc.wait(timeout=30)
        took = time.perf_counter() - t0
        assert proc.returncode == 130, (stage, rest)
        assert took < 5.0, (stage, took, rest)
        assert "interrupted; re-run the same command to resume" in rest
        deadline = time.time() + 3
        while _group_processes(proc.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _group_processes(proc.pid)
    r = subprocess.run(args + ["--quiet"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = pd.read_parquet(labels).set_index("customer_id")["cluster"]
    ref = pd.read_parquet(finished["labels"]).set_index("customer_id")["cluster"]
    assert got.reindex(ref.index).equals(ref)


def test_prefect_flow_path_when_a_server_is_configured(table, prefect_api, dask_address, tmp_path):
    """With a Prefect API configured the same command runs as the flow (tracked there), with the
    same table path."""
    from prefect.client.orchestration import get_client

    _, path, y = table
    store = tmp_path / "flow.zarr"
    r = _cli("run", "--input", str(path), "--store", str(store), "--n-clusters", "4", *VIEWS, "--labels-out",
             str(tmp_path / "l.parquet"), "--n-landmarks", "300", "--random-state", "0", "--dask-address",
             dask_address, "--quiet", api=prefect_api)
    assert r.returncode == 0, r.stderr
    assert "ACC 0.99" in r.stdout or "ACC 1.0" in r.stdout
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=50)
    assert any((run.parameters.get("plan") or {}).get("store") == str(store) for run in runs)


def test_the_no_op_check_reads_the_store_layout_it_names(tmp_path):
    """mkdist._pipeline._rerun answers without importing the store layer: the schema and pointer name it
    checks are the store's own, and a stage whose pointer is gone, or a store of another schema, makes
    the run not finished."""
    import xarray as xr
    import zarr

    from mkdist._pipeline import _rerun
    from mkdist.storage import SCHEMA_VERSION, _generations

    assert (_rerun.SCHEMA_VERSION, _rerun.POINTER) == (SCHEMA_VERSION, _generations.POINTER)
    url = tmp_path / "run.zarr"
    store = RunStore.create(str(url), fingerprint="sha256:0", params={"k": 1})
    store.write_stage("labels", xr.Dataset({"labels": ("sample", np.arange(3))}))
    key = _rerun.request_key("sha256:input", {"n_clusters": 1})
    store.update_attrs(summary={"N": 3}, finished={"request": key, "stages": ["labels"]})
    assert _rerun.finished_run(str(url), key)["N"] == 3
    assert _rerun.finished_run(str(url), _rerun.request_key("sha256:other", {"n_clusters": 1})) is None
    zarr.open_group(str(url), mode="r+").attrs["schema_version"] = 2
    assert _rerun.finished_run(str(url), key) is None
    zarr.open_group(str(url), mode="r+").attrs["schema_version"] = SCHEMA_VERSION
    (url / f"labels{_generations.POINTER}").unlink()
    assert _rerun.finished_run(str(url), key) is None
