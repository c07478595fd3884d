"""The local API server's fan-out under load: shared stored objects, batched watch writes, collector wake-ups."""
from __future__ import annotations

import asyncio
import threading

import pytest
from kubernetes import client, watch

from pets_localkube import store
from pets_localkube.collector import needs_sweep

from .helpers import api_client, wait_for

KEY = ("", "configmaps")


def configmap(name: str, rv: int, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv), **meta}}


def test_a_stored_object_is_shared_with_its_change_and_handed_out_as_copies():
    objects = store.Store()
    changes: list[store.Change] = []
    objects.on_change(changes.append)
    body = configmap("a", 2)
    objects.put(KEY, body)
    body["data"]["k"] = "changed by the caller"  # the caller's dict is not the stored one
    assert changes[0].obj is objects.peek(KEY, "default", "a")
    assert changes[0].obj["data"] == {"k": "v"}
    copy = objects.get(KEY, "default", "a")
    copy["data"]["k"] = "changed by a reader"
    assert objects.peek(KEY, "default", "a")["data"] == {"k": "v"}
    assert [obj["metadata"]["name"] for _, obj in objects.peek_all()] == ["a"]


@pytest.mark.parametrize("change_type, old_meta, new_meta, expected", [
    ("ADDED", None, {}, False),
    ("ADDED", None, {"ownerReferences": [{"uid": "owner"}]}, True),
    ("ADDED", None, {"finalizers": ["x"]}, True),
    ("MODIFIED", {}, {}, False),  # a status or data change
    ("MODIFIED", {"labels": {"a": "1"}}, {"labels": {"a": "2"}}, False),
    ("MODIFIED", {}, {"ownerReferences": [{"uid": "owner"}]}, True),
    ("MODIFIED", {"finalizers": ["x"]}, {}, True),
    ("MODIFIED", {}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, True),
    ("MODIFIED", {"deletionTimestamp": "t"}, {"deletionTimestamp": "t"}, True),  # still being deleted
    ("DELETED", {}, {}, True),
])
def test_the_collector_wakes_only_for_changes_that_can_give_it_work(change_type, old_meta, new_meta, expected):
    old = None if old_meta is None else configmap("a", 2, **old_meta)
    change = store.Change(change_type, KEY, 3, configmap("a", 3, **new_meta), old)
    assert needs_sweep(change) is expected


@pytest.mark.parametrize("change_type, old_meta, new_meta, expected", [
    ("ADDED", None, {"ownerReferences": [{"uid": "live"}]}, False),  # a pod of a running job
    ("ADDED", None, {"ownerReferences": [{"uid": "gone"}]}, True),  # dangling: garbage at once
    ("ADDED", None, {"ownerReferences": [{"uid": "deleting"}]}, True),  # its owner may wait for it (foreground)
    ("ADDED", None, {"finalizers": ["x"]}, False),  # a finalizer is work only once the object is deleted
    ("MODIFIED", {}, {"finalizers": ["x"]}, False),
    ("MODIFIED", {"ownerReferences": [{"uid": "deleting"}]}, {}, True),  # its foreground owner may finish now
    ("MODIFIED", {}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, True),
])
def test_with_the_owners_at_hand_the_collector_wakes_only_when_an_owner_is_gone_or_going(
        change_type, old_meta, new_meta, expected):
    owners = {"live": configmap("live", 1), "deleting": configmap("deleting", 1, deletionTimestamp="t")}
    old = None if old_meta is None else configmap("a", 2, **old_meta)
    change = store.Change(change_type, KEY, 3, configmap("a", 3, **new_meta), old)
    assert needs_sweep(change, owners.get) is expected


def test_a_burst_of_changes_reaches_every_watch_complete_and_in_order(local_cluster):
    """Changes made in one event-loop turn are queued together and leave in one write per stream."""
    count = 200
    with api_client(local_cluster) as api:
        core = client.CoreV1Api(api)
        start = core.list_namespaced_config_map("default").metadata.resource_version
        streams: list[list[tuple[str, str, int, str]]] = [[], []]

        def follow(seen):
            for event in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=start,
                                              timeout_seconds=5):
                obj = event["object"]
                seen.append((event["type"], obj.metadata.name, int(obj.metadata.resource_version), obj.api_version))
                if len(seen) == count:
                    return

        followers = [threading.Thread(target=follow, args=(seen,)) for seen in streams]
        for follower in followers:
            follower.start()
        wait_for(lambda: sum(w.key == KEY for w in list(local_cluster.server.store._watchers)) == 2,
                 what="both watches subscribed")

        async def burst():  # on the cluster's loop, with no await in between: one turn
            resource = local_cluster.server.registry.find("", "v1", "configmaps")
            for index in range(count):
                local_cluster.server.storage.create(resource, "default", {"metadata": {"name": f"burst-{index}"}})

        asyncio.run_coroutine_threadsafe(burst(), local_cluster._loop).result(timeout=10)
        for follower in followers:
            follower.join(timeout=20)
    for seen in streams:
        assert [(t, n, v) for t, n, _, v in seen] == [("ADDED", f"burst-{i}", "v1") for i in range(count)]
        versions = [rv for _, _, rv, _ in seen]
        assert versions == sorted(versions) and versions[0] > int(start)
    assert streams[0] == streams[1]
