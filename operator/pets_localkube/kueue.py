"""Kueue's controller manager, the real one `hack/kueue.sh` builds, installed into a Kubernetes API
server and run as a local process (next to `pets_localkube.control_plane`).

    with Kueue(kubeconfig=plane.kubeconfig, workdir=Path("/tmp/kueue")) as kueue:
        kueue.create_queues("team-a-ns", quota={"cpu": "1", "memory": "2Gi"}, local_queue="team-a")

    python -m pets_localkube.kueue --kubeconfig FILE --namespace NS --quota cpu=1,memory=2Gi

What it installs comes from the same module version as the binary (the build script copies Kueue's
kustomize inputs into the cache; kustomize is not needed): the CRDs, with their conversion webhooks,
and the webhook configurations, with their namespaceSelector patches, both pointed at
`https://127.0.0.1:<port>` (a `url`, not a Service: nothing routes a Service to a local process),
and the controller's ClusterRole and Secret Role, bound to the identity it runs as.

Certificates: Kueue's own cert management (`internalCertManagement.enable: true`), seeded. With it
off, Kueue v0.17 reads the metrics certificate from the fixed path /etc/kueue/metrics/certs
(cmd/kueue/main.go) and exits without it, which a local process cannot provide without root. With
it on, Kueue's cert rotator keeps the certificates it finds in its Secret while they are valid for
`kueue-webhook-service.kueue-system.svc` (and the CA for `kueue-ca`), and only checks that the
webhook's certificate file exists (in a pod the Secret is mounted there). So this module makes a CA
and a serving certificate with the openssl command, valid for that name AND for 127.0.0.1, writes
them to the Secret and to the webhook's certificate directory, and sets the same CA as caBundle; the
rotator finds them valid, injects that CA again, and the API server reaches the webhook at
127.0.0.1 with a certificate it verifies. The visibility API server (an aggregated API that would
want its own certificates under /visibility) is off (feature gate VisibilityOnDemand=false), and
so is the metrics endpoint (bindAddress "0").

Identity: by default Kueue runs as the user `kueue-controller-manager`, with a client certificate
the cluster signs (a CertificateSigningRequest for kubernetes.io/kube-apiserver-client, approved
here with the admin kubeconfig) and only Kueue's own RBAC from the module; `identity="admin"` runs
it with the given kubeconfig itself (acceptable on a throwaway test cluster).

`stop()` ends the process and removes the webhook configurations: their failurePolicy is Fail, so
left behind they would refuse every pod of the cluster's other namespaces.
"""
from __future__ import annotations

import argparse
import atexit
import base64
import copy
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .control_plane import Certificate, ControlPlaneError, Pki, free_port

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "kueue.sh"
BIN_DIR_ENV = "PETS_KUEUE_BIN"

NAMESPACE = "kueue-system"            # config/default's namespace
NAME_PREFIX = "kueue-"                # config/default's namePrefix
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
CA_NAME = "kueue-ca"                  # the name Kueue's cert rotator checks its CA for
USER = "kueue-controller-manager"
FIELD_MANAGER = "pets-localkube-kueue"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
# Never managed: Kubernetes' own namespaces and Kueue's.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", NAMESPACE)


class KueueError(RuntimeError):
    """A failed install or start; the message names the step (and the log, once the process runs)."""


# ------------------------------------------------------------------------------------------
# The release: binary and manifests
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Release:
    bin_dir: Path

    @property
    def binary(self) -> Path:
        return self.bin_dir / "kueue"

    @property
    def config_dir(self) -> Path:
        """Kueue's `config/` (the parts hack/kueue.sh copies)."""
        return self.bin_dir.parent / "config"

    def check(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise KueueError(f"step 'locate kueue': no kueue binary in {self.bin_dir}; build it with "
                             f"{BUILD_SCRIPT} (it prints the bin directory) or point {BIN_DIR_ENV} at one")
        if not (self.config_dir / "components" / "crd" / "kustomization.yaml").is_file():
            raise KueueError(f"step 'locate kueue': Kueue's manifests are missing in {self.config_dir}; "
                             f"run {BUILD_SCRIPT} again")


def pinned_versions(script: Path = BUILD_SCRIPT) -> dict[str, str]:
    """The pins of `hack/kueue.sh`: {'kueue': 'v0.X.Y', 'go': '1.X.Y'}."""
    result = subprocess.run(["bash", str(script), "--versions"], capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)


def locate_release(bin_dir: Path | str | None = None) -> Release:
    """The argument, else $PETS_KUEUE_BIN, else what the build script reports as built (`--check`,
    never a build). Raises KueueError if absent."""
    if bin_dir is None and os.environ.get(BIN_DIR_ENV):
        bin_dir = os.environ[BIN_DIR_ENV]
    if bin_dir is None:
        result = subprocess.run(["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True)
        if result.returncode != 0:
            raise KueueError(f"step 'locate kueue': Kueue is not built; run {BUILD_SCRIPT} (once per pin: "
                             f"it builds the controller manager from its Go module and prints the bin directory)")
        bin_dir = result.stdout.strip().splitlines()[-1]
    release = Release(Path(bin_dir))
    release.check()
    return release


# ------------------------------------------------------------------------------------------
# What to install (pure: manifests in, objects out)
# ------------------------------------------------------------------------------------------

def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _url_client_config(client_config: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A Service reference ({service: {name, namespace, path}}) as a URL on `base_url`, with the CA."""
    path = (client_config.get("service") or {}).get("path") or ""
    return {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle}


def crds(config_dir: Path, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs (config/components/crd: its `resources`), each conversion-webhook patch its
    kustomization applies (the ones not commented out) with the webhook at `base_url`."""
    crd_dir = config_dir / "components" / "crd"
    kustomization = load_documents(crd_dir / "kustomization.yaml")[0]
    by_name = {}
    for resource in kustomization["resources"]:
        for doc in load_documents(crd_dir / resource):
            by_name[doc["metadata"]["name"]] = doc
    for entry in kustomization.get("patches") or []:
        for patch in load_documents(crd_dir / entry["path"]):
            name = patch["metadata"]["name"]
            if name not in by_name:
                raise KueueError(f"step 'manifests': {entry['path']} patches {name}, which is not a CRD there")
            conversion = copy.deepcopy(patch["spec"]["conversion"])
            webhook = conversion.get("webhook") or {}
            if "clientConfig" in webhook:
                webhook["clientConfig"] = _url_client_config(webhook["clientConfig"], base_url, ca_bundle)
            by_name[name]["spec"]["conversion"] = conversion
    return list(by_name.values())


def _merge_by_name(items: list[dict[str, Any]], patches: Iterable[Mapping[str, Any]]) -> None:
    """A strategic-merge patch of a list keyed by `name` (webhooks): each patch's fields replace the item's."""
    for patch in patches:
        item = next((i for i in items if i.get("name") == patch.get("name")), None)
        if item is None:
            raise KueueError(f"step 'manifests': a patch names webhook {patch.get('name')!r}, which is not there")
        item.update(copy.deepcopy({k: v for k, v in patch.items() if k != "name"}))


def webhook_configurations(config_dir: Path, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's Mutating- and ValidatingWebhookConfiguration (config/components/webhook), named as
    config/default names them (the prefix `kueue-`, which is also the name Kueue's cert rotator
    injects its CA into), with the kustomization's namespaceSelector patches, calling `base_url`."""
    webhook_dir = config_dir / "components" / "webhook"
    kustomization = load_documents(webhook_dir / "kustomization.yaml")[0]
    configurations = [doc for resource in kustomization["resources"] for doc in load_documents(webhook_dir / resource)
                      if doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
    for entry in kustomization.get("patches") or []:
        for patch in yaml.safe_load_all(entry["patch"]) if "patch" in entry else load_documents(webhook_dir / entry["path"]):
            target = next((c for c in configurations if c["kind"] == patch["kind"]
                           and c["metadata"]["name"] == patch["metadata"]["name"]), None)
            if target is None:
                raise KueueError(f"step 'manifests': a webhook patch names {patch['kind']} {patch['metadata']['name']}, "
                                 f"which is not there")
            _merge_by_name(target["webhooks"], patch.get("webhooks") or [])
    for configuration in configurations:
        configuration["metadata"]["name"] = NAME_PREFIX + configuration["metadata"]["name"]
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"] = _url_client_config(webhook["clientConfig"], base_url, ca_bundle)
    return configurations


def rbac(config_dir: Path, user: str = USER) -> list[dict[str, Any]]:
    """Kueue's ClusterRole (config/components/rbac/role.yaml) and its Secret Role in kueue-system,
    named as config/default names them, each bound to `user`."""
    rbac_dir = config_dir / "components" / "rbac"
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    objects: list[dict[str, Any]] = []
    for file in ("role.yaml", "manager_secrets_role.yaml"):
        for role in load_documents(rbac_dir / file):
            role = copy.deepcopy(role)
            name = NAME_PREFIX + role["metadata"]["name"]
            role["metadata"]["name"] = name
            if role["kind"] == "Role":
                role["metadata"]["namespace"] = NAMESPACE
                binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                           "metadata": {"name": name.replace("-role", "-rolebinding"), "namespace": NAMESPACE}}
            else:
                binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                           "metadata": {"name": name.replace("-role", "-rolebinding")}}
            binding.update(roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": name},
                           subjects=subject)
            objects += [role, binding]
    return objects


def namespace_selector(excluded: Iterable[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": sorted(set(excluded))}]}


def wait_for_pods_ready(timeout_seconds: float, block_admission: bool = False,
                        backoff_base_seconds: int = 60, backoff_limit_count: int | None = None) -> dict[str, Any]:
    """Kueue's `waitForPodsReady` (v1beta2: on when present, no `enable` field): a Workload admitted
    whose pods are not all Ready within `timeout_seconds` is evicted (Evicted=True, reason
    PodsReadyTimeout), its pods stopped, and it is requeued after a backoff of about
    `backoff_base_seconds` × 2^(n-1), from the eviction's time, deactivated after
    `backoff_limit_count` requeues (None: never). `block_admission`: the ClusterQueue admits nothing
    else while an admitted Workload's pods are not all Ready."""
    strategy: dict[str, Any] = {"timestamp": "Eviction", "backoffBaseSeconds": backoff_base_seconds}
    if backoff_limit_count is not None:
        strategy["backoffLimitCount"] = backoff_limit_count
    return {"timeout": f"{timeout_seconds:g}s", "blockAdmission": block_admission, "requeuingStrategy": strategy}


def configuration(webhook_port: int, health_port: int, cert_dir: Path,
                  excluded_namespaces: Iterable[str] = (), frameworks: Sequence[str] = ("pod",),
                  pods_ready: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Kueue's Configuration for a local process: webhooks on 127.0.0.1, no leader election, no
    metrics or visibility servers, pods managed only with a queue-name label and outside the
    system namespaces (and `excluded_namespaces`); `pods_ready`: a `waitForPodsReady` section
    (`wait_for_pods_ready()`), none by default."""
    config = {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": namespace_selector([*SYSTEM_NAMESPACES, *excluded_namespaces]),
        "integrations": {"frameworks": list(frameworks)},
        "featureGates": {"VisibilityOnDemand": False},
    }
    if pods_ready is not None:
        config["waitForPodsReady"] = dict(pods_ready)
    return config


def parse_quota(text: str) -> dict[str, str]:
    """`cpu=1,memory=2Gi` -> {'cpu': '1', 'memory': '2Gi'}."""
    quota = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, amount = part.partition("=")
        if not sep or not name.strip() or not amount.strip():
            raise ValueError(f"quota {text!r}: expected resource=amount[,resource=amount...], e.g. cpu=1,memory=2Gi")
        quota[name.strip()] = amount.strip()
    if not quota:
        raise ValueError("the quota is empty: give at least one resource=amount, e.g. cpu=1,memory=2Gi")
    return quota


def queue_objects(namespace: str, quota: Mapping[str, str], local_queue: str, cluster_queue: str,
                  flavor: str = "default-flavor", preemption: str = "LowerPriority") -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue with `quota` of it (nominal: nothing borrowed; a pending
    workload of higher priority preempts lower ones: `preemption`), and a LocalQueue onto it."""
    return [
        {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}},
        {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": preemption},
            "resourceGroups": [{"coveredResources": sorted(quota), "flavors": [{
                "name": flavor,
                "resources": [{"name": name, "nominalQuota": quota[name]} for name in sorted(quota)]}]}]}},
        {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue",
         "metadata": {"name": local_queue, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}},
    ]


def workload_priority_class(name: str, value: int, description: str = "") -> dict[str, Any]:
    """A WorkloadPriorityClass: the priority of the Workloads whose pods carry the label
    `kueue.x-k8s.io/priority-class: <name>` (Kueue's own, not the pods' PriorityClass)."""
    return {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": int(value), "description": description or f"priority {value}"}


def cluster_queue_active(cluster_queue: Mapping[str, Any] | None) -> bool:
    """Kueue has taken the ClusterQueue up (condition Active=True): it admits workloads from now on."""
    conditions = ((cluster_queue or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


# ------------------------------------------------------------------------------------------
# The API: server-side apply of any of these objects
# ------------------------------------------------------------------------------------------

# kind -> plural, namespaced (the kinds this module applies)
_RESOURCES = {
    "Namespace": ("namespaces", False), "Secret": ("secrets", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "ClusterRole": ("clusterroles", False), "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True), "RoleBinding": ("rolebindings", True),
    "CertificateSigningRequest": ("certificatesigningrequests", False),
    "ResourceFlavor": ("resourceflavors", False), "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True), "Workload": ("workloads", True),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
}


def object_path(obj: Mapping[str, Any]) -> str:
    """The REST path of an object: /api/v1/namespaces/x/secrets/y, /apis/g/v/clusterqueues/y, ..."""
    plural, namespaced = _RESOURCES[obj["kind"]]
    api_version = obj["apiVersion"]
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        root += f"/namespaces/{obj['metadata']['namespace']}"
    return f"{root}/{plural}/{obj['metadata']['name']}"


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message


class Api:
    """A small client of the API server in a kubeconfig (its current context: a client certificate
    or a bearer token): apply, get, delete by an object's own apiVersion/kind/name. Standard library
    only, as the official client's low-level calls differ between its versions."""

    def __init__(self, kubeconfig: Path, secrets_dir: Path):
        config = yaml.safe_load(kubeconfig.read_text())
        cluster, user = _current(config)
        base = kubeconfig.parent
        url = urllib.parse.urlsplit(cluster["server"])
        if url.scheme != "https":
            raise KueueError(f"the kubeconfig's server {cluster['server']} is not https: Kueue needs a real API server")
        self.host, self.port = url.hostname, url.port or 443
        self.prefix = url.path.rstrip("/")
        self.context = ssl.create_default_context(cadata=_pem_text(cluster, "certificate-authority", base))
        self.headers = {"Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        if user.get("client-certificate-data") or user.get("client-certificate"):
            secrets_dir.mkdir(parents=True, exist_ok=True)
            cert, key = secrets_dir / "client.crt", secrets_dir / "client.key"
            for path, field in ((cert, "client-certificate"), (key, "client-key")):
                path.write_text(_pem_text(user, field, base))
                os.chmod(path, 0o600)
            self.context.load_cert_chain(str(cert), str(key))

    def close(self) -> None:
        pass

    def call(self, method: str, path: str, body: Any = None, query: Sequence[tuple[str, str]] = (),
             content_type: str = "application/json") -> Any:
        target = self.prefix + path + (f"?{urllib.parse.urlencode(list(query))}" if query else "")
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            headers = dict(self.headers)
            if body is not None:
                headers["Content-Type"] = content_type
            connection.request(method, target, body=None if body is None else json.dumps(body), headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = None
        if response.status >= 400:
            message = decoded.get("message") if isinstance(decoded, dict) else data.decode(errors="replace")[:500]
            raise ApiError(response.status, message or response.reason)
        return decoded

    def apply(self, obj: Mapping[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (create or update; this module's fields win)."""
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")] + ([("dryRun", "All")] if dry_run else [])
        return self.call("PATCH", object_path(obj), obj, query, "application/apply-patch+yaml")

    def get(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return self.call("GET", object_path(obj))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def delete(self, obj: Mapping[str, Any]) -> None:
        try:
            self.call("DELETE", object_path(obj))
        except ApiError as error:
            if error.status != 404:
                raise


def _current(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The current context's cluster and user entries."""
    name = config.get("current-context")
    context = next((c["context"] for c in config.get("contexts") or [] if c.get("name") == name), None)
    if context is None:
        raise KueueError(f"the kubeconfig has no current context {name!r}")
    cluster = next((c["cluster"] for c in config.get("clusters") or [] if c.get("name") == context.get("cluster")), None)
    user = next((u["user"] for u in config.get("users") or [] if u.get("name") == context.get("user")), {})
    if cluster is None:
        raise KueueError(f"the kubeconfig has no cluster {context.get('cluster')!r}")
    return dict(cluster), dict(user or {})


def _pem_text(entry: Mapping[str, Any], field: str, base: Path) -> str:
    """A kubeconfig's `<field>-data` (base64) or `<field>` (a file, relative to the kubeconfig)."""
    if entry.get(f"{field}-data"):
        return base64.b64decode(entry[f"{field}-data"]).decode()
    if entry.get(field):
        return (base / entry[field]).read_text()
    raise KueueError(f"the kubeconfig gives no {field}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------------------------------
# Kueue
# ------------------------------------------------------------------------------------------

_LIVE: set[Kueue] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:  # an interpreter that exits without stop() leaves no process behind
    with _LIVE_LOCK:
        running = list(_LIVE)
    for kueue in running:
        kueue.stop()


class Kueue:
    """Install Kueue into the cluster of `kubeconfig` (an admin's) and run its controller manager.

    `workdir` holds the certificates, the Configuration, Kueue's kubeconfig and its log
    (`kueue.log`). `excluded_namespaces`: namespaces Kueue does not manage, on top of the system
    ones. `identity`: "kueue" (its own user and RBAC) or "admin" (the given kubeconfig).
    `pods_ready`: Kueue's `waitForPodsReady` (`wait_for_pods_ready()`), off by default.
    """

    def __init__(self, kubeconfig: Path | str, workdir: Path | str, bin_dir: Path | str | None = None,
                 excluded_namespaces: Iterable[str] = (), identity: str = "kueue",
                 startup_timeout: float = 180, log_level: int = 2, pods_ready: Mapping[str, Any] | None = None):
        if identity not in ("kueue", "admin"):
            raise ValueError(f"identity must be 'kueue' or 'admin', not {identity!r}")
        self.admin_kubeconfig = Path(kubeconfig).resolve()
        self.workdir = Path(workdir).resolve()
        self.bin_dir = bin_dir
        self.excluded_namespaces = tuple(excluded_namespaces)
        self.identity = identity
        self.startup_timeout = startup_timeout
        self.log_level = log_level
        self.pods_ready = pods_ready
        self.log = self.workdir / "kueue.log"
        self.config_file = self.workdir / "kueue-config.yaml"
        self.kubeconfig = self.workdir / "kueue.kubeconfig"
        self.webhook_port = 0
        self.health_port = 0
        self.process: subprocess.Popen | None = None
        self.release: Release | None = None
        self._api: Api | None = None
        self._webhooks: list[dict[str, Any]] = []
        self._log_handle = None
        self._last_probe: str | None = None
        self._step = "init"

    # -- public ---------------------------------------------------------------------------

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = Api(self.admin_kubeconfig, self.workdir / "admin-client")
        return self._api

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self) -> Kueue:
        if self.process is not None:
            raise RuntimeError("already started")
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10) -> None:
        """End the process (SIGTERM, SIGKILL after `timeout`) and remove the webhook configurations."""
        process, self.process = self.process, None
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process, signal.SIGKILL)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        for webhook in self._webhooks:
            try:
                self.api.delete(webhook)
            except (ApiError, OSError, http.client.HTTPException):  # the API server may be gone already
                pass
        self._webhooks = []
        if self._api is not None:
            self._api.close()
            self._api = None
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def __enter__(self) -> Kueue:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create_queues(self, namespace: str, quota: Mapping[str, str], local_queue: str = "default",
                      cluster_queue: str = "cluster-queue", flavor: str = "default-flavor") -> list[dict[str, Any]]:
        """A ResourceFlavor, a ClusterQueue with `quota` and a LocalQueue in `namespace` (which must
        exist), through Kueue's webhooks; returns them as stored once the ClusterQueue is Active."""
        stored = [self._apply_retrying(obj, "create the queues")
                  for obj in queue_objects(namespace, quota, local_queue, cluster_queue, flavor)]
        self._step = "queues"
        self._wait(lambda: cluster_queue_active(self.api.get(stored[1])), f"ClusterQueue {cluster_queue} to be Active")
        self._step = "running"
        return stored

    def serve_namespace(self, namespace: str, quota: Mapping[str, str], local_queue: str = "default",
                        cluster_queue: str = "cluster-queue") -> list[dict[str, Any]]:
        """The namespace (created if absent) with a LocalQueue onto a ClusterQueue of `quota`: what
        `python -m pets_localkube.kueue` and `local up --with-kueue` set up after `start()`."""
        self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        return self.create_queues(namespace, quota, local_queue, cluster_queue)

    def create_priority_class(self, name: str, value: int, description: str = "") -> dict[str, Any]:
        """A WorkloadPriorityClass (through Kueue's webhooks)."""
        return self._apply_retrying(workload_priority_class(name, value, description), "create the priority class")

    # -- the steps ------------------------------------------------------------------------

    def _fail(self, message: str, with_log: bool = False) -> KueueError:
        text = f"step '{self._step}': {message}"
        if with_log:
            text += f"; see {self.log}"
            tail = _tail(self.log)
            if tail:
                text += f"\n--- last lines of {self.log.name} ---\n{tail}"
        return KueueError(text)

    def _start(self) -> None:
        self._step = "locate kueue"
        self.release = release = locate_release(self.bin_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.webhook_port, self.health_port = free_port(), free_port()
        while self.health_port == self.webhook_port:
            self.health_port = free_port()

        self._step = "certificates"
        pki_dir = self.workdir / "pki"
        pki_dir.mkdir(exist_ok=True)
        ca, serving = webhook_certificates(Pki(pki_dir))
        cert_dir = self.workdir / "webhook-certs"
        cert_dir.mkdir(exist_ok=True)
        for source, target in ((serving.cert, "tls.crt"), (serving.key, "tls.key")):
            (cert_dir / target).write_bytes(source.read_bytes())
            os.chmod(cert_dir / target, 0o600)
        ca_bundle = _b64(ca.cert.read_bytes())

        try:
            self._step = "namespace"
            self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

            self._step = "CRDs"
            installed = [self.api.apply(crd) for crd in crds(release.config_dir, self.webhook_url, ca_bundle)]
            for crd in installed:
                self._wait(lambda crd=crd: _established(self.api.get(crd)), f"CRD {crd['metadata']['name']} to be Established")

            self._step = "webhook secret"
            self.api.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
                            "data": {"ca.crt": ca_bundle, "ca.key": _b64(ca.key.read_bytes()),
                                     "tls.crt": _b64(serving.cert.read_bytes()),
                                     "tls.key": _b64(serving.key.read_bytes())}})

            self._step = "identity"
            if self.identity == "kueue":
                for obj in rbac(release.config_dir):
                    self.api.apply(obj)
                self.kubeconfig.write_text(self._signed_kubeconfig(pki_dir))
            else:
                self.kubeconfig.write_text(self.admin_kubeconfig.read_text())
            os.chmod(self.kubeconfig, 0o600)

            self._step = "webhook configurations"
            for webhook in webhook_configurations(release.config_dir, self.webhook_url, ca_bundle):
                self._webhooks.append({k: webhook[k] for k in ("apiVersion", "kind")} |
                                      {"metadata": {"name": webhook["metadata"]["name"]}})
                self.api.apply(webhook)
        except ApiError as error:
            raise self._fail(f"the API server refused it: {error}") from error

        self._step = "start kueue"
        self.config_file.write_text(yaml.safe_dump(configuration(
            self.webhook_port, self.health_port, cert_dir, self.excluded_namespaces,
            pods_ready=self.pods_ready), sort_keys=False))
        self._log_handle = open(self.log, "wb")
        command = [str(release.binary), f"--config={self.config_file}", f"--kubeconfig={self.kubeconfig}",
                   f"--zap-log-level={self.log_level}", "--zap-devel=false"]
        self._log_handle.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(command)}\n".encode())
        self._log_handle.flush()
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log_handle,
                                            stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True)
        except OSError as error:
            raise self._fail(f"could not run {command[0]}: {error}") from error

        self._step = "wait for readyz"
        self._wait(self._ready, f"Kueue's /readyz on 127.0.0.1:{self.health_port}")
        # The whole path: the API server calls the webhook at its URL and verifies its certificate.
        self._step = "wait for the webhook"
        probe = queue_objects("default", {"cpu": "1"}, "probe", "pets-webhook-probe", "pets-webhook-probe")[1]
        self._wait(lambda: self._answers(probe), f"the webhook at {self.webhook_url} to answer the API server")
        self._step = "running"

    def _ready(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=2)
        try:
            connection.request("GET", "/readyz")
            return connection.getresponse().status == 200
        finally:
            connection.close()

    def _answers(self, probe: Mapping[str, Any]) -> bool:
        try:
            self.api.apply(probe, dry_run=True)
            return True
        except ApiError as error:
            if error.status in (404, 500) or "failed calling webhook" in str(error):
                self._last_probe = str(error)
                return False  # not served yet, or the webhook not reached yet
            raise

    def _apply_retrying(self, obj: Mapping[str, Any], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.api.apply(obj)
            except ApiError as error:
                retry = error.status in (404, 500, 503) or "failed calling webhook" in str(error)
                if not retry or time.monotonic() > deadline:
                    raise KueueError(f"{what}: {obj['kind']} {obj['metadata']['name']} was refused: "
                                     f"{error}") from error
            time.sleep(0.5)

    def _signed_kubeconfig(self, pki_dir: Path) -> str:
        """A kubeconfig for USER with a client certificate the cluster signs (CSR API)."""
        key, request = client_certificate_request(Pki(pki_dir), USER)
        name = f"{USER}-{os.urandom(4).hex()}"
        csr = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": name},
               "spec": {"request": _b64(request.read_bytes()), "signerName": "kubernetes.io/kube-apiserver-client",
                        "usages": ["client auth"], "expirationSeconds": 7 * 24 * 3600}}
        self.api.call("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", csr)
        created = self.api.get(csr) or {}
        created.setdefault("status", {})["conditions"] = [{
            "type": "Approved", "status": "True", "reason": "PetsLocalKueue",
            "message": "approved by pets_localkube.kueue for the local Kueue process"}]
        self.api.call("PUT", object_path(csr) + "/approval", created)
        signed = self._wait(lambda: ((self.api.get(csr) or {}).get("status") or {}).get("certificate"),
                            f"CertificateSigningRequest {name} to be signed (the kube-controller-manager's "
                            f"csrsigning controller; without one, use identity='admin')")
        self.api.delete(csr)
        cluster, _ = _current(yaml.safe_load(self.admin_kubeconfig.read_text()))
        cluster = {"server": cluster["server"], "certificate-authority-data": _b64(
            _pem_text(cluster, "certificate-authority", self.admin_kubeconfig.parent).encode())}
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": USER, "user": {"client-certificate-data": signed,
                                              "client-key-data": _b64(key.read_bytes())}}],
            "contexts": [{"name": USER, "context": {"cluster": "cluster", "user": USER}}],
            "current-context": USER,
        }, sort_keys=False)

    def _wait(self, ready: Callable[[], Any], what: str, interval: float = 0.25) -> Any:
        """Poll `ready()` until truthy; fail if the process exits or on the timeout."""
        deadline = time.monotonic() + self.startup_timeout
        last_error: object = None
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise self._fail(f"kueue exited early with code {self.process.returncode}", with_log=True)
            try:
                value = ready()
                if value:
                    return value
            except (OSError, http.client.HTTPException) as error:
                last_error = error
            except ApiError as error:
                raise self._fail(f"waiting for {what}: {error}", with_log=self.process is not None) from error
            if time.monotonic() > deadline:
                last = self._last_probe or last_error
                raise self._fail(f"no {what} after {self.startup_timeout:.0f} s (last: {last!r})",
                                 with_log=self.process is not None)
            time.sleep(interval)


def webhook_certificates(pki: Pki) -> tuple[Certificate, Certificate]:
    """A CA valid for CA_NAME and a serving certificate it signs, valid for the webhook Service's
    name (what Kueue's cert rotator checks) and for 127.0.0.1 (what the API server calls)."""
    ca = Certificate(pki.directory / "kueue-ca.crt", pki.directory / "kueue-ca.key")
    pki._key(ca.key, rsa=True)
    # Kueue's rotator reads the CA key as PKCS #1 ("RSA PRIVATE KEY"); OpenSSL 3 writes PKCS #8.
    try:
        pki._run("rsa", "-in", str(ca.key), "-traditional", "-out", str(ca.key))
    except ControlPlaneError:
        pki._run("rsa", "-in", str(ca.key), "-out", str(ca.key))  # OpenSSL 1.1.1: PKCS #1 already, no flag
    ext = pki.directory / "kueue-ca.ext"
    ext.write_text("[v3_ca]\nbasicConstraints=critical,CA:TRUE\n"
                   "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
                   f"subjectKeyIdentifier=hash\nsubjectAltName=DNS:{CA_NAME}\n")
    pki._run("req", "-x509", "-new", "-key", str(ca.key), "-sha256", "-days", "3650",
             "-subj", f"/O=kueue/CN={CA_NAME}", "-config", str(ext), "-extensions", "v3_ca", "-out", str(ca.cert))
    serving = pki.issue(ca, "kueue-webhook", f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc", server=True,
                        dns=[f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"], ips=["127.0.0.1"], rsa=True)
    return ca, serving


def client_certificate_request(pki: Pki, user: str) -> tuple[Path, Path]:
    """A key and a CSR (PEM) for `user`."""
    key, request = pki.directory / f"{user}.key", pki.directory / f"{user}.csr"
    pki._key(key)
    pki._run("req", "-new", "-key", str(key), "-subj", f"/CN={user}", "-out", str(request))
    return key, request


def _established(crd: Mapping[str, Any] | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pets_localkube.kueue",
        description="Install Kueue (built by hack/kueue.sh) into a cluster, run its controller manager here "
                    "until interrupted, with a ResourceFlavor, a ClusterQueue and a LocalQueue in a namespace.")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="an admin's kubeconfig")
    parser.add_argument("--namespace", required=True, help="where the LocalQueue goes (created if absent)")
    parser.add_argument("--quota", type=parse_quota, required=True,
                        help="the ClusterQueue's nominal quota, e.g. cpu=1,memory=2Gi")
    parser.add_argument("--local-queue", default="default", help="the LocalQueue's name (default: default)")
    parser.add_argument("--cluster-queue", default="cluster-queue")
    parser.add_argument("--workdir", type=Path, default=None, help="certificates, configuration, log "
                                                                    "(default: a new temporary directory)")
    parser.add_argument("--exclude-namespace", action="append", default=[],
                        help="a namespace Kueue does not manage (on top of the system ones); repeatable")
    parser.add_argument("--identity", choices=("kueue", "admin"), default="kueue")
    parser.add_argument("--wait-for-pods-ready", type=float, metavar="SECONDS", default=None,
                        help="turn on Kueue's waitForPodsReady with this timeout: a group whose pods are not "
                             "all Ready in time is evicted and requeued")
    parser.add_argument("--bin-dir", type=Path, help=f"the kueue binary's directory (default: ${BIN_DIR_ENV}, "
                                                     f"else what hack/kueue.sh built)")
    args = parser.parse_args(argv)
    if args.workdir is None:
        import tempfile

        args.workdir = Path(tempfile.mkdtemp(prefix="pets-kueue-"))

    kueue = Kueue(args.kubeconfig, args.workdir, bin_dir=args.bin_dir, excluded_namespaces=args.exclude_namespace,
                  identity=args.identity,
                  pods_ready=None if args.wait_for_pods_ready is None else wait_for_pods_ready(args.wait_for_pods_ready))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    try:
        kueue.start()
        kueue.serve_namespace(args.namespace, args.quota, args.local_queue, args.cluster_queue)
    except KueueError as error:
        print(f"error: {error}", file=sys.stderr)
        kueue.stop()
        return 1
    print(json.dumps({"webhook": kueue.webhook_url, "log": str(kueue.log), "pid": kueue.process.pid,
                      "localQueue": f"{args.namespace}/{args.local_queue}", "clusterQueue": args.cluster_queue,
                      "quota": args.quota}), flush=True)
    try:
        while not stopping.wait(1):
            if kueue.process is not None and kueue.process.poll() is not None:
                print(f"error: kueue exited with code {kueue.process.returncode}; see {kueue.log}", file=sys.stderr)
                return 1
    finally:
        kueue.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
