"""The running/pending ladder: Running once every worker runs, else what the group waits for."""
from pets_operator.reconcile import reconcile
from pets_operator.status import PodView

from .helpers import T0, condition, pods, step


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


def test_a_job_with_downloads_is_pending_and_initializing_until_pod_0_has_them(spec):
    from pets_api.metric_lines import init_event, initialized_event
    from pets_operator.initialization import Initialization, fold
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


def test_a_volume_that_cannot_be_mounted_is_in_the_message_a_condition_and_one_event(spec):
    failed_mount = 'MountVolume.SetUp failed for volume "data" : hostPath type check failed: /nope is not a directory'
    creating = [PodView("pets-0", "u0", 0, 0, "Pending", reason="ContainerCreating"),
                PodView("pets-1", "u1", 1, 0, "Pending", reason="ContainerCreating")]
    mounts = {"pets-0": failed_mount, "pets-1": failed_mount}
    plan = step(spec, step(spec).status, creating, mount_failures=mounts)
    assert plan.status["phase"] == "Pending"
    assert plan.status["message"] == f"0 of 2 worker(s) running; pod pets-0 cannot mount its volumes: {failed_mount}"
    mounted = condition(plan, "VolumesMounted")
    assert (mounted["status"], mounted["reason"]) == ("False", "FailedMount") and failed_mount in mounted["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "Created"), ("Warning", "FailedMount")]
    assert step(spec, plan.status, creating, mount_failures=mounts).events == []  # once per message
    # The directory is there now: the workers start, the condition turns True.
    running = step(spec, plan.status, pods("Running", "Running"))
    assert condition(running, "VolumesMounted")["status"] == "True" and running.status["phase"] == "Running"
    # Without a mount failure there is no such condition at all.
    assert "VolumesMounted" not in {c["type"] for c in step(spec, step(spec).status, creating).status["conditions"]}
