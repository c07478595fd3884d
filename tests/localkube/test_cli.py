"""`pets-operator local up`: starts the cluster, prints a usable kubeconfig, stops on SIGINT."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from kubernetes import client, config

from pets_localkube import cli


def test_local_up_prints_a_kubeconfig_that_the_client_can_use(tmp_path):
    workdir = tmp_path / "work"
    up = subprocess.Popen([sys.executable, "-m", "pets_operator", "local", "up", "--workdir", str(workdir), "--cpu", "1"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            lines.append(line)
            if line.startswith("export KUBECONFIG=") or not line:
                break
        assert lines[-1].strip() == f"export KUBECONFIG={workdir / 'kubeconfig'}", "".join(lines)
        assert "current-context: pets-local" in "".join(lines)
        with config.new_client_from_config(str(workdir / "kubeconfig")) as api:
            node = client.CoreV1Api(api).read_node("local-node")
            assert node.status.capacity["cpu"] == "1"
            names = [r.name for r in client.CustomObjectsApi(api).get_api_resources("training.pets.dev", "v1alpha1").resources]
            assert "petstrainingjobs" in names
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0


def test_a_missing_crd_file_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--crd", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: CRD manifest {tmp_path / 'nope.yaml'} does not exist"
