"""Operator latency and cost against the local API, with stand-in pods (no training).

For 1, 10 and 50 concurrent 2-node jobs it measures
  - creation -> all pods: from the job's create call returning to the last of its pods being
    seen by a watch;
  - epoch line -> patched: from the moment pod 0 prints an epoch line to the moment the
    operator's status patch for it has returned (its INFO log line);
  - epoch line -> watch: ... to the moment a watch of the jobs sees the epoch in the status
    (the stand-in puts its wall-clock print time in the line's `seconds` field, which the
    operator copies into status.epochs);
the operator process's RSS and CPU use idle and while it follows the jobs, and the CPU use of the
local cluster's process (API server + kubelet pumping every pod's log), which shares the machine.

    python benchmarks/operator_latency.py [--jobs 1,10,50] [--epochs 5] [--baseline DIR]

`--baseline DIR` runs every round twice, back to back: first with the operator and local cluster
of another source tree (DIR/operator first on PYTHONPATH; make one without touching this
checkout with `git archive <commit> operator | tar -x -C DIR`), then with this checkout's, so
before/after share the machine's load of the moment.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

import kubernetes

from pets_api import GROUP, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[1]
STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    rank, epochs = int(os.environ["MACHINE_RANK"]), int(os.environ["EPOCHS"])
    pause = float(os.environ.get("BENCH_EPOCH_SECONDS", "1"))
    for epoch in range(epochs):
        time.sleep(pause)
        if rank == 0:
            print(f"text before epoch {epoch}", flush=True)
            print(json.dumps({"event": "epoch", "epoch": epoch, "accuracy": 0.5, "seconds": time.time()}), flush=True)
""")


def process_usage(pid: int) -> tuple[float, float]:
    """(RSS in MiB, user+system CPU seconds) of a Linux process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss_kib = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
    return rss_kib / 1024, cpu


class Watcher(threading.Thread):
    """Records when each job's pods and each job's epochs are first seen."""

    def __init__(self, api_client, namespace: str):
        super().__init__(daemon=True)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.pod_seen: dict[str, float] = {}
        self.epoch_seen: dict[tuple[str, int], tuple[float, float]] = {}  # -> (printed, seen)
        self._stop = threading.Event()

    def run(self) -> None:
        threading.Thread(target=self._pods, daemon=True).start()
        watch = kubernetes.watch.Watch()
        for event in watch.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                                  timeout_seconds=3600):
            now = time.time()
            job = event["object"]
            for entry in (job.get("status") or {}).get("epochs") or []:
                self.epoch_seen.setdefault((job["metadata"]["name"], entry["epoch"]), (entry["seconds"], now))
            if self._stop.is_set():
                return

    def _pods(self) -> None:
        watch = kubernetes.watch.Watch()
        for event in watch.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=3600):
            self.pod_seen.setdefault(event["object"].metadata.name, time.time())


def job_body(name: str, epochs: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PetsTrainingJob", "metadata": {"name": name},
            "spec": {"numNodes": 2, "epochs": epochs, "data": {"synthetic": {}}}}


def source_env(source: Path | None) -> dict[str, str]:
    """The environment that runs `pets_operator` from `source`/operator (None: this checkout's install)."""
    if source is None:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(source / "operator"), os.environ.get("PYTHONPATH")]))}


def start_cluster(workdir: Path, cpu: int, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """The local cluster in its own process, so the benchmark's watches do not share its interpreter."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pets_operator", "local", "up", "--workdir", str(workdir), "--cpu", str(cpu),
         "--crd", str(REPO / "manifests" / "crd.yaml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in process.stdout:
        if line.startswith("export KUBECONFIG="):
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            return process, Path(line.split("=", 1)[1].strip())
    raise RuntimeError(f"the local cluster did not start (exit code {process.wait()})")


def printed_times(cluster_dir: Path) -> dict[tuple[str, int], float]:
    """(job, epoch) -> when pod 0 printed the epoch line (the `seconds` field of the stand-in)."""
    times = {}
    for log in cluster_dir.glob("logs/default_bench-*-0_*/*.log"):
        job = log.parent.name.split("_")[1].rsplit("-", 1)[0]
        for line in log.read_text().splitlines():
            if "{" in line:
                event = json.loads(line[line.index("{"):])
                times[(job, event["epoch"])] = event["seconds"]
    return times


def patched_times(operator_log: Path) -> dict[tuple[str, int], float]:
    """(job, epoch) -> when the operator's status patch for it had returned (its INFO log line)."""
    times = {}
    for line in operator_log.read_text().splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        message = record.get("message", "")
        if message.startswith("epoch ") and "object" in record:
            epoch = int(message.split()[1].rstrip(":"))
            times[(record["object"]["name"], epoch)] = datetime.fromisoformat(record["timestamp"]).timestamp()
    return times


def run_round(jobs: int, epochs: int, workdir: Path, source: Path | None = None) -> dict:
    script = workdir / "stand_in.py"
    script.write_text(STAND_IN)
    cluster, kubeconfig = start_cluster(workdir / "cluster", cpu=max(2, jobs * 2), env=source_env(source))
    env = {**source_env(source), "KUBECONFIG": str(kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
           "PETS_OPERATOR_LOG_LEVEL": "INFO", "PETS_OPERATOR_TRAINER_COMMAND": json.dumps([sys.executable, str(script)])}
    operator_log = workdir / "operator.log"
    with operator_log.open("wb") as log:
        operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
    try:
        api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        custom = kubernetes.client.CustomObjectsApi(api_client)
        watcher = Watcher(api_client, "default")
        watcher.start()
        time.sleep(5)  # operator started and idle
        rss_idle, cpu_before_idle = process_usage(operator.pid)
        time.sleep(3)
        cpu_idle = (process_usage(operator.pid)[1] - cpu_before_idle) / 3
        created: dict[str, float] = {}
        follow_start = time.time()
        _, cpu_before = process_usage(operator.pid)
        _, cluster_cpu_before = process_usage(cluster.pid)
        for index in range(jobs):
            name = f"bench-{index}"
            custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job_body(name, epochs))
            created[name] = time.time()
        deadline = time.time() + 120 + epochs * 3
        while len(watcher.epoch_seen) < jobs * epochs and time.time() < deadline:
            time.sleep(0.2)
        rss_busy, cpu_after = process_usage(operator.pid)
        cpu_busy = (cpu_after - cpu_before) / (time.time() - follow_start)
        cluster_cpu = (process_usage(cluster.pid)[1] - cluster_cpu_before) / (time.time() - follow_start)
        # A job whose pods were not all seen counts as never done (inf), not as its first pod's time.
        to_pods = [max(watcher.pod_seen.get(f"{name}-{i}", float("inf")) for i in (0, 1)) - start
                   for name, start in created.items()]
        to_status = [seen - printed for printed, seen in watcher.epoch_seen.values()]
        printed = printed_times(workdir / "cluster")
        to_patched = [done - printed[key] for key, done in patched_times(operator_log).items() if key in printed]
        return {"tree": "baseline" if source else "current", "jobs": jobs,
                "load_average": os.getloadavg()[0], "pods_p50": statistics.median(to_pods), "pods_max": max(to_pods),
                "epoch_p50": statistics.median(to_status), "epoch_max": max(to_status),
                "patched_p50": statistics.median(to_patched), "patched_max": max(to_patched),
                "epochs_seen": len(watcher.epoch_seen), "epochs_expected": jobs * epochs,
                "rss_idle": rss_idle, "rss_busy": rss_busy, "cpu_idle": cpu_idle, "cpu_busy": cpu_busy,
                "cluster_cpu": cluster_cpu}
    finally:
        for process in (operator, cluster):
            process.terminate()
            process.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="1,10,50")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run each round with DIR/operator's pets_operator (before/after in one run)")
    args = parser.parse_args()
    if args.baseline and not (args.baseline / "operator" / "pets_operator" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no operator/pets_operator/__init__.py there")
    sources = [args.baseline.resolve(), None] if args.baseline else [None]
    rows = []
    for jobs in (int(part) for part in args.jobs.split(",")):
        for source in sources:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(run_round(jobs, args.epochs, Path(tmp), source))
                print(json.dumps(rows[-1]), flush=True)
    for tree in dict.fromkeys(row["tree"] for row in rows):
        print_table(tree, [row for row in rows if row["tree"] == tree])
    return 0


def print_table(tree: str, rows: list[dict]) -> None:
    base = rows[0]
    header = (f"{tree:<9} {'jobs':>5} {'load':>5} {'create->pods s p50/max':>22} {'x1':>6} {'line->patched s p50/max':>24} {'x1':>6} "
              f"{'line->watch s p50/max':>22} {'x1':>6} {'RSS MiB idle/busy':>18} {'CPU idle/busy':>14} {'API CPU':>8} {'epochs':>9}")
    print("\n" + header)
    for row in rows:
        print(f"{'':<9} {row['jobs']:>5} {row['load_average']:>5.1f} "
              f"{row['pods_p50']:>10.3f}/{row['pods_max']:<11.3f} {row['pods_max'] / base['pods_max']:>6.1f} "
              f"{row['patched_p50']:>11.3f}/{row['patched_max']:<12.3f} {row['patched_max'] / base['patched_max']:>6.1f} "
              f"{row['epoch_p50']:>10.3f}/{row['epoch_max']:<11.3f} {row['epoch_max'] / base['epoch_max']:>6.1f} "
              f"{row['rss_idle']:>8.1f}/{row['rss_busy']:<9.1f} {row['cpu_idle']:>6.1%}/{row['cpu_busy']:<7.1%} {row['cluster_cpu']:>8.0%} "
              f"{row['epochs_seen']:>4}/{row['epochs_expected']}")


if __name__ == "__main__":
    sys.exit(main())
