"""`local up`: a local cluster (API server + kubelet) until Ctrl-C.

Prints the kubeconfig path and content so `kubectl` and the notebook client can use it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .cluster import LocalCluster
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
    return parser.parse_args(argv)


# The command knows no workload: whoever runs it hands in the CRDs applied when no `--crd` is given,
# the images' entrypoints and what simulated pods print (`pets-operator local` runs `product.main`).
def main(argv: list[str] | None = None, *, prog: str = "local", default_crds: Sequence[Path | dict[str, Any]] = (),
         crds_help: str = "none", entrypoints: Mapping[str, Sequence[str]] | None = None, workload: Workload = PLAIN) -> int:
    """`default_crds`: applied when no `--crd` is given; `entrypoints`, `workload`: as `LocalCluster` takes them."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv), prog, crds_help)
    for crd in args.crd or []:
        if not crd.is_file():
            print(f"error: CRD manifest {crd} does not exist", file=sys.stderr)
            return 2
    crds = args.crd if args.crd is not None else list(default_crds)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pets-local-"))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster = LocalCluster(workdir=workdir, cpu=args.cpu, memory=args.memory, gpus=args.gpus, crds=crds, port=args.port,
                               keep_logs=args.keep_logs, simulate=args.simulate, runtime=args.runtime,
                               entrypoints=entrypoints, workload=workload)
        cluster.start()
    except OSError as error:
        print(f"error: cannot start the local cluster: {error}", file=sys.stderr)
        return 2
    try:
        text = cluster.kubeconfig.read_text(encoding="utf-8")
        if args.kubeconfig_out:
            args.kubeconfig_out.write_text(text, encoding="utf-8")
        print(f"Local cluster API server at {cluster.url} (node {cluster.node_name}, {cluster.capacity['cpu']} CPUs"
              f"{', simulated pods' if args.simulate else ''}, {args.runtime} runtime); workdir {workdir}")
        print(f"kubeconfig: {cluster.kubeconfig}\n---\n{text}---")
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0
