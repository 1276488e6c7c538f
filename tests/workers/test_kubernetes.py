"""deploy/kubernetes/: every manifest is valid against the Kubernetes API schemas and the
manifests agree with one another, with the deployment config they carry and with the image.

Offline: the schemas are those kubernetes-validate ships (no cluster, no network). What a
schema cannot see is checked here by hand: probes on the port given as --health-port, every
Secret, ConfigMap, key and claim a pod names exists, every file the deployment config names is
mounted where the workers and the gateway read it, endpoints point at Services that point at
pods listening there, and the pods run as the image's user.
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from bigfleet.deployment import Deployment
from bigfleet.models import from_wire
from bigfleet.simulation.scenario import load as load_fleet

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
IMAGE_USER = 10001
# The oldest Kubernetes the manifests are meant for, and the newest the schemas know.
OLDEST = "1.27"


def manifest_files() -> list[Path]:
    return sorted(p for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")


def load_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


@functools.cache
def parsed() -> list[tuple[str, dict[str, Any]]]:
    """The manifests, parsed once (the YAML parser is most of this file's time otherwise)."""
    return [(p.name, d) for p in manifest_files() for d in load_docs(p.read_text())]


def objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object of every manifest, a fresh copy (a test may change what it reads)."""
    return copy.deepcopy(parsed())


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in objects() if d["kind"] == kind}


def pods() -> dict[str, dict[str, Any]]:
    """Every pod template, by its workload's name."""
    return {
        d["metadata"]["name"]: d["spec"]["template"]
        for _, d in objects()
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    }


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def arg(container: dict[str, Any], flag: str) -> str | None:
    args = container.get("args", [])
    return args[args.index(flag) + 1] if flag in args else None


def container_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port (a number or a port name) as the container's number."""
    for p in container.get("ports", []):
        if port in (p["containerPort"], p.get("name")):
            return int(p["containerPort"])
    raise AssertionError(f"{container['name']}: no container port {port!r}")


def config_map_file(name: str, key: str) -> str:
    return str(by_kind("ConfigMap")[name]["data"][key])


def deployment_config() -> Deployment:
    text = config_map_file("bigfleet-config", "deployment.yaml")
    return from_wire(Deployment, yaml.safe_load(text))


# ---- the files and the schemas ----------------------------------------------------------------


def test_the_kustomization_lists_every_manifest():
    k = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == [p.name for p in manifest_files()]
    assert k["namespace"] == "bigfleet"
    for _, d in objects():
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == "bigfleet", d["metadata"]["name"]
    names = [(d["kind"], d["metadata"]["name"]) for _, d in objects()]
    assert len(names) == len(set(names)), names


def kubernetes_validate() -> Any:
    return pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")


def versions() -> list[str]:
    kv = pytest.importorskip("kubernetes_validate")
    return [OLDEST, kv.latest_version()]


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    """Strict: an unknown field (a typo) fails too, as the API server's strict field validation
    would refuse it."""
    kv = kubernetes_validate()
    failed = []
    for version in versions():
        for file, d in objects():
            try:
                kv.validate(d, version, strict=True)
            except kv.ValidationError as err:
                where = ".".join(str(p) for p in err.path)
                failed.append(
                    f"{version} {file} {d['kind']}/{d['metadata']['name']}: {where}: {err.message}"
                )
    assert not failed, "\n".join(failed)


def test_the_schema_check_catches_a_typo_and_a_wrong_type():
    kv = kubernetes_validate()
    gateway = by_kind("Deployment")["gateway"]
    typo = yaml.safe_load(yaml.safe_dump(gateway))
    typo["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["prot"] = 8080
    wrong = yaml.safe_load(yaml.safe_dump(gateway))
    wrong["spec"]["replicas"] = "two"
    for bad in (typo, wrong):
        with pytest.raises(kv.ValidationError):
            kv.validate(bad, OLDEST, strict=True)


def test_kustomize_builds_the_same_objects_with_the_image_set():
    """`kubectl kustomize` (what `kubectl apply -k` applies), where kubectl is installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on this machine")
    done = subprocess.run(
        [kubectl, "kustomize", str(KUBE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    built = load_docs(done.stdout)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == sorted(
        (d["kind"], d["metadata"]["name"]) for _, d in objects()
    )
    k = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    (image,) = k["images"]
    for d in built:
        if "template" in d.get("spec", {}):
            for c in containers(d["spec"]["template"]):
                assert c["image"] == f"{image['newName']}:{image['newTag']}"
    kv = kubernetes_validate()
    for d in built:
        kv.validate(d, OLDEST, strict=True)


# ---- probes, ports, metrics -------------------------------------------------------------------


def test_every_container_is_probed_on_its_health_port():
    for name, pod in pods().items():
        for c in containers(pod):
            health = arg(c, "--health-port")
            assert health is not None and health != "0", f"{name}: no --health-port"
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                get = c[probe]["httpGet"]
                assert get["path"] == path, (name, probe)
                assert container_port(c, get["port"]) == int(health), (name, probe)


def test_metrics_ports_are_exposed_and_annotated():
    """Every metric of a process on --metrics-port N, annotated (the prometheus.io convention
    names one port a pod): no second metrics port left unscraped (issue 48)."""
    annotated = 0
    for name, pod in pods().items():
        for c in containers(pod):
            metrics = arg(c, "--metrics-port")
            if metrics is None:
                continue
            assert container_port(c, int(metrics)), name
            others = [p for p in c["ports"] if "metrics" in p["name"]]
            assert [p["containerPort"] for p in others] == [int(metrics)], name
            notes = pod["metadata"]["annotations"]
            assert notes["prometheus.io/scrape"] == "true", name
            assert notes["prometheus.io/port"] == metrics, name
            annotated += 1
    assert annotated == 4  # three worker roles and the gateway


def test_every_command_line_is_one_bigfleet_accepts(capsys):
    from workers.cli import parser

    for name, pod in pods().items():
        for c in containers(pod):
            try:
                parsed = parser().parse_args(c["args"])
            except SystemExit:
                pytest.fail(f"{name}: bigfleet {' '.join(c['args'])}: {capsys.readouterr().err}")
            assert parsed.verb == c["args"][0], name


def test_every_service_selects_pods_that_listen_on_its_target_port():
    templates = pods()
    for name, svc in by_kind("Service").items():
        selector = svc["spec"]["selector"]
        chosen = [
            pod
            for pod in templates.values()
            if selector.items() <= pod["metadata"]["labels"].items()
        ]
        assert chosen, f"Service {name} selects no pod"
        for pod in chosen:
            for port in svc["spec"]["ports"]:
                assert any(
                    port["targetPort"] in (p.get("name"), p["containerPort"])
                    for c in pod["spec"]["containers"]
                    for p in c.get("ports", [])
                ), (name, port)
    for name, sts in by_kind("StatefulSet").items():
        assert by_kind("Service")[sts["spec"]["serviceName"]]["spec"]["clusterIP"] == "None", name


def service_port(endpoint: str) -> tuple[dict[str, Any], int]:
    """The Service an in-cluster `name:port` reaches, and the container port behind it."""
    host, port = endpoint.rsplit(":", 1)
    svc = by_kind("Service").get(host)
    assert svc is not None, f"{endpoint}: no Service {host}"
    (sp,) = [p for p in svc["spec"]["ports"] if p["port"] == int(port)]
    pod = next(
        pod
        for pod in pods().values()
        if svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    )
    return pod, container_port(pod["spec"]["containers"][0], sp["targetPort"])


def test_the_endpoints_of_the_deployment_config_reach_servers_listening_there():
    config = deployment_config()
    dialled = [p.endpoint for p in config.providers]
    dialled += [o.endpoint for o in config.operators.clusters]
    for endpoint in dialled:
        pod, port = service_port(endpoint)
        (c,) = pod["spec"]["containers"]
        assert arg(c, "--listen") == f"0.0.0.0:{port}", endpoint
    # The reference operator sends roll-ups to the gateway, which listens where its config says.
    operator = by_kind("Deployment")["operator"]["spec"]["template"]["spec"]["containers"][0]
    pod, port = service_port(arg(operator, "--gateway") or "")
    assert config.gateway.listen == f"0.0.0.0:{port}"
    assert pod["spec"]["containers"][0]["args"][0] == "gateway"


# ---- what the pods read -----------------------------------------------------------------------


def test_every_secret_config_map_key_and_claim_a_pod_names_exists():
    """Optional references (a Secret the user may add) are documented in deploy/README.md."""
    secrets, maps = by_kind("Secret"), by_kind("ConfigMap")
    claims = by_kind("PersistentVolumeClaim")
    readme = (ROOT / "deploy" / "README.md").read_text()

    def keys(kind: str, name: str) -> set[str]:
        d = (secrets if kind == "secret" else maps)[name]
        return {*d.get("data", {}), *d.get("stringData", {})}

    def check(kind: str, name: str, key: str | None, optional: bool, where: str) -> None:
        if optional:
            assert name in readme, f"{where}: optional {kind} {name} is not in deploy/README.md"
            return
        assert name in (secrets if kind == "secret" else maps), f"{where}: no {kind} {name}"
        if key is not None:
            assert key in keys(kind, name), f"{where}: {kind} {name} has no key {key}"

    for pod_name, pod in pods().items():
        spec = pod["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "secret" in v:
                s = v["secret"]
                check("secret", s["secretName"], None, s.get("optional", False), pod_name)
            if "configMap" in v:
                m = v["configMap"]
                check("configmap", m["name"], None, m.get("optional", False), pod_name)
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims, pod_name
        # A StatefulSet's own claims are volumes of its pods too.
        volumes |= {t["metadata"]["name"]: {} for t in pod_volume_claims(pod_name)}
        for c in containers(pod):
            for src in c.get("envFrom", []):
                for kind, field in (("configmap", "configMapRef"), ("secret", "secretRef")):
                    if field in src:
                        ref = src[field]
                        check(kind, ref["name"], None, ref.get("optional", False), pod_name)
            for env in c.get("env", []):
                for kind, field in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
                    ref = env.get("valueFrom", {}).get(field)
                    if ref:
                        check(kind, ref["name"], ref["key"], ref.get("optional", False), pod_name)
            mounted = set()
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, f"{pod_name}: mounts unknown volume {m['name']}"
                mounted.add(m["name"])
                v = volumes[m["name"]]
                if "subPath" in m and "configMap" in v:
                    check("configmap", v["configMap"]["name"], m["subPath"], False, pod_name)
                if "subPath" in m and "secret" in v:
                    check("secret", v["secret"]["secretName"], m["subPath"], False, pod_name)
        unused = set(volumes) - {m["name"] for c in containers(pod) for m in c["volumeMounts"]}
        assert not unused, f"{pod_name}: volumes never mounted: {unused}"


def pod_volume_claims(workload: str) -> list[dict[str, Any]]:
    sts = by_kind("StatefulSet").get(workload)
    return sts["spec"].get("volumeClaimTemplates", []) if sts else []


def mounted_file(pod: dict[str, Any], c: dict[str, Any], path: str) -> bool:
    """Whether `path` is a file of a Secret or ConfigMap mounted in `c` (key = file name)."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    target = PurePosixPath(path)
    for m in c["volumeMounts"]:
        v = volumes.get(m["name"], {})  # (a StatefulSet's claims are not in `volumes`)
        source = v.get("secret", {}).get("secretName") or v.get("configMap", {}).get("name")
        if source is None:
            continue
        kind = "Secret" if "secret" in v else "ConfigMap"
        d = by_kind(kind)[source]
        keys = {*d.get("data", {}), *d.get("stringData", {})}
        mount = PurePosixPath(m["mountPath"])
        if "subPath" in m:
            if mount == target and m["subPath"] in keys:
                return True
        elif target.parent == mount and target.name in keys:
            return True
    return False


def config_files(config: Deployment) -> list[str]:
    """Every file the deployment config names (what bigfleet.deployment.load checks)."""
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("ca", "cert", "key", "client_ca", "file") and isinstance(v, str):
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(config.model_dump(mode="json"))
    return found


def test_the_deployment_config_parses_and_every_file_it_names_is_mounted_where_it_is_read():
    config = deployment_config()
    files = config_files(config)
    assert files and all(f.startswith("/") for f in files), files
    readers = 0
    for name, pod in pods().items():
        for c in containers(pod):
            path = arg(c, "--config")
            if path is None:
                continue
            readers += 1
            assert mounted_file(pod, c, path), f"{name}: {path} is not mounted"
            missing = [f for f in files if not mounted_file(pod, c, f)]
            assert not missing, f"{name}: not mounted: {missing}"
    assert readers == 4  # three worker roles and the gateway


def test_the_reference_servers_serve_the_dev_fleet():
    fleet_text = config_map_file("bigfleet-config", "fleet.yaml")
    dev_fleet = ROOT / "examples" / "dev-fleet.yaml"
    assert yaml.safe_load(fleet_text) == yaml.safe_load(dev_fleet.read_text())
    fleet = load_fleet(str(dev_fleet))
    config = deployment_config()
    assert (config.name, config.shards, config.cycle_seconds) == (
        fleet.name,
        fleet.shards,
        fleet.cycle_seconds,
    )
    served = {}
    for name, pod in pods().items():
        (c,) = pod["spec"]["containers"]
        if c["args"][:2] == ["provider", "serve"]:
            assert mounted_file(pod, c, arg(c, "--fleet") or ""), name
            for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
                assert mounted_file(pod, c, arg(c, flag) or ""), (name, flag)
            served[arg(c, "--provider")] = name
        if c["args"][:2] == ["operator", "serve"]:
            assert mounted_file(pod, c, arg(c, "--fleet") or ""), name
            clusters = (arg(c, "--cluster") or "").split(",")
            assert clusters == [cl.name for cl in fleet.clusters]
            assert [o.cluster for o in config.operators.clusters] == clusters
            tls_dir = arg(c, "--tls-dir") or ""
            for f in ("ca.pem", "server.pem", "server-key.pem"):
                assert mounted_file(pod, c, f"{tls_dir}/{f}"), (name, f)
            for cl in clusters:  # each cluster's client certificate (devca's layout)
                for f in (f"{cl}.pem", f"{cl}-key.pem"):
                    assert mounted_file(pod, c, f"{tls_dir}/{f}"), (name, f)
    assert sorted(served) == sorted(p.name for p in fleet.providers)
    assert sorted(served) == sorted(p.name for p in config.providers)
    for p in config.providers:
        assert p.endpoint.split(":")[0] == served[p.name]
    tokens = {t.cluster for t in config.gateway.tokens}
    assert tokens <= {cl.name for cl in fleet.clusters}


def test_workers_by_role_and_the_snapshot_volume():
    roles = {}
    for name, pod in pods().items():
        (c,) = pod["spec"]["containers"]
        if c["args"][0] == "worker":
            roles[arg(c, "--role")] = (name, pod, c)
            assert arg(c, "--fleet") is None, name
            assert {"configMapRef": {"name": "bigfleet-temporal"}} in c["envFrom"], name
    assert sorted(roles) == ["providers", "shards", "transitions"]
    name, pod, c = roles["shards"]
    snapshots = arg(c, "--snapshot-dir")
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == snapshots]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    claim = by_kind("PersistentVolumeClaim")[volume["persistentVolumeClaim"]["claimName"]]
    deployment = by_kind("Deployment")[name]
    if "ReadWriteMany" not in claim["spec"]["accessModes"]:
        # One writer on a ReadWriteOnce volume, and never two at once during a rollout.
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"]["type"] == "Recreate"
    for role in ("transitions", "providers"):
        assert arg(roles[role][2], "--snapshot-dir") is None


def test_the_temporal_connection_is_read_from_the_environment():
    temporal = by_kind("ConfigMap")["bigfleet-temporal"]["data"]
    assert set(temporal) == {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"}
    assert re.fullmatch(r"[\w.-]+:\d+", temporal["TEMPORAL_ADDRESS"])
    assert not by_kind("StatefulSet").keys() & {"temporal", "postgresql"}  # the user's Temporal


# ---- security and resources -------------------------------------------------------------------


def dockerfile_user() -> int:
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"Dockerfile USER {uid}: runAsNonRoot can only check a numeric user"
    return int(uid)


def test_pods_run_as_the_images_user_without_privileges():
    assert dockerfile_user() == IMAGE_USER
    for name, pod in pods().items():
        spec = pod["spec"]
        sc = spec["securityContext"]
        assert sc["runAsNonRoot"] is True, name
        assert sc["runAsUser"] == IMAGE_USER and sc["fsGroup"] == IMAGE_USER, name
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec["automountServiceAccountToken"] is False, name
        for c in containers(pod):
            csc = c["securityContext"]
            assert csc["readOnlyRootFilesystem"] is True, name
            assert csc["allowPrivilegeEscalation"] is False, name
            assert csc["capabilities"]["drop"] == ["ALL"], name
            writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert "/tmp" in writable, f"{name}: no writable /tmp on a read-only root"


def test_every_container_has_requests_and_limits():
    for name, pod in pods().items():
        for c in containers(pod):
            for bound in ("requests", "limits"):
                assert set(c["resources"][bound]) >= {"cpu", "memory"}, (name, bound)


def test_the_image_makes_the_directories_volumes_are_mounted_on_its_users():
    """The state directories exist in the image and belong to its user (docker-compose copies
    that owner into a new named volume; Kubernetes sets it with fsGroup)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    for pod in pods().values():
        for c in containers(pod):
            for flag in ("--snapshot-dir", "--state-dir"):
                path = arg(c, flag)
                if path is not None:
                    assert re.search(rf"mkdir -p [^\n]*{re.escape(path)}\b", dockerfile), path
                    assert re.search(
                        rf"chown -R {IMAGE_USER}:{IMAGE_USER} [^\n]*/var/lib/bigfleet", dockerfile
                    ), path
