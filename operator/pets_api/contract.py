"""The pod contract, written once: spec field -> environment variable -> `pets-train` option.

The operator writes it (`builders.pod_env` loops over `ENTRIES`), `pets-train` reads it
(`pets_trainer.launch` builds its option parser from `ENTRIES`), and the defaults of every
spec-backed option come from the CRD (`manifests/crd.yaml`, packaged with this module), so a
value defaults the same whether the API server fills it in or `pets-train` runs by hand.

Three kinds of entry:
- spec: the value of one spec field (dotted path), default from the CRD;
- derived: computed by the operator for each pod (addresses, rank, directories);
- trainer: a `pets-train` option that no spec field sets; `spec.env` may set it, and its
  default is the trainer's own (`pets_trainer.config.TrainConfig`).

Standard library and PyYAML only: the trainer image imports it without kopf or the
Kubernetes client.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import packaged

SPEC, DERIVED, TRAINER = "spec", "derived", "trainer"
# What the pod's container runs: the trainer image's console script (pyproject's [project.scripts]).
TRAINER_COMMAND = ("pets-train",)
PIN_MEMORY_CHOICES = ("auto", "true", "false")


@dataclass(frozen=True)
class Entry:
    env: str
    option: str | None  # the pets-train option's dest (flag: --dest-with-dashes); None: not an option
    kind: str  # SPEC, DERIVED or TRAINER
    type: str  # str, int, float, bool, choice
    help: str
    spec: str | None = None  # dotted path under .spec, for SPEC entries
    choices: tuple[str, ...] = ()  # for SPEC entries: the CRD's enum (`choices_of`)
    aliases: tuple[str, ...] = ()  # further env names pets-train reads, in order, when `env` is unset

    @property
    def flag(self) -> str | None:
        return None if self.option is None else "--" + self.option.replace("_", "-")

    @property
    def envs(self) -> tuple[str, ...]:
        return (self.env, *self.aliases)


def _spec(path: str, env: str, option: str, type_: str, help_: str) -> Entry:
    return Entry(env, option, SPEC, type_, help_, spec=path)


def _derived(env: str, option: str | None, type_: str, help_: str, aliases: tuple[str, ...] = ()) -> Entry:
    return Entry(env, option, DERIVED, type_, help_, aliases=aliases)


def _spec_env(path: str, env: str, type_: str, help_: str) -> Entry:
    """A spec field that reaches the pod as a variable read by a library (huggingface_hub, MLflow), not an option.

    Type `secret`: the field names a Secret key (`{name, key}`), and the variable comes from it
    (`secret_env`), never as a value."""
    return Entry(env, None, SPEC, type_, help_, spec=path)


def _trainer(env: str, option: str, type_: str, help_: str, choices: tuple[str, ...] = ()) -> Entry:
    return Entry(env, option, TRAINER, type_, help_, choices=choices)


ENTRIES: tuple[Entry, ...] = (
    # The rendezvous: one pod per node, `processesPerNode` processes in each.
    _spec("numNodes", "NUM_MACHINES", "num_machines", "int", "nodes (pods) in the group"),
    _spec("processesPerNode", "NPROC_PER_NODE", "nproc_per_node", "int", "training processes per node, one per GPU"),
    _spec("masterPort", "MASTER_PORT", "main_process_port", "int", "rendezvous port on node 0"),
    _derived("MASTER_ADDR", "main_process_ip", "str", "address of node 0 (required when NUM_MACHINES > 1)"),
    # JOB_COMPLETION_INDEX is what an Indexed Job sets; pets-train accepts either name.
    _derived("MACHINE_RANK", "machine_rank", "int", "this node's index", aliases=("JOB_COMPLETION_INDEX",)),
    _derived("JOB_COMPLETION_INDEX", None, "int", "this node's index, as an Indexed Job names it"),
    _derived("WORLD_SIZE", "world_size", "int", "checked against NUM_MACHINES x NPROC_PER_NODE when set"),
    # The training recipe.
    _spec("model", "MODEL", "model", "str", "timm model name"),
    _spec("pretrained", "PRETRAINED", "pretrained", "bool", "load pretrained weights from --pretrained-weights"),
    _spec("pretrainedWeights", "PRETRAINED_WEIGHTS", "pretrained_weights", "str",
          "local weights file (safetensors or torch)"),
    _spec("mixedPrecision", "MIXED_PRECISION", "mixed_precision", "choice",
          "falls back to no where the device lacks it (on a CPU: bf16 with AVX512-BF16 or AMX only)"),  # choices: the CRD's enum
    _spec("seed", "SEED", "seed", "int", "seed of the split, the model init and the synthetic data"),
    _spec("batchSize", "BATCH_SIZE", "batch_size", "int", "per-process training batch size"),
    _spec("epochs", "EPOCHS", "epochs", "int", "epochs"),
    _spec("maxLearningRate", "MAX_LR", "max_lr", "float", "OneCycleLR max learning rate"),
    _spec("numWorkers", "NUM_WORKERS", "num_workers", "int", "data loader workers per process"),
    _spec("imageSize", "IMAGE_SIZE", "image_size", "int", "side of the square model input"),
    # Where data and state are: the data volume's mount plus data.path; checkpoint.path.
    _derived("DATA_DIR", "data_dir", "str", "directory of <breed>_<n>.jpg images"),
    _derived("CHECKPOINT_DIR", "checkpoint_dir", "str", "save state after each epoch here and resume from it"),
    # Whose checkpoint it is: each checkpoint records the job that wrote it, and a job resumes only from
    # its own unless checkpoint.resumeFrom is AnyJob (pets-train run by hand has no JOB_UID).
    _derived("JOB_UID", "job_uid", "str", "the job's metadata.uid, recorded in its checkpoints"),
    _derived("JOB_NAME", "job_name", "str", "the job's name, recorded in its checkpoints"),
    _derived("JOB_NAMESPACE", "job_namespace", "str", "the job's namespace, recorded in its checkpoints"),
    _spec("checkpoint.resumeFrom", "RESUME_FROM", "resume_from", "choice",
          "resume only from a checkpoint this job (JOB_UID) wrote, or also take over another's"),
    # Downloads before the training processes start (pets-train, once per node; once per volume when pods
    # share spec.cache): the data archive (data.download, data.oxfordPets) and the Hub weights (pretrained
    # without pretrainedWeights).
    _derived("DATA_URL", "data_url", "str",
             "download this archive into DATA_ARCHIVE_DIR first (data.download.url; data.oxfordPets: "
             "the Oxford-IIIT Pets images)"),
    _derived("DATA_CHECKSUM", "data_checksum", "str", "sha256:<hex> or md5:<hex> of DATA_URL's archive, verified "
             "before it is unpacked"),
    _derived("DATA_ARCHIVE_DIR", "data_archive_dir", "str",
             "unpack DATA_URL's archive here, once (a marker records it); DATA_DIR lies inside it"),
    _derived("HF_HOME", None, "str", "the Hugging Face cache, on the cache volume (spec.cache): Hub weights "
             "are downloaded there once"),
    _spec_env("hub.endpoint", "HF_ENDPOINT", "str", "a Hugging Face Hub mirror"),
    # The trainer image sets HF_HUB_OFFLINE=1: a pod that fetches Hub weights gets 0 unless hub.offline.
    _derived("HF_HUB_OFFLINE", None, "str", "1: download nothing, the weights must be in the cache (hub.offline); "
             "0 for a pod that fetches Hub weights; unset otherwise (the image's 1)"),
    _spec_env("hub.tokenSecret", "HF_TOKEN", "secret", "a Hub token, from a Secret key (never printed)"),
    _derived("OUTPUT_DIR", "output_dir", "str",
             "save the trained model here (model.safetensors, config.json, labels.json)"),
    # A shipped function (spec.function: its ConfigMap, mounted) runs instead of the built-in recipe.
    _derived("FUNCTION_FILE", "function_file", "str",
             "run this function payload (pets_client.launcher.cluster_launcher) instead of the built-in recipe"),
    _spec("data.synthetic.classes", "SYNTHETIC_CLASSES", "synthetic_classes", "int",
          "generate a synthetic set of this many classes into the data dir"),
    _spec("data.synthetic.imagesPerClass", "SYNTHETIC_IMAGES_PER_CLASS", "synthetic_images_per_class", "int",
          "synthetic images per class"),
    _spec("data.synthetic.imageSize", "SYNTHETIC_IMAGE_SIZE", "synthetic_image_size", "int",
          "side of the synthetic JPEGs"),
    # Experiment tracking (spec.tracking): Accelerate's trackers, in the main process (pets_trainer.tracking).
    _derived("TENSORBOARD_LOG_DIR", "tensorboard_dir", "str",
             "write TensorBoard event files here (a directory per run below it), from the main process"),
    _spec("tracking.logEverySteps", "LOG_EVERY_STEPS", "log_every_steps", "int",
          "log the batch loss and the learning rate to the trackers every this many steps"),
    _spec_env("tracking.mlflow.trackingUri", "MLFLOW_TRACKING_URI", "str",
              "the MLflow tracking server (MLflow reads it); set: the recipe logs an MLflow run"),
    _spec_env("tracking.mlflow.experimentName", "MLFLOW_EXPERIMENT_NAME", "str",
              "the MLflow experiment (MLflow and Accelerate read it)"),
    _spec_env("tracking.mlflow.runName", "MLFLOW_RUN_NAME", "str",
              "the MLflow run's name (pets_trainer.tracking reads it; default JOB_NAME)"),
    _spec_env("tracking.mlflow.usernameSecret", "MLFLOW_TRACKING_USERNAME", "secret",
              "the tracking server's user name, from a Secret key (never printed)"),
    _spec_env("tracking.mlflow.passwordSecret", "MLFLOW_TRACKING_PASSWORD", "secret",
              "the tracking server's password, from a Secret key (never printed)"),
    _spec_env("tracking.mlflow.tokenSecret", "MLFLOW_TRACKING_TOKEN", "secret",
              "a bearer token for the tracking server, from a Secret key (never printed)"),
    # Metric lines must reach the pod log the moment they are printed.
    _derived("PYTHONUNBUFFERED", None, "str", "always 1"),
    # The container's root filesystem is read-only: the home directory (and so the caches under it) is an
    # emptyDir, as is /tmp (no variable needed).
    _derived("HOME", None, "str", "the home directory, on an emptyDir"),
    _derived("XDG_CACHE_HOME", None, "str", "caches (Hugging Face's, torch hub's), under HOME"),
    # Why a run failed, for the pod's status (terminated.message) and so the job's.
    _derived("TERMINATION_MESSAGE_PATH", "termination_message_path", "str",
             "write a failed run's one-line error into this file, when it exists (the container's "
             "terminationMessagePath, which Kubernetes creates)"),
    # pets-train options that no spec field sets (spec.env may).
    _trainer("EVAL_BATCH_SIZE", "eval_batch_size", "int", "per-process eval batch size (default: 2 x batch size)"),
    _trainer("VERIFY_IMAGES", "verify_images", "bool", "decode every image once up front and skip unreadable ones"),
    _trainer("FORCE_CPU", "cpu", "bool", "train on the CPU even if a GPU is present"),
    _trainer("OMP_NUM_THREADS", "cpu_threads_per_process", "int", "torch threads per process (default: CPUs / nproc)"),
    _trainer("DRAFT_DECODE", "draft_decode", "bool", "speed: decode JPEGs at the needed size"),
    _trainer("IMAGE_CACHE", "image_cache", "bool", "speed: decode each image once per run, not once per epoch"),
    _trainer("IMAGE_CACHE_DIR", "image_cache_dir", "str",
             "keep the decoded images here (kept after the run); default: a temporary directory"),
    _trainer("PERSISTENT_WORKERS", "persistent_workers", "bool", "speed: keep loader workers between epochs"),
    _trainer("LOW_PRIORITY_WORKERS", "low_priority_workers", "bool",
             "speed: loader workers at the lowest CPU priority (nice 19), never in the training threads' way"),
    _trainer("PREFETCH_FACTOR", "prefetch_factor", "int", "speed: batches prefetched per loader worker"),
    _trainer("CHANNELS_LAST", "channels_last", "bool", "speed: channels_last memory format"),
    _trainer("KEEP_FREED_MEMORY", "keep_freed_memory", "bool",
             "speed: malloc keeps freed memory for the next batch instead of unmapping it"),
    _trainer("FROZEN_ENCODER_NO_GRAD", "frozen_encoder_no_grad", "bool", "speed: run the frozen encoder under no_grad"),
    _trainer("PIN_MEMORY", "pin_memory", "choice", "speed: pinned loader memory; auto = on GPU only",
             choices=PIN_MEMORY_CHOICES),
)

BY_ENV: dict[str, Entry] = {entry.env: entry for entry in ENTRIES}
BY_OPTION: dict[str, Entry] = {entry.option: entry for entry in ENTRIES if entry.option is not None}
# Every variable the operator writes; spec.env may not set them (set the spec field instead).
RESERVED_ENV = frozenset(entry.env for entry in ENTRIES if entry.kind in (SPEC, DERIVED))


# --- defaults: the CRD's ----------------------------------------------------------------------------


def spec_schema() -> dict[str, Any]:
    """The CRD's schema of `.spec` (a fresh copy)."""
    crd = packaged.crd()
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def apply_schema_defaults(obj: Any, schema: Mapping[str, Any]) -> None:
    """Fill in `default`s (in place) under objects that are present, as the API server does."""
    if isinstance(obj, dict):
        properties = schema.get("properties") or {}
        for key, child_schema in properties.items():
            if key not in obj and "default" in child_schema:
                obj[key] = copy.deepcopy(child_schema["default"])
            if key in obj:
                apply_schema_defaults(obj[key], child_schema)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key, value in obj.items():
                if key not in properties:
                    apply_schema_defaults(value, additional)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_schema_defaults(item, schema["items"])


def _schema_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    for key in path.split("."):
        schema = schema["properties"][key]
    return schema


@functools.cache
def _option_defaults() -> tuple[tuple[str, Any], ...]:
    schema = spec_schema()
    return tuple((entry.option, _schema_at(schema, entry.spec)["default"])
                 for entry in ENTRIES if entry.kind == SPEC and entry.option is not None
                 and "default" in _schema_at(schema, entry.spec))


def schema_default(path: str) -> Any:
    """The CRD's default of the spec field at `path` (dotted, e.g. `data.mountPath`)."""
    return _schema_at(spec_schema(), path)["default"]


def option_defaults() -> dict[str, Any]:
    """pets-train option -> the CRD's default of its spec field (only fields that have one)."""
    return dict(_option_defaults())


@functools.cache
def choices_of(entry: Entry) -> tuple[str, ...]:
    """The allowed values of a choice entry: the CRD's enum for a spec field."""
    if entry.kind == SPEC:
        return tuple(str(value) for value in _schema_at(spec_schema(), entry.spec).get("enum", ()))
    return entry.choices


MIXED_PRECISION_CHOICES = choices_of(BY_OPTION["mixed_precision"])
RESUME_FROM_CHOICES = choices_of(BY_OPTION["resume_from"])  # SameJob, AnyJob


# --- data sets the spec names by shorthand ----------------------------------------------------------

# data.oxfordPets: the Oxford-IIIT Pets images, as torchvision's OxfordIIITPet downloads them
# (torchvision/datasets/oxford_iiit_pet.py, `_RESOURCES`): the archive holds `images/<breed>_<n>.jpg`.
OXFORD_PETS_URL = "https://www.robots.ox.ac.uk/~vgg/data/pets/data/images.tar.gz"
OXFORD_PETS_MD5 = "5c4f3ee8e5d25df40f4fd59a7f44e54c"


def data_download(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(url, "sha256:<hex>" or "md5:<hex>") of the archive the spec's data downloads, or None."""
    data = spec.get("data") or {}
    if data.get("oxfordPets") is not None:
        return OXFORD_PETS_URL, f"md5:{OXFORD_PETS_MD5}"
    download = data.get("download")
    if download is None:
        return None
    algorithm = "sha256" if download.get("sha256") else "md5"
    return download["url"], f"{algorithm}:{str(download[algorithm]).lower()}"


# --- the pod's environment ----------------------------------------------------------------------------


def get_path(spec: Mapping[str, Any], path: str) -> Any:
    node: Any = spec
    for key in path.split("."):
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    return node


def render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def environment(spec: Mapping[str, Any], derived: Mapping[str, Any]) -> dict[str, str]:
    """SPEC and DERIVED entries, in table order, as env values; unset (None) values are left out.

    `spec` has the CRD's defaults applied; `derived` gives a value (or None) for every DERIVED entry.
    """
    expected = {entry.env for entry in ENTRIES if entry.kind == DERIVED}
    if set(derived) != expected:
        raise ValueError(f"derived values must be given for exactly {sorted(expected)}, got {sorted(derived)}")
    values: dict[str, str] = {}
    for entry in ENTRIES:
        if entry.kind == TRAINER or entry.type == "secret":
            continue
        value = get_path(spec, entry.spec) if entry.kind == SPEC else derived[entry.env]
        if value is not None:
            values[entry.env] = render(value)
    return values


def secret_env(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `secret` entries the spec sets, as env items that take their value from the Secret key."""
    items = []
    for entry in ENTRIES:
        ref = get_path(spec, entry.spec) if entry.type == "secret" else None
        if ref is not None:
            items.append({"name": entry.env,
                          "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}})
    return items


# --- reading it back (pets-train) --------------------------------------------------------------------


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("must be an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("must be a number") from None


def parser_for(entry: Entry) -> Callable[[str], Any]:
    if entry.type == "choice":
        allowed = choices_of(entry)

        def parse_choice(text: str) -> str:
            if text not in allowed:
                raise ValueError(f"must be one of {', '.join(allowed)}")
            return text

        return parse_choice
    return {"str": str, "int": parse_int, "float": parse_float, "bool": parse_bool}[entry.type]


def options(entries: Iterable[Entry] = ENTRIES) -> tuple[Entry, ...]:
    """The entries pets-train reads as options, in table order."""
    return tuple(entry for entry in entries if entry.option is not None)
