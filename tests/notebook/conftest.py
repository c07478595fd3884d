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


@pytest.fixture
def notebook_cluster(tmp_path, monkeypatch):
    """A local cluster and the operator; KUBECONFIG set for this process and the kernels it starts."""
    from pets_localkube import LocalCluster

    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, crds=[CRD]) as cluster:
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
