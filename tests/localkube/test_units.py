"""The pure parts of the local cluster: selectors, patches, schema checks, quantities, history."""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from pets_localkube import environment, patch, scheduler, schema, selectors, store, tables
from pets_localkube.errors import ApiError

CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests" / "crd.yaml").read_text())
JOB_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def labelled(**labels):
    return {"metadata": {"labels": labels}}


@pytest.mark.parametrize("selector, labels, expected", [
    ("", {}, True), ("a=1", {"a": "1"}, True), ("a==1", {"a": "2"}, False), ("a!=1", {}, True),
    ("a in (1, 2),b", {"a": "2", "b": ""}, True), ("a notin (1)", {"a": "1"}, False), ("!a", {"a": "1"}, False),
])
def test_label_selectors(selector, labels, expected):
    assert selectors.parse_label_selector(selector)(labelled(**labels)) is expected


def test_field_selectors_compare_nested_fields():
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}}
    assert selectors.parse_field_selector("metadata.name=p,spec.nodeName!=x")(pod)
    assert not selectors.parse_field_selector("spec.nodeName=")(pod)
    with pytest.raises(ApiError):
        selectors.parse_field_selector("metadata.name")


def test_merge_and_strategic_patches():
    assert patch.merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == {"a": {"c": 2}, "l": [2]}
    target = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    merged = patch.strategic_merge_patch(target, {"spec": {"containers": [{"name": "b", "image": "z"}], "$setElementOrder/containers": []}})
    assert merged == {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]}}


def test_json_patch_move_copy_and_escapes():
    doc = {"a/b": 1, "list": [1, 2]}
    result = patch.json_patch(doc, [{"op": "copy", "from": "/a~1b", "path": "/c"}, {"op": "move", "from": "/list/0", "path": "/list/-"},
                                    {"op": "add", "path": "/list/0", "value": 0}])
    assert result == {"a/b": 1, "c": 1, "list": [0, 2, 1]} and doc == {"a/b": 1, "list": [1, 2]}


def test_schema_prunes_unknown_fields_but_keeps_preserved_ones():
    obj = {"apiVersion": "x", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}},
           "spec": {"data": {"synthetic": {"extra": 1}}, "bogus": True}, "status": {"anything": 1}, "top": 1}
    pruned = schema.prune(obj, JOB_SCHEMA)
    assert sorted(pruned) == ["spec.bogus", "spec.data.synthetic.extra", "top"]
    assert obj["status"] == {"anything": 1} and obj["metadata"]["labels"] == {"a": "b"}


def test_schema_defaults_apply_only_under_present_objects():
    obj = {"spec": {"data": {"synthetic": {}}}}
    schema.apply_defaults(obj, JOB_SCHEMA)
    assert obj["spec"]["data"]["synthetic"] == {"imagesPerClass": 20, "classes": 4, "imageSize": 64}
    assert "checkpoint" not in obj["spec"] and "persistentVolumeClaim" not in obj["spec"]["data"]


def test_schema_messages_are_kubernetes_style():
    checks = schema.CustomResourceSchema(JOB_SCHEMA)
    causes = checks.validate({"spec": {"data": {"hostPath": "relative"}, "batchSize": 5000, "image": ""}})
    assert {c["field"]: c["message"] for c in causes} == {
        "spec.batchSize": "Invalid value: 5000: spec.batchSize in body should be less than or equal to 4096",
        "spec.data.hostPath": "Invalid value: \"relative\": spec.data.hostPath in body should match '^/'",
        "spec.image": 'Invalid value: "": spec.image in body should be at least 1 chars long',
    }
    assert checks.validate({"spec": {"data": {"synthetic": {}}}, "status": {"startTime": "yesterday"}})[0]["field"] == "status.startTime"


def test_history_too_old_is_reported():
    history = store.Store()
    history._history = store.collections.deque(maxlen=2)
    key = ("", "configmaps")
    for index in range(4):
        history.put(key, {"metadata": {"name": f"c{index}", "uid": str(index), "resourceVersion": str(history.next_resource_version())}})
    assert history.changes_since(key, 1) is None
    assert [c.obj["metadata"]["name"] for c in history.changes_since(key, 3)] == ["c2", "c3"]


def test_pod_requests_are_exact_sums_of_kubernetes_quantities():
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
                                   {"resources": {"requests": {"cpu": "250m"}}}]}}
    assert scheduler.pod_requests(pod) == {"cpu": Decimal("0.5"), "memory": 2**30}
    with pytest.raises(ValueError, match="'lots' is not a quantity"):
        scheduler.pod_requests({"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}})
    # Ten 100m containers fill one CPU exactly (in floats they would not sum to 1).
    node = {"metadata": {"labels": {}}}
    tenths = {"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}] * 10}}
    assert scheduler.unschedulable_reason(tenths, node, {"cpu": Decimal(1)}) is None
    assert scheduler.unschedulable_reason(tenths, node, {"cpu": Decimal("0.999")}) == "0/1 nodes are available: 1 Insufficient cpu."


def test_cluster_dns_names_and_mount_paths():
    assert environment.is_cluster_dns_name("j-0.j-workers.default.svc")
    assert environment.is_cluster_dns_name("svc.ns.svc.cluster.local")
    assert not environment.is_cluster_dns_name("example.com")
    paths = environment.PathMap([("/data", Path("/tmp/d")), ("/data/inner", Path("/tmp/i"))])
    assert paths.local("/data/x/y") == "/tmp/d/x/y" and paths.local("/data/inner/z") == "/tmp/i/z"
    assert paths.local("/database") == "/database" and paths.local("relative") == "relative"
    assert environment.expand("$(A)-$$(A)-$(B)", {"A": "1"}) == "1-$(A)-$(B)"


def test_json_path_and_ages():
    assert tables.json_path({"status": {"items": [{"n": 1}]}}, ".status.items[0].n") == 1
    assert tables.json_path({}, ".status.phase") is None
    assert tables.wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not tables.wants_table("application/json")


def test_object_names_follow_the_kubernetes_rules():
    from pets_localkube.resources import Registry
    from pets_localkube.storage import Storage

    storage = Storage(store.Store(), Registry())
    kinds = {plural: storage.registry.find("", "v1", plural) for plural in ("services", "namespaces", "configmaps")}

    def refusal(plural: str, name: str) -> str | None:
        try:
            storage.create(kinds[plural], "default" if plural != "namespaces" else None, {"metadata": {"name": name}})
        except ApiError as error:
            assert error.code == 422
            return error.message
        return None

    assert refusal("services", "web-1") is None and refusal("namespaces", "1team") is None
    assert refusal("configmaps", "app.config") is None
    assert "a DNS-1035 label" in refusal("services", "1web")  # Services: must start with a letter
    assert "RFC 1123 label" in refusal("namespaces", "a.b")
    assert "RFC 1123 subdomain" in refusal("configmaps", "App")
    assert "at most 253 characters" in refusal("configmaps", "a" * 254)
