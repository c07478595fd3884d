"""Pod 0's tracking lines -> status.tracking and TrackingDegraded (`pets_operator.tracking`), through the log follower."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import kubernetes
from aiohttp import web
from aiohttp.test_utils import TestServer

from pets_api.metric_lines import format_line, tracking_degraded_event, tracking_event
from pets_operator.epochs import EpochBook
from pets_operator.logfollow import LogStreams
from pets_operator.reconcile import Event, Plan
from pets_operator.spec import with_defaults
from pets_operator.tracking import (
    TRACKER_FAILED,
    TRACKERS_LOGGING,
    TRACKING_DEGRADED_CONDITION,
    Tracking,
    fold_into,
    fold_tracking,
    status_tracking,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
MLFLOW_STARTED = tracking_event("mlflow", run_id="r1", experiment_id="3", run_name="pets",
                                tracking_uri="http://mlflow:5000", url="http://mlflow:5000/#/experiments/3/runs/r1")
TENSORBOARD_STARTED = tracking_event("tensorboard", log_dir="/output/tensorboard/pets")
MLFLOW_DOWN = tracking_degraded_event("mlflow", "MlflowException: API request to http://mlflow:5000 failed: refused")
SPEC = with_defaults({"data": {"synthetic": {}}, "output": {"hostPath": "/srv/out"},
                      "tracking": {"tensorboard": {}, "mlflow": {"trackingUri": "http://mlflow:5000"}}}, "img")


def state(*events) -> Tracking:
    result = Tracking()
    for event in events:
        result = fold_tracking(result, event)
    return result


def degraded(status) -> list[dict]:
    return [c for c in status.get("conditions") or [] if c["type"] == TRACKING_DEGRADED_CONDITION]


def test_the_fold_keeps_where_each_tracker_logs_and_why_one_failed():
    folded = state(MLFLOW_STARTED, TENSORBOARD_STARTED, MLFLOW_DOWN, {"event": "epoch", "epoch": 0, "accuracy": 0.5},
                   {"event": "tracking"}, {"event": "tracking_degraded", "tracker": 7})  # malformed: ignored
    assert folded.started["mlflow"]["run_id"] == "r1" and folded.started["tensorboard"] == {
        "log_dir": "/output/tensorboard/pets"}
    assert folded.failed == {"mlflow": MLFLOW_DOWN["cause"]}


def test_status_tracking_names_the_run_its_url_and_the_tensorboard_volume():
    assert status_tracking(Tracking(), SPEC) is None
    assert status_tracking(state(MLFLOW_STARTED, TENSORBOARD_STARTED), SPEC) == {
        "mlflow": {"runId": "r1", "experimentId": "3", "runName": "pets", "trackingUri": "http://mlflow:5000",
                   "url": "http://mlflow:5000/#/experiments/3/runs/r1"},
        "tensorboard": {"logDir": "/output/tensorboard/pets", "hostPath": "/srv/out"}}
    own_volume = with_defaults({**SPEC, "tracking": {"tensorboard": {
        "persistentVolumeClaim": {"claimName": "tb"}, "logDir": "/tb"}}}, "img")
    started = state(tracking_event("tensorboard", log_dir="/tb/pets"))
    assert status_tracking(started, own_volume) == {"tensorboard": {"logDir": "/tb/pets", "persistentVolumeClaim": "tb"}}


def test_status_tracking_is_patched_when_it_changes_only():
    plan = Plan({"phase": "Running", "conditions": []})
    folded = fold_into(plan, state(MLFLOW_STARTED), {"phase": "Running"}, SPEC, NOW)
    assert folded.status["tracking"]["mlflow"]["runId"] == "r1" and folded.events == []
    stored = {"phase": "Running", "tracking": folded.status["tracking"]}
    assert fold_into(plan, state(MLFLOW_STARTED), stored, SPEC, NOW) is plan
    assert fold_into(plan, Tracking(), stored, SPEC, NOW) is plan  # nothing read yet (an operator restart): kept


def test_a_failed_tracker_is_a_condition_and_one_warning_event_and_the_job_goes_on():
    plan = Plan({"phase": "Running", "message": "2 of 2 worker(s) running", "conditions": []})
    folded = fold_into(plan, state(MLFLOW_STARTED, MLFLOW_DOWN), {}, SPEC, NOW)
    assert folded.status["phase"] == "Running" and folded.status["message"] == plan.status["message"]
    [condition] = degraded(folded.status)
    assert (condition["status"], condition["reason"]) == ("True", TRACKER_FAILED)
    assert condition["message"].startswith("mlflow: MlflowException: API request to http://mlflow:5000 failed: refused")
    assert "the training goes on" in condition["message"]
    assert folded.events == [Event("Warning", TRACKING_DEGRADED_CONDITION, condition["message"])]
    # The next step starts from the stored status (which has the condition): nothing new to say.
    again = fold_into(Plan(dict(folded.status)), state(MLFLOW_STARTED, MLFLOW_DOWN), folded.status, SPEC,
                      NOW + timedelta(seconds=5))
    assert again.events == [] and degraded(again.status) == [condition]


def test_a_later_attempt_whose_trackers_start_clears_the_condition():
    failed = fold_into(Plan({"conditions": []}), state(MLFLOW_DOWN), {}, SPEC, NOW).status
    later = fold_into(Plan(dict(failed)), state(MLFLOW_STARTED, TENSORBOARD_STARTED), failed, SPEC,
                      NOW + timedelta(minutes=1))
    [condition] = degraded(later.status)
    assert (condition["status"], condition["reason"]) == ("False", TRACKERS_LOGGING) and later.events == []
    assert condition["lastTransitionTime"] == "2026-01-01T00:01:00Z"


def test_a_job_without_tracking_keeps_its_plan():
    plan = Plan({"phase": "Running"})
    assert fold_into(plan, state(MLFLOW_DOWN), {}, with_defaults({"data": {"synthetic": {}}}, "img"), NOW) is plan


def test_the_book_keeps_the_current_attempt_s_trackers():
    book = EpochBook([], publish=lambda fields: None, attempt=1)
    book.note_tracking(MLFLOW_DOWN, attempt=0)  # an earlier group's line
    assert book.tracking == Tracking()
    book.note_tracking(MLFLOW_STARTED, attempt=1)
    assert set(book.tracking.started) == {"mlflow"}
    book.start_attempt(2, keep=True)  # a new group starts runs of its own
    assert book.tracking == Tracking()


LOG = ["text\n", format_line(MLFLOW_STARTED) + "\n", json.dumps({"event": "epoch", "epoch": 0, "accuracy": 0.5}) + "\n",
       "[rank0]: " + format_line(MLFLOW_DOWN) + "\n"]


async def test_the_log_follower_hands_tracking_lines_to_the_book():
    book = EpochBook([], publish=lambda fields: None, attempt=2)

    async def log(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for line in LOG:
            await response.write(f"2026-01-01T00:00:00.5Z {line}".encode())
        return response

    async def pod(request):
        return web.json_response({"metadata": {"uid": "uid"}, "status": {"phase": "Succeeded"}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ml/pods/p/log", log)
    app.router.add_get("/api/v1/namespaces/ml/pods/p", pod)
    async with TestServer(app) as server:
        streams = LogStreams(kubernetes.client.Configuration(host=str(server.make_url("")).rstrip("/")))
        drained = asyncio.Event()
        try:
            streams.follow("ml", "p", "trainer", "uid", book, drained.set, attempt=2)
            await asyncio.wait_for(drained.wait(), 20)
        finally:
            await streams.close()
    assert book.tracking == state(MLFLOW_STARTED, MLFLOW_DOWN)
    assert [e["epoch"] for e in book.epochs] == [0]
