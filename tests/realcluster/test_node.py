"""The local kubelet as a real Node of Kubernetes' own control plane (`pets_localkube.kubernetes_cluster`):
registered and Ready with its Lease, held to its own objects by the Node authorizer and
NodeRestriction, running the pods kube-scheduler binds to it, their logs through kube-apiserver
(`kubectl logs`, `-f`), and the real operator's PetsTrainingJob from start to garbage collection."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from pets_api import GROUP, PLURAL, VERSION
from pets_localkube import product
from pets_localkube.kubernetes_cluster import KubernetesCluster
from pets_localkube.node import LEASE_DURATION_SECONDS, LEASE_NAMESPACE

pytestmark = pytest.mark.realcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
STAND_IN = REPO_ROOT / "tests" / "e2e" / "stand_in.py"
NODE = "local-node"


def wait_for(condition, timeout: float = 60, interval: float = 0.25, what: str = "condition", describe=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{describe()}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def cluster(control_plane_bin, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("node-cluster")
    with KubernetesCluster(workdir, cpu=4, memory="16Gi", crds=product.crds(), bin_dir=control_plane_bin,
                           entrypoints=product.ENTRYPOINTS, workload=product.TRAINER) as running:
        yield running


@pytest.fixture(scope="module")
def core(cluster):
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as api:
        yield client.CoreV1Api(api)


@pytest.fixture(scope="module")
def run_kubectl(cluster, kubectl):
    def run(*args: str, kubeconfig: Path | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([kubectl, "--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
    return run


@pytest.fixture
def namespace(core) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _exists(lambda: core.read_namespaced_service_account("default", name)),
             what=f"ServiceAccount {name}/default")
    return name


def _exists(read) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _pod(name: str, script: str, restart: str = "Never", **container) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": restart, "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script], **container}]}}


def _phase(core, namespace: str, name: str) -> str | None:
    try:
        return core.read_namespaced_pod(name, namespace).status.phase
    except ApiException as error:
        if error.status == 404:
            return None
        raise


# -- the Node ----------------------------------------------------------------------------------

def test_the_local_node_is_ready_with_its_lease_renewed_and_never_tainted(cluster, core, run_kubectl):
    listed = run_kubectl("get", "nodes", "--no-headers")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:2] == [NODE, "Ready"]

    node = core.read_node(NODE)
    assert node.status.capacity == {"cpu": "4", "memory": "16Gi", "pods": "110"}
    assert node.status.allocatable == node.status.capacity
    assert [(a.type, a.address) for a in node.status.addresses] == [("InternalIP", "127.0.0.1"), ("Hostname", NODE)]
    assert node.status.daemon_endpoints.kubelet_endpoint.port == cluster.kubelet_port
    assert node.status.node_info.kubelet_version.startswith(client.VersionApi(core.api_client).get_code().git_version)

    coordination = client.CoordinationV1Api(core.api_client)
    lease = coordination.read_namespaced_lease(NODE, LEASE_NAMESPACE)
    assert lease.spec.holder_identity == NODE and lease.spec.lease_duration_seconds == LEASE_DURATION_SECONDS
    assert lease.metadata.owner_references[0].kind == "Node" and lease.metadata.owner_references[0].uid == node.metadata.uid
    first = lease.spec.renew_time
    wait_for(lambda: coordination.read_namespaced_lease(NODE, LEASE_NAMESPACE).spec.renew_time > first, timeout=25,
             interval=1, what="the lease to be renewed (every 10 s)")
    # The node lifecycle controller saw it alive all along: no not-ready or unreachable taint.
    assert not core.read_node(NODE).spec.taints


def test_the_node_may_touch_only_its_own_objects(cluster, run_kubectl):
    as_node = {"kubeconfig": cluster.node_kubeconfig}
    whoami = run_kubectl("auth", "whoami", "-o", "json", **as_node)
    assert whoami.returncode == 0, whoami.stderr
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:node:{NODE}" and "system:nodes" in user["groups"]

    # NodeRestriction: no labels outside the kubelet's set, no other Node.
    labelled = run_kubectl("label", "node", NODE, "node-role.kubernetes.io/control-plane=", **as_node)
    assert labelled.returncode != 0 and "is not allowed to modify labels" in labelled.stderr
    other = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "someone-else"}})
    created = run_kubectl("create", "-f", "-", input=other, **as_node)
    assert created.returncode != 0 and 'is not allowed to modify node "someone-else"' in created.stderr
    # The Node authorizer: pods only of this node, no secrets of pods not bound to it.
    all_pods = run_kubectl("get", "pods", "-A", **as_node)
    assert all_pods.returncode != 0 and "Forbidden" in all_pods.stderr
    secrets = run_kubectl("get", "secrets", "-n", "kube-system", **as_node)
    assert secrets.returncode != 0 and "Forbidden" in secrets.stderr


# -- pods --------------------------------------------------------------------------------------

def test_a_pod_runs_to_success_and_kubectl_logs_shows_its_output(cluster, core, run_kubectl, namespace):
    # The ServiceAccount admission gave the pod a kube-api-access volume: the kubelet fills it
    # (token by TokenRequest as the node, the CA, the namespace); an env value under its mountPath
    # is mapped to the local directory.
    script = 'echo hello from $HOSTNAME; echo second line; cat "$SA/namespace"; echo; test -s "$SA/token" && echo token ok'
    pod = _pod("hello", script, env=[{"name": "SA", "value": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: _phase(core, namespace, "hello") == "Succeeded", what="pod hello to succeed",
             describe=lambda: str(core.read_namespaced_pod("hello", namespace).status))
    done = core.read_namespaced_pod("hello", namespace)
    assert done.spec.node_name == NODE
    assert any(v.projected and v.name.startswith("kube-api-access-") for v in done.spec.volumes)
    status = done.status
    assert (status.pod_ip, status.host_ip) == ("127.0.0.1", "127.0.0.1")
    assert status.qos_class == "BestEffort" and status.start_time is not None
    terminated = status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    conditions = {c.type: c for c in status.conditions}
    assert conditions["PodScheduled"].status == "True" and conditions["Ready"].reason == "PodCompleted"
    assert all(c.last_transition_time is not None for c in status.conditions)

    logs = run_kubectl("logs", "-n", namespace, "hello")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == f"hello from hello\nsecond line\n{namespace}\ntoken ok\n"
    tail = run_kubectl("logs", "-n", namespace, "hello", "--tail=1")
    assert tail.stdout == "token ok\n"
    stamped = run_kubectl("logs", "-n", namespace, "hello", "--timestamps", "--limit-bytes=60")
    first_stamp = stamped.stdout.split(" ", 1)[0]
    assert datetime.datetime.fromisoformat(first_stamp[:26].replace("T", " ")) and len(stamped.stdout) == 60


def test_a_failing_pod_reports_its_exit_code_and_termination_message(core, namespace):
    pod = _pod("fails", "echo something broke; exit 3", terminationMessagePolicy="FallbackToLogsOnError")
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: _phase(core, namespace, "fails") == "Failed", what="pod fails to fail")
    terminated = core.read_namespaced_pod("fails", namespace).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert terminated.message.strip() == "something broke"


def test_a_restarting_pod_counts_its_restarts(core, namespace):
    core.create_namespaced_pod(namespace, _pod("flaky", "echo run; exit 1", restart="OnFailure"))
    wait_for(lambda: (core.read_namespaced_pod("flaky", namespace).status.container_statuses or [None])[0]
             and core.read_namespaced_pod("flaky", namespace).status.container_statuses[0].restart_count >= 2,
             timeout=30, what="two restarts")
    core.delete_namespaced_pod("flaky", namespace)
    wait_for(lambda: _phase(core, namespace, "flaky") is None, timeout=30, what="the deleted pod to be gone")


def test_kubectl_logs_follow_streams_a_running_pod(cluster, core, run_kubectl, namespace, kubectl):
    script = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done"
    core.create_namespaced_pod(namespace, _pod("talker", script))
    wait_for(lambda: _phase(core, namespace, "talker") == "Running", what="talker to run")
    follow = subprocess.Popen([kubectl, "--kubeconfig", str(cluster.kubeconfig), "logs", "-f", "-n", namespace, "talker"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = follow.stdout.readline()
        assert first.startswith("line ")
        assert _phase(core, namespace, "talker") == "Running"  # streamed while it runs, not after
        rest, errors = follow.communicate(timeout=30)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0, errors
    assert first + rest == "".join(f"line {i}\n" for i in range(1, 7))  # and it ended with the container
    assert _phase(core, namespace, "talker") == "Succeeded"


def test_deleting_a_running_pod_stops_it_and_removes_it(cluster, core, namespace):
    core.create_namespaced_pod(namespace, _pod("sleeper", "sleep 300"))
    wait_for(lambda: _phase(core, namespace, "sleeper") == "Running", what="sleeper to run")
    running = cluster.process_ids()["containers"]
    assert running
    core.delete_namespaced_pod("sleeper", namespace)
    wait_for(lambda: _phase(core, namespace, "sleeper") is None, timeout=30, what="the pod to be gone")
    assert not set(running) & set(cluster.process_ids()["containers"])


# -- the operator ------------------------------------------------------------------------------

@pytest.fixture
def operator(cluster, tmp_path):
    log = (tmp_path / "operator.log").open("wb")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
           "PETS_OPERATOR_LOG_LEVEL": "INFO",
           "PETS_OPERATOR_TRAINER_COMMAND": json.dumps([sys.executable, str(STAND_IN)])}
    process = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    yield lambda: (tmp_path / "operator.log").read_text(errors="replace")[-6000:]
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


def test_a_pets_training_job_runs_on_the_node_and_is_garbage_collected(cluster, core, run_kubectl, namespace,
                                                                         operator, tmp_path):
    job = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": "quick"},
           "spec": {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}},
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    applied = run_kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr

    objects = client.CustomObjectsApi(core.api_client)

    def status() -> dict:
        return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "quick").get("status") or {}

    def describe() -> str:
        pods = core.list_namespaced_pod(namespace).items
        return (f"status: {status()}\npods: {[(p.metadata.name, p.status.phase) for p in pods]}\n"
                f"operator log:\n{operator()}")

    final = wait_for(lambda: status().get("phase") == "Succeeded" and status(), timeout=120, interval=0.5,
                     what="the job to succeed", describe=describe)
    assert [e["epoch"] for e in final["epochs"]] == [0, 1, 2]
    assert final["workers"]["succeeded"] == 2

    pods = core.list_namespaced_pod(namespace, label_selector=f"{GROUP}/job-name=quick").items
    assert sorted(p.metadata.name for p in pods) == ["quick-0", "quick-1"]
    assert all(p.spec.node_name == NODE and p.status.qos_class == "Burstable" for p in pods)
    assert all(p.metadata.owner_references[0].kind == "PetsTrainingJob" for p in pods)
    logs = run_kubectl("logs", "-n", namespace, "quick-0")
    assert logs.returncode == 0, logs.stderr
    assert "epoch 2 done" in logs.stdout and '"event": "done"' in logs.stdout

    deleted = run_kubectl("delete", "-n", namespace, "petstrainingjob", "quick", "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=f"{GROUP}/job-name=quick").items,
             timeout=60, what="the garbage collector (and the kubelet) to remove the job's pods", describe=describe)
