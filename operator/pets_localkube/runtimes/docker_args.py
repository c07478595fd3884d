"""A pod's container as `docker create` arguments: the pure half of the docker runtime.

`docker.py` acts (creates, starts, stops, inspects); this module only decides. What the
pod asks for is honoured or refused, never silently dropped:

- command/args as Kubernetes defines them against the image (command replaces ENTRYPOINT, args
  replace CMD), `$(VAR)` expanded; workingDir.
- env: names only on the command line (`-e NAME`), values through the docker client's own
  environment, so no value (a Secret's) appears in a process list.
- volumes: bind mounts of the kubelet's local directories (hostPath, PVC, emptyDir, projected
  ConfigMap/Secret), readOnly and subPath; emptyDir `medium: Memory` as a tmpfs with its sizeLimit.
- securityContext (pod, then container): runAsUser/runAsGroup/fsGroup, `allowPrivilegeEscalation:
  false` -> no-new-privileges, capabilities, readOnlyRootFilesystem, privileged, seccomp
  (RuntimeDefault is docker's default profile, Unconfined is refused by nothing here).
- resources.limits: cpu -> --cpus, memory -> --memory (swap off, as a kubelet runs).
- DNS: the pod's hostname, and with a subdomain the names a headless Service gives it,
  `<hostname>.<subdomain>[.<namespace>[.svc[.cluster.local]]]`, as network aliases.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pets_api.quantities import parse_quantity

from ..environment import expand

LABEL_PREFIX = "dev.pets.localkube"
LABEL_NODE = f"{LABEL_PREFIX}.node"
LABEL_POD_UID = f"{LABEL_PREFIX}.pod-uid"
CLUSTER_DOMAIN = "cluster.local"


class ContainerConfigError(ValueError):
    """What a kubelet reports as `CreateContainerConfigError`: the container cannot be made as asked."""


def security_context(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's effective securityContext: the pod's, overridden field by field by the container's."""
    pod_level = dict(pod["spec"].get("securityContext") or {})
    return {**pod_level, **(container.get("securityContext") or {})}


def is_root_user(user: str) -> bool | None:
    """Whether an image's `Config.User` runs as root: True, False, or None when it is a name (unverifiable)."""
    name = user.split(":", 1)[0].strip()
    if name in ("", "0", "root"):
        return True
    return False if name.isdigit() else None


def non_root_problem(pod: Mapping[str, Any], container: Mapping[str, Any], image_user: str) -> str | None:
    """The kubelet's refusal of a `runAsNonRoot` container that would run as root; None when it may run."""
    context = security_context(pod, container)
    if not context.get("runAsNonRoot"):
        return None
    meta = pod["metadata"]
    where = f"(pod: \"{meta['name']}_{meta['namespace']}({meta['uid']})\", container: {container['name']})"
    if context.get("runAsUser") is not None:
        return f"container's runAsUser breaks non-root policy {where}" if int(context["runAsUser"]) == 0 else None
    root = is_root_user(image_user)
    if root is None:
        return f"container has runAsNonRoot and image has non-numeric user ({image_user}), cannot verify user is non-root {where}"
    return f"container has runAsNonRoot and image will run as root {where}" if root else None


def dns_aliases(pod: Mapping[str, Any]) -> list[str]:
    """The names other pods reach this one by: its hostname, and with a subdomain the headless Service's records."""
    spec, meta = pod["spec"], pod["metadata"]
    hostname = spec.get("hostname") or meta["name"]
    aliases = [hostname]
    if spec.get("subdomain"):
        base = f"{hostname}.{spec['subdomain']}"
        aliases += [base, f"{base}.{meta['namespace']}", f"{base}.{meta['namespace']}.svc",
                    f"{base}.{meta['namespace']}.svc.{CLUSTER_DOMAIN}"]
    return aliases


def _mounts(pod: Mapping[str, Any], container: Mapping[str, Any], volumes: Mapping[str, Path]) -> list[str]:
    by_name = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    args: list[str] = []
    for mount in container.get("volumeMounts") or []:
        volume = by_name.get(mount["name"])
        if volume is None:
            raise ContainerConfigError(f"volume {mount['name']!r} of mount {mount['mountPath']} is not in the pod's volumes")
        target = mount["mountPath"]
        read_only = bool(mount.get("readOnly")) or bool((volume.get("persistentVolumeClaim") or {}).get("readOnly"))
        empty_dir = volume.get("emptyDir")
        if empty_dir is not None and empty_dir.get("medium") == "Memory":
            if mount.get("subPath"):
                raise ContainerConfigError(f"subPath of the memory-backed emptyDir {mount['name']!r} is not supported")
            options = "rw,nosuid,nodev,mode=1777"
            if empty_dir.get("sizeLimit"):
                options += f",size={int(parse_quantity(empty_dir['sizeLimit']))}"
            args += ["--tmpfs", f"{target}:{options}"]
            continue
        source = volumes[mount["name"]] / mount.get("subPath", "")
        args += ["--mount", f"type=bind,source={source},target={target}{',readonly' if read_only else ''}"]
    return args


def _security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    context = security_context(pod, container)
    args: list[str] = []
    if context.get("runAsUser") is not None:
        user = str(int(context["runAsUser"]))
        if context.get("runAsGroup") is not None:
            user += f":{int(context['runAsGroup'])}"
        args += ["--user", user]
    pod_context = pod["spec"].get("securityContext") or {}
    for group in [pod_context.get("fsGroup"), *(pod_context.get("supplementalGroups") or [])]:
        if group is not None:
            args += ["--group-add", str(int(group))]
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if context.get("privileged"):
        args.append("--privileged")
    capabilities = context.get("capabilities") or {}
    args += [arg for cap in capabilities.get("drop") or [] for arg in ("--cap-drop", cap)]
    args += [arg for cap in capabilities.get("add") or [] for arg in ("--cap-add", cap)]
    if context.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    elif seccomp == "Localhost":
        raise ContainerConfigError("seccompProfile Localhost is not supported by the local docker runtime")
    return args


def _limits(container: Mapping[str, Any]) -> list[str]:
    limits = (container.get("resources") or {}).get("limits") or {}
    args: list[str] = []
    if limits.get("cpu") is not None:
        args += ["--cpus", f"{float(parse_quantity(limits['cpu'])):g}"]
    if limits.get("memory") is not None:
        memory = str(int(parse_quantity(limits["memory"])))
        args += ["--memory", memory, "--memory-swap", memory]
    return args


def create_args(pod: Mapping[str, Any], container: Mapping[str, Any], *, name: str, network: str, node: str,
                env: Mapping[str, str], volumes: Mapping[str, Path], message_file: Path,
                message_path: str) -> list[str]:
    """`docker create` arguments (after `create`) for `container` of `pod`; the image and its argv last."""
    spec, meta = pod["spec"], pod["metadata"]
    aliases = dns_aliases(pod)
    args = ["--name", name, "--network", network, "--hostname", aliases[0],
            "--label", f"{LABEL_NODE}={node}", "--label", f"{LABEL_POD_UID}={meta['uid']}",
            "--label", f"io.kubernetes.pod.name={meta['name']}",
            "--label", f"io.kubernetes.pod.namespace={meta['namespace']}",
            "--label", f"io.kubernetes.container.name={container['name']}"]
    args += [arg for alias in aliases for arg in ("--network-alias", alias)]
    args += [arg for key in env for arg in ("-e", key)]
    args += _mounts(pod, container, volumes)
    args += ["--mount", f"type=bind,source={message_file},target={message_path}"]
    args += _security(pod, container)
    args += _limits(container)
    if container.get("workingDir"):
        args += ["--workdir", container["workingDir"]]
    if spec.get("terminationGracePeriodSeconds") is not None:
        args += ["--stop-timeout", str(int(spec["terminationGracePeriodSeconds"]))]
    command = [expand(str(part), env) for part in container.get("command") or []]
    rest = [expand(str(part), env) for part in container.get("args") or []]
    if command:
        args += ["--entrypoint", command[0], container["image"], *command[1:], *rest]
    else:
        args += [container["image"], *rest]
    return args
