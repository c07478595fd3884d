"""The notebook path's stack: a LocalCluster, the real operator as a subprocess, KUBECONFIG pointing at it,
so `PetsTrainingJobClient()` and `cluster_launcher` connect as they would from a user's notebook."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "manifests" / "crd.yaml"
SERVERS = ["emulated", pytest.param("kubernetes", marks=pytest.mark.realcluster)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "notebook_cluster" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_servers"):
        metafunc.parametrize("notebook_cluster", SERVERS, indirect=True)


def started_cluster(tmp_path: Path, request: pytest.FixtureRequest):
    """The emulated API server, or (param "kubernetes") kube-apiserver with the local kubelet as its Node and
    the jobs' namespace under Pod Security `restricted`, as tests/e2e's `cluster` fixture has them."""
    if getattr(request, "param", "emulated") == "kubernetes":
        from pets_localkube.kubernetes_cluster import KubernetesCluster
        from tests.e2e.conftest import control_plane_bin

        return KubernetesCluster(tmp_path / "cluster", cpu=2, crds=[CRD], bin_dir=control_plane_bin(request.config))
    from pets_localkube import LocalCluster

    return LocalCluster(workdir=tmp_path / "cluster", cpu=2, crds=[CRD])


@pytest.fixture
def notebook_cluster(tmp_path, monkeypatch, request):
    """A local cluster and the operator; KUBECONFIG set for this process and the kernels it starts."""
    with started_cluster(tmp_path, request) as cluster:
        if getattr(request, "param", "emulated") == "kubernetes":
            from tests.e2e.conftest import NAMESPACE, restrict_pod_security

            restrict_pod_security(cluster.kubeconfig, NAMESPACE)
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # a pod's service account would come first
        log_path = tmp_path / "operator.log"
        env = {**os.environ, "PETS_OPERATOR_LIVENESS_PORT": "0", "PETS_OPERATOR_LOG_LEVEL": "INFO"}
        with log_path.open("wb") as log:
            operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env,
                                        stdout=log, stderr=subprocess.STDOUT)
        cluster.operator_log = log_path
        try:
            yield cluster
        finally:
            operator.terminate()
            try:
                operator.wait(15)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait(5)


@pytest.fixture
def client(notebook_cluster):
    from pets_client.client import PetsTrainingJobClient

    return PetsTrainingJobClient()
