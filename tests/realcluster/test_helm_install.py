"""The operator as users deploy it, on Kubernetes' own control plane: `helm install` of the chart,
then the operator process with the chart's ServiceAccount (a TokenRequest token, not the admin)
runs a job to Succeeded without one Forbidden answer; with one rule taken from the ClusterRole, the
Forbidden reaches the job's status.message and a Warning Event, and the operator keeps running.

The chart's Deployment is installed with replicas 0: its image cannot run here (no registry), so
the same command runs as a local process with the Deployment's own environment."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from pets_api import GROUP, PLURAL, VERSION
from pets_localkube import product
from pets_localkube.kubernetes_cluster import KubernetesCluster

pytestmark = pytest.mark.realcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "pets-operator"
STAND_IN = REPO_ROOT / "tests" / "e2e" / "stand_in.py"
RELEASE, RELEASE_NAMESPACE = "pets", "pets-system"


def wait_for(condition, timeout: float, what: str, describe=lambda: ""):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{describe()}")
        time.sleep(0.5)
    return value


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def helm() -> str:
    try:
        from hack import k8s_tools
        return str(k8s_tools.ensure_tools().helm)
    except Exception as error:
        pytest.skip(f"no helm could be fetched: {error}")


@pytest.fixture(scope="module")
def cluster(control_plane_bin, tmp_path_factory):
    """No CRD applied by the fixture: the chart's crds/ installs them."""
    workdir = tmp_path_factory.mktemp("helm-cluster")
    with KubernetesCluster(workdir, cpu=4, memory="16Gi", bin_dir=control_plane_bin,
                           entrypoints=product.ENTRYPOINTS, workload=product.TRAINER) as running:
        yield running


@pytest.fixture(scope="module")
def installed(cluster, helm, kubectl) -> dict:
    """helm install; returns the Deployment's container."""
    done = subprocess.run([helm, "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
                           "--set", "replicas=0", "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    deployments = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "get", "deployments", "-n",
                                  RELEASE_NAMESPACE, "-o", "json"], capture_output=True, text=True, check=True)
    [deployment] = json.loads(deployments.stdout)["items"]
    return deployment


def service_account_kubeconfig(cluster, kubectl, deployment: dict, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the Deployment's ServiceAccount."""
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "create", "token", account, "-n",
                            RELEASE_NAMESPACE, "--duration=1h"], capture_output=True, text=True, check=True).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": account}}]}))
    path.chmod(0o600)
    return path


def deployment_env(deployment: dict, kubectl: str, kubeconfig: Path) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values, configMapKeyRefs (the policy's settings), fieldRefs."""
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", "") for e in container.get("env", []) if "value" in e}
    for item in container.get("env", []):
        ref = (item.get("valueFrom") or {}).get("configMapKeyRef")
        if ref is not None:
            data = json.loads(subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "configmap", ref["name"],
                                              "-n", RELEASE_NAMESPACE, "-o", "json"], capture_output=True, text=True,
                                             check=True).stdout)["data"]
            env[item["name"]] = data[ref["key"]]
    env["POD_ID"] = "local-operator"  # the Deployment's fieldRef: the pod name
    env["PETS_OPERATOR_LEASE_NAMESPACE"] = RELEASE_NAMESPACE  # its fieldRef: the pod's namespace
    return env


def forbidden_api_errors(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("pets_operator_api_errors_total{") and 'code="403"' in line)


class OperatorProcess:
    """`pets-operator run` with the Deployment's environment and the ServiceAccount's kubeconfig."""

    def __init__(self, kubeconfig: Path, log_path: Path, resolved_env: dict[str, str]):
        self.metrics_port = free_port()
        env = {**os.environ, **resolved_env, "KUBECONFIG": str(kubeconfig),
               "PETS_OPERATOR_LIVENESS_PORT": "0", "PETS_OPERATOR_METRICS_PORT": str(self.metrics_port),
               "PETS_OPERATOR_TRAINER_COMMAND": json.dumps([sys.executable, str(STAND_IN)])}
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def operator(cluster, kubectl, installed, tmp_path):
    kubeconfig = service_account_kubeconfig(cluster, kubectl, installed, tmp_path / "operator.kubeconfig")
    whoami = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, check=True)
    account = installed["spec"]["template"]["spec"]["serviceAccountName"]
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == \
        f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}"
    process = OperatorProcess(kubeconfig, tmp_path / "operator.log", deployment_env(installed, kubectl, cluster.kubeconfig))
    yield process
    process.stop()


@pytest.fixture
def objects(cluster):
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
        yield client.CustomObjectsApi(admin)


def create_job(objects, name: str) -> None:
    objects.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
        "spec": {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}},
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}})


def job_status(objects, name: str) -> dict:
    return objects.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name).get("status") or {}


def test_helm_installed_operator_with_its_service_account_runs_a_job_without_a_forbidden(operator, objects):
    create_job(objects, "deployed")
    final = wait_for(lambda: job_status(objects, "deployed").get("phase") in ("Succeeded", "Failed")
                     and job_status(objects, "deployed"), 180, "the job to finish",
                     lambda: f"{job_status(objects, 'deployed')}\n{operator.logs()[-6000:]}")
    assert final["phase"] == "Succeeded", f"{final.get('message')}\n{operator.logs()[-6000:]}"
    assert [e["epoch"] for e in final["epochs"]] == [0, 1, 2]  # pod 0's log followed: pods/log allowed
    assert operator.process.poll() is None, operator.logs()[-6000:]
    assert forbidden_api_errors(operator.metrics_port) == 0
    forbidden = [line for line in operator.logs().splitlines() if re.search(r"Forbidden|forbidden|\b403\b", line)]
    assert forbidden == [], "\n".join(forbidden)


def test_a_rule_removed_from_the_cluster_role_is_a_forbidden_in_the_status_and_an_event(
        cluster, kubectl, installed, operator, objects):
    roles = json.loads(subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "get", "clusterroles", "-l",
                                       f"app.kubernetes.io/instance={RELEASE}", "-o", "json"],
                                      capture_output=True, text=True, check=True).stdout)["items"]
    [role] = roles
    index = next(i for i, rule in enumerate(role["rules"]) if rule.get("resources") == ["services"])
    removed = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "patch", "clusterrole",
                              role["metadata"]["name"], "--type", "json",
                              "-p", json.dumps([{"op": "remove", "path": f"/rules/{index}"}])],
                             capture_output=True, text=True)
    assert removed.returncode == 0, removed.stderr
    create_job(objects, "refused")
    final = wait_for(lambda: job_status(objects, "refused").get("phase") == "Failed" and job_status(objects, "refused"),
                     60, "the job to fail", lambda: f"{job_status(objects, 'refused')}\n{operator.logs()[-6000:]}")
    assert "forbidden" in final["message"].lower() and "services" in final["message"], final["message"]
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
        events = wait_for(lambda: [e for e in client.CoreV1Api(admin).list_namespaced_event("default").items
                                   if e.involved_object.name == "refused" and e.type == "Warning"], 30,
                          "the Warning event")
    assert any("forbidden" in (e.message or "").lower() for e in events), [(e.reason, e.message) for e in events]
    assert forbidden_api_errors(operator.metrics_port) >= 1
    time.sleep(2)
    assert operator.process.poll() is None, operator.logs()[-6000:]  # still serving: no crash loop
