"""`pets-operator local up --control-plane kubernetes` and `local down`: Kubernetes' own control plane
with the local kubelet as its Node, from the command line, and nothing left running after `down`."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from pets_localkube.control_plane import free_port
from pets_localkube.runtimes.process import processes_marked

pytestmark = pytest.mark.realcluster


def processes_under(directory: Path) -> list[str]:
    """`pid: command line` of live processes whose command line names `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(directory) in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def test_local_up_with_kubernetes_runs_a_node_and_local_down_stops_everything(control_plane_bin, kubectl, tmp_path):
    workdir, kubeconfig, port = tmp_path / "work", tmp_path / "out" / "kubeconfig", free_port()
    kubeconfig.parent.mkdir()
    env = {**os.environ, "PETS_CONTROL_PLANE_BIN": str(control_plane_bin)}
    up = subprocess.Popen([sys.executable, "-m", "pets_operator", "local", "up", "--control-plane", "kubernetes",
                           "--workdir", str(workdir), "--port", str(port), "--cpu", "2",
                           "--kubeconfig-out", str(kubeconfig)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        printed = []
        while not printed or not (printed[-1].startswith("export KUBECONFIG=") or printed[-1] == ""):
            printed.append(up.stdout.readline())
        assert printed[-1] == f"export KUBECONFIG={workdir / 'kubeconfig'}\n", "".join(printed)
        assert printed[0].startswith(f"Kubernetes' control plane at https://127.0.0.1:{port} (node local-node, 2 CPUs")

        nodes = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
                               capture_output=True, text=True, timeout=60)
        assert nodes.stdout.split()[:2] == ["local-node", "Ready"], nodes.stderr
        with config.new_client_from_config(config_file=str(kubeconfig)) as api:
            crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("petstrainingjobs.training.pets.dev")
            assert crd.spec.group == "training.pets.dev"  # the product's CRD, applied at start
            core = client.CoreV1Api(api)
            pod = core.create_namespaced_pod("default", {"metadata": {"name": "sleeper"}, "spec": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "300"]}]}})
            deadline = time.monotonic() + 60
            while core.read_namespaced_pod("sleeper", "default").status.phase != "Running":
                assert time.monotonic() < deadline, "the pod never ran"
                time.sleep(0.25)
        assert processes_marked(f"{pod.metadata.uid}/main")
        assert processes_under(workdir)  # etcd, kube-apiserver, ... name the work directory

        down = subprocess.run([sys.executable, "-m", "pets_operator", "local", "down", "--workdir", str(workdir)],
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert down.stdout == f"stopped the local cluster of {workdir} (pid {up.pid})\n"
        assert up.wait(timeout=10) == 0
        assert processes_under(workdir) == []
        assert processes_marked(f"{pod.metadata.uid}/main") == []
    finally:
        if up.poll() is None:
            up.kill()


def test_local_up_with_kueue_installs_kueue_and_its_queues_and_down_stops_it(control_plane_bin, kubectl, tmp_path):
    """`local up --control-plane kubernetes --with-kueue`: Kueue runs (its own process, its webhooks; here
    with waitForPodsReady on, in the Configuration it was given), a ResourceFlavor, a ClusterQueue of the
    default quota (one 2-node group of manifests/job.yaml) and a LocalQueue in the namespace given, all
    Active; `local down` ends Kueue with the rest."""
    from pets_localkube.kueue import locate_release

    try:
        kueue_bin = locate_release().bin_dir
    except RuntimeError as error:
        pytest.skip(str(error))
    workdir, kubeconfig = tmp_path / "work", tmp_path / "kubeconfig"
    env = {**os.environ, "PETS_CONTROL_PLANE_BIN": str(control_plane_bin), "PETS_KUEUE_BIN": str(kueue_bin)}
    up = subprocess.Popen([sys.executable, "-m", "pets_operator", "local", "up", "--control-plane", "kubernetes",
                           "--with-kueue", "--kueue-local-queue", "team-a", "--kueue-wait-for-pods-ready", "30",
                           "--workdir", str(workdir), "--cpu", "2", "--kubeconfig-out", str(kubeconfig)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        printed = []
        while not printed or not (printed[-1].startswith("export KUBECONFIG=") or printed[-1] == ""):
            printed.append(up.stdout.readline())
        assert printed[-1].startswith("export KUBECONFIG="), "".join(printed)
        said = next(line for line in printed if line.startswith("Kueue at https://127.0.0.1:"))
        print(f"\n{said}", end="")
        assert "LocalQueue default/team-a onto ClusterQueue cluster-queue (quota cpu=1,memory=2Gi); " \
            "waitForPodsReady timeout 30s" in said
        config = yaml.safe_load((workdir / "kueue" / "kueue-config.yaml").read_text())
        assert config["waitForPodsReady"]["timeout"] == "30s"

        def get(*what: str) -> str:
            result = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", *what, "-o",
                                     "jsonpath={.items[*].metadata.name} {.items[*].status.conditions[0].type}="
                                     "{.items[*].status.conditions[0].status}"],
                                    capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            return result.stdout
        assert get("resourceflavors").startswith("default-flavor")
        assert get("clusterqueues") == "cluster-queue Active=True"
        assert get("localqueues", "-n", "default") == "team-a Active=True"
        quota = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "get", "clusterqueue", "cluster-queue", "-o",
                                "jsonpath={.spec.resourceGroups[0].flavors[0].resources}"],
                               capture_output=True, text=True, timeout=60).stdout
        assert quota == '[{"name":"cpu","nominalQuota":"1"},{"name":"memory","nominalQuota":"2Gi"}]', quota
        assert any("kueue-config.yaml" in line for line in processes_under(workdir))

        down = subprocess.run([sys.executable, "-m", "pets_operator", "local", "down", "--workdir", str(workdir)],
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=10) == 0
        assert processes_under(workdir) == []
    finally:
        if up.poll() is None:
            up.kill()
