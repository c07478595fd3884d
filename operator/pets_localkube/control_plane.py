"""Kubernetes' own control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, the real binaries that `hack/control_plane.sh` builds from Go modules.

Where the emulated API server (`pets_localkube.server`) stands in for Kubernetes, this runs the
real one: the CRD's OpenAPI schema and CEL rules, admission (PodSecurity, NodeRestriction, the
ServiceAccount plugin), RBAC with Node authorization, the garbage collector, the namespace,
serviceaccount, job and ttl-after-finished controllers and the scheduler are Kubernetes' code.
There is no kubelet: pods are scheduled to nodes but nothing runs them.

    with KubernetesControlPlane(workdir=Path("/tmp/cp"), port=6443) as cp:
        print(cp.kubeconfig)        # the admin kubeconfig (system:masters), certificates embedded

    python -m pets_localkube.control_plane --workdir DIR --port 6443 --kubeconfig-out FILE

Everything lives in the work directory: the PKI (made with the `openssl` command, no Python
dependency), each component's kubeconfig, etcd's data and one log file per component
(`logs/<component>.log`); each start makes a new cluster there (new certificates, empty etcd).
Every process runs in its own process group; `stop()` ends the groups, and a start that fails
at any step ends whatever it had started before raising `ControlPlaneError`, which names the
step and the log file to read. `kill(component)` ends one component with SIGKILL, as a crash would,
and `start_again(component)` runs it with the same command line (data directory, certificates, port)
until it is ready: a control-plane restart under a running cluster.
"""
from __future__ import annotations

import argparse
import atexit
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
ETCD = "etcd"
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service
CLUSTER_DOMAIN = "cluster.local"
CLUSTER_NAME = "pets-control-plane"
SERVICE_ACCOUNT_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
# Admission plugins on top of the defaults (PodSecurity is one of those; named so it never goes).
ADMISSION_PLUGINS = "NodeRestriction,PodSecurity"

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "control_plane.sh"
BIN_DIR_ENV = "PETS_CONTROL_PLANE_BIN"


class ControlPlaneError(RuntimeError):
    """A start that failed (or binaries that are missing); the message names the step and log."""


# ------------------------------------------------------------------------------------------
# The binaries
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Binaries:
    directory: Path

    def path(self, component: str) -> Path:
        return self.directory / component

    def check(self) -> None:
        missing = [name for name in COMPONENTS if not os.access(self.path(name), os.X_OK)]
        if missing:
            raise ControlPlaneError(
                f"step 'locate binaries': {', '.join(missing)} missing in {self.directory}; "
                f"build them with {_script_hint()} (it prints the bin directory), "
                f"or point {BIN_DIR_ENV} at a directory that has all of {', '.join(COMPONENTS)}")


def _script_hint() -> str:
    return str(BUILD_SCRIPT) if BUILD_SCRIPT.is_file() else "hack/control_plane.sh (in the repository)"


def pinned_versions(script: Path = BUILD_SCRIPT) -> dict[str, str]:
    """The pins of `hack/control_plane.sh`: {'kubernetes': 'v1.X.Y', 'etcd': 'v3.X.Y'}."""
    result = subprocess.run(["bash", str(script), "--versions"], capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)


def locate_binaries(bin_dir: Path | str | None = None) -> Binaries:
    """The bin directory: the argument, else $PETS_CONTROL_PLANE_BIN, else what the build script
    reports as built for its pin (`--check`, never a build). Raises ControlPlaneError if absent."""
    if bin_dir is None and os.environ.get(BIN_DIR_ENV):
        bin_dir = os.environ[BIN_DIR_ENV]
    if bin_dir is None:
        if not BUILD_SCRIPT.is_file():
            raise ControlPlaneError(
                f"step 'locate binaries': no bin directory given and no build script at {BUILD_SCRIPT}; "
                f"pass bin_dir or set {BIN_DIR_ENV}")
        result = subprocess.run(["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True)
        if result.returncode != 0:
            raise ControlPlaneError(
                f"step 'locate binaries': the control plane is not built; run {BUILD_SCRIPT} "
                f"(once per pin: it builds Kubernetes and etcd from Go modules and prints the bin directory)")
        bin_dir = result.stdout.strip().splitlines()[-1]
    binaries = Binaries(Path(bin_dir))
    binaries.check()
    return binaries


def build_binaries(script: Path = BUILD_SCRIPT) -> Binaries:
    """Run the build script (seconds when warm; a cold build takes tens of minutes)."""
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"step 'build binaries': {script} failed with exit code {result.returncode} "
                                f"(its messages are above)")
    return locate_binaries(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# The PKI, with the openssl command
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path


class Pki:
    """CA-signed certificates in a directory, made with `openssl` (1.1.1 or 3.x)."""

    def __init__(self, directory: Path, openssl: str | None = None):
        self.directory = directory
        self.openssl = openssl or shutil.which("openssl")
        if not self.openssl:
            raise ControlPlaneError("step 'certificates': the openssl command is not on PATH; install openssl")

    def _run(self, *args: str) -> None:
        result = subprocess.run([self.openssl, *args], capture_output=True, text=True)
        if result.returncode != 0:
            raise ControlPlaneError(f"step 'certificates': openssl {args[0]} failed: {result.stderr.strip()[-800:]}")

    def _key(self, path: Path, rsa: bool = False) -> None:
        if rsa:
            self._run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path))
        else:
            self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
        os.chmod(path, 0o600)

    def ca(self, name: str, common_name: str) -> Certificate:
        ca = Certificate(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        self._key(ca.key)
        ext = self.directory / f"{name}.ext"
        ext.write_text("[v3_ca]\nbasicConstraints=critical,CA:TRUE\n"
                       "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
                       "subjectKeyIdentifier=hash\n")
        self._run("req", "-x509", "-new", "-key", str(ca.key), "-sha256", "-days", "3650",
                  "-subj", f"/CN={common_name}", "-config", str(ext), "-extensions", "v3_ca",
                  "-out", str(ca.cert))
        return ca

    def issue(self, ca: Certificate, name: str, common_name: str, organizations: Sequence[str] = (),
              server: bool = False, client: bool = False, dns: Sequence[str] = (),
              ips: Sequence[str] = (), rsa: bool = False) -> Certificate:
        leaf = Certificate(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        self._key(leaf.key, rsa=rsa)
        csr = self.directory / f"{name}.csr"
        subject = "".join(f"/O={org}" for org in organizations) + f"/CN={common_name}"
        self._run("req", "-new", "-key", str(leaf.key), "-subj", subject, "-out", str(csr))
        usages = [usage for usage, wanted in (("serverAuth", server), ("clientAuth", client)) if wanted]
        lines = ["basicConstraints=critical,CA:FALSE",
                 "keyUsage=critical,digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={','.join(usages)}",
                 "authorityKeyIdentifier=keyid"]
        alt = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        if alt:
            lines.append(f"subjectAltName={','.join(alt)}")
        ext = self.directory / f"{name}.ext"
        ext.write_text("\n".join(lines) + "\n")
        self._run("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
                  "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-sha256", "-days", "825",
                  "-extfile", str(ext), "-out", str(leaf.cert))
        csr.unlink()
        return leaf

    def service_account_keys(self) -> tuple[Path, Path]:
        key, public = self.directory / "sa.key", self.directory / "sa.pub"
        self._key(key, rsa=True)
        self._run("pkey", "-in", str(key), "-pubout", "-out", str(public))
        return key, public


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_text(server: str, ca: Path, client: Certificate, user: str, embed: bool = True,
                    context: str = CLUSTER_NAME) -> str:
    """A kubeconfig with a client certificate (embedded, or by path)."""
    if embed:
        cluster_ca = f"certificate-authority-data: {_b64(ca)}"
        creds = f"client-certificate-data: {_b64(client.cert)}\n    client-key-data: {_b64(client.key)}"
    else:
        cluster_ca = f"certificate-authority: {ca}"
        creds = f"client-certificate: {client.cert}\n    client-key: {client.key}"
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {CLUSTER_NAME}
  cluster:
    server: {server}
    {cluster_ca}
users:
- name: {user}
  user:
    {creds}
contexts:
- name: {context}
  context:
    cluster: {CLUSTER_NAME}
    user: {user}
    namespace: default
current-context: {context}
"""


# ------------------------------------------------------------------------------------------
# Ports and probes
# ------------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener holds the port (SO_REUSEADDR, as Go sets it: TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def _https_get(host: str, port: int, path: str, context: ssl.SSLContext, timeout: float = 5) -> tuple[int, str]:
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def _client_context(ca: Path | None, client: Certificate | None) -> ssl.SSLContext:
    if ca is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the components' self-signed serving certs: health only
    else:
        context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


# ------------------------------------------------------------------------------------------
# The control plane
# ------------------------------------------------------------------------------------------

_LIVE: set[KubernetesControlPlane] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:  # an interpreter that exits without stop() leaves nothing behind
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        plane.stop()


class KubernetesControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler, on 127.0.0.1.

    `port` is the API server's secure port (0: a free one). The admin kubeconfig is written to
    `kubeconfig_out` if given, and always to `<workdir>/admin.kubeconfig` (`self.kubeconfig`).
    `extra_args` adds flags per component name (e.g. {"kube-apiserver": ["--v=4"]}).
    """

    def __init__(self, workdir: Path | str, port: int = 6443, bin_dir: Path | str | None = None,
                 kubeconfig_out: Path | str | None = None, host: str = "127.0.0.1",
                 startup_timeout: float = 180, extra_args: Mapping[str, Iterable[str]] | None = None):
        self.workdir = Path(workdir).resolve()
        self.requested_port = port
        self.port = port
        self.bin_dir = bin_dir
        self.kubeconfig_out = Path(kubeconfig_out).resolve() if kubeconfig_out else None
        self.host = host
        self.startup_timeout = startup_timeout
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        unknown = set(self.extra_args) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"extra_args for unknown components: {sorted(unknown)}")
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.logs = {name: self.workdir / "logs" / f"{name}.log" for name in COMPONENTS}
        self.processes: dict[str, subprocess.Popen] = {}
        self.commands: dict[str, list[str]] = {}  # each component's command line, to start it again as it was
        self._ready: dict[str, Callable[[], bool]] = {}  # each component's readiness probe
        self._log_handles: list = []
        self._lock = threading.Lock()
        self._step = "init"

    # -- public ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def process_ids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def start(self) -> KubernetesControlPlane:
        if self.processes:
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
        """End every process group started, newest first (the scheduler and controller manager,
        then the API server while etcd still answers, then etcd): SIGTERM, SIGKILL after `timeout`."""
        with self._lock:
            for _name, process in list(self.processes.items())[::-1]:
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
                _signal_group(process, signal.SIGKILL)  # stragglers of the group, or the leader itself
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            self.processes.clear()
            for handle in self._log_handles:
                handle.close()
            self._log_handles = []
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def kill(self, component: str) -> None:
        """kill -9 one component's process group, as a crash would end it; its data directory,
        certificates, port and command line stay, for `start_again`."""
        with self._lock:
            process = self.processes.pop(component, None)
        if process is None:
            raise ValueError(f"{component} is not running (running: {', '.join(self.processes) or 'none'})")
        _signal_group(process, signal.SIGKILL)
        process.wait(10)

    def start_again(self, component: str) -> None:
        """Start a killed component with the command line it had (same data directory, certificates and
        port; its log is appended to) and wait until it is ready, as its first start did."""
        if component in self.processes:
            raise ValueError(f"{component} is running; kill it first")
        if component not in self.commands:
            raise ValueError(f"{component} was never started here")
        self._step = f"start {component} again"
        self._spawn(component, None, self.commands[component], append=True)
        self._wait(component, self._ready[component])
        self._step = "running"

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, as kube-apiserver does every 5 minutes, through
        etcd's JSON gateway; returns the revision. A watch asked from an older resourceVersion is a 410 Gone."""
        url = next(arg.split("=", 1)[1] for arg in self.commands[ETCD] if arg.startswith("--listen-client-urls="))
        pki = self.workdir / "pki"
        context = _client_context(pki / "etcd-ca.crt", Certificate(pki / "apiserver-etcd-client.crt",
                                                                    pki / "apiserver-etcd-client.key"))
        host, port = url.removeprefix("https://").rsplit(":", 1)

        def post(path: str, body: dict) -> dict:
            connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
            try:
                connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                response = connection.getresponse()
                text = response.read().decode()
                if response.status != 200:
                    raise ControlPlaneError(f"etcd {path}: {response.status} {text[:300]}")
                return json.loads(text)
            finally:
                connection.close()

        revision = int(post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def __enter__(self) -> KubernetesControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the steps ------------------------------------------------------------------------

    def _fail(self, message: str, component: str | None = None) -> ControlPlaneError:
        text = f"step '{self._step}': {message}"
        if component:
            log = self.logs[component]
            text += f"; see {log}"
            tail = _tail(log)
            if tail:
                text += f"\n--- last lines of {log.name} ---\n{tail}"
        return ControlPlaneError(text)

    def _start(self) -> None:
        self._step = "locate binaries"
        binaries = locate_binaries(self.bin_dir)

        self._step = "check ports"
        if self.port == 0:
            self.port = free_port(self.host)
        elif port_in_use(self.port, self.host):
            raise self._fail(f"port {self.port} on {self.host} is already in use (the API server's "
                             f"secure port); stop what listens there or choose another port")
        etcd_client, etcd_peer, kcm_port, sched_port = (free_port(self.host) for _ in range(4))

        self._step = "certificates"
        # Every start is a new cluster: new PKI, empty etcd (tokens signed by an old key would not verify).
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        for sub in ("pki", "logs", "etcd", "kube-controller-manager", "kube-scheduler"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        pki_dir = self.workdir / "pki"
        pki = Pki(pki_dir)
        ca = pki.ca("ca", "pets-control-plane-ca")
        etcd_ca = pki.ca("etcd-ca", "pets-control-plane-etcd-ca")
        front_proxy_ca = pki.ca("front-proxy-ca", "pets-control-plane-front-proxy-ca")
        apiserver_cert = pki.issue(
            ca, "apiserver", "kube-apiserver", server=True,
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 f"kubernetes.default.svc.{CLUSTER_DOMAIN}"],
            ips=sorted({"127.0.0.1", SERVICE_IP, self.host}))
        kubelet_client = pki.issue(ca, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                   organizations=["system:masters"], client=True)
        admin = pki.issue(ca, "admin", "kubernetes-admin", organizations=["system:masters"], client=True)
        kcm_cert = pki.issue(ca, "kube-controller-manager", "system:kube-controller-manager", client=True)
        sched_cert = pki.issue(ca, "kube-scheduler", "system:kube-scheduler", client=True)
        front_proxy_client = pki.issue(front_proxy_ca, "front-proxy-client", "front-proxy-client", client=True)
        etcd_server = pki.issue(etcd_ca, "etcd-server", "etcd", server=True, client=True,
                                dns=["localhost"], ips=["127.0.0.1"])
        etcd_client_cert = pki.issue(etcd_ca, "apiserver-etcd-client", "kube-apiserver-etcd-client", client=True)
        sa_key, sa_pub = pki.service_account_keys()

        self._step = "kubeconfigs"
        self.kubeconfig.write_text(kubeconfig_text(self.url, ca.cert, admin, "kubernetes-admin"))
        os.chmod(self.kubeconfig, 0o600)
        kcm_kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        kcm_kubeconfig.write_text(kubeconfig_text(self.url, ca.cert, kcm_cert, "system:kube-controller-manager",
                                                  embed=False))
        sched_kubeconfig = self.workdir / "kube-scheduler.kubeconfig"
        sched_kubeconfig.write_text(kubeconfig_text(self.url, ca.cert, sched_cert, "system:kube-scheduler",
                                                    embed=False))

        self._step = "start etcd"
        etcd_url = f"https://127.0.0.1:{etcd_client}"
        self._spawn(ETCD, binaries, [
            "--name=pets-control-plane",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=pets-control-plane=http://127.0.0.1:{etcd_peer}",
            "--initial-cluster-state=new",
            f"--cert-file={etcd_server.cert}", f"--key-file={etcd_server.key}",
            "--client-cert-auth=true", f"--trusted-ca-file={etcd_ca.cert}",
            "--log-level=warn",
            "--quota-backend-bytes=2147483648",
            "--unsafe-no-fsync=true",  # a throwaway test store: no fsync stalls on slow disks
        ])
        etcd_context = _client_context(etcd_ca.cert, etcd_client_cert)
        self._ready[ETCD] = lambda: _https_get("127.0.0.1", etcd_client, "/health", etcd_context, 2)[0] == 200
        self._wait(ETCD, self._ready[ETCD])

        self._step = "start kube-apiserver"
        self._spawn(APISERVER, binaries, [
            f"--advertise-address={self.host}",
            # The `kubernetes` Service's endpoints would be the advertised address, and Endpoints
            # refuse loopback ones (the API server exits): no reconciler, so no endpoints.
            "--endpoint-reconciler-type=none",
            f"--bind-address={self.host}",
            f"--secure-port={self.port}",
            f"--etcd-servers={etcd_url}",
            f"--etcd-cafile={etcd_ca.cert}", f"--etcd-certfile={etcd_client_cert.cert}",
            f"--etcd-keyfile={etcd_client_cert.key}",
            f"--client-ca-file={ca.cert}",
            f"--tls-cert-file={apiserver_cert.cert}", f"--tls-private-key-file={apiserver_cert.key}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={ADMISSION_PLUGINS}",
            "--allow-privileged=true",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={kubelet_client.cert}",
            f"--kubelet-client-key={kubelet_client.key}",
            f"--kubelet-certificate-authority={ca.cert}",
            f"--requestheader-client-ca-file={front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_proxy_client.cert}",
            f"--proxy-client-key-file={front_proxy_client.key}",
            f"--cert-dir={pki_dir}",
            "--profiling=false",
        ])
        admin_context = _client_context(ca.cert, admin)
        self._ready[APISERVER] = lambda: _https_get(self.host, self.port, "/readyz", admin_context)[0] == 200
        self._wait(APISERVER, self._ready[APISERVER])

        self._step = "start kube-controller-manager"
        self._spawn(CONTROLLER_MANAGER, binaries, [
            f"--kubeconfig={kcm_kubeconfig}",
            f"--authentication-kubeconfig={kcm_kubeconfig}",
            f"--authorization-kubeconfig={kcm_kubeconfig}",
            f"--bind-address={self.host}",
            f"--secure-port={kcm_port}",
            f"--cert-dir={self.workdir / 'kube-controller-manager'}",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--root-ca-file={ca.cert}",
            f"--service-account-private-key-file={sa_key}",
            f"--cluster-signing-cert-file={ca.cert}",
            f"--cluster-signing-key-file={ca.key}",
            f"--cluster-name={CLUSTER_NAME}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
            "--profiling=false",
        ])
        self._step = "start kube-scheduler"
        self._spawn(SCHEDULER, binaries, [
            f"--kubeconfig={sched_kubeconfig}",
            f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
            f"--bind-address={self.host}",
            f"--secure-port={sched_port}",
            f"--cert-dir={self.workdir / 'kube-scheduler'}",
            "--leader-elect=false",
            "--profiling=false",
        ])
        health = _client_context(None, None)
        self._step = "wait for kube-controller-manager"
        self._ready[CONTROLLER_MANAGER] = lambda: _https_get(self.host, kcm_port, "/healthz", health)[0] == 200
        self._wait(CONTROLLER_MANAGER, self._ready[CONTROLLER_MANAGER])
        self._step = "wait for kube-scheduler"
        self._ready[SCHEDULER] = lambda: _https_get(self.host, sched_port, "/healthz", health)[0] == 200
        self._wait(SCHEDULER, self._ready[SCHEDULER])
        # The serviceaccount controllers at work (with their own credentials): pods can be created.
        self._step = "wait for the default ServiceAccount"
        self._wait(CONTROLLER_MANAGER, lambda: _https_get(
            self.host, self.port, "/api/v1/namespaces/default/serviceaccounts/default", admin_context)[0] == 200)

        self._step = "write the kubeconfig"
        if self.kubeconfig_out:
            self.kubeconfig_out.parent.mkdir(parents=True, exist_ok=True)
            self.kubeconfig_out.write_text(self.kubeconfig.read_text())
            os.chmod(self.kubeconfig_out, 0o600)
        self._step = "running"

    def _spawn(self, name: str, binaries: Binaries | None, args: list[str], append: bool = False) -> None:
        """Start a component: `binaries` and its arguments, or (binaries None) `args` as the whole command."""
        log = self.logs[name]
        handle = open(log, "ab" if append else "wb")
        self._log_handles.append(handle)
        command = args if binaries is None else [str(binaries.path(name)), *args, *self.extra_args.get(name, [])]
        self.commands[name] = command
        handle.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(command)}\n".encode())
        handle.flush()
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                       cwd=self.workdir, start_new_session=True)  # its own process group
        except OSError as error:
            raise self._fail(f"could not run {command[0]}: {error}", name) from error
        with self._lock:
            self.processes[name] = process

    def _wait(self, name: str, ready, interval: float = 0.25) -> None:
        """Poll `ready()` until true; fail if any started component exits or on the timeout."""
        deadline = time.monotonic() + self.startup_timeout
        last_error: object = None
        while True:
            for component, process in self.processes.items():
                code = process.poll()
                if code is not None:
                    raise self._fail(f"{component} exited early with code {code}", component)
            try:
                if ready():
                    return
            except (OSError, ssl.SSLError, http.client.HTTPException) as error:
                last_error = error
            if time.monotonic() > deadline:
                raise self._fail(f"{name} was not ready after {self.startup_timeout:.0f} s "
                                 f"(last probe error: {last_error!r})", name)
            time.sleep(interval)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pets_localkube.control_plane",
        description="Run Kubernetes' own control plane (etcd, kube-apiserver, kube-controller-manager, "
                    "kube-scheduler) on 127.0.0.1 until interrupted. Build the binaries first with "
                    "hack/control_plane.sh.")
    parser.add_argument("--workdir", type=Path, required=True, help="PKI, kubeconfigs, etcd data and logs")
    parser.add_argument("--port", type=int, default=6443, help="the API server's secure port (0: a free one)")
    parser.add_argument("--kubeconfig-out", type=Path, help="also write the admin kubeconfig here")
    parser.add_argument("--bin-dir", type=Path, help=f"the binaries (default: ${BIN_DIR_ENV}, "
                                                     f"else what hack/control_plane.sh built)")
    parser.add_argument("--startup-timeout", type=float, default=180)
    args = parser.parse_args(argv)

    plane = KubernetesControlPlane(args.workdir, port=args.port, bin_dir=args.bin_dir,
                                   kubeconfig_out=args.kubeconfig_out, startup_timeout=args.startup_timeout)
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        plane.start()
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"server": plane.url, "kubeconfig": str(args.kubeconfig_out or plane.kubeconfig),
                      "logs": str(plane.workdir / "logs"), "pids": plane.process_ids()}), flush=True)
    try:
        while not stopping.wait(1):
            for name, process in plane.processes.items():
                if process.poll() is not None:
                    print(f"error: {name} exited with code {process.returncode}; see {plane.logs[name]}",
                          file=sys.stderr)
                    return 1
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
