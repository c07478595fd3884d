"""The kit's `local up` command (`pets-operator local up`, the product's wiring of it, is in test_product.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from kubernetes import client, config

from pets_localkube import cli

from .helpers import local_up


def test_a_missing_crd_file_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--crd", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: CRD manifest {tmp_path / 'nope.yaml'} does not exist"


def test_kueue_needs_the_kubernetes_control_plane(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--with-kueue"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --with-kueue needs --control-plane kubernetes (Kueue runs "
                                               "against a real API server)")


def test_a_malformed_kueue_quota_is_refused_before_anything_starts(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--control-plane", "kubernetes", "--with-kueue",
                     "--kueue-quota", "cpu"]) == 2
    assert "error: --kueue-quota: quota 'cpu': expected resource=amount" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no control plane was started


def test_the_kits_local_up_applies_no_crd_of_its_own(tmp_path):
    kit = [sys.executable, "-c", "import sys; from pets_localkube import cli; sys.exit(cli.main())"]
    with local_up(kit, tmp_path / "work") as printed:
        assert "current-context: pets-local" in "".join(printed)
        with config.new_client_from_config(str(tmp_path / "work" / "kubeconfig")) as api:
            crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
            assert crds == []
            assert client.CoreV1Api(api).read_node("local-node").status.capacity["pods"] == "110"


def _up(command: list[str], workdir, *extra: str) -> tuple[subprocess.Popen, str]:
    """A `local up` until it prints `export KUBECONFIG=`; (the process, what it printed)."""
    up = subprocess.Popen([*command, "up", "--workdir", str(workdir), *extra], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    printed = []
    while True:
        line = up.stdout.readline()
        printed.append(line)
        if line.startswith("export KUBECONFIG=") or not line:
            return up, "".join(printed)


KIT = [sys.executable, "-c", "import sys; from pets_localkube import cli; sys.exit(cli.main())"]


def test_local_down_stops_the_local_up_of_its_workdir(tmp_path, capsys):
    up, printed = _up(KIT, tmp_path / "work")
    try:
        assert printed.endswith(f"export KUBECONFIG={tmp_path / 'work' / 'kubeconfig'}\n"), printed
        assert cli.running_up(tmp_path / "work") == up.pid
        assert cli.main(["down", "--workdir", str(tmp_path / "work")]) == 0
        assert capsys.readouterr().out == f"stopped the local cluster of {tmp_path / 'work'} (pid {up.pid})\n"
        assert up.wait(timeout=10) == 0
        assert not (tmp_path / "work" / cli.PID_FILE).exists()
    finally:
        if up.poll() is None:
            up.kill()


def test_local_down_without_a_local_up_says_so(tmp_path, capsys):
    assert cli.main(["down", "--workdir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"error: no `local up` is running with work directory {tmp_path}\n"
    # A pid file left behind by an `up` that is gone (its pid possibly reused) names no running `up`.
    (tmp_path / cli.PID_FILE).write_text(f"{os.getpid()} 1\n")
    assert cli.running_up(tmp_path) is None
    assert cli.main(["down", "--workdir", str(tmp_path)]) == 1


def test_the_kubernetes_control_plane_without_binaries_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = cli.main(["up", "--workdir", str(tmp_path / "w"), "--control-plane", "kubernetes",
                     "--bin-dir", str(tmp_path / "empty")])
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: cannot start the local cluster: step 'locate binaries': etcd, kube-apiserver, ")
    assert "hack/control_plane.sh" in error


def test_a_control_plane_arg_needs_the_kubernetes_control_plane_and_a_component(tmp_path, capsys):
    assert cli.main(["up", "--workdir", str(tmp_path), "--control-plane-arg", "kube-scheduler=--v=2"]) == 2
    assert "--control-plane-arg 'kube-scheduler=--v=2': COMPONENT=FLAG, with --control-plane kubernetes" \
        in capsys.readouterr().err
    assert cli.main(["up", "--workdir", str(tmp_path), "--control-plane", "kubernetes",
                     "--control-plane-arg", "kube-scheduler"]) == 2
    assert list(tmp_path.iterdir()) == []  # nothing was started


def test_the_pods_capacity_and_the_components_flags_reach_the_clusters(tmp_path):
    from pets_localkube.cluster import LocalCluster
    from pets_localkube.kubernetes_cluster import APISERVER_FLAGS, KubernetesCluster
    assert LocalCluster(tmp_path / "a", pods=2020).capacity["pods"] == "2020"
    cluster = KubernetesCluster(tmp_path / "b", pods=620, extra_args={
        "kube-apiserver": ["--audit-log-path=x"], "kube-scheduler": ["--kube-api-qps=200"]})
    assert cluster.capacity["pods"] == "620"
    assert cluster.plane.extra_args == {"kube-apiserver": [*APISERVER_FLAGS, "--audit-log-path=x"],
                                        "kube-scheduler": ["--kube-api-qps=200"]}
