"""The real operator against an API server that refuses or fails chosen calls (through `fault_proxy.FaultProxy`).

Refusals that retrying cannot change fail the job with the API's message, quota refusals keep it
Pending until they pass, server errors and unanswered calls are retried, and none of it makes the
operator log a traceback or claim that objects were created before they exist.
"""
from __future__ import annotations

import pytest

from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.e2e

PODS = r"^/api/v1/namespaces/default/pods$"
SERVICES = r"^/api/v1/namespaces/default/services$"
QUOTA_MESSAGE = ('pods "{name}-1" is forbidden: exceeded quota: compute-resources, requested: pods=1, '
                 'used: pods=10, limited: pods=10')


@pytest.fixture
def proxy(cluster, tmp_path):
    with FaultProxy(cluster.url, tmp_path / "faults") as running:
        yield running


@pytest.fixture
def operator(operator_process, stand_in_env, proxy):
    return operator_process({**stand_in_env, "KUBECONFIG": str(proxy.kubeconfig)})


def job_spec(**extra):
    return {"numNodes": 2, "epochs": 3, "model": "resnet10t", "data": {"synthetic": {}}, **extra}


def status_of(api, name):
    return (api.job(name) or {}).get("status") or {}


def conditions(status):
    return {c["type"]: c for c in status.get("conditions") or []}


def events(api, name, reason):
    return [e for e in api.events(name) if e.reason == reason]


def assert_quiet(operator):
    logs = operator.logs()
    assert "Traceback" not in logs, logs[-4000:]
    assert "Will retry" not in logs and "failed with an exception" not in logs, logs[-4000:]


def test_an_invalid_pod_fails_the_job_with_the_apis_message(api, proxy, operator, wait_for):
    message = 'Pod "invalid-1" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less ' \
              'than or equal to cpu limit'
    proxy.fail("POST", PODS, status=422, reason="Invalid", message=message, times=None)
    api.create_job("invalid", job_spec())
    status = wait_for("Failed", lambda: status_of(api, "invalid").get("phase") == "Failed" and status_of(api, "invalid"),
                      30, operator.logs)
    assert message in status["message"] and "refused" in status["message"]
    failed = conditions(status)["Failed"]
    assert failed["reason"] == "CreateRefused" and message in failed["message"]
    assert conditions(status).get("Created", {}).get("status") != "True"
    warning = wait_for("the Warning event", lambda: events(api, "invalid", "CreateRefused"), 15)
    assert warning[0].type == "Warning" and message in warning[0].message
    assert not events(api, "invalid", "Created")
    # Nothing of the group is left running; the refusal was not retried after the job failed.
    wait_for("no pod left", lambda: not [p for p in api.pods("invalid") if not p.metadata.deletion_timestamp], 15)
    attempts = [r for r in proxy.requests if r[0] == "POST" and r[1].endswith("/pods")]
    assert len(attempts) <= 2, attempts  # the group's two pods, in one step
    assert_quiet(operator)


def test_a_forbidden_service_fails_the_job_before_any_pod(api, proxy, operator, wait_for):
    message = ('services "forbidden-workers" is forbidden: User "system:serviceaccount:pets:pets-operator" cannot '
               'create resource "services" in API group "" in the namespace "default"')
    proxy.fail("POST", SERVICES, status=403, reason="Forbidden", message=message, times=None)
    api.create_job("forbidden", job_spec())
    status = wait_for("Failed", lambda: status_of(api, "forbidden").get("phase") == "Failed" and
                      status_of(api, "forbidden"), 30, operator.logs)
    assert "Service forbidden-workers" in status["message"] and message in status["message"]
    assert conditions(status)["Failed"]["reason"] == "CreateRefused" and "Created" not in conditions(status)
    assert wait_for("the Warning event", lambda: events(api, "forbidden", "CreateRefused"), 15)[0].type == "Warning"
    assert api.pods("forbidden") == [] and api.services("forbidden") == []
    assert not events(api, "forbidden", "Created")
    assert_quiet(operator)


def test_a_quota_refusal_keeps_the_job_pending_until_it_passes(api, proxy, operator, wait_for):
    message = QUOTA_MESSAGE.format(name="quota")
    proxy.fail("POST", PODS + "|" + SERVICES, status=403, reason="Forbidden", message=message, times=None)
    api.create_job("quota", job_spec())

    def quota_condition():
        created = conditions(status_of(api, "quota")).get("Created") or {}
        return created.get("reason") == "QuotaExceeded" and status_of(api, "quota")

    status = wait_for("Created=False/QuotaExceeded", quota_condition, 30, operator.logs)
    assert status["phase"] == "Pending" and message in status["message"]
    assert conditions(status)["Created"]["status"] == "False" and message in conditions(status)["Created"]["message"]
    warning = wait_for("the QuotaExceeded event", lambda: events(api, "quota", "QuotaExceeded"), 15)
    assert warning[0].type == "Warning" and message in warning[0].message
    assert not events(api, "quota", "Created") and api.pods("quota") == []
    proxy.clear()  # the quota grew
    status = wait_for("Succeeded", lambda: status_of(api, "quota").get("phase") == "Succeeded" and
                      status_of(api, "quota"), 90, operator.logs)
    assert conditions(status)["Created"]["status"] == "True" and [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    assert len(events(api, "quota", "QuotaExceeded")) == 1  # retries of the same refusal post no more
    assert_quiet(operator)


def test_server_errors_and_lost_answers_are_retried(api, proxy, operator, wait_for):
    errors = proxy.fail("POST", PODS, status=500, reason="InternalError",
                        message="Internal error occurred: etcdserver: leader changed", times=2)
    api.create_job("flaky-api", job_spec())
    status = wait_for("Succeeded", lambda: status_of(api, "flaky-api").get("phase") == "Succeeded" and
                      status_of(api, "flaky-api"), 90, operator.logs)
    assert errors.hits == 2
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2] and status["restarts"] == 0
    assert conditions(status)["Created"]["status"] == "True"
    assert len(events(api, "flaky-api", "Created")) == 1
    assert_quiet(operator)


def test_unanswered_calls_and_status_errors_are_retried(api, proxy, operator, wait_for):
    dropped = proxy.fail("POST", SERVICES, drop=True, times=1)
    timeouts = proxy.fail("PATCH", r"/petstrainingjobs/unanswered/status$", status=504, reason="Timeout",
                          message="the server was unable to return a response in the time allotted", times=3)
    api.create_job("unanswered", job_spec())
    status = wait_for("Succeeded", lambda: status_of(api, "unanswered").get("phase") == "Succeeded" and
                      status_of(api, "unanswered"), 90, operator.logs)
    assert dropped.hits == 1 and timeouts.hits == 3
    assert [e["epoch"] for e in status["epochs"]] == [0, 1, 2]
    assert_quiet(operator)


def test_an_existing_object_is_taken_as_created(api, proxy, operator, wait_for):
    """409 AlreadyExists on create is idempotent: no failure, no retry storm, the job runs."""
    exists = proxy.fail("POST", PODS, status=409, reason="AlreadyExists",
                        message='pods "exists-0" already exists', times=1)
    proxy.fail("POST", SERVICES, status=409, reason="AlreadyExists", message='services "exists-workers" already exists',
               times=1)
    api.create_job("exists", job_spec())
    status = wait_for("Succeeded", lambda: status_of(api, "exists").get("phase") == "Succeeded" and
                      status_of(api, "exists"), 90, operator.logs)
    assert exists.hits == 1 and "Failed" not in conditions(status)
    assert_quiet(operator)
