"""The line `make test` ends with: how many tests kube-apiserver judged, and how they ended."""
from types import SimpleNamespace

from tests.conftest import real_server_outcomes


def report(nodeid, when, real=True):
    return SimpleNamespace(nodeid=nodeid, when=when, keywords={"realcluster": 1} if real else {"e2e": 1})


def test_counts_each_real_server_test_once_by_its_outcome():
    stats = {
        "passed": [report("a[kubernetes]", "call"), report("b", "call", real=False), report("c", "setup")],
        "failed": [report("c", "call")],
        "skipped": [report("d", "setup"), report("d", "teardown")],
        "error": [],
    }
    assert real_server_outcomes(stats) == {"passed": 1, "failed": 1, "skipped": 1}


def test_says_nothing_when_no_real_server_test_ran():
    assert real_server_outcomes({"passed": [report("b", "call", real=False)]}) == {}
