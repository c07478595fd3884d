"""`job.logs()` of a failed job defaults to the worker whose failure failed it (its pods stay)."""
from __future__ import annotations

from types import SimpleNamespace

from pets_client.client import PetsTrainingJobClient


def pod(name, index, phase, attempt=1):
    labels = {"training.pets.dev/job-name": "pets", "training.pets.dev/replica-index": str(index),
              "training.pets.dev/attempt": str(attempt)}
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels), status=SimpleNamespace(phase=phase))


class Custom:
    def __init__(self, status):
        self.status = status

    def get_namespaced_custom_object(self, *args, **kwargs):
        return {"status": self.status}


class Core:
    def __init__(self, pods):
        self.pods, self.selectors, self.logs = pods, [], []

    def list_namespaced_pod(self, namespace, label_selector):
        self.selectors.append(label_selector)
        return SimpleNamespace(items=self.pods)

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        self.logs.append(name)
        return f"log of {name}"


def test_a_failed_job_s_logs_are_its_failed_worker_s():
    status = {"phase": "Failed", "attempt": 1,
              "message": "worker pets-2 failed (exit code 2; Error): DataUnavailable: ...; not restarted"}
    core = Core([pod("pets-0", 0, "Failed"), pod("pets-1", 1, "Running"), pod("pets-2", 2, "Failed")])
    job = PetsTrainingJobClient("ml", custom_api=Custom(status), core_api=core).job("pets")
    assert job.logs() == "log of pets-2"  # the one the status names, not the first failed one
    assert core.selectors == ["training.pets.dev/job-name=pets,training.pets.dev/attempt=1"]
    assert job.logs(index=0) == "log of pets-0"
    unnamed = Core([pod("pets-0", 0, "Running"), pod("pets-1", 1, "Failed")])
    job = PetsTrainingJobClient("ml", custom_api=Custom({"phase": "Failed", "attempt": 1}), core_api=unnamed).job("pets")
    assert job.logs() == "log of pets-1"


def test_a_job_that_has_not_failed_logs_pod_0():
    core = Core([])
    job = PetsTrainingJobClient("ml", custom_api=Custom({"phase": "Running"}), core_api=core).job("pets")
    assert job.logs() == "log of pets-0" and core.selectors == []
