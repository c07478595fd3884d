"""How the operator and the SDK connect to a cluster: in-cluster first, then the kubeconfig.

The `kubernetes` package is imported when a connection is made, not when this module is: the
trainer image ships `pets_api` without the client, and never connects.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CONNECTION_POOL_SIZE = 128  # one streaming log connection per followed job, plus the calls


def load_api_client() -> Any:
    """An API client for the cluster: the pod's service account, else KUBECONFIG / ~/.kube/config.

    The one way both the operator and the notebook client connect, in the order kopf logs in
    (`kopf`'s `login_via_client`: in-cluster first, then the kubeconfig), so the operator's own
    calls always reach the cluster kopf watches, even in a pod that also has a kubeconfig. Outside
    a pod there is no service account and the kubeconfig is what kubectl would use: every file in
    KUBECONFIG (read now: the kubernetes package freezes it at import), else ~/.kube/config.
    Raises `kubernetes.config.ConfigException` when neither is there.
    """
    import kubernetes

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
