"""The operator's /metrics during a job's life, scraped from the running operator (simulated pods: fast)."""
from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(name, sorted labels) -> value; empty while the endpoint is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def job_series(metrics, name: str, job: str) -> float | None:
    return metrics.get((name, (("job_name", job), ("job_namespace", "default"))))


def test_metrics_follow_a_job_and_its_series_go_with_it(api, operator_process, wait_for):
    port = free_port()
    operator = operator_process({"PETS_OPERATOR_METRICS_PORT": str(port)})
    schedule = {"epochSeconds": 0.3, "accuracy": [0.42, 0.61, 0.58]}
    api.create_job("measured", {"numNodes": 2, "epochs": 3, "data": {"synthetic": {}},
                                "env": [{"name": "PETS_SIMULATE", "value": json.dumps(schedule)}]})
    wait_for("the job Succeeded", lambda: ((api.job("measured") or {}).get("status") or {}).get("phase") == "Succeeded",
             60, operator.logs)
    metrics = wait_for("the job's final figures in /metrics",
                       lambda: (m := scrape(port)) and job_series(m, "pets_operator_job_current_epoch", "measured") == 3
                       and m, 30, operator.logs)
    assert job_series(metrics, "pets_operator_job_accuracy", "measured") == 0.58
    assert job_series(metrics, "pets_operator_job_best_accuracy", "measured") == 0.61
    namespace = (("job_namespace", "default"),)
    assert metrics[("pets_operator_jobs_created_total", namespace)] == 1
    assert metrics[("pets_operator_jobs_successful_total", namespace)] == 1
    assert metrics[("pets_operator_epochs_recorded_total", namespace)] == 3
    assert metrics[("pets_operator_jobs", (("phase", "Succeeded"),))] == 1
    assert metrics[("pets_operator_epoch_status_latency_seconds_count", ())] == 3
    assert metrics[("pets_operator_job_duration_seconds_count", (("job_namespace", "default"), ("phase", "Succeeded")))] == 1
    assert ("process_resident_memory_bytes", ()) in metrics

    api.delete_job("measured")
    metrics = wait_for("the job's series gone", lambda: (m := scrape(port)) and
                       job_series(m, "pets_operator_job_accuracy", "measured") is None and m, 30, operator.logs)
    assert not [key for key in metrics if ("job_name", "measured") in key[1]]
    assert metrics[("pets_operator_jobs_deleted_total", namespace)] == 1
    assert metrics[("pets_operator_jobs", (("phase", "Succeeded"),))] == 0
