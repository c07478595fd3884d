"""The pod contract end to end without a cluster: the env the operator writes for a spec, read
back by `pets-train`'s own option resolution, gives the trainer exactly that spec."""
from __future__ import annotations

from pathlib import Path

import pytest

from pets_api import contract, packaged
from pets_operator import builders
from pets_operator.spec import with_defaults
from pets_trainer.config import TrainConfig
from pets_trainer.launch import (
    LAUNCH_OPTIONS,
    TRAIN_OPTIONS,
    build_parser,
    make_plan,
    make_train_config,
    resolve_options,
)

# Spec fields that shape the pods but are no trainer option (each is tested in test_builders).
NOT_IN_ENV = {
    "image", "imagePullPolicy", "resources", "nodeSelector", "tolerations", "serviceAccountName", "backoffLimit",
    "activeDeadlineSeconds", "ttlSecondsAfterFinished", "env",
    "data.persistentVolumeClaim", "data.hostPath", "data.path",  # -> the data volume and DATA_DIR
    "checkpoint.persistentVolumeClaim", "checkpoint.hostPath", "checkpoint.path",  # -> CHECKPOINT_DIR
    "data.mountPath",  # -> the data volume's mount and DATA_DIR
    "function.configMap", "function.key",  # -> the function volume and FUNCTION_FILE
    "suspend",  # -> whether the group's pods exist at all
    "queueName", "priorityClassName",  # -> the pods' Kueue labels, priorityClassName
    "gangScheduling.scheduler", "gangScheduling.scheduleTimeoutSeconds",  # -> the PodGroup, schedulerName
    "data.download.url", "data.download.sha256", "data.download.md5", "data.oxfordPets",  # -> DATA_URL, DATA_CHECKSUM
    "cache.persistentVolumeClaim", "cache.hostPath", "cache.sizeLimit", "cache.path",  # -> the cache volume, HF_HOME
    "hub.offline",  # -> HF_HUB_OFFLINE (1; 0 where Hub weights are fetched, over the image's 1)
    "output.persistentVolumeClaim", "output.hostPath", "output.path",  # -> the output volume, OUTPUT_DIR
    # -> TENSORBOARD_LOG_DIR and the tensorboard volume of pod 0
    "tracking.tensorboard.enabled", "tracking.tensorboard.logDir", "tracking.tensorboard.persistentVolumeClaim",
    "tracking.tensorboard.hostPath",
}

SPECS = {
    "minimal": {"data": {"synthetic": {}}},
    "every field set": {
        "numNodes": 3, "processesPerNode": 2, "masterPort": 29555, "model": "resnet18d", "pretrained": True,
        "pretrainedWeights": "/weights/r18.safetensors", "mixedPrecision": "bf16", "seed": 9, "batchSize": 16,
        "epochs": 7, "maxLearningRate": 0.0125, "numWorkers": 2, "imageSize": 128,
        "data": {"synthetic": {"classes": 5, "imagesPerClass": 11, "imageSize": 48}, "path": "gen"},
        "checkpoint": {"hostPath": "/srv/ckpt", "path": "/state", "resumeFrom": "AnyJob"},
        "function": {"configMap": "pets-function"},
        "hub": {"endpoint": "http://127.0.0.1:9/hub", "offline": True, "tokenSecret": {"name": "hf", "key": "token"}},
        "cache": {"persistentVolumeClaim": {"claimName": "cache"}, "path": "/cache"},
        "output": {"hostPath": "/srv/out", "path": "/out"},
        "tracking": {"logEverySteps": 5, "tensorboard": {"logDir": "/out/tb"},
                     "mlflow": {"trackingUri": "https://mlflow.example", "experimentName": "pets-e", "runName": "r1",
                                "tokenSecret": {"name": "mlflow", "key": "token"}}},
    },
    "downloaded data, Hub weights": {
        "numNodes": 2, "pretrained": True, "data": {"download": {"url": "https://example.test/p.tgz", "md5": "A" * 32},
                                                    "path": "images"},
        "hub": {"endpoint": "http://127.0.0.1:9/hub"}, "output": {}, "cache": {"sizeLimit": "20Gi"},
        "tracking": {"tensorboard": {}, "mlflow": {"trackingUri": "http://mlflow:5000",
                                                   "usernameSecret": {"name": "mlflow", "key": "user"},
                                                   "passwordSecret": {"name": "mlflow", "key": "password"}}},
    },
    "TensorBoard on a volume of its own": {
        "data": {"synthetic": {}}, "tracking": {"tensorboard": {"hostPath": "/srv/tb", "logDir": "/tb"}},
    },
    "TensorBoard off": {"data": {"synthetic": {}}, "output": {},
                        "tracking": {"tensorboard": {"enabled": False}, "mlflow": {"trackingUri": "file:///output/m"}}},
    "the Oxford-IIIT Pets shorthand": {"data": {"oxfordPets": {}, "path": "images"}},
    "volume data": {"numNodes": 2, "data": {"persistentVolumeClaim": {"claimName": "pets"}, "path": "images"},
                    "checkpoint": {}},
    "shipped function": {"numNodes": 2, "function": {"configMap": "fn", "key": "f.pkl"},
                         "data": {"hostPath": "/home/me/pets", "mountPath": "/home/me/pets", "path": "images"}},
    "shipped function without data": {"numNodes": 2, "function": {"configMap": "fn"}},
}


SPEC_PATHS = {entry.spec for entry in contract.ENTRIES if entry.kind == contract.SPEC}


def leaf_paths(schema, prefix=""):
    for key, child in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        if child.get("type") == "object" and child.get("properties") and path not in NOT_IN_ENV | SPEC_PATHS:
            yield from leaf_paths(child, path + ".")
        else:
            yield path


def trainer_view(env: list[dict[str, str]]):
    """What pets-train makes of a pod's env: its launch plan and training config."""
    environ = {item["name"]: item["value"] for item in env if "value" in item}  # not a Secret's (HF_TOKEN)
    values = resolve_options(TRAIN_OPTIONS + LAUNCH_OPTIONS, build_parser().parse_args([]), environ)
    return make_plan(values), make_train_config(values)


def parent_absent(spec, path: str) -> bool:
    """A field under an object the spec leaves out (checkpoint.resumeFrom without a checkpoint)."""
    parent = path.rpartition(".")[0]
    return bool(parent) and contract.get_path(spec, parent) is None


def seen_by_trainer(option: str, plan, config):
    if option.startswith("synthetic_"):
        return (plan.synthetic or {}).get(option)
    return getattr(config, option) if hasattr(config, option) else getattr(plan, option)


@pytest.mark.parametrize("name", SPECS)
def test_the_trainer_sees_exactly_the_spec(name):
    spec = with_defaults(SPECS[name], "img")
    for index in range(spec["numNodes"]):
        check_pod(spec, index)


def check_pod(spec, index):
    env = builders.pod_env("pets", "ml", index, spec, uid="uid-1")
    plan, config = trainer_view(env)
    by_name = {item["name"]: item for item in env}
    for entry in contract.ENTRIES:
        if entry.kind == contract.SPEC and entry.option is None:  # read by a library (huggingface_hub) from the env
            expected = contract.get_path(spec, entry.spec)
            if entry.type == "secret":
                assert by_name.get(entry.env, {}).get("valueFrom") == (
                    None if expected is None else {"secretKeyRef": dict(expected)}), entry.spec
            else:
                assert by_name.get(entry.env, {}).get("value") == (
                    None if expected is None else contract.render(expected)), entry.spec
        elif entry.kind == contract.SPEC:
            expected = contract.get_path(spec, entry.spec)
            if expected is None and parent_absent(spec, entry.spec) and hasattr(config, entry.option):
                expected = contract.option_defaults().get(entry.option)  # unset: the trainer's default is the CRD's
            assert seen_by_trainer(entry.option, plan, config) == expected, entry.spec
    assert (config.job_uid, config.job_name, config.job_namespace) == ("uid-1", "pets", "ml")
    assert plan.machine_rank == index
    assert plan.num_processes == spec["numNodes"] * spec["processesPerNode"]
    if spec["numNodes"] > 1:
        assert plan.main_process_ip == "pets-0.pets-workers.ml.svc"
    assert config.data_dir == builders.data_dir(spec)
    assert plan.function_file == builders.function_file(spec)
    assert config.checkpoint_dir == (spec.get("checkpoint") or {}).get("path")
    assert config.output_dir == (spec.get("output") or {}).get("path")
    assert config.tensorboard_dir == builders.tensorboard_dir(spec)
    download = contract.data_download(spec)
    assert (plan.downloads.data_url, plan.downloads.data_checksum) == (download or (None, None))
    assert plan.downloads.data_archive_dir == builders.data_archive_dir(spec)
    if download:
        assert config.data_dir.startswith(plan.downloads.data_archive_dir + "/")
    hub = spec.get("pretrained") and not spec.get("pretrainedWeights") and not spec.get("function")
    assert plan.downloads.hub_model == (spec["model"] if hub else None)
    offline = {item["name"]: item.get("value") for item in env}.get("HF_HUB_OFFLINE")
    assert offline == ("1" if (spec.get("hub") or {}).get("offline") else "0" if hub else None)


def test_defaults_are_the_crds_on_both_sides():
    """A spec with nothing set, and pets-train run by hand with nothing set, train the same way."""
    spec = with_defaults({"data": {"synthetic": {}}}, "img")
    schema = contract.spec_schema()
    for entry in contract.ENTRIES:
        if entry.kind == contract.SPEC:
            node = schema
            for key in entry.spec.split("."):
                node = node["properties"][key]
            if "default" in node:
                if not parent_absent(spec, entry.spec):
                    assert contract.get_path(spec, entry.spec) == node["default"], entry.spec
                if entry.option is not None:  # else read by a library from the env, which the spec's default fills
                    assert contract.option_defaults()[entry.option] == node["default"], entry.spec
    by_hand = make_train_config({})
    assert by_hand == TrainConfig()
    for option, default in contract.option_defaults().items():
        if hasattr(by_hand, option):
            assert getattr(by_hand, option) == default, option
    plan = make_plan({})
    assert (plan.num_machines, plan.nproc_per_node, plan.main_process_port) == (
        spec["numNodes"], spec["processesPerNode"], spec["masterPort"])


def test_every_spec_field_is_in_the_contract_or_named_as_not_reaching_the_env():
    in_contract = {entry.spec for entry in contract.ENTRIES if entry.kind == contract.SPEC}
    fields = set(leaf_paths(contract.spec_schema()))
    assert fields - in_contract - NOT_IN_ENV == set(), "a new spec field must be added to contract.ENTRIES"
    assert in_contract <= fields and NOT_IN_ENV <= fields


def test_entry_types_match_the_crd():
    crd_type = {"int": "integer", "float": "number", "bool": "boolean", "str": "string", "choice": "string",
                "secret": "object"}
    for entry in contract.ENTRIES:
        if entry.kind == contract.SPEC:
            node = contract.spec_schema()
            for key in entry.spec.split("."):
                node = node["properties"][key]
            assert node["type"] == crd_type[entry.type], entry.spec


def test_names_are_unique_and_the_reserved_set_is_what_the_operator_writes():
    assert len({e.env for e in contract.ENTRIES}) == len(contract.ENTRIES)
    options = [e.option for e in contract.ENTRIES if e.option]
    assert len(set(options)) == len(options)
    written = set()
    for name in ("every field set", "downloaded data, Hub weights"):  # synthetic data, downloaded data
        full = with_defaults({**SPECS[name]}, "img")
        written |= {item["name"] for item in builders.pod_env("pets", "ml", 0, full, uid="uid-1")}
    assert written == contract.RESERVED_ENV
    # Every pets-train option is a contract entry: the parser has no name of its own.
    assert {o.dest for o in TRAIN_OPTIONS + LAUNCH_OPTIONS} == set(options)


def test_spec_env_is_appended_after_the_contract(spec):
    spec = {**spec, "env": [{"name": "IMAGE_CACHE_DIR", "value": "/cache"}]}
    env = builders.pod_env("pets", "ml", 0, spec)
    assert env[-1] == {"name": "IMAGE_CACHE_DIR", "value": "/cache"}
    _, config = trainer_view(env)
    assert config.image_cache_dir == "/cache"


def test_choices_come_from_the_crd_enum():
    schema = contract.spec_schema()
    assert contract.MIXED_PRECISION_CHOICES == tuple(schema["properties"]["mixedPrecision"]["enum"])
    with pytest.raises(ValueError, match="must be one of no, fp16, bf16"):
        contract.parser_for(contract.BY_ENV["MIXED_PRECISION"])("fp8")


def test_the_packaged_crd_is_the_repository_crd():
    repo_root = Path(__file__).resolve().parents[2]
    assert packaged.crd_text() == (repo_root / "manifests" / "crd.yaml").read_text()
    assert packaged.sample_job_text() == (repo_root / "manifests" / "job.yaml").read_text()


def test_the_architecture_doc_shows_the_current_table():
    import subprocess
    import sys

    repo_root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "hack/generated_docs.py", "--check"], cwd=repo_root,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_readme_states_the_crds_defaults():
    """The README's spec table repeats defaults for readers; they must be the CRD's."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### spec"):readme.index("### status")]
    properties = contract.spec_schema()["properties"]
    checked = 0
    for line in section.splitlines():
        match = re.match(r"^\| `(\w+)`[^|]* \| ([^|]+) \|", line)
        if match and "default" in properties.get(match.group(1), {}):
            stated = match.group(2).strip().strip("`")
            assert stated == contract.render(properties[match.group(1)]["default"]), line
            checked += 1
    assert checked >= 12
