"""The end of a job: success after the log is read, where the model is, the TTL."""
from datetime import timedelta

from .helpers import T0, condition, pods, step


def test_success_waits_for_the_log_then_finishes(spec):
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    waiting = step(spec, running, pods("Succeeded", "Succeeded"), drained=False)
    assert waiting.status["phase"] == "Running" and "metric lines" in waiting.status["message"]
    done = step(spec, running, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=30))
    assert done.status["phase"] == "Succeeded" and done.status["completionTime"] == "2026-01-01T00:00:30Z"
    assert condition(done, "Succeeded")["status"] == "True"
    assert condition(done, "Running")["status"] == "False"
    assert done.finished is True


def test_ttl_after_finished_deletes_the_job(spec):
    spec = {**spec, "ttlSecondsAfterFinished": 10}
    running = step(spec, step(spec).status, pods("Running", "Running")).status
    done = step(spec, running, pods("Succeeded", "Succeeded"))
    assert done.wake_at == T0 + timedelta(seconds=10) and not done.finished
    assert not step(spec, done.status, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=9)).delete_job
    assert step(spec, done.status, pods("Succeeded", "Succeeded"), now=T0 + timedelta(seconds=10)).delete_job


def test_a_succeeded_job_names_where_its_model_is(spec):
    from pets_operator.spec import with_defaults

    spec = with_defaults({**spec, "output": {"persistentVolumeClaim": {"claimName": "models"}}}, "img")
    plan = step(spec, None, pods("Succeeded", "Succeeded"))
    assert plan.status["output"] == {"path": "/output", "persistentVolumeClaim": "models"}
    assert plan.status["message"] == "all 2 worker(s) succeeded; the model is in PVC models (/output in the pods)"
