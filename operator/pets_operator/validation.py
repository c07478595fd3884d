"""What the CRD schema cannot say about a PetsTrainingJob: the operator's own checks (pure).

`spec_problems` returns one readable sentence per problem; the handler puts them in
`status.message` and a Warning Event and marks the job Failed.
"""
from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pets_api.names import is_dns1123_subdomain, job_name_problems
from pets_api.quantities import parse_quantity

from .spec import FUNCTION_MOUNT_PATH, SCRATCH_MOUNT_PATHS, data_mount_path

MAX_WORLD_SIZE = 1024  # numNodes x processesPerNode: beyond this a single rendezvous is not sensible
DATA_SOURCES = ("persistentVolumeClaim", "hostPath", "synthetic", "download", "oxfordPets")
# Where the pods mount other things (/dev/shm, the function's ConfigMap): data.mountPath stays out of them.
RESERVED_MOUNTS = ("/dev", FUNCTION_MOUNT_PATH)
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def spec_problems(name: str, spec: Mapping[str, Any], reserved_env: frozenset[str]) -> list[str]:
    """`spec` must have the defaults applied (`spec.with_defaults`)."""
    return [
        *job_name_problems(name, int(spec["numNodes"])),
        *_size_problems(spec),
        *_pretrained_problems(spec),
        *_data_problems(spec.get("data") or {}, has_function=spec.get("function") is not None),
        *_checkpoint_problems(spec.get("checkpoint"), data_mount_path(spec)),
        *_volume_problems("cache", spec.get("cache"), data_mount_path(spec)),
        *_volume_problems("output", spec.get("output"), data_mount_path(spec)),
        *_hub_problems(spec),
        *_tracking_problems(spec),
        *_function_problems(spec.get("function")),
        *_resource_problems(spec.get("resources") or {}),
        *_env_problems(spec.get("env") or [], reserved_env),
        *_service_account_problems(spec.get("serviceAccountName")),
        *_toleration_problems(spec.get("tolerations") or []),
    ]


def _size_problems(spec: Mapping[str, Any]) -> Iterator[str]:
    world = int(spec["numNodes"]) * int(spec["processesPerNode"])
    if world > MAX_WORLD_SIZE:
        yield (f"numNodes x processesPerNode = {spec['numNodes']} x {spec['processesPerNode']} = {world} "
               f"processes; at most {MAX_WORLD_SIZE} are supported")


def _pretrained_problems(spec: Mapping[str, Any]) -> Iterator[str]:
    weights = spec.get("pretrainedWeights")
    if weights and not posixpath.isabs(weights):
        yield f"pretrainedWeights {weights!r} must be an absolute path inside the pod"


def _absolute_path_problems(field: str, path: str) -> Iterator[str]:
    if not isinstance(path, str) or not posixpath.isabs(path):
        yield f"{field} {path!r} must be an absolute path"
    elif ".." in path.split("/"):
        yield f"{field} {path!r} must not contain '..'"


def _data_problems(data: Mapping[str, Any], has_function: bool = False) -> Iterator[str]:
    sources = [key for key in DATA_SOURCES if data.get(key) is not None]
    if has_function and not sources and not data.get("path"):
        return  # a shipped function needs no data volume
    if len(sources) != 1:
        yield (f"data must set exactly one of {', '.join(DATA_SOURCES)}; "
               f"got {', '.join(sources) if sources else 'none'}")
    if data.get("hostPath") is not None:
        yield from _absolute_path_problems("data.hostPath", data["hostPath"])
    download = data.get("download")
    if download is not None and bool(download.get("sha256")) == bool(download.get("md5")):
        yield "data.download needs exactly one of sha256, md5: the archive is verified before it is unpacked"
    if download is not None and not str(download.get("url", "")).startswith(("http://", "https://")):
        yield f"data.download.url {download.get('url')!r} must be an http or https URL"
    path = data.get("path") or ""
    if path.startswith("/") or ".." in path.split("/"):
        yield f"data.path {path!r} must be relative to the data volume, without '..'"
    mount = data.get("mountPath")
    if mount is not None:
        problems = list(_absolute_path_problems("data.mountPath", mount))
        yield from problems
        normal = posixpath.normpath(mount)
        if not problems and (normal == "/" or any(normal == m or normal.startswith(m + "/") for m in RESERVED_MOUNTS)):
            yield f"data.mountPath {mount!r} must not be '/' or under {' or '.join(RESERVED_MOUNTS)}"
        if not problems:
            yield from _scratch_mount_problems("data.mountPath", mount)


def _checkpoint_problems(checkpoint: Mapping[str, Any] | None, data_mount: str) -> Iterator[str]:
    if checkpoint is None:
        return
    if checkpoint.get("persistentVolumeClaim") is not None and checkpoint.get("hostPath") is not None:
        yield "checkpoint must set at most one of persistentVolumeClaim, hostPath"
    if checkpoint.get("hostPath") is not None:
        yield from _absolute_path_problems("checkpoint.hostPath", checkpoint["hostPath"])
    path = checkpoint.get("path")
    problems = list(_absolute_path_problems("checkpoint.path", path))
    yield from problems
    if not problems:
        normal = posixpath.normpath(path)
        data_mount = posixpath.normpath(data_mount)
        if normal == "/" or normal == data_mount or normal.startswith(data_mount.rstrip("/") + "/"):
            yield f"checkpoint.path {path!r} must not be '/' or inside the data mount {data_mount}"
        yield from _scratch_mount_problems("checkpoint.path", path)


def _volume_problems(field: str, volume: Mapping[str, Any] | None, data_mount: str) -> Iterator[str]:
    """spec.cache and spec.output: one source at most, a path of their own."""
    if volume is None:
        return
    if volume.get("persistentVolumeClaim") is not None and volume.get("hostPath") is not None:
        yield f"{field} must set at most one of persistentVolumeClaim, hostPath"
    if volume.get("hostPath") is not None:
        yield from _absolute_path_problems(f"{field}.hostPath", volume["hostPath"])
    if volume.get("sizeLimit") is not None:
        try:
            parse_quantity(volume["sizeLimit"])
        except ValueError as error:
            yield f"{field}.sizeLimit: {error}"
    path = volume.get("path")
    problems = list(_absolute_path_problems(f"{field}.path", path))
    yield from problems
    if not problems:
        normal, data_mount = posixpath.normpath(path), posixpath.normpath(data_mount)
        if normal == "/" or normal == data_mount or normal.startswith(data_mount.rstrip("/") + "/") \
                or any(normal == m or normal.startswith(m + "/") for m in RESERVED_MOUNTS):
            yield f"{field}.path {path!r} must not be '/', inside the data mount {data_mount} or under /dev"
        yield from _scratch_mount_problems(f"{field}.path", path)


def _hub_problems(spec: Mapping[str, Any]) -> Iterator[str]:
    hub = spec.get("hub") or {}
    if hub.get("offline") and spec.get("pretrained") and not spec.get("pretrainedWeights") \
            and (spec.get("cache") or {}).get("persistentVolumeClaim") is None \
            and (spec.get("cache") or {}).get("hostPath") is None:
        yield ("hub.offline with pretrained weights from the Hub needs a pre-filled cache: set "
               "cache.persistentVolumeClaim or cache.hostPath (an emptyDir starts empty), or pretrainedWeights")


def _inside(path: str, directory: str) -> bool:
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _tracking_problems(spec: Mapping[str, Any]) -> Iterator[str]:
    """spec.tracking: TensorBoard's files need a volume pod 0 keeps; an MLflow store URI the pods can use."""
    tracking = spec.get("tracking")
    if tracking is None:
        return
    tensorboard, mlflow = tracking.get("tensorboard"), tracking.get("mlflow")
    if tensorboard is None and mlflow is None:
        yield "tracking needs tensorboard, mlflow or both"
    output = spec.get("output")
    if tensorboard is not None and tensorboard.get("enabled", True):
        yield from _tensorboard_problems(tensorboard, output, data_mount_path(spec))
    if mlflow is not None:
        yield from _mlflow_problems(mlflow, output)


def _tensorboard_problems(tensorboard: Mapping[str, Any], output: Mapping[str, Any] | None,
                          data_mount: str) -> Iterator[str]:
    log_dir = tensorboard.get("logDir")
    if tensorboard.get("persistentVolumeClaim") is None and tensorboard.get("hostPath") is None:
        if output is None:
            yield ("tracking.tensorboard needs a place for its event files: set spec.output (they go to "
                   "<output.path>/tensorboard) or give it a volume of its own (persistentVolumeClaim or hostPath, "
                   "with logDir)")
        elif log_dir is not None and not _inside(log_dir, output["path"]):
            yield (f"tracking.tensorboard.logDir {log_dir!r} must lie inside spec.output.path {output['path']!r}, "
                   "or tensorboard needs a volume of its own (persistentVolumeClaim or hostPath)")
        return
    if tensorboard.get("persistentVolumeClaim") is not None and tensorboard.get("hostPath") is not None:
        yield "tracking.tensorboard must set at most one of persistentVolumeClaim, hostPath"
    if tensorboard.get("hostPath") is not None:
        yield from _absolute_path_problems("tracking.tensorboard.hostPath", tensorboard["hostPath"])
    if log_dir is None:
        yield "tracking.tensorboard.logDir is required with a volume of its own: where pod 0 mounts it"
        return
    problems = list(_absolute_path_problems("tracking.tensorboard.logDir", log_dir))
    yield from problems
    if not problems:
        if posixpath.normpath(log_dir) == "/" or _inside(log_dir, data_mount) \
                or any(_inside(log_dir, mount) for mount in RESERVED_MOUNTS):
            yield (f"tracking.tensorboard.logDir {log_dir!r} must not be '/', inside the data mount {data_mount} "
                   "or under /dev")
        yield from _scratch_mount_problems("tracking.tensorboard.logDir", log_dir)


def _mlflow_problems(mlflow: Mapping[str, Any], output: Mapping[str, Any] | None) -> Iterator[str]:
    uri = str(mlflow.get("trackingUri") or "")
    if not uri.startswith(("http://", "https://", "file://")):
        yield f"tracking.mlflow.trackingUri {uri!r} must be an http://, https:// or file:// URI"
    elif re.match(r"^https?://[^/?#]*@", uri):
        yield ("tracking.mlflow.trackingUri must not carry credentials: put them in a Secret and name it in "
               "usernameSecret/passwordSecret or tokenSecret")
    elif uri.startswith("file://"):
        path = uri[len("file://"):]
        if output is None or not path.startswith("/") or not _inside(path, output["path"]):
            yield (f"tracking.mlflow.trackingUri {uri!r}: a file:// store must lie inside spec.output.path, the "
                   "volume pod 0 keeps (e.g. file://<output.path>/mlruns); or use a tracking server")
    if (mlflow.get("usernameSecret") is None) != (mlflow.get("passwordSecret") is None):
        yield "tracking.mlflow.usernameSecret and passwordSecret go together"
    if mlflow.get("tokenSecret") is not None and mlflow.get("usernameSecret") is not None:
        yield "tracking.mlflow: give tokenSecret or usernameSecret/passwordSecret, not both"


def _scratch_mount_problems(field: str, path: str) -> Iterator[str]:
    """The pods' writable emptyDirs (/tmp, the home directory) keep their mount paths; a volume may sit below them."""
    if posixpath.normpath(path) in SCRATCH_MOUNT_PATHS:
        yield (f"{field} {path!r} must not be {' or '.join(SCRATCH_MOUNT_PATHS)}: the trainer's root filesystem is "
               "read-only and these are its writable directories (a directory below them is fine)")


def _function_problems(function: Mapping[str, Any] | None) -> Iterator[str]:
    if function is not None and not is_dns1123_subdomain(function.get("configMap", "")):
        yield f"function.configMap {function.get('configMap')!r} must be a ConfigMap name (a DNS-1123 subdomain)"


def _resource_problems(resources: Mapping[str, Any]) -> Iterator[str]:
    parsed: dict[str, dict[str, Any]] = {}
    for kind in ("requests", "limits"):
        for resource, value in (resources.get(kind) or {}).items():
            try:
                parsed.setdefault(kind, {})[resource] = parse_quantity(value)
            except ValueError as error:
                yield f"resources.{kind}.{resource}: {error}"
                continue
            if parsed[kind][resource] < 0:
                yield f"resources.{kind}.{resource} must not be negative, got {value!r}"
    for resource, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(resource)
        if limit is not None and request > limit:
            yield (f"resources.requests.{resource} ({resources['requests'][resource]}) must not exceed "
                   f"resources.limits.{resource} ({resources['limits'][resource]})")


def _env_problems(env: list[Mapping[str, Any]], reserved: frozenset[str]) -> Iterator[str]:
    seen: set[str] = set()
    for item in env:
        name = item.get("name", "")
        if not _ENV_NAME.match(name):
            yield f"env name {name!r} is not a valid environment variable name"
        elif name in reserved:
            yield f"env {name!r} is set by the operator from the spec; set the spec field instead"
        elif name in seen:
            yield f"env {name!r} is given twice"
        seen.add(name)


def _service_account_problems(name: str | None) -> Iterator[str]:
    if name is not None and not is_dns1123_subdomain(name):
        yield f"serviceAccountName {name!r} must be a DNS-1123 subdomain"


def _toleration_problems(tolerations: list[Mapping[str, Any]]) -> Iterator[str]:
    for position, toleration in enumerate(tolerations):
        if toleration.get("operator") == "Exists" and toleration.get("value"):
            yield f"tolerations[{position}]: operator Exists must not have a value"
        if toleration.get("tolerationSeconds") is not None and toleration.get("effect") != "NoExecute":
            yield f"tolerations[{position}]: tolerationSeconds needs effect NoExecute"
