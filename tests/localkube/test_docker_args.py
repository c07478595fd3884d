"""The docker runtime's decisions, without docker: a pod's container -> `docker create` arguments."""
from __future__ import annotations

from pathlib import Path

import pytest

from pets_localkube.runtimes.docker_args import (
    ContainerConfigError,
    create_args,
    dns_aliases,
    is_root_user,
    non_root_problem,
)

VOLUMES = {"data": Path("/w/pvc/data"), "tmp": Path("/w/pod/volumes/tmp"), "cfg": Path("/w/pod/volumes/cfg")}


def pod(**spec):
    container = {"name": "trainer", "image": "pets-trainer:0.1.0", "command": ["pets-train"],
                 "env": [{"name": "MASTER_ADDR", "value": "j-0.j-workers.ns.svc"}]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": "j-1", "namespace": "ns", "uid": "uid-1"},
            "spec": {"hostname": "j-1", "subdomain": "j-workers", "containers": [container],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                                 {"name": "tmp", "emptyDir": {}},
                                 {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                                 {"name": "cfg", "configMap": {"name": "c"}}], **spec}}


def args_of(p, env=None):
    return create_args(p, p["spec"]["containers"][0], name="c1", network="net", node="n1",
                       env=env if env is not None else {"MASTER_ADDR": "j-0.j-workers.ns.svc"}, volumes=VOLUMES,
                       message_file=Path("/w/pod/termination-log/trainer"), message_path="/dev/termination-log")


def pairs(args, flag):
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_the_service_records_are_network_aliases():
    assert dns_aliases(pod()) == ["j-1", "j-1.j-workers", "j-1.j-workers.ns", "j-1.j-workers.ns.svc",
                                  "j-1.j-workers.ns.svc.cluster.local"]
    args = args_of(pod())
    assert pairs(args, "--network") == ["net"] and pairs(args, "--hostname") == ["j-1"]
    assert pairs(args, "--network-alias")[-1] == "j-1.j-workers.ns.svc.cluster.local"


def test_env_values_never_appear_on_the_command_line():
    args = args_of(pod(), env={"HF_TOKEN": "hf_secret", "MASTER_ADDR": "x"})
    assert pairs(args, "-e") == ["HF_TOKEN", "MASTER_ADDR"]
    assert not any("hf_secret" in arg for arg in args)


def test_command_replaces_the_entrypoint_and_args_follow_expanded():
    args = args_of(pod(container={"command": ["python", "-m", "x"], "args": ["--to", "$(MASTER_ADDR)"]}))
    assert args[args.index("--entrypoint"):] == ["--entrypoint", "python", "pets-trainer:0.1.0", "-m", "x", "--to",
                                                 "j-0.j-workers.ns.svc"]
    only_args = args_of(pod(container={"command": [], "args": ["--help"]}))
    assert "--entrypoint" not in only_args and only_args[-2:] == ["pets-trainer:0.1.0", "--help"]


def test_volumes_bind_the_kubelet_s_directories_and_memory_is_a_sized_tmpfs():
    mounts = [{"name": "data", "mountPath": "/data", "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"},
              {"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cfg", "mountPath": "/etc/c", "subPath": "k"}]
    args = args_of(pod(container={"volumeMounts": mounts}))
    assert pairs(args, "--mount") == ["type=bind,source=/w/pvc/data,target=/data,readonly",
                                      "type=bind,source=/w/pod/volumes/tmp,target=/tmp",
                                      "type=bind,source=/w/pod/volumes/cfg/k,target=/etc/c",
                                      "type=bind,source=/w/pod/termination-log/trainer,target=/dev/termination-log"]
    assert pairs(args, "--tmpfs") == [f"/dev/shm:rw,nosuid,nodev,mode=1777,size={1024 ** 3}"]
    with pytest.raises(ContainerConfigError, match="'nope'"):
        args_of(pod(container={"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}))


def test_security_context_pod_then_container():
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
               "runAsUser": 10001}
    args = args_of(pod(securityContext={"runAsUser": 1, "runAsGroup": 10001, "fsGroup": 10001,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                       container={"securityContext": context}))
    assert pairs(args, "--user") == ["10001:10001"] and pairs(args, "--group-add") == ["10001"]
    assert pairs(args, "--security-opt") == ["no-new-privileges"]  # RuntimeDefault is docker's default profile
    assert pairs(args, "--cap-drop") == ["ALL"] and "--read-only" in args and "--privileged" not in args
    unconfined = args_of(pod(securityContext={"seccompProfile": {"type": "Unconfined"}}))
    assert pairs(unconfined, "--security-opt") == ["seccomp=unconfined"]
    with pytest.raises(ContainerConfigError, match="Localhost"):
        args_of(pod(securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}))


def test_limits_become_cpus_and_memory_without_swap():
    args = args_of(pod(container={"resources": {"limits": {"cpu": "1500m", "memory": "3Gi"}, "requests": {"cpu": "1"}}},
                       terminationGracePeriodSeconds=7))
    assert pairs(args, "--cpus") == ["1.5"]
    assert pairs(args, "--memory") == [str(3 * 1024 ** 3)] and pairs(args, "--memory-swap") == [str(3 * 1024 ** 3)]
    assert pairs(args, "--stop-timeout") == ["7"]


def test_labels_let_the_node_remove_what_it_made():
    labels = pairs(args_of(pod()), "--label")
    assert "dev.pets.localkube.node=n1" in labels and "dev.pets.localkube.pod-uid=uid-1" in labels


@pytest.mark.parametrize("user, root", [("", True), ("0", True), ("root", True), ("0:0", True), ("10001", False),
                                        ("10001:10001", False), ("trainer", None)])
def test_which_image_users_are_root(user, root):
    assert is_root_user(user) is root


def test_run_as_non_root_as_the_kubelet_decides_it():
    strict = pod(securityContext={"runAsNonRoot": True})
    container = strict["spec"]["containers"][0]
    assert non_root_problem(strict, container, "").startswith("container has runAsNonRoot and image will run as root")
    assert non_root_problem(strict, container, "10001") is None
    assert "non-numeric user (trainer)" in non_root_problem(strict, container, "trainer")
    with_user = pod(securityContext={"runAsNonRoot": True, "runAsUser": 10001})
    assert non_root_problem(with_user, with_user["spec"]["containers"][0], "") is None
    zero = pod(securityContext={"runAsNonRoot": True, "runAsUser": 0})
    assert "breaks non-root policy" in non_root_problem(zero, zero["spec"]["containers"][0], "10001")
    assert non_root_problem(pod(), pod()["spec"]["containers"][0], "") is None  # not asked
