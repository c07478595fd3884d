from datetime import datetime, timedelta, timezone

import pytest

from pets_api import names
from pets_operator.status import PodView, failure_cause, pod_view, set_condition, workers

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def pod(phase="Running", ready=True, terminated=None, labels=None):
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if terminated:
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    return {"metadata": {"name": "pets-1", "uid": "u1", "labels": labels if labels is not None else {
        names.LABEL_JOB_NAME: "pets", names.LABEL_REPLICA_INDEX: "1", names.LABEL_ATTEMPT: "2"}},
        "status": status}


def test_pod_view_reads_index_attempt_and_termination():
    view = pod_view(pod("Failed", ready=False, terminated={"exitCode": 3, "reason": "Error"}))
    assert (view.index, view.attempt, view.phase, view.exit_code, view.reason) == (1, 2, "Failed", 3, "Error")
    assert view.failed and view.finished
    assert view.describe_failure() == "worker pets-1 failed (exit code 3; Error)"


def test_pod_without_index_labels_is_not_ours():
    assert pod_view(pod(labels={names.LABEL_JOB_NAME: "pets"})) is None


def test_workers_count():
    views = [PodView("a", "1", 0, 0, "Running", ready=True), PodView("b", "2", 1, 0, "Succeeded"),
             PodView("c", "3", 2, 0, "Failed"), PodView("d", "4", 3, 0, "Pending")]
    assert workers(views, 5) == {"total": 5, "ready": 1, "running": 1, "succeeded": 1, "failed": 1}


def test_condition_transition_time_moves_only_on_flips():
    first = set_condition(None, "Running", True, "AllWorkersRunning", "2 of 2", T0)
    assert first == [{"type": "Running", "status": "True", "reason": "AllWorkersRunning", "message": "2 of 2",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    same = set_condition(first, "Running", True, "AllWorkersRunning", "still", T0 + timedelta(seconds=5))
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and same[0]["message"] == "still"
    flipped = set_condition(same, "Running", False, "Completed", "done", T0 + timedelta(seconds=9))
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T00:00:09Z" and flipped[0]["status"] == "False"
    assert first[0]["status"] == "True"  # inputs are not modified


def test_the_termination_message_is_the_failure_s_cause():
    view = pod_view(pod("Failed", ready=False, terminated={
        "exitCode": 1, "reason": "Error", "message": "unknown timm model 'resnet5' (see timm.list_models())"}))
    assert view.describe_failure() == \
        "worker pets-1 failed (exit code 1; Error): unknown timm model 'resnet5' (see timm.list_models())"


@pytest.mark.parametrize("message, cause", [
    ("model 'resnet5' is not a timm model\n", "model 'resnet5' is not a timm model"),
    # FallbackToLogsOnError: the log's tail; the trainer's `error:` line wins, also behind a rank tag.
    ("loading\nerror: DATA_DIR /data/x does not exist\nW1203 shutdown\n", "DATA_DIR /data/x does not exist"),
    ("[rank0]: error: pretrained weights file /w.pt does not exist\n[rank1]: bye",
     "pretrained weights file /w.pt does not exist"),
    ("Traceback (most recent call last):\n  File \"x\", line 1\nRuntimeError: CUDA out of memory",
     "RuntimeError: CUDA out of memory"),
    ("", None), ("\n  \n", None), (None, None),
])
def test_failure_cause(message, cause):
    assert failure_cause(message) == cause


def test_a_long_cause_is_cut():
    assert len(failure_cause("x" * 5000)) == 400


def test_pod_view_reads_the_scheduler_s_reason():
    unscheduled = {"metadata": pod()["metadata"], "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Insufficient cpu."}]}}
    assert pod_view(unscheduled).unschedulable == "0/1 nodes are available: 1 Insufficient cpu."
    assert pod_view(pod()).unschedulable is None
