"""Small helpers for the local-cluster tests (clients, sample objects, polling)."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

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
