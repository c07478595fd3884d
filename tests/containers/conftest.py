"""The e2e stack with the docker runtime: a LocalCluster whose kubelet runs containers from images.

Only `cluster` differs from tests/e2e's stack; the other fixtures (api, operator_process, wait_for)
and the report hook are tests/e2e/conftest.py's, imported here so they use this `cluster`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pets_localkube import LocalCluster, product
from tests.e2e.conftest import REPO, api, operator_process, pytest_runtest_makereport, wait_for_fixture  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from containers import unavailable  # noqa: E402


@pytest.fixture(scope="session")
def engine():
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def cluster(engine, tmp_path):
    with LocalCluster(workdir=tmp_path / "cluster", cpu=4, memory="16Gi", crds=[REPO / "manifests" / "crd.yaml"],
                      runtime="docker", entrypoints=product.ENTRYPOINTS, workload=product.TRAINER) as running:
        yield running
