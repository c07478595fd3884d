"""The no-cluster stack: an emulated Kubernetes API server and a local kubelet.

`LocalCluster` starts both on 127.0.0.1 in a background thread; `pets-operator local up` is
the command-line entry point (see `cli.py`).
"""
from .cluster import LocalCluster, kubeconfig_text

__all__ = ["LocalCluster", "kubeconfig_text"]
