"""The notebook client's additions, against recording stubs: replace=True, delete(wait=True), one spelling
per spec field, JobFailed's message, the live display, plot() and logs(follow=True)."""
from __future__ import annotations

import io
import json

import pytest
from kubernetes.client.exceptions import ApiException

from pets_client import progress
from pets_client.client import JobFailed, PetsClientError, PetsTrainingJobClient, job_manifest
from tests.support.watch_stream import WatchStream, modified

GVP = ("training.pets.dev", "v1alpha1")


class Recorder:
    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __getattr__(self, method):
        def call(*args, **kwargs):
            self.calls.append((method, args, kwargs))
            answer = self.answers.get(method)
            if isinstance(answer, list):
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            if isinstance(answer, Exception):
                raise answer
            return answer(*args, **kwargs) if callable(answer) else answer  # a WatchStream
        return call


def refused(status, message="refused"):
    error = ApiException(status=status, reason="Refused")
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


def make_client(custom=None, core=None):
    custom, core = Recorder(custom), Recorder(core)
    return PetsTrainingJobClient(namespace="ml", custom_api=custom, core_api=core), custom, core


def test_one_spelling_per_field():
    with pytest.raises(ValueError, match="num_nodes and numNodes both set spec.numNodes: give it once"):
        job_manifest("pets", {"num_nodes": 2, "numNodes": 3})
    client, custom, _ = make_client()
    with pytest.raises(ValueError):
        client.submit("pets", numNodes=2, num_nodes=2)
    assert custom.calls == [], "nothing is sent"


def test_an_existing_name_offers_replace():
    client, custom, _ = make_client({"create_namespaced_custom_object": refused(409, 'petstrainingjobs "pets" already exists')})
    with pytest.raises(PetsClientError, match=r"ml/pets already exists: submit\(\.\.\., replace=True\)") as taken:
        client.submit("pets", data={"synthetic": {}})
    assert taken.value.status == 409


def test_replace_deletes_waits_until_gone_and_submits():
    client, custom, _ = make_client({
        "create_namespaced_custom_object": [refused(409), {"metadata": {"name": "pets"}}],
        "get_namespaced_custom_object": [{"metadata": {"name": "pets"}}, refused(404, "not found")],
    })
    job = client.submit("pets", replace=True, epochs=2, data={"synthetic": {}})
    assert job.name == "pets"
    methods = [(method, kwargs.get("propagation_policy")) for method, _, kwargs in custom.calls]
    assert methods == [("create_namespaced_custom_object", None), ("delete_namespaced_custom_object", "Foreground"),
                       ("get_namespaced_custom_object", None), ("get_namespaced_custom_object", None),
                       ("create_namespaced_custom_object", None)]


def test_delete_wait_times_out_when_the_job_stays():
    client, custom, _ = make_client({"get_namespaced_custom_object": {"metadata": {"name": "pets"}}})
    with pytest.raises(TimeoutError, match="ml/pets is still there 0.05s after it was deleted"):
        client.job("pets").delete(wait=True, timeout=0.05)
    client.job("pets").delete()
    assert custom.calls[-1][2] == {"propagation_policy": "Background"}


def test_job_failed_carries_the_status_message():
    status = {"phase": "Failed", "message": "worker pets-0 failed (exit code 1; Error): ValueError: boom",
              "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    client, _, _ = make_client({"get_namespaced_custom_object": {"metadata": {"resourceVersion": "1"}, "status": status}})
    with pytest.raises(JobFailed, match="ml/pets failed: worker pets-0 failed") as failed:
        client.job("pets").wait(timeout=1, raise_on_failure=True, display=False)
    assert failed.value.message == status["message"]
    assert failed.value.reason == "BackoffLimitExceeded"
    assert failed.value.job_status == status


def test_wait_prints_plain_lines_outside_jupyter(capsys):
    answers = [
        {"status": {}},
        {"status": {"phase": "Running", "message": "2 of 2 worker(s) running"}},
        {"status": {"phase": "Running", "epochs": [{"epoch": 0, "accuracy": 0.5, "trainLoss": 1.2}]}},
        {"status": {"phase": "Succeeded", "message": "all 2 worker(s) succeeded",
                    "epochs": [{"epoch": 0, "accuracy": 0.5, "trainLoss": 1.2}, {"epoch": 1, "accuracy": 0.75}]}},
    ]
    submitted, *changes = [{"metadata": {"resourceVersion": str(version)}, "spec": {"epochs": 2}, **answer}
                           for version, answer in enumerate(answers, 1)]
    client, _, _ = make_client({"get_namespaced_custom_object": submitted,
                                "list_namespaced_custom_object": WatchStream([modified(job) for job in changes])})
    assert not progress.in_jupyter()
    client.job("pets").wait(timeout=5)
    assert capsys.readouterr().out.splitlines() == [
        "pets: submitted",
        "pets: Running (2 of 2 worker(s) running)",
        "pets: epoch 1/2: accuracy 0.5000, train loss 1.2000",
        "pets: epoch 2/2: accuracy 0.7500",
        "pets: Succeeded (all 2 worker(s) succeeded)",
        "pets: Succeeded, 2/2 epochs, accuracy 0.7500 (best 0.7500)",
    ]


def test_the_bar_counts_epochs_over_the_total(monkeypatch):
    bar = progress.live_display("pets", jupyter=True)  # tqdm.auto outside a kernel: the console bar
    assert isinstance(bar, progress.BarDisplay)
    resource = {"spec": {"epochs": 4}, "status": {"phase": "Running", "epochs": [{"epoch": 0, "accuracy": 0.25},
                                                                              {"epoch": 1, "accuracy": 0.5}]}}
    shown = progress.progress("pets", resource)
    bar.update(shown)
    assert (bar._bar.n, bar._bar.total) == (2, 4)
    assert "2/4" in str(bar._bar) and "Running, accuracy 0.5000, best 0.5000" in str(bar._bar)
    bar.close(shown)
    # A shipped function's run has no known total.
    assert progress.progress("f", {"spec": {"epochs": 5, "function": {"configMap": "f"}}}).total is None


def test_plot_draws_accuracy_and_train_loss():
    import matplotlib
    matplotlib.use("Agg")
    resource = {"spec": {"epochs": 2}, "status": {"phase": "Succeeded", "epochs": [
        {"epoch": 0, "accuracy": 0.5, "trainLoss": 1.0}, {"epoch": 1, "accuracy": 0.75, "trainLoss": 0.5}]}}
    client, _, _ = make_client({"get_namespaced_custom_object": resource})
    ax = client.job("pets").plot()
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [50.0, 75.0]
    (loss_ax,) = [other for other in ax.figure.axes if other is not ax]
    assert list(loss_ax.get_lines()[0].get_ydata()) == [1.0, 0.5]
    assert "pets: Succeeded" in ax.get_title()


class Stream:
    def __init__(self, chunks):
        self.chunks = list(chunks)
        self.released = False

    def read1(self, size):
        return self.chunks.pop(0) if self.chunks else b""

    def release_conn(self):
        self.released = True


def test_logs_follow_waits_for_the_container_and_streams_lines():
    stream = Stream([b"epoch 0: 5", b"0.00\nepoch 1: 75.00\n", b"done"])
    client, _, core = make_client(custom={"get_namespaced_custom_object": {"status": {"phase": "Running"}}},
                                  core={"read_namespaced_pod_log": [refused(400, "container is waiting to start"), stream]})
    out = io.StringIO()
    client.job("pets").logs(follow=True, file=out, timeout=5)  # a job that has not failed: pod 0's
    assert out.getvalue() == "epoch 0: 50.00\nepoch 1: 75.00\ndone\n"
    assert stream.released
    assert core.calls[-1] == ("read_namespaced_pod_log", ("pets-0", "ml"), {"follow": True, "_preload_content": False})
