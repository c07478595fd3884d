"""A small notebook API for PetsTrainingJobs, on the official `kubernetes` client.

    from pets_operator.client import PetsTrainingJobClient

    client = PetsTrainingJobClient()                      # in-cluster, else KUBECONFIG / ~/.kube/config
    job = client.submit("pets", num_nodes=2, epochs=3, model="resnet50d",
                        data={"persistentVolumeClaim": {"claimName": "pets-images"}})
    job.wait(timeout=3600, on_epoch=print)                # prints each epoch as it finishes
    job.epochs()                                          # [{"epoch": 0, "accuracy": 0.88, ...}, ...]
    print(job.logs())                                     # pod 0: the trainer's output
    job.delete()

Spec fields are the CRD's (`kubectl explain ptj.spec`); top-level keywords may be given in
snake_case (`num_nodes`) or camelCase (`numNodes`). Nested values are passed as they are.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from pets_operator import API_VERSION, GROUP, KIND, PLURAL, VERSION
from pets_operator.names import pod_name
from pets_operator.status import FAILED, FINAL_PHASES

FINISHED = FINAL_PHASES
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class PetsClientError(RuntimeError):
    """A request was refused; the message is the API server's, `status` its HTTP status."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class JobFailed(PetsClientError):
    """`wait(raise_on_failure=True)` saw the job end in phase Failed."""


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def job_manifest(name: str, spec: dict[str, Any], namespace: str | None = None,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
            "spec": {camel_case(key): value for key, value in spec.items()}}


def _api_error(error: Exception) -> PetsClientError:
    """The API server's own message (from its Status body) instead of the client's HTTP dump."""
    body = getattr(error, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError):
        message = None
    status = getattr(error, "status", None)
    return PetsClientError(f"{message or getattr(error, 'reason', None) or error} (HTTP {status})", status)


def _load_api_client() -> Any:
    """The operator's own loader (`pets_operator.kube.load_api_client`: in-cluster, else the kubeconfig)."""
    from kubernetes import config

    from pets_operator.kube import load_api_client  # needs `kubernetes` only, not kopf

    try:
        return load_api_client()
    except config.ConfigException as error:
        raise PetsClientError(f"no cluster to talk to: {error}; set KUBECONFIG, "
                              "or run inside a pod with a service account") from None


def _in_cluster() -> bool:
    """Whether `_load_api_client` connects through the pod's service account (what it tries first)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_NAMESPACE_FILE.is_file()


def _default_namespace() -> str:
    """The namespace of the connection `_load_api_client` makes: the pod's, else the kubeconfig context's."""
    from kubernetes import config

    from pets_operator.kube import kubeconfig_path

    if _in_cluster():
        return IN_CLUSTER_NAMESPACE_FILE.read_text().strip() or "default"
    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig_path())
        namespace = (current or {}).get("context", {}).get("namespace")
        if namespace:
            return namespace
    except (config.ConfigException, OSError):
        if IN_CLUSTER_NAMESPACE_FILE.is_file():
            return IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
    return "default"


class PetsTrainingJob:
    """One submitted job: its status, its epochs as they finish, its pods' logs."""

    def __init__(self, client: "PetsTrainingJobClient", name: str, namespace: str):
        self.client, self.name, self.namespace = client, name, namespace

    def __repr__(self) -> str:
        return f"PetsTrainingJob({self.namespace}/{self.name})"

    def get(self) -> dict[str, Any]:
        """The whole resource as the API server has it now."""
        return self.client.get_raw(self.name, self.namespace)

    def status(self) -> dict[str, Any]:
        return self.get().get("status") or {}

    @property
    def phase(self) -> str | None:
        return self.status().get("phase")

    def epochs(self) -> list[dict[str, Any]]:
        """One entry per finished epoch: {epoch, accuracy, trainLoss?, seconds?}."""
        return list(self.status().get("epochs") or [])

    def wait(self, timeout: float = 3600, poll: float = 2.0, phases: Iterable[str] = FINISHED,
             on_epoch: Callable[[dict[str, Any]], Any] | None = None,
             raise_on_failure: bool = False) -> dict[str, Any]:
        """Block until the phase is one of `phases`; return the status then.

        `on_epoch` is called once for each epoch entry as it appears. Raises TimeoutError after
        `timeout` seconds, and JobFailed for phase Failed when `raise_on_failure` is set."""
        wanted = set(phases)
        if not wanted:
            raise ValueError("phases must name at least one phase")
        deadline = time.monotonic() + timeout
        reported = 0
        while True:
            status = self.status()
            epochs = status.get("epochs") or []
            if on_epoch is not None:
                for entry in epochs[reported:]:
                    on_epoch(entry)
            reported = max(reported, len(epochs))
            phase = status.get("phase")
            if phase in wanted:
                if raise_on_failure and phase == FAILED:
                    raise JobFailed(f"{self.namespace}/{self.name} failed: {status.get('message', 'no message')}")
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.namespace}/{self.name} is {phase or 'not started'} after {timeout:g}s; "
                                   f"waited for {', '.join(sorted(wanted))}")
            time.sleep(poll)

    def logs(self, index: int = 0, tail_lines: int | None = None) -> str:
        """The log of pod `<job>-<index>` (pod 0 carries the metric lines)."""
        return self.client.pod_log(pod_name(self.name, index), self.namespace, tail_lines=tail_lines)

    def delete(self, missing_ok: bool = True) -> None:
        """Delete the job; its Service and pods go with it (they are owned by it)."""
        self.client.delete(self.name, self.namespace, missing_ok=missing_ok)


class PetsTrainingJobClient:
    """Submit, find and delete PetsTrainingJobs.

    With no arguments it connects as the operator does: inside a pod through its service account
    (and the pod's namespace), elsewhere like kubectl (KUBECONFIG or ~/.kube/config, and the
    current context's namespace). `custom_api` / `core_api` take ready
    `CustomObjectsApi` / `CoreV1Api` objects instead (e.g. built on your own ApiClient)."""

    def __init__(self, namespace: str | None = None, api_client: Any = None,
                 custom_api: Any = None, core_api: Any = None):
        if custom_api is None or core_api is None:
            from kubernetes import client

            api_client = api_client or _load_api_client()
            custom_api = custom_api or client.CustomObjectsApi(api_client)
            core_api = core_api or client.CoreV1Api(api_client)
        self.custom, self.core = custom_api, core_api
        self.namespace = namespace or _default_namespace()

    def job(self, name: str, namespace: str | None = None) -> PetsTrainingJob:
        """A handle on an existing job (no request is made)."""
        return PetsTrainingJob(self, name, namespace or self.namespace)

    def submit(self, name: str, namespace: str | None = None, labels: dict[str, str] | None = None,
               **spec: Any) -> PetsTrainingJob:
        """Create a job; the API server validates `spec` against the CRD and fills in defaults."""
        namespace = namespace or self.namespace
        body = job_manifest(name, spec, namespace, labels)
        self._call(self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body,
                   field_validation="Strict")
        return self.job(name, namespace)

    def get_raw(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._call(self.custom.get_namespaced_custom_object, GROUP, VERSION,
                          namespace or self.namespace, PLURAL, name)

    def jobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[PetsTrainingJob]:
        namespace = namespace or self.namespace
        kwargs = {"label_selector": label_selector} if label_selector else {}
        listing = self._call(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, **kwargs)
        return [self.job(item["metadata"]["name"], namespace) for item in listing.get("items", [])]

    def delete(self, name: str, namespace: str | None = None, missing_ok: bool = True) -> None:
        try:
            self._call(self.custom.delete_namespaced_custom_object, GROUP, VERSION,
                       namespace or self.namespace, PLURAL, name, propagation_policy="Background")
        except PetsClientError as error:
            if not (missing_ok and error.status == 404):
                raise

    def pod_log(self, pod: str, namespace: str | None = None, tail_lines: int | None = None) -> str:
        kwargs = {"tail_lines": tail_lines} if tail_lines is not None else {}
        return self._call(self.core.read_namespaced_pod_log, pod, namespace or self.namespace, **kwargs)

    @staticmethod
    def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args, **kwargs)
        except ApiException as error:
            raise _api_error(error) from None


def submit(name: str, namespace: str | None = None, **spec: Any) -> PetsTrainingJob:
    """Shortcut: `PetsTrainingJobClient().submit(...)` on the default connection."""
    return PetsTrainingJobClient(namespace=namespace).submit(name, **spec)
