"""`pets-operator` command: one entry point, each subcommand owned by its own module."""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, help). Modules are imported only when their subcommand runs,
# so `pets-operator run` never imports the local cluster or torch. `local` and `demo` live in
# `pets_localkube`, which the operator image does not ship; pets_operator never imports it.
SUBCOMMANDS = {
    "run": ("pets_operator.run", "run the operator against the cluster in KUBECONFIG / in-cluster config"),
    "local": ("pets_localkube.product", "a local cluster with no Kubernetes: emulated API server + local kubelet"),
    "demo": ("pets_localkube.demo", "the no-cluster demo: local cluster, real operator, sample job, live status"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="pets-operator", description=__doc__)
    parser.add_argument("command", choices=sorted(SUBCOMMANDS), help="; ".join(f"{k}: {v[1]}" for k, v in SUBCOMMANDS.items()))
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv[:1] or ["--help"])
    module_name = SUBCOMMANDS[argv[0]][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        package = module_name.partition(".")[0]
        if error.name != package:  # a module the subcommand itself imports: a real bug, keep the traceback
            raise
        print(f"error: `pets-operator {argv[0]}` needs the local cluster package {package}, which is not installed "
              "(the operator image has only `pets-operator run`)", file=sys.stderr)
        return 2
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
