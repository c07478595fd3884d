"""The runner's acting side against a fake API: failed calls become job status, backoff and log lines."""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import threading
from datetime import timedelta

import pytest

from pets_operator import runner as runner_module
from pets_operator.config import OperatorConfig
from pets_operator.kube import KubeError
from pets_operator.refusals import CONFLICT, QUOTA, REFUSED, TRANSIENT, ApiFailure
from pets_operator.runner import MINOR_SETTLE_SECONDS, JobRunner, minor_change
from pets_operator.status import PodView


class FakeKube:
    """Just enough of `Kube`: a job's status, pods that appear when created, failures on demand."""

    def __init__(self, status=None):
        self.status = copy.deepcopy(status or {})
        self.pods: dict[str, PodView] = {}
        self.fail_service: list[ApiFailure] = []
        self.fail_pod: list[ApiFailure] = []
        self.fail_patch: list[ApiFailure] = []
        self.patches: list[dict] = []
        self.created: list[str] = []  # "<kind>/<name>" in the order of the create calls

    def patch_job_status(self, namespace, name, status):
        if self.fail_patch:
            raise KubeError(self.fail_patch.pop(0))
        self.patches.append(copy.deepcopy(status))
        for key, value in status.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = copy.deepcopy(value)
        return {"status": copy.deepcopy(self.status)}

    def create_service(self, body):
        if self.fail_service:
            raise KubeError(self.fail_service.pop(0))
        self.created.append(f"Service/{body['metadata']['name']}")
        return True

    def create_network_policy(self, body):
        self.created.append(f"NetworkPolicy/{body['metadata']['name']}")
        return True

    def create_pod(self, body):
        if self.fail_pod:
            raise KubeError(self.fail_pod.pop(0))
        meta = body["metadata"]
        self.created.append(f"Pod/{meta['name']}")
        index = int(meta["labels"]["training.pets.dev/replica-index"])
        attempt = int(meta["labels"]["training.pets.dev/attempt"])
        self.pods[meta["name"]] = PodView(meta["name"], f"uid-{meta['name']}-{attempt}", index, attempt, "Pending")
        return True

    def delete_pod(self, namespace, name):
        self.pods.pop(name, None)


class FakeLogStreams:
    """Stands in for `logfollow.LogStreams`: records whom the runner follows; a follower drains when told."""

    def __init__(self):
        self.followed: list[tuple] = []
        self.followers: dict[str, FakeFollower] = {}

    def follow(self, namespace, pod, container, uid, book, on_drained, attempt=None):
        self.followed.append((namespace, pod, container, uid, book, attempt))
        self.followers[uid] = FakeFollower(on_drained)
        return self.followers[uid]


class FakeFollower:
    def __init__(self, on_drained):
        self.drained = asyncio.Event()
        self.stopped = False
        self._on_drained = on_drained

    def drain(self):
        self.drained.set()
        self._on_drained()

    def stop(self):
        self.stopped = True


JOB = {"metadata": {"name": "pets", "namespace": "ml", "uid": "uid-1", "generation": 1},
       "spec": {"numNodes": 2, "epochs": 5, "data": {"synthetic": {}}}}


def make_runner(kube, status=None, spec=None, config=OperatorConfig(), log_streams=None):
    job = copy.deepcopy(JOB)
    if spec:
        job["spec"].update(spec)
    if status is not None:
        job["status"] = copy.deepcopy(status)
    events = []
    runner = JobRunner(kube, job, config, lambda: list(kube.pods.values()), events.append, asyncio.Event(),
                       log_streams=log_streams or FakeLogStreams())
    return runner, events


async def one_step(runner):
    return await runner.carry_out(runner.step())


async def test_a_refused_pod_fails_the_job_and_posts_one_warning():
    kube = FakeKube()
    runner, events = make_runner(kube)
    kube.fail_pod = [ApiFailure(422, "Invalid", 'Pod "pets-1" is invalid: bad'), ApiFailure(422, "Invalid", "bad")]
    await one_step(runner)
    assert runner.create_failure.kind == REFUSED and events == []
    assert "conditions" not in kube.status  # nothing claimed
    await one_step(runner)
    assert kube.status["phase"] == "Failed" and 'Pod "pets-1" is invalid: bad' in kube.status["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", "CreateRefused")]
    assert {c["type"] for c in kube.status["conditions"]} == {"Failed"}


async def test_a_quota_refusal_is_retried_after_a_backoff():
    kube = FakeKube()
    runner, events = make_runner(kube)
    quota = ApiFailure(403, "Forbidden", 'pods "pets-0" is forbidden: exceeded quota: q, requested: pods=1')
    kube.fail_service = [quota]
    await one_step(runner)
    assert runner.create_failure.kind == QUOTA and runner.create_failure.failures == 1
    plan = runner.step()
    assert plan.create_pods == [] and plan.wake_at == runner.create_failure.retry_at
    await runner.carry_out(plan)
    assert kube.status["phase"] == "Pending" and [e.reason for e in events] == ["QuotaExceeded"]
    # The backoff passed: the next step creates, and the pods' arrival is what announces Created.
    runner.create_failure = dataclasses.replace(runner.create_failure, at=runner.create_failure.at - timedelta(seconds=5))
    await one_step(runner)
    assert runner.create_failure is None and len(kube.pods) == 2
    await one_step(runner)
    created = next(c for c in kube.status["conditions"] if c["type"] == "Created")
    assert created["status"] == "True" and [e.reason for e in events] == ["QuotaExceeded", "Created"]


async def test_consecutive_failures_count_up_for_the_backoff():
    kube = FakeKube()
    runner, _ = make_runner(kube)
    kube.fail_pod = [ApiFailure(500, "InternalError", "x")] * 2 + [ApiFailure(None, "ReadTimeoutError", "slow")] * 2
    await one_step(runner)
    first = runner.create_failure
    assert first.kind == TRANSIENT and first.failures == 1
    runner.create_failure = dataclasses.replace(first, at=first.at - timedelta(seconds=5))
    await one_step(runner)
    assert runner.create_failure.failures == 2 and runner.create_failure.failure.code is None


async def test_failed_calls_never_end_the_daemon(monkeypatch, caplog):
    monkeypatch.setattr(runner_module, "backoff_seconds", lambda failures: 0.01)
    kube = FakeKube()
    kube.fail_patch = [ApiFailure(500, "InternalError", "etcd"), ApiFailure(None, "ProtocolError", "dropped")]
    runner, _ = make_runner(kube)

    class Stopped:
        steps = 0

        def __bool__(self):
            self.steps += 1
            return self.steps > 6

    with caplog.at_level(logging.INFO, logger="pets_operator.runner"):
        await runner.run(Stopped())
    assert kube.fail_patch == [] and kube.status["phase"] == "Pending" and len(kube.pods) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(":")[0] for r in warnings] == ["API call failed", "API call failed"]
    assert all(r.exc_info is None for r in caplog.records)


class StopFlag:
    """kopf's DaemonStopped, as far as the runner uses it."""

    def __init__(self):
        self.flag = asyncio.Event()

    def __bool__(self):
        return self.flag.is_set()

    def wait(self, timeout=None):
        return self.flag.wait()


async def test_the_daemon_leaves_at_once_when_told_to_stop():
    kube = FakeKube()
    runner, _ = make_runner(kube)

    class Stopped:
        def __init__(self):
            self.flag = asyncio.Event()

        def __bool__(self):
            return self.flag.is_set()

        def wait(self, timeout=None):
            return self.flag.wait()

    stopped = Stopped()
    task = asyncio.create_task(runner.run(stopped))
    await asyncio.sleep(0.3)
    stopped.flag.set()
    await asyncio.wait_for(task, 0.5)  # not the idle recheck's whole second


async def test_epochs_beyond_spec_epochs_are_dropped_from_the_status_first():
    stale = [{"epoch": n, "accuracy": 0.1 * n} for n in range(8)]
    status = {"phase": "Succeeded", "epochs": stale, "currentEpoch": 8, "accuracy": 0.7, "bestAccuracy": 0.7,
              "restarts": 0}
    kube = FakeKube(status)
    runner, _ = make_runner(kube, status)
    stopped = StopFlag()
    task = asyncio.create_task(runner.run(stopped))
    await asyncio.sleep(0.1)  # a finished job's daemon stays (idle, for spec changes) until told to stop
    stopped.flag.set()
    await asyncio.wait_for(task, 1)
    assert kube.patches[0]["currentEpoch"] == 5
    assert [e["epoch"] for e in kube.status["epochs"]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("checkpoint, kept", [(None, []), ({"path": "/checkpoints"}, [0, 1])])
async def test_a_restart_clears_or_keeps_the_epochs_in_its_own_patch(checkpoint, kept):
    epochs = [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.6}]
    kube = FakeKube()
    spec = {"backoffLimit": 1, **({"checkpoint": checkpoint} if checkpoint else {})}
    runner, _ = make_runner(kube, spec=spec)
    await one_step(runner)
    for name, pod in list(kube.pods.items()):
        kube.pods[name] = dataclasses.replace(pod, phase="Running")
    await one_step(runner)
    kube.status.update(epochs=epochs, currentEpoch=2, accuracy=0.6, bestAccuracy=0.6)
    runner.book.add(epochs)
    kube.pods["pets-1"] = dataclasses.replace(kube.pods["pets-1"], phase="Failed", exit_code=3)
    await one_step(runner)
    restart = kube.patches[-1]
    assert restart["restarts"] == 1
    assert [e["epoch"] for e in kube.status.get("epochs") or []] == kept
    if not kept:
        assert restart["epochs"] == [] and restart["currentEpoch"] is None
        assert "currentEpoch" not in kube.status and "accuracy" not in kube.status
    assert runner.book.attempt == 1
    assert not runner.book.add([{"epoch": 2, "accuracy": 0.9}], attempt=0)  # the old group's pod 0


async def test_the_network_policy_comes_before_the_pods_unless_turned_off():
    kube = FakeKube()
    runner, _ = make_runner(kube)
    await one_step(runner)
    assert sorted(kube.created[:2]) == ["NetworkPolicy/pets-workers", "Service/pets-workers"]
    assert sorted(kube.created[2:]) == ["Pod/pets-0", "Pod/pets-1"]
    kube = FakeKube()
    runner, _ = make_runner(kube, config=OperatorConfig(network_policy=False))
    await one_step(runner)
    assert not [name for name in kube.created if name.startswith("NetworkPolicy/")]
    assert sorted(kube.created) == ["Pod/pets-0", "Pod/pets-1", "Service/pets-workers"]


class MeetingKube(FakeKube):
    """The Service's create answers only once the NetworkPolicy's has been sent: only calls made together end."""

    def __init__(self):
        super().__init__()
        self.policy_sent = threading.Event()

    def create_service(self, body):
        assert self.policy_sent.wait(5), "the Service's create waited for the NetworkPolicy's to be done"
        return super().create_service(body)

    def create_network_policy(self, body):
        self.policy_sent.set()
        return super().create_network_policy(body)


async def test_the_service_and_the_network_policy_are_created_together_the_pods_after_both():
    kube = MeetingKube()
    runner, _ = make_runner(kube)
    await asyncio.wait_for(one_step(runner), 10)
    assert runner.create_failure is None
    assert kube.created[0] == "NetworkPolicy/pets-workers" and kube.created[1] == "Service/pets-workers"
    assert sorted(kube.created[2:]) == ["Pod/pets-0", "Pod/pets-1"]


class RefusingKube(FakeKube):
    """The NetworkPolicy's create fails with `policy_failure`."""

    def __init__(self, policy_failure):
        super().__init__()
        self.policy_failure = policy_failure

    def create_network_policy(self, body):
        raise KubeError(self.policy_failure)


async def test_a_failed_service_or_network_policy_creates_no_pod_and_the_worst_failure_counts():
    kube = RefusingKube(ApiFailure(422, "Invalid", 'NetworkPolicy "pets-workers" is invalid: bad'))
    kube.fail_service = [ApiFailure(503, "ServiceUnavailable", "etcd")]
    runner, _ = make_runner(kube)
    await one_step(runner)
    assert kube.pods == {} and runner.create_failure.kind == REFUSED
    assert runner.create_failure.what == "NetworkPolicy pets-workers" and runner.create_failure.failures == 1
    kube = RefusingKube(ApiFailure(503, "ServiceUnavailable", "etcd"))  # only the policy fails: the Service is made
    runner, _ = make_runner(kube)
    await one_step(runner)
    assert kube.pods == {} and kube.created == ["Service/pets-workers"]
    assert runner.create_failure.kind == TRANSIENT and runner.create_failure.what == "NetworkPolicy pets-workers"


class TakenPolicyKube(FakeKube):
    """Another's NetworkPolicy is there under the job's name."""

    def create_network_policy(self, body):
        return False  # 409 AlreadyExists

    def existing(self, body):
        return {"kind": body["kind"], "metadata": {"name": body["metadata"]["name"], "ownerReferences": []}}


async def test_a_network_policy_name_taken_names_its_occupant_and_creates_no_pod():
    kube = TakenPolicyKube()
    runner, _ = make_runner(kube)
    await one_step(runner)
    assert kube.pods == {} and runner.create_failure.kind == CONFLICT
    assert runner.create_failure.what == "NetworkPolicy pets-workers"
    assert runner.create_failure.occupant.describe().startswith("NetworkPolicy pets-workers already exists")


async def test_pod_0_s_tracking_lines_reach_the_status_in_one_patch_and_one_event():
    from pets_api.metric_lines import tracking_degraded_event, tracking_event

    kube = FakeKube()
    runner, events = make_runner(kube, spec={"tracking": {"mlflow": {"trackingUri": "http://mlflow:5000"}}})
    await one_step(runner)
    for name, pod in list(kube.pods.items()):
        kube.pods[name] = dataclasses.replace(pod, phase="Running")
    await one_step(runner)
    runner.book.note_tracking(tracking_event("mlflow", run_id="r1", experiment_id="1", tracking_uri="http://mlflow:5000"))
    runner.book.note_tracking(tracking_degraded_event("mlflow", "ConnectionError: refused"))
    patches = len(kube.patches)
    await one_step(runner)
    assert kube.status["tracking"] == {"mlflow": {"runId": "r1", "experimentId": "1", "trackingUri": "http://mlflow:5000"}}
    [condition] = [c for c in kube.status["conditions"] if c["type"] == "TrackingDegraded"]
    assert condition["status"] == "True" and condition["message"].startswith("mlflow: ConnectionError: refused")
    assert [e.reason for e in events if e.type == "Warning"] == ["TrackingDegraded"]
    await one_step(runner)  # nothing new: no patch, no event
    assert len(kube.patches) == patches + 1 and len([e for e in events if e.type == "Warning"]) == 1
    assert kube.status["phase"] == "Running"


class ClashingKube(FakeKube):
    """pets-1 is there already, owned by `owner` (a dict ownerReference, or None for a plain pod)."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def create_pod(self, body):
        if body["metadata"]["name"] == "pets-1":
            return False  # 409 AlreadyExists
        return super().create_pod(body)

    def existing(self, body):
        meta = {"name": body["metadata"]["name"], "ownerReferences": [self.owner] if self.owner else []}
        return {"kind": body["kind"], "metadata": meta}


async def test_a_pod_already_there_counts_only_when_its_owner_is_this_job():
    mine = ClashingKube({"kind": "PetsTrainingJob", "name": "pets", "uid": "uid-1", "controller": True})
    runner, _ = make_runner(mine)
    await one_step(runner)
    assert runner.create_failure is None  # an earlier step's pod: adopted, not created again
    plain = ClashingKube(None)
    runner, events = make_runner(plain)
    await one_step(runner)
    assert runner.create_failure.kind == CONFLICT and runner.create_failure.what == "Pod pets-1"
    assert runner.create_failure.occupant.describe() == "Pod pets-1 already exists and is not this job's: it has no owner"
    await one_step(runner)
    assert plain.status["phase"] == "Failed" and [e.reason for e in events] == ["NameConflict"]


async def test_failed_mount_events_of_waiting_pods_reach_the_status():
    kube = FakeKube()
    message = 'MountVolume.SetUp failed for volume "data" : hostPath type check failed: /d is not a directory'
    reads = []

    def failed_mounts(namespace):
        reads.append(namespace)
        return {"uid-pets-0-0": message, "uid-of-another-pod": "not this job's"}

    kube.failed_mounts = failed_mounts
    runner, events = make_runner(kube)
    await one_step(runner)  # creates the pods (Pending, no container state yet: nothing to read)
    kube.pods = {name: dataclasses.replace(pod, reason="ContainerCreating") for name, pod in kube.pods.items()}
    await runner._read_mount_failures()
    await runner._read_mount_failures()  # within MOUNT_CHECK_SECONDS: not read again
    assert reads == ["ml"] and runner.mount_failures == {"pets-0": message}
    await one_step(runner)
    assert f"pod pets-0 cannot mount its volumes: {message}" in kube.status["message"]
    assert "FailedMount" in [e.reason for e in events]
    kube.pods = {name: dataclasses.replace(pod, phase="Running", reason=None) for name, pod in kube.pods.items()}
    await runner._read_mount_failures()
    assert runner.mount_failures == {} and reads == ["ml"]


def test_each_epoch_is_logged_once_and_none_the_status_had(caplog):
    kube = FakeKube()
    known = [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.6}]

    async def make():
        return make_runner(kube, {"epochs": known, "restarts": 0})[0]

    runner = asyncio.run(make())
    with caplog.at_level(logging.INFO):
        runner._publish_epochs({"epochs": known + [{"epoch": 2, "accuracy": 0.7}, {"epoch": 3, "accuracy": 0.8}]})
        runner._publish_epochs({"epochs": known + [{"epoch": 2, "accuracy": 0.7}, {"epoch": 3, "accuracy": 0.8}]})
    assert [r.getMessage() for r in caplog.records] == ["epoch 2: accuracy 0.7000", "epoch 3: accuracy 0.8000"]


async def test_pod_0_is_followed_once_it_runs_and_the_job_succeeds_once_its_log_is_read():
    kube, streams = FakeKube(), FakeLogStreams()
    runner, _ = make_runner(kube, spec={"numNodes": 1}, log_streams=streams)
    await one_step(runner)
    assert streams.followed == []  # Pending: the log is not there yet
    kube.pods["pets-0"] = dataclasses.replace(kube.pods["pets-0"], phase="Running")
    await one_step(runner)
    await one_step(runner)
    assert streams.followed == [("ml", "pets-0", "trainer", "uid-pets-0-0", runner.book, 0)]  # once
    kube.pods["pets-0"] = dataclasses.replace(kube.pods["pets-0"], phase="Succeeded", exit_code=0)
    await one_step(runner)
    assert kube.status["message"] == "1 of 1 worker(s) running"  # news of the worker counts waits a moment
    runner._minor_since -= MINOR_SETTLE_SECONDS  # ... and goes out once that passed, the log still not read
    await one_step(runner)
    assert kube.status["phase"] == "Running" and "reading the last metric lines" in kube.status["message"]
    runner.wakeup.clear()
    streams.followers["uid-pets-0-0"].drain()
    assert runner.wakeup.is_set()  # the step comes at once, not at the idle recheck
    await one_step(runner)
    assert kube.status["phase"] == "Succeeded"


async def test_the_group_s_pods_ending_within_a_moment_cost_one_status_patch():
    kube, streams = FakeKube(), FakeLogStreams()
    runner, _ = make_runner(kube, log_streams=streams)
    await one_step(runner)
    for name in ("pets-0", "pets-1"):
        kube.pods[name] = dataclasses.replace(kube.pods[name], phase="Running")
    await one_step(runner)
    assert kube.status["phase"] == "Running"
    streams.followers["uid-pets-0-0"].drain()
    patches = len(kube.patches)
    kube.pods["pets-0"] = dataclasses.replace(kube.pods["pets-0"], phase="Succeeded", exit_code=0)
    await one_step(runner)  # pod 0 first: only the worker counts change, held
    assert len(kube.patches) == patches and runner._minor_since is not None
    kube.pods["pets-1"] = dataclasses.replace(kube.pods["pets-1"], phase="Succeeded", exit_code=0)
    await one_step(runner)  # pod 1 a moment later: the phase changes, one patch has it all
    assert len(kube.patches) == patches + 1 and kube.status["phase"] == "Succeeded"
    assert kube.status["workers"]["succeeded"] == 2 and runner._minor_since is None


def test_a_minor_change_is_only_worker_counts_or_the_message_in_a_phase_that_goes_on():
    running = {"phase": "Running", "message": "2 of 2 worker(s) running", "workers": {"running": 2}}
    assert minor_change({**running, "workers": {"running": 1, "succeeded": 1}}, running)
    assert minor_change({**running, "message": "all workers succeeded; reading the last metric lines"}, running)
    assert not minor_change(running, running)
    assert not minor_change({**running, "phase": "Succeeded"}, running)
    assert not minor_change({**running, "conditions": [{"type": "Running"}]}, running)
    assert not minor_change({**running, "phase": "Failed", "message": "x"}, {**running, "phase": "Failed"})
