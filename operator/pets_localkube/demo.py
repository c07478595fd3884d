"""The no-cluster demo: a local cluster, the real operator, the sample job, and its status live.

`pets-operator demo` starts the emulated API server and the local kubelet, runs the operator
as a real process against them, applies the sample job `manifests/job.yaml` (generated pet
images; pets_operator ships it and the CRD), and prints what `kubectl get ptj -w` and
`kubectl get ptj -o yaml` would show on a cluster: the phase as it changes and each epoch's
accuracy as it arrives.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from pets_api import GROUP, PLURAL, VERSION, packaged
from pets_api.phases import FINAL_PHASES, SUCCEEDED


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pets-operator demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", type=Path, help="PetsTrainingJob manifest (default: the sample job, manifests/job.yaml)")
    parser.add_argument("--crd", type=Path, help="CRD manifest (default: the project's CRD, manifests/crd.yaml)")
    parser.add_argument("--workdir", type=Path, help="where pod logs and data go (default: a temporary directory)")
    parser.add_argument("--cpu", type=float, default=float(os.cpu_count() or 2), help="local node CPU capacity")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the job to finish")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a spec field of the sample job, e.g. --set epochs=1 --set data.synthetic.imagesPerClass=8")
    return parser.parse_args(argv)


def apply_overrides(job: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`epochs=2`, `data.synthetic.classes=3`: YAML-typed values set under `spec`."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise SystemExit(f"error: --set takes PATH=VALUE, got {item!r}")
        node = job.setdefault("spec", {})
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = parse_value(raw)
    return job


def parse_value(raw: str) -> Any:
    """YAML-typed, except YAML 1.1's `no`/`yes`/`on`/`off` booleans: `mixedPrecision=no` stays "no"."""
    value = yaml.safe_load(raw)
    if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
        return raw.strip()
    return value


def load_single(text: str, source: object) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    if len(docs) != 1:
        raise SystemExit(f"error: {source} must hold exactly one object, found {len(docs)}")
    return docs[0]


def job_text(path: Path | None) -> str:
    """The manifest given with --job, else the sample job pets_operator ships (also when installed from a wheel)."""
    if path is None:
        return packaged.sample_job_text()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise SystemExit(f"error: cannot read {path}: {error.strerror}") from None


@contextmanager
def operator_process(kubeconfig: Path, log_path: Path) -> Iterator[subprocess.Popen]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PETS_OPERATOR_LIVENESS_PORT="0", PYTHONUNBUFFERED="1")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pets_operator", "run"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class StatusPrinter:
    """Prints a `kubectl get ptj -w`-style row when the job's summary changes, and each new epoch."""

    header = f"{'NAME':<20} {'PHASE':<10} {'NODES':>5} {'READY':>5} {'EPOCH':>5} {'ACCURACY':>8} {'AGE':>5}  MESSAGE"

    def __init__(self, out=sys.stdout) -> None:
        self.out = out
        self.started = time.monotonic()
        self.last_row: tuple | None = None
        self.epochs_seen: set[int] = set()
        print(self.header, file=out, flush=True)

    def update(self, job: dict[str, Any]) -> None:
        spec, status = job.get("spec", {}), job.get("status") or {}
        workers = status.get("workers") or {}
        total_epochs = spec.get("epochs", "?")
        for entry in sorted(status.get("epochs") or [], key=lambda e: e["epoch"]):
            if entry["epoch"] in self.epochs_seen:
                continue
            self.epochs_seen.add(entry["epoch"])
            bar = progress_bar(len(self.epochs_seen), total_epochs)
            extra = "".join(
                f"  {label} {entry[key]:.3f}" for key, label in (("trainLoss", "train_loss"), ("seconds", "seconds")) if key in entry
            )
            print(f"  {bar} epoch {entry['epoch'] + 1}/{total_epochs}  accuracy {entry['accuracy']:.4f}{extra}", file=self.out, flush=True)
        row = (status.get("phase", "-"), workers.get("ready", 0), status.get("currentEpoch"), status.get("accuracy"), status.get("message", ""))
        if row != self.last_row:
            self.last_row = row
            phase, ready, epoch, accuracy, message = row
            age = f"{int(time.monotonic() - self.started)}s"
            print(f"{job['metadata']['name']:<20} {phase:<10} {spec.get('numNodes', 1):>5} {ready:>5} "
                  f"{'-' if epoch is None else epoch:>5} {'-' if accuracy is None else f'{accuracy:.4f}':>8} {age:>5}  {message}",
                  file=self.out, flush=True)


def progress_bar(done: int, total: Any, width: int = 20) -> str:
    if not isinstance(total, int) or total <= 0:
        return "[" + "#" * min(done, width) + "]"
    filled = round(width * min(done, total) / total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def wait_for_finish(api, namespace: str, name: str, timeout: float, printer: StatusPrinter,
                    operator: subprocess.Popen) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        printer.update(job)
        if (job.get("status") or {}).get("phase") in FINAL_PHASES:
            return job
        if operator.poll() is not None:
            raise SystemExit(f"error: the operator exited with code {operator.returncode}; see its log")
        if time.monotonic() > deadline:
            raise SystemExit(f"error: the job did not finish within {timeout:.0f}s")
        time.sleep(0.5)


def print_final(job: dict[str, Any], kubeconfig: Path, out=sys.stdout) -> None:
    status = job.get("status") or {}
    shown = {k: status[k] for k in ("phase", "message", "workers", "accuracy", "bestAccuracy", "currentEpoch",
                                     "restarts", "startTime", "completionTime", "epochs") if k in status}
    print("\nFinal status (kubectl get ptj {} -o yaml):".format(job["metadata"]["name"]), file=out)
    print(yaml.safe_dump({"status": shown}, sort_keys=False).rstrip(), file=out)
    print("\nConditions: " + ", ".join(f"{c['type']}={c['status']}" for c in status.get("conditions") or []), file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client, config

    from pets_localkube import LocalCluster, product

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    job = apply_overrides(load_single(job_text(args.job), args.job or "the sample job"), args.overrides)
    if args.crd is not None and not args.crd.is_file():
        raise SystemExit(f"error: CRD manifest {args.crd} does not exist")
    crds = [args.crd] if args.crd is not None else [packaged.crd()]
    namespace = job.get("metadata", {}).get("namespace", "default")
    name = job["metadata"]["name"]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pets-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)

    print(f"Starting a local cluster (emulated API server + local kubelet, {args.cpu:g} CPUs) in {workdir}", flush=True)
    # keep_logs: the logs of every attempt stay in <workdir>/logs, also of pods a group restart deleted.
    with LocalCluster(workdir=workdir, cpu=args.cpu, crds=crds, keep_logs=True, entrypoints=product.ENTRYPOINTS,
                      workload=product.TRAINER) as cluster:
        print(f"  API server {cluster.url}; kubeconfig {cluster.kubeconfig}", flush=True)
        with operator_process(cluster.kubeconfig, workdir / "operator.log") as operator:
            print(f"  operator running (pid {operator.pid}, log {workdir / 'operator.log'})", flush=True)
            api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
            spec = job.get("spec", {})
            print(f"Applied PetsTrainingJob {namespace}/{name}: {spec.get('numNodes', 1)} nodes x "
                  f"{spec.get('processesPerNode', 1)} processes, model {spec.get('model', 'resnet50d')}, "
                  f"{spec.get('epochs', 5)} epochs\n", flush=True)
            final = wait_for_finish(api, namespace, name, args.timeout, StatusPrinter(), operator)
            print_final(final, cluster.kubeconfig)
    return 0 if final["status"]["phase"] == SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
