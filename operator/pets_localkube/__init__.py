"""The no-cluster stack: an emulated Kubernetes API server and a local kubelet.

`LocalCluster` starts both on 127.0.0.1 in a background thread; `local up` (`cli.py`) is the
command-line entry point. The stack knows no product: `product.py` hands it the pets trainer
(`pets-operator local` runs `product.main`).
"""
from .cluster import LocalCluster, kubeconfig_text

__all__ = ["LocalCluster", "kubeconfig_text"]
