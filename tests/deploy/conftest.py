from tests.support.fixtures import k8s_tools  # noqa: F401  (re-exported fixture)
