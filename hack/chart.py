"""Render the Helm chart with the real `helm`, and (re)generate the plain manifests from it.

The chart is the single source of the operator's ServiceAccount, RBAC and Deployment;
`manifests/operator.yaml` is `helm template` of the default values (plus the Namespace), so
`kubectl apply -f manifests/` installs the same objects `helm install` does.

    python -m hack.chart --write    # regenerate manifests/operator.yaml (make manifests)
    python -m hack.chart --check    # exit 1 when it has drifted from the chart (make check-manifests)

The tests import it as `hack.chart`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from hack import k8s_tools

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART_DIR = REPO_ROOT / "charts" / "pets-operator"
MANIFESTS_DIR = REPO_ROOT / "manifests"
OPERATOR_MANIFEST = MANIFESTS_DIR / "operator.yaml"
RELEASE = "pets-operator"
NAMESPACE = "pets-operator"
REGENERATE_COMMAND = "make manifests  (or: python -m hack.chart --write)"
# The plain manifests also create the namespace; `helm install --create-namespace` does that for Helm.
MANIFEST_SET = ("namespace.create=true",)
HEADER = (
    "# Generated from charts/pets-operator by `make manifests` (helm template, default values,\n"
    "# plus the Namespace): edit the chart, then regenerate. Install: kubectl apply -f manifests/\n"
)


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


def helm(helm_path: Path, *args: str) -> str:
    result = subprocess.run([str(helm_path), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def template(helm_path: Path, *, sets: tuple[str, ...] = (), values_files: tuple[Path, ...] = (),
             include_crds: bool = False, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    args = ["template", release, str(CHART_DIR), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    for item in sets:
        args += ["--set", item]
    for path in values_files:
        args += ["--values", str(path)]
    return helm(helm_path, *args)


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_operator_manifest(helm_path: Path) -> str:
    return HEADER + template(helm_path, sets=MANIFEST_SET)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write {OPERATOR_MANIFEST.relative_to(REPO_ROOT)}")
    mode.add_argument("--check", action="store_true", help="fail when it differs from the chart")
    args = parser.parse_args(argv)
    rendered = render_operator_manifest(k8s_tools.ensure_tools().helm)
    if args.write:
        OPERATOR_MANIFEST.write_text(rendered)
        print(f"wrote {OPERATOR_MANIFEST.relative_to(REPO_ROOT)}")
        return 0
    current = OPERATOR_MANIFEST.read_text() if OPERATOR_MANIFEST.exists() else ""
    if current != rendered:
        print(f"error: {OPERATOR_MANIFEST.relative_to(REPO_ROOT)} is out of date with the chart; run: {REGENERATE_COMMAND}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
