"""The kind cluster for the whole folder: created once, images loaded once, deleted at the end."""
from __future__ import annotations

import pytest

from tests.kind.kind_cluster import KindCluster, missing_prerequisite
from tests.support.fixtures import k8s_tools  # noqa: F401  (re-exported fixture)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/kind/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.kind)


@pytest.fixture(scope="session")
def kind_cluster(k8s_tools, tmp_path_factory):  # noqa: F811
    reason = missing_prerequisite()
    if reason:
        pytest.skip(reason)
    cluster = KindCluster(workdir=tmp_path_factory.mktemp("kind"), kubectl_path=k8s_tools.kubectl,
                          helm_path=k8s_tools.helm)
    cluster.create()
    try:
        cluster.build_and_load_images()
        yield cluster
    finally:
        cluster.delete()
