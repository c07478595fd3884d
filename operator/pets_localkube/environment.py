"""How a pod's container environment becomes a local process's environment.

Cluster DNS names (`<pod>.<svc>.<ns>.svc[.cluster.local]`) become 127.0.0.1, `MASTER_PORT`
next to such a `MASTER_ADDR` becomes a free local port shared by all pods of that rendezvous,
and paths under a volumeMount's `mountPath` become the local directory backing that volume.

Local processes share the node's network and file system, which a container does not:
- a pod's declared `containerPort`s become free local ports of its own (two replicas of one
  Deployment would otherwise both bind the same port), and an env value that is exactly such a port
  number (how a container is told the port it serves, e.g. the chart's
  `PETS_OPERATOR_LIVENESS_PORT`) becomes that local port;
- the API server is reached at its own address: `api_server_env` gives the variables a kubelet sets
  for the `kubernetes` Service (`KUBERNETES_SERVICE_HOST`, ...), with the address the node itself
  uses instead of the Service's cluster IP (no kube-proxy here);
- the ServiceAccount volume cannot be mounted at its fixed path (`SERVICE_ACCOUNT_MOUNT`): the process
  runtime names its local directory in `SERVICE_ACCOUNT_DIR_ENV`, where a client may look for the token
  and `ca.crt` (the operator's loader does: `pets_api.connection`).
"""
from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

LOOPBACK = "127.0.0.1"
_CLUSTER_DNS = re.compile(r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+svc(?:\.cluster\.local)?\.?$")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def is_cluster_dns_name(value: str) -> bool:
    return bool(_CLUSTER_DNS.match(value))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` references; unknown references stay as written, `$$` escapes."""
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value.replace("$$(", "\0(")).replace("\0(", "$(")


SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"  # where every kubelet mounts the token
SERVICE_ACCOUNT_DIR_ENV = "PETS_LOCALKUBE_SERVICE_ACCOUNT_DIR"  # where it is here, for clients that look for it


def api_server_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables, as a kubelet sets them in every container (enableServiceLinks
    or not), pointing at `host:port`: in-cluster clients build `https://$KUBERNETES_SERVICE_HOST:
    $KUBERNETES_SERVICE_PORT` from them."""
    url = f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": url, prefix: url,
            f"{prefix}_PROTO": "tcp", f"{prefix}_PORT": str(port), f"{prefix}_ADDR": host}


def declared_ports(container: dict[str, Any]) -> list[int]:
    """The container's `ports[].containerPort`s (TCP or not), in order, once each."""
    ports = [int(p["containerPort"]) for p in container.get("ports") or [] if p.get("containerPort")]
    return list(dict.fromkeys(ports))


class PortMap:
    """One local port per (master DNS name, port), held while any pod of the rendezvous runs."""

    def __init__(self) -> None:
        self._ports: dict[tuple[str, str], int] = {}
        self._users: dict[tuple[str, str], set[str]] = {}

    def acquire(self, address: str, port: str, pod_uid: str) -> int:
        key = (address, port)
        if key not in self._ports:
            self._ports[key] = free_port()
        self._users.setdefault(key, set()).add(pod_uid)
        return self._ports[key]

    def pod_port(self, pod_uid: str, port: int) -> int:
        """The pod's own local port for its declared `port`, held until the pod is released."""
        return self.acquire(f"pod/{pod_uid}", str(port), pod_uid)

    def release(self, pod_uid: str) -> None:
        for key, users in list(self._users.items()):
            users.discard(pod_uid)
            if not users:
                del self._users[key]
                del self._ports[key]


class PathMap:
    """Container paths under volume mounts -> local directories."""

    def __init__(self, mounts: list[tuple[str, Path]]):
        # Longest mount path first, so nested mounts win.
        self._mounts = sorted(((PurePosixPath(m), local) for m, local in mounts), key=lambda m: -len(m[0].parts))

    def local(self, value: str) -> str:
        if not value.startswith("/"):
            return value
        path = PurePosixPath(value)
        for mount, local in self._mounts:
            if path == mount or mount in path.parents:
                return str(local.joinpath(*path.parts[len(mount.parts):]))
        return value


def rewrite_env(env: dict[str, str], paths: PathMap, ports: PortMap, pod_uid: str,
                container_ports: Mapping[int, int] | None = None) -> dict[str, str]:
    """DNS names, the rendezvous port and mounted paths as above; `container_ports` (declared -> local):
    a value that is exactly a declared port's number becomes its local port."""
    container_ports = container_ports or {}
    result = dict(env)
    master = env.get("MASTER_ADDR", "")
    if is_cluster_dns_name(master) and env.get("MASTER_PORT"):
        result["MASTER_PORT"] = str(ports.acquire(master, env["MASTER_PORT"], pod_uid))
    for name, value in env.items():
        host, sep, port = value.rpartition(":") if ":" in value else (value, "", "")
        if is_cluster_dns_name(value):
            result[name] = LOOPBACK
        elif sep and port.isdigit() and is_cluster_dns_name(host):
            result[name] = f"{LOOPBACK}:{port}"
        elif name == "MASTER_PORT":
            continue
        elif value.isdigit() and int(value) in container_ports:
            result[name] = str(container_ports[int(value)])
        else:
            result[name] = paths.local(value)
    return result


def field_ref(pod: dict[str, Any], path: str) -> str:
    """`valueFrom.fieldRef.fieldPath` values the downward API offers."""
    meta = pod["metadata"]
    bracket = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
    if bracket:
        return str((meta.get(bracket.group(1)) or {}).get(bracket.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"), "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName"), "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.podIP": LOOPBACK, "status.hostIP": LOOPBACK, "status.podIPs": LOOPBACK, "status.hostIPs": LOOPBACK,
    }
    if path not in simple:
        raise ValueError(f"unsupported fieldRef fieldPath {path!r}")
    return str(simple[path] or "")
