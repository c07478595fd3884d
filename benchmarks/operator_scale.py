"""The operator at hundreds to a thousand concurrent jobs, with simulated pods (no processes).

For each job count (default 100, 300, 1,000 concurrent 2-node jobs, 10 epochs each) it starts the
local cluster with simulated pods (`pets-operator local up --simulate`) and the real operator
(`python -m pets_operator run`), each in its own process, creates the jobs at a steady rate, and
measures
  - creation -> all pods: from a job's create call returning to a watch seeing its last pod;
  - epoch line -> status: from the moment the simulated pod 0 writes an epoch line (the kubelet's
    timestamp in the log file) to the moment a watch of the jobs sees that epoch in status.epochs;
  - the operator process's peak RSS, CPU seconds, peak threads and peak open TCP connections, its
    API requests per job (the local API server counts requests by User-Agent: kopf's, the official
    client's and the operator's log reader's), and its cost per job;
  - apart: the local cluster process's CPU seconds and peak RSS (API server, scheduler, kubelet),
    which shares the machine with the operator but is not the operator's cost.

    python benchmarks/operator_scale.py                        # 100, 300, 1000 jobs
    python benchmarks/operator_scale.py --quick                # 20 jobs, 3 epochs of 1 s: a smoke run
    python benchmarks/operator_scale.py --jobs 1000 --epoch-seconds 20

`--baseline DIR` runs every job count twice, back to back, so before/after share the machine's load
of the moment: first with the operator of another source tree (DIR/operator first on the operator's
PYTHONPATH; the local cluster stays this checkout's, which simulates the pods), then with this
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
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

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


def start_cluster(workdir: Path) -> tuple[subprocess.Popen, Path, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "pets_operator", "local", "up", "--simulate", "--keep-logs", "--workdir", str(workdir),
         "--cpu", "100000", "--memory", "100Ti", "--crd", str(REPO / "manifests" / "crd.yaml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if line.startswith("export KUBECONFIG="):
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            kubeconfig = Path(line.split("=", 1)[1].strip())
            server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
            return process, kubeconfig, server
    raise RuntimeError(f"the local cluster did not start (exit code {process.wait()})")


class Sampler(threading.Thread):
    """Peak RSS, threads and connections of the operator, peak RSS of the cluster, once a second."""

    def __init__(self, operator: int, cluster: int):
        super().__init__(daemon=True)
        self.operator, self.cluster = operator, cluster
        self.peak = {"rss": 0.0, "threads": 0, "connections": 0, "cluster_rss": 0.0}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            self.sample()

    def sample(self) -> None:
        try:
            usage = process_usage(self.operator)
            connections = established_connections(self.operator)
            cluster_rss = process_usage(self.cluster)["rss"]
        except OSError:
            return
        for key, value in (("rss", usage["rss"]), ("threads", usage["threads"]), ("connections", connections),
                           ("cluster_rss", cluster_rss)):
            self.peak[key] = max(self.peak[key], value)


# --- the API, raw (a benchmark client must cost little next to what it measures) ---------------

class Api:
    def __init__(self, server: str):
        self.host, self.port = server.removeprefix("http://").split(":")
        self.server = server

    def _connection(self, timeout: float | None = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, int(self.port), timeout=timeout)

    def create(self, connection: http.client.HTTPConnection, path: str, body: dict) -> None:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json", "User-Agent": USER_AGENT})
        response = connection.getresponse()
        answer = response.read()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: {response.status} {answer[:300]!r}")

    def watch(self, path: str):
        """(type, object) of a watch from now on, until the connection ends."""
        connection = self._connection(timeout=None)
        connection.request("GET", f"{path}?watch=true&timeoutSeconds=3600", headers={"User-Agent": USER_AGENT})
        response = connection.getresponse()
        for line in response:
            if line.strip():
                event = json.loads(line)
                yield event["type"], event["object"]

    def request_counts(self) -> dict[tuple[str, ...], float]:
        """(client, verb, resource, subresource) -> requests so far, from the API server's /metrics."""
        with urllib.request.urlopen(urllib.request.Request(f"{self.server}/metrics", headers={"User-Agent": USER_AGENT}),
                                    timeout=30) as answer:
            text = answer.read().decode()
        counts: dict[tuple[str, ...], float] = {}
        for line in text.splitlines():
            if line.startswith("localkube_api_requests_total{"):
                labels, value = line[len("localkube_api_requests_total{"):].rsplit("} ", 1)
                pairs = dict(part.split("=", 1) for part in labels.split(","))
                key = tuple(pairs[name].strip('"') for name in ("client", "verb", "resource", "subresource"))
                counts[key] = float(value)
        return counts


class Watcher:
    """When each pod and each (job, epoch) in status.epochs was first seen."""

    def __init__(self, api: Api):
        self.api = api
        self.pod_seen: dict[str, float] = {}
        self.epoch_seen: dict[tuple[str, int], float] = {}
        self.phases: dict[str, str] = {}

    def start(self) -> None:
        threading.Thread(target=self._pods, daemon=True).start()
        threading.Thread(target=self._jobs, daemon=True).start()

    def _pods(self) -> None:
        for _, pod in self.api.watch(f"/api/v1/namespaces/{NAMESPACE}/pods"):
            self.pod_seen.setdefault(pod["metadata"]["name"], time.time())

    def _jobs(self) -> None:
        for _, job in self.api.watch(f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}"):
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


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            return answer.read().decode()
    except OSError:
        return ""


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- one round --------------------------------------------------------------------------------

def run_round(jobs: int, epochs: int, epoch_seconds: float, rate: float, variant: str, workdir: Path,
              timeout: float, log_level: str, source: Path | None = None) -> dict:
    """One round; `source`: run the operator of that tree (DIR/operator) instead of this one's; `variant` names the row."""
    cluster, kubeconfig, server = start_cluster(workdir / "cluster")
    metrics_port = free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
           "PETS_OPERATOR_LOG_LEVEL": log_level, "PETS_OPERATOR_METRICS_PORT": str(metrics_port)}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source / "operator"), os.environ.get("PYTHONPATH")]))
    operator_log = workdir / "operator.log"
    with operator_log.open("wb") as log:
        operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        api = Api(server)
        watcher = Watcher(api)
        watcher.start()
        time.sleep(4)  # the operator started and idle
        idle = process_usage(operator.pid)
        sampler = Sampler(operator.pid, cluster.pid)
        sampler.sample()
        sampler.start()
        requests_before = api.request_counts()
        cluster_before = process_usage(cluster.pid)
        created: dict[str, float] = {}
        begin = time.time()
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
        busy = process_usage(operator.pid)
        sampler.stopped.set()
        sampler.sample()
        cluster_after = process_usage(cluster.pid)
        requests_after = api.request_counts()
        operator_metrics = scrape(metrics_port)
        to_pods = [max(watcher.pod_seen.get(f"{name}-{i}", math.inf) for i in (0, 1)) - start
                   for name, start in created.items()]
        printed = printed_times(workdir / "cluster")
        to_status = [seen - printed[key] for key, seen in watcher.epoch_seen.items() if key in printed]
        requests = {key: requests_after[key] - requests_before.get(key, 0) for key in requests_after}
        by_client: dict[str, float] = {}
        for key, count in requests.items():
            by_client[key[0]] = by_client.get(key[0], 0) + count
        operator_requests = sum(v for client, v in by_client.items() if client in OPERATOR_CLIENTS)
        operator_calls = {" ".join(filter(None, key)): count / jobs for key, count in
                          sorted(requests.items(), key=lambda item: -item[1]) if key[0] in OPERATOR_CLIENTS and count}
        cpu = busy["cpu"] - idle["cpu"]
        return {
            "operator_source": variant, "jobs": jobs, "epochs": epochs, "epoch_seconds": epoch_seconds, "rate": rate,
            "seconds": round(end - begin, 1), "load_average": os.getloadavg()[0],
            "pods": summary(to_pods), "epoch": summary(to_status),
            "epochs_seen": len(watcher.epoch_seen), "epochs_expected": jobs * epochs,
            "succeeded": sum(p == "Succeeded" for p in watcher.phases.values()),
            "operator": {"rss_idle": idle["rss"], "rss_peak": sampler.peak["rss"], "cpu_seconds": cpu,
                         "cpu_ms_per_job": 1000 * cpu / jobs, "threads_idle": idle["threads"],
                         "threads_peak": sampler.peak["threads"], "connections_peak": sampler.peak["connections"],
                         "requests": operator_requests, "requests_per_job": operator_requests / jobs,
                         "requests_per_job_by_call": operator_calls,
                         "epochs_recorded": metric_value(operator_metrics, "pets_operator_epochs_recorded_total")},
            "cluster": {"cpu_seconds": cluster_after["cpu"] - cluster_before["cpu"], "rss_peak": sampler.peak["cluster_rss"],
                        "requests_by_client": by_client},
        }
    finally:
        for process in (operator, cluster):
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def print_table(rows: list[dict]) -> None:
    print(f"\n{'operator':<9} {'jobs':>5} {'load':>5} {'create->pods s p50/p99/max':>27} {'epoch->status s p50/p99/max':>28} "
          f"{'epochs':>11} {'RSS MiB idle/peak':>18} {'CPU s':>7} {'ms/job':>7} {'threads':>8} {'conns':>6} "
          f"{'req/job':>8} {'cluster CPU s':>14} {'cluster RSS':>12}")
    for row in rows:
        op, pods, epoch = row["operator"], row["pods"], row["epoch"]
        print(f"{row['operator_source']:<9} {row['jobs']:>5} {row['load_average']:>5.1f} "
              f"{pods['p50']:>9.2f}/{pods['p99']:>6.2f}/{pods['max']:<7.2f} "
              f"{epoch['p50']:>9.2f}/{epoch['p99']:>6.2f}/{epoch['max']:<7.2f}  "
              f"{row['epochs_seen']:>5}/{row['epochs_expected']:<5} {op['rss_idle']:>8.1f}/{op['rss_peak']:<9.1f} "
              f"{op['cpu_seconds']:>7.1f} {op['cpu_ms_per_job']:>7.1f} {op['threads_peak']:>8} {op['connections_peak']:>6} "
              f"{op['requests_per_job']:>8.1f} {row['cluster']['cpu_seconds']:>14.1f} {row['cluster']['rss_peak']:>12.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="100,300,1000", help="job counts, comma-separated (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-seconds", type=float, default=10.0, help="between a job's epoch lines (default: %(default)g)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="jobs created per second (default: %(default)g: 1,000 jobs in 50 s, all running at once "
                             "from then until the first ends)")
    parser.add_argument("--round-timeout", type=float, default=None,
                        help="seconds a round may take from its first job on (default: creation + epochs + 120 s)")
    parser.add_argument("--log-level", default="INFO", help="the operator's PETS_OPERATOR_LOG_LEVEL (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="20 jobs, 3 epochs of 1 s")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run each job count with DIR/operator's pets_operator first (a row named 'baseline')")
    parser.add_argument("--json", type=Path, help="also write the rounds to this file")
    args = parser.parse_args()
    if args.baseline and not (args.baseline / "operator" / "pets_operator" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no operator/pets_operator/__init__.py there")
    if args.quick:
        args.jobs, args.epochs, args.epoch_seconds = "20", 3, 1.0
    counts = [int(part) for part in args.jobs.split(",")]
    variants: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        variants.insert(0, ("baseline", args.baseline.resolve()))
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; {args.epochs} epochs every {args.epoch_seconds:g}s, "
          f"{args.rate:g} jobs/s created", flush=True)
    rows = []
    for jobs in counts:
        timeout = args.round_timeout or jobs / args.rate + args.epochs * args.epoch_seconds + 120
        for variant, source in variants:
            with tempfile.TemporaryDirectory(prefix="operator-scale-") as tmp:
                rows.append(run_round(jobs, args.epochs, args.epoch_seconds, args.rate, variant, Path(tmp),
                                      timeout, args.log_level, source))
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
