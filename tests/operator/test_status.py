from datetime import datetime, timedelta, timezone

from pets_operator import names
from pets_operator.status import PodView, pod_view, set_condition, workers

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
