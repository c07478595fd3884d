"""The real `kubectl` against the local cluster where it used to be fooled: server-side dry runs
(`apply --dry-run=server`, `diff`, `delete --dry-run=server`), protobuf bodies (`create namespace|
configmap|secret|serviceaccount|service`), Tables for one object (`get KIND NAME`, `-w`), and the
Events `kubectl describe pod` and `kubectl get events` show."""
from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import yaml
from kubernetes import client

from .helpers import GROUP, PLURAL, VERSION, api_client, job, python_pod, wait_for


@pytest.fixture
def run_kubectl(kubectl, local_cluster):
    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60, input=stdin, check=False)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done
    return run


@pytest.fixture
def api(local_cluster):
    with api_client(local_cluster) as api:
        yield api


def resource_version(api) -> int:
    """The cluster's current resourceVersion: a write anywhere raises it, a dry run does not."""
    return int(client.CoreV1Api(api).list_namespace().metadata.resource_version)


def write_job(tmp_path, name: str, **spec) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job(name, numNodes=2, **spec)))
    return str(path)


# --- dryRun ---------------------------------------------------------------------------------------

def test_apply_dry_run_server_creates_nothing_but_answers_the_defaulted_object(run_kubectl, api, tmp_path):
    manifest = write_job(tmp_path, "dry")
    before = resource_version(api)
    done = run_kubectl("apply", "--dry-run=server", "-f", manifest, "-o", "json")
    answered = json.loads(done.stdout)
    # Validation and defaulting ran: the answer carries the CRD's defaults, as the stored object would.
    assert answered["metadata"]["name"] == "dry" and answered["spec"]["numNodes"] == 2
    assert answered["spec"]["epochs"] == 5 and answered["spec"]["batchSize"] == 64
    assert "resourceVersion" not in answered["metadata"]
    assert "NotFound" in run_kubectl("get", "ptj", "dry", check=False).stderr
    assert resource_version(api) == before  # nothing stored, no watch event

    # An invalid object is refused by the same validation as a real create.
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(job("bad", numNodes=0)))
    refused = run_kubectl("apply", "--dry-run=server", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "spec.numNodes" in refused.stderr and "greater than or equal to 1" in refused.stderr


def test_diff_and_dry_run_apply_leave_the_live_object_alone(run_kubectl, api, tmp_path):
    if shutil.which("diff") is None:
        pytest.skip("kubectl diff needs a diff program")
    manifest = write_job(tmp_path, "live")
    run_kubectl("apply", "-f", manifest)
    custom = client.CustomObjectsApi(api)
    live = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "live")
    assert run_kubectl("diff", "-f", manifest).returncode == 0  # no difference: exit code 0

    changed = yaml.safe_load((tmp_path / "live.yaml").read_text())
    changed["metadata"]["labels"] = {"team": "vision"}
    changed["spec"]["ttlSecondsAfterFinished"] = 600
    (tmp_path / "live.yaml").write_text(yaml.safe_dump(changed))
    diff = run_kubectl("diff", "-f", manifest, check=False)
    assert diff.returncode == 1, diff.stderr  # 1: differences found
    assert "+    team: vision" in diff.stdout and "+  ttlSecondsAfterFinished: 600" in diff.stdout

    applied = run_kubectl("apply", "--dry-run=server", "-f", manifest)
    assert "live configured (server dry run)" in applied.stdout
    after = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "live")
    assert after["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert "labels" not in after["metadata"] and "ttlSecondsAfterFinished" not in after["spec"]
    # ... and the real apply then does change it.
    run_kubectl("apply", "-f", manifest)
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "live")["spec"]["ttlSecondsAfterFinished"] == 600


def test_delete_dry_run_server_deletes_nothing(run_kubectl, api, local_cluster):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "keep"}, "data": {"a": "b"}})
    core.create_namespaced_pod("default", python_pod("stays", "import time; time.sleep(60)"))
    wait_for(lambda: core.read_namespaced_pod("stays", "default").status.phase == "Running", what="the pod to run")
    before = resource_version(api)
    assert 'configmap "keep" deleted (server dry run)' in run_kubectl("delete", "configmap", "keep", "--dry-run=server").stdout
    assert 'pod "stays" deleted (server dry run)' in run_kubectl("delete", "pod", "stays", "--dry-run=server").stdout
    assert resource_version(api) == before
    assert core.read_namespaced_config_map("keep", "default").data == {"a": "b"}
    pod = core.read_namespaced_pod("stays", "default")
    assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
    assert len(local_cluster.process_ids()) == 1


def test_dry_run_through_the_client_and_values_other_than_all_are_refused(api):
    core = client.CoreV1Api(api)
    before = resource_version(api)
    answered = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cm-"}, "data": {"k": "v"}}, dry_run="All")
    assert answered.metadata.name.startswith("cm-") and answered.metadata.uid and answered.metadata.resource_version is None
    assert resource_version(api) == before and not core.list_namespaced_config_map("default").items

    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    patched = core.patch_namespaced_config_map("cm", "default", {"data": {"k": "changed"}}, dry_run="All")
    assert patched.data == {"k": "changed"}
    replaced = core.replace_namespaced_config_map("cm", "default", {"metadata": {"name": "cm"}, "data": {"other": "x"}}, dry_run="All")
    assert replaced.data == {"other": "x"}
    assert core.read_namespaced_config_map("cm", "default").data == {"k": "v"}
    with pytest.raises(client.ApiException) as exists:  # a dry-run create still conflicts with a stored name
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}}, dry_run="All")
    assert exists.value.status == 409

    # Anything but "All" is refused as a real API server refuses it: 422, the option validated.
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_config_map("default", {"metadata": {"name": "x"}}, dry_run="Bogus")
    body = json.loads(refused.value.body)
    assert (refused.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"] == 'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"'
    with pytest.raises(client.ApiException) as refused_delete:
        core.delete_namespaced_config_map("cm", "default", dry_run="Maybe")
    assert refused_delete.value.status == 422 and "DeleteOptions.meta.k8s.io" in json.loads(refused_delete.value.body)["message"]
    assert core.read_namespaced_config_map("cm", "default").data == {"k": "v"}


# --- protobuf ------------------------------------------------------------------------------------

PROTOBUF_CREATES = [
    # (kubectl create ..., kind for get, name, the fields compared with `--dry-run=client -o json`)
    (["namespace", "team-a"], "namespace", "team-a", ["metadata.labels"]),
    (["configmap", "settings", "--from-literal=a=b", "--from-literal=empty="], "configmap", "settings", ["data"]),
    (["secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=password=s3cr3t"], "secret", "creds", ["data"]),
    (["secret", "docker-registry", "pull", "--docker-server=registry.local", "--docker-username=u", "--docker-password=p"],
     "secret", "pull", ["data", "type"]),
    (["serviceaccount", "runner"], "serviceaccount", "runner", ["automountServiceAccountToken"]),
    (["service", "clusterip", "web", "--tcp=80:8080", "--tcp=443:https"], "service", "web", ["spec.ports", "spec.selector", "spec.type"]),
    (["service", "nodeport", "exposed", "--tcp=80:8080", "--node-port=30080"], "service", "exposed",
     ["spec.ports", "spec.selector", "spec.type"]),
]


def _field(obj: dict, path: str):
    for key in path.split("."):
        obj = (obj or {}).get(key)
    return obj


@pytest.mark.parametrize("args, kind, name, fields", PROTOBUF_CREATES, ids=[" ".join(c[0][:2]) for c in PROTOBUF_CREATES])
def test_kubectl_create_sends_protobuf_and_the_object_is_stored_as_sent(run_kubectl, args, kind, name, fields):
    sent = json.loads(run_kubectl("create", *args, "--dry-run=client", "-o", "json").stdout)
    verbose = run_kubectl("create", *args, "-v=8")
    assert "Content-Type: application/vnd.kubernetes.protobuf" in verbose.stderr  # it really went as protobuf
    assert f"{kind}/{name} created" in verbose.stdout
    stored = json.loads(run_kubectl("get", kind, name, "-o", "json").stdout)
    assert stored["metadata"]["name"] == name and stored["metadata"]["uid"]
    for field in fields:
        assert _field(stored, field) == _field(sent, field), field


def test_created_namespace_and_secret_are_usable(run_kubectl, api):
    run_kubectl("create", "namespace", "team-b")
    core = client.CoreV1Api(api)
    assert core.read_namespace("team-b").status.phase == "Active"
    run_kubectl("create", "secret", "generic", "token", "-n", "team-b", "--from-literal=token=abc")
    secret = core.read_namespaced_secret("token", "team-b")
    assert secret.data == {"token": "YWJj"} and secret.type == "Opaque"
    assert "AlreadyExists" in run_kubectl("create", "namespace", "team-b", check=False).stderr


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def test_protobuf_of_a_kind_it_cannot_read_is_refused_clearly(api):
    """A Pod in protobuf (kubectl never sends one; a Go program could): 415 naming what is read."""
    type_meta = _length_delimited(1, b"v1") + _length_delimited(2, b"Pod")
    body = b"k8s\x00" + _length_delimited(1, type_meta) + _length_delimited(2, _length_delimited(1, _length_delimited(1, b"p")))
    rest = api.rest_client
    url = f"{api.configuration.host}/api/v1/namespaces/default/pods"
    response = rest.pool_manager.request("POST", url, body=body, headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    status = json.loads(response.data)
    assert response.status == 415 and status["reason"] == "UnsupportedMediaType"
    assert "v1 ConfigMap" in status["message"] and "not v1 Pod" in status["message"] and "application/json" in status["message"]
    garbage = rest.pool_manager.request("POST", url, body=b"k8s\x00\x0a\xff", headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    assert garbage.status == 400 and "could not be decoded as application/vnd.kubernetes.protobuf" in json.loads(garbage.data)["message"]
    cbor = rest.pool_manager.request("POST", url, body=b"\xa0", headers={"Content-Type": "application/cbor"})
    assert cbor.status == 415  # client-go falls back to JSON on a 415 for CBOR
    assert not client.CoreV1Api(api).list_namespaced_pod("default").items


# --- Tables --------------------------------------------------------------------------------------

def test_get_one_object_shows_the_same_columns_as_the_list(run_kubectl, api, tmp_path):
    run_kubectl("apply", "-f", write_job(tmp_path, "tabled"))
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "tabled", {"status": {"phase": "Running", "currentEpoch": 2, "accuracy": 0.625}})
    header, row = run_kubectl("get", "ptj", "tabled").stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "NODES", "EPOCH", "ACCURACY", "AGE"]
    assert row.split()[:5] == ["tabled", "Running", "2", "2", "0.625"]
    assert run_kubectl("get", "ptj").stdout.splitlines()[0] == header

    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", python_pod("one", "import time; time.sleep(60)"))
    wait_for(lambda: core.read_namespaced_pod("one", "default").status.phase == "Running", what="the pod to run")
    header, row = run_kubectl("get", "pod", "one").stdout.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["one", "1/1", "Running", "0"]
    wide = run_kubectl("get", "pod", "one", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert wide[1].split()[5:7] == ["127.0.0.1", "local-node"]


def test_get_one_object_with_watch_prints_table_rows_as_it_changes(kubectl, local_cluster, api, tmp_path):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("watched", numNodes=2))
    watcher = subprocess.Popen([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), "get", "ptj", "watched", "-w"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        header = watcher.stdout.readline().split()
        first = watcher.stdout.readline().split()
        assert header == ["NAME", "PHASE", "NODES", "EPOCH", "ACCURACY", "AGE"]
        assert first[:2] == ["watched", "2"]  # no status yet: PHASE, EPOCH and ACCURACY are blank
        time.sleep(0.3)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "watched",
                                                     {"status": {"phase": "Running", "currentEpoch": 0, "accuracy": 0.5}})
        changed = watcher.stdout.readline().split()
        assert changed[:5] == ["watched", "Running", "2", "0", "0.5"]
    finally:
        watcher.kill()
        watcher.communicate(timeout=10)


# --- Events --------------------------------------------------------------------------------------

def test_describe_pod_and_get_events_show_the_scheduler_and_kubelet_events(run_kubectl, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", python_pod("described", "print('hi')"))
    wait_for(lambda: core.read_namespaced_pod("described", "default").status.phase == "Succeeded", what="the pod to finish")
    wait_for(lambda: {"Scheduled", "Created", "Started"} <= {e.reason for e in core.list_namespaced_event("default").items},
             what="the pod's events")
    described = run_kubectl("describe", "pod", "described").stdout
    events = described.split("Events:", 1)[1]
    lines = [line.split() for line in events.strip().splitlines()[2:]]
    # Type  Reason  Age  From  Message
    assert [line[:2] for line in lines] == [["Normal", "Scheduled"], ["Normal", "Created"], ["Normal", "Started"]]
    assert [line[3] for line in lines] == ["default-scheduler", "kubelet", "kubelet"]
    assert "Successfully assigned default/described to local-node" in events
    assert "Created container: main" in events and "Started container main" in events

    listed = run_kubectl("get", "events").stdout.splitlines()
    assert listed[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any(line.split()[1:4] == ["Normal", "Started", "pod/described"] for line in listed[1:])
