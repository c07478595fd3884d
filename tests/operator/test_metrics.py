"""The operator's Prometheus metrics: what a status change counts (pure), the series, API errors, config."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pets_operator.config import ConfigError, from_environ
from pets_operator.kube import KubeError
from pets_operator.metrics import CountedKube, JobChange, Metrics, api_call, job_change
from pets_operator.refusals import ApiFailure


def epochs(*numbers):
    return [{"epoch": n, "accuracy": 0.5} for n in numbers]


def test_a_job_first_seen_without_status_is_created_with_one_after_a_restart_is_not():
    assert job_change(None, {}) == JobChange(created=True)
    assert job_change(None, {"phase": "Running", "epochs": epochs(0, 1)}) == JobChange()


def test_reaching_a_final_phase_counts_once_with_its_duration():
    running = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "restarts": 0}
    done = {**running, "phase": "Succeeded", "completionTime": "2026-01-01T00:10:00Z"}
    assert job_change(running, done) == JobChange(succeeded=True, duration=600.0)
    assert job_change(done, done) == JobChange()
    failed = {**running, "phase": "Failed"}  # no completionTime: no duration
    assert job_change(running, failed) == JobChange(failed=True)


def test_restarts_and_new_epochs_are_counted_by_their_increase():
    before = {"phase": "Running", "restarts": 1, "epochs": epochs(0, 1)}
    after = {"phase": "Pending", "restarts": 2, "epochs": epochs(0, 1, 2, 3)}
    assert job_change(before, after) == JobChange(restarts=1, new_epochs=2)
    assert job_change(after, {**after, "epochs": []}) == JobChange()  # cleared by a restart: nothing new


def test_api_calls_are_named_by_verb_and_resource():
    assert api_call("create_pod") == ("create", "pods")
    assert api_call("patch_job_status") == ("patch", "petstrainingjobs/status")
    assert api_call("open_pod_log") == ("get", "pods/log")
    assert api_call("read_pod") == ("get", "pods")
    assert api_call("delete_job") == ("delete", "petstrainingjobs")
    assert api_call("create_config_map") == ("create", "config_map")  # a call added later keeps its own name


def scrape(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def sample(text: str, name: str, **labels) -> float | None:
    """The value of the series `name` with exactly `labels`, None when there is none."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return None


def test_a_job_s_life_in_the_metrics_and_its_series_gone_after_deletion():
    metrics = Metrics(CollectorRegistry())
    metrics.job_event(None, "ml", "a", {})
    metrics.job_event("MODIFIED", "ml", "a", {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                                              "epochs": epochs(0), "accuracy": 0.5, "bestAccuracy": 0.5,
                                              "currentEpoch": 0})
    metrics.job_event("MODIFIED", "ml", "b", {})
    text = scrape(metrics)
    assert sample(text, "pets_operator_jobs_created_total", job_namespace="ml") == 2
    assert sample(text, "pets_operator_jobs", phase="Running") == 1
    assert sample(text, "pets_operator_jobs", phase="Pending") == 1
    assert sample(text, "pets_operator_job_accuracy", job_namespace="ml", job_name="a") == 0.5
    assert sample(text, "pets_operator_epochs_recorded_total", job_namespace="ml") == 1
    metrics.job_event("MODIFIED", "ml", "a", {"phase": "Succeeded", "startTime": "2026-01-01T00:00:00Z",
                                              "completionTime": "2026-01-01T00:00:30Z", "epochs": epochs(0, 1),
                                              "accuracy": 0.7, "bestAccuracy": 0.7, "currentEpoch": 1})
    text = scrape(metrics)
    assert sample(text, "pets_operator_jobs_successful_total", job_namespace="ml") == 1
    assert sample(text, "pets_operator_job_duration_seconds_count", job_namespace="ml", phase="Succeeded") == 1
    assert sample(text, "pets_operator_job_best_accuracy", job_namespace="ml", job_name="a") == 0.7
    metrics.job_event("DELETED", "ml", "a", {"phase": "Succeeded"})
    text = scrape(metrics)
    assert 'job_name="a"' not in text
    assert sample(text, "pets_operator_jobs_deleted_total", job_namespace="ml") == 1
    assert sample(text, "pets_operator_jobs", phase="Succeeded") == 0


def test_a_restart_without_checkpoint_removes_the_accuracy_until_the_next_epoch():
    metrics = Metrics(CollectorRegistry())
    metrics.job_event(None, "ml", "a", {"phase": "Running", "epochs": epochs(0), "accuracy": 0.5})
    metrics.job_event("MODIFIED", "ml", "a", {"phase": "Pending", "restarts": 1, "epochs": []})
    text = scrape(metrics)
    assert sample(text, "pets_operator_job_accuracy", job_namespace="ml", job_name="a") is None
    assert sample(text, "pets_operator_jobs_restarted_total", job_namespace="ml") == 1


class FailingKube:
    core = "the client"

    def patch_job_status(self, namespace, name, status):
        raise KubeError(ApiFailure(409, "Conflict", "busy"))

    def create_pod(self, body):
        return True


def test_counted_kube_counts_failed_calls_by_verb_and_passes_the_rest_through():
    metrics = Metrics(CollectorRegistry())
    kube = CountedKube(FailingKube(), metrics)
    assert kube.create_pod({}) is True and kube.core == "the client"
    with pytest.raises(KubeError):
        kube.patch_job_status("ml", "a", {})
    metrics.api_error("get", "pods/log", None)
    text = scrape(metrics)
    assert sample(text, "pets_operator_api_errors_total", verb="patch", resource="petstrainingjobs/status",
                  code="409") == 1
    assert sample(text, "pets_operator_api_errors_total", verb="get", resource="pods/log", code="none") == 1


def test_epoch_latency_is_a_histogram():
    metrics = Metrics(CollectorRegistry())
    for seconds in (0.02, 0.3, 4.0):
        metrics.epoch_to_status(seconds)
    text = scrape(metrics)
    assert sample(text, "pets_operator_epoch_status_latency_seconds_count") == 3
    assert sample(text, "pets_operator_epoch_status_latency_seconds_bucket", le="0.5") == 2


def test_epoch_log_delivery_is_a_histogram():
    metrics = Metrics(CollectorRegistry())
    for seconds in (0.02, 3.0):
        metrics.epoch_delivered(seconds)
    text = scrape(metrics)
    assert sample(text, "pets_operator_epoch_log_delivery_seconds_count") == 2
    assert sample(text, "pets_operator_epoch_log_delivery_seconds_bucket", le="2.0") == 1


def test_metrics_port_configuration():
    assert from_environ({"PETS_OPERATOR_METRICS_PORT": "8000"}).metrics_port == 8000
    assert from_environ({}).metrics_port == 0
    for env, word in (({"PETS_OPERATOR_METRICS_PORT": "x"}, "PETS_OPERATOR_METRICS_PORT"),
                      ({"PETS_OPERATOR_METRICS_PORT": "8080"}, "must differ")):
        with pytest.raises(ConfigError, match=word):
            from_environ(env)


def test_the_grafana_dashboard_asks_only_for_metrics_the_operator_exports():
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    asked = {re.sub(r"_(bucket|count|sum)$", "", name) for query in queries for name in re.findall(r"pets_operator_\w+", query)}
    metrics = Metrics(CollectorRegistry())
    exported = {family.name for family in metrics.registry.collect()}
    exported |= {f"{name}_total" for name in exported}  # counters are exposed with _total
    assert asked and asked <= exported, asked - exported
