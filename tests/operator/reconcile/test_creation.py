"""The group's creation: every pod once, only the missing ones, Created once they exist."""
from .helpers import condition, pods, step


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
