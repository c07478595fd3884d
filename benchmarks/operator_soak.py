"""A soak of the operator on Kubernetes' own control plane: two replicas, a failing API, restarts.

On the real control plane (`KubernetesCluster`: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler built by hack/control_plane.sh, the local kubelet as its Node, every pod simulated:
no process, epoch lines on the schedule the pod carries), it runs `--jobs` 2-node jobs for
`--minutes` while
  - two operator replicas (`python -m pets_operator run`, POD_ID operator-a and operator-b, the
    default lease of 15/10/2 s) stand for leader on the Lease; every `--kill-leader-every` seconds the
    current holder is killed with SIGKILL, and started again (same POD_ID) once the other replica
    holds the lease, so it comes back as the standby, as a Deployment's pod would; a replica that
    exits by itself (the fencing exit after a renew deadline without the API) is started again after
    `--restart-delay` s, as the kubelet restarts a container;
  - kube-apiserver is killed with SIGKILL every `--restart-apiserver-every` seconds (first at
    `--restart-apiserver-first`), etcd's history compacted meanwhile (so the watches meet 410 Gone),
    and started again `--apiserver-down` s later on its port, certificates and data;
  - every `--burst-every` seconds (first at `--burst-first`) the fault proxy between both replicas and
    kube-apiserver (tests/support/fault_proxy.py) answers every call of the operators, watches, lease
    and log reads included, with one of, in turn: 20 x 429 `Retry-After: 2`, 20 x 503, 3 s of 500.

The jobs are long ones, created at the start (2 a second): each has as many epochs of
`--epoch-seconds` as end about `--end-margin` s before the soak does, so they train through every
fault and finish inside the last minute. After the soak the faults stop and the benchmark waits
(`--finish-timeout`) for every job to end. It reports
  - the jobs' final phases (all Succeeded expected) and their status.restarts;
  - epochs lost (printed by pod 0 but not in the final status.epochs), doubled (an epoch twice in
    status.epochs, at the end or in any version the watch saw) and extra (in status, never printed);
  - epoch line -> status: from the kubelet's timestamp of pod 0's epoch line to the moment the
    benchmark's own watch of the jobs (direct to kube-apiserver, resumed and relisted through the
    restarts) first saw that epoch in status.epochs: p50, p99, max, and the max by the fault whose
    window the line was printed in;
  - operator restarts (planned: the kills; unplanned: exits, with their reason) and failovers (changes
    of the Lease's holder, polled directly, and the takeover seconds after each kill);
  - the faults injected (answers of the proxy by status) and each apiserver outage, kill to ready.

    python benchmarks/operator_soak.py                      # 20 minutes, 50 jobs
    python benchmarks/operator_soak.py --minutes 3 --restart-apiserver-first 75 --jobs 20   # a short run

It writes JSON (`--json`, default docs/figures/operator-soak-<minutes>min-<date>.json) and prints a summary.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # tests.support, tests.e2e and benchmarks, as pytest's pythonpath has it

from benchmarks.operator_scale import free_port, job_body, printed_times, summary  # noqa: E402
from pets_api import GROUP, PLURAL, VERSION  # noqa: E402
from pets_localkube import product  # noqa: E402
from pets_localkube.client import tls_context  # noqa: E402
from pets_localkube.control_plane import APISERVER  # noqa: E402
from pets_localkube.kubernetes_cluster import KubernetesCluster  # noqa: E402
from tests.e2e.conftest import OperatorProcess  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402

NAMESPACE = "default"
USER_AGENT = "operator-soak-benchmark/1"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/pets-operator-leader"
JOBS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}"
REPLICAS = ("operator-a", "operator-b")
BURSTS = (  # in turn, on every call of both replicas
    {"kind": "429", "status": 429, "reason": "TooManyRequests", "message": "Too many requests, please try again later.",
     "retry_after": 2, "times": 20},
    {"kind": "503", "status": 503, "reason": "ServiceUnavailable",
     "message": "the server is currently unable to handle the request", "times": 20},
    {"kind": "500", "status": 500, "reason": "InternalError", "message": "etcdserver: leader changed", "times": None,
     "for_seconds": 3},
)
TERMINAL = ("Succeeded", "Failed")


def log(message: str) -> None:
    print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {message}", flush=True)


# --- kube-apiserver, directly (the benchmark's own view; never through the fault proxy) ----------

class Api:
    def __init__(self, url: str, context: ssl.SSLContext):
        self.host, port = url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.context = context

    def connection(self, timeout: float | None = 15) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        connection = self.connection()
        try:
            connection.request(method, path, json.dumps(body) if body is not None else None,
                               {"Content-Type": "application/json", "User-Agent": USER_AGENT})
            response = connection.getresponse()
            text = response.read()
            return response.status, (json.loads(text) if text else {})
        finally:
            connection.close()

    def get(self, path: str) -> dict | None:
        """The object, or None when the server does not answer it (down, 404, 5xx)."""
        try:
            status, body = self.request("GET", path)
        except (OSError, http.client.HTTPException, ValueError):
            return None
        return body if status == 200 else None

    def watch(self, path: str, resource_version: str):
        """(type, object) from `resource_version` on, until the stream ends (an ERROR event's object is a Status)."""
        connection = self.connection(timeout=90)
        try:
            connection.request("GET", f"{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=60"
                                       f"&resourceVersion={resource_version}", headers={"User-Agent": USER_AGENT})
            response = connection.getresponse()
            if response.status != 200:
                response.read()
                yield "ERROR", {"code": response.status}
                return
            for line in response:
                if line.strip():
                    event = json.loads(line)
                    yield event["type"], event["object"]
        finally:
            connection.close()


class JobWatcher(threading.Thread):
    """Each (job, epoch) first seen in status.epochs, the phases, and any version with an epoch twice."""

    def __init__(self, api: Api):
        super().__init__(daemon=True, name="job-watch")
        self.api = api
        self.epoch_seen: dict[tuple[str, int], float] = {}
        self.phases: dict[str, str] = {}
        self.doubled_seen: dict[str, list[int]] = {}  # job -> epochs seen twice in one version of its status
        self.relists = 0
        self.reconnects = 0
        self.stopped = threading.Event()

    def see(self, job: dict, now: float) -> None:
        name, status = job["metadata"]["name"], job.get("status") or {}
        self.phases[name] = status.get("phase", "")
        epochs = [entry["epoch"] for entry in status.get("epochs") or []]
        twice = sorted(epoch for epoch, count in Counter(epochs).items() if count > 1)
        if twice:
            self.doubled_seen[name] = sorted(set(self.doubled_seen.get(name, [])) | set(twice))
        for epoch in epochs:
            self.epoch_seen.setdefault((name, epoch), now)

    def run(self) -> None:
        version = None
        while not self.stopped.is_set():
            try:
                if version is None:
                    listing = self.api.get(JOBS_PATH)
                    if listing is None:
                        time.sleep(0.5)
                        continue
                    now = time.time()
                    for job in listing.get("items") or []:
                        self.see(job, now)
                    version = listing["metadata"]["resourceVersion"]
                    self.relists += 1
                for kind, obj in self.api.watch(JOBS_PATH, version):
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            version = None  # history compacted: list again
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        self.see(obj, time.time())
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.5)
            self.reconnects += 1


class LeaseWatcher(threading.Thread):
    """The Lease's holder twice a second: its changes, (time, holder)."""

    def __init__(self, api: Api):
        super().__init__(daemon=True, name="lease-poll")
        self.api = api
        self.changes: list[tuple[float, str]] = []
        self.stopped = threading.Event()

    @property
    def holder(self) -> str | None:
        return self.changes[-1][1] if self.changes else None

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            lease = self.api.get(LEASE_PATH)
            if lease is None:
                continue
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            if holder != self.holder:
                self.changes.append((time.time(), holder))


# --- the replicas --------------------------------------------------------------------------------

class Replicas:
    """Two OperatorProcess, started again as a Deployment's pods would be; every start and exit noted."""

    def __init__(self, kubeconfig: Path, workdir: Path, restart_delay: float):
        self.restart_delay = restart_delay
        self.processes: dict[str, OperatorProcess] = {}
        for name in REPLICAS:
            log_dir = workdir / name
            log_dir.mkdir(parents=True)
            self.processes[name] = OperatorProcess(kubeconfig, log_dir, {"POD_ID": name,
                                                                         "PETS_OPERATOR_METRICS_PORT": str(free_port())})
        self.lock = threading.Lock()
        self.held: set[str] = set()  # killed on purpose: the killer starts it again
        self.exits: list[dict] = []  # unplanned: {"replica", "at", "code", "reason"}
        self.stopped = threading.Event()

    def start(self, name: str) -> None:
        self.processes[name].start()

    def kill(self, name: str) -> None:
        with self.lock:
            self.held.add(name)
        self.processes[name].kill()

    def start_again(self, name: str) -> None:
        with self.lock:
            self.held.discard(name)
            self.processes[name].start()

    def supervise(self) -> None:
        while not self.stopped.wait(0.5):
            for name, operator in self.processes.items():
                with self.lock:
                    if name in self.held or operator.process is None or operator.process.poll() is None:
                        continue
                    code = operator.process.returncode
                    last = (operator.log_dir / f"operator-{operator.starts}.log").read_text(errors="replace")
                    reason = next((line for line in reversed(last.splitlines()) if "lost the leadership" in line),
                                  last.splitlines()[-1] if last.strip() else "")
                    self.exits.append({"replica": name, "at": time.time(), "code": code, "reason": reason[-300:]})
                    log(f"{name} exited by itself (code {code}): {reason[-160:]}")
                    self.held.add(name)
                threading.Timer(self.restart_delay, self.start_again, (name,)).start()

    def stop(self) -> None:
        self.stopped.set()
        for operator in self.processes.values():
            operator.stop()

    def log_counts(self, text: str) -> dict[str, int]:
        return {name: operator.logs().count(text) for name, operator in self.processes.items()}


# --- the soak ------------------------------------------------------------------------------------

def wait_until(check, timeout: float, step: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step)
    return None


def schedule(minutes: float, every: float, first: float) -> list[float]:
    return [t for t in (first + k * every for k in range(int(minutes * 60 // every) + 2)) if 0 < t < minutes * 60] \
        if every > 0 else []


def create_jobs(api: Api, count: int, epochs: int, epoch_seconds: float, rate: float) -> dict[str, float]:
    created = {}
    begin = time.time()
    for index in range(count):
        name = f"soak-{index}"
        pause = begin + index / rate - time.time()
        if pause > 0:
            time.sleep(pause)
        for _ in range(60):
            try:
                status, body = api.request("POST", JOBS_PATH, job_body(name, epochs, epoch_seconds))
            except (OSError, http.client.HTTPException):
                status, body = 0, {}
            if status in (201, 409):
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"could not create {name}: {status} {body}")
        created[name] = time.time()
    return created


def soak(args: argparse.Namespace, workdir: Path) -> dict:
    epochs = max(1, int((args.minutes * 60 - args.end_margin) // args.epoch_seconds))
    cluster = KubernetesCluster(workdir / "cluster", cpu=100000, memory="100Ti", crds=[REPO / "manifests" / "crd.yaml"],
                                simulate=True, keep_logs=True, entrypoints=product.ENTRYPOINTS, workload=product.TRAINER)
    started = time.monotonic()
    cluster.start()
    log(f"control plane up in {time.monotonic() - started:.1f}s: {cluster.url}")
    pki = cluster.plane.workdir / "pki"
    context = tls_context(pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    proxy = FaultProxy(cluster.url, workdir / "proxy", upstream_tls=context).start()
    api = Api(cluster.url, context)
    replicas = Replicas(proxy.kubeconfig, workdir / "operators", args.restart_delay)
    jobs_watch, lease = JobWatcher(api), LeaseWatcher(api)
    events: list[dict] = []  # the faults, each {"kind", "start", "end", ...} (time.time())
    try:
        jobs_watch.start()
        lease.start()
        replicas.start(REPLICAS[0])
        if not wait_until(lambda: lease.holder == REPLICAS[0], 60):
            raise RuntimeError(f"{REPLICAS[0]} did not take the lease:\n{replicas.processes[REPLICAS[0]].logs()[-3000:]}")
        replicas.start(REPLICAS[1])
        threading.Thread(target=replicas.supervise, daemon=True, name="supervisor").start()
        load_before = os.getloadavg()
        begin = time.time()
        created = create_jobs(api, args.jobs, epochs, args.epoch_seconds, args.rate)
        log(f"{len(created)} jobs of {epochs} epochs x {args.epoch_seconds:g}s created in {time.time() - begin:.1f}s")

        plan = sorted([(t, "leader-kill") for t in schedule(args.minutes, args.kill_leader_every, args.kill_leader_every)]
                      + [(t, "apiserver-restart") for t in schedule(args.minutes, args.restart_apiserver_every,
                                                                    args.restart_apiserver_first)]
                      + [(t, "burst") for t in schedule(args.minutes, args.burst_every, args.burst_first)])
        bursts = 0
        for at, kind in plan:
            pause = begin + at - time.time()
            if pause > 0:
                time.sleep(pause)
            start = time.time()
            if kind == "leader-kill":
                victim = lease.holder
                if victim not in replicas.processes:
                    events.append({"kind": kind, "start": start, "end": start, "skipped": f"holder {victim!r}"})
                    continue
                replicas.kill(victim)
                other = wait_until(lambda: lease.holder not in (victim, None, "") and lease.holder, 90)
                end = time.time()
                replicas.start_again(victim)
                events.append({"kind": kind, "start": start, "end": end, "killed": victim, "new_leader": other,
                               "takeover_seconds": round(end - start, 1) if other else None})
                log(f"killed leader {victim}: {other} holds the lease after {end - start:.1f}s; {victim} back as standby")
            elif kind == "apiserver-restart":
                cluster.plane.kill(APISERVER)
                cluster.plane.compact_etcd()
                time.sleep(args.apiserver_down)
                cluster.plane.start_again(APISERVER)
                end = time.time()
                events.append({"kind": kind, "start": start, "end": end, "outage_seconds": round(end - start, 1)})
                log(f"kube-apiserver killed and ready again after {end - start:.1f}s")
            else:
                burst = dict(BURSTS[bursts % len(BURSTS)])
                bursts += 1
                name = burst.pop("kind")
                fault = proxy.fail("*", "", **burst)
                wait_until(lambda: (fault.hits >= burst["times"]) if burst["times"] else
                           time.time() >= start + burst["for_seconds"], 60)
                end = time.time()
                events.append({"kind": f"burst-{name}", "start": start, "end": end, "answered": fault.hits})
                log(f"burst of {name}: {fault.hits} answers in {end - start:.1f}s")
        pause = begin + args.minutes * 60 - time.time()
        if pause > 0:
            time.sleep(pause)
        soak_end = time.time()
        log("soak over, faults stopped; waiting for every job to end")
        wait_until(lambda: len(jobs_watch.phases) >= args.jobs and
                   all(jobs_watch.phases.get(n) in TERMINAL for n in created), args.finish_timeout, 1.0)
        end = time.time()
        load_after = os.getloadavg()
        finals = {name: (api.get(f"{JOBS_PATH}/{name}") or {}).get("status") or {} for name in created}
        return report(args, epochs, workdir, created, finals, jobs_watch, lease, replicas, proxy, events,
                      begin, soak_end, end, load_before, load_after)
    finally:
        jobs_watch.stopped.set()
        lease.stopped.set()
        replicas.stop()
        proxy.stop()
        cluster.stop()


def fault_of(printed_at: float, events: list[dict], after: float) -> str:
    """The latest fault whose window (start to end + `after` s) holds `printed_at`, or "none"."""
    holding = [event for event in events if event["start"] <= printed_at <= event["end"] + after]
    if not holding:
        return "none"
    kind = max(holding, key=lambda event: event["start"])["kind"]
    return "burst" if kind.startswith("burst") else kind


def report(args, epochs, workdir, created, finals, jobs_watch, lease, replicas, proxy, events,
           begin, soak_end, end, load_before, load_after) -> dict:
    printed = printed_times(workdir / "cluster")
    lost, doubled, extra = {}, {}, {}
    for name in created:
        recorded = [entry["epoch"] for entry in finals[name].get("epochs") or []]
        said = sorted(epoch for (job, epoch) in printed if job == name)
        if missing := sorted(set(said) - set(recorded)):
            lost[name] = missing
        if twice := sorted(e for e, count in Counter(recorded).items() if count > 1):
            doubled[name] = twice
        if unknown := sorted(set(recorded) - set(said)):
            extra[name] = unknown
    latencies = {key: seen - printed[key] for key, seen in jobs_watch.epoch_seen.items() if key in printed}
    by_fault: dict[str, list[float]] = {}
    for key, seconds in latencies.items():
        by_fault.setdefault(fault_of(printed[key], events, args.fault_tail), []).append(seconds)
    worst = sorted(latencies.items(), key=lambda item: -item[1])[:5]
    kills = [e for e in events if e["kind"] == "leader-kill"]
    takeovers = [e["takeover_seconds"] for e in kills if e.get("takeover_seconds") is not None]
    answers = Counter(str(r.status) for r in proxy.requests)
    holders = [holder for _, holder in lease.changes]
    return {
        "date": datetime.fromtimestamp(begin, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "load_average_before": [round(v, 2) for v in load_before], "load_average_after": [round(v, 2) for v in load_after],
        "minutes": args.minutes, "jobs": len(created), "nodes_per_job": 2, "epochs_per_job": epochs,
        "epoch_seconds": args.epoch_seconds, "job_shape": "long jobs, all created at the start, ending in the last minute",
        "lease": "15/10/2 s (the default)",
        "soak_seconds": round(soak_end - begin, 1), "finish_wait_seconds": round(end - soak_end, 1),
        "phases": dict(Counter(finals[n].get("phase", "") or "(none)" for n in created)),
        "succeeded": sum(finals[n].get("phase") == "Succeeded" for n in created),
        "messages_of_unsucceeded": {n: finals[n].get("message") for n in created if finals[n].get("phase") != "Succeeded"},
        "group_restarts": sum(int(finals[n].get("restarts") or 0) for n in created),
        "epochs_printed": len(printed), "epochs_recorded": sum(len(finals[n].get("epochs") or []) for n in created),
        "epochs_lost": sum(len(v) for v in lost.values()), "epochs_lost_by_job": lost,
        "epochs_doubled": sum(len(v) for v in doubled.values()), "epochs_doubled_by_job": doubled,
        "epochs_doubled_in_any_version_seen": sum(len(v) for v in jobs_watch.doubled_seen.values()),
        "epochs_extra": sum(len(v) for v in extra.values()),
        "epoch_line_to_status_seconds": {k: round(v, 2) for k, v in summary(list(latencies.values())).items()},
        "epoch_line_to_status_by_fault": {
            kind: {"epochs": len(values), **{k: round(v, 2) for k, v in summary(values).items()}}
            for kind, values in sorted(by_fault.items())},
        "epoch_line_to_status_worst": [
            {"job": job, "epoch": epoch, "seconds": round(seconds, 2),
             "printed_at_soak_second": round(printed[(job, epoch)] - begin, 1),
             "fault": fault_of(printed[(job, epoch)], events, args.fault_tail)} for (job, epoch), seconds in worst],
        "epochs_never_seen_in_status": sum(1 for key in printed if key not in jobs_watch.epoch_seen),
        "leader_kills": len([e for e in kills if "killed" in e]),
        "takeover_seconds": {"all": takeovers, "max": max(takeovers) if takeovers else None},
        "failovers": sum(1 for a, b in zip(holders, holders[1:]) if a and b and a != b),
        "lease_holders_in_order": holders,
        "operator_starts": {name: op.starts for name, op in replicas.processes.items()},
        "operator_restarts": sum(op.starts - 1 for op in replicas.processes.values()),
        "operator_unplanned_exits": [{**e, "at": round(e["at"] - begin, 1)} for e in replicas.exits],
        "became_leader_lines": replicas.log_counts("became the leader"),
        "tracebacks_in_operator_logs": replicas.log_counts("Traceback"),
        "apiserver_restarts": [e["outage_seconds"] for e in events if e["kind"] == "apiserver-restart"],
        "bursts": [{"kind": e["kind"], "at": round(e["start"] - begin, 1), "answered": e["answered"]}
                   for e in events if e["kind"].startswith("burst")],
        "proxy_answers_by_status": dict(sorted(answers.items())),
        "watch_relists": jobs_watch.relists,
        "events": [{**e, "start": round(e["start"] - begin, 1), "end": round(e["end"] - begin, 1)} for e in events],
    }


def print_summary(result: dict) -> None:
    latency = result["epoch_line_to_status_seconds"]
    print(f"\n# {result['date']}, {result['cpus']} CPUs, load {result['load_average_before'][0]:.2f} -> "
          f"{result['load_average_after'][0]:.2f}; {result['jobs']} jobs x {result['epochs_per_job']} epochs of "
          f"{result['epoch_seconds']:g}s, {result['minutes']:g} min")
    print(f"phases {result['phases']}  (succeeded {result['succeeded']}/{result['jobs']}, group restarts "
          f"{result['group_restarts']})")
    print(f"epochs printed {result['epochs_printed']}, recorded {result['epochs_recorded']}, lost "
          f"{result['epochs_lost']}, doubled {result['epochs_doubled']} (in any version seen: "
          f"{result['epochs_doubled_in_any_version_seen']}), extra {result['epochs_extra']}")
    print(f"epoch line -> status s: p50 {latency['p50']} p99 {latency['p99']} max {latency['max']}")
    for kind, values in result["epoch_line_to_status_by_fault"].items():
        print(f"  printed during {kind:<18} {values['epochs']:>6} epochs  p50 {values['p50']} p99 {values['p99']} "
              f"max {values['max']}")
    print(f"leader kills {result['leader_kills']}, failovers {result['failovers']}, takeover s "
          f"{result['takeover_seconds']['all']}")
    print(f"operator restarts {result['operator_restarts']} (starts {result['operator_starts']}), unplanned exits "
          f"{len(result['operator_unplanned_exits'])}, tracebacks {result['tracebacks_in_operator_logs']}")
    print(f"kube-apiserver restarts (kill to ready, s) {result['apiserver_restarts']}; bursts "
          f"{[(b['kind'], b['answered']) for b in result['bursts']]}; proxy answers {result['proxy_answers_by_status']}")


def finite(value):
    """`value` with every infinite float (a summary of no values) as None, for strict JSON."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--epoch-seconds", type=float, default=10.0)
    parser.add_argument("--end-margin", type=float, default=45.0,
                        help="the jobs' last epoch lands about this many seconds before the soak ends (default: %(default)g)")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs created per second (default: %(default)g)")
    parser.add_argument("--kill-leader-every", type=float, default=120.0)
    parser.add_argument("--restart-apiserver-every", type=float, default=300.0)
    parser.add_argument("--restart-apiserver-first", type=float, default=210.0)
    parser.add_argument("--apiserver-down", type=float, default=4.0, help="seconds kube-apiserver stays dead")
    parser.add_argument("--burst-every", type=float, default=60.0)
    parser.add_argument("--burst-first", type=float, default=50.0)
    parser.add_argument("--restart-delay", type=float, default=1.0,
                        help="seconds before a replica that exited by itself is started again (default: %(default)g)")
    parser.add_argument("--fault-tail", type=float, default=20.0,
                        help="an epoch printed up to this long after a fault's end counts as printed during it")
    parser.add_argument("--finish-timeout", type=float, default=300.0)
    parser.add_argument("--workdir", type=Path, help="keep the cluster, logs and operator logs here (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    json_path = args.json or REPO / "docs" / "figures" / \
        f"operator-soak-{args.minutes:g}min-{datetime.now(timezone.utc):%Y-%m-%d}.json"
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = soak(args, args.workdir.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="operator-soak-") as tmp:
            result = soak(args, Path(tmp))
    json_path.write_text(json.dumps(finite(result), indent=1) + "\n")
    print_summary(result)
    print(f"\nwrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
