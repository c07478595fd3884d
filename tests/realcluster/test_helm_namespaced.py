"""The chart's namespaced install mode on Kubernetes' own control plane: `helm install` with
`watchNamespaces={team-a}` gives the operator's ServiceAccount Roles only (its jobs' rules in team-a, its
leader-election Lease in the release namespace) and no ClusterRole or ClusterRoleBinding; the operator,
run with that ServiceAccount's token and the Deployment's env (helm_operator.py), runs a job in team-a to
Succeeded without one Forbidden answer, and leaves a job in team-b untouched: no status, no finalizer, no
annotation, nothing created in team-b."""
from __future__ import annotations

import subprocess

import pytest
from kubernetes import client, config

from pets_api import GROUP
from tests.realcluster.helm_operator import (
    RELEASE,
    RELEASE_NAMESPACE,
    assert_succeeded_without_a_forbidden,
    create_job,
    custom_objects,
    get_job,
    helm_install,
    kubectl_json,
    local_cluster,
    service_account_name,
    start_operator,
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

WATCHED, OTHER = "team-a", "team-b"


@pytest.fixture(scope="module")
def installed(cluster, helm, kubectl) -> dict:
    """The two namespaces, then helm install serving only WATCHED; returns the Deployment."""
    for namespace in (WATCHED, OTHER):
        subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "create", "namespace", namespace],
                       capture_output=True, text=True, check=True)
    return helm_install(helm, kubectl, cluster.kubeconfig, f"watchNamespaces={{{WATCHED}}}")


def can_i(cluster, kubectl: str, account: str, verb: str, resource: str, *where: str) -> bool:
    """`kubectl auth can-i` for the ServiceAccount, asked by the admin (impersonation)."""
    done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "auth", "can-i", verb, resource, *where,
                           "--as", f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}"],
                          capture_output=True, text=True)
    assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
    return done.stdout.strip() == "yes"


def test_the_namespaced_install_grants_roles_only(cluster, kubectl, installed):
    account = service_account_name(installed)
    admin = cluster.kubeconfig
    ours = f"app.kubernetes.io/instance={RELEASE}"
    assert kubectl_json(kubectl, admin, "get", "clusterroles", "-l", ours)["items"] == []
    assert kubectl_json(kubectl, admin, "get", "clusterrolebindings", "-l", ours)["items"] == []
    # Nor any other ClusterRoleBinding names the account (the built-in ones bind groups, e.g. system:authenticated).
    bound = [binding["metadata"]["name"] for binding in kubectl_json(kubectl, admin, "get", "clusterrolebindings")["items"]
             for subject in binding.get("subjects") or []
             if subject.get("kind") == "ServiceAccount" and subject.get("name") == account]
    assert bound == []
    roles = {(role["metadata"]["namespace"], role["metadata"]["name"])
             for role in kubectl_json(kubectl, admin, "get", "roles", "-A", "-l", ours)["items"]}
    assert roles == {(WATCHED, "pets-pets-operator"), (RELEASE_NAMESPACE, "pets-pets-operator-leader-election")}

    assert can_i(cluster, kubectl, account, "watch", f"petstrainingjobs.{GROUP}", "-n", WATCHED)
    assert can_i(cluster, kubectl, account, "create", "pods", "-n", WATCHED)
    assert not can_i(cluster, kubectl, account, "watch", f"petstrainingjobs.{GROUP}", "-n", OTHER)
    assert not can_i(cluster, kubectl, account, "create", "pods", "-n", OTHER)
    assert not can_i(cluster, kubectl, account, "list", f"petstrainingjobs.{GROUP}", "--all-namespaces")
    assert not can_i(cluster, kubectl, account, "list", "namespaces")
    assert not can_i(cluster, kubectl, account, "watch", "customresourcedefinitions.apiextensions.k8s.io")


def test_a_job_in_the_watched_namespace_succeeds_and_one_elsewhere_is_left_alone(cluster, kubectl, installed,
                                                                                  objects, tmp_path):
    create_job(objects, "elsewhere", OTHER)  # first: the operator has all the job's run to touch it
    operator = start_operator(cluster, kubectl, installed, tmp_path)
    try:
        create_job(objects, "watched", WATCHED)
        assert_succeeded_without_a_forbidden(operator, wait_until_finished(objects, operator, "watched", WATCHED))
        # kopf scans no namespaces or CRDs (cluster-wide lists the Roles do not grant): no 403 from it either.
        assert "Not enough permissions" not in operator.logs()
    finally:
        operator.stop()

    untouched = get_job(objects, "elsewhere", OTHER)
    assert "status" not in untouched, untouched["status"]
    assert not untouched["metadata"].get("finalizers"), untouched["metadata"]
    assert not [key for key in untouched["metadata"].get("annotations") or {} if key.startswith(GROUP)], \
        untouched["metadata"]["annotations"]
    assert untouched["metadata"]["generation"] == 1
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
        core = client.CoreV1Api(admin)
        assert core.list_namespaced_pod(OTHER).items == []
        assert [s.metadata.name for s in core.list_namespaced_service(OTHER).items] == []
        assert client.NetworkingV1Api(admin).list_namespaced_network_policy(OTHER).items == []
        assert [(e.reason, e.message) for e in core.list_namespaced_event(OTHER).items
                if e.involved_object.name == "elsewhere"] == []
