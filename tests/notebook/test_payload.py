"""cluster_launcher's refusals (before anything is created), the payload's versions and the pods' check,
the path warnings, and the bodies it sends. No cluster: `client` is a recording stub."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import threading
import warnings

import pytest

from pets_api import function_payload
from pets_client.launcher import (
    FUNCTION_KEY,
    LaunchRefused,
    UnmountedPathWarning,
    build_payload,
    cluster_launcher,
    config_map_body,
    default_job_name,
    launch_spec,
    path_warnings,
    shipped_values,
)

DATA_DIR = "/home/me/pets/images"
fnames = [f"{DATA_DIR}/beagle_{i}.jpg" for i in range(1, 4)]
relative_names = ["../../images/pug_1.jpg", "../../images/pug_2.jpg"]
label_to_id = {"beagle": 0, "pug": 1}
lock = threading.Lock()
big_table = b"\x01" * (1024 * 1024 + 10)


class PetsDataset:
    def __init__(self, names):
        self.names = names

    def label(self, index):
        return label_to_id[self.names[index].rsplit("/", 1)[-1].split("_")[0]]


def get_dataloaders():
    return PetsDataset(fnames)


def training_loop(mixed_precision="no", seed=42, batch_size=64):
    return get_dataloaders().label(0), mixed_precision, seed, batch_size


def uses_relative_names():
    return relative_names


def uses_lock():
    with lock:
        return 1


def uses_big_table():
    return len(big_table) + len(fnames)


def uses_file():
    return open_file.read()


def uses_device_tensor():
    return device_tensor + 1  # noqa: F821 (set in globals() by the test below)


def raises_value_error():
    raise ValueError("the loss diverged\nat step 3")


open_file = open(__file__, encoding="utf-8")


def teardown_module():
    open_file.close()


def test_the_function_travels_with_what_it_uses_from_its_module():
    labels = [entry.label for entry in shipped_values(training_loop, ("no", 1, 8))]
    assert {"global `get_dataloaders`", "global `PetsDataset`", "global `fnames`", "global `label_to_id`",
            "args[0]", "args[1]", "args[2]"} <= set(labels)
    data, header = build_payload(training_loop, ("no", 1, 8))
    loaded_header, body = function_payload.unpack(data)
    assert loaded_header == {**header, "format": function_payload.FORMAT}
    assert header["function"] == "training_loop" and header["args"] == 3
    assert header["python"] == function_payload.local_versions()["python"]
    assert set(header["packages"]) == {"cloudpickle", "torch", "accelerate", "timm"}
    # A fresh interpreter without this test module rebuilds it all by value and calls it.
    probe = ("import pickle, sys; from pets_api import function_payload; "
             "header, body = function_payload.unpack(sys.stdin.buffer.read()); function, args = pickle.loads(body); "
             "print(function(*args))")
    result = subprocess.run([sys.executable, "-c", probe], input=data, capture_output=True, check=True)
    assert result.stdout.decode().strip() == "(0, 'no', 1, 8)"
    import cloudpickle
    assert not cloudpickle.list_registry_pickle_by_value(), "the by-value registration is undone"


@pytest.mark.parametrize("function, args, message", [
    (uses_lock, (), r"global `lock` \(a lock\) cannot be serialized: cannot pickle '_thread.lock' object\. "
                    r"Create it inside the function"),
    (uses_file, (), r"global `open_file` \(an open file \('.*test_payload.py'\)\) cannot be serialized: "
                    r"open files do not travel"),
    (training_loop, ("no", threading.Lock()), r"argument args\[1\] \(a lock\) cannot be serialized"),
    (training_loop, ((i for i in range(3)),), r"argument args\[0\] \(a generator\) cannot be serialized"),
    ("not a function", (), r"needs a function to run, got a str"),
])
def test_what_cannot_travel_is_refused_by_name(function, args, message):
    with pytest.raises(LaunchRefused, match=message):
        build_payload(function, args)


def test_a_device_tensor_is_refused_with_the_tutorials_warning():
    torch = pytest.importorskip("torch")
    # No GPU here: a tensor on the "meta" device stands in for a CUDA one (anything but the CPU is refused).
    globals()["device_tensor"] = torch.zeros(2, device="meta")
    try:
        with pytest.raises(LaunchRefused, match=r"global `device_tensor` is a tensor on meta\. As the Accelerate "
                                                r"tutorial warns, nothing may touch CUDA before launching"):
            build_payload(uses_device_tensor)
        with pytest.raises(LaunchRefused, match=r"args\[0\] is a tensor on meta"):
            build_payload(training_loop, (torch.ones(1, device="meta"),))
        build_payload(training_loop, (torch.ones(1),))  # CPU tensors travel
    finally:
        del globals()["device_tensor"]


def test_a_payload_over_the_configmap_limit_names_the_largest_globals():
    with pytest.raises(LaunchRefused) as refused:
        build_payload(uses_big_table)
    message = str(refused.value)
    assert "serializes to 1.0 MiB, and a ConfigMap holds at most 1.0 MiB" in message
    assert message.index("global `big_table` (1.0 MiB)") < message.index("global `fnames`")
    with pytest.raises(LaunchRefused, match=r"Largest: args\[0\] \(2\.0 KiB\)"):
        build_payload(training_loop, (b"x" * 2048,), limit=2000)


def test_refusals_come_before_anything_is_created():
    created = []

    class NoClient:
        def __getattr__(self, name):
            created.append(name)
            raise AssertionError(f"{name} called")

    with pytest.raises(LaunchRefused):
        cluster_launcher(uses_lock, client=NoClient())
    assert created == []


def test_versions_decide_whether_a_pod_can_load_it():
    here = {"python": "3.11.7", "packages": {"cloudpickle": "3.1.0", "torch": "2.5.0", "accelerate": "1.0.0",
                                             "timm": "1.0.9"}}
    same_minor = {"python": "3.11.2", "packages": {**here["packages"], "cloudpickle": "3.0.0", "torch": "2.4.1"}}
    problems, notes = function_payload.compatibility(same_minor, here)
    assert problems == [] and notes == ["the notebook has torch 2.4.1, this pod torch 2.5.0"]

    other_python = {"python": "3.12.1", "packages": here["packages"]}
    problems, _ = function_payload.compatibility(other_python, here)
    assert problems == ["the function was serialized with Python 3.12.1 in the notebook, but this pod runs Python "
                        "3.11.7: use a trainer image with Python 3.12, or a notebook with Python 3.11"]
    other_cloudpickle = {"python": "3.11.7", "packages": {**here["packages"], "cloudpickle": "2.2.1"}}
    problems, _ = function_payload.compatibility(other_cloudpickle, here)
    assert problems == ["the function was serialized with cloudpickle 2.2.1 in the notebook, but this pod has "
                        "cloudpickle 3.1.0: the major versions must match"]
    problems, _ = function_payload.compatibility(here, {**here, "packages": {**here["packages"], "cloudpickle": None}})
    assert "this pod has no cloudpickle" in problems[0]


def write_payload(tmp_path, monkeypatch, function, args=(), python=None):
    if python is not None:
        real = function_payload.local_versions
        monkeypatch.setattr(function_payload, "local_versions", lambda: {**real(), "python": python})
    data, _ = build_payload(function, args)
    path = tmp_path / FUNCTION_KEY
    path.write_bytes(data)
    return path


def run_module(args, tmp_path, **env):
    import os
    termination = tmp_path / "termination-log"
    termination.write_text("")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TERMINATION_MESSAGE_PATH": str(termination), **env}), termination


def test_pets_train_refuses_an_incompatible_payload_before_launching(tmp_path, monkeypatch):
    path = write_payload(tmp_path, monkeypatch, training_loop, python="3.99.0")
    result, termination = run_module(["-m", "pets_trainer.launch"], tmp_path, FUNCTION_FILE=str(path))
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    here = platform.python_version()
    assert line == (f"error: IncompatibleFunction: the function was serialized with Python 3.99.0 in the notebook, "
                    f"but this pod runs Python {here}: use a trainer image with Python 3.99, or a notebook with "
                    f"Python {here.rsplit('.', 1)[0]}")
    assert termination.read_text() == line.removeprefix("error: ")
    assert "accelerate" not in result.stdout + result.stderr.replace(line, "")


def test_pets_train_launches_the_function_module(tmp_path, monkeypatch):
    path = write_payload(tmp_path, monkeypatch, training_loop)
    result, _ = run_module(["-m", "pets_trainer.launch", "--dry-run"], tmp_path, FUNCTION_FILE=str(path),
                           NUM_MACHINES="2", MACHINE_RANK="1", MASTER_ADDR="pets-0.pets-workers.ml.svc")
    command = json.loads(result.stdout)["command"]
    assert command[-4:] == ["-m", "pets_trainer.function", "--payload", str(path)]
    assert command[command.index("--machine_rank") + 1] == "1"


def test_the_function_module_runs_it_and_reports_a_raise(tmp_path, monkeypatch):
    path = write_payload(tmp_path, monkeypatch, raises_value_error)
    result, termination = run_module(["-m", "pets_trainer.function", "--payload", str(path)], tmp_path)
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: ValueError: the loss diverged at step 3"
    assert termination.read_text() == "ValueError: the loss diverged at step 3"

    path = write_payload(tmp_path, monkeypatch, training_loop, ("no", 1, 8))
    result, _ = run_module(["-m", "pets_trainer.function", "--payload", str(path)], tmp_path)
    assert result.returncode == 0, result.stderr

    (tmp_path / "junk").write_bytes(b"not a payload")
    result, _ = run_module(["-m", "pets_trainer.function", "--payload", str(tmp_path / "junk")], tmp_path)
    assert result.returncode == 2 and "not a pets function payload" in result.stderr


def test_paths_under_no_mount_are_named():
    mounted = path_warnings(training_loop, (), ["/dev/shm", DATA_DIR])
    assert mounted == []
    unmounted = path_warnings(training_loop, (), ["/dev/shm", "/data"])
    assert unmounted == [f"global `fnames` holds paths under no volume mounted in the pods, e.g. "
                         f"'{DATA_DIR}/beagle_1.jpg' (3 paths): mount their directory where the notebook has it, "
                         f"data={{..., 'mountPath': '{DATA_DIR}'}}"]
    relative = path_warnings(uses_relative_names, (), ["/dev/shm"])
    assert relative == ["global `relative_names` holds relative paths, e.g. '../../images/pug_1.jpg' (2 paths): "
                        "the pods' working directory is not the notebook's; use absolute paths under data's mountPath"]
    assert path_warnings(training_loop, ("/usr/lib/x", "/dev/null"), [DATA_DIR]) == []


class Recorder:
    """Stands in for PetsTrainingJobClient: records what cluster_launcher asks of it."""

    def __init__(self):
        self.calls = []

    def submit(self, name, namespace=None, replace=False, **spec):
        self.calls.append(("submit", name, namespace, replace, spec))
        recorder = self

        class Job:
            def __init__(self):
                self.name, self.namespace = name, "ml"

            def get(self):
                return {"metadata": {"name": name, "namespace": "ml", "uid": "u-1"}}

            def delete(self):
                recorder.calls.append(("delete", name))

            def wait(self, **kwargs):
                recorder.calls.append(("wait", kwargs))

        return Job()

    def create_config_map(self, body):
        self.calls.append(("create_config_map", body))


def test_the_launch_submits_the_job_then_its_configmap(monkeypatch):
    client = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no path warning: fnames lie under the mount
        job = cluster_launcher(training_loop, ("no", 1, 8), num_nodes=2, data={"hostPath": DATA_DIR, "mountPath": DATA_DIR},
                               env={"OMP_NUM_THREADS": 1}, wait=False, client=client, backoff_limit=1)
    assert job.name == "training-loop"
    (_, name, namespace, replace, spec), (_, body) = client.calls
    assert (name, namespace, replace) == ("training-loop", None, False)
    assert spec == {"num_nodes": 2, "processes_per_node": 1, "mixed_precision": "no", "backoff_limit": 1,
                    "function": {"configMap": "training-loop-function", "key": FUNCTION_KEY},
                    "data": {"hostPath": DATA_DIR, "mountPath": DATA_DIR},
                    "env": [{"name": "OMP_NUM_THREADS", "value": "1"}]}
    assert body["metadata"]["name"] == "training-loop-function"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert body["immutable"] is True
    with pytest.warns(UnmountedPathWarning, match="global `fnames` holds paths under no volume"):
        cluster_launcher(training_loop, wait=False, client=Recorder())


def test_a_failed_configmap_takes_the_job_back():
    class Failing(Recorder):
        def create_config_map(self, body):
            raise RuntimeError("refused")

    client = Failing()
    with pytest.raises(RuntimeError, match="refused"), pytest.warns(UnmountedPathWarning):
        cluster_launcher(training_loop, wait=False, client=client, data={"synthetic": {}})
    assert client.calls[-1] == ("delete", "training-loop")


def test_bodies_and_names():
    import base64

    assert default_job_name(training_loop) == "training-loop"
    assert default_job_name(lambda: 0) == "lambda"
    job = {"metadata": {"name": "pets", "namespace": "ml", "uid": "u-1"}}
    body = config_map_body(job, "pets-function", b"\x00\xffpayload", {"function": "training_loop"})
    assert base64.b64decode(body["binaryData"][FUNCTION_KEY]) == b"\x00\xffpayload"
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "training.pets.dev/v1alpha1",
                                                    "kind": "PetsTrainingJob", "name": "pets", "uid": "u-1",
                                                    "controller": True, "blockOwnerDeletion": True}]
    spec = launch_spec(1, 2, None, "img:1", {"limits": {"cpu": "1"}}, "no", [{"name": "A", "value": "1"}], "cm", {})
    assert spec["processes_per_node"] == 2 and spec["image"] == "img:1" and spec["env"] == [{"name": "A", "value": "1"}]
    assert "data" not in spec
