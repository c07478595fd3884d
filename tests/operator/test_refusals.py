"""Refused and failed API calls: what they mean (refusals, kube) and what they do to a job (reconcile)."""
import json
from datetime import datetime, timedelta, timezone

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from pets_operator.kube import KubeError, _created, _unless_missing, failure_of
from pets_operator.occupants import occupant
from pets_operator.reconcile import reconcile
from pets_operator.refusals import (
    CONFLICT,
    NOT_SERVED,
    QUOTA,
    REFUSED,
    TRANSIENT,
    ApiFailure,
    CreateFailure,
    backoff_seconds,
    classify,
    most_severe,
)
from pets_operator.status import PodView

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
QUOTA_MESSAGE = ('pods "pets-1" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=4, '
                 'limited: pods=4')


def api_exception(code, reason, message, http_reason="Whatever"):
    error = ApiException(status=code, reason=http_reason)
    error.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": code})
    return error


@pytest.mark.parametrize("code, message, kind", [
    (422, 'Pod "p" is invalid: spec.containers[0].image: Required value', REFUSED),
    (400, "bad request", REFUSED),
    (403, 'pods "p" is forbidden: User "x" cannot create resource "pods"', REFUSED),
    (403, 'pods "p" is forbidden: maximum cpu usage per Container is 1, but limit is 2', REFUSED),  # LimitRange
    (403, QUOTA_MESSAGE, QUOTA),
    (500, "etcdserver: request timed out", TRANSIENT),
    (503, "", TRANSIENT),
    (504, "the server was unable to return a response in the time allotted", TRANSIENT),
    (429, "too many requests", TRANSIENT),
    (None, "Read timed out", TRANSIENT),
])
def test_classify(code, message, kind):
    assert classify(code, message) == kind


def test_backoff_doubles_up_to_a_minute():
    assert [backoff_seconds(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert backoff_seconds(50) == 60


def test_the_most_severe_failure_decides():
    quota, refused, flaky = ApiFailure(403, "Forbidden", QUOTA_MESSAGE), ApiFailure(422, "Invalid", "no"), \
        ApiFailure(500, "InternalError", "oops")
    assert most_severe([("a", flaky), ("b", quota), ("c", refused)]) == ("c", refused)
    assert most_severe([("a", flaky), ("b", quota)]) == ("b", quota)
    assert most_severe([]) is None


def test_failure_of_reads_the_status_body():
    failure = failure_of(api_exception(422, "Invalid", 'Pod "p" is invalid: x', http_reason="Unprocessable Entity"))
    assert failure == ApiFailure(422, "Invalid", 'Pod "p" is invalid: x')
    assert failure.describe() == '422 Invalid: Pod "p" is invalid: x'
    plain = ApiException(status=502, reason="Bad Gateway")
    plain.body = "<html>bad gateway</html>"
    assert failure_of(plain) == ApiFailure(502, "Bad Gateway", "<html>bad gateway</html>")


def test_failure_of_a_call_without_answer():
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/api/v1/pods", "Read timed out.")
    failure = failure_of(timeout)
    assert failure.code is None and failure.kind == TRANSIENT and failure.describe().startswith("no answer (")
    dropped = urllib3.exceptions.MaxRetryError(None, "/api", urllib3.exceptions.ProtocolError("Connection aborted."))
    assert failure_of(dropped).reason == "ProtocolError"
    assert failure_of(ConnectionRefusedError(111, "Connection refused")).code is None
    assert failure_of(KeyError("a bug")) is None


def test_kube_calls_raise_kube_errors_and_know_what_is_done():
    def refuse(code, reason="Whatever"):
        def call():
            raise api_exception(code, reason, "no")
        return call

    assert _created(refuse(409, "AlreadyExists")) is False
    assert _unless_missing(refuse(404, "NotFound")) is None
    with pytest.raises(KubeError) as raised:
        _created(refuse(422, "Invalid"))
    assert raised.value.failure.kind == REFUSED

    def bug():
        raise KeyError("a bug")
    with pytest.raises(KeyError):
        _created(bug)


# --- what reconcile does with them -------------------------------------------------------------------------


def pods(*phases, attempt=0):
    return [PodView(f"pets-{i}", f"uid-{attempt}-{i}", i, attempt, phase) for i, phase in enumerate(phases)]


def step(spec, status=None, current=(), now=T0, failure=None):
    return reconcile("pets", spec, status, 1, current, now, [], create_failure=failure)


def created_failure(code, reason, message, failures=1, attempt=0, what="Pod pets-1", at=T0):
    return CreateFailure(what, ApiFailure(code, reason, message), attempt, failures, at)


def conditions(plan):
    return {c["type"]: c for c in plan.status.get("conditions") or []}


def test_a_refused_creation_fails_the_job_with_the_apis_message(spec):
    first = step(spec)
    refusal = created_failure(422, "Invalid", 'Pod "pets-1" is invalid: spec.containers[0].image: Required value')
    plan = step(spec, first.status, pods("Pending"), failure=refusal)
    assert plan.status["phase"] == "Failed"
    assert plan.status["message"] == ('the API server refused to create Pod pets-1: 422 Invalid: Pod "pets-1" is '
                                      'invalid: spec.containers[0].image: Required value')
    assert conditions(plan)["Failed"]["reason"] == "CreateRefused"
    assert "Created" not in conditions(plan)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "CreateRefused")]
    assert plan.delete_pods == ["pets-0"] and plan.create_pods == []
    assert step(spec, plan.status, []).finished


def test_a_refused_service_fails_the_job_before_any_pod(spec):
    refusal = created_failure(403, "Forbidden", 'services "pets-workers" is forbidden: User "op" cannot create '
                              'resource "services"', what="Service pets-workers")
    plan = step(spec, step(spec).status, [], failure=refusal)
    assert plan.status["phase"] == "Failed" and "Service pets-workers" in plan.status["message"]
    assert "cannot create resource" in conditions(plan)["Failed"]["message"]


def test_a_quota_refusal_waits_with_a_condition_and_one_event(spec):
    first = step(spec)
    quota = created_failure(403, "Forbidden", QUOTA_MESSAGE)
    plan = step(spec, first.status, pods("Pending"), now=T0 + timedelta(seconds=0.1), failure=quota)
    assert plan.status["phase"] == "Pending" and plan.create_pods == []
    assert plan.wake_at == T0 + timedelta(seconds=1)
    created = conditions(plan)["Created"]
    assert (created["status"], created["reason"]) == ("False", "QuotaExceeded")
    assert QUOTA_MESSAGE in created["message"] and QUOTA_MESSAGE in plan.status["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "QuotaExceeded")]
    assert QUOTA_MESSAGE in plan.events[0].message
    # The backoff passed: create again; the same refusal posts no second Event.
    again = step(spec, plan.status, pods("Pending"), now=T0 + timedelta(seconds=1), failure=quota)
    assert again.create_pods == [1] and again.events == []
    # The quota let it through: Created, once the pods are there.
    done = step(spec, again.status, pods("Pending", "Pending"), now=T0 + timedelta(seconds=2))
    assert conditions(done)["Created"]["status"] == "True" and [e.reason for e in done.events] == ["Created"]


def test_a_server_error_is_retried_after_a_backoff_without_events(spec):
    first = step(spec)
    flaky = created_failure(500, "InternalError", "etcdserver: leader changed", failures=2)
    waiting = step(spec, first.status, [], now=T0 + timedelta(seconds=1), failure=flaky)
    assert waiting.create_pods == [] and waiting.wake_at == T0 + timedelta(seconds=2)
    assert waiting.status["phase"] == "Pending" and "retrying" in waiting.status["message"]
    assert "500 InternalError" in waiting.status["message"]
    assert waiting.events == [] and "conditions" not in waiting.status
    retry = step(spec, first.status, [], now=T0 + timedelta(seconds=2), failure=flaky)
    assert retry.create_pods == [0, 1]


def test_a_failure_of_an_earlier_attempt_is_ignored(spec):
    old = created_failure(422, "Invalid", "no", attempt=0)
    plan = step(spec, {**step(spec).status, "restarts": 1, "attempt": 1}, [], failure=old)
    assert plan.status["phase"] == "Pending" and plan.create_pods == [0, 1]


def conflict(occupant_body, what="Pod pets-1"):
    found = occupant(occupant_body)
    return CreateFailure(what, ApiFailure(409, "AlreadyExists", found.describe()), 0, 1, T0, occupant=found)


def test_409_and_404_to_a_create_are_their_own_kinds():
    assert classify(409, 'pods "pets-1" already exists') == CONFLICT
    assert classify(404, 'the server could not find the requested resource') == NOT_SERVED


def test_a_pod_of_that_name_that_is_not_the_job_s_fails_the_job_naming_it(spec):
    plain = {"kind": "Pod", "metadata": {"name": "pets-1", "uid": "x"}}
    plan = step(spec, step(spec).status, pods("Running"), failure=conflict(plain))
    assert plan.status["phase"] == "Failed" and plan.create_pods == []
    assert conditions(plan)["Failed"]["reason"] == "NameConflict"
    assert plan.status["message"] == ("cannot create Pod pets-1: Pod pets-1 already exists and is not this job's: it has "
                                      "no owner; delete it, or recreate this job under another name")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "NameConflict")]
    assert plan.delete_pods == ["pets-0"]  # the job's own pods are stopped
    other = {"kind": "Pod", "metadata": {"name": "pets-1", "ownerReferences": [
        {"kind": "Job", "name": "batch", "uid": "j", "controller": True}]}}
    assert "its owner is Job batch (uid j)" in step(spec, step(spec).status, [], failure=conflict(other)).status["message"]


def test_a_pod_of_an_earlier_job_of_the_same_name_is_waited_for_and_named(spec):
    held = {"kind": "Pod", "metadata": {"name": "pets-1", "deletionTimestamp": "2026-01-01T00:00:00Z",
                                        "finalizers": ["example.com/keep"], "ownerReferences": [
                                            {"kind": "PetsTrainingJob", "name": "pets", "uid": "old", "controller": True}]}}
    plan = step(spec, step(spec).status, pods("Running"), now=T0 + timedelta(seconds=0.5), failure=conflict(held))
    assert plan.status["phase"] == "Pending" and plan.create_pods == [] and plan.wake_at == T0 + timedelta(seconds=1)
    expected = ("Pod pets-1 already exists and is not this job's: its owner is PetsTrainingJob pets (uid old), being "
                "deleted, held by finalizer example.com/keep: waiting for it to go with the earlier job of this name")
    assert expected in plan.status["message"]
    assert (conditions(plan)["Created"]["status"], conditions(plan)["Created"]["reason"]) == ("False", "NameConflict")
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "NameConflict", expected)]
    again = step(spec, plan.status, pods("Running"), now=T0 + timedelta(seconds=1), failure=conflict(held))
    assert again.create_pods == [1] and again.events == []  # retried; said once


def test_a_pod_group_api_that_is_not_installed_is_said_once_and_retried(spec):
    spec = {**spec, "gangScheduling": {"scheduler": "coscheduling"}}
    missing = created_failure(404, "NotFound", "the server could not find the requested resource",
                              what="PodGroup pets")
    plan = step(spec, step(spec).status, [], now=T0 + timedelta(seconds=0.5), failure=missing)
    assert plan.status["phase"] == "Pending" and plan.create_pods == []
    assert ("cannot create PodGroup pets: the cluster does not serve PodGroups of scheduling.x-k8s.io/v1alpha1 "
            "(404 NotFound: the server could not find the requested resource): spec.gangScheduling.scheduler "
            "coscheduling needs scheduler-plugins") in plan.status["message"]
    assert "recreate the job without spec.gangScheduling" in plan.status["message"]
    assert conditions(plan)["Created"]["reason"] == "PodGroupAPINotInstalled"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "PodGroupAPINotInstalled")]
    again = step(spec, plan.status, [], now=T0 + timedelta(seconds=1), failure=missing)
    assert again.create_pods == [0, 1] and again.events == []
    volcano = step({**spec, "gangScheduling": {"scheduler": "volcano"}}, step(spec).status, [], failure=missing)
    assert "PodGroups of scheduling.volcano.sh/v1beta1" in volcano.status["message"]
