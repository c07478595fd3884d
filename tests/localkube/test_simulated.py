"""Simulated pods: the schedule (pure), and pods that run it in the local cluster, next to real ones.

The kit's own workload (`PLAIN`) prints plain lines; the product's is tested in test_product.py."""
from __future__ import annotations

import ipaddress
import json
import threading
import time

import pytest
from kubernetes import client

from pets_localkube import LocalCluster
from pets_localkube.runtimes.pod_addresses import SIMULATED_POD_CIDR, PodAddresses
from pets_localkube.runtimes.simulated import (
    ANNOTATION,
    ENV,
    Schedule,
    ScheduleError,
    Workload,
    parse_schedule,
    plain_log_lines,
    requested,
    schedule_of,
)

from .helpers import api_client, pod_phase, python_pod, wait_for


def pod_with(env=None, annotations=None):
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "trainer", "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}}


def test_the_schedule_comes_from_the_annotation_else_the_environment_and_defaults_fill_the_rest():
    assert schedule_of(pod_with({"EPOCHS": "7"})) == Schedule(epochs=1), "the kit reads no workload's variables"
    from_env = schedule_of(pod_with({ENV: '{"epochSeconds": 0.5}'}))
    assert from_env == Schedule(epoch_seconds=0.5)
    both = pod_with({ENV: '{"epochSeconds": 0.5}'}, {ANNOTATION: '{"epochs": 2, "accuracy": [0.1, 0.2]}'})
    assert schedule_of(both) == Schedule(epochs=2, accuracy=(0.1, 0.2))
    assert schedule_of(pod_with(), defaults={"epochSeconds": 3}) == Schedule(epoch_seconds=3)
    assert schedule_of(both, defaults={"epochs": 9, "exitCode": 2}) == Schedule(epochs=2, accuracy=(0.1, 0.2), exit_code=2)
    assert requested(both) and requested(pod_with({ENV: ""})) and not requested(pod_with({"EPOCHS": "2"}))


@pytest.mark.parametrize("text, word", [("[1]", "JSON object"), ("{", "not JSON"), ('{"epochs": -1}', "epochs"),
                                        ('{"accuracy": [2]}', "accuracy"), ('{"exitCode": 300}', "exitCode"),
                                        ('{"epochSecond": 1}', "unknown keys")])
def test_a_bad_schedule_is_refused_with_its_key(text, word):
    with pytest.raises(ScheduleError, match=word):
        parse_schedule(text)


def test_plain_lines_are_a_start_line_one_per_epoch_and_an_end_line():
    schedule = Schedule(epoch_seconds=2, epochs=3, accuracy=(0.4, 0.6))
    assert plain_log_lines(schedule, pod_with()) == [
        (0.0, "simulated pod p: 3 epochs every 2s"), (2.0, "epoch 0: accuracy 0.4"), (4.0, "epoch 1: accuracy 0.6"),
        (6.0, "epoch 2: accuracy 0.6"), (6.0, "simulated pod p: exit code 0")]


def test_a_failing_schedule_stops_after_its_epoch_with_a_nonzero_code():
    schedule = Schedule(epoch_seconds=1, epochs=5, fail_after_epoch=1)
    assert schedule.final_exit_code == 1 and schedule.run_seconds == 2.0
    lines = [line for _, line in plain_log_lines(schedule, pod_with())]
    assert [line for line in lines if line.startswith("epoch ")] == ["epoch 0: accuracy 0.42", "epoch 1: accuracy 0.54"]
    assert lines[-1] == "simulated pod p: exit code 1"
    assert Schedule(epochs=2, exit_code=4).final_exit_code == 4


def simulated_pod(name, schedule, **extra):
    body = python_pod(name, "raise SystemExit(9)", **extra)  # never run: the pod is simulated
    body["metadata"]["annotations"] = {ANNOTATION: json.dumps(schedule)}
    return body


def test_pod_addresses_are_handed_out_in_turn_and_after_a_wrap_skip_those_in_use():
    addresses = PodAddresses("10.9.0.0/29")  # hosts .1 to .6
    in_use_asked = []

    def in_use():
        in_use_asked.append(True)
        return {"10.9.0.2", "10.9.0.3"}

    first = [addresses.take(in_use) for _ in range(6)]
    assert first == [f"10.9.0.{n}" for n in range(1, 7)] and not in_use_asked, "no need to ask before the first wrap"
    assert [addresses.take(in_use) for _ in range(2)] == ["10.9.0.1", "10.9.0.4"]
    with pytest.raises(RuntimeError, match="all 6 simulated pod addresses are in use"):
        addresses.take(lambda: {f"10.9.0.{n}" for n in range(1, 7)})
    with pytest.raises(ValueError):
        PodAddresses("10.9.0.0/31")


def test_simulated_and_real_pods_in_one_cluster_and_a_followed_simulated_log(tmp_path):
    with LocalCluster(workdir=tmp_path / "cluster", cpu=2) as cluster, api_client(cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", simulated_pod("sim", {"epochs": 3, "epochSeconds": 0.3,
                                                                    "startSeconds": 0.2}))
        core.create_namespaced_pod("default", python_pod("real", "print('real process')"))
        wait_for(lambda: pod_phase(core, "sim") == "Running", what="the simulated pod running")
        followed: list[str] = []

        def follow():
            stream = core.read_namespaced_pod_log("sim", "default", follow=True, _preload_content=False)
            for chunk in stream.stream():
                followed.append(chunk.decode())

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        wait_for(lambda: pod_phase(core, "sim") == "Succeeded", what="the simulated pod to succeed")
        reader.join(10)
        assert not reader.is_alive(), "a followed log ends when the simulated container does"
        schedule = Schedule(epochs=3, epoch_seconds=0.3, start_seconds=0.2)
        assert "".join(followed).splitlines() == [line for _, line in plain_log_lines(schedule, {"metadata": {"name": "sim"}})]
        state = core.read_namespaced_pod("sim", "default").status.container_statuses[0].state.terminated
        assert state.exit_code == 0 and state.reason == "Completed"
        wait_for(lambda: pod_phase(core, "real") == "Succeeded", what="the real pod to succeed")
        assert "real process" in core.read_namespaced_pod_log("real", "default")
        assert cluster.process_ids() == []


def test_a_simulate_mode_cluster_fails_a_pod_on_schedule_and_deletes_a_running_one(tmp_path):
    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, simulate=True) as cluster, api_client(cluster) as api:
        core = client.CoreV1Api(api)
        failing = python_pod("fails", "print('never run')", env=[{"name": ENV, "value": '{"epochs": 3, "epochSeconds": 0.1, '
                                                                                       '"failAfterEpoch": 0, "exitCode": 3}'}])
        core.create_namespaced_pod("default", failing)
        core.create_namespaced_pod("default", python_pod("long", "print('never run')",
                                                         env=[{"name": ENV, "value": '{"epochSeconds": 60}'}]))
        wait_for(lambda: pod_phase(core, "fails") == "Failed", what="the failing pod")
        terminated = core.read_namespaced_pod("fails", "default").status.container_statuses[0].state.terminated
        assert terminated.exit_code == 3
        wait_for(lambda: pod_phase(core, "long") == "Running", what="the long pod running")
        addresses = [core.read_namespaced_pod(name, "default").status.pod_ip for name in ("fails", "long")]
        assert len(set(addresses)) == 2, f"each simulated pod has an address of its own: {addresses}"
        assert all(ipaddress.ip_address(a) in ipaddress.ip_network(SIMULATED_POD_CIDR) for a in addresses), addresses
        started = time.monotonic()
        core.delete_namespaced_pod("long", "default")
        wait_for(lambda: pod_phase(core, "long") is None, what="the deleted pod gone")
        assert time.monotonic() - started < 5
        assert cluster.process_ids() == []


def test_the_cluster_prints_what_the_workload_handed_in_says(tmp_path):
    def numbered(schedule, pod):
        return [(0.1 * n, f"{pod['metadata']['name']} line {n} of {schedule.epochs}") for n in range(schedule.epochs)]

    workload = Workload(log_lines=numbered, schedule_defaults=lambda pod: {"epochs": 2, "epochSeconds": 0.1})
    with LocalCluster(workdir=tmp_path / "cluster", cpu=2, simulate=True, workload=workload) as cluster, \
            api_client(cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", python_pod("numbered", "print('never run')"))
        wait_for(lambda: pod_phase(core, "numbered") == "Succeeded", what="the simulated pod to succeed")
        assert core.read_namespaced_pod_log("numbered", "default") == "numbered line 0 of 2\nnumbered line 1 of 2\n"
