"""The chart's own operator Deployment as pods on Kubernetes' own control plane, run by the local kubelet.

`helm install` with `replicas=2` (leader election on) into a namespace under Pod Security `restricted`: both
operator pods are admitted and run `pets-operator run` as the chart says (its command, env, the ServiceAccount
token the kubelet projects through the TokenRequest API, the API server's address in
`KUBERNETES_SERVICE_HOST`/`_PORT`); one holds the Lease. Two jobs of simulated trainers train; `helm upgrade`
to a new image tag rolls the Deployment mid-run (the kubelet maps any tag of `pets-operator` to the same local
command); the new pods take the Lease while the jobs still train, and every job ends Succeeded with each epoch
once in status.epochs (docs/operations.md, "Upgrading while jobs train").
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client, config

from pets_api import GROUP, PLURAL, VERSION
from tests.realcluster.helm_operator import (
    CHART,
    RELEASE,
    RELEASE_NAMESPACE,
    custom_objects,
    get_job,
    helm_path,
    local_cluster,
    wait_for,
)

pytestmark = pytest.mark.realcluster

JOBS_NAMESPACE = "training"
JOBS = ("upgrade-a", "upgrade-b")
EPOCHS, EPOCH_SECONDS = 40, 2.0  # ~80 s of training: the rollout and the handover happen well inside it
OLD_TAG, NEW_TAG = "0.1.0", "0.2.0"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"


@pytest.fixture(scope="module")
def cluster(control_plane_bin, tmp_path_factory):
    """The control plane and the local node; the pods' processes import this checkout (PYTHONPATH made absolute:
    a pod's process runs in its own directory)."""
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get("PYTHONPATH"):
            patch.setenv("PYTHONPATH", os.pathsep.join(str(Path(p).resolve())
                                                        for p in os.environ["PYTHONPATH"].split(os.pathsep) if p))
        with local_cluster(control_plane_bin, tmp_path_factory.mktemp("operator-pods")) as running:
            yield running


@pytest.fixture(scope="module")
def core(cluster):
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
        yield client.CoreV1Api(admin)


def restricted_namespace(core, name: str) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": {POD_SECURITY_ENFORCE: "restricted"}}})


def helm(helm_binary: str, kubeconfig: Path, verb: str, *sets: str, flags: tuple[str, ...] = ()) -> None:
    args = [*flags, *(arg for item in sets for arg in ("--set", item))]
    done = subprocess.run([helm_binary, verb, RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *args,
                           "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr


def operator_pods(core) -> list[client.V1Pod]:
    return core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector=SELECTOR).items


def running_tagged(core, tag: str) -> list[str]:
    """Names of the operator pods of that image tag whose container runs."""
    return sorted(p.metadata.name for p in operator_pods(core) if p.metadata.deletion_timestamp is None
                  and p.spec.containers[0].image.endswith(f":{tag}") and p.status.container_statuses
                  and p.status.container_statuses[0].state.running)


def lease_holder(cluster, kubectl: str) -> str | None:
    done = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "get", "lease", "-n", RELEASE_NAMESPACE,
                           f"{RELEASE}-pets-operator-leader", "-o", "json"], capture_output=True, text=True)
    return json.loads(done.stdout)["spec"].get("holderIdentity") if done.returncode == 0 else None


def process_environ(pod: client.V1Pod) -> dict[str, str]:
    """The environment of the pod's main process (the local kubelet reports it as `local://<pid>`)."""
    pid = pod.status.container_statuses[0].container_id.removeprefix("local://")
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


def assert_in_cluster(pod: client.V1Pod, api_port: int) -> None:
    """The operator process connects as a pod does: the `kubernetes` Service's variables name the API server, the
    ServiceAccount token the kubelet projected is there, and there is no kubeconfig to use instead."""
    env = process_environ(pod)
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", str(api_port))
    account = Path(env["PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR"])
    assert {f.name for f in account.iterdir()} >= {"token", "ca.crt", "namespace"}
    assert (account / "namespace").read_text() == RELEASE_NAMESPACE
    assert "KUBECONFIG" not in env
    assert env["PETS_OPERATOR_LIVENESS_PORT"] != "8080" and env["POD_ID"] == pod.metadata.name


def epochs_of(objects, name: str) -> list[int]:
    return [e["epoch"] for e in (get_job(objects, name, JOBS_NAMESPACE).get("status") or {}).get("epochs") or []]


def phase_of(objects, name: str) -> str | None:
    return (get_job(objects, name, JOBS_NAMESPACE).get("status") or {}).get("phase")


def test_helm_upgrade_mid_run_rolls_the_operator_pods_and_no_epoch_is_lost_or_doubled(cluster, core, kubectl):
    helm_binary = helm_path()
    restricted_namespace(core, RELEASE_NAMESPACE)
    restricted_namespace(core, JOBS_NAMESPACE)
    helm(helm_binary, cluster.kubeconfig, "install", "replicas=2", f"image.tag={OLD_TAG}")

    def describe() -> str:
        pods = [(p.metadata.name, p.spec.containers[0].image, p.status.phase,
                 [s.state.to_dict() for s in p.status.container_statuses or []]) for p in operator_pods(core)]
        logs = {p.metadata.name: (core.read_namespaced_pod_log(p.metadata.name, RELEASE_NAMESPACE, tail_lines=30)
                                  if p.status.phase in ("Running", "Failed", "Succeeded") else "")
                for p in operator_pods(core)}
        events = [(e.involved_object.name, e.reason, e.message)
                  for e in core.list_namespaced_event(RELEASE_NAMESPACE).items if e.type == "Warning"]
        return yaml.safe_dump({"pods": pods, "holder": lease_holder(cluster, kubectl), "warnings": events,
                               "logs": logs}, width=200)

    old = wait_for(lambda: len(running_tagged(core, OLD_TAG)) == 2 and running_tagged(core, OLD_TAG), 120,
                   "both operator pods of the install to run", describe)
    wait_for(lambda: lease_holder(cluster, kubectl) in old, 60, "one of them to hold the lease", describe)

    with custom_objects(cluster.kubeconfig) as objects:
        schedule = json.dumps({"epochSeconds": EPOCH_SECONDS})
        for name in JOBS:
            objects.create_namespaced_custom_object(GROUP, VERSION, JOBS_NAMESPACE, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
                "spec": {"numNodes": 2, "epochs": EPOCHS, "model": "resnet10t", "data": {"synthetic": {}},
                         "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                         "env": [{"name": "PETS_SIMULATE", "value": schedule}]}})
        wait_for(lambda: all(len(epochs_of(objects, n)) >= 2 for n in JOBS), 120,
                 "two epochs of each job in its status, from the first operator", describe)

        helm(helm_binary, cluster.kubeconfig, "upgrade", f"image.tag={NEW_TAG}", flags=("--reuse-values",))
        new = wait_for(lambda: len(running_tagged(core, NEW_TAG)) == 2
                       and not any(p.metadata.name in old for p in operator_pods(core))
                       and running_tagged(core, NEW_TAG), 180, "the rollout: two new pods, the old ones gone",
                       describe)
        wait_for(lambda: lease_holder(cluster, kubectl) in new, 60, "a new pod to hold the lease", describe)
        api_port = urlsplit(cluster.url).port
        for pod in operator_pods(core):
            assert_in_cluster(pod, api_port)
        at_handover = {n: (phase_of(objects, n), len(epochs_of(objects, n))) for n in JOBS}
        assert all(phase == "Running" and count < EPOCHS for phase, count in at_handover.values()), \
            f"the jobs must still train when the new operator leads: {at_handover}"

        wait_for(lambda: all(phase_of(objects, n) in ("Succeeded", "Failed") for n in JOBS), 240,
                 "every job to finish", describe)
        for name in JOBS:
            status = get_job(objects, name, JOBS_NAMESPACE)["status"]
            assert status["phase"] == "Succeeded", (name, status.get("message"))
            assert [e["epoch"] for e in status["epochs"]] == list(range(EPOCHS)), (name, status["epochs"])

    # Pod Security `restricted` admitted all four operator pods (it is enforced there: a bare pod is refused).
    namespace = core.read_namespace(RELEASE_NAMESPACE)
    assert namespace.metadata.labels[POD_SECURITY_ENFORCE] == "restricted"
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(RELEASE_NAMESPACE, {"metadata": {"name": "bare"}, "spec": {
            "containers": [{"name": "c", "image": f"pets-operator:{NEW_TAG}"}]}}, dry_run="All")
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'violates PodSecurity "restricted:latest"' in message, message
    created = [e for e in core.list_namespaced_event(RELEASE_NAMESPACE).items if e.reason == "SuccessfulCreate"]
    assert len({e.message for e in created}) >= 4, [e.message for e in created]
    assert not [e for e in core.list_namespaced_event(RELEASE_NAMESPACE).items if e.reason == "FailedCreate"]
