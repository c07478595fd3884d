"""The local kubelet and scheduler: pods as local processes, through the official client."""
from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
import time
from types import SimpleNamespace

import pytest
from kubernetes import client

from pets_localkube import LocalCluster
from pets_localkube.environment import PortMap
from pets_localkube.kubelet import Kubelet
from pets_localkube.runtimes.process import PodWorker

from .helpers import api_client, gone, pod_phase, python_pod, wait_for

PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.fixture
def core(local_cluster):
    with api_client(local_cluster) as api:
        yield client.CoreV1Api(api)


def finished(core, name: str, timeout: float = 30) -> client.V1Pod:
    wait_for(lambda: pod_phase(core, name) in ("Succeeded", "Failed"), timeout=timeout, what=f"pod {name} to finish")
    return core.read_namespaced_pod(name, "default")


def logged_env(core, name: str) -> dict[str, str]:
    return json.loads(core.read_namespaced_pod_log(name, "default").strip().splitlines()[-1])


def log_or_empty(core, name: str) -> str:
    try:
        return core.read_namespaced_pod_log(name, "default")
    except client.ApiException as error:
        if error.status == 400:  # not started yet
            return ""
        raise


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_pod_runs_to_success_with_its_environment(core):
    pod = python_pod("env", PRINT_ENV, env=[{"name": "GREETING", "value": "hi"}, {"name": "WHO", "value": "$(GREETING) there"},
                                             {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    pod["spec"]["hostname"] = "env-host"
    created = core.create_namespaced_pod("default", pod)
    assert created.status.phase == "Pending"
    done = finished(core, "env")
    assert done.status.phase == "Succeeded" and done.spec.node_name == "local-node"
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (0, "Completed")
    assert {c.type: c.status for c in done.status.conditions}["PodScheduled"] == "True"
    env = logged_env(core, "env")
    assert (env["GREETING"], env["WHO"], env["POD"], env["HOSTNAME"]) == ("hi", "hi there", "env", "env-host")
    # Its own temporary directory, as a container has its own /tmp.
    assert env["TMPDIR"].endswith(f"/pods/default_env_{done.metadata.uid}/tmp") and os.path.isdir(env["TMPDIR"])


def test_cluster_dns_names_and_master_ports_are_mapped_per_rendezvous(core):
    def rendezvous_pod(name: str, job: str) -> dict:
        return python_pod(name, PRINT_ENV, env=[
            {"name": "MASTER_ADDR", "value": f"{job}-0.{job}-workers.default.svc"}, {"name": "MASTER_PORT", "value": "29500"},
            {"name": "PEER", "value": f"{job}-1.{job}-workers.default.svc.cluster.local:1234"}, {"name": "PLAIN", "value": "example.com"}])

    # Sleep-free pods finish at once; keep the first ones running so the port is shared while they live.
    for name, job in (("a-0", "a"), ("a-1", "a"), ("b-0", "b")):
        body = rendezvous_pod(name, job)
        body["spec"]["containers"][0]["command"][-1] = PRINT_ENV + "; import time; time.sleep(1.5)"
        core.create_namespaced_pod("default", body)
    wait_for(lambda: all(log_or_empty(core, n).strip() for n in ("a-0", "a-1", "b-0")), what="the env dumps")
    a0, a1, b0 = (logged_env(core, n) for n in ("a-0", "a-1", "b-0"))
    assert a0["MASTER_ADDR"] == a1["MASTER_ADDR"] == b0["MASTER_ADDR"] == "127.0.0.1"
    assert a0["PEER"] == "127.0.0.1:1234" and a0["PLAIN"] == "example.com"
    assert a0["MASTER_PORT"] == a1["MASTER_PORT"] != b0["MASTER_PORT"] != "29500"


def test_volume_mount_paths_in_env_become_local_directories(core, tmp_path):
    host_dir = tmp_path / "host"
    pod = python_pod("vol", "import os; open(os.environ['DATA_DIR'] + '/x.txt', 'w').write('data'); "
                            "print(os.environ['DATA_DIR']); print(os.environ['CKPT'])",
                     env=[{"name": "DATA_DIR", "value": "/data/images"}, {"name": "CKPT", "value": "/checkpoints"}],
                     volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "ckpt", "mountPath": "/checkpoints"}])
    pod["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(host_dir)}}, {"name": "ckpt", "emptyDir": {}}]
    (host_dir / "images").mkdir(parents=True)
    core.create_namespaced_pod("default", pod)
    assert finished(core, "vol").status.phase == "Succeeded"
    data_dir, checkpoint = core.read_namespaced_pod_log("vol", "default").split()
    assert data_dir == str(host_dir / "images") and (host_dir / "images" / "x.txt").read_text() == "data"
    assert checkpoint.endswith("/volumes/ckpt") and os.path.isdir(checkpoint)


def test_a_failing_container_fails_the_pod_with_its_exit_code(core):
    core.create_namespaced_pod("default", python_pod("fail", "import sys; print('boom'); sys.exit(3)"))
    done = finished(core, "fail")
    state = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, state.exit_code, state.reason) == ("Failed", 3, "Error")
    assert core.read_namespaced_pod_log("fail", "default") == "boom\n"


def test_a_missing_executable_fails_the_pod_with_a_start_error(core):
    pod = python_pod("nocmd", "")
    pod["spec"]["containers"][0]["command"] = ["no-such-binary-anywhere"]
    core.create_namespaced_pod("default", pod)
    done = finished(core, "nocmd")
    state = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, state.reason) == ("Failed", "StartError")
    assert "executable file not found" in state.message


def test_a_container_without_a_command_has_no_entrypoint_unless_the_cluster_is_given_one(core):
    pod = python_pod("imageonly", "")
    container = pod["spec"]["containers"][0]
    del container["command"]
    container["image"] = "registry:5000/pets-trainer:0.1.0"
    core.create_namespaced_pod("default", pod)
    done = finished(core, "imageonly")
    state = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, state.reason) == ("Failed", "StartError")
    assert state.message == "image 'registry:5000/pets-trainer:0.1.0' has no local entrypoint; set the container's command"


async def test_an_images_entrypoint_is_the_command_of_a_container_that_sets_none(tmp_path):
    kubelet = SimpleNamespace(workdir=tmp_path, ports=PortMap(), entrypoints={"tool": [sys.executable, "-c", "pass"]}, api_server=None)
    container = {"name": "main", "image": "registry:5000/team/tool:1@sha256:ab", "args": ["$(WHO)"],
                 "env": [{"name": "WHO", "value": "me"}]}
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {"containers": [container]}}
    argv, env, _, _ = await PodWorker(kubelet, pod).process_spec(container)
    assert argv == [sys.executable, "-c", "pass", "me"] and env["WHO"] == "me"


def test_a_bare_command_resolves_beside_the_running_python_first(core):
    pod = python_pod("bare", "import sys; print(sys.executable)")
    pod["spec"]["containers"][0]["command"][0] = os.path.basename(sys.executable)
    core.create_namespaced_pod("default", pod)
    assert finished(core, "bare").status.phase == "Succeeded"
    assert os.path.dirname(core.read_namespaced_pod_log("bare", "default").strip()) == os.path.dirname(sys.executable)


def test_on_failure_restarts_until_success(core, tmp_path):
    marker = tmp_path / "tries"
    code = (f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); n = len(p.read_text()) if p.exists() else 0; "
            "p.write_text('x' * (n + 1)); sys.exit(0 if n >= 1 else 1)")
    core.create_namespaced_pod("default", python_pod("retry", code, restart="OnFailure"))
    done = finished(core, "retry")
    assert done.status.phase == "Succeeded" and done.status.container_statuses[0].restart_count == 1
    assert marker.read_text() == "xx"


def test_deleting_a_running_pod_terminates_its_process(core, local_cluster):
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (print('terminated', flush=True), sys.exit(0))); "
            "print('up', flush=True); time.sleep(60)")
    core.create_namespaced_pod("default", python_pod("sleeper", code))
    wait_for(lambda: log_or_empty(core, "sleeper").strip() == "up", what="the process to start")
    running = core.read_namespaced_pod("sleeper", "default")
    assert running.status.phase == "Running" and running.status.container_statuses[0].ready
    pids = local_cluster.process_ids()
    assert len(pids) == 1 and alive(pids[0])
    core.delete_namespaced_pod("sleeper", "default")
    assert core.read_namespaced_pod("sleeper", "default").metadata.deletion_timestamp or gone(lambda: core.read_namespaced_pod("sleeper", "default"))
    wait_for(lambda: gone(lambda: core.read_namespaced_pod("sleeper", "default")), what="the pod to go")
    wait_for(lambda: not alive(pids[0]), what="the process to end")


def test_sigkill_after_the_grace_period(core, local_cluster):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    pod = python_pod("stubborn", code)
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    core.create_namespaced_pod("default", pod)
    wait_for(lambda: log_or_empty(core, "stubborn").strip() == "up", what="the process to start")
    pid = local_cluster.process_ids()[0]
    started = time.monotonic()
    core.delete_namespaced_pod("stubborn", "default")
    wait_for(lambda: not alive(pid), what="the process to be killed")
    assert 0.8 < time.monotonic() - started < 10


def test_pods_that_do_not_fit_stay_pending_until_capacity_frees(core):
    too_big = python_pod("huge", "print(1)", resources={"requests": {"cpu": "3"}})
    core.create_namespaced_pod("default", too_big)
    first = python_pod("first", "import time; time.sleep(1.5)", resources={"requests": {"cpu": "1500m"}})
    second = python_pod("second", "print('second')", resources={"requests": {"cpu": "1500m"}})
    core.create_namespaced_pod("default", first)
    wait_for(lambda: pod_phase(core, "first") == "Running", what="the first pod to run")
    core.create_namespaced_pod("default", second)

    def unschedulable(name):
        conditions = core.read_namespaced_pod(name, "default").status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    waiting = wait_for(lambda: unschedulable("second"), what="second to be unschedulable")
    assert waiting.reason == "Unschedulable" and "Insufficient cpu" in waiting.message
    assert finished(core, "second").status.phase == "Succeeded"
    huge = unschedulable("huge")
    assert huge and huge.reason == "Unschedulable" and core.read_namespaced_pod("huge", "default").spec.node_name is None


def test_node_selector_must_match_the_local_node(core):
    pod = python_pod("picky", "print(1)")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "elsewhere"}
    core.create_namespaced_pod("default", pod)
    condition = wait_for(lambda: next((c for c in core.read_namespaced_pod("picky", "default").status.conditions or []
                                       if c.type == "PodScheduled" and c.status == "False"), None), what="picky to be unschedulable")
    assert "didn't match Pod's node affinity/selector" in condition.message


def test_shutdown_kills_every_process(tmp_path):
    with LocalCluster(workdir=tmp_path / "c", cpu=2) as cluster, api_client(cluster) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", python_pod("forever", "import time; print('up', flush=True); time.sleep(120)"))
        wait_for(lambda: cluster.process_ids(), what="the process to start")
        pid = cluster.process_ids()[0]
    wait_for(lambda: not alive(pid), timeout=10, what="the process to be killed on shutdown")


def test_a_kubelet_going_down_starts_no_pod_bound_after_its_shutdown_began(tmp_path):
    """A ReplicaSet replaces the pods a node's shutdown stops; a replacement bound to the node meanwhile
    must not start: shutdown() would not stop it, and its processes would outlive the node."""
    async def scenario() -> dict:
        kubelet = Kubelet(SimpleNamespace(base_url="https://127.0.0.1:6443"), "local", tmp_path, {"cpu": "2"})
        await kubelet.shutdown()
        pod = python_pod("replacement", "print(1)")
        pod["metadata"].update(namespace="default", uid="replacement-uid")
        pod["spec"]["nodeName"] = "local"
        await kubelet._handle("ADDED", pod)
        return kubelet.workers

    assert asyncio.run(scenario()) == {}


# --- logs ---------------------------------------------------------------------------------------

def test_logs_follow_tail_since_and_timestamps(core):
    code = "import time\nfor i in range(4):\n    print(f'line {i}', flush=True)\n    time.sleep(0.4)"
    core.create_namespaced_pod("default", python_pod("talker", code))
    wait_for(lambda: pod_phase(core, "talker") == "Running", what="talker to run")
    wait_for(lambda: log_or_empty(core, "talker"), what="the first log line")
    stream = core.read_namespaced_pod_log("talker", "default", follow=True, _preload_content=False)
    followed = b"".join(stream.stream()).decode()
    assert followed == "".join(f"line {i}\n" for i in range(4))
    assert pod_phase(core, "talker") == "Succeeded"
    assert core.read_namespaced_pod_log("talker", "default", tail_lines=2) == "line 2\nline 3\n"
    stamped = core.read_namespaced_pod_log("talker", "default", timestamps=True).splitlines()
    moments = [datetime.datetime.fromisoformat(line.split(" ", 1)[0][:26] + "+00:00") for line in stamped]
    assert [line.split(" ", 1)[1] for line in stamped] == [f"line {i}" for i in range(4)] and moments == sorted(moments)
    since = stamped[2].split(" ", 1)[0]
    api = core.api_client
    response = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/api/v1/namespaces/default/pods/talker/log?sinceTime={since}")
    assert response.data.decode() == "line 2\nline 3\n"


def test_logs_of_a_pending_pod_are_a_bad_request(core):
    core.create_namespaced_pod("default", python_pod("unplaced", "print(1)", resources={"requests": {"cpu": "64"}}))
    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_pod_log("unplaced", "default")
    assert raised.value.status == 400 and "waiting to start" in json.loads(raised.value.body)["message"]


def test_init_containers_run_first_and_share_volumes(core):
    pod = python_pod("staged", "import os; print(open(os.environ['WORK'] + '/ready').read())",
                     env=[{"name": "WORK", "value": "/work"}], volumeMounts=[{"name": "work", "mountPath": "/work"}])
    pod["spec"]["volumes"] = [{"name": "work", "emptyDir": {}}]
    pod["spec"]["initContainers"] = [{"name": "prepare", "image": "python", "env": [{"name": "WORK", "value": "/work"}],
                                      "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                                      "command": [sys.executable, "-c", "import os; open(os.environ['WORK'] + '/ready', 'w').write('prepared')"]}]
    core.create_namespaced_pod("default", pod)
    done = finished(core, "staged")
    assert done.status.phase == "Succeeded", done.status
    assert done.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert core.read_namespaced_pod_log("staged", "default") == "prepared\n"


async def test_a_container_is_told_the_api_servers_address_its_own_ports_and_its_service_account_directory(tmp_path):
    """Local processes share the node's network and files: the `kubernetes` Service's variables name the API
    server itself, each pod's declared ports are its own local ports (an env value naming one follows), and
    the token volume's local directory is in PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR."""
    kubelet = SimpleNamespace(workdir=tmp_path, ports=PortMap(), entrypoints={}, api_server=("127.0.0.1", 6443))
    container = {"name": "operator", "image": "pets-operator:0.2.0", "command": [sys.executable, "-c", "pass"],
                 "ports": [{"name": "healthz", "containerPort": 8080}, {"name": "metrics", "containerPort": 8000}],
                 "env": [{"name": "LIVENESS_PORT", "value": "8080"}, {"name": "METRICS_PORT", "value": "8000"},
                         {"name": "WORKERS", "value": "80"}, {"name": "KUBERNETES_SERVICE_PORT", "value": "$(WORKERS)"}],
                 "volumeMounts": [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                   "readOnly": True}]}
    envs = []
    for uid in ("u1", "u2"):  # two replicas of one Deployment
        pod = {"metadata": {"name": f"op-{uid}", "namespace": "pets-system", "uid": uid},
               "spec": {"containers": [container], "volumes": [{"name": "kube-api-access-x", "projected": {"sources": []}}]}}
        worker = PodWorker(kubelet, pod)
        worker.volumes = {"kube-api-access-x": worker.pod_dir / "volumes" / "kube-api-access-x"}
        _, env, _, _ = await worker.process_spec(container)
        envs.append(env)
        assert env["PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR"] == str(worker.pod_dir / "volumes" / "kube-api-access-x")
        assert env["LIVENESS_PORT"] == str(kubelet.ports.pod_port(uid, 8080)) != "8080"
        assert env["METRICS_PORT"] == str(kubelet.ports.pod_port(uid, 8000)) != "8000"
        assert env["WORKERS"] == "80", "a number that is no declared port stays"
    first, second = envs
    assert {k: v for k, v in first.items() if k.startswith("KUBERNETES_")} == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "80",  # the container's own env wins
        "KUBERNETES_SERVICE_PORT_HTTPS": "6443", "KUBERNETES_PORT": "tcp://127.0.0.1:6443",
        "KUBERNETES_PORT_6443_TCP": "tcp://127.0.0.1:6443", "KUBERNETES_PORT_6443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_6443_TCP_PORT": "6443", "KUBERNETES_PORT_6443_TCP_ADDR": "127.0.0.1"}
    assert {first["LIVENESS_PORT"], first["METRICS_PORT"]}.isdisjoint({second["LIVENESS_PORT"], second["METRICS_PORT"]})
    kubelet.ports.release("u1")
    assert kubelet.ports.pod_port("u2", 8080) == int(second["LIVENESS_PORT"]), "held while the pod runs"


def test_the_kubelet_tells_containers_only_an_https_api_servers_address():
    from pets_localkube.kubelet import api_server_address

    assert api_server_address("https://127.0.0.1:34567") == ("127.0.0.1", 34567)
    assert api_server_address("https://api.example.com") == ("api.example.com", 443)
    assert api_server_address("http://127.0.0.1:8001") is None
