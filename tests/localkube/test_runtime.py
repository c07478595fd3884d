"""The local kubelet as a container runtime, through the official client: a container is one unit
of processes (its main process's exit ends them all), hostPath types and readOnly mounts, the Events
a kubelet and scheduler post, a deleted pod's files removed, quiet client disconnects."""
from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from kubernetes import client

from pets_localkube import LocalCluster
from pets_localkube.runtimes.process import SHIM

from .helpers import api_client, gone, pod_phase, python_pod, wait_for

# Starts a helper in a session of its own (as launchers start workers) and a daemon (double fork +
# setsid, reparented away from its parent); each prints "<role> <pid>" and then tells the main process
# through a pipe, so "main <pid>" comes last and a main process that exits at once never ends a helper
# before it has printed (a helper's interpreter can take over a second to start on a busy machine).
SPAWNER = r'''
import os, subprocess, sys, time
ready_r, ready_w = os.pipe()
subprocess.Popen([sys.executable, "-c", "import os, sys, time; print('helper', os.getpid(), flush=True); "
                  "os.write(int(sys.argv[1]), b'.'); time.sleep(300)", str(ready_w)],
                 start_new_session=True, pass_fds=(ready_w,))
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        print('daemon', os.getpid(), flush=True)
        os.write(ready_w, b'.')
        time.sleep(300)
        os._exit(0)
    os._exit(0)
os.close(ready_w)
told = 0
while told < 2:
    chunk = os.read(ready_r, 2 - told)
    if not chunk:  # every writer closed: a helper ended before it said so
        break
    told += len(chunk)
print('main', os.getpid(), flush=True)
'''


@pytest.fixture
def core(local_cluster):
    with api_client(local_cluster) as api:
        yield client.CoreV1Api(api)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead; its parent has not reaped it yet
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def logged_pids(core, name: str, roles=("main", "helper", "daemon")) -> dict[str, int]:
    def read() -> dict[str, int] | None:
        try:
            lines = core.read_namespaced_pod_log(name, "default").splitlines()
        except client.ApiException:
            return None
        found = {line.split()[0]: int(line.split()[1]) for line in lines if line.split()[:1] and line.split()[0] in roles}
        return found if set(found) == set(roles) else None
    return wait_for(read, what=f"the pids of {name}'s processes")


def terminated(core, name: str, timeout: float = 15) -> client.V1ContainerStateTerminated:
    wait_for(lambda: pod_phase(core, name) in ("Succeeded", "Failed"), timeout=timeout, what=f"{name} to end")
    return core.read_namespaced_pod(name, "default").status.container_statuses[0].state.terminated


def events_of(core, name: str, reason: str | None = None) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event("default").items
            if e.involved_object.name == name and (reason is None or e.reason == reason)]


# --- one container, one unit ------------------------------------------------------------------

def test_killing_the_main_process_ends_every_process_of_the_container(core, local_cluster):
    core.create_namespaced_pod("default", python_pod("unit", SPAWNER + "time.sleep(300)"))
    pids = logged_pids(core, "unit")
    assert local_cluster.process_ids() == [pids["main"]]
    assert all(alive(pid) for pid in pids.values())
    started = time.monotonic()
    os.kill(pids["main"], signal.SIGKILL)
    state = terminated(core, "unit")
    # The helpers held the log pipe open; the container still ended at once, as its runtime ends it.
    assert time.monotonic() - started < 10
    assert (pod_phase(core, "unit"), state.exit_code, state.reason) == ("Failed", 137, "Error")
    wait_for(lambda: not any(alive(pid) for pid in pids.values()), timeout=5, what="every process of the container to end")
    assert local_cluster.process_ids() == []


def test_a_main_process_that_exits_takes_its_helpers_with_it(core):
    core.create_namespaced_pod("default", python_pod("leaver", SPAWNER + "time.sleep(0.5); sys.exit(3)"))
    pids = logged_pids(core, "leaver")
    state = terminated(core, "leaver")
    assert (pod_phase(core, "leaver"), state.exit_code, state.reason) == ("Failed", 3, "Error")
    wait_for(lambda: not any(alive(pid) for pid in pids.values()), timeout=5, what="the helpers to end with the main process")


def test_deleting_a_pod_ends_helpers_in_other_sessions_too(core):
    code = SPAWNER + "import signal; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(300)"
    core.create_namespaced_pod("default", python_pod("deleted", code))
    pids = logged_pids(core, "deleted")
    core.delete_namespaced_pod("deleted", "default")
    wait_for(lambda: gone(lambda: core.read_namespaced_pod("deleted", "default")), what="the pod to go")
    wait_for(lambda: not any(alive(pid) for pid in pids.values()), timeout=5, what="every process of the pod to end")
    killing = events_of(core, "deleted", "Killing")
    assert killing and killing[0].message == "Stopping container main" and killing[0].involved_object.field_path == "spec.containers{main}"


# --- hostPath types ----------------------------------------------------------------------------

def host_path_pod(name: str, path, kind: str | None, code: str = "print('ran')", read_only: bool = False) -> dict:
    source = {"path": str(path), **({"type": kind} if kind is not None else {})}
    pod = python_pod(name, code, env=[{"name": "DATA", "value": "/data"}],
                     volumeMounts=[{"name": "data", "mountPath": "/data", "readOnly": read_only}])
    pod["spec"]["volumes"] = [{"name": "data", "hostPath": source}]
    return pod


def test_a_missing_directory_of_type_directory_keeps_the_pod_creating_with_failed_mount(core, tmp_path):
    missing = tmp_path / "not-yet"
    core.create_namespaced_pod("default", host_path_pod("waits", missing, "Directory"))
    failed = wait_for(lambda: events_of(core, "waits", "FailedMount"), what="a FailedMount event")[0]
    assert failed.type == "Warning"
    assert failed.message == f'MountVolume.SetUp failed for volume "data" : hostPath type check failed: {missing} is not a directory'
    assert (failed.source.component, failed.source.host) == ("kubelet", "local-node")
    pod = core.read_namespaced_pod("waits", "default")
    assert failed.involved_object.uid == pod.metadata.uid and failed.involved_object.kind == "Pod"
    assert pod.status.phase == "Pending" and pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert not missing.exists()  # not created behind the pod's back
    # The kubelet retries, and each retry counts on the same event.
    wait_for(lambda: events_of(core, "waits", "FailedMount")[0].count >= 2, what="the retried mount to be counted")
    assert len(events_of(core, "waits", "FailedMount")) == 1
    missing.mkdir()
    assert terminated(core, "waits", timeout=30).exit_code == 0
    assert core.read_namespaced_pod_log("waits", "default") == "ran\n"


@pytest.mark.parametrize("kind, make, message", [
    ("File", None, "is not a file"),
    ("File", "dir", "is not a file"),
    ("Directory", "file", "is not a directory"),
    ("Socket", "file", "is not a socket file"),
    ("CharDevice", "dir", "is not a character device"),
    ("BlockDevice", "file", "is not a block device"),
])
def test_host_path_type_checks_fail_as_the_kubelet_reports_them(core, tmp_path, kind, make, message):
    target = tmp_path / "target"
    if make == "dir":
        target.mkdir()
    elif make == "file":
        target.write_text("x")
    name = f"check-{kind.lower()}-{make or 'none'}"
    core.create_namespaced_pod("default", host_path_pod(name, target, kind))
    failed = wait_for(lambda: events_of(core, name, "FailedMount"), what="a FailedMount event")[0]
    assert failed.message == f'MountVolume.SetUp failed for volume "data" : hostPath type check failed: {target} {message}'
    assert pod_phase(core, name) == "Pending"


def test_the_or_create_types_create_what_is_missing_and_the_default_type_is_unset(core, tmp_path):
    directory, file = tmp_path / "made" / "dir", tmp_path / "file"
    code = "import os; print(os.path.isdir(os.environ['DATA']))"
    core.create_namespaced_pod("default", host_path_pod("mkdir", directory, "DirectoryOrCreate", code))
    core.create_namespaced_pod("default", host_path_pod("touch", file, "FileOrCreate", "import os; print(os.path.isfile(os.environ['DATA']))"))
    unset = core.create_namespaced_pod("default", host_path_pod("unset", tmp_path / "plain", None))
    assert unset.spec.volumes[0].host_path.type == ""  # the API's default
    for name in ("mkdir", "touch", "unset"):
        assert terminated(core, name).exit_code == 0, name
    assert directory.is_dir() and file.is_file() and file.read_text() == ""
    assert core.read_namespaced_pod_log("mkdir", "default") == "True\n" == core.read_namespaced_pod_log("touch", "default")
    missing_parent = tmp_path / "no-parent" / "file"
    core.create_namespaced_pod("default", host_path_pod("noparent", missing_parent, "FileOrCreate"))
    failed = wait_for(lambda: events_of(core, "noparent", "FailedMount"), what="a FailedMount event")[0]
    assert failed.message == f'MountVolume.SetUp failed for volume "data" : open {missing_parent}: no such file or directory'


def test_an_unknown_host_path_type_is_refused_by_the_api(core, tmp_path):
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod("default", host_path_pod("bad", tmp_path, "Folder"))
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == (
        'Pod "bad" is invalid: spec.volumes[0].hostPath.type: Unsupported value: "Folder": supported values: '
        '"", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"')


# --- readOnly ----------------------------------------------------------------------------------

WRITE_EACH = r'''
import errno, os
for variable in ("RO", "RW", "CM"):
    try:
        with open(os.path.join(os.environ[variable], "written"), "w") as out:
            out.write("x")
        print(variable, "written")
    except OSError as error:
        print(variable, errno.errorcode[error.errno])
'''


def read_only_enforceable(tmp_path) -> bool:
    """Whether this machine gives the shim a mount namespace (root, or unprivileged user namespaces)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    read, write = os.pipe()
    done = subprocess.run([sys.executable, "-I", "-S", str(SHIM), "--status-fd", str(write), "--read-only", str(probe), "--",
                           "/bin/true"], pass_fds=(write,), timeout=30, check=False)
    os.close(write)
    report = os.read(read, 4096).decode()
    os.close(read)
    assert done.returncode == 0 and "started" in report
    return "read-only-unenforced" not in report


def test_read_only_mounts_cannot_be_written_by_the_container(core, tmp_path):
    host = tmp_path / "shared"
    host.mkdir()
    core.create_namespaced_config_map("default", {"metadata": {"name": "settings"}, "data": {"mode": "fast"}})
    pod = host_path_pod("reader", host, "Directory", WRITE_EACH, read_only=True)
    container = pod["spec"]["containers"][0]
    container["env"] += [{"name": "RO", "value": "/data"}, {"name": "RW", "value": "/scratch"}, {"name": "CM", "value": "/config"}]
    container["volumeMounts"] += [{"name": "scratch", "mountPath": "/scratch"}, {"name": "config", "mountPath": "/config"}]
    pod["spec"]["volumes"] += [{"name": "scratch", "emptyDir": {}}, {"name": "config", "configMap": {"name": "settings"}}]
    core.create_namespaced_pod("default", pod)
    assert terminated(core, "reader").exit_code == 0
    printed = dict(line.split() for line in core.read_namespaced_pod_log("reader", "default").splitlines())
    assert printed["RW"] == "written"
    if read_only_enforceable(tmp_path):
        assert printed["RO"] == "EROFS" and printed["CM"] == "EROFS"
        assert not (host / "written").exists()
        assert not events_of(core, "reader", "ReadOnlyNotEnforced")
    else:  # said, never pretended
        warning = events_of(core, "reader", "ReadOnlyNotEnforced")[0]
        assert warning.type == "Warning" and "writable" in warning.message
    (host / "from-the-host").write_text("still writable outside the container")


# --- Events ------------------------------------------------------------------------------------

def test_events_are_posted_as_a_kubelet_and_a_scheduler_post_them(core):
    core.create_namespaced_pod("default", python_pod("evented", "print('done')"))
    assert terminated(core, "evented").exit_code == 0
    pod = core.read_namespaced_pod("evented", "default")
    def all_posted() -> dict | None:
        found = {e.reason: e for e in events_of(core, "evented")}
        return found if {"Scheduled", "Created", "Started"} <= set(found) else None

    events = wait_for(all_posted, what="the pod's events")
    scheduled, created, started = events["Scheduled"], events["Created"], events["Started"]
    assert (scheduled.type, scheduled.source.component, scheduled.message) == (
        "Normal", "default-scheduler", "Successfully assigned default/evented to local-node")
    assert scheduled.involved_object.field_path is None
    for event, message in ((created, "Created container: main"), (started, "Started container main")):
        assert (event.type, event.message, event.count) == ("Normal", message, 1)
        assert (event.source.component, event.source.host, event.reporting_component) == ("kubelet", "local-node", "kubelet")
        involved = event.involved_object
        assert (involved.kind, involved.api_version, involved.namespace, involved.name, involved.uid, involved.field_path) == (
            "Pod", "v1", "default", "evented", pod.metadata.uid, "spec.containers{main}")
        assert event.first_timestamp == event.last_timestamp and isinstance(event.first_timestamp, datetime.datetime)
        assert event.metadata.name.startswith("evented.")


def test_failed_scheduling_and_back_off_are_warnings(core, tmp_path):
    core.create_namespaced_pod("default", python_pod("too-big", "print(1)", resources={"requests": {"cpu": "64"}}))
    failed = wait_for(lambda: events_of(core, "too-big", "FailedScheduling"), what="a FailedScheduling event")[0]
    assert failed.type == "Warning" and failed.source.component == "default-scheduler"
    assert failed.message == "0/1 nodes are available: 1 Insufficient cpu."

    marker = tmp_path / "tries"
    code = (f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); n = len(p.read_text()) if p.exists() else 0; "
            "p.write_text('x' * (n + 1)); sys.exit(0 if n >= 1 else 1)")
    core.create_namespaced_pod("default", python_pod("flaky", code, restart="OnFailure"))
    assert terminated(core, "flaky", timeout=30).exit_code == 0
    back_off = events_of(core, "flaky", "BackOff")[0]
    assert back_off.type == "Warning" and back_off.message.startswith("Back-off restarting failed container main in pod flaky_default(")
    started = events_of(core, "flaky", "Started")
    assert len(started) == 1 and started[0].count == 2  # the same event, counted again on the restart


# --- a deleted pod's files ---------------------------------------------------------------------

WRITE_SCRATCH = "import os; open(os.path.join(os.environ['SCRATCH'], 'f'), 'w').write('x'); print('wrote')"


def scratch_pod(name: str) -> dict:
    pod = python_pod(name, WRITE_SCRATCH, env=[{"name": "SCRATCH", "value": "/scratch"}],
                     volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return pod


def pod_files(workdir, pod: client.V1Pod):
    key = f"default_{pod.metadata.name}_{pod.metadata.uid}"
    return workdir / "pods" / key, workdir / "logs" / key


def test_deleting_a_pod_removes_its_directory_and_logs(core, local_cluster):
    core.create_namespaced_pod("default", scratch_pod("tidy"))
    assert terminated(core, "tidy").exit_code == 0
    pod_dir, log_dir = pod_files(local_cluster.workdir, core.read_namespaced_pod("tidy", "default"))
    assert (pod_dir / "volumes" / "scratch" / "f").exists() and (log_dir / "main.log").exists()
    core.delete_namespaced_pod("tidy", "default")
    wait_for(lambda: not pod_dir.exists() and not log_dir.exists(), what="the pod's files to go")


def test_keep_logs_keeps_a_deleted_pods_logs_and_shutdown_keeps_everything(tmp_path):
    with LocalCluster(workdir=tmp_path / "kept", cpu=2, keep_logs=True) as cluster, api_client(cluster) as api:
        core = client.CoreV1Api(api)
        for name in ("gone", "stays"):
            core.create_namespaced_pod("default", scratch_pod(name))
        for name in ("gone", "stays"):
            assert terminated(core, name).exit_code == 0
        gone_dir, gone_logs = pod_files(cluster.workdir, core.read_namespaced_pod("gone", "default"))
        stays_dir, stays_logs = pod_files(cluster.workdir, core.read_namespaced_pod("stays", "default"))
        core.delete_namespaced_pod("gone", "default")
        wait_for(lambda: not gone_dir.exists(), what="the deleted pod's directory to go")
        assert (gone_logs / "main.log").read_text().endswith(" wrote\n")
    assert stays_dir.exists() and (stays_logs / "main.log").exists()  # a node going down deletes nothing


# --- quiet client disconnects ------------------------------------------------------------------

def test_a_watch_client_that_goes_away_is_not_an_error(local_cluster, caplog):
    """A client that closes a watch while the server writes to it: once an aiohttp traceback
    ("Error handling request ... Cannot write to closing transport"), now a debug line."""
    caplog.set_level(logging.DEBUG)
    server = local_cluster.server
    configmaps = server.registry.find("", "v1", "configmaps")

    def on_the_loop(function) -> None:  # straight into the store: a burst the watch writes in big batches
        local_cluster._loop.call_soon_threadsafe(function)

    for index in range(300):  # an initial list far larger than the socket buffers
        on_the_loop(lambda i=index: server.storage.create(configmaps, "default", {"metadata": {"name": f"c{i}"}, "data": {"x": "y" * 5000}}))
    time.sleep(0.5)
    for half_close in (False, True):
        watcher = socket.create_connection(("127.0.0.1", local_cluster.port))
        watcher.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        watcher.sendall(b"GET /api/v1/configmaps?watch=true&allowWatchBookmarks=true HTTP/1.1\r\nHost: local\r\n\r\n")
        time.sleep(0.3)
        if half_close:
            watcher.shutdown(socket.SHUT_WR)
        else:
            watcher.close()
        for index in range(300):  # changes the server goes on writing to the departed client
            on_the_loop(lambda i=index, tag=half_close: server.storage.patch(
                configmaps, "default", f"c{i}", "application/merge-patch+json", {"data": {"x": f"{tag}{i}" * 3000}}))
        time.sleep(1.5)
        watcher.close()
    # On a busy machine the server can take longer than the pauses above to find a client gone: wait for it.
    wait_for(lambda: any("the client went away" in r.getMessage() for r in caplog.records),
             what="the server to log that the client went away")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]


def test_local_up_has_a_keep_logs_option():
    from pets_localkube.cli import parse_args

    assert parse_args(["up", "--keep-logs"]).keep_logs is True
    assert parse_args(["up"]).keep_logs is False
