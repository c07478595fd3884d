"""The job failing: an invalid spec, a spec the policy forbids, a failed worker (restarted within backoffLimit), its cause."""
from datetime import timedelta

import pytest

from pets_operator.reconcile.failure import restart_delay
from pets_operator.status import PodView

from .helpers import T0, condition, pods, step


def test_failure_within_backoff_restarts_the_whole_group(spec):
    spec = {**spec, "backoffLimit": 1}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, pods("Running", "Failed"))
    assert plan.status["restarts"] == 1 and plan.status["phase"] == "Pending"
    assert sorted(plan.delete_pods) == ["pets-0", "pets-1"]
    assert condition(plan, "Restarting")["status"] == "True"
    assert "worker pets-1 failed (exit code 1)" in plan.status["message"]
    # The old group's pods are stale now: nothing new until they are gone (the finished one too: the new
    # group needs its name; the runner asks the API once per pod).
    waiting = step(spec, plan.status, pods("Running", "Failed"))
    assert waiting.create_pods == [] and waiting.delete_pods == ["pets-0", "pets-1"]
    assert waiting.status["restarts"] == 1 and waiting.status["attempt"] == 1
    # The new group waits out the restart back-off (10 s after the failure) before it is created.
    backing_off = step(spec, plan.status, [], now=T0 + timedelta(seconds=9))
    assert backing_off.create_pods == [] and backing_off.wake_at == T0 + timedelta(seconds=10)
    recreate = step(spec, plan.status, [], now=T0 + timedelta(seconds=10))
    assert recreate.create_pods == [0, 1]
    back = step(spec, recreate.status, pods("Running", "Running", attempt=1))
    assert back.status["phase"] == "Running" and condition(back, "Restarting")["status"] == "False"


def test_failure_past_backoff_fails_and_keeps_the_group_for_its_logs(spec):
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, pods("Running", "Failed"))
    assert plan.status["phase"] == "Failed" and plan.delete_pods == []
    assert condition(plan, "Failed")["reason"] == "BackoffLimitExceeded"
    assert "backoffLimit (0) reached" in plan.status["message"]
    assert [e.type for e in plan.events] == ["Warning"]
    # Finished: the pods stay (their logs with them) until the job is deleted or its TTL passes.
    later = step(spec, plan.status, pods("Running", "Failed"))
    assert later.delete_pods == [] and later.create_pods == [] and later.finished


def test_invalid_spec_fails_with_the_problems(spec):
    plan = step(spec, problems=["pretrained: true needs spec.pretrainedWeights"])
    assert plan.status["phase"] == "Failed" and plan.create_pods == []
    assert plan.status["message"] == "invalid spec: pretrained: true needs spec.pretrainedWeights"
    assert condition(plan, "Failed")["reason"] == "InvalidSpec"
    assert plan.events[0].reason == "InvalidSpec" and plan.finished


def test_a_restart_without_checkpoint_clears_the_epochs(spec):
    spec = {**spec, "backoffLimit": 2}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, pods("Running", "Failed"))
    assert plan.new_attempt == 1 and plan.clear_epochs is True
    assert "no checkpoint: training starts again from epoch 0" in plan.status["message"]
    back = step(spec, plan.status, pods("Running", "Running", attempt=1))
    assert back.status["message"] == "2 of 2 worker(s) running (attempt 1, restart 1 of 2)"
    assert back.new_attempt is None and back.clear_epochs is False


def test_a_restart_with_a_checkpoint_keeps_the_epochs(spec):
    spec = {**spec, "backoffLimit": 1, "checkpoint": {"path": "/checkpoints"}}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, pods("Failed", "Running"))
    assert plan.new_attempt == 1 and plan.clear_epochs is False
    assert "resuming from the last checkpoint" in plan.status["message"]


def test_a_failed_worker_s_cause_is_in_the_message_and_the_condition(spec):
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    failed = [pods("Running")[0], PodView("pets-1", "u1", 1, 0, "Failed", exit_code=1, reason="Error",
                                          message="unknown timm model 'resnet5' (see timm.list_models())")]
    plan = step(spec, running, failed)
    expected = "worker pets-1 failed (exit code 1; Error): unknown timm model 'resnet5' (see timm.list_models())"
    assert plan.status["message"].startswith(expected)
    assert condition(plan, "Failed")["message"].startswith(expected)


def test_an_unavailable_data_set_fails_the_job_with_its_reason(spec):
    failed = [PodView("pets-0", "u0", 0, 0, "Failed", exit_code=2, reason="Error",
                      message="error: DataUnavailable: http://h/p.tgz: HTTP 404 Not Found"),
              PodView("pets-1", "u1", 1, 0, "Running")]
    plan = step(spec, None, failed)
    assert plan.status["phase"] == "Failed"
    assert condition(plan, "Failed")["reason"] == "DataUnavailable"
    assert condition(plan, "Initialized")["reason"] == "DataUnavailable"
    assert "http://h/p.tgz: HTTP 404 Not Found" in plan.status["message"]


def failed_pod(index, exit_code, message, phase="Failed"):
    return PodView(f"pets-{index}", f"u{index}", index, 0, phase, exit_code=exit_code, reason="Error", message=message)


@pytest.mark.parametrize("exit_code, message, reason", [
    (2, "error: DataUnavailable: http://h/p.tgz: sha256 is 12ab, expected 0000", "DataUnavailable"),
    (2, "error: ModelUnavailable: timm/resnet10t: no such repository", "ModelUnavailable"),
    (1, "[rank0]: error: CheckpointConflict: the checkpoint in /ckpt belongs to job ml/first (uid a)",
     "CheckpointConflict"),
    (2, "error: IncompatibleFunction: Python 3.10 here, 3.11 in the notebook", "IncompatibleFunction"),
    (2, "error: /data is empty: no <breed>_<n>.jpg images", "InvalidInput"),  # pets-train refused its input
])
def test_a_permanent_failure_fails_the_job_at_once_whatever_backoff_limit_allows(spec, exit_code, message, reason):
    spec = {**spec, "backoffLimit": 2}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, [failed_pod(0, exit_code, message), PodView("pets-1", "u1", 1, 0, "Running")])
    assert plan.status["phase"] == "Failed" and plan.status["restarts"] == 0 and plan.new_attempt is None
    assert condition(plan, "Failed")["reason"] == reason
    assert f"not restarted: a permanent error ({reason})" in plan.status["message"]
    assert plan.create_pods == [] and plan.delete_pods == []  # the pods stay for their logs


def test_a_permanent_failure_wins_over_a_peer_that_crashed_with_it(spec):
    spec = {**spec, "backoffLimit": 2}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    lost_peer = failed_pod(0, 1, "RuntimeError: Connection closed by peer")
    plan = step(spec, running, [lost_peer, failed_pod(1, 1, "error: CheckpointConflict: the checkpoint in /c is ...")])
    assert condition(plan, "Failed")["reason"] == "CheckpointConflict"
    assert plan.status["message"].startswith("worker pets-1 failed")


def test_restarts_back_off_10s_doubling_up_to_6_minutes(spec):
    assert [restart_delay(10, n) for n in (1, 2, 3, 4, 5, 6, 7, 50)] == [10, 20, 40, 80, 160, 320, 360, 360]
    spec = {**spec, "backoffLimit": 3}
    crash = [failed_pod(0, 1, "RuntimeError: boom"), PodView("pets-1", "u1", 1, 0, "Running")]
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    first = step(spec, running, crash)
    assert "restarting the whole group in 10s (restart 1 of 3" in first.status["message"]
    # The second group crashes before it ever ran: the Restarting condition restarts its clock, the wait doubles.
    later = T0 + timedelta(seconds=15)
    second = step(spec, first.status, [PodView("pets-0", "v0", 0, 1, "Failed", exit_code=1),
                                       PodView("pets-1", "v1", 1, 1, "Running")], now=later)
    assert second.status["restarts"] == 2 and "restarting the whole group in 20s" in second.status["message"]
    assert condition(second, "Restarting")["lastTransitionTime"] == "2026-01-01T00:00:15Z"
    waiting = step(spec, second.status, [], now=later + timedelta(seconds=19))
    assert waiting.create_pods == [] and "restart back-off" in waiting.status["message"]
    assert step(spec, second.status, [], now=later + timedelta(seconds=20)).create_pods == [0, 1]
    # The base comes from the operator's configuration.
    quick = step(spec, second.status, [], now=later + timedelta(seconds=2), restart_backoff=1.0)
    assert quick.create_pods == [0, 1]


def test_a_spec_the_policy_forbids_fails_for_good_and_creates_nothing(spec):
    forbidden = ['spec.image "evil:1" is not an allowed trainer image (allowed: pets-trainer:0.1.0); a cluster admin '
                 'allows it with the chart value policy.allowedImages']
    plan = step(spec, forbidden=forbidden)
    assert plan.status["phase"] == "Failed" and plan.create_pods == [] and plan.delete_pods == []
    assert plan.status["message"] == "refused by the cluster's policy: " + forbidden[0]
    assert condition(plan, "Failed")["reason"] == "PolicyViolation"
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "PolicyViolation", plan.status["message"])]
    # Not retried: the next step keeps it Failed and creates nothing, whatever the policy says by then.
    later = step(spec, plan.status)
    assert later.status["phase"] == "Failed" and later.create_pods == [] and later.events == []


def test_a_group_created_before_the_policy_got_stricter_runs_on_and_is_not_recreated(spec):
    spec = {**spec, "backoffLimit": 1}
    forbidden = ["spec.data.hostPath ..."]
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    # Checked before pods are created, as admission is: the running group is left alone.
    still = step(spec, running, pods("Running", "Running"), forbidden=forbidden)
    assert still.status["phase"] == "Running" and still.delete_pods == [] and still.events == []
    # Its worker fails: the group goes as any failed group does; the new one is refused.
    failed = step(spec, running, pods("Running", "Failed"), forbidden=forbidden)
    assert failed.status["phase"] == "Pending" and sorted(failed.delete_pods) == ["pets-0", "pets-1"]
    refused = step(spec, failed.status, [], now=T0 + timedelta(seconds=10), forbidden=forbidden)
    assert refused.status["phase"] == "Failed" and refused.create_pods == []
    assert condition(refused, "Failed")["reason"] == "PolicyViolation"
