"""The local scheduler on shared-cluster features: scheduling gates, and pod groups all or nothing
(Coscheduling's PodGroup) when the cluster runs a gang scheduler; through the official client."""
from __future__ import annotations

import pytest
from kubernetes import client

from pets_localkube import LocalCluster
from pets_localkube.gang import DEFAULT_GANG_SCHEDULER, GROUP, POD_GROUP_LABEL, VERSION

from .helpers import api_client, python_pod, wait_for

SLEEP = "import time; time.sleep(60)"
QUICK = "print('done')"


def scheduled(core, name: str):
    pod = core.read_namespaced_pod(name, "default")
    condition = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
    return pod.spec.node_name, condition


def test_a_gated_pod_waits_until_its_last_gate_is_removed(local_cluster):
    with api_client(local_cluster) as api:
        core = client.CoreV1Api(api)
        pod = python_pod("gated", QUICK)
        pod["spec"]["schedulingGates"] = [{"name": "example.com/one"}, {"name": "example.com/two"}]
        core.create_namespaced_pod("default", pod)
        condition = wait_for(lambda: scheduled(core, "gated")[1], what="PodScheduled")
        assert (condition.status, condition.reason) == ("False", "SchedulingGated")
        assert condition.message == "Scheduling is blocked due to non-empty scheduling gates"
        # A JSON patch (a list body), as Kueue removes its gate: a strategic merge patch would merge the list.
        core.patch_namespaced_pod("gated", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}])
        with pytest.raises(AssertionError):
            wait_for(lambda: scheduled(core, "gated")[0], timeout=1, what="binding")
        core.patch_namespaced_pod("gated", "default", [{"op": "remove", "path": "/spec/schedulingGates"}])
        assert wait_for(lambda: scheduled(core, "gated")[0], what="binding") == "local-node"
        wait_for(lambda: core.read_namespaced_pod("gated", "default").status.phase == "Succeeded", what="the pod to run")


@pytest.fixture
def gang_cluster(tmp_path):
    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, gang_scheduler=DEFAULT_GANG_SCHEDULER) as cluster:
        yield cluster


def member(name: str, group: str, code: str = SLEEP) -> dict:
    pod = python_pod(name, code, labels={POD_GROUP_LABEL: group}, resources={"requests": {"cpu": "1"}})
    pod["spec"]["schedulerName"] = DEFAULT_GANG_SCHEDULER
    return pod


def pod_group(name: str, min_member: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"minMember": min_member}}


def test_a_pod_group_is_placed_whole_or_not_at_all(gang_cluster):
    with api_client(gang_cluster) as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for name in ("a", "b"):
            custom.create_namespaced_custom_object(GROUP, VERSION, "default", "podgroups", pod_group(name, 2))
        core.create_namespaced_pod("default", member("a-0", "a"))
        condition = wait_for(lambda: scheduled(core, "a-0")[1], what="PodScheduled")
        assert condition.reason == "Unschedulable" and "minMember of group: 2" in condition.message, condition
        core.create_namespaced_pod("default", member("b-0", "b", QUICK))
        core.create_namespaced_pod("default", member("b-1", "b", QUICK))
        core.create_namespaced_pod("default", member("a-1", "a", QUICK))
        # The node has room for two of the four pods: one whole group goes first, never one pod of each.
        wait_for(lambda: all(scheduled(core, n)[0] for n in ("b-0", "b-1")) or all(scheduled(core, n)[0] for n in ("a-0", "a-1")),
                 what="one whole group placed")
        placed = {n for n in ("a-0", "a-1", "b-0", "b-1") if scheduled(core, n)[0]}
        assert placed in ({"a-0", "a-1"}, {"b-0", "b-1"}), placed
        if placed == {"a-0", "a-1"}:  # group a sleeps: end it so that b's turn comes
            core.delete_namespaced_pod("a-0", "default", grace_period_seconds=0)
            core.delete_namespaced_pod("a-1", "default", grace_period_seconds=0)
        else:
            wait_for(lambda: "Insufficient cpu for all 2 pods of pod group default/a together"
                     in scheduled(core, "a-0")[1].message, what="group a's reason")
        wait_for(lambda: all(scheduled(core, n)[0] for n in ("b-0", "b-1")), what="group b placed")
        wait_for(lambda: all(core.read_namespaced_pod(n, "default").status.phase == "Succeeded" for n in ("b-0", "b-1")),
                 what="group b to run")
        if placed == {"b-0", "b-1"}:
            wait_for(lambda: all(scheduled(core, n)[0] for n in ("a-0", "a-1")), what="group a placed once b is done")


def test_a_pod_whose_pod_group_does_not_exist_is_placed_alone(gang_cluster):
    with api_client(gang_cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", member("lone", "nowhere", QUICK))
        assert wait_for(lambda: scheduled(core, "lone")[0], what="binding") == "local-node"
