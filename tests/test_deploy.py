"""deploy/: every file parses, and the pieces that must agree across files do.

No container engine or cluster is needed: the checks read the files, load the flows with
Prefect's own entrypoint loader and validate against Prefect's, Dask's and mkdist's own
rules (deployment model, cron schedule, job template placeholders, Dask config keys,
RunConfig fields).  The checks are plain functions so that the negative tests below can
show each one rejects a broken input.
"""

from __future__ import annotations

import inspect
import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
FLOWS = {"cluster-on-demand": ("mkdist.flows.cluster.cluster_flow", "mkdist-cluster"),
         "assign-nightly": ("mkdist.flows.assign.assign_flow", "mkdist-assign")}


def _yaml_files() -> list[Path]:
    return sorted([*DEPLOY.glob("*.yaml"), *DEPLOY.glob("*.yml"), *K8S.glob("*.yaml")])


def _load(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return _load(DEPLOY / "prefect.yaml")


@pytest.fixture(scope="module")
def deployments(prefect_yaml) -> dict[str, dict]:
    return {d["name"]: d for d in prefect_yaml["deployments"]}


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load(DEPLOY / "docker-compose.yml")


@pytest.fixture(scope="module")
def k8s_objects() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in deploy/k8s, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def flows() -> dict:
    """The flows loaded the way `prefect deploy` and the worker load them."""
    from prefect.flows import load_flow_from_entrypoint

    return {name: load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)
            for name, (entrypoint, _) in FLOWS.items()}


# ----------------------------------------------------------------------------- checks
def check_parameters_bind(fn, parameters: dict) -> None:
    """The deployment's parameters are accepted by the flow function's signature."""
    sig = inspect.signature(fn)
    unknown = set(parameters) - set(sig.parameters)
    assert not unknown, f"parameters {sorted(unknown)} are not arguments of {fn.__name__}{sig}"
    sig.bind(**parameters)  # TypeError if a required argument is missing


def check_cron(schedule: dict):
    from prefect.client.schemas.schedules import CronSchedule

    return CronSchedule(**{k: schedule[k] for k in ("cron", "timezone") if k in schedule})


def check_no_unknown_keys(deployment: dict) -> None:
    # Prefect's model ignores unknown keys (extra="ignore"): a misspelt key would vanish.
    from prefect.cli.deploy._models import DeploymentConfig

    unknown = set(deployment) - set(DeploymentConfig.model_fields)
    assert not unknown, f"deployment {deployment.get('name')!r}: keys {sorted(unknown)} unknown to Prefect"


def check_template_placeholders(template: dict) -> None:
    """Every {{ placeholder }} of a work pool job template is a declared variable."""
    from prefect.utilities.templating import find_placeholders

    declared = set(template["variables"]["properties"])
    used = {p.name for p in find_placeholders(template["job_configuration"])}
    assert used <= declared, f"undeclared template variables {sorted(used - declared)}"


def check_dask_config_keys(config: dict, prefix: str = "") -> None:
    """Every leaf key is a Dask setting (dask's defaults name all of them)."""
    import dask
    import distributed  # noqa: F401 - registers the distributed.* defaults

    for key, value in config.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            check_dask_config_keys(value, full)
        else:
            sentinel = object()
            assert dask.config.get(full, default=sentinel) is not sentinel, f"{full} is not a Dask setting"


def _mounts(service: dict) -> dict[str, str]:
    """Named-volume mounts of a compose service: {volume: target}."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target = v.split(":")[:2]
        else:
            source, target = v.get("source"), v["target"]
        out[source] = target
    return out


def _command(service: dict) -> list[str]:
    cmd = service.get("command", [])
    return cmd.split() if isinstance(cmd, str) else list(cmd)


def _arg(cmd: list[str], flag: str) -> str:
    assert flag in cmd, f"{flag} missing from {cmd}"
    return cmd[cmd.index(flag) + 1]


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)


def test_expected_files_exist():
    for name in ["prefect.yaml", "Dockerfile", "docker-compose.yml", "dask-tls.yaml", "README.md",
                 "k8s/kustomization.yaml", "k8s/base-job-template.json"]:
        assert (DEPLOY / name).is_file(), name
    json.loads((K8S / "base-job-template.json").read_text())


# ----------------------------------------------------------------------------- prefect.yaml
def test_prefect_yaml_is_valid_for_prefect(prefect_yaml):
    from prefect.cli.deploy._models import PrefectYamlModel

    model = PrefectYamlModel.model_validate(prefect_yaml)
    assert {d.name for d in model.deployments} == set(FLOWS)
    for d in prefect_yaml["deployments"]:
        check_no_unknown_keys(d)


def test_entrypoints_load_the_two_flows(deployments, flows):
    import mkdist.flows

    for name, (entrypoint, flow_name) in FLOWS.items():
        assert deployments[name]["entrypoint"] == entrypoint
        assert flows[name].name == flow_name
    # The same objects the package exports (module path, not a second copy of the file).
    assert flows["cluster-on-demand"] is mkdist.flows.cluster_flow
    assert flows["assign-nightly"] is mkdist.flows.assign_flow


def test_entrypoint_modules_are_the_repository_flows():
    # The module path resolves to flows/<file>.py of this repository (pyproject package-dir).
    import mkdist.flows.assign
    import mkdist.flows.cluster

    assert Path(mkdist.flows.cluster.__file__).resolve() == ROOT / "flows" / "cluster.py"
    assert Path(mkdist.flows.assign.__file__).resolve() == ROOT / "flows" / "assign.py"


def test_parameters_are_accepted_by_the_flows(deployments, flows):
    for name in FLOWS:
        params = deployments[name]["parameters"]
        check_parameters_bind(flows[name].fn, params)
        for schedule in deployments[name].get("schedules") or []:
            check_parameters_bind(flows[name].fn, {**params, **schedule.get("parameters", {})})
    # The cluster deployment hands the flow one run plan (a request: planned when it runs).
    assert set(deployments["cluster-on-demand"]["parameters"]) == {"plan", "dask_address"}
    assert {"source", "store", "config"} <= set(deployments["cluster-on-demand"]["parameters"]["plan"])
    assert {"model_store", "source", "output"} <= set(deployments["assign-nightly"]["parameters"])


def test_cluster_parameters_make_a_valid_run_config(deployments):
    import dask.array as da

    from mkdist._core._kernel_specs import STANDARD_KERNEL_SETS
    from mkdist.pipeline import InputSource, RunConfig

    plan = deployments["cluster-on-demand"]["parameters"]["plan"]
    config = RunConfig.from_json(plan["config"])
    config.check_params()
    # Metadata only: lazy views of the demo's shape, nothing is computed.
    config.validate({f"view{i}": da.zeros((200_000, 32), chunks=(25_000, 32)) for i in range(2)})
    if isinstance(config.params.get("kernels"), str):
        assert config.params["kernels"] in STANDARD_KERNEL_SETS
    assert InputSource.from_json(plan["source"]).label_column == "y"


def test_assign_runs_nightly_on_a_valid_cron(deployments):
    schedules = deployments["assign-nightly"]["schedules"]
    assert len(schedules) == 1
    schedule = check_cron(schedules[0])
    assert schedule.cron == "0 2 * * *"
    assert not deployments["cluster-on-demand"].get("schedules"), "cluster_flow is on demand"


def test_pull_step_and_work_pool_match_the_runtimes(prefect_yaml, deployments, compose, k8s_objects):
    # The one pull step enters MKDIST_DATA_ROOT; each runtime sets that variable for its flow
    # runs to the path where its shared volume is mounted, the same path as on its Dask workers.
    assert prefect_yaml["pull"] == [{"mkdist.flows.steps.enter_data_root": {}}]
    pools = {d["work_pool"]["name"] for d in deployments.values()}
    assert len(pools) == 1
    (pool,) = pools
    # compose: the process worker polls that pool; its data root is the shared volume
    services = compose["services"]
    worker = services["prefect-worker"]
    cmd = _command(worker)
    assert _arg(cmd, "--pool") == pool and _arg(cmd, "--type") == "process"
    root = worker["environment"]["MKDIST_DATA_ROOT"]
    (volume,) = [v for v, target in _mounts(worker).items() if target == root]
    assert volume in (compose.get("volumes") or {}), f"{root} is not a named volume"
    for name, service in services.items():
        if _command(service)[:2] == ["dask", "worker"]:
            assert _mounts(service).get(volume) == root, f"{name} does not mount {volume} at {root}"
    # kubernetes: the worker polls that pool; flow-run pods get the data root from the ConfigMap
    # and mount the PVC there, as the Dask workers do
    k8s_deployment = _one(k8s_objects, "Deployment", "prefect-worker")
    k8s_worker = k8s_deployment["spec"]["template"]["spec"]["containers"][0]
    assert _arg(k8s_worker["args"], "--pool") == pool and _arg(k8s_worker["args"], "--type") == "kubernetes"
    k8s_root = _one(k8s_objects, "ConfigMap", "mkdist-runtime")["data"]["MKDIST_DATA_ROOT"]
    template = json.loads((K8S / "base-job-template.json").read_text())
    pods = [template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"],
            _one(k8s_objects, "DaskCluster")["spec"]["worker"]["spec"]]
    claim = _one(k8s_objects, "PersistentVolumeClaim")["metadata"]["name"]
    for pod in pods:
        vols = {v["name"] for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim}
        assert k8s_root in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] in vols}


def test_deployment_paths_are_relative_to_the_data_root(deployments):
    # A host path in prefect.yaml would bypass MKDIST_DATA_ROOT (the first run of issue 23
    # failed on a hard-coded /data): paths are relative, or URLs.
    def strings(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from strings(v, f"{key}.{k}")
        elif isinstance(value, str):
            yield key, value

    for name, d in deployments.items():
        for key, value in strings(d["parameters"], "parameters"):
            assert not value.startswith(("/", "~")), f"{name}: {key}={value!r} is not under the data root"


def test_enter_data_root_step(tmp_path, monkeypatch):
    from prefect.deployments.steps.core import _get_function_for_step

    from mkdist.flows.steps import DataRootError

    # Prefect resolves the step's name as it does at run time.
    step = _get_function_for_step("mkdist.flows.steps.enter_data_root")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MKDIST_DATA_ROOT", raising=False)
    with pytest.raises(DataRootError, match="MKDIST_DATA_ROOT is not set .* Prefect worker") as info:
        step()
    assert "\n" not in str(info.value)
    monkeypatch.setenv("MKDIST_DATA_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(DataRootError, match="nowhere does not exist on host") as info:
        step()
    assert "\n" not in str(info.value)
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("MKDIST_DATA_ROOT", str(tmp_path / "data"))
    assert step() == {"directory": str(tmp_path / "data")}
    assert Path.cwd() == tmp_path / "data"


# ----------------------------------------------------------------------------- compose
def test_compose_services(compose):
    services = compose["services"]
    for name in ["prefect-server", "dask-scheduler", "prefect-worker"]:
        assert name in services, name
    workers = [n for n, s in services.items() if _command(s)[:2] == ["dask", "worker"]]
    assert len(workers) == 2, workers
    scheduler_cmd = _command(services["dask-scheduler"])
    assert scheduler_cmd[:2] == ["dask", "scheduler"]
    address = f"tcp://dask-scheduler:{_arg(scheduler_cmd, '--port')}"
    for w in workers:
        assert _command(services[w])[2] == address
    env = services["prefect-worker"]["environment"]
    assert env["MKDIST_DASK_ADDRESS"] == address
    assert env["PREFECT_API_URL"].startswith("http://prefect-server:")
    server_env = services["prefect-server"]["environment"]
    assert str(server_env["PREFECT_SERVER_ANALYTICS_ENABLED"]).lower() == "false"
    for name, service in services.items():
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        assert "healthcheck" in service, f"{name} has no healthcheck"


def test_compose_shared_volume_same_path(compose):
    services = compose["services"]
    workers = [n for n, s in services.items() if _command(s)[:2] == ["dask", "worker"]]
    mounts = [_mounts(services[n]) for n in [*workers, "prefect-worker"]]
    shared = set.intersection(*(set(m.items()) for m in mounts))
    named = set(compose.get("volumes") or {})
    assert any(volume in named for volume, _ in shared), f"no named volume at one path in all: {mounts}"


def test_compose_builds_from_the_repository(compose):
    for name, service in compose["services"].items():
        build = service["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context}"
        assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def test_dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r"pip install \.(\s|$)", text)
    (user,) = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user.split(":")[0] not in ("root", "0")
    # Everything COPY'd from the context exists, and every package directory of the project
    # is copied (a package added to pyproject but not to the image would break the image).
    sources = [s for line in re.findall(r"^COPY\s+(.+)$", text, re.M) for s in line.split()[:-1]
               if not s.startswith("--")]
    for s in sources:
        assert (ROOT / s).exists(), f"COPY source {s} missing from the repository"
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    copied = {s.rstrip("/") for s in sources}
    missing = set(package_dirs.values()) - copied
    assert not missing, f"package directories not copied into the image: {missing}"
    assert {"pyproject.toml", "README.md"} <= copied
    # The Kubernetes pods run as that user.
    assert f"runAsUser: {user.split(':')[0]}" in (K8S / "30-daskcluster.yaml").read_text()


# ----------------------------------------------------------------------------- kubernetes
def test_daskcluster_manifest(k8s_objects):
    dc = _one(k8s_objects, "DaskCluster")
    assert dc["apiVersion"] == "kubernetes.dask.org/v1"
    spec = dc["spec"]
    # Required by the operator's CRD schema: scheduler.spec, scheduler.service, worker.spec.
    assert spec["scheduler"]["spec"]["containers"] and spec["scheduler"]["service"]["ports"]
    assert spec["worker"]["spec"]["containers"] and isinstance(spec["worker"]["replicas"], int)
    assert {p["name"] for p in spec["scheduler"]["service"]["ports"]} >= {"tcp-comm", "http-dashboard"}
    assert spec["scheduler"]["service"].get("type", "ClusterIP") == "ClusterIP", "never expose 8786"
    sched, worker = spec["scheduler"]["spec"]["containers"][0], spec["worker"]["spec"]["containers"][0]
    assert sched["args"][:2] == ["dask", "scheduler"] and worker["args"][:2] == ["dask", "worker"]
    # Every $(VAR) in the worker args is defined (or injected by the operator).
    defined = {e["name"] for e in worker.get("env", [])} | {"DASK_WORKER_NAME", "DASK_SCHEDULER_ADDRESS"}
    referenced = set(re.findall(r"\$\((\w+)\)", " ".join(worker["args"])))
    assert referenced <= defined, f"undefined {referenced - defined}"


def test_k8s_dask_address_names_the_operator_service(k8s_objects):
    dc = _one(k8s_objects, "DaskCluster")
    ns = _one(k8s_objects, "Namespace")["metadata"]["name"]
    port = next(p["port"] for p in dc["spec"]["scheduler"]["service"]["ports"] if p["name"] == "tcp-comm")
    address = _one(k8s_objects, "ConfigMap", "mkdist-runtime")["data"]["MKDIST_DASK_ADDRESS"]
    assert address == f"tcp://{dc['metadata']['name']}-scheduler.{ns}.svc.cluster.local:{port}"
    for obj in k8s_objects:
        assert obj["metadata"].get("namespace", ns) == ns


def test_k8s_shared_storage(k8s_objects):
    pvc = _one(k8s_objects, "PersistentVolumeClaim")
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]
    claim = pvc["metadata"]["name"]
    template = json.loads((K8S / "base-job-template.json").read_text())
    flow_pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    worker_pod = _one(k8s_objects, "DaskCluster")["spec"]["worker"]["spec"]

    def data_mount(pod):
        vols = {v["name"] for v in pod["volumes"]
                if v.get("persistentVolumeClaim", {}).get("claimName") == claim}
        return {m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] in vols}

    assert data_mount(flow_pod) and data_mount(flow_pod) == data_mount(worker_pod)


def test_k8s_worker_and_job_template(k8s_objects):
    template = json.loads((K8S / "base-job-template.json").read_text())
    check_template_placeholders(template)
    container = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert {"configMapRef": {"name": "mkdist-runtime"}} in container["envFrom"]
    _one(k8s_objects, "ConfigMap", "mkdist-runtime")
    namespace = _one(k8s_objects, "Namespace")["metadata"]["name"]
    assert template["variables"]["properties"]["namespace"]["default"] == namespace
    # The worker's RBAC lets it create the flow-run Jobs.
    role = _one(k8s_objects, "Role", "prefect-worker")
    assert any("jobs" in r["resources"] and "create" in r["verbs"] for r in role["rules"])
    binding = _one(k8s_objects, "RoleBinding", "prefect-worker")
    pod = _one(k8s_objects, "Deployment", "prefect-worker")["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_kustomization_lists_every_manifest():
    kustomization = _load(K8S / "kustomization.yaml")
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    generated = [f for g in kustomization.get("configMapGenerator", []) for f in g["files"]]
    assert "base-job-template.json" in generated


# ----------------------------------------------------------------------------- Dask TLS
def test_dask_tls_config():
    import dask
    from distributed.security import Security

    config = _load(DEPLOY / "dask-tls.yaml")
    check_dask_config_keys(config)

    def leaves(d, prefix=""):
        for k, v in d.items():
            yield from leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [(prefix + k, v)]

    # Merged into the defaults, as Dask merges a YAML file it finds (a nested dict given to
    # dask.config.set would replace the whole `distributed` subtree instead).
    with dask.config.set(dict(leaves(config))):
        security = Security()  # what the flows' Client(address) builds when no security= is given
    assert security.require_encryption is True
    for attr in ["tls_ca_file", "tls_client_cert", "tls_client_key", "tls_scheduler_cert",
                 "tls_scheduler_key", "tls_worker_cert", "tls_worker_key"]:
        assert getattr(security, attr), attr


def test_dask_tls_paths_match_the_k8s_mounts(k8s_objects):
    tls = _load(DEPLOY / "dask-tls.yaml")["distributed"]["comm"]["tls"]
    roles = ("scheduler", "worker", "client")
    paths = [tls["ca-file"]] + [tls[role][k] for role in roles for k in ("cert", "key")]
    template = json.loads((K8S / "base-job-template.json").read_text())
    dc = _one(k8s_objects, "DaskCluster")["spec"]
    pods = [dc["scheduler"]["spec"], dc["worker"]["spec"],
            template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]]
    for pod in pods:
        secret_vols = {v["name"] for v in pod["volumes"]
                       if v.get("secret", {}).get("secretName") == "mkdist-dask-tls"}
        config_vols = {v["name"] for v in pod["volumes"]
                       if v.get("configMap", {}).get("name") == "mkdist-dask-config"}
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        (secret_dir,) = {mounts[v] for v in secret_vols}
        assert all(p.startswith(secret_dir.rstrip("/") + "/") for p in paths), (secret_dir, paths)
        # /etc/dask is a directory Dask reads YAML config from without any variable.
        assert {mounts[v] for v in config_vols} == {"/etc/dask"}


# ----------------------------------------------------------------------------- the checks can fail
def test_checks_reject_broken_inputs(flows, deployments):
    fn = flows["cluster-on-demand"].fn
    params = dict(deployments["cluster-on-demand"]["parameters"])
    with pytest.raises(AssertionError, match="n_cluster"):
        check_parameters_bind(fn, {**params, "n_cluster": 3})
    with pytest.raises(TypeError):
        check_parameters_bind(fn, {k: v for k, v in params.items() if k != "plan"})
    with pytest.raises(ValueError):
        check_cron({"cron": "0 25 * * *"})
    with pytest.raises(AssertionError, match="schedule"):
        check_no_unknown_keys({"name": "x", "schedule_": []})
    with pytest.raises(AssertionError, match="undeclared"):
        check_template_placeholders({"variables": {"properties": {}},
                                     "job_configuration": {"image": "{{ image }}"}})
    with pytest.raises(AssertionError, match="require-encrypton"):
        check_dask_config_keys({"distributed": {"comm": {"require-encrypton": True}}})
