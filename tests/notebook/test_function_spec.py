"""spec.function and data.mountPath: the pods the operator builds for a shipped function, the operator's
checks, the CRD's (schema and immutability rules, on the local API server), and the local kubelet
projecting a ConfigMap's binaryData into the pod's files."""
from __future__ import annotations

import base64
import sys
import time

import kubernetes_validate
import pytest

from pets_api import contract
from pets_operator import builders
from pets_operator.spec import with_defaults
from pets_operator.validation import spec_problems

JOB = {"metadata": {"name": "fn", "namespace": "ml", "uid": "uid-1"}}
DATA_DIR = "/home/me/pets/images"


def pod_of(spec, index=0):
    return builders.pod_body(JOB, with_defaults(spec, "pets-trainer:0.1.0"), index, attempt=0)


def env_of(pod):
    return {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}


def problems_of(spec):
    return spec_problems("fn", with_defaults(spec, "img"), contract.RESERVED_ENV)


def test_a_function_job_mounts_its_configmap_and_names_the_file():
    pod = pod_of({"numNodes": 2, "function": {"configMap": "fn-function"},
                  "data": {"hostPath": DATA_DIR, "mountPath": DATA_DIR}})
    env = env_of(pod)
    assert env["FUNCTION_FILE"] == "/var/run/pets-function/function.pkl"
    assert env["DATA_DIR"] == DATA_DIR
    assert env["MASTER_ADDR"] == "fn-0.fn-workers.ml.svc" and env["NUM_MACHINES"] == "2"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["function"] == {"name": "function", "configMap": {"name": "fn-function"}}
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["function"] == {"name": "function", "mountPath": "/var/run/pets-function", "readOnly": True}
    assert mounts["data"]["mountPath"] == DATA_DIR
    assert pod["spec"]["containers"][0]["command"] == ["pets-train"], "the same entrypoint and rendezvous"
    kubernetes_validate.validate(pod, "1.30", strict=True)


def test_a_function_job_without_data_has_no_data_volume():
    pod = pod_of({"function": {"configMap": "fn-function", "key": "payload"}})
    env = env_of(pod)
    assert env["FUNCTION_FILE"] == "/var/run/pets-function/payload"
    assert "DATA_DIR" not in env
    assert "data" not in {v["name"] for v in pod["spec"]["volumes"]}
    assert problems_of({"function": {"configMap": "fn-function"}}) == []


def test_the_recipe_is_unchanged_and_still_needs_data():
    env = env_of(pod_of({"data": {"synthetic": {}}}))
    assert env["DATA_DIR"] == "/data" and "FUNCTION_FILE" not in env
    assert problems_of({}) == ["data must set exactly one of persistentVolumeClaim, hostPath, synthetic, download, oxfordPets; got none"]


@pytest.mark.parametrize("spec, problem", [
    ({"function": {"configMap": "Not_A_Name"}}, "function.configMap 'Not_A_Name' must be a ConfigMap name"),
    ({"data": {"synthetic": {}, "mountPath": "/"}}, "data.mountPath '/' must not be '/' or under /dev or "
                                                     "/var/run/pets-function"),
    ({"data": {"synthetic": {}, "mountPath": "/dev/shm"}}, "data.mountPath '/dev/shm' must not be '/'"),
    ({"data": {"synthetic": {}, "mountPath": "/var/run/pets-function/x"}}, "data.mountPath"),
    ({"data": {"synthetic": {}, "mountPath": "/a/../b"}}, "data.mountPath '/a/../b' must not contain '..'"),
    ({"data": {"synthetic": {}, "mountPath": DATA_DIR}, "checkpoint": {"path": DATA_DIR + "/ckpt"}},
     f"checkpoint.path '{DATA_DIR}/ckpt' must not be '/' or inside the data mount {DATA_DIR}"),
])
def test_the_operator_refuses_what_the_schema_cannot(spec, problem):
    assert any(p.startswith(problem) for p in problems_of(spec)), problems_of(spec)


def test_the_api_server_takes_a_function_job_and_keeps_it_immutable(local_cluster):
    import kubernetes

    api = kubernetes.client.CustomObjectsApi(kubernetes.config.new_client_from_config(str(local_cluster.kubeconfig)))
    group = ("training.pets.dev", "v1alpha1", "default", "petstrainingjobs")

    def body(name, spec):
        return {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
                "metadata": {"name": name}, "spec": spec}

    created = api.create_namespaced_custom_object(*group, body("fn", {"function": {"configMap": "fn-function"}}))
    assert created["spec"]["function"] == {"configMap": "fn-function", "key": "function.pkl"}, "key: the CRD's default"
    with pytest.raises(kubernetes.client.ApiException) as neither:
        api.create_namespaced_custom_object(*group, body("none", {"numNodes": 2}))
    assert "data is required (where the images are), unless function is set" in neither.value.body
    with pytest.raises(kubernetes.client.ApiException) as bad_key:
        api.create_namespaced_custom_object(*group, body("key", {"function": {"configMap": "x", "key": "a/b"}}))
    assert bad_key.value.status == 422
    for change in ({"function": {"configMap": "other"}}, {"data": {"synthetic": {}}}):
        with pytest.raises(kubernetes.client.ApiException) as immutable:
            api.patch_namespaced_custom_object(*group, "fn", {"spec": change})
        assert "immutable" in immutable.value.body, immutable.value.body
    with_data = api.create_namespaced_custom_object(*group, body("d", {"data": {"synthetic": {}}}))
    assert with_data["spec"]["data"]["mountPath"] == "/data", "the CRD's default"


def test_the_local_kubelet_projects_binary_data(local_cluster):
    """A small, separate kubelet feature this path needs: ConfigMap binaryData becomes the file's bytes."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(local_cluster.kubeconfig)))
    payload = bytes(range(256)) * 4
    core.create_namespaced_config_map("default", {
        "metadata": {"name": "blob"}, "data": {"text": "héllo"},
        "binaryData": {"bin": base64.b64encode(payload).decode()}})
    script = ("import os, sys; d = os.environ['MOUNT']; "
              "sys.stdout.write(open(d + '/bin', 'rb').read().hex() + ' ' + open(d + '/text', encoding='utf-8').read())")
    core.create_namespaced_pod("default", {
        "metadata": {"name": "reader"},
        "spec": {"restartPolicy": "Never", "volumes": [{"name": "cm", "configMap": {"name": "blob"}}],
                 "containers": [{"name": "c", "image": "python", "command": [sys.executable, "-c", script],
                                 "env": [{"name": "MOUNT", "value": "/etc/blob"}],
                                 "volumeMounts": [{"name": "cm", "mountPath": "/etc/blob", "readOnly": True}]}]}})
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod("reader", "default").status.phase not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert core.read_namespaced_pod_log("reader", "default").rstrip("\n") == payload.hex() + " héllo"
