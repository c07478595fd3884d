"""`local up`: a local cluster (API server + kubelet) until Ctrl-C (or `local down`).

Prints the kubeconfig path and content so `kubectl` and the notebook client can use it. The API
server is the emulated one by default; `--control-plane kubernetes` runs Kubernetes' own control
plane (built once by hack/control_plane.sh, which needs Go) and joins the local kubelet to it as a
Node; `--with-kueue` then also installs and runs Kueue there (built once by hack/kueue.sh;
`pets_localkube.kueue`) with a ResourceFlavor, a ClusterQueue of `--kueue-quota` (default: one
2-node group of manifests/job.yaml) and a LocalQueue in `--kueue-namespace`, with Kueue's
waitForPodsReady on with `--kueue-wait-for-pods-ready SECONDS`. `local down --workdir
DIR` stops the `local up` of that work directory and every process it started (pods, kubelet,
control plane, Kueue), as Ctrl-C does.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cluster import LocalCluster
from .control_plane import ControlPlaneError
from .kubelet import RUNTIMES
from .runtimes.simulated import PLAIN, Workload


def parse_args(argv: list[str], prog: str = "local", crds_help: str = "none") -> argparse.Namespace:
    """`crds_help`: what the CRDs applied without `--crd` are, for the help text."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start the local cluster and keep it running until interrupted")
    up.add_argument("--workdir", type=Path, help="pod logs, volumes and the kubeconfig (default: a new temporary directory)")
    up.add_argument("--port", type=int, default=0, help="API server port on 127.0.0.1 (default: a free one)")
    up.add_argument("--cpu", type=float, default=float(os.cpu_count() or 2), help="CPU capacity of the local node (default: %(default)g)")
    up.add_argument("--memory", default="8Gi", help="memory capacity of the local node (default: %(default)s)")
    up.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu capacity of the local node (default: 0)")
    up.add_argument("--pods", type=int, default=110,
                    help="pods capacity (and allocatable) of the local node (default: %(default)s, a kubelet's maxPods)")
    up.add_argument("--crd", type=Path, action="append", default=None,
                    help=f"CRD manifest to apply at start; repeatable (default: {crds_help})")
    up.add_argument("--kubeconfig-out", type=Path, help="also write the kubeconfig to this path")
    up.add_argument("--keep-logs", action="store_true",
                    help="keep the log files of deleted pods under <workdir>/logs (default: they go with the pod, as on a node)")
    up.add_argument("--simulate", action="store_true",
                    help="simulate every pod: no process, phases and log lines on the schedule the pod carries "
                         "(see pets_localkube/runtimes/simulated.py); without it only pods that ask for it are simulated")
    up.add_argument("--runtime", choices=sorted(RUNTIMES), default="process",
                    help="how the kubelet runs containers: as local processes (default; no container engine needed) "
                         "or as docker containers from their images on one docker network (pets_localkube/runtimes/docker.py)")
    up.add_argument("--control-plane", choices=CONTROL_PLANES, default="emulated",
                    help="the API server: the emulated one (default; nothing to build) or Kubernetes' own etcd, "
                         "kube-apiserver, kube-controller-manager and kube-scheduler, with the local kubelet as a Node "
                         "(the binaries are built once by hack/control_plane.sh, which needs Go)")
    up.add_argument("--bin-dir", type=Path,
                    help="with --control-plane kubernetes: the directory of the binaries (default: what "
                         "hack/control_plane.sh built)")
    up.add_argument("--control-plane-arg", action="append", default=[], metavar="COMPONENT=FLAG",
                    help="with --control-plane kubernetes: one more flag for one component, e.g. "
                         "kube-scheduler=--kube-api-qps=200 (repeatable)")
    kueue = up.add_argument_group("Kueue (with --control-plane kubernetes)")
    kueue.add_argument("--with-kueue", action="store_true",
                       help="also install and run Kueue (built once by hack/kueue.sh), with a ResourceFlavor, a "
                            "ClusterQueue of --kueue-quota and a LocalQueue in --kueue-namespace")
    kueue.add_argument("--kueue-namespace", default="default", help="the LocalQueue's namespace (default: %(default)s)")
    kueue.add_argument("--kueue-local-queue", default="default", help="the LocalQueue's name (default: %(default)s)")
    kueue.add_argument("--kueue-cluster-queue", default="cluster-queue",
                       help="the ClusterQueue's name (default: %(default)s)")
    kueue.add_argument("--kueue-quota", default=DEFAULT_KUEUE_QUOTA,
                       help="the ClusterQueue's nominal quota (default: %(default)s, one 2-node group of "
                            "manifests/job.yaml: 2 x 500m CPU, 2 x 1Gi)")
    kueue.add_argument("--kueue-wait-for-pods-ready", type=float, metavar="SECONDS",
                       help="turn on Kueue's waitForPodsReady with this timeout: a group whose pods are not all "
                            "Ready in time is evicted and requeued (default: off)")
    kueue.add_argument("--kueue-bin-dir", type=Path,
                       help="the kueue binary's directory (default: $PETS_KUEUE_BIN, else what hack/kueue.sh built)")
    down = sub.add_parser("down", help="stop the `local up` of a work directory and every process it started")
    down.add_argument("--workdir", type=Path, required=True, help="the work directory `local up` runs with")
    down.add_argument("--timeout", type=float, default=90, help="seconds to wait for it to end (default: %(default)g)")
    return parser.parse_args(argv)


CONTROL_PLANES = ("emulated", "kubernetes")
DEFAULT_KUEUE_QUOTA = "cpu=1,memory=2Gi"
PID_FILE = "local-up.pid"  # in the work directory while `local up` runs: "<pid> <start time>"


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot; /proc/<pid>/stat field 22): with the pid it
    names one process, never a later one that reuses the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def write_pid_file(workdir: Path) -> Path:
    path = workdir / PID_FILE
    path.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n", encoding="utf-8")
    return path


def running_up(workdir: Path) -> int | None:
    """The pid of the `local up` running with this work directory, None when none does."""
    try:
        pid_text, started = (workdir / PID_FILE).read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return None
    pid = int(pid_text)
    return pid if _start_time(pid) == started else None


def down(workdir: Path, timeout: float) -> int:
    pid = running_up(workdir)
    if pid is None:
        print(f"error: no `local up` is running with work directory {workdir}", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running_up(workdir) != pid:
            print(f"stopped the local cluster of {workdir} (pid {pid})")
            return 0
        time.sleep(0.2)
    print(f"error: the `local up` of {workdir} (pid {pid}) did not end within {timeout:g} s", file=sys.stderr)
    return 1


# The command knows no workload: whoever runs it hands in the CRDs applied when no `--crd` is given,
# the images' entrypoints and what simulated pods print (`pets-operator local` runs `product.main`).
def main(argv: list[str] | None = None, *, prog: str = "local", default_crds: Sequence[Path | dict[str, Any]] = (),
         crds_help: str = "none", entrypoints: Mapping[str, Sequence[str]] | None = None, workload: Workload = PLAIN) -> int:
    """`default_crds`: applied when no `--crd` is given; `entrypoints`, `workload`: as `LocalCluster` takes them."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv), prog, crds_help)
    if args.action == "down":
        return down(args.workdir.resolve(), args.timeout)
    for crd in args.crd or []:
        if not crd.is_file():
            print(f"error: CRD manifest {crd} does not exist", file=sys.stderr)
            return 2
    if args.with_kueue and args.control_plane != "kubernetes":
        print("error: --with-kueue needs --control-plane kubernetes (Kueue runs against a real API server)",
              file=sys.stderr)
        return 2
    if args.with_kueue:
        from .kueue import parse_quota
        try:
            args.kueue_quota = parse_quota(args.kueue_quota)
        except ValueError as error:
            print(f"error: --kueue-quota: {error}", file=sys.stderr)
            return 2
    crds = args.crd if args.crd is not None else list(default_crds)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pets-local-"))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    settings = dict(workdir=workdir, cpu=args.cpu, memory=args.memory, gpus=args.gpus, crds=crds, port=args.port,
                    keep_logs=args.keep_logs, simulate=args.simulate, runtime=args.runtime, entrypoints=entrypoints,
                    workload=workload, pods=args.pods)
    extra_args: dict[str, list[str]] = {}
    for item in args.control_plane_arg:
        component, _, flag = item.partition("=")
        if not flag or args.control_plane != "kubernetes":
            print(f"error: --control-plane-arg {item!r}: COMPONENT=FLAG, with --control-plane kubernetes",
                  file=sys.stderr)
            return 2
        extra_args.setdefault(component, []).append(flag)
    try:
        if args.control_plane == "kubernetes":
            from .kubernetes_cluster import KubernetesCluster
            cluster: Any = KubernetesCluster(**settings, bin_dir=args.bin_dir, extra_args=extra_args)
        else:
            cluster = LocalCluster(**settings)
        cluster.start()
    except (OSError, ValueError, ControlPlaneError) as error:
        print(f"error: cannot start the local cluster: {error}", file=sys.stderr)
        return 2
    kueue = None
    if args.with_kueue:
        try:
            kueue = start_kueue(args, cluster)
        except (OSError, ValueError, RuntimeError) as error:
            cluster.stop()
            print(f"error: cannot start Kueue: {error}", file=sys.stderr)
            return 2
    pid_file = write_pid_file(cluster.workdir)
    try:
        text = cluster.kubeconfig.read_text(encoding="utf-8")
        if args.kubeconfig_out:
            args.kubeconfig_out.write_text(text, encoding="utf-8")
            os.chmod(args.kubeconfig_out, 0o600)
        server = "Kubernetes' control plane" if args.control_plane == "kubernetes" else "Local cluster API server"
        print(f"{server} at {cluster.url} (node {cluster.node_name}, {cluster.capacity['cpu']} CPUs"
              f"{', simulated pods' if args.simulate else ''}, {args.runtime} runtime); workdir {workdir}")
        print(f"kubeconfig: {cluster.kubeconfig}\n---\n{text}---")
        if kueue is not None:
            print(f"Kueue at {kueue.webhook_url} (log {kueue.log}); LocalQueue "
                  f"{args.kueue_namespace}/{args.kueue_local_queue} onto ClusterQueue {args.kueue_cluster_queue} "
                  f"(quota {','.join(f'{k}={v}' for k, v in args.kueue_quota.items())})"
                  + (f"; waitForPodsReady timeout {args.kueue_wait_for_pods_ready:g}s"
                     if args.kueue_wait_for_pods_ready is not None else ""))
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        stop.wait()
    finally:
        if kueue is not None:
            kueue.stop()
        cluster.stop()
        pid_file.unlink(missing_ok=True)
    return 0


def start_kueue(args: argparse.Namespace, cluster: Any) -> Any:
    """Kueue installed into the running control plane, with its queues; stopped by the caller."""
    from .kueue import Kueue, wait_for_pods_ready

    timeout = args.kueue_wait_for_pods_ready
    kueue = Kueue(cluster.kubeconfig, cluster.workdir / "kueue", bin_dir=args.kueue_bin_dir,
                  pods_ready=None if timeout is None else wait_for_pods_ready(timeout))
    kueue.start()
    try:
        kueue.serve_namespace(args.kueue_namespace, args.kueue_quota, args.kueue_local_queue, args.kueue_cluster_queue)
    except BaseException:
        kueue.stop()
        raise
    return kueue
