"""The few Kubernetes API calls the operator makes itself (blocking; the daemon runs them in threads).

kopf watches and indexes; these calls create and delete the owned objects, patch the job's
status through the `/status` subresource and stream pod 0's log.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from pets_operator import GROUP, PLURAL, VERSION

CONNECTION_POOL_SIZE = 128  # one streaming log connection per followed job, plus the calls


def load_api_client() -> kubernetes.client.ApiClient:
    """An API client for the cluster: the pod's service account, else KUBECONFIG / ~/.kube/config.

    The one way both the operator and the notebook client connect, in the order kopf logs in
    (`kopf`'s `login_via_client`: in-cluster first, then the kubeconfig), so the operator's own
    calls always reach the cluster kopf watches, even in a pod that also has a kubeconfig. Outside
    a pod there is no service account and the kubeconfig is what kubectl would use: every file in
    KUBECONFIG (read now: the kubernetes package freezes it at import), else ~/.kube/config.
    Raises `kubernetes.config.ConfigException` when neither is there.
    """
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException as not_in_cluster:
        try:
            kubernetes.config.load_kube_config(config_file=kubeconfig_path(), client_configuration=configuration)
        except (kubernetes.config.ConfigException, OSError) as no_kubeconfig:
            raise kubernetes.config.ConfigException(
                f"not in a pod with a service account ({not_in_cluster}), and no usable kubeconfig "
                f"({no_kubeconfig})") from None
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return kubernetes.client.ApiClient(configuration)


def kubeconfig_path() -> str:
    """KUBECONFIG (one file or several, joined by os.pathsep) or ~/.kube/config, read at each call."""
    return os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")


class Kube:
    def __init__(self, api_client: kubernetes.client.ApiClient):
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)

    def create_pod(self, body: dict[str, Any]) -> bool:
        """False when it already exists (creation is idempotent)."""
        return _created(lambda: self.core.create_namespaced_pod(body["metadata"]["namespace"], body))

    def create_service(self, body: dict[str, Any]) -> bool:
        return _created(lambda: self.core.create_namespaced_service(body["metadata"]["namespace"], body))

    def delete_pod(self, namespace: str, name: str) -> None:
        _ignore_missing(lambda: self.core.delete_namespaced_pod(name, namespace))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            pod = self.core.read_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return self.core.api_client.sanitize_for_serialization(pod)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any] | None:
        """A JSON merge patch of `status` (lists are replaced whole); the job as stored after it, None if gone."""
        try:
            return self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": status},
                _content_type="application/merge-patch+json")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def delete_job(self, namespace: str, name: str) -> None:
        # Background: the garbage collector removes the owned pods and Service.
        _ignore_missing(lambda: self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"))

    def open_pod_log(self, namespace: str, name: str, container: str):
        """A streaming response (urllib3) of the whole log, following it until the container ends."""
        return self.core.read_namespaced_pod_log(name, namespace, container=container, follow=True,
                                                 _preload_content=False)


def _created(call) -> bool:
    try:
        call()
    except ApiException as error:
        if error.status == 409:
            return False
        raise
    return True


def _ignore_missing(call) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise
