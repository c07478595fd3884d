"""The operator as users deploy it, on Kubernetes' own control plane: `helm install` of the chart,
then the operator process with the chart's ServiceAccount (a TokenRequest token, not the admin)
runs a job to Succeeded without one Forbidden answer; with one rule taken from the ClusterRole, the
Forbidden reaches the job's status.message and a Warning Event, and the operator keeps running.

The chart's Deployment is installed with replicas 0: its image cannot run here (no registry), so
the same command runs as a local process with the Deployment's own environment (helm_operator.py)."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client, config

from tests.realcluster.helm_operator import (
    RELEASE,
    assert_succeeded_without_a_forbidden,
    create_job,
    custom_objects,
    forbidden_api_errors,
    helm_install,
    job_status,
    local_cluster,
    start_operator,
    wait_for,
    wait_until_finished,
)

pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cluster(control_plane_bin, tmp_path_factory):
    with local_cluster(control_plane_bin, tmp_path_factory.mktemp("helm-cluster")) as running:
        yield running


@pytest.fixture
def objects(cluster):
    with custom_objects(cluster.kubeconfig) as api:
        yield api


@pytest.fixture(scope="module")
def installed(cluster, helm, kubectl) -> dict:
    """helm install with the default values (a ClusterRole); returns the Deployment."""
    return helm_install(helm, kubectl, cluster.kubeconfig)


@pytest.fixture
def operator(cluster, kubectl, installed, tmp_path):
    process = start_operator(cluster, kubectl, installed, tmp_path)
    yield process
    process.stop()


def test_helm_installed_operator_with_its_service_account_runs_a_job_without_a_forbidden(operator, objects):
    create_job(objects, "deployed")
    assert_succeeded_without_a_forbidden(operator, wait_until_finished(objects, operator, "deployed"))


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
