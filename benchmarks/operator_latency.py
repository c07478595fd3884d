"""Operator latency and cost against the local API, with stand-in pods (no training).

For 1, 10 and 50 concurrent 2-node jobs it measures
  - creation -> all pods: from the job's create call returning to the last of its pods being
    seen by a watch;
  - epoch line -> status: from the moment pod 0 prints an epoch line to the moment that epoch
    is seen in the job's status by a watch (the stand-in puts its wall-clock print time in the
    line's `seconds` field, which the operator copies into status.epochs);
and the operator process's RSS and CPU use idle and while it follows the jobs.

    python benchmarks/operator_latency.py [--jobs 1,10,50] [--epochs 5]
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
from pathlib import Path

import kubernetes

from pets_operator import GROUP, PLURAL, VERSION
from pets_operator.local import LocalCluster

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


def run_round(jobs: int, epochs: int, workdir: Path, log_level: str = "WARNING") -> dict:
    script = workdir / "stand_in.py"
    script.write_text(STAND_IN)
    with LocalCluster(workdir=workdir / "cluster", cpu=max(2, jobs * 2), crds=[REPO / "manifests" / "crd.yaml"]) as cluster:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PETS_OPERATOR_LIVENESS_PORT": "0",
               "PETS_OPERATOR_LOG_LEVEL": log_level,
               "PETS_OPERATOR_TRAINER_COMMAND": json.dumps([sys.executable, str(script)])}
        log = (workdir / "operator.log").open("wb")
        operator = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        try:
            api_client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
            custom = kubernetes.client.CustomObjectsApi(api_client)
            watcher = Watcher(api_client, "default")
            watcher.start()
            time.sleep(5)  # operator started and idle
            rss_idle, cpu_before_idle = process_usage(operator.pid)
            time.sleep(3)
            cpu_idle = (process_usage(operator.pid)[1] - cpu_before_idle) / 3
            created: dict[str, float] = {}
            for index in range(jobs):
                name = f"bench-{index}"
                custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job_body(name, epochs))
                created[name] = time.time()
            follow_start = time.time()
            _, cpu_before = process_usage(operator.pid)
            deadline = time.time() + 120 + epochs * 3
            while len(watcher.epoch_seen) < jobs * epochs and time.time() < deadline:
                time.sleep(0.2)
            rss_busy, cpu_after = process_usage(operator.pid)
            cpu_busy = (cpu_after - cpu_before) / (time.time() - follow_start)
            to_pods = [max(watcher.pod_seen.get(f"{name}-{i}", float("nan")) for i in (0, 1)) - start
                       for name, start in created.items()]
            to_status = [seen - printed for printed, seen in watcher.epoch_seen.values()]
            return {"jobs": jobs, "pods_p50": statistics.median(to_pods), "pods_max": max(to_pods),
                    "epoch_p50": statistics.median(to_status), "epoch_max": max(to_status),
                    "epochs_seen": len(watcher.epoch_seen), "epochs_expected": jobs * epochs,
                    "rss_idle": rss_idle, "rss_busy": rss_busy, "cpu_idle": cpu_idle, "cpu_busy": cpu_busy}
        finally:
            operator.terminate()
            operator.wait(20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="1,10,50")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for jobs in (int(part) for part in args.jobs.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(run_round(jobs, args.epochs, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    print(f"\n{'jobs':>5} {'create->pods p50/max s':>23} {'ratio':>6} {'epoch->status p50/max s':>24} {'ratio':>6} "
          f"{'RSS idle/busy MiB':>18} {'CPU idle/busy':>14} {'epochs seen':>12}")
    for row in rows:
        print(f"{row['jobs']:>5} {row['pods_p50']:>11.3f}/{row['pods_max']:<11.3f} {row['pods_max'] / base['pods_max']:>6.1f} "
              f"{row['epoch_p50']:>12.3f}/{row['epoch_max']:<11.3f} {row['epoch_max'] / base['epoch_max']:>6.1f} "
              f"{row['rss_idle']:>8.1f}/{row['rss_busy']:<9.1f} {row['cpu_idle']:>6.1%}/{row['cpu_busy']:<7.1%} "
              f"{row['epochs_seen']:>5}/{row['epochs_expected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
