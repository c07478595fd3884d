"""What the kubelet keeps of its Node (`node.py`): the bodies, the Lease and its renewal; the pod
conditions' transition times; projected volumes; all against the emulated API server.
(The same code against Kubernetes' own control plane: tests/realcluster/test_node.py.)"""
from __future__ import annotations

import asyncio
import base64

from kubernetes import client

from pets_localkube.client import Client
from pets_localkube.node import (
    LEASE_DURATION_SECONDS,
    LEASE_NAMESPACE,
    NodeAgent,
    lease_object,
    node_labels,
    node_status,
)
from pets_localkube.projected import token_request
from pets_localkube.runtimes.process import with_transitions

from .helpers import api_client, pod_phase, python_pod, wait_for

CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110"}


def test_the_node_status_says_where_its_kubelet_api_is_and_that_it_is_ready():
    status = node_status("n1", CAPACITY, heartbeat="2026-01-01T00:00:10Z", ready_since="2026-01-01T00:00:00Z",
                         kubelet_port=10250)
    assert status["capacity"] == status["allocatable"] == CAPACITY
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "n1"}]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready == [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "message": "local kubelet is posting ready status",
                      "lastHeartbeatTime": "2026-01-01T00:00:10Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}
    assert "daemonEndpoints" not in node_status("n1", CAPACITY, "t", "t")  # no kubelet API served


def test_a_kubelet_sets_only_labels_noderestriction_lets_it_set():
    # NodeRestriction refuses a kubelet other kubernetes.io labels, e.g. node-role.kubernetes.io/*.
    assert node_labels("n1") == {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def test_the_lease_is_held_by_the_node_and_owned_by_its_node_object():
    lease = lease_object("n1", "uid-1", "2026-01-01T00:00:00.000001Z")
    assert lease["metadata"] == {"name": "n1", "namespace": "kube-node-lease", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}]}
    assert lease["spec"] == {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000001Z"}


def test_a_conditions_transition_time_moves_only_when_its_status_changes():
    first = with_transitions([], [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}], "t1")
    assert first == [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": "t1"}]
    same = with_transitions(first, [{"type": "Ready", "status": "False", "reason": "PodCompleted"}], "t2")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["reason"] == "PodCompleted"
    changed = with_transitions(same, [{"type": "Ready", "status": "True"}], "t3")
    assert changed == [{"type": "Ready", "status": "True", "lastTransitionTime": "t3"}]


def test_a_token_request_is_bound_to_the_pod():
    pod = {"metadata": {"name": "p", "uid": "u1"}}
    assert token_request(pod, {"path": "token", "expirationSeconds": 3607, "audience": "vault"})["spec"] == {
        "expirationSeconds": 3607, "audiences": ["vault"],
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}}
    assert "audiences" not in token_request(pod, {"path": "token"})["spec"]  # the API server's own audience


async def test_the_node_agent_registers_keeps_its_lease_fresh_and_its_ready_heartbeat(local_cluster):
    async with Client(local_cluster.url) as api:
        agent = NodeAgent(api, "second-node", CAPACITY, kubelet_port=12345, lease_renew_seconds=0.2,
                          status_report_seconds=0.5)
        await agent.register()
        await agent.register()  # a restarted kubelet finds its Node and Lease
        node = await api.get("/api/v1/nodes/second-node")
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 12345
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/second-node"
        lease = await api.get(lease_path)
        assert lease["spec"]["leaseDurationSeconds"] == LEASE_DURATION_SECONDS
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        heartbeat = [c for c in node["status"]["conditions"] if c["type"] == "Ready"][0]["lastHeartbeatTime"]

        beating = asyncio.create_task(agent.run())
        try:
            await asyncio.sleep(1.3)  # several renewals, at least one status report (stamped to the second)
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
        assert (await api.get(lease_path))["spec"]["renewTime"] > lease["spec"]["renewTime"]
        node = await api.get("/api/v1/nodes/second-node")
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"][0]
        assert ready["lastHeartbeatTime"] >= heartbeat and ready["status"] == "True"

        await api.delete(lease_path)
        await agent.renew_lease()  # a lease deleted meanwhile is created again
        assert (await api.get(lease_path))["spec"]["holderIdentity"] == "second-node"


def test_the_kubelet_keeps_the_latest_of_each_of_its_pods(local_cluster):
    with api_client(local_cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", python_pod("seen", "print('hi')"))
        wait_for(lambda: pod_phase(core, "seen") == "Succeeded", what="the pod to succeed")
        kubelet = local_cluster.kubelet
        wait_for(lambda: (kubelet.pod("default", "seen") or {}).get("status", {}).get("phase") == "Succeeded",
                 what="the kubelet's copy to catch up")
        assert kubelet.pod("default", "nope") is None
        core.delete_namespaced_pod("seen", "default")
        wait_for(lambda: kubelet.pod("default", "seen") is None, what="the deleted pod to leave the kubelet's view")


def test_a_projected_volume_holds_its_sources_files(local_cluster):
    with api_client(local_cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map("default", {"metadata": {"name": "root-ca"}, "data": {"ca.crt": "CERT", "x": "y"}})
        core.create_namespaced_secret("default", {"metadata": {"name": "creds"},
                                                  "data": {"password": base64.b64encode(b"s3cret").decode()}})
        code = ("import os; d = os.environ['MOUNT']; "
                "print(sorted(os.listdir(d)), open(d + '/ca.crt').read(), open(d + '/namespace').read(), "
                "open(d + '/auth/pw').read())")
        pod = python_pod("projected", code, env=[{"name": "MOUNT", "value": "/var/run/things"}],
                         volumeMounts=[{"name": "things", "mountPath": "/var/run/things", "readOnly": True}])
        pod["spec"]["volumes"] = [{"name": "things", "projected": {"sources": [
            {"configMap": {"name": "root-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"secret": {"name": "creds", "items": [{"key": "password", "path": "auth/pw"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]
        core.create_namespaced_pod("default", pod)
        wait_for(lambda: pod_phase(core, "projected") in ("Succeeded", "Failed"), what="the pod to finish")
        assert core.read_namespaced_pod_log("projected", "default") == "['auth', 'ca.crt', 'namespace'] CERT default s3cret\n"


def test_a_projected_token_the_server_cannot_issue_is_a_failed_mount(local_cluster):
    # The emulated server has no TokenRequest API: the volume cannot be set up, and the kubelet says so.
    with api_client(local_cluster) as api:
        core = client.CoreV1Api(api)
        pod = python_pod("tokened", "print('never')")
        pod["spec"]["volumes"] = [{"name": "kube-api-access-x", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}]
        core.create_namespaced_pod("default", pod)

        def failed_mount():
            return [e for e in core.list_namespaced_event("default").items
                    if e.involved_object.name == "tokened" and e.reason == "FailedMount"]

        events = wait_for(failed_mount, what="a FailedMount event")
        assert events[0].message.startswith('MountVolume.SetUp failed for volume "kube-api-access-x" : '
                                            'failed to fetch token for serviceaccount "default": 404')
        assert pod_phase(core, "tokened") == "Pending"

