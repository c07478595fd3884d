"""The notebook client: argument plumbing against recording stubs, then the real kubernetes
client against the local API server (no operator: the test plays the operator's status writes)."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from pets_client import client as pets_client
from pets_client.client import JobFailed, PetsClientError, PetsTrainingJobClient
from tests.support.watch_stream import WatchStream, deleted, gone, modified, stored_job

GVP = ("training.pets.dev", "v1alpha1")


class Recorder:
    """Stands in for CustomObjectsApi / CoreV1Api: records calls, answers from a script (a callable answer is called
    with the call's arguments: a `WatchStream`)."""

    def __init__(self, answers: dict | None = None):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.answers = answers or {}

    def __getattr__(self, method: str):
        def call(*args, **kwargs):
            self.calls.append((method, args, kwargs))
            answer = self.answers.get(method)
            if isinstance(answer, Exception):
                raise answer
            if isinstance(answer, list):  # one answer per call, the last one repeats
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            return answer(*args, **kwargs) if callable(answer) else answer
        return call


def api_exception(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Refused")
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


def make_client(custom_answers=None, core_answers=None) -> tuple[PetsTrainingJobClient, Recorder, Recorder]:
    custom, core = Recorder(custom_answers), Recorder(core_answers)
    return PetsTrainingJobClient(namespace="ml", custom_api=custom, core_api=core), custom, core


def test_submit_sends_a_petstrainingjob_with_camel_case_spec():
    client, custom, _ = make_client()
    job = client.submit("pets", num_nodes=2, processesPerNode=1, max_learning_rate=0.01,
                        data={"synthetic": {"imagesPerClass": 8}}, labels={"team": "ml"})
    ((method, args, kwargs),) = custom.calls
    assert method == "create_namespaced_custom_object"
    assert args[:4] == (*GVP, "ml", "petstrainingjobs")
    assert args[4] == {
        "apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
        "metadata": {"name": "pets", "namespace": "ml", "labels": {"team": "ml"}},
        "spec": {"numNodes": 2, "processesPerNode": 1, "maxLearningRate": 0.01,
                 "data": {"synthetic": {"imagesPerClass": 8}}},
    }
    assert kwargs == {"field_validation": "Strict"}
    assert (job.name, job.namespace) == ("pets", "ml")


def test_status_epochs_logs_and_delete_address_the_right_objects():
    status = {"phase": "Running", "epochs": [{"epoch": 0, "accuracy": 0.5}]}
    client, custom, core = make_client({"get_namespaced_custom_object": {"status": status}},
                                       {"read_namespaced_pod_log": "epoch 0 done\n"})
    job = client.job("pets", namespace="other")
    assert job.status() == status
    assert job.phase == "Running"
    assert job.epochs() == [{"epoch": 0, "accuracy": 0.5}]
    assert job.logs(index=1, tail_lines=5) == "epoch 0 done\n"
    job.delete()
    assert custom.calls[0][:2] == ("get_namespaced_custom_object", (*GVP, "other", "petstrainingjobs", "pets"))
    assert core.calls == [("read_namespaced_pod_log", ("pets-1", "other"), {"tail_lines": 5})]
    assert custom.calls[-1] == ("delete_namespaced_custom_object", (*GVP, "other", "petstrainingjobs", "pets"),
                                {"propagation_policy": "Background"})


def test_jobs_lists_handles_in_the_namespace():
    listing = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    client, custom, _ = make_client({"list_namespaced_custom_object": listing})
    assert [job.name for job in client.jobs(label_selector="team=ml")] == ["a", "b"]
    assert custom.calls == [("list_namespaced_custom_object", (*GVP, "ml", "petstrainingjobs"),
                             {"label_selector": "team=ml"})]


def test_wait_watches_the_job_from_its_first_read_and_reports_each_epoch_once():
    epoch_0, epoch_1 = {"epoch": 0, "accuracy": 0.4}, {"epoch": 1, "accuracy": 0.7}
    stream = WatchStream([modified(stored_job("Running", 2, epochs=[epoch_0])),
                          modified(stored_job("Running", 3, epochs=[epoch_0])),
                          modified(stored_job("Succeeded", 4, epochs=[epoch_0, epoch_1]))])
    client, custom, _ = make_client({"get_namespaced_custom_object": stored_job("Pending", 1),
                                     "list_namespaced_custom_object": stream})
    seen = []
    final = client.job("pets").wait(timeout=10, on_epoch=seen.append, display=False)
    assert final["phase"] == "Succeeded"
    assert seen == [epoch_0, epoch_1]
    assert [method for method, _, _ in custom.calls] == ["get_namespaced_custom_object", "list_namespaced_custom_object"]
    assert custom.calls[1][1] == (*GVP, "ml", "petstrainingjobs")
    assert {key: stream.kwargs[key] for key in ("watch", "field_selector", "resource_version")} == {
        "watch": True, "field_selector": "metadata.name=pets", "resource_version": "1"}
    assert stream.closed


def test_wait_times_out_on_a_silent_watch_with_the_phase_it_saw():
    client, _, _ = make_client({"get_namespaced_custom_object": stored_job("Running", 1),
                                "list_namespaced_custom_object": WatchStream([])})
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ml/pets is Running after 0.3s; waited for Failed, Succeeded"):
        client.job("pets").wait(timeout=0.3, display=False)
    assert 0.3 <= time.monotonic() - started < 1.5


def test_wait_for_a_failed_job():
    answer = stored_job("Failed", 1, message="worker 1 exited with 2")
    client, custom, _ = make_client({"get_namespaced_custom_object": answer})
    assert client.job("pets").wait(timeout=1, display=False)["phase"] == "Failed"
    with pytest.raises(JobFailed, match="worker 1 exited with 2"):
        client.job("pets").wait(timeout=1, raise_on_failure=True, display=False)
    with pytest.raises(ValueError):
        client.job("pets").wait(phases=())
    assert "list_namespaced_custom_object" not in [method for method, _, _ in custom.calls], "finished: nothing to watch"


def test_a_watch_the_server_ended_is_resumed_from_the_last_version_seen():
    first = WatchStream([modified(stored_job("Running", 7))], silent=False)  # the server's timeoutSeconds passed
    second = WatchStream([modified(stored_job("Succeeded", 9))])
    client, custom, _ = make_client({"get_namespaced_custom_object": stored_job("Pending", 5),
                                     "list_namespaced_custom_object": [first, second]})
    assert client.job("pets").wait(timeout=10, display=False)["phase"] == "Succeeded"
    assert (first.kwargs["resource_version"], second.kwargs["resource_version"]) == ("5", "7")
    assert [method for method, _, _ in custom.calls].count("get_namespaced_custom_object") == 1


def test_a_version_gone_from_the_server_starts_again_from_a_fresh_read():
    expired, fresh = WatchStream([gone()]), WatchStream([modified(stored_job("Succeeded", 31))])
    client, custom, _ = make_client({"get_namespaced_custom_object": [stored_job("Pending", 5),
                                                                      stored_job("Running", 30)],
                                     "list_namespaced_custom_object": [expired, fresh]})
    seen = []
    client.job("pets").wait(timeout=10, display=False, phases=("Succeeded",), on_epoch=seen.append)
    assert [method for method, _, _ in custom.calls] == ["get_namespaced_custom_object", "list_namespaced_custom_object",
                                                         "get_namespaced_custom_object", "list_namespaced_custom_object"]
    assert (expired.kwargs["resource_version"], fresh.kwargs["resource_version"]) == ("5", "30")


def test_a_job_deleted_while_waited_for_is_a_404():
    client, _, _ = make_client({"get_namespaced_custom_object": stored_job("Running", 1),
                                "list_namespaced_custom_object": WatchStream([deleted(stored_job("Running", 2))])})
    with pytest.raises(PetsClientError, match="ml/pets was deleted") as gone_error:
        client.job("pets").wait(timeout=10, display=False)
    assert gone_error.value.status == 404


def test_a_refused_watch_is_the_servers_message():
    forbidden = api_exception(403, 'petstrainingjobs.training.pets.dev "pets" is forbidden: cannot watch')
    client, _, _ = make_client({"get_namespaced_custom_object": stored_job("Running", 1),
                                "list_namespaced_custom_object": forbidden})
    with pytest.raises(PetsClientError, match=r"cannot watch \(HTTP 403\)"):
        client.job("pets").wait(timeout=10, display=False)


def test_api_errors_carry_the_servers_message():
    refused = api_exception(422, 'PetsTrainingJob.training.pets.dev "pets" is invalid: spec.numNodes: must be >= 1')
    client, _, _ = make_client({"create_namespaced_custom_object": refused,
                                "delete_namespaced_custom_object": api_exception(404, "not found")})
    with pytest.raises(PetsClientError, match=r"spec.numNodes: must be >= 1 \(HTTP 422\)") as caught:
        client.submit("pets", num_nodes=0)
    assert caught.value.status == 422
    client.job("pets").delete()  # already gone: fine by default
    with pytest.raises(PetsClientError, match="not found"):
        client.job("pets").delete(missing_ok=False)


def test_camel_case_leaves_camel_case_alone():
    assert [pets_client.camel_case(n) for n in ("num_nodes", "numNodes", "epochs", "active_deadline_seconds")] == \
        ["numNodes", "numNodes", "epochs", "activeDeadlineSeconds"]


def test_against_the_local_api_server(local_cluster, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # a pod's service account would come first
    from kubernetes import client as kube

    client = PetsTrainingJobClient()  # connects through KUBECONFIG like a notebook would
    assert client.namespace == "default"
    job = client.submit("pets", num_nodes=2, epochs=2, data={"synthetic": {"classes": 3}})
    created = job.get()
    assert created["spec"]["numNodes"] == 2
    assert created["spec"]["model"] == "resnet50d", "the CRD's defaults are filled in by the server"
    assert job.status() == {} and job.phase is None

    with pytest.raises(PetsClientError, match=r"spec\.numNodes.*less than or equal to 256") as refused:
        client.submit("too-big", num_nodes=1000, data={"synthetic": {}})
    assert refused.value.status == 422
    with pytest.raises(PetsClientError, match=r'unknown field "spec\.numNodez"'):
        client.submit("typo", num_nodez=2, data={"synthetic": {}})

    # What the operator would write while the job runs.
    status_api = kube.CustomObjectsApi(client.custom.api_client)
    status_api.patch_namespaced_custom_object_status(
        *GVP, "default", "petstrainingjobs", "pets",
        {"status": {"phase": "Succeeded", "epochs": [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.75}]}})
    seen = []
    assert job.wait(timeout=30, on_epoch=seen.append)["phase"] == "Succeeded"
    assert [entry["accuracy"] for entry in seen] == [0.5, 0.75]
    assert [j.name for j in client.jobs()] == ["pets"]

    job.delete()
    with pytest.raises(PetsClientError) as gone:
        job.get()
    assert gone.value.status == 404


def _job_requests(cluster) -> dict[str, float]:
    """The official client's requests of petstrainingjobs so far, by verb, as the local API server counted them."""
    with urllib.request.urlopen(f"{cluster.url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "localkube_api_requests_total" and labels.get("client") == "OpenAPI-Generator" \
                    and labels.get("resource") == "petstrainingjobs" and not labels.get("subresource"):
                counts[labels["verb"]] = counts.get(labels["verb"], 0) + sample.value
    return counts


def test_wait_watches_the_job_and_returns_as_soon_as_the_phase_changes(local_cluster, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(local_cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    from kubernetes import client as kube

    client = PetsTrainingJobClient()
    job = client.submit("watched", num_nodes=1, epochs=2, data={"synthetic": {}})
    status_api = kube.CustomObjectsApi(client.custom.api_client)

    def write_status(status):  # as the operator does
        status_api.patch_namespaced_custom_object_status(*GVP, "default", "petstrainingjobs", "watched",
                                                         {"status": status})

    write_status({"phase": "Running"})
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="default/watched is Running after 1.5s"):
        job.wait(timeout=1.5, display=False)
    assert 1.5 <= time.monotonic() - started < 3, "a silent watch ends at the deadline"

    before = _job_requests(local_cluster)
    finished_at = []

    def operator():
        time.sleep(0.5)
        write_status({"epochs": [{"epoch": 0, "accuracy": 0.5}]})
        time.sleep(1.5)
        finished_at.append(time.monotonic())
        write_status({"phase": "Succeeded", "epochs": [{"epoch": 0, "accuracy": 0.5}, {"epoch": 1, "accuracy": 0.75}]})

    writer = threading.Thread(target=operator)
    writer.start()
    seen = []
    status = job.wait(timeout=30, on_epoch=seen.append, display=False)
    returned = time.monotonic()
    writer.join()
    assert status["phase"] == "Succeeded" and [entry["accuracy"] for entry in seen] == [0.5, 0.75]
    assert returned - finished_at[0] < 1.0, "the change arrives on the watch, not at the next poll"
    after = _job_requests(local_cluster)
    assert {verb: after.get(verb, 0) - before.get(verb, 0) for verb in ("GET", "WATCH", "LIST")} == {
        "GET": 1, "WATCH": 1, "LIST": 0}, "one read, then one watch for the whole wait"


def _kubeconfig(path, server: str, namespace: str = "team") -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": namespace}}]}))
    return str(path)


def _service_account(tmp_path, monkeypatch) -> None:
    """A pod's service account: the env variables and the files kubernetes' in-cluster loader reads."""
    from kubernetes.config import incluster_config

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text("not read until a request is made")
    (account / "namespace").write_text("pod-ns\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setattr(pets_client, "IN_CLUSTER_NAMESPACE_FILE", account / "namespace")


def test_one_loader_outside_a_pod_reads_kubeconfig_at_call_time(tmp_path, monkeypatch):
    from pets_api.connection import CONNECTION_POOL_SIZE, load_api_client

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path / "config", "https://from-kubeconfig:6443"))
    api = load_api_client()
    assert api.configuration.host == "https://from-kubeconfig:6443"
    assert api.configuration.connection_pool_maxsize == CONNECTION_POOL_SIZE
    client = PetsTrainingJobClient()
    assert client.custom.api_client.configuration.host == "https://from-kubeconfig:6443"
    assert client.namespace == "team"


def test_one_loader_in_a_pod_prefers_the_service_account_as_kopf_does(tmp_path, monkeypatch):
    from pets_api.connection import load_api_client

    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path / "config", "https://from-kubeconfig:6443"))
    _service_account(tmp_path, monkeypatch)
    assert load_api_client().configuration.host == "https://10.0.0.1:443"
    client = PetsTrainingJobClient()
    assert client.custom.api_client.configuration.host == "https://10.0.0.1:443"
    assert client.namespace == "pod-ns", "the namespace of the connection it made"


def test_no_cluster_at_all_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(PetsClientError, match="no cluster to talk to"):
        PetsTrainingJobClient()


def test_tracking_reads_status_tracking_and_the_mlflow_run_s_history(tmp_path, monkeypatch):
    """`job.tracking` is status.tracking; `job.tracking_metrics()` reads the run's history with the mlflow client
    (here from a local store: the address in status is replaced as a notebook may need to)."""
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # a local store keeps artifacts in ./mlruns
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    writer = MlflowClient(store)
    run = writer.create_run(writer.create_experiment("pets"))
    for step, value in ((10, 0.5), (20, 0.75)):
        writer.log_metric(run.info.run_id, "accuracy", value, step=step)
    writer.log_metric(run.info.run_id, "train_loss", 1.5, step=1)
    tracking = {"mlflow": {"runId": run.info.run_id, "trackingUri": "http://mlflow.in-cluster:5000"},
                "tensorboard": {"logDir": "/output/tensorboard/pets", "hostPath": "/srv/out"}}
    client, _, _ = make_client({"get_namespaced_custom_object": {"status": {"tracking": tracking}}})
    job = client.job("pets")
    assert job.tracking == tracking
    history = job.tracking_metrics(tracking_uri=store)
    assert set(history) == {"accuracy", "train_loss"}
    assert [(m["step"], m["value"]) for m in history["accuracy"]] == [(10, 0.5), (20, 0.75)]
    assert list(job.tracking_metrics(["train_loss"], tracking_uri=store)) == ["train_loss"]

    empty, _, _ = make_client({"get_namespaced_custom_object": {"status": {}}})
    assert empty.job("pets").tracking == {}
    with pytest.raises(PetsClientError, match="has no MLflow run in status.tracking"):
        empty.job("pets").tracking_metrics()
