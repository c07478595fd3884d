"""How the operator and the SDK connect to a cluster: in-cluster first, then the kubeconfig.

The `kubernetes` package is imported when a connection is made, not when this module is: the
trainer image ships `pets_api` without the client, and never connects.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONNECTION_POOL_SIZE = 128  # one streaming log connection per followed job, plus the calls


SERVICE_ACCOUNT_DIR_ENV = "PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR"


def service_account_files(environ: Mapping[str, str], token: str, ca: str) -> tuple[str, str]:
    """The pod's service account token and CA files: `token` and `ca` (the fixed paths every kubelet mounts
    them at), unless PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR names the directory that holds them instead: the
    local kubelet's process runtime (`pets_localkube`), whose pods are local processes that cannot see a
    volume at its mountPath, sets it to the volume's local directory."""
    directory = environ.get(SERVICE_ACCOUNT_DIR_ENV, "")
    if not directory:
        return token, ca
    return str(Path(directory) / Path(token).name), str(Path(directory) / Path(ca).name)


def load_configuration() -> Any:
    """A client Configuration for the cluster: the pod's service account, else KUBECONFIG / ~/.kube/config.

    The one way the operator (its own calls and kopf's, `pets_operator.kopf_api`) and the notebook client
    connect, in the order kopf's `login_via_client` tries: in-cluster first, then the kubeconfig, so the
    operator's own calls always reach the cluster kopf watches, even in a pod that also has a kubeconfig.
    In a pod: `KUBERNETES_SERVICE_HOST`/`_PORT` and the service account's files (`service_account_files`),
    the token re-read as it is refreshed. Outside a pod there is no service account and the kubeconfig is
    what kubectl would use: every file in KUBECONFIG (read now: the kubernetes package freezes it at
    import), else ~/.kube/config. Raises `kubernetes.config.ConfigException` when neither is there.
    """
    import kubernetes
    from kubernetes.config import incluster_config

    configuration = kubernetes.client.Configuration()
    token, ca = service_account_files(os.environ, incluster_config.SERVICE_TOKEN_FILENAME,
                                      incluster_config.SERVICE_CERT_FILENAME)
    try:
        incluster_config.InClusterConfigLoader(token_filename=token, cert_filename=ca).load_and_set(configuration)
    except kubernetes.config.ConfigException as not_in_cluster:
        try:
            kubernetes.config.load_kube_config(config_file=kubeconfig_path(), client_configuration=configuration)
        except (kubernetes.config.ConfigException, OSError) as no_kubeconfig:
            raise kubernetes.config.ConfigException(
                f"not in a pod with a service account ({not_in_cluster}), and no usable kubeconfig "
                f"({no_kubeconfig})") from None
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return configuration


def load_api_client() -> Any:
    """An API client with `load_configuration()`'s configuration."""
    import kubernetes

    return kubernetes.client.ApiClient(load_configuration())


def kubeconfig_path() -> str:
    """KUBECONFIG (one file or several, joined by os.pathsep) or ~/.kube/config, read at each call."""
    return os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
