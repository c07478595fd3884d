"""The chart installed by helm on Kubernetes' own control plane, and `pets-operator run` as a local process with
the chart's ServiceAccount (a TokenRequest token, not the admin) and the Deployment's container env: shared by
test_helm_install.py (the cluster-wide install) and test_helm_namespaced.py (the namespaced one).

The chart's Deployment is installed with replicas 0: its image cannot run here (no registry), so the same
command runs as a local process with the Deployment's own environment."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from pets_api import GROUP, PLURAL, VERSION
from pets_localkube import product
from pets_localkube.kubernetes_cluster import KubernetesCluster

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


def helm_path() -> str:
    """The pinned helm (hack/k8s_tools.py); the test skips when it cannot be fetched."""
    try:
        from hack import k8s_tools
        return str(k8s_tools.ensure_tools().helm)
    except Exception as error:
        pytest.skip(f"no helm could be fetched: {error}")


def local_cluster(control_plane_bin: Path, workdir: Path) -> KubernetesCluster:
    """The control plane and a local node that runs the trainer stand-in; no CRD applied: the chart's crds/
    installs them."""
    return KubernetesCluster(workdir, cpu=4, memory="16Gi", bin_dir=control_plane_bin,
                             entrypoints=product.ENTRYPOINTS, workload=product.TRAINER)


def kubectl_json(kubectl: str, kubeconfig: Path, *args: str) -> dict:
    done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), *args, "-o", "json"], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def helm_install(helm: str, kubectl: str, kubeconfig: Path, *sets: str) -> dict:
    """helm install of the chart (replicas 0, these values) as RELEASE in RELEASE_NAMESPACE; returns the
    Deployment."""
    args = [arg for item in ("replicas=0", *sets) for arg in ("--set", item)]
    done = subprocess.run([helm, "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
                           *args, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    [deployment] = kubectl_json(kubectl, kubeconfig, "get", "deployments", "-n", RELEASE_NAMESPACE)["items"]
    return deployment


def service_account_name(deployment: dict) -> str:
    return deployment["spec"]["template"]["spec"]["serviceAccountName"]


def service_account_kubeconfig(cluster, kubectl, deployment: dict, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the Deployment's ServiceAccount."""
    account = service_account_name(deployment)
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
            data = kubectl_json(kubectl, kubeconfig, "get", "configmap", ref["name"], "-n", RELEASE_NAMESPACE)["data"]
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

    def forbidden_lines(self) -> list[str]:
        return [line for line in self.logs().splitlines() if re.search(r"Forbidden|forbidden|\b403\b", line)]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_operator(cluster, kubectl: str, deployment: dict, tmp_path: Path) -> OperatorProcess:
    """The operator as the Deployment's ServiceAccount (checked with `kubectl auth whoami`)."""
    kubeconfig = service_account_kubeconfig(cluster, kubectl, deployment, tmp_path / "operator.kubeconfig")
    whoami = kubectl_json(kubectl, kubeconfig, "auth", "whoami")
    assert whoami["status"]["userInfo"]["username"] == \
        f"system:serviceaccount:{RELEASE_NAMESPACE}:{service_account_name(deployment)}"
    return OperatorProcess(kubeconfig, tmp_path / "operator.log", deployment_env(deployment, kubectl, cluster.kubeconfig))


@contextmanager
def custom_objects(kubeconfig: Path):
    """The admin's CustomObjectsApi."""
    with config.new_client_from_config(config_file=str(kubeconfig)) as admin:
        yield client.CustomObjectsApi(admin)


def create_job(objects, name: str, namespace: str = "default") -> None:
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
        "spec": {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}},
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}})


def get_job(objects, name: str, namespace: str = "default") -> dict:
    return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def job_status(objects, name: str, namespace: str = "default") -> dict:
    return get_job(objects, name, namespace).get("status") or {}


def wait_until_finished(objects, operator: OperatorProcess, name: str, namespace: str = "default",
                        timeout: float = 180) -> dict:
    """The job's status once its phase is Succeeded or Failed."""
    return wait_for(lambda: job_status(objects, name, namespace).get("phase") in ("Succeeded", "Failed")
                    and job_status(objects, name, namespace), timeout, f"the job {namespace}/{name} to finish",
                    lambda: f"{job_status(objects, name, namespace)}\n{operator.logs()[-6000:]}")


def assert_succeeded_without_a_forbidden(operator: OperatorProcess, final: dict) -> None:
    """Succeeded with its 3 epochs (pod 0's log followed: pods/log allowed), the operator still up, no 403 counted
    (pets_operator_api_errors_total: its own calls, kopf's and the log follower's) and none in its log."""
    assert final["phase"] == "Succeeded", f"{final.get('message')}\n{operator.logs()[-6000:]}"
    assert [e["epoch"] for e in final["epochs"]] == [0, 1, 2]
    assert operator.process.poll() is None, operator.logs()[-6000:]
    assert forbidden_api_errors(operator.metrics_port) == 0
    assert operator.forbidden_lines() == [], "\n".join(operator.forbidden_lines())
