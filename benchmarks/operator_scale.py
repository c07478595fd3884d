"""The operator at hundreds to a thousand concurrent jobs, with simulated pods (no processes).

For each job count (default 100, 300, 1,000 concurrent 2-node jobs, 10 epochs each) it starts a
cluster whose pods are simulated, on one of two API servers (`--backend`):
  - `emulated`: the local cluster (`pets-operator local up --simulate`): the project's emulated API
    server, scheduler and kubelet in one process;
  - `kubernetes`: Kubernetes' own control plane (`local up --control-plane kubernetes --simulate`:
    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, built by hack/control_plane.sh)
    with the local kubelet registered as a real Node (its `pods` capacity raised to fit the jobs),
    the pods' logs served by the kubelet API that kube-apiserver proxies (TLS both ways);
  - `both`: each job count on the emulated server, then on kube-apiserver, back to back;
and the real operator (`python -m pets_operator run`) in its own process, creates the jobs at a
steady rate, and measures
  - creation -> all pods: from a job's create call returning to a watch seeing its last pod;
  - epoch line -> status: from the moment the simulated pod 0 writes an epoch line (the kubelet's
    timestamp in the log file) to the moment a watch of the jobs sees that epoch in status.epochs;
  - the operator process's peak RSS, CPU seconds, peak threads and peak open TCP connections, and
    its cost per job;
  - API requests per job by verb, resource and subresource: all clients' (the emulator's
    `localkube_api_requests_total`; kube-apiserver's own `apiserver_request_total`), and the
    operator's alone (the emulator counts by User-Agent; on kube-apiserver an audit policy logs the
    admin user's requests at RequestReceived, and the log is counted by User-Agent: kopf's, the
    official client's and the operator's log reader's);
  - apart: the cluster's processes' CPU seconds and peak RSS: the emulated cluster's one process,
    or kube-apiserver, etcd, kube-scheduler, kube-controller-manager and the kubelet (`local up`)
    each on its own.

    python benchmarks/operator_scale.py                        # 100, 300, 1000 jobs, emulated
    python benchmarks/operator_scale.py --backend both --jobs 100,300
    python benchmarks/operator_scale.py --quick --backend kubernetes   # 20 jobs, 3 epochs of 1 s: a smoke run
    python benchmarks/operator_scale.py --jobs 1000 --epoch-seconds 20

On kube-apiserver the rate limits of the control plane's own clients are raised so that they do not
decide the figures (`--scheduler-qps`: kube-scheduler's and kube-controller-manager's
`--kube-api-qps`, burst twice that; defaults 50 and 20). kube-apiserver keeps its defaults (400 +
200 requests in flight, API Priority and Fairness: the admin user, which the operator runs as, is
exempt; the kubelet is `system-nodes`). The operator's clients have no QPS limit.

`--baseline DIR` runs every job count twice, back to back, so before/after share the machine's load
of the moment: first with the operator of another source tree (DIR/operator first on the operator's
PYTHONPATH; the cluster stays this checkout's, which simulates the pods), then with this
checkout's; e.g. against the last commit:

    mkdir -p build/scale-baseline && git archive HEAD operator manifests | tar -x -C build/scale-baseline
    python benchmarks/operator_scale.py --baseline build/scale-baseline

Each round is bounded (`--round-timeout`), and a round that runs out reports what it saw (`epochs`
below the expected count, `inf` for pods never seen).
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml

from pets_api import GROUP, PLURAL, VERSION, metric_lines
from pets_localkube import logs as log_files

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "default"
USER_AGENT = "operator-scale-benchmark/1"
OPERATOR_CLIENTS = ("kopf", "OpenAPI-Generator", "pets-operator")  # the User-Agents of the operator's requests


# --- the processes ----------------------------------------------------------------------------

def process_usage(pid: int) -> dict[str, float]:
    """RSS (MiB), CPU (user+system seconds) and threads of a Linux process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = {line.split(":")[0]: line.split(":", 1)[1].split() for line in Path(f"/proc/{pid}/status").read_text().splitlines()}
    return {"rss": int(status["VmRSS"][0]) / 1024, "cpu": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            "threads": int(status["Threads"][0])}


def established_connections(pid: int) -> int:
    """TCP connections of the process in state ESTABLISHED."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "01" and parts[9] in inodes:
                count += 1
    return count


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
  users: ["kubernetes-admin"]
- level: None
"""


# an audit event's verb -> the verb label of kube-apiserver's (and the emulator's) request metrics
AUDIT_VERBS = {"create": "POST", "update": "PUT", "patch": "PATCH", "get": "GET", "list": "LIST", "watch": "WATCH",
               "delete": "DELETE", "deletecollection": "DELETECOLLECTION"}


class Cluster:
    """The cluster process (`pets-operator local up`), its API and its request counts."""

    def __init__(self, backend: str, workdir: Path, jobs: int, scheduler_qps: float, profiling: bool = False):
        self.backend, self.workdir = backend, workdir
        command = [sys.executable, "-m", "pets_operator", "local", "up", "--simulate", "--keep-logs",
                   "--workdir", str(workdir), "--cpu", "100000", "--memory", "100Ti", "--pods", str(2 * jobs + 20),
                   "--crd", str(REPO / "manifests" / "crd.yaml")]
        self.audit_log = workdir / "audit.log"
        if backend == "kubernetes":
            workdir.mkdir(parents=True, exist_ok=True)
            policy = workdir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            qps = f"{scheduler_qps:g}"
            burst = f"{2 * scheduler_qps:g}"
            command += ["--control-plane", "kubernetes",
                        f"--control-plane-arg=kube-apiserver=--audit-policy-file={policy}",
                        f"--control-plane-arg=kube-apiserver=--audit-log-path={self.audit_log}",
                        f"--control-plane-arg=kube-scheduler=--kube-api-qps={qps}",
                        f"--control-plane-arg=kube-scheduler=--kube-api-burst={burst}",
                        f"--control-plane-arg=kube-controller-manager=--kube-api-qps={qps}",
                        f"--control-plane-arg=kube-controller-manager=--kube-api-burst={burst}"]
            if profiling:  # the last of a repeated flag wins: this undoes the control plane's --profiling=false
                command.append("--control-plane-arg=kube-apiserver=--profiling=true")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = []
        for line in self.process.stdout:
            output.append(line)
            if line.startswith("export KUBECONFIG="):
                threading.Thread(target=self.process.stdout.read, daemon=True).start()  # keep the pipe drained
                self.kubeconfig = Path(line.split("=", 1)[1].strip())
                server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
                break
        else:
            raise RuntimeError(f"the cluster did not start (exit code {self.process.wait()}):\n{''.join(output[-30:])}")
        context = None
        if backend == "kubernetes":
            pki = workdir / "control-plane" / "pki"
            context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.api = Api(server, context)
        self.audit_offset = 0

    def components(self) -> dict[str, int]:
        """Name -> pid of each process of the cluster, measured apart."""
        if self.backend == "emulated":
            return {"cluster": self.process.pid}
        names = {"kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager"}
        found = {child.name(): child.pid for child in psutil.Process(self.process.pid).children(recursive=True)
                 if child.name() in names}
        return {**found, "kubelet": self.process.pid}  # `local up`: the kubelet, its API and the simulated pods

    def mark(self) -> None:
        if self.backend == "kubernetes":
            self.audit_offset = self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def request_counts(self) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
        """(all clients: (verb, resource, subresource) -> count, the operator's: (client, verb, resource,
        subresource) -> count), so far; the operator's since `mark()` on kube-apiserver."""
        if self.backend == "emulated":
            counts = self.api.local_counts()
            everyone: dict[tuple[str, ...], float] = {}
            for (_client, *call), value in counts.items():
                everyone[tuple(call)] = everyone.get(tuple(call), 0) + value
            return everyone, {key: value for key, value in counts.items() if key[0] in OPERATOR_CLIENTS}
        operator: dict[tuple[str, ...], float] = {}
        with self.audit_log.open("rb") as log:
            log.seek(self.audit_offset)
            for line in log:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                client = client_of(event.get("userAgent"))
                if client not in OPERATOR_CLIENTS:
                    continue
                ref = event.get("objectRef") or {}
                verb = AUDIT_VERBS.get(event.get("verb", ""), event.get("verb", "").upper())
                key = (client, verb, ref.get("resource", ""), ref.get("subresource", ""))
                operator[key] = operator.get(key, 0) + 1
        return self.api.apiserver_counts(), operator

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def client_of(user_agent: str | None) -> str:
    """The first product of a User-Agent, as the emulated server's metrics name the client."""
    return (user_agent or "").strip().split(" ", 1)[0].split("/", 1)[0]


class Sampler(threading.Thread):
    """Peak RSS, threads and connections of the operator, peak RSS of each cluster process, once a second."""

    def __init__(self, operator: int, components: dict[str, int]):
        super().__init__(daemon=True)
        self.operator, self.components = operator, components
        self.peak = {"rss": 0.0, "threads": 0, "connections": 0}
        self.component_rss = {name: 0.0 for name in components}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            self.sample()

    def sample(self) -> None:
        try:
            usage = process_usage(self.operator)
            connections = established_connections(self.operator)
            rss = {name: process_usage(pid)["rss"] for name, pid in self.components.items()}
        except (OSError, KeyError):  # a process gone (a zombie has no VmRSS)
            return
        for key, value in (("rss", usage["rss"]), ("threads", usage["threads"]), ("connections", connections)):
            self.peak[key] = max(self.peak[key], value)
        for name, value in rss.items():
            self.component_rss[name] = max(self.component_rss[name], value)


# --- the API, raw (a benchmark client must cost little next to what it measures) ---------------

class Api:
    def __init__(self, server: str, context: ssl.SSLContext | None = None):
        self.host, self.port = server.removeprefix("http://").removeprefix("https://").split(":")
        self.server, self.context = server, context

    def _connection(self, timeout: float | None = 60) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection(self.host, int(self.port), timeout=timeout, context=self.context)
        return http.client.HTTPConnection(self.host, int(self.port), timeout=timeout)

    def create(self, connection: http.client.HTTPConnection, path: str, body: dict) -> None:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json", "User-Agent": USER_AGENT})
        response = connection.getresponse()
        answer = response.read()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: {response.status} {answer[:300]!r}")

    def get_text(self, path: str) -> str:
        return self.get_bytes(path).decode()

    def get_bytes(self, path: str, timeout: float = 60) -> bytes:
        connection = self._connection(timeout=timeout)
        try:
            connection.request("GET", path, headers={"User-Agent": USER_AGENT})
            response = connection.getresponse()
            return response.read()
        finally:
            connection.close()

    def watch(self, path: str, stop: threading.Event):
        """(type, object) of a watch from now on, for ever: a refused or ended watch is asked again from the
        last resourceVersion seen (a custom resource's path can answer 404 for a moment after its CRD is
        Established, a watch can end), so no event is missed."""
        version = ""
        while not stop.is_set():
            connection = self._connection(timeout=None)
            try:
                query = f"watch=true&timeoutSeconds=3600{f'&resourceVersion={version}' if version else ''}"
                connection.request("GET", f"{path}?{query}", headers={"User-Agent": USER_AGENT})
                response = connection.getresponse()
                if response.status != 200:
                    if not stop.is_set():
                        print(f"watch {path}: {response.status} {response.read()[:200]!r}; again", file=sys.stderr)
                    time.sleep(0.2)
                    continue
                for line in response:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR" or "type" not in event:
                        print(f"watch {path}: {line[:300]!r}; again", file=sys.stderr)
                        version = "" if (event.get("object") or {}).get("code") == 410 else version
                        break
                    version = event["object"].get("metadata", {}).get("resourceVersion", version)
                    yield event["type"], event["object"]
            except (OSError, http.client.HTTPException, ValueError) as error:
                if not stop.is_set():
                    print(f"watch {path}: {error!r}; again", file=sys.stderr)
                time.sleep(0.2)
            finally:
                connection.close()

    def local_counts(self) -> dict[tuple[str, ...], float]:
        """(client, verb, resource, subresource) -> requests so far, from the emulated server's /metrics."""
        counts: dict[tuple[str, ...], float] = {}
        for labels, value in metric_samples(self.get_text("/metrics"), "localkube_api_requests_total"):
            key = tuple(labels.get(name, "") for name in ("client", "verb", "resource", "subresource"))
            counts[key] = counts.get(key, 0) + value
        return counts

    def apiserver_counts(self) -> dict[tuple[str, ...], float]:
        """(verb, resource, subresource) -> requests so far, all clients, from kube-apiserver's
        `apiserver_request_total` (a watch counts when it ends)."""
        counts: dict[tuple[str, ...], float] = {}
        for labels, value in metric_samples(self.get_text("/metrics"), "apiserver_request_total"):
            key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            counts[key] = counts.get(key, 0) + value
        return counts


def metric_samples(text: str, name: str):
    """(labels, value) of each sample of a Prometheus counter in a text exposition."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            pairs = {}
            for part in labels.split('",'):
                if "=" in part:
                    key, _, raw = part.partition("=")
                    pairs[key.strip(",")] = raw.strip('"')
            yield pairs, float(value)


class Watcher:
    """When each pod and each (job, epoch) in status.epochs was first seen."""

    def __init__(self, api: Api):
        self.api = api
        self.pod_seen: dict[str, float] = {}
        self.epoch_seen: dict[tuple[str, int], float] = {}
        self.phases: dict[str, str] = {}
        self.stopped = threading.Event()  # set at the round's end: the watches are not asked again

    def start(self) -> None:
        threading.Thread(target=self._pods, daemon=True).start()
        threading.Thread(target=self._jobs, daemon=True).start()

    def _pods(self) -> None:
        for _, pod in self.api.watch(f"/api/v1/namespaces/{NAMESPACE}/pods", self.stopped):
            self.pod_seen.setdefault(pod["metadata"]["name"], time.time())

    def _jobs(self) -> None:
        for _, job in self.api.watch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}", self.stopped):
            now = time.time()
            name, status = job["metadata"]["name"], job.get("status") or {}
            self.phases[name] = status.get("phase", "")
            for entry in status.get("epochs") or []:
                self.epoch_seen.setdefault((name, entry["epoch"]), now)


def job_body(name: str, epochs: int, epoch_seconds: float) -> dict:
    schedule = json.dumps({"epochSeconds": epoch_seconds})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
            "spec": {"numNodes": 2, "epochs": epochs, "data": {"synthetic": {}},
                     "env": [{"name": "PETS_SIMULATE", "value": schedule}]}}


def printed_times(cluster_dir: Path) -> dict[tuple[str, int], float]:
    """(job, epoch) -> when the simulated pod 0 wrote the epoch line (the kubelet's timestamp)."""
    times = {}
    for log in cluster_dir.glob(f"logs/{NAMESPACE}_*-0_*/*.log"):
        job = log.parent.name.split("_")[1].rsplit("-", 1)[0]
        for line in log.read_text().splitlines():
            stamp, text = log_files.split_line(line)
            event = metric_lines.parse_line(text)
            if stamp is not None and event is not None and event.get("event") == "epoch":
                times[(job, event["epoch"])] = stamp.timestamp()
    return times


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile; inf when there are none."""
    if not values:
        return math.inf
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "max": max(values) if values else math.inf}


def by_arrival(starts: list[float], latencies: list[float], begin: float, window: float = 5.0) -> list[dict]:
    """Latencies by when each began (a job's creation, an epoch line), in windows of `window` seconds from the
    round's first job: where in the round a tail sits."""
    windows: dict[int, list[float]] = {}
    for start, latency in zip(starts, latencies):
        windows.setdefault(int((start - begin) // window), []).append(latency)
    return [{"from_s": index * window, "count": len(values), **summary(values)} for index, values in sorted(windows.items())]


def save_profile(api: Api, target: Path, at: float, seconds: float) -> None:
    """kube-apiserver's CPU profile (net/http/pprof) from `at` (epoch seconds) for `seconds`, into `target`."""
    time.sleep(max(0.0, at - time.time()))
    data = api.get_bytes(f"/debug/pprof/profile?seconds={seconds:g}", timeout=seconds + 60)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    print(f"kube-apiserver's CPU profile: {target} (go tool pprof -top {target})", file=sys.stderr, flush=True)


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            return answer.read().decode()
    except OSError:
        return ""


def histogram_split(text: str, name: str, bound: float) -> dict[str, float | None]:
    """From a Prometheus histogram's buckets: how many observations it has, the share above `bound` (one of its
    bucket bounds: exact), and the upper bound of the bucket that holds the 99th percentile."""
    buckets = sorted((float(labels["le"]), count) for labels, count in metric_samples(text, name + "_bucket"))
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return {"count": 0.0, "share_over": None, "p99_at_most": None}
    within = next((count for le, count in buckets if le == bound), None)
    return {"count": total, "share_over": None if within is None else 1 - within / total,
            "p99_at_most": next(le for le, count in buckets if count >= 0.99 * total)}


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- one round --------------------------------------------------------------------------------

def per_job(counts: dict[tuple[str, ...], float], jobs: int) -> dict[str, float]:
    """'verb resource[ subresource]' -> requests per job, largest first."""
    return {" ".join(filter(None, key)): round(count / jobs, 2)
            for key, count in sorted(counts.items(), key=lambda item: -item[1]) if count}


def by_verb(counts: dict[tuple[str, ...], float], jobs: int) -> dict[str, float]:
    verbs: dict[str, float] = {}
    for key, count in counts.items():
        verbs[key[0]] = verbs.get(key[0], 0) + count
    return {verb: round(count / jobs, 2) for verb, count in sorted(verbs.items(), key=lambda item: -item[1]) if count}


def difference(after: dict, before: dict) -> dict:
    return {key: after[key] - before.get(key, 0) for key in after if after[key] - before.get(key, 0)}


def run_round(backend: str, jobs: int, epochs: int, epoch_seconds: float, rate: float, variant: str, workdir: Path,
              timeout: float, log_level: str, scheduler_qps: float, source: Path | None = None,
              profile: tuple[Path, float, float] | None = None) -> dict:
    """One round; `source`: run the operator of that tree (DIR/operator) instead of this one's; `variant` names the row;
    `profile`: (directory, start, seconds): kube-apiserver's CPU profile over that window of the round, written there."""
    cluster = Cluster(backend, workdir / "cluster", jobs, scheduler_qps, profiling=profile is not None)
    metrics_port = free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
           "PETS_OPERATOR_LOG_LEVEL": log_level, "PETS_OPERATOR_METRICS_PORT": str(metrics_port)}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source / "operator"), os.environ.get("PYTHONPATH")]))
    operator_log = workdir / "operator.log"
    with operator_log.open("wb") as log:
        operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    api = cluster.api
    watcher = Watcher(api)
    try:
        watcher.start()
        time.sleep(4)  # the operator started and idle
        idle = process_usage(operator.pid)
        components = cluster.components()
        sampler = Sampler(operator.pid, components)
        sampler.sample()
        sampler.start()
        cluster.mark()
        all_before, operator_before = cluster.request_counts()
        components_before = {name: process_usage(pid)["cpu"] for name, pid in components.items()}
        created: dict[str, float] = {}
        begin = time.time()
        if profile is not None and backend == "kubernetes":
            directory, start, seconds = profile
            target = directory / f"kube-apiserver-{jobs}-{variant}.pprof"
            threading.Thread(target=save_profile, args=(cluster.api, target, begin + start, seconds), daemon=True).start()
        connection = api._connection()
        for index in range(jobs):  # at a steady rate, as jobs arrive at a busy cluster
            name = f"bench-{index}"
            pause = begin + index / rate - time.time()
            if pause > 0:
                time.sleep(pause)
            api.create(connection, f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}",
                       job_body(name, epochs, epoch_seconds))
            created[name] = time.time()
        connection.close()
        deadline = begin + timeout
        while time.time() < deadline and not (len(watcher.epoch_seen) >= jobs * epochs and
                                              sum(p == "Succeeded" for p in watcher.phases.values()) >= jobs):
            time.sleep(0.5)
        end = time.time()
        exited = operator.poll()
        if exited is not None:
            print(f"the operator exited during the round, with {exited}; see {operator_log}", file=sys.stderr)
        busy = process_usage(operator.pid) if exited is None else {"cpu": math.nan}
        sampler.stopped.set()
        sampler.sample()
        components_after = {}
        for name, pid in components.items():
            try:
                components_after[name] = process_usage(pid)["cpu"]
            except OSError:
                components_after[name] = math.nan
        all_after, operator_after = cluster.request_counts()
        operator_metrics = scrape(metrics_port)
        to_pods = [max(watcher.pod_seen.get(f"{name}-{i}", math.inf) for i in (0, 1)) - start
                   for name, start in created.items()]
        printed = printed_times(workdir / "cluster")
        printed_at = [printed[key] for key in watcher.epoch_seen if key in printed]
        to_status = [seen - printed[key] for key, seen in watcher.epoch_seen.items() if key in printed]
        everyone = difference(all_after, all_before)
        everyone.pop(("", "", ""), None)  # /metrics and discovery: the benchmark's own scrapes among them
        ops = difference(operator_after, operator_before)
        ops_calls = {}
        for (_client, *call), count in ops.items():
            ops_calls[tuple(call)] = ops_calls.get(tuple(call), 0) + count
        operator_requests = sum(ops.values())
        cpu = busy["cpu"] - idle["cpu"]
        return {
            "backend": backend, "operator_source": variant, "jobs": jobs, "epochs": epochs,
            "epoch_seconds": epoch_seconds, "rate": rate,
            "seconds": round(end - begin, 1), "load_average": os.getloadavg()[0],
            "pods": summary(to_pods), "epoch": summary(to_status),
            "pods_by_arrival": by_arrival(list(created.values()), to_pods, begin),
            "epoch_by_time": by_arrival(printed_at, to_status, begin, window=10.0),
            "epochs_seen": len(watcher.epoch_seen), "epochs_expected": jobs * epochs,
            "succeeded": sum(p == "Succeeded" for p in watcher.phases.values()),
            "operator_exit": exited,
            "operator": {"rss_idle": idle["rss"], "rss_peak": sampler.peak["rss"], "cpu_seconds": cpu,
                         "cpu_ms_per_job": 1000 * cpu / jobs, "threads_idle": idle["threads"],
                         "threads_peak": sampler.peak["threads"], "connections_peak": sampler.peak["connections"],
                         "requests": operator_requests, "requests_per_job": operator_requests / jobs,
                         "requests_per_job_by_verb": by_verb(ops_calls, jobs),
                         "requests_per_job_by_call": per_job(ops_calls, jobs),
                         "epochs_recorded": metric_value(operator_metrics, "pets_operator_epochs_recorded_total"),
                         # The operator's own split of epoch -> status: the line reaching it, and its patch returning.
                         "epoch_delivery": histogram_split(operator_metrics, "pets_operator_epoch_log_delivery_seconds", 2.0),
                         "epoch_to_patched": histogram_split(operator_metrics, "pets_operator_epoch_status_latency_seconds",
                                                             2.0)},
            "api_server": {"requests_per_job": sum(everyone.values()) / jobs,
                           "requests_per_job_by_verb": by_verb(everyone, jobs),
                           "requests_per_job_by_call": per_job(everyone, jobs),
                           "counted_by": ("localkube_api_requests_total" if backend == "emulated"
                                          else "apiserver_request_total")},
            "cluster": {name: {"cpu_seconds": components_after[name] - components_before[name],
                               "rss_peak": sampler.component_rss[name]} for name in components},
        }
    finally:
        watcher.stopped.set()
        operator.terminate()
        try:
            operator.wait(60)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        cluster.stop()


def print_table(rows: list[dict]) -> None:
    print(f"\n{'backend':<10} {'operator':<9} {'jobs':>5} {'load':>5} {'create->pods s p50/p99/max':>27} "
          f"{'epoch->status s p50/p99/max':>28} {'epochs':>11} {'RSS MiB idle/peak':>18} {'CPU s':>7} {'ms/job':>7} "
          f"{'threads':>8} {'conns':>6} {'op req/job':>10} {'all req/job':>11}")
    for row in rows:
        op, pods, epoch = row["operator"], row["pods"], row["epoch"]
        print(f"{row['backend']:<10} {row['operator_source']:<9} {row['jobs']:>5} {row['load_average']:>5.1f} "
              f"{pods['p50']:>9.2f}/{pods['p99']:>6.2f}/{pods['max']:<7.2f} "
              f"{epoch['p50']:>9.2f}/{epoch['p99']:>6.2f}/{epoch['max']:<7.2f}  "
              f"{row['epochs_seen']:>5}/{row['epochs_expected']:<5} {op['rss_idle']:>8.1f}/{op['rss_peak']:<9.1f} "
              f"{op['cpu_seconds']:>7.1f} {op['cpu_ms_per_job']:>7.1f} {op['threads_peak']:>8} {op['connections_peak']:>6} "
              f"{op['requests_per_job']:>10.1f} {row['api_server']['requests_per_job']:>11.1f}")
    print("\ncluster processes: CPU s / peak RSS MiB")
    for row in rows:
        parts = ", ".join(f"{name} {usage['cpu_seconds']:.1f} / {usage['rss_peak']:.0f}"
                          for name, usage in row["cluster"].items())
        print(f"{row['backend']:<10} {row['operator_source']:<9} {row['jobs']:>5}  {parts}")
    print("\nwhere the tails sit: p99 s by when they began (create -> pods per 5 s of creation; epoch -> status per 10 s "
          "of epoch lines), from the round's first job")
    for row in rows:
        for label, key in (("create->pods", "pods_by_arrival"), ("epoch->status", "epoch_by_time")):
            windows = " ".join(f"{w['from_s']:g}:{w['p99']:.1f}" for w in row.get(key, []))
            print(f"{row['backend']:<10} {row['operator_source']:<9} {row['jobs']:>5}  {label:<14} {windows}")
    print("\nepoch line -> the operator reading it, and -> its status patch returning (the operator's histograms: "
          "share over 2 s, p99 at most)")
    for row in rows:
        parts = []
        for label, key in (("read", "epoch_delivery"), ("patched", "epoch_to_patched")):
            split = row["operator"].get(key) or {}
            if split.get("share_over") is not None:
                parts.append(f"{label} {100 * split['share_over']:.1f}% over 2 s, p99 <= {split['p99_at_most']:g} s")
        print(f"{row['backend']:<10} {row['operator_source']:<9} {row['jobs']:>5}  {'; '.join(parts) or 'not measured'}")
    print("\noperator requests per job by verb; by call")
    for row in rows:
        print(f"{row['backend']:<10} {row['operator_source']:<9} {row['jobs']:>5}  {row['operator']['requests_per_job_by_verb']}"
              f"; {row['operator']['requests_per_job_by_call']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("emulated", "kubernetes", "both"), default="emulated",
                        help="the API server: the emulated one, kube-apiserver (hack/control_plane.sh's build), or "
                             "both, back to back per job count (default: %(default)s)")
    parser.add_argument("--jobs", default="100,300,1000", help="job counts, comma-separated (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-seconds", type=float, default=10.0, help="between a job's epoch lines (default: %(default)g)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="jobs created per second (default: %(default)g: 1,000 jobs in 50 s, all running at once "
                             "from then until the first ends)")
    parser.add_argument("--round-timeout", type=float, default=None,
                        help="seconds a round may take from its first job on (default: creation + epochs + 120 s)")
    parser.add_argument("--log-level", default="INFO", help="the operator's PETS_OPERATOR_LOG_LEVEL (default: %(default)s)")
    parser.add_argument("--scheduler-qps", type=float, default=200.0,
                        help="kube-apiserver backend: kube-scheduler's and kube-controller-manager's --kube-api-qps "
                             "(burst twice that; default: %(default)g)")
    parser.add_argument("--quick", action="store_true", help="20 jobs, 3 epochs of 1 s")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run each job count with DIR/operator's pets_operator first (a row named 'baseline')")
    parser.add_argument("--json", type=Path, help="also write the rounds to this file")
    parser.add_argument("--profile-apiserver", type=Path, metavar="DIR",
                        help="kube-apiserver backend: save its CPU profile of each round to DIR (kube-apiserver started "
                             "with --profiling=true), over --profile-window")
    parser.add_argument("--profile-window", default="20,30", metavar="START,SECONDS",
                        help="from START seconds after the first job's creation, for SECONDS (default: %(default)s: "
                             "the second half of 1,000 jobs' creation at 20 jobs/s)")
    args = parser.parse_args()
    if args.baseline and not (args.baseline / "operator" / "pets_operator" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no operator/pets_operator/__init__.py there")
    if args.quick:
        args.jobs, args.epochs, args.epoch_seconds = "20", 3, 1.0
    counts = [int(part) for part in args.jobs.split(",")]
    profile = None
    if args.profile_apiserver:
        start, seconds = (float(part) for part in args.profile_window.split(","))
        profile = (args.profile_apiserver, start, seconds)
    backends = ["emulated", "kubernetes"] if args.backend == "both" else [args.backend]
    variants: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        variants.insert(0, ("baseline", args.baseline.resolve()))
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; {args.epochs} epochs every {args.epoch_seconds:g}s, "
          f"{args.rate:g} jobs/s created; backends {', '.join(backends)}", flush=True)
    rows = []
    for jobs in counts:
        timeout = args.round_timeout or jobs / args.rate + args.epochs * args.epoch_seconds + 120
        for backend in backends:
            for variant, source in variants:
                with tempfile.TemporaryDirectory(prefix="operator-scale-") as tmp:
                    rows.append(run_round(backend, jobs, args.epochs, args.epoch_seconds, args.rate, variant, Path(tmp),
                                          timeout, args.log_level, args.scheduler_qps, source, profile))
                print(json.dumps(rows[-1]), flush=True)
                if args.json:  # what finished so far, should a later round not
                    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
