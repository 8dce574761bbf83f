"""Runs whose input, store and labels live on an S3-compatible object store.

Real parts only: a moto S3 server over HTTP on 127.0.0.1 that checks keys (IAM, as AWS does), a
`dask scheduler` and two `dask worker` processes, each worker with a working directory and a
TMPDIR of its own -- nothing can pass through a shared local path -- and credentials of its
own (a key of another IAM user, as a worker's role would be): a run whose driver takes its
credentials from the environment sends none in its graphs, and the workers use theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pandas as pd
import pytest

from mkdist.metrics import clustering_accuracy

from .conftest import _free_port, dask_processes, wait_for_port

pytest.importorskip("s3fs")
pytest.importorskip("moto")

BUCKET = "mkdist-test"
VIEWS = ["--view", "a=a*", "--view", "b=b*", "--id-column", "customer_id"]


def _without_credentials(env: dict) -> dict:
    return {k: v for k, v in env.items() if not k.startswith(("AWS_", "FSSPEC_"))}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server (its own process) that authenticates requests: the first three are
    free (they create an IAM user with an access key), every later one needs that key."""
    import boto3

    port = _free_port()
    env = {**_without_credentials(os.environ), "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=log, stderr=log)
    try:
        wait_for_port(port, proc, "moto server")
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                           aws_secret_access_key="setup")
        iam.create_user(UserName="mkdist")
        iam.put_user_policy(UserName="mkdist", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="mkdist")["AccessKey"]
        options = {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"], "endpoint_url": endpoint}
        import s3fs

        # The later requests need a key: the "mkdist" user (allowed everything) makes the workers'.
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        iam.create_user(UserName="workers")
        iam.put_user_policy(UserName="workers", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        workers = iam.create_access_key(UserName="workers")["AccessKey"]
        fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield {"options": options, "endpoint": endpoint, "fs": fs,
               "env": {"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"],
                       "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"},
               "workers_env": {"AWS_ACCESS_KEY_ID": workers["AccessKeyId"],
                               "AWS_SECRET_ACCESS_KEY": workers["SecretAccessKey"], "AWS_DEFAULT_REGION": "us-east-1"}}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def worker_homes(tmp_path_factory):
    """The directories of the two workers of `cluster`; each one's stderr is its ``worker.log``."""
    return [tmp_path_factory.mktemp(f"worker{i}") for i in range(2)]


@pytest.fixture(scope="module")
def cluster(s3, worker_homes):
    """`dask scheduler` + two `dask worker` processes on 127.0.0.1; each worker in its own
    directory with its own TMPDIR, with credentials of its own (the "workers" IAM user's key, as
    a deployment gives its workers a role) and no fsspec configuration or endpoint."""
    from distributed import Client

    env = {**_without_credentials(os.environ), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **s3["workers_env"]}
    with dask_processes(2, env, worker_home=worker_homes.__getitem__) as address:
        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
            # The workers have their own key, not the driver's.
            keys = set(client.run(lambda: os.environ.get("AWS_ACCESS_KEY_ID")).values())
            assert keys == {s3["workers_env"]["AWS_ACCESS_KEY_ID"]} != {s3["options"]["key"]}
        yield address


def _cli(*args, env=None, timeout=900):
    full = {**_without_credentials(os.environ), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **(env or {})}
    full.pop("PREFECT_API_URL", None)
    return subprocess.run([sys.executable, "-m", "mkdist.cli", *args], capture_output=True, text=True, env=full,
                          timeout=timeout)


@pytest.fixture(scope="module")
def table(s3, tmp_path_factory):
    """The customer table (4 segments, string ids) uploaded to the bucket; the true segments."""
    from mkdist.datasets import write_customer_table

    local = tmp_path_factory.mktemp("table") / "customers.parquet"
    y = write_customer_table(local, 2000, n_clusters=4, row_group_rows=700)
    url = f"s3://{BUCKET}/input/customers.parquet"
    s3["fs"].put(str(local), url, recursive=True)
    ids = pd.read_parquet(local, columns=["customer_id"])["customer_id"]
    return {"url": url, "truth": pd.Series(y, index=ids.to_numpy()), "local": local}


@pytest.fixture(scope="module")
def cli_run(s3, cluster, table):
    """`mkdist run` with input, store, labels (and the report) on s3, credentials from the environment."""
    store, labels = f"s3://{BUCKET}/runs/cli.zarr", f"s3://{BUCKET}/out/cli-labels.parquet"
    args = ["run", "--input", table["url"], "--store", store, "--labels-out", labels, "--n-clusters", "4", *VIEWS,
            "--n-landmarks", "200", "--random-state", "0", "--dask-address", cluster]
    r = _cli(*args, env=s3["env"])
    assert r.returncode == 0, r.stderr
    return {"store": store, "labels": labels, "args": args, "run": r}


def _labels(s3, url) -> pd.DataFrame:
    return pd.read_parquet(url, storage_options=s3["options"])


@pytest.mark.slow
def test_cli_run_on_s3_labels_join_back_by_id(s3, table, cli_run):
    labels = _labels(s3, cli_run["labels"])
    assert list(labels.columns) == ["customer_id", "cluster", "distance"] and len(labels) == 2000
    truth = table["truth"].loc[labels["customer_id"].to_numpy()]
    assert clustering_accuracy(truth.to_numpy(), labels["cluster"].to_numpy()) > 0.95
    fs = s3["fs"]
    fs.invalidate_cache()
    # The report goes next to the store, on s3; no temporary labels prefix is left behind.
    assert fs.exists(f"{cli_run['store']}.report.html")
    assert [p for p in fs.ls(f"{BUCKET}/out") if ".partial-" in p] == []
    # No secret reached what is stored: attributes, lease, report, labels.
    secret = s3["options"]["secret"]
    for path in fs.find(cli_run["store"]) + [f"{cli_run['store']}.report.html"]:
        if path.endswith((".json", ".html")):
            assert secret not in fs.cat_file(path).decode(errors="replace"), path


@pytest.mark.slow
def test_the_same_command_again_does_nothing(s3, cli_run):
    r = _cli(*cli_run["args"], "--quiet", env=s3["env"])
    assert r.returncode == 0, r.stderr
    assert "nothing to do" in r.stdout, r.stdout


@pytest.mark.slow
def test_inspect_verify_passes_then_finds_a_corrupted_chunk(s3, cli_run):
    from mkdist.storage import RunStore

    fs, store = s3["fs"], cli_run["store"]
    run = RunStore.open(store, storage_options=s3["options"])
    assert run.verify_stage("labels", full=True) == []
    fs.invalidate_cache()
    chunk = min(p for p in fs.find(store) if "/labels.gen-" in p and "/labels/c/" in p)
    original = fs.cat_file(chunk)
    fs.pipe_file(chunk, bytes(b ^ 0xFF for b in original))  # same size: only the checksum tells
    try:
        r = _cli("inspect", store, "--verify", env=s3["env"])
        assert r.returncode == 2, r.stdout + r.stderr
        assert "damaged" in r.stdout and "labels" in r.stdout, r.stdout
    finally:
        fs.pipe_file(chunk, original)
    assert run.verify_stage("labels", full=True) == []


@pytest.mark.slow
def test_workers_close_their_s3_sessions_when_they_stop(cluster, cli_run, worker_homes):
    """Each worker of the CLI run holds an s3 session on zarr's event loop; left open, aiohttp
    prints "Unclosed client session" when the worker process exits (the end of every run on
    its own LocalCluster).  The run's client gave the workers a plugin that closes them."""
    from distributed import Client

    def log() -> str:
        return "".join((home / "worker.log").read_text() for home in worker_homes)

    stopped = log().count("Stopping worker")
    with Client(cluster) as client:
        client.restart()  # each nanny closes its worker process (as a run's end does) and starts another
    assert log().count("Stopping worker") >= stopped + 2
    assert "Unclosed client session" not in log() and "Unclosed" not in cli_run["run"].stderr


@pytest.fixture(scope="module")
def zarr_input(s3):
    """A Zarr input (xarray layout, two views) written to the bucket."""
    import xarray as xr

    from tests.conftest import make_blobs_views

    (v0, v1), y = make_blobs_views(n_per_cluster=150, n_clusters=3)
    url = f"s3://{BUCKET}/input/blobs.zarr"
    xr.Dataset({"v0": (("sample", "f0"), v0), "v1": (("sample", "f1"), v1), "y": ("sample", y)}).chunk(
        {"sample": 150}).to_zarr(url, mode="w", consolidated=False, zarr_format=3, storage_options=s3["options"])
    return {"url": url, "y": y}


@pytest.fixture(scope="module")
def api_run(s3, cluster, zarr_input):
    """`mkdist.cluster` on the Zarr input with ``storage_options`` only: this process has no AWS
    variables either, so every filesystem -- here and on the workers -- uses the given options."""
    from distributed import Client

    import mkdist

    store, labels = f"s3://{BUCKET}/runs/api.zarr", f"s3://{BUCKET}/out/api-labels.parquet"
    with pytest.MonkeyPatch.context() as mp, Client(cluster):
        for k in [k for k in os.environ if k.startswith(("AWS_", "FSSPEC_"))]:
            mp.delenv(k)
        result = mkdist.cluster(zarr_input["url"], store, 3, random_state=0, n_landmarks=120, labels_out=labels,
                                storage_options=s3["options"], label_column="y")
        first = result.labels.compute()
    return {"store": store, "labels": labels, "first": first, "result": result}


@pytest.mark.slow
def test_python_api_with_storage_options_on_a_zarr_input(s3, zarr_input, api_run):
    assert clustering_accuracy(zarr_input["y"], api_run["first"]) > 0.95
    out = _labels(s3, api_run["labels"])
    assert out["row"].tolist() == list(range(450))
    assert (out["cluster"].to_numpy() == api_run["first"]).all()


@pytest.mark.slow
def test_no_secret_from_the_environment_travels_in_a_runs_graphs(s3, cluster, zarr_input, monkeypatch):
    """The driver takes its credentials from its environment; every message it sends the
    scheduler (graphs, as pickled for the wire, with their annotations) is searched for its
    secret and its key: neither is there, the workers read and write with their own key, and the
    run finishes.  (Before, the keys were copied into the fsspec options every task carried.)"""
    import cloudpickle
    from distributed import Client

    import mkdist

    for k in [k for k in os.environ if k.startswith(("AWS_", "FSSPEC_"))]:
        monkeypatch.delenv(k)
    for k, v in s3["env"].items():
        monkeypatch.setenv(k, v)
    sent: list[bytes] = []
    original = Client._send_to_scheduler

    def recording(self, msg):
        if isinstance(msg, dict):
            ser = msg.get("expr_ser")
            sent.extend(bytes(f) for f in (ser.frames if ser is not None else []))
            sent.append(cloudpickle.dumps({k: v for k, v in msg.items() if k != "expr_ser"}))
        return original(self, msg)

    monkeypatch.setattr(Client, "_send_to_scheduler", recording)
    store = f"s3://{BUCKET}/runs/graphs-{uuid.uuid4().hex[:8]}.zarr"
    with Client(cluster):
        result = mkdist.cluster(zarr_input["url"], store, 3, random_state=0, n_landmarks=120, label_column="y",
                                report=False)
        labels = result.labels.compute()
    assert clustering_accuracy(zarr_input["y"], labels) > 0.95
    wire = b"".join(sent)
    assert len(sent) > 10 and s3["endpoint"].encode() in wire  # the graphs were seen, their options with them
    assert s3["options"]["secret"].encode() not in wire
    assert s3["options"]["key"].encode() not in wire


@pytest.mark.slow
def test_a_run_interrupted_after_a_stage_resumes_on_s3(s3, cluster, zarr_input, api_run):
    """The store as a crash after the embedding stage leaves it: the later stages' pointers not
    put, an unfinished generation of the next one.  The same call resumes."""
    from distributed import Client

    import mkdist
    from mkdist.storage import RunStore

    store = RunStore.open(api_run["store"], mode="r+", storage_options=s3["options"])
    for stage in ("labels", "metrics"):
        store.delete_stage(stage)
    leftover = f"{api_run['store']}/labels.gen-{uuid.uuid4().hex}"
    s3["fs"].pipe_file(f"{leftover}/zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    with Client(cluster):
        result = mkdist.cluster(zarr_input["url"], api_run["store"], 3, random_state=0, n_landmarks=120,
                                labels_out=api_run["labels"], storage_options=s3["options"], label_column="y")
        again = result.labels.compute()
    assert result.metrics["resumed_stages"] == ["landmarks", "model", "embedding"]
    assert result.metrics["computed_stages"] == ["labels"]
    assert (again == api_run["first"]).all()
    s3["fs"].invalidate_cache()
    assert not s3["fs"].exists(leftover)


@pytest.mark.slow
def test_a_second_writer_is_refused_on_s3(s3):
    from mkdist.errors import StoreLockedError
    from mkdist.storage import RunStore
    from mkdist.storage._lease import StoreLease

    url = f"s3://{BUCKET}/runs/leased.zarr"
    store = RunStore.create(url, fingerprint="sha256:0", params={"k": 1}, storage_options=s3["options"])
    with store.lease(owner="first run"):
        other = StoreLease(store._fs, store._path, store.url, local=False, owner="second run")
        with pytest.raises(StoreLockedError, match="first run"):
            other.acquire()
    with store.lease(owner="second run"):  # released: the next run takes it
        pass


def test_stage_reads_and_writes_make_few_requests(s3, monkeypatch):
    """Each request to an object store costs a round trip (20-50 ms): a stage of 12 arrays is
    written with about one put per object and read back with a handful of requests, whatever
    its number of arrays; a zarr.json edited after a read is still read again and checked."""
    import s3fs
    import xarray as xr

    from mkdist.errors import DamagedStageError
    from mkdist.storage import RunStore

    requests = []
    call = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        requests.append((method, kwargs.get("Key") or kwargs.get("Prefix")))
        return await call(self, method, *args, **kwargs)

    url = f"s3://{BUCKET}/runs/requests.zarr"
    store = RunStore.create(url, fingerprint="sha256:0", params={"k": 1}, storage_options=s3["options"])
    ds = xr.Dataset({f"v{i}": (("row", "col"), np.full((10, 3), float(i))) for i in range(12)})
    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    store.write_stage("model", ds)
    puts = sum(m == "put_object" for m, _ in requests)
    # 12 chunks + 12 array documents + the group's twice (data, then marker) + manifest + pointer
    assert puts <= 28 and len(requests) <= 45, requests
    for _ in range(3):
        requests.clear()
        opened = RunStore.open(url, storage_options=s3["options"]).read_stage("model")
        assert len(requests) <= 5, requests  # root, pointer, group, listing: not one per array
        requests.clear()
        # In this process, whatever scheduler an earlier test left as the default.
        xr.testing.assert_identical(opened.compute(scheduler="threads"), ds)
        assert sorted(requests) == sorted(("get_object", f"{key}/c/0/0") for key in (
            f"runs/requests.zarr/{store.stage_group('model')}/v{i}" for i in range(12)))  # the chunks
    meta = f"{url}/{store.stage_group('model')}/v3/zarr.json"
    fs = s3["fs"]
    fs.pipe_file(meta, fs.cat_file(meta).replace(b"10", b"11", 1))
    with pytest.raises(DamagedStageError, match="array 'v3': shape is"):
        RunStore.open(url, storage_options=s3["options"]).read_stage("model")


@pytest.mark.slow
def test_clean_removes_replaced_generations_and_leftovers(s3, monkeypatch):
    import xarray as xr

    from mkdist.storage import RunStore

    url = f"s3://{BUCKET}/runs/clean.zarr"
    store = RunStore.create(url, fingerprint="sha256:0", params={"k": 1}, storage_options=s3["options"])
    store.write_stage("extra", xr.Dataset({"x": ("i", np.arange(5))}))
    first = store.stage_group("extra")
    store.write_stage("extra", xr.Dataset({"x": ("i", np.arange(5) + 1)}), overwrite=True)
    fs = s3["fs"]
    fs.invalidate_cache()
    assert fs.exists(f"{url}/{first}")  # kept for readers, for the grace period
    leftover = f"{url}/extra.gen-{uuid.uuid4().hex}"
    fs.pipe_file(f"{leftover}/zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    r = _cli("inspect", url, "--clean", "--json", env={**s3["env"], "MKDIST_GENERATION_GRACE_S": "0"})
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(r.stdout)["cleaned"]) == sorted([first, leftover.rsplit("/", 1)[1]])
    fs.invalidate_cache()
    assert not fs.exists(f"{url}/{first}") and not fs.exists(leftover)
    assert store.read_stage("extra")["x"].values.tolist() == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["wrong key", "unreachable endpoint", "no bucket"])
def test_bad_credentials_or_endpoint_are_one_line_before_any_work(s3, table, tmp_path, case):
    store = f"s3://{BUCKET}/runs/refused-{case.replace(' ', '-')}.zarr"
    env = dict(s3["env"])
    expect = {"wrong key": f"access denied to {table['url']}", "no bucket": "which does not exist",
              "unreachable endpoint": "cannot reach s3 endpoint http://127.0.0.1:1 "}[case]
    if case == "wrong key":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    elif case == "unreachable endpoint":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1"
    else:
        store = "s3://no-such-bucket/runs/x.zarr"
    r = _cli("run", "--input", table["url"], "--store", store, "--n-clusters", "4", *VIEWS, "--quiet", env=env,
             timeout=120)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert env["AWS_SECRET_ACCESS_KEY"] not in r.stderr
    s3["fs"].invalidate_cache()
    assert not s3["fs"].exists(store)


@pytest.mark.slow
def test_python_api_refuses_a_wrong_key_with_nothing_created(s3, table):
    import mkdist
    from mkdist.errors import StorageAccessError

    store = f"s3://{BUCKET}/runs/refused-api.zarr"
    wrong = {**s3["options"], "secret": "not-the-secret"}
    with pytest.raises(StorageAccessError, match=f"access denied to {table['url']}.*check the key"):
        mkdist.cluster(table["url"], store, 4, views={"a": "a*", "b": "b*"}, id_column="customer_id",
                       storage_options=wrong)
    s3["fs"].invalidate_cache()
    assert not s3["fs"].exists(store)


def test_a_typo_in_an_s3_path_suggests_the_full_url(s3, table):
    import mkdist
    from mkdist.errors import InputValidationError

    typo = table["url"].replace("customers.parquet", "customers.parqet")
    with pytest.raises(InputValidationError, match=rf"not found: {typo} \(did you mean {table['url']}\?\)"):
        mkdist.cluster(typo, f"s3://{BUCKET}/runs/typo.zarr", 4, views={"a": "a*", "b": "b*"},
                       id_column="customer_id", storage_options=s3["options"])


@pytest.mark.slow
def test_config_file_storage_options_reach_the_probe(s3, table, tmp_path):
    """`[storage_options]` in --config is the command line's way to give options without the
    environment (no credentials on the command line, which the store's lease records)."""
    config = tmp_path / "run.toml"
    config.write_text(f'[storage_options]\nendpoint_url = "{s3["endpoint"]}"\nkey = "{s3["options"]["key"]}"\n'
                      'secret = "not-the-secret"\n')
    r = _cli("run", "--input", table["url"], "--store", f"s3://{BUCKET}/runs/cfg.zarr", "--n-clusters", "4",
             *VIEWS, "--config", str(config), "--quiet", timeout=120)
    assert r.returncode == 2 and "access denied" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- no server needed
def test_options_come_from_the_run_then_fsspec_config_then_the_environment(monkeypatch):
    import fsspec.config

    from mkdist.storage._remote import clear_options, options_for, public_options, register_options

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env:9000")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": "http://conf:9000"})
    # max_concurrency=1: one request per object read (see _environment); anyone may set it back.
    # The keys are not copied from the environment: each process's botocore reads its own.
    assert options_for("s3://b/x") == {"endpoint_url": "http://conf:9000", "max_concurrency": 1}
    assert options_for("s3://b/x", {"secret": "given"})["secret"] == "given"
    assert options_for("s3://b/x", {"max_concurrency": 8})["max_concurrency"] == 8
    assert options_for("runs/x.zarr", {"secret": "given"}) == {} and options_for("memory://x") == {}
    # Registered for a bucket: every location in it (the store, the report beside it) gets them.
    bucket = f"s3://reg-{uuid.uuid4().hex}"
    register_options({"key": "run-key", "secret": "run-secret"}, f"{bucket}/runs/a.zarr")
    assert options_for(f"{bucket}/runs/a.zarr.report.html")["secret"] == "run-secret"
    assert "secret" not in options_for("s3://another-bucket/x")
    register_options({"key": "run-key", "secret": "run-secret"}, f"{bucket}/runs/a.zarr")
    # Cleared by name, or all at once.
    clear_options(f"{bucket}/other.zarr")
    assert "secret" not in options_for(f"{bucket}/runs/a.zarr")
    register_options({"key": "run-key", "secret": "run-secret"}, f"{bucket}/runs/a.zarr")
    clear_options()
    assert "secret" not in options_for(f"{bucket}/runs/a.zarr")
    # Not outliving a change of the environment's credentials (a rotated key, another profile).
    register_options({"key": "run-key", "secret": "run-secret"}, f"{bucket}/runs/a.zarr")
    assert options_for(f"{bucket}/runs/a.zarr")["secret"] == "run-secret"
    monkeypatch.setenv("AWS_PROFILE", "another")
    assert "secret" not in options_for(f"{bucket}/runs/a.zarr")
    assert public_options({"key": "k", "secret": "s", "endpoint_url": "e"}) == {
        "key": "<redacted>", "secret": "<redacted>", "endpoint_url": "e"}


def test_local_locations_are_not_probed(tmp_path):
    from mkdist.storage._remote import probe_run

    probe_run(tmp_path / "in.parquet", tmp_path / "store.zarr", "memory://labels", {"key": "unused"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_paused_run_commits_nothing_after_a_takeover_on_s3(s3, tmp_path):
    """As tests/test_fencing.py on a local directory, with the store on s3: run A (credentials from
    its environment) stops itself at its embedding, run B takes the store over past A's TTL and
    finishes, A continued commits nothing (its lease is gone or another's), says so in one line
    and exits 1; B's stages stay its own and verify."""
    from mkdist.storage import RunStore
    from mkdist.storage._lease import LEASE_FILE, read_lease

    from .conftest import write_blobs_npz
    from .test_fencing import _check, _env, paused_run_then_takeover, stored

    npz, url = tmp_path / "in.npz", f"s3://{BUCKET}/runs/fenced-{uuid.uuid4().hex[:8]}.zarr"
    write_blobs_npz(npz, 100)
    args = ["run", "--input", str(npz), "--store", url, "--n-clusters", "3", "--n-landmarks", "60",
            "--random-state", "0"]

    def lease_stale() -> bool:
        s3["fs"].invalidate_cache()
        info = read_lease(s3["fs"], f"{url.removeprefix('s3://')}/{LEASE_FILE}")
        return info is not None and info.stale()

    def open_store():
        return RunStore.open(url, storage_options=s3["options"])

    got = paused_run_then_takeover(args, lease_stale, _env(s3["env"]),
                                   lambda: stored(open_store()))
    _check(got, stored(open_store()))


def test_a_stale_holders_heartbeat_and_commit_are_fenced_off_after_a_takeover_on_s3(s3):
    """The conditional puts, in one process: holder A pauses past its TTL, B replaces its lease
    (If-Match the ETag B read); A's next heartbeat and commit, already past any check, write
    nothing (If-Match the ETag of A's last write fails) -- B's lease and the pointer stay."""
    import time

    from mkdist.errors import LeaseLostError
    from mkdist.storage import RunStore
    from mkdist.storage._lease import LEASE_FILE, StoreLease

    url = f"s3://{BUCKET}/runs/fence-{uuid.uuid4().hex[:8]}.zarr"
    store = RunStore.create(url, fingerprint="sha256:0", params={"k": 1}, storage_options=s3["options"])
    fs, root = store._fs, store._path
    a = StoreLease(fs, root, url, local=False, owner="run A", ttl=0.5, heartbeat=0.4).acquire()
    pointer = f"{root}/labels.gen-current.json"
    a.fenced_put(pointer, b'{"by": "A"}', create=True)
    a._stop.set()
    a._thread.join()  # paused: no more heartbeats
    time.sleep(0.6)
    b = StoreLease(fs, root, url, local=False, owner="run B", ttl=60).acquire()
    try:
        assert (a.generation, b.generation) == (1, 2)
        b_lease = s3["fs"].cat_file(f"{root}/{LEASE_FILE}")
        with pytest.raises(LeaseLostError, match=r"generation 1\) was taken over .*run B.*generation 2"):
            a.fenced_put(pointer, b'{"by": "A, stale"}')
        with pytest.raises(LeaseLostError):
            a._write()
        s3["fs"].invalidate_cache()
        assert s3["fs"].cat_file(pointer) == b'{"by": "A"}'
        assert s3["fs"].cat_file(f"{root}/{LEASE_FILE}") == b_lease
        b.fenced_put(pointer, b'{"by": "B"}')
        assert s3["fs"].cat_file(pointer) == b'{"by": "B"}'
    finally:
        b.release()
        a.release()


_CUT_OFF_AT_EMBEDDING = """
    import os, sys, time

    import mkdist._run._driver as driver
    from mkdist import cli

    real, here, go = driver.run_stage, sys.argv[1], sys.argv[2]

    def run_stage(name, *args, **kwargs):
        if name == "embedding":  # the test cuts the network now, and says when it is back
            open(here, "w").close()
            while not os.path.exists(go):
                time.sleep(0.05)
        return real(name, *args, **kwargs)

    driver.run_stage = run_stage
    sys.argv = ["mkdist", *sys.argv[3:]]
    cli.console_main()
"""


@pytest.mark.slow
def test_a_run_cut_off_from_s3_commits_nothing_after_a_takeover(s3, tmp_path):
    """Run A reaches s3 through a proxy, which is closed as A's embedding starts (A's heartbeats
    fail meanwhile, it is not paused) and reopened once run B, reaching s3 directly, has taken the
    store over past A's TTL and finished: A commits nothing, says so in one line, exits 1; B's
    stages stay its own."""

    from mkdist.storage import RunStore
    from mkdist.storage._lease import LEASE_FILE, read_lease

    from .conftest import TcpProxy, write_blobs_npz
    from .test_fencing import ROOT, _env, _wait, stored

    npz, url = tmp_path / "in.npz", f"s3://{BUCKET}/runs/cut-{uuid.uuid4().hex[:8]}.zarr"
    write_blobs_npz(npz, 100)
    args = ["run", "--input", str(npz), "--store", url, "--n-clusters", "3", "--n-landmarks", "60",
            "--random-state", "0"]
    proxy = TcpProxy(int(s3["endpoint"].rsplit(":", 1)[1]))
    here, go = tmp_path / "at-embedding", tmp_path / "go"
    a = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CUT_OFF_AT_EMBEDDING), str(here), str(go), *args],
                         cwd=ROOT, env=_env({**s3["env"], "AWS_ENDPOINT_URL": proxy.endpoint}),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: here.exists() or a.poll() is not None, "run A to reach its embedding")
        assert a.poll() is None, a.stderr.read()
        proxy.close()

        def lease_stale() -> bool:
            s3["fs"].invalidate_cache()
            info = read_lease(s3["fs"], f"{url.removeprefix('s3://')}/{LEASE_FILE}")
            return info is not None and info.stale()

        _wait(lease_stale, "run A's lease to go stale")
        b = subprocess.run([sys.executable, "-m", "mkdist.cli", *args, "--quiet"], cwd=ROOT, env=_env(s3["env"]),
                           capture_output=True, text=True, timeout=300)
        assert b.returncode == 0, b.stderr
        before = stored(RunStore.open(url, storage_options=s3["options"]))
        proxy.open()
        go.touch()
        _, a_err = a.communicate(timeout=300)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
        proxy.close()
    assert a.returncode == 1, a_err
    said = [line for line in a_err.splitlines() if line.startswith("mkdist:")]
    assert len(said) == 1 and said[0].startswith("mkdist: stopped: ") and "committed nothing" in said[0], a_err
    assert "Traceback" not in a_err
    after = stored(RunStore.open(url, storage_options=s3["options"]))
    assert after["tokens"] == before["tokens"] and after["finished"] == before["finished"] is not None
    np.testing.assert_array_equal(after["labels"], before["labels"])
