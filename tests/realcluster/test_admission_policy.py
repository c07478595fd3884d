"""The chart's admission policy on Kubernetes' own kube-apiserver (docs/security.md): `helm install` with the
default values refuses, at `kubectl create`, a job with a foreign image or any hostPath, with the policy's
message, and admits the sample job; `helm upgrade` with hostPath prefixes admits a hostPath under them only.
Each refusal's message is the operator's own (`pets_operator.policy`, fed the Deployment's environment from
the same ConfigMap), and without the admission policy (`policy.admission=false`) the operator refuses the
same job itself: Failed, PolicyViolation, a Warning Event, nothing created.

The chart's Deployment is installed with replicas 0 (no image can run here); the operator runs as a local
process with the Deployment's environment, its configMapKeyRefs read from the ConfigMap."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pets_localkube.control_plane import KubernetesControlPlane
from pets_operator.config import from_environ
from pets_operator.policy import policy_problems

pytestmark = pytest.mark.realcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "pets-operator"
SAMPLE_JOB = REPO_ROOT / "manifests" / "job.yaml"
RELEASE, RELEASE_NAMESPACE = "pets", "pets-system"
TRAINER_IMAGE = "pets-trainer:0.1.0"  # the chart's trainerImage
SYNTHETIC = {"synthetic": {}}


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)
    return value


class Cluster:
    def __init__(self, plane: KubernetesControlPlane, kubectl: str, helm: str):
        self.kubeconfig, self.kubectl_path, self.helm_path = plane.kubeconfig, kubectl, helm

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=60)

    def get(self, *args: str) -> dict:
        done = self.kubectl("get", *args, "-o", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def create(self, name: str, spec: dict, *flags: str, namespace: str = "default") -> subprocess.CompletedProcess:
        job = {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
               "metadata": {"name": name, "namespace": namespace}, "spec": {"epochs": 1, **spec}}
        return self.kubectl("create", *flags, "-f", "-", stdin=json.dumps(job))

    def install(self, *sets: str) -> dict[str, str]:
        """helm upgrade --install with these values; returns the operator's environment as its pod would get it."""
        args = [arg for item in ("replicas=0", *sets) for arg in ("--set", item)]
        done = subprocess.run([self.helm_path, "upgrade", "--install", RELEASE, str(CHART), "--namespace",
                               RELEASE_NAMESPACE, "--create-namespace", "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return self.operator_environ()

    def operator_environ(self) -> dict[str, str]:
        [deployment] = self.get("deployments", "-n", RELEASE_NAMESPACE)["items"]
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        environ = {}
        for item in container["env"]:
            ref = (item.get("valueFrom") or {}).get("configMapKeyRef")
            if "value" in item:
                environ[item["name"]] = item["value"]
            elif ref is not None:
                environ[item["name"]] = self.get("configmap", ref["name"], "-n", RELEASE_NAMESPACE)["data"][ref["key"]]
        return environ

    def settled(self, spec: dict, admitted: bool) -> None:
        """kube-apiserver reads the policy and its ConfigMap through informers: wait until a server-side dry run
        of `spec` gets the verdict the installed values mean."""
        wait_for(lambda: (self.create("probe", spec, "--dry-run=server").returncode == 0) == admitted, 60,
                 f"the admission policy to {'admit' if admitted else 'refuse'} {spec}")


@pytest.fixture(scope="module")
def cluster(control_plane_bin, tmp_path_factory, kubectl, helm):
    """A control plane of its own: the policy binds every namespace, which would refuse other modules' jobs."""
    with KubernetesControlPlane(tmp_path_factory.mktemp("policy-plane"), port=0, bin_dir=control_plane_bin) as plane:
        yield Cluster(plane, kubectl, helm)


def refused_with_the_operators_message(cluster: Cluster, name: str, spec: dict, environ: dict[str, str]) -> str:
    """Refused by kube-apiserver with exactly the message the operator gives for the same settings."""
    [expected] = policy_problems(spec, from_environ(environ).policy, environ["PETS_OPERATOR_TRAINER_IMAGE"])
    done = cluster.create(name, spec)
    assert done.returncode != 0, f"{name} was admitted"
    assert "Forbidden" in done.stderr and f"denied request: {expected}" in done.stderr, done.stderr
    return done.stderr


def test_the_default_install_refuses_foreign_images_and_host_paths_and_admits_the_sample(cluster):
    environ = cluster.install()
    cluster.settled({"image": "elsewhere/trainer:1", "data": SYNTHETIC}, admitted=False)
    message = refused_with_the_operators_message(cluster, "foreign-image",
                                                 {"image": "elsewhere/trainer:1", "data": SYNTHETIC}, environ)
    assert "policy.allowedImages" in message and f"(allowed: {TRAINER_IMAGE})" in message
    message = refused_with_the_operators_message(cluster, "host-data", {"data": {"hostPath": "/etc"}}, environ)
    assert "policy.hostPath.allowed" in message
    refused_with_the_operators_message(
        cluster, "host-checkpoint", {"data": SYNTHETIC, "checkpoint": {"hostPath": "/var/lib/kubelet"}}, environ)

    applied = cluster.kubectl("apply", "-n", "default", "-f", str(SAMPLE_JOB))
    assert applied.returncode == 0, applied.stderr
    assert cluster.create("own-image", {"image": TRAINER_IMAGE, "data": SYNTHETIC}).returncode == 0
    # Nothing of the refused ones was created.
    jobs = {job["metadata"]["name"] for job in cluster.get("petstrainingjobs", "-n", "default")["items"]}
    assert jobs == {"pets-demo", "own-image"}


def test_host_paths_are_admitted_only_under_the_allowed_prefixes(cluster):
    environ = cluster.install("policy.hostPath.allowed=true", "policy.hostPath.pathPrefixes={/mnt/datasets}",
                              "policy.allowedImages={registry.example/ml/*}")
    cluster.settled({"data": {"hostPath": "/mnt/datasets/probe"}}, admitted=True)
    inside = {"image": "registry.example/ml/trainer:2", "data": {"hostPath": "/mnt/datasets/pets"},
              "output": {"hostPath": "/mnt/datasets/models"}}
    admitted = cluster.create("inside", inside)
    assert admitted.returncode == 0, admitted.stderr
    message = refused_with_the_operators_message(
        cluster, "outside", {"data": SYNTHETIC, "cache": {"hostPath": "/mnt/datasets-other"}}, environ)
    assert "outside the allowed hostPath prefixes (/mnt/datasets)" in message and "pathPrefixes" in message
    refused_with_the_operators_message(cluster, "climbing", {"data": {"hostPath": "/mnt/datasets/../../etc"}}, environ)
    refused_with_the_operators_message(
        cluster, "tensorboard", {"data": SYNTHETIC, "tracking": {"tensorboard": {"hostPath": "/root", "logDir": "/tb"}}},
        environ)


def test_without_the_admission_policy_the_operator_refuses_the_job_and_creates_nothing(cluster, tmp_path):
    environ = cluster.install("policy.admission=false")
    namespace = "operator-only"  # the operator serves only this one: the other tests' jobs stay untouched
    assert cluster.kubectl("create", "namespace", namespace).returncode == 0
    assert cluster.get("validatingadmissionpolicies")["items"] == []
    spec = {"image": "elsewhere/trainer:1", "data": SYNTHETIC}
    cluster.settled(spec, admitted=True)  # the binding is gone: kube-apiserver admits it
    created = cluster.create("operator-refuses", spec, namespace=namespace)
    assert created.returncode == 0, created.stderr
    [expected] = policy_problems(spec, from_environ(environ).policy, TRAINER_IMAGE)

    log_path = tmp_path / "operator.log"
    env = {**os.environ, **environ, "KUBECONFIG": str(cluster.kubeconfig), "PETS_OPERATOR_NAMESPACES": namespace,
           "PETS_OPERATOR_LEASE_NAMESPACE": namespace, "PETS_OPERATOR_LIVENESS_PORT": "0",
           "PETS_OPERATOR_METRICS_PORT": "0", "POD_ID": "local-operator"}
    with log_path.open("wb") as log:
        operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        def failed():
            status = cluster.get("petstrainingjob", "operator-refuses", "-n", namespace).get("status") or {}
            return status if status.get("phase") == "Failed" else None
        try:
            status = wait_for(failed, 90, "the operator to fail the job")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log_path.read_text(errors='replace')[-4000:]}") from None
        assert status["message"] == f"refused by the cluster's policy: {expected}"
        [condition] = [c for c in status["conditions"] if c["type"] == "Failed"]
        assert condition["reason"] == "PolicyViolation"
        events = wait_for(lambda: [e for e in cluster.get("events", "-n", namespace)["items"]
                                   if e["involvedObject"]["name"] == "operator-refuses" and e["type"] == "Warning"],
                          30, "the Warning Event")
        assert [(e["reason"], e["message"]) for e in events] == [("PolicyViolation", status["message"])]
        assert cluster.get("pods", "-n", namespace)["items"] == []
        assert cluster.get("services", "-n", namespace)["items"] == []
        assert operator.poll() is None, log_path.read_text(errors="replace")[-4000:]
    finally:
        operator.terminate()
        operator.wait(15)
