"""Small helpers for the local-cluster tests (clients, sample objects, polling)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client, config

GROUP, VERSION, PLURAL = "training.pets.dev", "v1alpha1", "petstrainingjobs"


def api_client(cluster) -> client.ApiClient:
    return config.new_client_from_config(str(cluster.kubeconfig))


def job(name: str, **spec: Any) -> dict[str, Any]:
    body = {"data": {"synthetic": {"classes": 2, "imagesPerClass": 4}}, **spec}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name}, "spec": body}


def python_pod(name: str, code: str, labels: dict[str, str] | None = None, restart: str = "Never", **container: Any) -> dict[str, Any]:
    spec_container = {"name": "main", "image": "python", "command": [sys.executable, "-u", "-c", code], **container}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 5, "containers": [spec_container]}}


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def pod_phase(core: client.CoreV1Api, name: str, namespace: str = "default") -> str | None:
    try:
        return core.read_namespaced_pod(name, namespace).status.phase
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except client.ApiException as error:
        return error.status == 404
    return False


@contextmanager
def local_up(command: list[str], workdir: Path) -> Iterator[list[str]]:
    """A `local up` command (`... up --workdir <workdir>` appended) until it prints `export KUBECONFIG=`;
    yields what it printed; SIGINT at the end, which it must answer by exiting 0."""
    up = subprocess.Popen([*command, "up", "--workdir", str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            lines.append(line)
            if line.startswith("export KUBECONFIG=") or not line:
                break
        assert lines[-1].strip() == f"export KUBECONFIG={workdir / 'kubeconfig'}", "".join(lines)
        yield lines
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
