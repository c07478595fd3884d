"""Kubernetes' own control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
built by hack/control_plane.sh), started by `pets_localkube.control_plane`: the pinned version,
the packaged CRD under the real schema and CEL, PodSecurity admission, the controllers and the
scheduler at work, and clean stops (also of failed starts)."""
from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pets_localkube.control_plane import ControlPlaneError, KubernetesControlPlane, port_in_use

pytestmark = pytest.mark.realcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "manifests" / "crd.yaml"
SAMPLE_JOB = REPO_ROOT / "manifests" / "job.yaml"
GROUP, VERSION, PLURAL = "training.pets.dev", "v1alpha1", "petstrainingjobs"


def wait_for(condition, timeout: float = 60, interval: float = 0.25, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def new_namespace(api_client, labels: dict[str, str] | None = None) -> str:
    """A fresh namespace, returned once its `default` ServiceAccount exists (pods need it)."""
    core = client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})

    def has_default_sa():
        try:
            return core.read_namespaced_service_account("default", name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    wait_for(has_default_sa, what=f"ServiceAccount {name}/default")
    return name


def processes_mentioning(text: str) -> list[str]:
    """`pid: command line` of every live process whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


# -- the version --------------------------------------------------------------------------

def test_server_reports_the_pinned_version(control_plane, api_client, pinned, kubectl):
    info = client.VersionApi(api_client).get_code()
    expected = pinned["kubernetes"]
    assert info.git_version == expected
    assert (info.major, info.minor) == ("1", expected.split(".")[1])
    assert info.git_tree_state == "clean"

    done = subprocess.run([kubectl, "--kubeconfig", str(control_plane.kubeconfig), "version", "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["serverVersion"]["gitVersion"] == expected


# -- the CRD, its schema and its CEL rules --------------------------------------------------

@pytest.fixture(scope="module")
def crd_installed(api_client):
    manifest = yaml.safe_load(CRD.read_text())
    extensions = client.ApiextensionsV1Api(api_client)
    try:
        extensions.create_custom_resource_definition(manifest)
    except ApiException as error:
        pytest.fail(f"the real API server refused manifests/crd.yaml: {error.status} {error.body}")

    def established():
        crd = extensions.read_custom_resource_definition(manifest["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    wait_for(established, what="the CRD to be Established")
    return manifest


def _create_job(api_client, namespace: str, body: dict) -> dict:
    objects = client.CustomObjectsApi(api_client)
    for _ in range(40):  # the discovery of a just-established CRD can lag a moment
        try:
            return objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        except ApiException as error:
            if error.status != 404:
                raise
            time.sleep(0.25)
    raise AssertionError("the PetsTrainingJob resource was never served")


def _refusal(api_client, namespace: str, body: dict) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        _create_job(api_client, namespace, body)
    return caught.value.status, json.loads(caught.value.body)["message"]


def test_crd_applies_and_the_real_schema_and_cel_refuse_invalid_specs(api_client, crd_installed):
    namespace = new_namespace(api_client)
    sample = yaml.safe_load(SAMPLE_JOB.read_text())

    created = _create_job(api_client, namespace, sample)
    assert created["spec"]["numNodes"] == sample["spec"]["numNodes"]

    too_few = copy.deepcopy(sample)
    too_few["metadata"]["name"] = "too-few-nodes"
    too_few["spec"]["numNodes"] = 0
    code, message = _refusal(api_client, namespace, too_few)
    assert code == 422
    assert "spec.numNodes" in message and "greater than or equal to 1" in message

    no_data = copy.deepcopy(sample)
    no_data["metadata"]["name"] = "no-data"
    del no_data["spec"]["data"]
    code, message = _refusal(api_client, namespace, no_data)
    assert code == 422
    assert "data is required" in message  # the x-kubernetes-validations rule, evaluated by Kubernetes' CEL

    # A transition rule (self == oldSelf) on an update.
    objects = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as caught:
        objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, sample["metadata"]["name"],
                                               {"spec": {"numNodes": 3}})
    assert caught.value.status == 422
    assert "numNodes is immutable" in json.loads(caught.value.body)["message"]


# -- admission: PodSecurity ----------------------------------------------------------------

def _pod(name: str, privileged: bool) -> dict:
    container: dict = {"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}
    if privileged:
        container["securityContext"] = {"privileged": True}
    else:
        container["securityContext"] = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
                                        "capabilities": {"drop": ["ALL"]},
                                        "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}


def test_restricted_namespace_refuses_a_privileged_pod(api_client):
    core = client.CoreV1Api(api_client)
    namespace = new_namespace(api_client, {"pod-security.kubernetes.io/enforce": "restricted"})

    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(namespace, _pod("privileged", privileged=True))
    assert caught.value.status == 403
    message = json.loads(caught.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message and "privileged" in message

    core.create_namespaced_pod(namespace, _pod("restricted", privileged=False))  # a compliant pod is admitted


# -- the controllers and the scheduler -----------------------------------------------------

def test_job_controller_scheduler_and_garbage_collector(api_client):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    namespace = new_namespace(api_client)
    node = f"node-{namespace}"
    # A node object (there is no kubelet): room for one pod. The pod tolerates the taints that the
    # node lifecycle controller puts on a node that never reports Ready.
    core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                      "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                                 "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}})
    try:
        pod_template = _pod("unused", privileged=False)["spec"]
        pod_template.update({"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                             "tolerations": [{"operator": "Exists"}]})
        batch.create_namespaced_job(namespace, {"metadata": {"name": "work"}, "spec": {
            "backoffLimit": 0, "ttlSecondsAfterFinished": 600, "template": {"spec": pod_template}}})

        def job_pod():
            pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=work").items
            return pods[0] if pods and pods[0].spec.node_name else None

        pod = wait_for(job_pod, what="the job controller's pod, bound by the scheduler")
        assert pod.spec.node_name == node
        assert pod.metadata.owner_references[0].kind == "Job"

        batch.delete_namespaced_job("work", namespace, propagation_policy="Background")
        # Deleted by the garbage collector: gone, or Terminating (a bound pod waits for its kubelet).
        wait_for(lambda: all(p.metadata.deletion_timestamp for p in core.list_namespaced_pod(namespace).items),
                 what="the garbage collector to delete the job's pod")
    finally:
        core.delete_node(node)


# -- stopping ------------------------------------------------------------------------------

def test_stop_leaves_no_process_behind(control_plane_bin, tmp_path):
    plane = KubernetesControlPlane(tmp_path / "cp", port=0, bin_dir=control_plane_bin,
                                   kubeconfig_out=tmp_path / "out" / "kubeconfig")
    with plane:
        pids = plane.process_ids()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert (tmp_path / "out" / "kubeconfig").read_text() == plane.kubeconfig.read_text()
        assert processes_mentioning(str(tmp_path / "cp"))
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert processes_mentioning(str(tmp_path / "cp")) == []


def test_a_killed_component_starts_again_with_its_port_certificates_and_data(control_plane_bin, tmp_path):
    with KubernetesControlPlane(tmp_path / "cp", port=0, bin_dir=control_plane_bin) as plane:
        from kubernetes import config

        core = client.CoreV1Api(config.new_client_from_config(config_file=str(plane.kubeconfig)))
        core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}, "data": {"a": "1"}})
        url, pid = plane.url, plane.process_ids()["kube-apiserver"]

        plane.kill("kube-apiserver")
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not port_in_use(plane.port)  # nothing listens there any more
        with pytest.raises(ValueError, match="not running"):
            plane.kill("kube-apiserver")
        plane.start_again("kube-apiserver")
        # The same port, the same serving certificate and CA (the admin kubeconfig still works), the same data.
        assert plane.url == url and plane.process_ids()["kube-apiserver"] != pid
        assert core.read_namespaced_config_map("kept", "default").data == {"a": "1"}

        plane.kill("etcd")
        plane.start_again("etcd")  # its data directory kept: what was written before is there
        wait_for(lambda: _read_or_none(core, "kept"), timeout=60, what="kube-apiserver to reach etcd again")
        core.create_namespaced_config_map("default", {"metadata": {"name": "after"}, "data": {"b": "2"}})
        assert core.read_namespaced_config_map("after", "default").data == {"b": "2"}
        with pytest.raises(ValueError, match="is running"):
            plane.start_again("etcd")
        log = plane.logs["etcd"].read_text()
        assert log.count("# ") >= 2 and "--data-dir" in log  # both starts' command lines, the log appended to
    assert processes_mentioning(str(tmp_path / "cp")) == []


def _read_or_none(core, name: str):
    try:
        return core.read_namespaced_config_map(name, "default", _request_timeout=5)
    except Exception:  # noqa: BLE001 - 5xx or no answer while etcd comes back
        return None


def test_a_component_that_exits_early_stops_the_start_and_everything_started(control_plane_bin, tmp_path):
    plane = KubernetesControlPlane(tmp_path / "cp", port=0, bin_dir=control_plane_bin,
                                   extra_args={"kube-apiserver": ["--no-such-flag"]})
    with pytest.raises(ControlPlaneError) as caught:
        plane.start()
    message = str(caught.value)
    assert "step 'start kube-apiserver'" in message and "kube-apiserver exited early" in message
    assert str(tmp_path / "cp" / "logs" / "kube-apiserver.log") in message
    assert "unknown flag: --no-such-flag" in message  # the log's tail comes along
    assert plane.processes == {}
    assert processes_mentioning(str(tmp_path / "cp")) == []  # etcd, started before, is gone too


def test_a_port_in_use_is_named(control_plane_bin, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        plane = KubernetesControlPlane(tmp_path / "cp", port=port, bin_dir=control_plane_bin)
        with pytest.raises(ControlPlaneError, match=f"step 'check ports': port {port} on 127.0.0.1 is already in use"):
            plane.start()
    assert processes_mentioning(str(tmp_path / "cp")) == []


def test_missing_binaries_say_how_to_build_them(tmp_path):
    (tmp_path / "bin").mkdir()
    with pytest.raises(ControlPlaneError, match=r"step 'locate binaries'.*missing.*control_plane\.sh"):
        KubernetesControlPlane(tmp_path / "cp", port=0, bin_dir=tmp_path / "bin").start()
