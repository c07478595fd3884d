"""The emulator's answers that the differential test (tests/realcluster/test_differential.py) found
different from Kubernetes' and that were fixed: each checked here without a real control plane."""
from __future__ import annotations

import requests

from .helpers import GROUP, PLURAL, VERSION, job

NS = "default"


def url(cluster, path: str) -> str:
    return cluster.url + path


def jobs(cluster) -> str:
    return url(cluster, f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}")


def pod(name: str, image: str = "busybox:1.36") -> dict:
    return {"metadata": {"name": name},
            "spec": {"nodeName": "elsewhere", "containers": [{"name": "main", "image": image}]}}


def test_containers_get_the_api_defaults(local_cluster):
    pods = url(local_cluster, f"/api/v1/namespaces/{NS}/pods")
    tagged = requests.post(pods, json=pod("tagged"), timeout=10).json()["spec"]["containers"][0]
    latest = requests.post(pods, json=pod("latest", "busybox"), timeout=10).json()["spec"]["containers"][0]
    assert (tagged["imagePullPolicy"], latest["imagePullPolicy"]) == ("IfNotPresent", "Always")
    assert tagged["terminationMessagePath"] == "/dev/termination-log"
    assert tagged["terminationMessagePolicy"] == "File"


def test_a_pod_takes_a_new_container_image_but_keeps_the_rest_of_its_containers(local_cluster):
    pods = url(local_cluster, f"/api/v1/namespaces/{NS}/pods")
    requests.post(pods, json=pod("p"), timeout=10).raise_for_status()
    patch = {"spec": {"containers": [{"name": "main", "image": "busybox:1.37", "command": ["other"]}]}}
    answer = requests.patch(f"{pods}/p", json=patch, timeout=10,
                            headers={"Content-Type": "application/strategic-merge-patch+json"})
    container = answer.json()["spec"]["containers"][0]
    assert answer.status_code == 200
    assert container["image"] == "busybox:1.37"
    assert "command" not in container


def test_services_get_the_api_defaults_and_ports_are_validated(local_cluster):
    services = url(local_cluster, f"/api/v1/namespaces/{NS}/services")
    made = requests.post(services, json={"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}, timeout=10)
    spec = made.json()["spec"]
    assert (spec["sessionAffinity"], spec["ipFamilyPolicy"], spec["ipFamilies"], spec["internalTrafficPolicy"]) == \
        ("None", "SingleStack", ["IPv4"], "Cluster")
    refused = requests.post(services, json={"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 0}]}}, timeout=10)
    assert refused.status_code == 422
    assert sorted(c["field"] for c in refused.json()["details"]["causes"]) == \
        ["spec.ports[0].port", "spec.ports[0].targetPort"]


def test_the_pod_table_has_the_wide_columns_of_kubernetes(local_cluster):
    pods = url(local_cluster, f"/api/v1/namespaces/{NS}/pods")
    requests.post(pods, json=pod("t"), timeout=10).raise_for_status()
    table = requests.get(pods, timeout=10, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    names = [column["name"] for column in table["columnDefinitions"]]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    assert table["rows"][0]["cells"][7:] == ["<none>", "<none>"]


def test_strategic_merge_of_a_custom_resource_is_415(local_cluster):
    requests.post(jobs(local_cluster), json=job("j"), timeout=10).raise_for_status()
    answer = requests.patch(f"{jobs(local_cluster)}/j", json={"spec": {"epochs": 3}}, timeout=10,
                            headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert (answer.status_code, answer.json()["reason"]) == (415, "UnsupportedMediaType")


def test_a_custom_resource_asked_for_in_protobuf_only_is_406(local_cluster):
    requests.post(jobs(local_cluster), json=job("j"), timeout=10).raise_for_status()
    only = requests.get(f"{jobs(local_cluster)}/j", timeout=10, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    either = requests.get(f"{jobs(local_cluster)}/j", timeout=10,
                          headers={"Accept": "application/vnd.kubernetes.protobuf, application/json"})
    assert (only.status_code, either.status_code) == (406, 200)


def test_deleting_a_custom_resource_answers_a_status(local_cluster):
    made = requests.post(jobs(local_cluster), json=job("j"), timeout=10).json()
    answer = requests.delete(f"{jobs(local_cluster)}/j", timeout=10).json()
    assert (answer["kind"], answer["status"]) == ("Status", "Success")
    assert answer["details"] == {"name": "j", "group": GROUP, "kind": PLURAL, "uid": made["metadata"]["uid"]}
