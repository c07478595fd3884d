"""The e2e stack with the docker runtime: a LocalCluster whose kubelet runs containers from images."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pets_localkube import LocalCluster

from tests.e2e.conftest import REPO, Api, OperatorProcess, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from containers import unavailable


@pytest.fixture(scope="session")
def engine():
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def cluster(engine, tmp_path):
    with LocalCluster(workdir=tmp_path / "cluster", cpu=4, memory="16Gi", crds=[REPO / "manifests" / "crd.yaml"],
                      runtime="docker") as running:
        yield running


@pytest.fixture
def api(cluster) -> Api:
    return Api(cluster.kubeconfig)


@pytest.fixture(name="wait_for")
def wait_for_fixture():
    return wait_for


@pytest.fixture
def operator_process(cluster, tmp_path, request):
    started: list[OperatorProcess] = []

    def start(extra_env: dict[str, str] | None = None) -> OperatorProcess:
        log_dir = tmp_path / f"operator-{len(started)}"
        log_dir.mkdir()
        process = OperatorProcess(cluster.kubeconfig, log_dir, extra_env or {}).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        for process in started:
            print(process.logs()[-6000:])


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
