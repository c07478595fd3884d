"""The two documented installs on a real (kind) cluster, each running the sample job to the end:
`kubectl apply -f manifests/` + `kubectl apply -f manifests/job.yaml`, and `helm install`."""
from __future__ import annotations

import time

import pytest
import yaml

from tests.kind.kind_cluster import REPO_ROOT, KindCluster

MANIFESTS = REPO_ROOT / "manifests"
CHART = REPO_ROOT / "charts" / "pets-operator"
SAMPLE = yaml.safe_load((MANIFESTS / "job.yaml").read_text())
JOB = SAMPLE["metadata"]["name"]
CRDS = ("petstrainingjobs.training.pets.dev", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev")
JOB_TIMEOUT = 1500

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]


def assert_trained(cluster: KindCluster, namespace: str) -> None:
    job = cluster.wait_for_job(JOB, namespace, timeout=JOB_TIMEOUT)
    status = job["status"]
    assert status["phase"] == "Succeeded", cluster.diagnostics(JOB, namespace)
    epochs = status["epochs"]
    assert [entry["epoch"] for entry in epochs] == list(range(SAMPLE["spec"]["epochs"]))
    assert all(0.0 <= entry["accuracy"] <= 1.0 for entry in epochs)
    assert status["bestAccuracy"] == pytest.approx(max(entry["accuracy"] for entry in epochs))
    assert status["workers"]["succeeded"] == SAMPLE["spec"]["numNodes"]

    pods = cluster.get_json("pods", "-n", namespace, "-l", f"training.pets.dev/job-name={JOB}")["items"]
    assert sorted(pod["metadata"]["labels"]["training.pets.dev/replica-index"] for pod in pods) == \
        [str(i) for i in range(SAMPLE["spec"]["numNodes"])]
    service = cluster.get_json("service", f"{JOB}-workers", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None"


def test_plain_manifests_install_and_run_the_sample_job(kind_cluster: KindCluster):
    # On a fresh cluster this first apply cannot map job.yaml yet (its CRD is created in the
    # same call); everything else is created, and step two submits the job.
    first = kind_cluster.kubectl("apply", "-f", MANIFESTS, check=False)
    errors = [line for line in first.stderr.splitlines() if line.strip()]
    assert all(any(mark in line for mark in ("job.yaml", "PetsTrainingJob", "ensure CRDs are installed first"))
               for line in errors), first.stderr
    kind_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{crd}" for crd in CRDS])
    kind_cluster.kubectl("-n", "pets-operator", "rollout", "status", "deployment/pets-operator", "--timeout=300s")
    kind_cluster.kubectl("apply", "-f", MANIFESTS / "job.yaml")
    try:
        assert_trained(kind_cluster, "default")
    finally:
        kind_cluster.kubectl("delete", "-f", MANIFESTS / "job.yaml", "--ignore-not-found", "--wait=true")
        kind_cluster.kubectl("delete", "-f", MANIFESTS / "operator.yaml", "--ignore-not-found", "--wait=true")


def test_helm_install_runs_the_sample_job_and_uninstalls(kind_cluster: KindCluster):
    namespace = "pets-helm"
    install = kind_cluster.helm("upgrade", "--install", "pets", CHART, "--namespace", "pets-system",
                                "--create-namespace", "--set", f"watchNamespaces={{{namespace}}}",
                                "--wait", "--timeout", "5m")
    assert "kubectl get ptj" in install.stdout
    try:
        kind_cluster.kubectl("create", "namespace", namespace)
        kind_cluster.kubectl("apply", "-n", namespace, "-f", MANIFESTS / "job.yaml")
        assert_trained(kind_cluster, namespace)
        kind_cluster.kubectl("delete", "-n", namespace, "petstrainingjob", JOB, "--wait=true")
        # The job owned its pods and Service: the garbage collector removes them with it.
        selector = f"training.pets.dev/job-name={JOB}"
        deadline = time.monotonic() + 180
        while kind_cluster.get_json("pods,services", "-n", namespace, "-l", selector)["items"]:
            assert time.monotonic() < deadline, kind_cluster.diagnostics(JOB, namespace)
            time.sleep(3)
    finally:
        kind_cluster.helm("uninstall", "pets", "--namespace", "pets-system", "--wait", check=False)
    assert kind_cluster.kubectl("get", "deployment", "-n", "pets-system", "-o", "name").stdout.strip() == ""
