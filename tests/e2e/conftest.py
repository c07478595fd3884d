"""The e2e stack: a cluster, the real operator as a subprocess, the official client.

The cluster is the project's emulated API server (`LocalCluster`) unless a test (or its module)
carries `@pytest.mark.both_servers`: then it runs twice, `[emulated]` and `[kubernetes]`, the
second on Kubernetes' own control plane with the local kubelet as its Node (`KubernetesCluster`,
binaries from hack/control_plane.sh; marked `realcluster`, skipped with the reason when they are
not built and there is no Go to build them). docs/real-cluster.md lists where the two differ.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from pets_api import GROUP, PLURAL, VERSION
from pets_localkube import LocalCluster, product
from pets_localkube.kubernetes_cluster import KubernetesCluster

REPO = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).with_name("stand_in.py")
NAMESPACE = "default"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
SERVERS = ["emulated", pytest.param("kubernetes", marks=pytest.mark.realcluster)]
_CONTROL_PLANE = pytest.StashKey[tuple[str, str]]()  # tests/realcluster/conftest.py's _prepare result


class OperatorProcess:
    """`python -m pets_operator run` against the cluster; kill -9 and start again at will."""

    def __init__(self, kubeconfig: Path, log_dir: Path, extra_env: dict[str, str]):
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
                    "PETS_OPERATOR_LOG_LEVEL": "INFO", "PETS_OPERATOR_RESTART_BACKOFF_SECONDS": "1", **extra_env}
        self.log_dir = log_dir
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        log = (self.log_dir / f"operator-{self.starts}.log").open("wb")
        self.process = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=self.env,
                                        stdout=log, stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("operator-*.log")))


class Api:
    def __init__(self, kubeconfig: Path):
        client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def create_job(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob",
                "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)

    def job(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def delete_job(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)

    def pods(self, job: str) -> list:
        return self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{GROUP}/job-name={job}").items

    def services(self, job: str) -> list:
        return [s for s in self.core.list_namespaced_service(NAMESPACE).items if s.metadata.name == f"{job}-workers"]

    def events(self, name: str) -> list:
        return [e for e in self.core.list_namespaced_event(NAMESPACE).items if e.involved_object.name == name]


def wait_for(what: str, check: Callable[[], Any], timeout: float, describe: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{describe()}")


def stand_in_env() -> dict[str, str]:
    return {"PETS_OPERATOR_TRAINER_COMMAND": json.dumps([sys.executable, str(STAND_IN)])}


@pytest.fixture(name="wait_for")
def wait_for_fixture():
    return wait_for


@pytest.fixture(name="stand_in_env")
def stand_in_env_fixture():
    return stand_in_env()


@pytest.fixture
def cluster_crds() -> list[Path]:
    return [REPO / "manifests" / "crd.yaml"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cluster" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_servers"):
        metafunc.parametrize("cluster", SERVERS, indirect=True)


def _control_plane_build():
    """tests/realcluster/conftest.py as a plain module: its `_prepare` (check, build with Go, or skip)."""
    spec = importlib.util.spec_from_file_location("pets_realcluster_build", REPO / "tests" / "realcluster" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or _CONTROL_PLANE in config.stash:
        return
    if any(item.get_closest_marker("realcluster") for item in session.items):  # both_servers, or the real one only
        config.stash[_CONTROL_PLANE] = _control_plane_build()._prepare(config)


def control_plane_bin(config: pytest.Config) -> Path:
    if _CONTROL_PLANE not in config.stash:
        config.stash[_CONTROL_PLANE] = _control_plane_build()._prepare(config)
    kind, value = config.stash[_CONTROL_PLANE]
    if kind == "skip":
        pytest.skip(value)
    if kind == "fail":
        pytest.fail(value)
    return Path(value)


@pytest.fixture
def cluster(tmp_path, cluster_crds, request):
    """The emulated API server, or (param "kubernetes") kube-apiserver with the local kubelet as its Node."""
    if getattr(request, "param", "emulated") == "kubernetes":
        running = KubernetesCluster(tmp_path / "cluster", cpu=2, crds=cluster_crds, bin_dir=control_plane_bin(request.config),
                                    entrypoints=product.ENTRYPOINTS, workload=product.TRAINER)
    else:
        running = LocalCluster(workdir=tmp_path / "cluster", cpu=2, crds=cluster_crds, entrypoints=product.ENTRYPOINTS,
                               workload=product.TRAINER)
    with running:
        if isinstance(running, KubernetesCluster):
            restrict_pod_security(running.kubeconfig, NAMESPACE)
        yield running


def restrict_pod_security(kubeconfig: Path, namespace: str) -> None:
    """Jobs on kube-apiserver run where users are told to run them: under Pod Security `restricted`,
    enforced by the real PodSecurity admission (the emulator has none: docs/emulator-divergences.md)."""
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
    core.patch_namespace(namespace, {"metadata": {"labels": {POD_SECURITY_ENFORCE: "restricted"}}})


@pytest.fixture
def api(cluster) -> Api:
    return Api(cluster.kubeconfig)


@pytest.fixture
def operator_process(cluster, tmp_path, request):
    """A factory: operator_process(extra_env) -> started OperatorProcess, stopped in teardown."""
    started: list[OperatorProcess] = []

    def start(extra_env: dict[str, str] | None = None) -> OperatorProcess:
        log_dir = tmp_path / f"operator-{len(started)}"
        log_dir.mkdir()
        # POD_ID: the leader-election identity, one per "pod" and kept across its restarts, as in a cluster.
        env = {"POD_ID": f"operator-{len(started)}", **(extra_env or {})}
        process = OperatorProcess(cluster.kubeconfig, log_dir, env).start()
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
