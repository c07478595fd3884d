"""`cluster_launcher`: Accelerate's `notebook_launcher` call, run on the cluster's nodes.

The Accelerate tutorial "Launching Multi-Node Training from a Jupyter Environment" writes
`training_loop` in notebook cells and runs it with `notebook_launcher(training_loop, args,
num_processes=2)`. The same call, with nodes of a cluster:

    from pets_client.launcher import cluster_launcher

    job = cluster_launcher(training_loop, args, num_nodes=2,
                           data={"persistentVolumeClaim": {"claimName": "pets"}, "mountPath": data_dir})

1. The function and its arguments are serialized by value with cloudpickle (the functions,
   classes and values it uses from the notebook, `__main__`, travel with it; so do those of local
   modules the trainer image cannot import), with the Python, torch, accelerate, timm and
   cloudpickle versions; what cannot travel is refused before anything is created
   (`LaunchRefused`: an open file, a lock, a CUDA tensor, a payload over a ConfigMap's 1 MiB).
2. A PetsTrainingJob with `spec.function` is created, then a ConfigMap holding the payload,
   owned by the job (it goes when the job goes).
3. Every pod runs `pets-train`, which `accelerate launch`es `pets_trainer.function` with the
   usual rendezvous; every process calls `function(*args)`, as notebook_launcher does.
4. The operator reads the function's own `epoch 0: 88.12` lines (and `pets_trainer.report(...)`
   lines) into status.epochs; `wait=True` shows them live and raises `JobFailed` when the job fails.

Paths in the function's globals (the tutorial's `fnames`) must exist in the pods: mount the data
where the notebook has it (`data={..., "mountPath": data_dir}`). A global holding paths under no
mounted volume, or relative paths, gets an `UnmountedPathWarning` naming it.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import io
import os
import posixpath
import re
import socket
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from pets_api import function_payload, names
from pets_api.contract import schema_default, spec_schema
from pets_api.ownership import owner_reference

# The payload's key in the ConfigMap: the CRD's default of spec.function.key.
FUNCTION_KEY = spec_schema()["properties"]["function"]["properties"]["key"]["default"]
CHECKPOINT_PATH = spec_schema()["properties"]["checkpoint"]["properties"]["path"]["default"]
SHM_PATH = "/dev/shm"
# Paths every container has: not worth a warning.
SYSTEM_PREFIXES = ("/dev", "/proc", "/sys", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64")
MAX_STRINGS = 200_000  # of one global, looked at for paths
ANNOTATION_FUNCTION = "training.pets.dev/function"


class LaunchRefused(ValueError):
    """The function or its arguments cannot go to the cluster; nothing was created."""


class UnmountedPathWarning(UserWarning):
    """A global of the function holds paths that will not exist in the pods."""


@dataclass(frozen=True)
class Shipped:
    """One value that travels with the function: a global it reads, a closure variable, an argument."""
    label: str  # "global `fnames`", "args[0]", ...
    value: Any


# --- what travels (pure) ------------------------------------------------------------------------------


def _importable_in_pods(module: str | None) -> bool:
    """Whether the trainer image can import `module` by name: the standard library or an installed distribution.

    Anything else (the notebook's `__main__`, a helper module beside the notebook) travels by value."""
    if not module or module == "__main__":
        return False
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top == "builtins" or top in _installed_top_level()


@functools.lru_cache(maxsize=1)
def _installed_top_level() -> frozenset[str]:
    """Top-level modules of the installed distributions (slow to find: once per process)."""
    return frozenset(metadata.packages_distributions())


def _module_of(value: Any) -> str | None:
    if isinstance(value, (types.FunctionType, type)):
        return getattr(value, "__module__", None)
    return None


def _travels_by_value(value: Any) -> bool:
    module = _module_of(value)
    return module is not None and not _importable_in_pods(module)


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a code object (and the functions and classes defined in it) may read."""
    found = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= _code_names(constant)
    return found


def _functions_of_class(cls: type) -> Iterator[types.FunctionType]:
    for attribute in vars(cls).values():
        if isinstance(attribute, (staticmethod, classmethod)):
            attribute = attribute.__func__
        elif isinstance(attribute, property):
            yield from (f for f in (attribute.fget, attribute.fset, attribute.fdel) if isinstance(f, types.FunctionType))
            continue
        if isinstance(attribute, types.FunctionType):
            yield attribute


def shipped_values(function: Callable[..., Any], args: Iterable[Any] = ()) -> list[Shipped]:
    """What travels with `function(*args)` besides code: the globals its by-value functions and classes
    read, their closure variables and defaults, and the arguments. Functions and classes that travel
    by value are walked into (their own entries are listed too); importable ones travel by name."""
    shipped: list[Shipped] = []
    seen_values: set[int] = set()
    seen_labels: set[str] = set()

    def add(label: str, value: Any) -> None:
        if label in seen_labels:
            return
        seen_labels.add(label)
        shipped.append(Shipped(label, value))
        if _travels_by_value(value) and id(value) not in seen_values:
            seen_values.add(id(value))
            walk(value)

    def walk_function(fn: types.FunctionType) -> None:
        namespace = fn.__globals__
        for name in sorted(_code_names(fn.__code__)):
            if name in namespace and not isinstance(namespace[name], types.ModuleType):
                add(f"global `{name}`", namespace[name])
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            with contextlib.suppress(ValueError):  # an empty cell
                add(f"`{fn.__name__}`'s closure variable `{name}`", cell.cell_contents)
        for position, default in enumerate(fn.__defaults__ or ()):
            add(f"`{fn.__name__}`'s default #{position + 1}", default)
        for name, default in (fn.__kwdefaults__ or {}).items():
            add(f"`{fn.__name__}`'s default `{name}`", default)

    def walk(value: Any) -> None:
        if isinstance(value, types.FunctionType):
            walk_function(value)
        elif isinstance(value, type):
            for fn in _functions_of_class(value):
                walk_function(fn)
            for name, attribute in vars(value).items():  # class attributes travel with the class
                if not name.startswith("__") and not isinstance(
                        attribute, (types.FunctionType, staticmethod, classmethod, property)):
                    add(f"`{value.__name__}.{name}`", attribute)

    if isinstance(function, types.MethodType):
        add("the bound object", function.__self__)
        function = function.__func__
    if isinstance(function, types.FunctionType) or _travels_by_value(function):
        seen_values.add(id(function))
        walk(function)
    for position, arg in enumerate(args):
        add(f"args[{position}]", arg)
    return shipped


def _is_code(value: Any) -> bool:
    """Functions and classes: containers of other entries, not data of their own."""
    return isinstance(value, (types.FunctionType, type, types.BuiltinFunctionType, types.MethodType))


# --- serializing (pure) -------------------------------------------------------------------------------


class _OnDevice(TypeError):
    def __init__(self, device: str):
        super().__init__(f"a tensor on {device}")
        self.device = device


class _OpenFile(TypeError):
    """cloudpickle would copy a file open for reading by its contents; in the pods it is not open, nor there."""

    def __init__(self, value: Any):
        super().__init__("open files do not travel (in the pods it would be neither open nor there)")


def _device_of(value: Any) -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.device.type != "cpu":
        return str(value.device)
    return None


def _pickler_class():
    import cloudpickle

    class CheckingPickler(cloudpickle.Pickler):
        """cloudpickle, refusing tensors that live on a device (the pods must not receive CUDA state)."""

        def reducer_override(self, obj):
            device = _device_of(obj)
            if device is not None:
                raise _OnDevice(device)
            if isinstance(obj, io.IOBase) and obj not in (sys.stdin, sys.stdout, sys.stderr):
                raise _OpenFile(obj)
            return super().reducer_override(obj)

    return CheckingPickler


def dumps(value: Any) -> bytes:
    import cloudpickle

    buffer = io.BytesIO()
    _pickler_class()(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(value)
    return buffer.getvalue()


@contextlib.contextmanager
def _by_value(modules: Iterable[str]) -> Iterator[None]:
    """Register the modules the pods cannot import with cloudpickle, for as long as this lasts."""
    import cloudpickle

    registered = []
    try:
        for name in sorted(set(modules)):
            module = sys.modules.get(name)
            if name != "__main__" and module is not None and name not in cloudpickle.list_registry_pickle_by_value():
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
        yield
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def describe(value: Any) -> str:
    """What a value is, in words a notebook user recognises."""
    device = _device_of(value)
    if device is not None:
        return f"a tensor on {device}"
    if isinstance(value, io.IOBase):
        return f"an open file{f' ({value.name!r})' if isinstance(getattr(value, 'name', None), str) else ''}"
    if isinstance(value, (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Semaphore)):
        return "a lock"
    if isinstance(value, threading.Thread):
        return "a thread"
    if isinstance(value, socket.socket):
        return "a socket"
    if isinstance(value, types.GeneratorType):
        return "a generator"
    kind = type(value)
    return f"a {kind.__qualname__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _refusal(name: str, entry: Shipped, error: BaseException) -> str:
    what = describe(entry.value)
    if isinstance(error, _OnDevice):
        what = what if _device_of(entry.value) else f"{what} holding a tensor on {error.device}"
        return (f"cannot send {name} to the cluster: {entry.label} is {what}. As the Accelerate tutorial warns, "
                f"nothing may touch CUDA before launching: create device tensors and models inside the function "
                f"(or pass CPU tensors, `.cpu()`); each process picks its own device")
    if entry.label.startswith("args["):
        return (f"cannot send {name} to the cluster: argument {entry.label} ({what}) cannot be serialized: "
                f"{_one_line(error)}. Pass plain values (numbers, strings, lists, CPU tensors) and build the rest "
                f"inside the function")
    return (f"cannot send {name} to the cluster: {entry.label} ({what}) cannot be serialized: {_one_line(error)}. "
            f"Create it inside the function instead (every process makes its own)")


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _sizes(entries: list[Shipped]) -> list[tuple[str, int]]:
    sizes = []
    for entry in entries:
        if _is_code(entry.value):
            continue
        try:
            sizes.append((entry.label, len(dumps(entry.value))))
        except Exception:  # noqa: BLE001 - sizing is best effort
            continue
    return sorted(sizes, key=lambda item: -item[1])


def function_name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or repr(function)


def build_payload(function: Callable[..., Any], args: Iterable[Any] = (),
                  limit: int = function_payload.CONFIGMAP_LIMIT) -> tuple[bytes, dict[str, Any]]:
    """(payload bytes, header) for `function(*args)`, or LaunchRefused saying what cannot travel and why."""
    if not callable(function):
        raise LaunchRefused(f"cluster_launcher needs a function to run, got {describe(function)}")
    args = tuple(args)
    name = function_name(function)
    entries = shipped_values(function, args)
    modules = {_module_of(e.value) for e in entries if _travels_by_value(e.value)}
    modules.add(getattr(function, "__module__", None) or "__main__")
    modules = {m for m in modules if m and not _importable_in_pods(m)}
    with _by_value(modules):
        try:
            body = dumps((function, args))
        except Exception as error:  # noqa: BLE001 - find which value it was, and say so
            raise LaunchRefused(_explain(name, entries, error)) from None
        header = {"function": name, "module": getattr(function, "__module__", None), "args": len(args),
                  **function_payload.local_versions()}
        data = function_payload.pack(header, body)
        if len(data) > limit:
            largest = _sizes(entries)[:3]
            listed = ", ".join(f"{label} ({_size(size)})" for label, size in largest) or "the function's code"
            raise LaunchRefused(
                f"cannot send {name} to the cluster: with its globals and arguments it serializes to {_size(len(data))}, "
                f"and a ConfigMap holds at most {_size(limit)}. Largest: {listed}. Read large data inside the function "
                f"from a volume (data=...) instead of shipping it")
    return data, header


def _explain(name: str, entries: list[Shipped], error: BaseException) -> str:
    for entry in entries:
        if _is_code(entry.value):
            continue
        try:
            dumps(entry.value)
        except Exception as culprit:  # noqa: BLE001
            return _refusal(name, entry, culprit)
    if isinstance(error, _OnDevice):
        return _refusal(name, Shipped("a value it uses", None), error)
    return f"cannot send {name} to the cluster: it cannot be serialized: {type(error).__name__}: {_one_line(error)}"


# --- paths in the globals (pure) ----------------------------------------------------------------------


def _strings(value: Any, depth: int = 0, budget: list[int] | None = None) -> Iterator[str]:
    budget = budget if budget is not None else [MAX_STRINGS]
    if budget[0] <= 0 or depth > 3:
        return
    if isinstance(value, str):
        budget[0] -= 1
        yield value
    elif isinstance(value, os.PathLike):
        budget[0] -= 1
        with contextlib.suppress(TypeError):
            yield os.fspath(value)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item, depth + 1, budget)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, depth + 1, budget)
            yield from _strings(item, depth + 1, budget)


def _is_relative_path(text: str) -> bool:
    if text.startswith(("./", "../", "~/")):
        return True
    return "/" in text and not text.startswith("/") and "://" not in text and os.path.exists(text)


def _is_absolute_path(text: str) -> bool:
    return text.startswith("/") and not text.startswith("//") and len(text) > 1


def _under(path: str, mount: str) -> bool:
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def mounted_paths(data: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> list[str]:
    """Where the pods have volumes: the data mount, the checkpoint path, /dev/shm."""
    mounts = [SHM_PATH]
    if data is not None:
        mounts.append(data.get("mountPath") or schema_default("data.mountPath"))
    checkpoint = spec.get("checkpoint")
    if checkpoint is not None:
        mounts.append(checkpoint.get("path") or CHECKPOINT_PATH)
    return mounts


def path_warnings(function: Callable[..., Any], args: Iterable[Any], mounts: list[str]) -> list[str]:
    """One sentence per global (or argument) holding paths the pods will not have: under no mount, or relative."""
    found = []
    for entry in shipped_values(function, tuple(args)):
        if _is_code(entry.value) or isinstance(entry.value, types.ModuleType):
            continue
        strings = [s for s in _strings(entry.value) if "\n" not in s and len(s) < 4096]
        relative = [s for s in strings if _is_relative_path(s)]
        unmounted = [s for s in strings if _is_absolute_path(s) and not any(_under(s, m) for m in mounts)
                     and not any(_under(s, prefix) for prefix in SYSTEM_PREFIXES)]
        if unmounted:
            try:
                common = posixpath.commonpath(unmounted)
            except ValueError:
                common = posixpath.dirname(unmounted[0])
            if common == unmounted[0] and len(unmounted) == 1:
                common = posixpath.dirname(common) or common
            count = f" ({len(unmounted)} paths)" if len(unmounted) > 1 else ""
            found.append(f"{entry.label} holds paths under no volume mounted in the pods, e.g. {unmounted[0]!r}{count}: "
                         f"mount their directory where the notebook has it, data={{..., 'mountPath': {common!r}}}")
        if relative:
            count = f" ({len(relative)} paths)" if len(relative) > 1 else ""
            found.append(f"{entry.label} holds relative paths, e.g. {relative[0]!r}{count}: the pods' working directory "
                         f"is not the notebook's; use absolute paths under data's mountPath")
    return found


# --- the job and its ConfigMap (pure bodies) ----------------------------------------------------------


def default_job_name(function: Callable[..., Any]) -> str:
    """`training_loop` -> `training-loop`: a DNS label, short enough for the pods' names."""
    base = re.sub(r"[^a-z0-9-]+", "-", str(getattr(function, "__name__", "function")).lower()).strip("-")
    return (base or "function")[:40].rstrip("-") or "function"


def function_config_map_name(job: str) -> str:
    return f"{job}-function"


def launch_spec(num_nodes: int, processes_per_node: int, data: Mapping[str, Any] | None, image: str | None,
                resources: Mapping[str, Any] | None, mixed_precision: str | None,
                env: Mapping[str, Any] | Iterable[Mapping[str, Any]] | None, config_map: str,
                extra: Mapping[str, Any]) -> dict[str, Any]:
    """The job's spec keywords (client.submit's): the function source, the notebook_launcher-like arguments, the rest."""
    spec: dict[str, Any] = {"num_nodes": num_nodes, "processes_per_node": processes_per_node,
                            "function": {"configMap": config_map, "key": FUNCTION_KEY}}
    if data is not None:
        spec["data"] = dict(data)
    if image is not None:
        spec["image"] = image
    if resources is not None:
        spec["resources"] = dict(resources)
    if mixed_precision is not None:
        spec["mixed_precision"] = mixed_precision
    if env:
        spec["env"] = ([{"name": str(k), "value": str(v)} for k, v in env.items()] if isinstance(env, Mapping)
                       else [dict(item) for item in env])
    spec.update(extra)
    return spec


def config_map_body(job: Mapping[str, Any], name: str, payload: bytes, header: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {names.LABEL_JOB_NAME: meta["name"], names.LABEL_MANAGED_BY: names.MANAGED_BY},
            "annotations": {ANNOTATION_FUNCTION: str(header.get("function", ""))},
            "ownerReferences": [owner_reference(job)],
        },
        "binaryData": {FUNCTION_KEY: base64.b64encode(payload).decode("ascii")},
        "immutable": True,
    }


# --- acting (thin) ------------------------------------------------------------------------------------


def _create_config_map(client: Any, job: Any, payload: bytes, header: Mapping[str, Any]) -> None:
    """The payload's ConfigMap, owned by the job. One left by an earlier job of this name (not yet
    collected) is replaced; any other of that name is an error."""
    from .client import PetsClientError

    resource = job.get()
    body = config_map_body(resource, function_config_map_name(job.name), payload, header)
    try:
        client.create_config_map(body)
        return
    except PetsClientError as error:
        if error.status != 409:
            raise
    existing = client.read_config_map(body["metadata"]["name"], job.namespace)
    owners = getattr(getattr(existing, "metadata", None), "owner_references", None) or []
    if not any(o.kind == "PetsTrainingJob" and o.name == job.name for o in owners):
        raise PetsClientError(f"ConfigMap {job.namespace}/{body['metadata']['name']} exists and is not a function "
                              f"of an earlier job {job.name}; delete it or choose another job name", 409)
    client.delete_config_map(body["metadata"]["name"], job.namespace)
    client.create_config_map(body)


def cluster_launcher(function: Callable[..., Any], args: Iterable[Any] = (), num_nodes: int = 1,
                     processes_per_node: int = 1, *, name: str | None = None, namespace: str | None = None,
                     data: Mapping[str, Any] | None = None, image: str | None = None,
                     resources: Mapping[str, Any] | None = None, mixed_precision: str = "no",
                     env: Mapping[str, Any] | Iterable[Mapping[str, Any]] | None = None, wait: bool = True,
                     replace: bool = False, timeout: float | None = None, client: Any = None,
                     total_epochs: int | None = None, **spec: Any):
    """Run `function(*args)` in every process of `num_nodes` pods x `processes_per_node` processes.

    `accelerate.notebook_launcher`'s call, on a cluster: returns the PetsTrainingJob handle
    (`pets_client.client.PetsTrainingJob`: `wait()`, `epochs()`, `plot()`, `logs(follow=True)`,
    `delete()`); with `wait=True` it first blocks with a live display until the job ends, and
    raises `JobFailed` (the error line of the failed pod in its message) if it fails.

    - `data`: the data volume, as spec.data (`persistentVolumeClaim`, `hostPath` or `synthetic`, and
      `path`), plus `mountPath`: where it appears in the pods; the notebook's data directory, so the
      paths the function's globals hold resolve there.
    - `name` (default: from the function's name, `training-loop`), `namespace` (the connection's);
      an existing job of that name is an error unless `replace=True` (deleted first, then submitted).
    - `image`, `resources`, `mixed_precision`, `env` (a dict or a list of {name, value}), and any other
      spec field as a keyword (`backoff_limit=1`, `active_deadline_seconds=3600`, ...).
    - `client`: a `PetsTrainingJobClient` (default: a new one on the usual connection).
    - `total_epochs`: how many epochs the function runs, for the display's bar (`3/5 epochs`).

    Raises `LaunchRefused` before anything is created when the function cannot travel.
    """
    from .client import PetsTrainingJobClient

    payload, header = build_payload(function, args)
    args = tuple(args)
    name = name or default_job_name(function)
    for message in path_warnings(function, args, mounted_paths(data, spec)):
        warnings.warn(message, UnmountedPathWarning, stacklevel=2)
    client = client or PetsTrainingJobClient(namespace=namespace)
    fields = launch_spec(num_nodes, processes_per_node, data, image, resources, mixed_precision, env,
                         function_config_map_name(name), spec)
    job = client.submit(name, namespace, replace=replace, **fields)
    try:
        _create_config_map(client, job, payload, header)
    except BaseException:
        job.delete()  # its pods wait for the ConfigMap; without it the job could never run
        raise
    if wait:
        try:
            job.wait(timeout=timeout, display=True, raise_on_failure=True, total_epochs=total_epochs)
        except KeyboardInterrupt:
            print(f"{job.namespace}/{job.name} keeps running on the cluster: job.delete() stops it",
                  file=sys.stderr, flush=True)
            raise
    return job


__all__ = ["LaunchRefused", "UnmountedPathWarning", "build_payload", "cluster_launcher", "path_warnings",
           "shipped_values"]
