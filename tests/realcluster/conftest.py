"""Kubernetes' own control plane for the tests in this folder (`pets_localkube.control_plane`).

The binaries come from `hack/control_plane.sh`, which builds one pinned Kubernetes release and
etcd from Go modules into the user cache (once per pin; a warm call takes well under a second).
The script runs once per session, after collection and only when a `realcluster` test is
selected, outside any test's timeout: a cold build takes tens of minutes. Without a Go toolchain
and without a finished build the tests skip and say so; with Go, a build that fails fails them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pets_localkube.control_plane import KubernetesControlPlane, pinned_versions

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "hack" / "control_plane.sh"
_PREPARED = pytest.StashKey[tuple[str, str]]()  # ("bin" | "skip" | "fail", bin dir or message)


def _prepare(config: pytest.Config) -> tuple[str, str]:
    check = subprocess.run(["bash", str(SCRIPT), "--check"], capture_output=True, text=True)
    if check.returncode == 0:
        return "bin", check.stdout.strip().splitlines()[-1]
    go = os.environ.get("GO", "go")
    if not shutil.which(go):
        minimum = pinned_versions(SCRIPT).get("go", "?")
        return "skip", (f"the control plane is not built and there is no Go toolchain ('{go}' not on PATH) "
                        f"to build it: install Go >= {minimum} and run hack/control_plane.sh")
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else _nothing():
        print(f"\nbuilding the control plane with {SCRIPT} (once per pin; a cold build takes tens of minutes)",
              flush=True)
        build = subprocess.run(["bash", str(SCRIPT)], stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        return "fail", f"{SCRIPT} failed with exit code {build.returncode} (its messages are above)"
    return "bin", build.stdout.strip().splitlines()[-1]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or _PREPARED in config.stash:
        return
    if any(item.get_closest_marker("realcluster") for item in session.items):
        config.stash[_PREPARED] = _prepare(config)


@pytest.fixture(scope="session")
def control_plane_bin(pytestconfig) -> Path:
    """The directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler."""
    if _PREPARED not in pytestconfig.stash:  # e.g. the hook saw no marked test; should not happen
        pytestconfig.stash[_PREPARED] = _prepare(pytestconfig)
    kind, value = pytestconfig.stash[_PREPARED]
    if kind == "skip":
        pytest.skip(value)
    if kind == "fail":
        pytest.fail(value)
    return Path(value)


@pytest.fixture(scope="session")
def pinned() -> dict[str, str]:
    """{'kubernetes': 'v1.X.Y', 'etcd': 'v3.X.Y'}: the script's pins."""
    return pinned_versions(SCRIPT)


@pytest.fixture(scope="session")
def control_plane(control_plane_bin, tmp_path_factory):
    """One running control plane for the session (a free port); stopped at the end."""
    workdir = tmp_path_factory.mktemp("control-plane")
    with KubernetesControlPlane(workdir, port=0, bin_dir=control_plane_bin) as plane:
        yield plane


@pytest.fixture(scope="session")
def api_client(control_plane):
    """The official client, as the admin (system:masters)."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    yield client
    client.close()


@pytest.fixture(scope="module")
def helm() -> str:
    """The pinned helm (hack/k8s_tools.py); the test skips when it cannot be fetched."""
    from tests.realcluster.helm_operator import helm_path  # here, not at the top: tests/e2e loads this file alone

    return helm_path()
