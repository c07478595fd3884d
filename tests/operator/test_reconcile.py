from datetime import datetime, timedelta, timezone

from pets_operator.reconcile import reconcile
from pets_operator.status import PodView

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def pods(*phases, attempt=0):
    return [PodView(f"pets-{i}", f"uid-{attempt}-{i}", i, attempt, phase, ready=phase == "Running",
                    exit_code=1 if phase == "Failed" else None) for i, phase in enumerate(phases)]


def step(spec, status=None, current=(), now=T0, problems=(), drained=True):
    return reconcile("pets", spec, status, 1, current, now, list(problems), logs_drained=drained)


def condition(plan, type_):
    return next(c for c in plan.status["conditions"] if c["type"] == type_)


def test_a_new_job_creates_every_pod(spec):
    plan = step(spec)
    assert plan.create_pods == [0, 1] and plan.delete_pods == []
    assert plan.status["phase"] == "Pending" and plan.status["restarts"] == 0
    assert plan.status["observedGeneration"] == 1 and plan.status["startTime"] == "2026-01-01T00:00:00Z"
    # Nothing is claimed before the objects exist: Created comes once the pods are there.
    assert "conditions" not in plan.status and plan.events == []
    created = step(spec, plan.status, pods("Pending", "Pending"))
    assert condition(created, "Created")["status"] == "True"
    assert [e.reason for e in created.events] == ["Created"]


def test_only_missing_pods_are_created(spec):
    plan = step(spec, step(spec).status, pods("Pending"))
    assert plan.create_pods == [1] and plan.events == []


def test_a_repeated_creation_step_posts_no_second_event(spec):
    first = step(spec)
    again = step(spec, first.status)
    assert again.create_pods == [0, 1] and again.events == []
    created = step(spec, again.status, pods("Pending", "Pending"))
    assert [e.reason for e in created.events] == ["Created"]
    assert step(spec, created.status, pods("Running", "Pending")).events == []
    restarted = step(spec, {**created.status, "restarts": 1, "attempt": 1}, pods("Pending", "Pending", attempt=1))
    assert [e.reason for e in restarted.events] == ["Created"]
    assert condition(restarted, "Created")["message"].endswith("attempt 1")


def test_all_running(spec):
    plan = step(spec, step(spec).status, pods("Running", "Running"))
    assert plan.status["phase"] == "Running" and plan.create_pods == []
    assert condition(plan, "Running")["reason"] == "AllWorkersRunning"
    assert plan.status["workers"] == {"total": 2, "ready": 2, "running": 2, "succeeded": 0, "failed": 0}


def test_partly_running_is_pending_with_the_waiting_reason(spec):
    waiting = [pods("Running")[0], PodView("pets-1", "u", 1, 0, "Pending", reason="ErrImagePull")]
    plan = step(spec, step(spec).status, waiting)
    assert plan.status["phase"] == "Pending" and "ErrImagePull" in plan.status["message"]


def test_the_waiting_message_says_why_the_container_cannot_start(spec):
    refused = "container has runAsNonRoot and image will run as root (pod: ..., container: trainer)"
    waiting = [pods("Running")[0], PodView("pets-1", "u", 1, 0, "Pending", reason="CreateContainerConfigError",
                                           message=refused)]
    plan = step(spec, step(spec).status, waiting)
    assert plan.status["message"] == f"1 of 2 worker(s) running (pets-1: CreateContainerConfigError: {refused})"


def test_success_waits_for_the_log_then_finishes(spec):
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    waiting = step(spec, running, pods("Succeeded", "Succeeded"), drained=False)
    assert waiting.status["phase"] == "Running" and "metric lines" in waiting.status["message"]
    done = step(spec, running, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=30))
    assert done.status["phase"] == "Succeeded" and done.status["completionTime"] == "2026-01-01T00:00:30Z"
    assert condition(done, "Succeeded")["status"] == "True"
    assert condition(done, "Running")["status"] == "False"
    assert done.finished is True


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


def test_active_deadline(spec):
    spec = {**spec, "activeDeadlineSeconds": 60}
    running = step(spec, step(spec).status, pods("Running", "Running"))
    assert running.wake_at == T0 + timedelta(seconds=60)
    late = step(spec, running.status, pods("Running", "Running"), now=T0 + timedelta(seconds=61))
    assert late.status["phase"] == "Failed" and sorted(late.delete_pods) == ["pets-0", "pets-1"]
    assert condition(late, "Failed")["reason"] == "DeadlineExceeded"


def test_ttl_after_finished_deletes_the_job(spec):
    spec = {**spec, "ttlSecondsAfterFinished": 10}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    done = step(spec, running, pods("Succeeded", "Succeeded"))
    assert done.wake_at == T0 + timedelta(seconds=10) and not done.finished
    assert not step(spec, done.status, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=9)).delete_job
    assert step(spec, done.status, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=10)).delete_job


def test_reconcile_is_idempotent(spec):
    first = step(spec)
    again = step(spec, first.status)
    assert again.status == first.status and again.create_pods == [0, 1]
    running = step(spec, first.status, pods("Running", "Running"))
    assert step(spec, running.status, pods("Running", "Running"), now=T0 + timedelta(seconds=5)).status == running.status


def test_epoch_fields_are_not_touched(spec):
    status = {**step(spec).status, "epochs": [{"epoch": 0, "accuracy": 0.5}], "accuracy": 0.5}
    assert "epochs" not in step(spec, status, pods("Running", "Running")).status


def test_an_unschedulable_worker_says_why_in_the_status(spec):
    reason = "0/1 nodes are available: 1 Insufficient cpu."
    stuck = [PodView("pets-0", "u0", 0, 0, "Pending", unschedulable=reason),
             PodView("pets-1", "u1", 1, 0, "Pending", unschedulable=reason)]
    plan = step(spec, step(spec).status, stuck)
    assert plan.status["phase"] == "Pending"
    assert plan.status["message"] == f"0 of 2 worker(s) running; pod pets-0 cannot be scheduled: {reason}"
    scheduled = condition(plan, "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable") and reason in scheduled["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "Created"), ("Warning", "Unschedulable")]
    assert step(spec, plan.status, stuck).events == []  # once per reason
    running = step(spec, plan.status, pods("Running", "Running"))
    assert condition(running, "Scheduled")["status"] == "True" and running.status["phase"] == "Running"


def test_no_scheduled_condition_when_every_worker_fits(spec):
    plan = step(spec, step(spec).status, pods("Running", "Running"))
    assert {c["type"] for c in plan.status["conditions"]} == {"Created", "Running"}


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


def test_a_job_with_downloads_is_pending_and_initializing_until_pod_0_has_them(spec):
    from pets_operator.initialization import Initialization, fold
    from pets_api.metric_lines import init_event, initialized_event
    from pets_operator.spec import with_defaults

    spec = with_defaults({**spec, "pretrained": True, "data": {"oxfordPets": {}, "path": "images"}}, "img")
    running = pods("Running", "Running")

    def at(state, status=None):
        return reconcile("pets", spec, status, 1, running, T0, [], initialization=state)

    plan = at(Initialization())
    assert plan.status["phase"] == "Pending"
    assert condition(plan, "Initialized") == {**condition(plan, "Initialized"), "status": "False",
                                              "reason": "Downloading"}
    state = fold(Initialization(), init_event("data", "https://h/images.tar.gz", 3 * 1024 * 1024, 8 * 1024 * 1024))
    state = fold(state, init_event("model", "timm/resnet50d.ra2_in1k", 0, None))
    plan = at(state, plan.status)
    assert plan.status["phase"] == "Pending" and "Running" not in {c["type"] for c in plan.status["conditions"]}
    assert condition(plan, "Initialized")["message"] == (
        "downloading: data 3.0 MiB of 8.0 MiB from https://h/images.tar.gz; model 0 B of ? from timm/resnet50d.ra2_in1k")
    assert condition(plan, "Initialized")["message"] in plan.status["message"]
    plan = at(fold(state, initialized_event()), plan.status)
    assert plan.status["phase"] == "Running" and condition(plan, "Running")["status"] == "True"
    assert (condition(plan, "Initialized")["status"], condition(plan, "Initialized")["reason"]) == ("True", "Downloaded")


def test_a_job_without_downloads_has_no_initialized_condition(spec):
    plan = step(spec, None, pods("Running", "Running"))
    assert plan.status["phase"] == "Running" and "Initialized" not in {c["type"] for c in plan.status["conditions"]}


def test_an_unavailable_data_set_fails_the_job_with_its_reason(spec):
    failed = [PodView("pets-0", "u0", 0, 0, "Failed", exit_code=2, reason="Error",
                      message="error: DataUnavailable: http://h/p.tgz: HTTP 404 Not Found"),
              PodView("pets-1", "u1", 1, 0, "Running")]
    plan = step(spec, None, failed)
    assert plan.status["phase"] == "Failed"
    assert condition(plan, "Failed")["reason"] == "DataUnavailable"
    assert condition(plan, "Initialized")["reason"] == "DataUnavailable"
    assert "http://h/p.tgz: HTTP 404 Not Found" in plan.status["message"]


def test_a_succeeded_job_names_where_its_model_is(spec):
    from pets_operator.spec import with_defaults

    spec = with_defaults({**spec, "output": {"persistentVolumeClaim": {"claimName": "models"}}}, "img")
    plan = step(spec, None, pods("Succeeded", "Succeeded"))
    assert plan.status["output"] == {"path": "/output", "persistentVolumeClaim": "models"}
    assert plan.status["message"] == "all 2 worker(s) succeeded; the model is in PVC models (/output in the pods)"
