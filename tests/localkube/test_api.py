"""Conformance of the local API server, exercised only through the official `kubernetes` client."""
from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, watch

from .helpers import GROUP, PLURAL, VERSION, api_client, gone, job, wait_for


@pytest.fixture
def api(local_cluster):
    with api_client(local_cluster) as api:
        yield api


@pytest.fixture
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)


def configmap(name: str, labels: dict[str, str] | None = None, owner: dict | None = None) -> dict:
    meta = {"name": name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def error_of(call) -> tuple[int, dict]:
    with pytest.raises(client.ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)


# --- discovery and metadata ---------------------------------------------------------------------

def test_discovery_lists_builtin_and_custom_resources(api):
    core_names = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "pods/status", "pods/log", "services", "events", "configmaps", "namespaces", "nodes"} <= core_names
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert {"training.pets.dev", "apiextensions.k8s.io", "coordination.k8s.io", "events.k8s.io"} <= set(groups)
    assert groups["training.pets.dev"].preferred_version.version == "v1alpha1"
    resources = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources
    ptj = next(r for r in resources if r.name == PLURAL)
    assert (ptj.kind, ptj.namespaced, ptj.short_names) == ("PetsTrainingJob", True, ["ptj"])


def test_create_stamps_metadata_and_lists_have_kind_and_version(custom):
    first = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("a"))
    second = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("b"))
    meta = first["metadata"]
    assert len(meta["uid"]) == 36 and meta["uid"] != second["metadata"]["uid"]
    assert meta["generation"] == 1 and meta["creationTimestamp"].endswith("Z") and meta["namespace"] == "default"
    assert int(second["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    listing = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listing["kind"] == "PetsTrainingJobList" and listing["apiVersion"] == f"{GROUP}/{VERSION}"
    assert int(listing["metadata"]["resourceVersion"]) >= int(second["metadata"]["resourceVersion"])
    assert [i["metadata"]["name"] for i in listing["items"]] == ["a", "b"]


def test_generate_name_and_missing_namespace(core):
    made = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}, "data": {}})
    assert made.metadata.name.startswith("cm-") and len(made.metadata.name) == 8
    status, body = error_of(lambda: core.create_namespaced_config_map("nowhere", configmap("x")))
    assert (status, body["reason"], body["message"]) == (404, "NotFound", 'namespaces "nowhere" not found')


def test_not_found_and_already_exists_are_status_objects(core):
    status, body = error_of(lambda: core.read_namespaced_config_map("missing", "default"))
    assert (status, body["kind"], body["reason"], body["details"]["name"]) == (404, "Status", "NotFound", "missing")
    core.create_namespaced_config_map("default", configmap("twice"))
    status, body = error_of(lambda: core.create_namespaced_config_map("default", configmap("twice")))
    assert (status, body["reason"], body["message"]) == (409, "AlreadyExists", 'configmaps "twice" already exists')


# --- selectors, watches, resourceVersion ------------------------------------------------------

def test_list_filters_by_label_and_field_selectors(core):
    for name, labels in (("one", {"app": "a", "tier": "x"}), ("two", {"app": "a"}), ("three", {"app": "b"})):
        core.create_namespaced_config_map("default", configmap(name, labels))

    def names(**selectors):
        return sorted(c.metadata.name for c in core.list_namespaced_config_map("default", **selectors).items)

    assert names(label_selector="app=a") == ["one", "two"]
    assert names(label_selector="app=a,tier") == ["one"]
    assert names(label_selector="app in (a,b),!tier") == ["three", "two"]
    assert names(label_selector="app!=a") == ["three"]
    assert names(field_selector="metadata.name=two") == ["two"]
    assert names(field_selector="metadata.name!=two", label_selector="app=a") == ["one"]
    status, body = error_of(lambda: core.list_namespaced_config_map("default", label_selector="app in (a"))
    assert status == 400 and body["reason"] == "BadRequest"


def test_watch_sees_only_selected_objects_in_resource_version_order(core):
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", configmap("picked", {"app": "a"}))
    core.create_namespaced_config_map("default", configmap("ignored", {"app": "b"}))
    core.patch_namespaced_config_map("picked", "default", {"data": {"k": "changed"}})
    core.patch_namespaced_config_map("ignored", "default", {"metadata": {"labels": {"app": "a"}}})
    core.delete_namespaced_config_map("picked", "default")
    events = [(e["type"], e["object"].metadata.name, int(e["object"].metadata.resource_version))
              for e in watch.Watch().stream(core.list_namespaced_config_map, "default", label_selector="app=a",
                                            resource_version=start, timeout_seconds=1)]
    assert [(t, n) for t, n, _ in events] == [("ADDED", "picked"), ("MODIFIED", "picked"), ("ADDED", "ignored"), ("DELETED", "picked")]
    versions = [rv for _, _, rv in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions) and versions[0] > int(start)


def test_watch_without_resource_version_starts_with_the_current_objects_then_streams(core):
    core.create_namespaced_config_map("default", configmap("before"))
    seen: list[tuple[str, str]] = []

    def follow():
        for event in watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=2):
            seen.append((event["type"], event["object"].metadata.name))

    follower = threading.Thread(target=follow)
    follower.start()
    wait_for(lambda: seen, what="the initial ADDED")
    core.create_namespaced_config_map("default", configmap("after"))
    follower.join()
    assert seen == [("ADDED", "before"), ("ADDED", "after")]


def test_a_noop_update_keeps_the_resource_version(core):
    made = core.create_namespaced_config_map("default", configmap("same"))
    again = core.patch_namespaced_config_map("same", "default", {"data": {"k": "v"}})
    assert again.metadata.resource_version == made.metadata.resource_version


# --- status subresource, generation, patches, concurrency -------------------------------------

def test_status_is_written_only_through_the_status_subresource(custom):
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {**job("s"), "status": {"phase": "Running"}})
    assert "status" not in created
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "s",
                                                    {"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}})
    assert "status" not in patched and patched["metadata"]["labels"] == {"x": "y"} and patched["metadata"]["generation"] == 1
    with_status = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "s",
                                                               {"status": {"phase": "Running", "accuracy": 0.5}, "spec": {"epochs": 99}})
    assert with_status["status"] == {"phase": "Running", "accuracy": 0.5}
    assert with_status["spec"]["epochs"] == 5 and with_status["metadata"]["generation"] == 1
    spec_change = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "s", {"spec": {"ttlSecondsAfterFinished": 2}})
    assert spec_change["metadata"]["generation"] == 2 and spec_change["status"]["phase"] == "Running"


def test_status_writes_are_validated_too(custom):
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("v"))
    status, body = error_of(lambda: custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "v",
                                                                                 {"status": {"phase": "Exploded"}}))
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "status.phase"
    assert 'Unsupported value: "Exploded": supported values: "Pending", "Running", "Suspended", "Succeeded", "Failed"' in body["message"]


def test_json_patch_and_merge_patch(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "p"}, "data": {"a": "1", "b": "2"}})
    merged = core.patch_namespaced_config_map("p", "default", {"data": {"a": None, "c": "3"}})
    assert merged.data == {"b": "2", "c": "3"}
    patched = core.patch_namespaced_config_map("p", "default", [
        {"op": "test", "path": "/data/b", "value": "2"}, {"op": "replace", "path": "/data/b", "value": "two"},
        {"op": "add", "path": "/metadata/labels", "value": {"l": "1"}}, {"op": "remove", "path": "/data/c"}])
    assert patched.data == {"b": "two"} and patched.metadata.labels == {"l": "1"}
    status, _ = error_of(lambda: core.patch_namespaced_config_map("p", "default", [{"op": "test", "path": "/data/b", "value": "2"}]))
    assert status == 422


def test_stale_resource_version_is_a_conflict(core):
    made = core.create_namespaced_config_map("default", configmap("c"))
    core.patch_namespaced_config_map("c", "default", {"data": {"k": "newer"}})
    made.data = {"k": "stale"}
    status, body = error_of(lambda: core.replace_namespaced_config_map("c", "default", made))
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on configmaps "c": the object has been modified')
    current = core.read_namespaced_config_map("c", "default")
    current.data = {"k": "fresh"}
    assert core.replace_namespaced_config_map("c", "default", current).data == {"k": "fresh"}


# --- CRD validation and defaults ------------------------------------------------------------------

def test_a_valid_job_gets_the_schema_defaults(custom):
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                                  job("d", resources={"requests": {"cpu": "500m", "memory": 1073741824}}, checkpoint={}))
    spec = made["spec"]
    fields = ("numNodes", "processesPerNode", "model", "mixedPrecision", "seed", "epochs")
    assert tuple(spec[field] for field in fields) == (1, 1, "resnet50d", "no", 42, 5)
    assert spec["maxLearningRate"] == 0.03 and spec["masterPort"] == 29500 and spec["checkpoint"] == {"path": "/checkpoints", "resumeFrom": "SameJob"}
    assert spec["data"]["synthetic"] == {"classes": 2, "imagesPerClass": 4, "imageSize": 64}
    assert spec["resources"]["requests"] == {"cpu": "500m", "memory": 1073741824}


@pytest.mark.parametrize("spec, field, message", [
    ({"numNodes": 0}, "spec.numNodes", "Invalid value: 0: spec.numNodes in body should be greater than or equal to 1"),
    ({"numNodes": "two"}, "spec.numNodes", 'Invalid value: "two": spec.numNodes in body must be of type integer: "two"'),
    ({"maxLearningRate": 0}, "spec.maxLearningRate", "Invalid value: 0: spec.maxLearningRate in body should be greater than 0"),
    ({"mixedPrecision": "fp8"}, "spec.mixedPrecision", 'Unsupported value: "fp8": supported values: "no", "fp16", "bf16"'),
    ({"model": "bad model"}, "spec.model", "spec.model in body should match '^[A-Za-z0-9_.\\-]+$'"),
    ({"data": {"synthetic": {}, "hostPath": "/x"}}, "spec.data", "spec.data in body must validate one and only one schema (oneOf)"),
    ({"data": {}}, "spec.data", "spec.data in body must validate one and only one schema (oneOf)"),
    ({"resources": {"requests": {"cpu": 1.5}}}, "spec.resources.requests.cpu", "must validate at least one schema (anyOf)"),
    ({"env": [{"value": "x"}]}, "spec.env[0].name", "Required value"),
])
def test_an_invalid_job_is_refused_as_the_crd_says(custom, spec, field, message):
    status, body = error_of(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("bad", **spec)))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('PetsTrainingJob.training.pets.dev "bad" is invalid: ')
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert field in causes and message in causes[field], body["message"]
    assert gone(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "bad"))


def test_a_job_without_spec_is_refused(custom):
    without_spec = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": "e"}}
    status, body = error_of(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, without_spec))
    # The CRD has CEL rules: as on a real server, a missing spec also keeps them from running, and that is said.
    assert status == 422 and body["message"] == (
        'PetsTrainingJob.training.pets.dev "e" is invalid: [spec: Required value, <nil>: Invalid value: null: some validation '
        'rules were not checked because the object was invalid; correct the existing errors to complete validation]')


def test_unknown_fields_are_pruned_with_a_warning_or_refused_when_strict(api, custom):
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("u", colour="blue"))
    assert "colour" not in made["spec"]
    strict = job("w", colour="blue")
    response = api.rest_client.pool_manager.request(
        "POST", f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?fieldValidation=Strict",
        body=json.dumps(strict), headers={"Content-Type": "application/json"})
    assert response.status == 400 and 'unknown field "spec.colour"' in json.loads(response.data)["message"]
    warned = api.rest_client.pool_manager.request(
        "POST", f"{api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}",
        body=json.dumps(strict), headers={"Content-Type": "application/json"})
    assert warned.status == 201 and 'unknown field \\"spec.colour\\"' in warned.headers["Warning"]


def test_a_crd_applied_later_is_served_and_its_deletion_removes_its_objects(api):
    extensions = client.ApiextensionsV1Api(api)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"size": {"type": "integer", "maximum": 3}}}}}]}}
    made = extensions.create_custom_resource_definition(crd)
    assert {c.type for c in made.status.conditions} == {"Established", "NamesAccepted"}
    custom = client.CustomObjectsApi(api)
    def widget(name, size):
        return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "size": size}
    custom.create_cluster_custom_object("example.com", "v1", "widgets", widget("w", 2))
    status, _ = error_of(lambda: custom.create_cluster_custom_object("example.com", "v1", "widgets", widget("x", 9)))
    assert status == 422
    extensions.delete_custom_resource_definition("widgets.example.com")
    wait_for(lambda: gone(lambda: extensions.read_custom_resource_definition("widgets.example.com")), what="the CRD to go")
    status, _ = error_of(lambda: custom.list_cluster_custom_object("example.com", "v1", "widgets"))
    assert status == 404


# --- deletion: garbage collection and finalizers ---------------------------------------------

def test_dependents_are_garbage_collected_with_their_owner(core, custom):
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("owner"))
    core.create_namespaced_config_map("default", configmap("owned", owner=owner))
    other = core.create_namespaced_config_map("default", configmap("other-owner"))
    two_owners = configmap("shared", owner=owner)
    two_owners["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "ConfigMap", "name": "other-owner", "uid": other.metadata.uid})
    core.create_namespaced_config_map("default", two_owners)
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "owner")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map("owned", "default")), what="the dependent to be collected")
    def shared_with_one_owner():
        config_map = core.read_namespaced_config_map("shared", "default")
        return config_map if len(config_map.metadata.owner_references) == 1 else None
    shared = wait_for(shared_with_one_owner)
    assert shared.metadata.owner_references[0].uid == other.metadata.uid


def test_orphan_propagation_keeps_dependents(core, custom):
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("parent"))
    core.create_namespaced_config_map("default", configmap("child", owner=owner))
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "parent", propagation_policy="Orphan")
    wait_for(lambda: gone(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "parent")), what="the owner to go")
    assert core.read_namespaced_config_map("child", "default").metadata.owner_references is None


def test_foreground_deletion_removes_dependents_first(core, custom):
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("fg"))
    dependent = configmap("fg-child", owner=owner)
    dependent["metadata"]["finalizers"] = ["test/hold"]
    core.create_namespaced_config_map("default", dependent)
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fg", propagation_policy="Foreground")
    held = wait_for(lambda: core.read_namespaced_config_map("fg-child", "default").metadata.deletion_timestamp, what="the dependent to be deleted")
    assert held
    owner_now = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fg")
    assert "foregroundDeletion" in owner_now["metadata"]["finalizers"] and owner_now["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("fg-child", "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: gone(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fg")), what="the owner to go")


def test_finalizers_hold_deletion_until_removed(custom):
    body = job("fin")
    body["metadata"]["finalizers"] = ["pets.dev/cleanup"]
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fin")
    held = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fin")
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["pets.dev/cleanup"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fin", {"metadata": {"finalizers": []}})
    assert gone(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "fin"))


def test_deleting_a_namespace_deletes_its_contents(core):
    core.create_namespace({"metadata": {"name": "scratch"}})
    core.create_namespaced_config_map("scratch", configmap("inside"))
    assert core.delete_namespace("scratch")
    wait_for(lambda: gone(lambda: core.read_namespace("scratch")), what="the namespace to go")
    assert core.list_config_map_for_all_namespaces(field_selector="metadata.namespace=scratch").items == []


# --- events and leases ------------------------------------------------------------------------

def test_events_and_leases_are_accepted(api, core):
    event = core.create_namespaced_event("default", {
        "metadata": {"generateName": "kopf-event-"}, "type": "Normal", "reason": "Logging", "message": "hello",
        "involvedObject": {"kind": "PetsTrainingJob", "name": "j", "namespace": "default"}})
    assert event.metadata.name.startswith("kopf-event-")
    client.EventsV1Api(api).create_namespaced_event("default", {"metadata": {"name": "e2"}, "eventTime": "2025-01-01T00:00:00.000000Z",
                                                                "reason": "R", "action": "A", "reportingController": "c", "reportingInstance": "i"})
    client.CoordinationV1Api(api).create_namespaced_lease("default", {"metadata": {"name": "lock"}, "spec": {"holderIdentity": "me"}})
    assert client.CoordinationV1Api(api).read_namespaced_lease("lock", "default").spec.holder_identity == "me"
