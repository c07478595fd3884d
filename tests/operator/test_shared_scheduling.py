"""Shared clusters, the pure parts: what the pods carry for Kueue and the gang schedulers (their
PodGroups' exact shape), and the decisions of suspend/resume, the deadline's clock while suspended,
and a group Kueue preempts while its old pods are still held by Kueue's finalizer."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import kubernetes_validate
import pytest

from pets_api import names
from pets_operator import builders
from pets_operator.reconcile import disruption, reconcile
from pets_operator.spec import with_defaults
from pets_operator.status import PodView

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
KUEUE_KEYS = {names.KUEUE_QUEUE_NAME_LABEL, names.KUEUE_POD_GROUP_NAME_LABEL,
              names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION, names.KUEUE_RETRIABLE_IN_GROUP_ANNOTATION}


def shared(spec, **fields):
    return with_defaults({**{k: v for k, v in spec.items() if k != "image"}, **fields}, spec["image"])


def metadata_keys(pod) -> set[str]:
    return set(pod["metadata"]["labels"]) | set(pod["metadata"]["annotations"])


# --- Kueue's plain-Pod group --------------------------------------------------------------------

@pytest.mark.parametrize("index", [0, 1])
def test_spec_queue_name_makes_each_attempt_one_kueue_pod_group(job, spec, index):
    pod = builders.pod_body(job, shared(spec, queueName="team-a"), index, attempt=3)
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[names.KUEUE_QUEUE_NAME_LABEL] == "team-a"
    # The attempt's group, one Workload per attempt, of this job (uid-1: its uid up to the first '-').
    assert labels[names.KUEUE_POD_GROUP_NAME_LABEL] == "pets-uid-3"
    assert annotations[names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] == "2"  # numNodes, as a string
    assert annotations[names.KUEUE_RETRIABLE_IN_GROUP_ANNOTATION] == "false"
    # Kueue's webhook gates the pods (until it admits the whole group) and adds its finalizer, where it
    # manages the namespace; a gate set here would hold the pods forever where it does not.
    assert "schedulingGates" not in pod["spec"]
    assert "finalizers" not in pod["metadata"]
    kubernetes_validate.validate(pod, "1.30", strict=True)


def test_the_job_s_own_queue_name_label_is_honoured_and_spec_wins(job, spec):
    labelled = {**job, "metadata": {**job["metadata"], "labels": {names.KUEUE_QUEUE_NAME_LABEL: "from-label"}}}
    pod = builders.pod_body(labelled, spec, 0, attempt=0)
    assert pod["metadata"]["labels"][names.KUEUE_QUEUE_NAME_LABEL] == "from-label"
    assert pod["metadata"]["labels"][names.KUEUE_POD_GROUP_NAME_LABEL] == "pets-uid-0"
    assert pod["metadata"]["annotations"][names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] == "2"
    assert builders.queue_name(labelled, spec) == "from-label"
    assert builders.queue_name(labelled, shared(spec, queueName="from-spec")) == "from-spec"


def test_without_a_queue_the_pods_carry_nothing_of_kueue(job, spec):
    pod = builders.pod_body(job, spec, 0, attempt=0)
    assert not metadata_keys(pod) & KUEUE_KEYS and "schedulingGates" not in pod["spec"]
    assert "schedulerName" not in pod["spec"] and "priorityClassName" not in pod["spec"]


UID, LATER_UID = "5f0c2a7e-95d4-4a44-b1a8-0c5b1d0b8e11", "c81e728d-9d4c-4f63-a2b0-9f1e2d3c4b5a"


@pytest.mark.parametrize("job_name", ["a" * 63, "a" * 61, "x" * 40 + "-" + "y" * 22, "pets"])
def test_kueue_group_names_are_valid_labels_distinct_per_attempt_and_per_job(job_name):
    groups = [names.kueue_pod_group_name(job_name, attempt, uid) for attempt in (0, 9, 10, 123)
              for uid in (UID, LATER_UID, "")]
    assert all(names.is_dns1123_label(group) for group in groups), groups
    # Each attempt of each job of that name its own group: a job created again under the name never
    # sends its group into the Workload of the old job's group of the same attempt.
    assert len(set(groups)) == len(groups)
    # Two long names that differ only past the cut still get different groups.
    assert names.kueue_pod_group_name(job_name[:-1] + "b", 0, UID) != groups[0]


def test_a_kueue_group_name_is_the_job_its_uid_and_the_attempt():
    assert names.kueue_pod_group_name("pets", 2, UID) == "pets-5f0c2a7e-2"
    assert names.kueue_pod_group_name("pets", 2) == "pets-2"


def test_the_job_s_workload_priority_class_label_goes_on_its_pods(job, spec):
    labelled = {**job, "metadata": {**job["metadata"], "labels": {names.KUEUE_PRIORITY_CLASS_LABEL: "batch-high"}}}
    pod = builders.pod_body(labelled, shared(spec, queueName="team-a"), 0, attempt=0)
    assert pod["metadata"]["labels"][names.KUEUE_PRIORITY_CLASS_LABEL] == "batch-high"
    # Without a queue Kueue does not see the pods: nothing of it on them.
    assert names.KUEUE_PRIORITY_CLASS_LABEL not in builders.pod_body(labelled, spec, 0, attempt=0)["metadata"]["labels"]


def test_a_group_kueue_holds_says_which_workload_waits_for_admission(job, spec):
    spec = shared(spec, queueName="team-a")
    gates = (names.KUEUE_ADMISSION_GATE, "kueue.x-k8s.io/topology")
    gated = [PodView(f"pets-{i}", f"uid-{i}", i, 0, "Pending", gates=gates, kueue_group="pets-5f0c2a7e-0",
                     kueue_queue="team-a") for i in (0, 1)]
    plan = step(spec, step(spec).status, gated)
    assert plan.status["phase"] == "Pending" and plan.create_pods == [] and plan.delete_pods == []
    assert plan.status["message"] == (
        "0 of 2 worker(s) running; waiting for Kueue admission of Workload pets-5f0c2a7e-0 in LocalQueue team-a: "
        "2 pod(s) wait for scheduling gate kueue.x-k8s.io/admission, kueue.x-k8s.io/topology to be removed "
        "(Kueue admits the whole group once its queue has room for it)")
    assert "Scheduled" not in {c["type"] for c in plan.status["conditions"]}  # waiting, not a problem
    # Another gate than Kueue's: the gates only.
    other = [PodView("pets-0", "u0", 0, 0, "Pending", gates=("example.com/hold",)), gated[1]]
    assert "wait for scheduling gate example.com/hold, kueue.x-k8s.io/admission" in \
        step(spec, step(spec).status, other).status["message"]


def test_pod_view_reads_the_kueue_group_and_queue(job, spec):
    from pets_operator.status import pod_view

    pod = builders.pod_body(job, shared(spec, queueName="team-a"), 1, attempt=0)
    view = pod_view(pod)
    assert (view.kueue_group, view.kueue_queue) == ("pets-uid-0", "team-a")
    assert pod_view(builders.pod_body(job, spec, 1, attempt=0)).kueue_group is None


# --- gang scheduling -------------------------------------------------------------------------------

def test_volcano_pod_group_and_pods(job, spec):
    volcano = shared(spec, gangScheduling={"scheduler": "volcano"}, priorityClassName="batch-high",
                     resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}})
    group = builders.pod_group_body(job, volcano)
    assert group == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pets", "namespace": "ml",
                     "labels": {names.LABEL_JOB_NAME: "pets", names.LABEL_MANAGED_BY: names.MANAGED_BY},
                     "ownerReferences": [builders.owner_reference(job)]},
        # All of the group or none of it; what all its pods request together (limits stand in for requests);
        # no queue: Volcano's `default` queue; no scheduleTimeoutSeconds: Coscheduling's field only.
        "spec": {"minMember": 2, "minResources": {"cpu": "1", "memory": "2147483648", "nvidia.com/gpu": "2"},
                 "priorityClassName": "batch-high"},
    }
    for index in (0, 1):
        pod = builders.pod_body(job, volcano, index, attempt=0)
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "pets"  # Volcano's pod -> group key
        assert names.COSCHEDULING_POD_GROUP_LABEL not in pod["metadata"]["labels"]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["spec"]["priorityClassName"] == "batch-high"
        kubernetes_validate.validate(pod, "1.30", strict=True)
    renamed = builders.pod_body(job, volcano, 0, 0, scheduler_names={"coscheduling": "x", "volcano": "vc-batch"})
    assert renamed["spec"]["schedulerName"] == "vc-batch"


def test_coscheduling_pod_group_and_pods(job, spec):
    gang = shared(spec, gangScheduling={"scheduler": "coscheduling", "scheduleTimeoutSeconds": 45},
                  resources={"requests": {"cpu": "1500m"}})
    group = builders.pod_group_body(job, gang)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and group["kind"] == "PodGroup"
    assert group["spec"] == {"minMember": 2, "minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 45}
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = builders.pod_body(job, gang, 1, attempt=2)
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pets"
    assert "scheduling.k8s.io/group-name" not in pod["metadata"]["annotations"]
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert builders.pod_group_body(job, spec) is None  # no gangScheduling, no PodGroup


def test_kueue_and_gang_scheduling_together(job, spec):
    both = shared(spec, queueName="team-a", gangScheduling={"scheduler": "coscheduling"})
    pod = builders.pod_body(job, both, 0, attempt=1)
    assert pod["metadata"]["labels"][names.KUEUE_POD_GROUP_NAME_LABEL] == "pets-uid-1"
    assert pod["metadata"]["labels"][names.COSCHEDULING_POD_GROUP_LABEL] == "pets"
    assert "schedulingGates" not in pod["spec"] and pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


# --- suspend and resume, the deadline's clock ------------------------------------------------------

def pods(*phases, attempt=0, **fields):
    return [PodView(f"pets-{i}", f"uid-{attempt}-{i}", i, attempt, phase, ready=phase == "Running", **fields)
            for i, phase in enumerate(phases)]


def step(spec, status=None, current=(), now=T0):
    return reconcile("pets", spec, status, 1, current, now, [])


def condition(plan, type_):
    return next(c for c in plan.status["conditions"] if c["type"] == type_)


def test_suspending_a_running_job_deletes_its_group_and_keeps_its_checkpoint(spec):
    spec = shared(spec, checkpoint={})
    running = step(spec, step(spec).status, pods("Running", "Running"))
    suspended = step({**spec, "suspend": True}, running.status, pods("Running", "Running"), now=T0 + timedelta(seconds=5))
    assert sorted(suspended.delete_pods) == ["pets-0", "pets-1"] and suspended.create_pods == []
    assert suspended.status["phase"] == "Suspended" and suspended.status["restarts"] == 0
    assert suspended.new_attempt == suspended.status["attempt"] == 1 and suspended.clear_epochs is False
    assert condition(suspended, "Suspended")["status"] == "True" and condition(suspended, "Running")["status"] == "False"
    assert [(e.type, e.reason) for e in suspended.events] == [("Normal", "Suspended")]
    assert "checkpoint stays" in suspended.events[0].message
    # The pods going (held, still terminating): nothing more, no second event, no new attempt.
    going = step({**spec, "suspend": True}, suspended.status, pods("Running", "Running", deleting=True),
                 now=T0 + timedelta(seconds=6))
    assert going.delete_pods == [] and going.events == [] and going.new_attempt is None
    assert going.status["attempt"] == 1 and "2 pod(s) still to go" in going.status["message"]
    # Resumed: the next attempt's group is created, one Resumed event.
    resumed = step(spec, going.status, [], now=T0 + timedelta(seconds=60))
    assert resumed.create_pods == [0, 1] and [e.reason for e in resumed.events] == ["Resumed"]
    assert condition(resumed, "Suspended")["status"] == "False" and condition(resumed, "Suspended")["reason"] == "JobResumed"
    assert "resuming from the last checkpoint" in resumed.events[0].message


def test_suspending_without_a_checkpoint_clears_the_epochs(spec):
    running = step(spec, step(spec).status, pods("Running", "Running"))
    suspended = step({**spec, "suspend": True}, running.status, pods("Running", "Running"))
    assert suspended.clear_epochs is True and "checkpoint" not in suspended.events[0].message


def test_a_job_created_suspended_creates_nothing_until_resumed(spec):
    held = {**spec, "suspend": True}
    first = step(held)
    assert first.create_pods == [] and first.delete_pods == [] and first.new_attempt is None
    assert first.status["phase"] == "Suspended" and "startTime" not in first.status
    assert [e.reason for e in first.events] == ["Suspended"]
    again = step(held, first.status, now=T0 + timedelta(hours=1))
    assert again.create_pods == [] and again.events == [] and again.status["attempt"] == 0
    resumed = step(spec, again.status, now=T0 + timedelta(hours=2))
    assert resumed.create_pods == [0, 1] and resumed.status["attempt"] == 0
    # The clock starts at the resumption: the time before it was never running time.
    assert resumed.status["startTime"] == "2026-01-01T02:00:00Z" and not resumed.status.get("suspendedSeconds")


def test_the_deadline_clock_stands_still_while_suspended(spec):
    spec = shared(spec, activeDeadlineSeconds=100, checkpoint={})
    running = step(spec, step(spec).status, pods("Running", "Running"))
    assert running.wake_at == T0 + timedelta(seconds=100)
    suspended = step({**spec, "suspend": True}, running.status, pods("Running", "Running"),
                     now=T0 + timedelta(seconds=60))  # 60 s of the 100 used
    # Long past the deadline by the wall clock, and still merely suspended.
    still = step({**spec, "suspend": True}, suspended.status, [], now=T0 + timedelta(seconds=1000))
    assert still.status["phase"] == "Suspended" and "Failed" not in {c["type"] for c in still.status["conditions"]}
    resumed = step(spec, still.status, [], now=T0 + timedelta(seconds=1060))
    assert resumed.status["suspendedSeconds"] == 1000 and resumed.create_pods == [0, 1]
    assert resumed.wake_at == T0 + timedelta(seconds=1100)  # the 40 s left
    again = step(spec, resumed.status, pods("Running", "Running", attempt=1), now=T0 + timedelta(seconds=1099))
    assert again.status["phase"] == "Running"
    late = step(spec, again.status, pods("Running", "Running", attempt=1), now=T0 + timedelta(seconds=1100))
    assert late.status["phase"] == "Failed" and condition(late, "Failed")["reason"] == "DeadlineExceeded"
    # A second suspension adds to the first.
    resuspended = step({**spec, "suspend": True}, again.status, pods("Running", "Running", attempt=1),
                       now=T0 + timedelta(seconds=1090))
    twice = step(spec, resuspended.status, [], now=T0 + timedelta(seconds=1190))
    assert twice.status["suspendedSeconds"] == 1100 and twice.wake_at == T0 + timedelta(seconds=1200)


# --- Kueue's preemption ----------------------------------------------------------------------------

# What the real Kueue v0.17 puts on a preempted pod (its TerminationTarget condition: reason, message),
# as tests/e2e/test_kueue_jobs.py saw it.
PREEMPTED = ("WorkloadEvictedDueToPreempted: Preempted to accommodate a workload (UID: 5533f30a-2858-4532-bfa9-"
             "e58fdf7d39b0, JobUID: UNKNOWN) due to prioritization in the ClusterQueue; preemptor path: /pets-cq; "
             "preemptee path: /pets-cq")


def test_a_preempted_group_is_requeued_not_counted_against_backoff(spec):
    spec = shared(spec, queueName="team-a", backoffLimit=0)
    running = step(spec, step(spec).status, pods("Running", "Running"))
    taken = pods("Running", "Running", deleting=True, disruption=PREEMPTED, finalizers=(names.KUEUE_FINALIZER,))
    plan = step(spec, running.status, taken)
    assert plan.status["restarts"] == 0 and plan.status["attempt"] == plan.new_attempt == 1
    assert plan.status["phase"] == "Pending" and condition(plan, "Requeued")["reason"] == "Preempted"
    assert "not counted against backoffLimit" in condition(plan, "Requeued")["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "Requeued")]
    assert plan.delete_pods == [] and plan.create_pods == []  # Kueue already deletes them; its finalizer holds them


# What the real Kueue v0.17 puts on the pods of a group it evicts because they were not all Ready within
# waitForPodsReady's timeout, as tests/e2e/test_kueue_pods_ready.py saw it.
PODS_READY_TIMEOUT = ("WorkloadEvictedDueToPodsReadyTimeout: Exceeded the PodsReady timeout "
                      "default/half-8a847480-0")


def test_a_group_evicted_for_not_starting_in_time_is_requeued_and_says_so(spec):
    spec = shared(spec, queueName="team-a", backoffLimit=0, checkpoint={})
    created = step(spec, step(spec).status, pods("Running", "Pending"))
    # Kueue stops both pods; the operator may see only the unscheduled one deleted so far.
    taken = pods("Running", "Pending", finalizers=(names.KUEUE_FINALIZER,))
    taken[1] = pods("Running", "Pending", deleting=True, disruption=PODS_READY_TIMEOUT,
                    finalizers=(names.KUEUE_FINALIZER,))[1]
    plan = step(spec, created.status, taken)
    requeued = condition(plan, "Requeued")
    assert requeued["reason"] == "PodsReadyTimeout"
    assert requeued["message"].startswith("Kueue evicted the group for not starting all its pods in time")
    assert f"({PODS_READY_TIMEOUT})" in requeued["message"] and "not counted against backoffLimit" in requeued["message"]
    assert plan.status["restarts"] == 0 and plan.status["attempt"] == plan.new_attempt == 1
    assert plan.status["phase"] == "Pending" and "Failed" not in {c["type"] for c in plan.status["conditions"]}
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Requeued")]
    assert plan.delete_pods == [taken[0].name]  # the whole group goes


def test_the_requeue_reason_tells_kueue_s_evictions_apart():
    assert disruption.requeue_reason(PODS_READY_TIMEOUT)[0] == "PodsReadyTimeout"
    assert disruption.requeue_reason(PREEMPTED) == ("Preempted", "")
    assert disruption.requeue_reason("EvictionByEvictionAPI: Eviction API: evicting") == ("PodsDeleted", "")
    assert disruption.requeue_reason(None) == ("PodsDeleted", "")


def test_the_new_group_waits_for_pods_held_by_kueue_s_finalizer(spec):
    spec = shared(spec, queueName="team-a")
    requeued = {"phase": "Pending", "restarts": 0, "attempt": 1, "startTime": "2026-01-01T00:00:00Z"}
    held = pods("Failed", "Failed", deleting=True, finalizers=(names.KUEUE_FINALIZER,))
    plan = step(spec, requeued, held)
    # The operator neither recreates the names nor touches the finalizer: it waits for Kueue to let them go.
    assert plan.create_pods == [] and plan.delete_pods == []
    assert "held by finalizer kueue.x-k8s.io/managed" in plan.status["message"]
    assert step(spec, plan.status, []).create_pods == [0, 1]


def test_a_replacement_deleted_while_old_pods_still_terminate_is_requeued_again(spec):
    spec = shared(spec, queueName="team-a", backoffLimit=0)
    status = {"phase": "Pending", "restarts": 0, "attempt": 1, "startTime": "2026-01-01T00:00:00Z"}
    old = pods("Running", "Running", deleting=True, finalizers=(names.KUEUE_FINALIZER,))  # attempt 0, terminating
    replacement = pods("Pending", attempt=1, deleting=True, finalizers=(names.KUEUE_FINALIZER,),
                       disruption=PREEMPTED)  # attempt 1's pod 0, deleted as well
    plan = step(spec, status, [replacement[0], old[1]])
    assert plan.status["attempt"] == 2 and plan.status["restarts"] == 0 and plan.status["phase"] == "Pending"
    assert plan.create_pods == [] and plan.delete_pods == []
    waiting = step(spec, plan.status, [replacement[0], old[1]])
    assert waiting.create_pods == [] and waiting.status["attempt"] == 2 and waiting.new_attempt is None
    assert "2 pod(s) of an earlier attempt" in waiting.status["message"]
    fresh = step(spec, waiting.status, [])
    assert fresh.create_pods == [0, 1] and fresh.status["attempt"] == 2 and fresh.status["restarts"] == 0
