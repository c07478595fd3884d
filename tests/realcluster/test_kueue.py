"""The real Kueue (v0.17, built by hack/kueue.sh, run by pets_localkube.kueue) on Kubernetes' own
control plane: the operator's pod groups gated by Kueue's webhook, admitted as a whole within the
ClusterQueue's quota, a second group queued until the first leaves; malformed groups refused by
the webhook; pods of a namespace Kueue does not manage left alone (no gate the operator set holds
them). There is no kubelet: admitted pods are ungated and go to the scheduler, which has no node.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pets_api import names
from pets_localkube.kueue import (
    BUILD_SCRIPT,
    Kueue,
    KueueError,
    configuration,
    parse_quota,
    pinned_versions,
    queue_objects,
    wait_for_pods_ready,
    webhook_configurations,
)
from pets_operator import builders
from pets_operator.spec import with_defaults
from tests.realcluster.test_control_plane import new_namespace, wait_for


def real_cluster(test):
    """On the real control plane; the first such test's setup may build Kueue (a cold build took
    16 min on 2 loaded cores), hence the timeout."""
    return pytest.mark.realcluster(pytest.mark.timeout(2700)(test))


REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_JOB = REPO_ROOT / "manifests" / "job.yaml"
CRD = REPO_ROOT / "manifests" / "crd.yaml"
GROUP, VERSION, PLURAL = "training.pets.dev", "v1alpha1", "petstrainingjobs"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
IMAGE = "pets-trainer:test"  # never pulled: there is no kubelet
KUEUE_GATES = [names.KUEUE_ADMISSION_GATE, "kueue.x-k8s.io/topology"]  # what v0.17's pod webhook adds
UNMANAGED = f"unmanaged-{uuid.uuid4().hex[:6]}"  # excluded from Kueue's managedJobsNamespaceSelector


@pytest.fixture(scope="module")
def kueue_bin(pytestconfig) -> Path:
    check = subprocess.run(["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True)
    if check.returncode == 0:
        return Path(check.stdout.strip().splitlines()[-1])
    go = os.environ.get("GO", "go")
    if not shutil.which(go):
        pytest.skip(f"Kueue is not built and there is no Go toolchain ('{go}' not on PATH) to build it: install "
                    f"Go >= {pinned_versions().get('go', '?')} and run hack/kueue.sh")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    capture.suspend_global_capture(in_=False)
    try:
        print(f"\nbuilding Kueue with {BUILD_SCRIPT} (once per pin; a cold build takes many minutes)", flush=True)
        build = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    finally:
        capture.resume_global_capture()
    if build.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT} failed with exit code {build.returncode} (its messages are above)")
    return Path(build.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sample_spec() -> dict:
    return yaml.safe_load(SAMPLE_JOB.read_text())["spec"]


@pytest.fixture(scope="module")
def group_quota(sample_spec) -> dict[str, str]:
    """What one group of the sample job requests: room for exactly one such group at a time."""
    spec = with_defaults(sample_spec, IMAGE)
    return {resource: builders.format_quantity(amount * int(spec["numNodes"]))
            for resource, amount in builders.pod_requests(spec).items()}


@pytest.fixture(scope="module")
def kueue(control_plane, kueue_bin, tmp_path_factory):
    with Kueue(control_plane.kubeconfig, tmp_path_factory.mktemp("kueue"), bin_dir=kueue_bin,
               excluded_namespaces=[UNMANAGED]) as running:
        running.api.apply(yaml.safe_load(CRD.read_text()))
        yield running


@pytest.fixture(scope="module")
def queued_namespace(kueue, api_client, group_quota):
    """A namespace with LocalQueue `team-a` onto ClusterQueue `pets-cq` (one group's quota), Active."""
    namespace = new_namespace(api_client)
    kueue.create_queues(namespace, group_quota, local_queue="team-a", cluster_queue="pets-cq")
    objects = client.CustomObjectsApi(api_client)
    wait_for(lambda: condition(objects.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "pets-cq"),
                               "Active") == "True", what="ClusterQueue pets-cq to be Active")
    return namespace


def condition(obj: dict | None, type_: str) -> str | None:
    return next((c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def create_job(api_client, namespace: str, name: str, spec: dict) -> dict:
    """A PetsTrainingJob object (so the pods have a real owner for the garbage collector)."""
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def group_pods(job: dict, spec: dict, attempt: int = 0) -> list[dict]:
    """The pods of one group attempt exactly as the operator builds them."""
    full = with_defaults(spec, IMAGE)
    return [builders.pod_body(job, full, index, attempt) for index in range(int(full["numNodes"]))]


def gates(pod) -> list[str]:
    return [gate.name for gate in pod.spec.scheduling_gates or []]


def workload(api_client, namespace: str, name: str) -> dict | None:
    try:
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


@real_cluster
def test_kueue_runs_the_pinned_release_with_its_own_identity(kueue):
    log = kueue.log.read_text()
    assert f'"gitVersion":"{pinned_versions()["kueue"]}"' in log
    kubeconfig = yaml.safe_load(kueue.kubeconfig.read_text())
    assert kubeconfig["current-context"] == "kueue-controller-manager"  # a certificate the cluster signed
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        stored = kueue.api.get({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                "metadata": {"name": f"kueue-{kind[:-len('WebhookConfiguration')].lower()}-webhook-configuration"}})
        pod_hook = next(w for w in stored["webhooks"] if w["name"] in ("mpod.kb.io", "vpod.kb.io"))
        assert pod_hook["clientConfig"]["url"].startswith(kueue.webhook_url + "/")
        assert pod_hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    crd = kueue.api.get({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                         "metadata": {"name": "workloads.kueue.x-k8s.io"}})
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == kueue.webhook_url + "/convert"
    assert "Forbidden" not in log and "forbidden" not in log  # Kueue's own RBAC from the module is enough


@real_cluster
def test_operator_groups_are_gated_admitted_whole_and_queued_within_the_quota(api_client, queued_namespace,
                                                                                 sample_spec):
    core = client.CoreV1Api(api_client)
    namespace = queued_namespace
    spec = {**sample_spec, "queueName": "team-a"}
    first, second = (create_job(api_client, namespace, name, spec) for name in ("first", "second"))
    first_group, second_group = (names.kueue_pod_group_name(j["metadata"]["name"], 0, j["metadata"]["uid"])
                                 for j in (first, second))

    def create_group(job: dict) -> None:
        for body in group_pods(job, spec):
            assert "schedulingGates" not in body["spec"]  # the operator leaves the gate to Kueue
            created = core.create_namespaced_pod(namespace, body)
            # Kueue's webhook: its gates (admission; and topology, TopologyAwareScheduling being on by
            # default), its finalizer, its label, the role hash of the pod's shape.
            assert gates(created) == KUEUE_GATES, created.spec.scheduling_gates
            assert names.KUEUE_FINALIZER in created.metadata.finalizers
            assert created.metadata.labels["kueue.x-k8s.io/managed"] == "true"
            assert created.metadata.annotations["kueue.x-k8s.io/role-hash"]

    def admitted(group: str) -> bool:
        return condition(workload(api_client, namespace, group), "Admitted") == "True"

    def pods_of(group: str):
        return core.list_namespaced_pod(namespace, label_selector=f"{names.KUEUE_POD_GROUP_NAME_LABEL}={group}").items

    order: list[str] = []
    started = time.monotonic()
    create_group(first)
    wait_for(lambda: admitted(first_group), 60, what=f"{first_group} to be admitted")
    order.append(first_group)
    print(f"\n{first_group} admitted {time.monotonic() - started:.1f} s after its first pod was created")
    wait_for(lambda: all(not gates(p) for p in pods_of(first_group)), 30, what=f"the gates of {first_group} removed")
    admitted_workload = workload(api_client, namespace, first_group)
    assert [ps["count"] for ps in admitted_workload["spec"]["podSets"]] == [2]  # one role: both pods, one Workload
    assert condition(admitted_workload, "QuotaReserved") == "True"

    # The second group does not fit next to the first: its Workload waits, its pods stay gated.
    create_group(second)
    pending = wait_for(lambda: condition(workload(api_client, namespace, second_group), "QuotaReserved") == "False"
                       and workload(api_client, namespace, second_group), 60, what=f"{second_group} to be pending")
    reserved = next(c for c in pending["status"]["conditions"] if c["type"] == "QuotaReserved")
    print(f"{second_group} pending: {reserved['reason']}: {reserved['message']}")
    assert "insufficient unused quota" in reserved["message"], reserved
    assert condition(pending, "Admitted") != "True"
    assert all(gates(p) == KUEUE_GATES for p in pods_of(second_group))

    # The first group leaves (the operator deletes a group it ends): its quota goes to the second.
    for pod in pods_of(first_group):
        core.delete_namespaced_pod(pod.metadata.name, namespace)
    wait_for(lambda: admitted(second_group), 120, what=f"{second_group} to be admitted once {first_group} has left")
    order.append(second_group)
    wait_for(lambda: all(not gates(p) for p in pods_of(second_group)), 30, what=f"the gates of {second_group} removed")
    print(f"admission order: {' -> '.join(order)}")


@real_cluster
@pytest.mark.parametrize("breakage, message", [
    ("no-total-count", "both the 'kueue.x-k8s.io/pod-group-total-count' annotation and the "
                       "'kueue.x-k8s.io/pod-group-name' label should be set"),
    ("zero-total-count", "group total count should be greater than zero"),
    ("bad-group-name", "kueue.x-k8s.io/pod-group-name"),
])
def test_kueue_s_webhook_refuses_a_malformed_group(api_client, queued_namespace, sample_spec, breakage, message):
    """The checks are live: Kueue's validating webhook refuses pods of a group it could not form."""
    spec = {**sample_spec, "queueName": "team-a"}
    job = create_job(api_client, queued_namespace, f"bad-{breakage}", spec)
    body = group_pods(job, spec)[0]
    if breakage == "no-total-count":
        del body["metadata"]["annotations"][names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION]
    elif breakage == "zero-total-count":
        body["metadata"]["annotations"][names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] = "0"
    else:
        body["metadata"]["labels"][names.KUEUE_POD_GROUP_NAME_LABEL] = "Not_A.Name"  # a label, not an object name
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client).create_namespaced_pod(queued_namespace, body)
    said = json.loads(refused.value.body)["message"]
    print(f"\n{breakage}: {refused.value.status} {said}")
    assert refused.value.status == 403
    assert said.startswith('admission webhook "vpod.kb.io" denied the request') and message in said


@real_cluster
def test_pods_of_a_namespace_kueue_does_not_manage_are_not_held(api_client, kueue, sample_spec):
    """Item 6 of issue 24: no gate of the operator's holds them; Kueue adds none; the scheduler has them."""
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": UNMANAGED}})
    wait_for(lambda: core.list_namespaced_service_account(UNMANAGED).items, what=f"ServiceAccounts in {UNMANAGED}")
    spec = {**sample_spec, "queueName": "team-a"}
    job = create_job(api_client, UNMANAGED, "outside", spec)
    for body in group_pods(job, spec):
        created = core.create_namespaced_pod(UNMANAGED, body)
        assert gates(created) == [] and names.KUEUE_FINALIZER not in (created.metadata.finalizers or [])

    def scheduling_reasons():
        pods = core.list_namespaced_pod(UNMANAGED).items
        return [next((c.reason for c in p.status.conditions or [] if c.type == "PodScheduled"), None) for p in pods]

    # Tried by the scheduler (no node to take them), never "SchedulingGated".
    assert wait_for(lambda: set(scheduling_reasons()) == {"Unschedulable"} and scheduling_reasons(), 60,
                    what="the scheduler to try the pods")


@real_cluster
def test_a_group_is_admitted_only_once_all_its_pods_exist(api_client, kueue, group_quota, sample_spec):
    """Kueue forms the Workload from the pod-group-total-count pods: one pod alone is never admitted."""
    core = client.CoreV1Api(api_client)
    namespace = new_namespace(api_client)
    kueue.create_queues(namespace, group_quota, local_queue="team-b", cluster_queue="pets-cq-b")
    objects = client.CustomObjectsApi(api_client)
    wait_for(lambda: condition(objects.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "pets-cq-b"),
                               "Active") == "True", what="ClusterQueue pets-cq-b to be Active")
    spec = {**sample_spec, "queueName": "team-b"}
    job = create_job(api_client, namespace, "halves", spec)
    group = names.kueue_pod_group_name("halves", 0, job["metadata"]["uid"])
    first, second = group_pods(job, spec)
    core.create_namespaced_pod(namespace, first)
    time.sleep(5)  # long enough for Kueue to admit a complete group (the test above prints how long)
    assert condition(workload(api_client, namespace, group), "Admitted") != "True"
    assert gates(core.read_namespaced_pod(first["metadata"]["name"], namespace)) == KUEUE_GATES
    core.create_namespaced_pod(namespace, second)
    wait_for(lambda: condition(workload(api_client, namespace, group), "Admitted") == "True", 60,
             what=f"{group} to be admitted once complete")
    wait_for(lambda: all(not gates(p) for p in core.list_namespaced_pod(namespace).items), 30,
             what=f"the gates of {group} removed")


# -- the pure parts, without a cluster --------------------------------------------------------

def test_the_configuration_manages_pods_with_a_queue_name_outside_the_system_namespaces(tmp_path):
    config = configuration(9443, 8081, tmp_path, excluded_namespaces=["team-z"])
    assert config["integrations"] == {"frameworks": ["pod"]} and config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-node-lease", "kube-public", "kube-system", "kueue-system", "team-z"]}]}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path)}
    assert config["internalCertManagement"]["enable"] is True  # seeded: see pets_localkube.kueue
    assert config["featureGates"] == {"VisibilityOnDemand": False} and config["metrics"] == {"bindAddress": "0"}
    assert "waitForPodsReady" not in config  # off unless asked for


def test_wait_for_pods_ready_goes_into_the_configuration_as_kueue_v1beta2_spells_it(tmp_path):
    section = wait_for_pods_ready(12.5, backoff_base_seconds=5, backoff_limit_count=3)
    assert section == {"timeout": "12.5s", "blockAdmission": False, "requeuingStrategy": {
        "timestamp": "Eviction", "backoffBaseSeconds": 5, "backoffLimitCount": 3}}
    assert "backoffLimitCount" not in wait_for_pods_ready(10)["requeuingStrategy"]  # requeued without end
    config = configuration(9443, 8081, tmp_path, pods_ready=wait_for_pods_ready(10, block_admission=True))
    assert config["waitForPodsReady"]["timeout"] == "10s" and config["waitForPodsReady"]["blockAdmission"] is True


def test_quota_and_queues():
    assert parse_quota("cpu=1, memory=2Gi") == {"cpu": "1", "memory": "2Gi"}
    for bad in ("", "cpu", "cpu=", "=1"):
        with pytest.raises(ValueError, match="cpu=1,memory=2Gi"):
            parse_quota(bad)
    flavor, cluster_queue, local_queue = queue_objects("team-a", {"memory": "2Gi", "cpu": "1"}, "team-a", "cq")
    assert flavor["kind"] == "ResourceFlavor" and local_queue["metadata"] == {"name": "team-a", "namespace": "team-a"}
    assert local_queue["spec"] == {"clusterQueue": "cq"}
    assert cluster_queue["spec"]["resourceGroups"] == [{"coveredResources": ["cpu", "memory"], "flavors": [{
        "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "1"},
                                                {"name": "memory", "nominalQuota": "2Gi"}]}]}]


WEBHOOK_KUSTOMIZATION = """
resources: [manifests.yaml]
patches:
- patch: |-
    apiVersion: admissionregistration.k8s.io/v1
    kind: MutatingWebhookConfiguration
    metadata: {name: mutating-webhook-configuration}
    webhooks:
    - name: mpod.kb.io
      namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]}
"""
WEBHOOK_MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
- name: mclusterqueue.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}}
"""


def test_webhook_configurations_call_the_local_url_with_kueue_s_patches(tmp_path):
    webhook_dir = tmp_path / "components" / "webhook"
    webhook_dir.mkdir(parents=True)
    (webhook_dir / "kustomization.yaml").write_text(WEBHOOK_KUSTOMIZATION)
    (webhook_dir / "manifests.yaml").write_text(WEBHOOK_MANIFESTS)
    [mutating] = webhook_configurations(tmp_path, "https://127.0.0.1:9443", "Q0E=")
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"  # the name Kueue injects its CA into
    pod, cluster_queue = mutating["webhooks"]
    assert pod["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod", "caBundle": "Q0E="}
    assert pod["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
    assert "namespaceSelector" not in cluster_queue
    (webhook_dir / "kustomization.yaml").write_text(WEBHOOK_KUSTOMIZATION.replace("mpod.kb.io", "mgone.kb.io"))
    with pytest.raises(KueueError, match="mgone.kb.io"):
        webhook_configurations(tmp_path, "https://127.0.0.1:9443", "Q0E=")
