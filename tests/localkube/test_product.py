"""What the pets product hands the kit (`pets_localkube/product.py`): the trainer image's entrypoint,
what simulated trainer pods print, and `pets-operator local up` wired with both and the CRD."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from kubernetes import client, config

from pets_api import metric_lines
from pets_localkube import product
from pets_localkube.environment import PortMap
from pets_localkube.runtimes.process import PodWorker
from pets_localkube.runtimes.simulated import ANNOTATION, ENV, Schedule, schedule_of

from .helpers import GROUP, VERSION, local_up, pod_phase, python_pod, wait_for


def pod_with(env=None, annotations=None):
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "trainer", "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}}


def test_the_rank_is_machine_rank_else_the_completion_index():
    assert product.rank_of(pod_with({"MACHINE_RANK": "1", "JOB_COMPLETION_INDEX": "2"})) == 1
    assert product.rank_of(pod_with({"JOB_COMPLETION_INDEX": "2"})) == 2
    assert product.rank_of(pod_with(annotations={"batch.kubernetes.io/job-completion-index": "3"})) == 3
    assert product.rank_of(pod_with()) == 0


def test_rank_zero_prints_an_epoch_line_per_epoch_then_done_the_others_only_start():
    schedule = Schedule(epoch_seconds=2, epochs=3, accuracy=(0.4, 0.6))
    lines = product.trainer_log_lines(schedule, pod_with())
    assert [offset for offset, _ in lines] == [0.0, 2.0, 4.0, 6.0, 6.0]
    events = metric_lines.parse_lines([line for _, line in lines])
    assert [(e["event"], e.get("epoch"), e.get("accuracy")) for e in events] == [
        ("epoch", 0, 0.4), ("epoch", 1, 0.6), ("epoch", 2, 0.6), ("done", None, 0.6)]
    assert events[-1]["best_accuracy"] == 0.6
    assert product.trainer_log_lines(schedule, pod_with({"MACHINE_RANK": "1"})) == [
        (0.0, "simulated pod p rank 1: 3 epochs every 2s")]


def test_a_failing_trainer_prints_its_epochs_then_the_exit_code():
    lines = [line for _, line in product.trainer_log_lines(Schedule(epoch_seconds=1, epochs=5, fail_after_epoch=1), pod_with())]
    assert [e["epoch"] for e in metric_lines.parse_lines(lines)] == [0, 1]
    assert lines[-1] == "simulated failure: exit code 1"


def test_a_trainer_pods_epochs_default_to_its_epochs_variable():
    def schedule(pod):
        return schedule_of(pod, product.TRAINER.schedule_defaults(pod))

    assert schedule(pod_with({"EPOCHS": "7"})) == Schedule(epochs=7)
    assert schedule(pod_with({"EPOCHS": "7", ENV: '{"epochs": 2}'})) == Schedule(epochs=2)
    assert schedule(pod_with({"EPOCHS": "seven"})) == Schedule()


async def test_the_trainer_image_without_a_command_runs_pets_train(tmp_path):
    kubelet = SimpleNamespace(workdir=tmp_path, ports=PortMap(), entrypoints=product.ENTRYPOINTS, api_server=None)
    container = {"name": "trainer", "image": "registry:5000/team/pets-trainer:0.1.0", "args": ["--help"]}
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {"containers": [container]}}
    argv, _, _, _ = await PodWorker(kubelet, pod).process_spec(container)
    assert argv == [str(Path(sys.executable).parent / "pets-train"), "--help"]


def test_pets_operator_local_up_serves_the_crd_and_simulates_trainer_pods(tmp_path):
    workdir = tmp_path / "work"
    with local_up([sys.executable, "-m", "pets_operator", "local"], workdir), \
            config.new_client_from_config(str(workdir / "kubeconfig")) as api:
        names = [r.name for r in client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources]
        assert "petstrainingjobs" in names
        core = client.CoreV1Api(api)
        pod = python_pod("trainer-0", "raise SystemExit(9)", env=[{"name": "EPOCHS", "value": "2"}])
        pod["metadata"]["annotations"] = {ANNOTATION: json.dumps({"epochSeconds": 0.2})}
        core.create_namespaced_pod("default", pod)
        wait_for(lambda: pod_phase(core, "trainer-0") == "Succeeded", what="the simulated trainer pod to succeed")
        events = metric_lines.parse_lines(core.read_namespaced_pod_log("trainer-0", "default"))
        assert [(e["event"], e.get("epoch")) for e in events] == [("epoch", 0), ("epoch", 1), ("done", None)]


def test_the_operators_loader_reads_the_service_account_directory_the_process_runtime_names():
    from pets_api import connection
    from pets_localkube import environment

    assert connection.SERVICE_ACCOUNT_DIR_ENV == environment.SERVICE_ACCOUNT_DIR_ENV
