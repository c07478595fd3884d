"""The job failing: an invalid spec, a failed worker (restarted within backoffLimit), its cause."""
from pets_operator.status import PodView

from .helpers import condition, pods, step


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
    recreate = step(spec, plan.status, [])
    assert recreate.create_pods == [0, 1]
    back = step(spec, recreate.status, pods("Running", "Running", attempt=1))
    assert back.status["phase"] == "Running" and condition(back, "Restarting")["status"] == "False"


def test_failure_past_backoff_fails_and_stops_the_others(spec):
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    plan = step(spec, running, pods("Running", "Failed"))
    assert plan.status["phase"] == "Failed" and plan.delete_pods == ["pets-0"]
    assert condition(plan, "Failed")["reason"] == "BackoffLimitExceeded"
    assert "backoffLimit (0) reached" in plan.status["message"]
    assert [e.type for e in plan.events] == ["Warning"]
    # Finished: leftovers are still stopped on later steps, nothing is created.
    later = step(spec, plan.status, pods("Running", "Failed"))
    assert later.delete_pods == ["pets-0"] and later.create_pods == []


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
