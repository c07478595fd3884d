"""One loader for the operator's calls and kopf's: the pod's service account (at its fixed path, or where
PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR says the local kubelet's process runtime put it), else the kubeconfig."""
from __future__ import annotations

import pytest

from pets_api.connection import load_configuration, service_account_files
from pets_operator.kopf_api import connection_info

FIXED_TOKEN, FIXED_CA = "/var/run/secrets/kubernetes.io/serviceaccount/token", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


def test_the_service_account_files_are_at_their_fixed_path_unless_a_directory_is_named():
    assert service_account_files({}, FIXED_TOKEN, FIXED_CA) == (FIXED_TOKEN, FIXED_CA)
    assert service_account_files({"PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR": ""}, FIXED_TOKEN, FIXED_CA) == (FIXED_TOKEN, FIXED_CA)
    assert service_account_files({"PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR": "/work/pods/p/volumes/kube-api-access-x"},
                                 FIXED_TOKEN, FIXED_CA) == ("/work/pods/p/volumes/kube-api-access-x/token",
                                                            "/work/pods/p/volumes/kube-api-access-x/ca.crt")


@pytest.fixture
def pod_process(tmp_path, monkeypatch):
    """A local process of a pod: the kubernetes Service's variables and the token volume's local directory."""
    account = tmp_path / "kube-api-access-x"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("the cluster CA")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setenv("PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return account


def test_a_pods_process_connects_with_the_token_in_the_named_directory(pod_process):
    configuration = load_configuration()
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.ssl_ca_cert == str(pod_process / "ca.crt")
    assert configuration.get_api_key_with_prefix("BearerToken") == "bearer pod-token"


def test_kopf_logs_in_with_the_same_credentials(pod_process):
    info = connection_info(load_configuration(), trust_env=False)
    assert (info.server, info.scheme, info.token, info.ca_path) == (
        "https://127.0.0.1:6443", "bearer", "pod-token", str(pod_process / "ca.crt"))
    assert (info.username, info.password, info.certificate_path, info.insecure) == (None, None, None, False)


def test_without_a_pod_or_a_kubeconfig_the_error_names_both(tmp_path, monkeypatch):
    from kubernetes.config import ConfigException

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigException, match="not in a pod with a service account .*no usable kubeconfig"):
        load_configuration()
