"""checkov (the IaC security scanner, from PyPI) in a virtual environment of its own, for the tests.

checkov pins `packaging<24`, `networkx<2.7` and, through boto3, `python-dateutil<3`, which the
project's own test tools (pytest 9, kubernetes 37) exclude, and pip backtracks for many minutes
when asked to resolve them together. So it is not in the `test` extra: the first use installs the
pinned version into a cache outside the repository, once, and the tests run its `checkov`.

    python hack/checkov_tool.py        # prints the checkov path (installs it on first use)

checkov scans offline; `OFFLINE_ENV` (with `--skip-download`) turns off its update check against
PyPI and its calls to the Prisma Cloud platform (policy metadata, guidelines), so a machine without
internet neither waits for them nor logs their tracebacks (checked with `unshare -n`: no attempt).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "3.3.30"
# No update check against PyPI, no policy metadata or guidelines from the Prisma Cloud platform (with no
# API key nothing is uploaded anyway); checkov's own log at WARNING.
OFFLINE_ENV = {"CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "BC_SKIP_MAPPING": "TRUE", "LOG_LEVEL": "WARNING"}


class CheckovUnavailable(RuntimeError):
    """checkov could not be installed (no package index reachable, a failed install)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pets-operator" / "checkov" / VERSION


def ensure_checkov(directory: Path | None = None) -> Path:
    """The checkov executable, installed into `directory` (default: the user cache) on first use."""
    directory = directory or cache_dir()
    executable = directory / "venv" / "bin" / "checkov"
    marker = directory / "installed"
    if marker.is_file() and executable.is_file():
        return executable
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as lock:  # concurrent test sessions install it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and executable.is_file():
            return executable
        venv = directory / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        steps = ([sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                  f"checkov=={VERSION}"])
        for command in steps:
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise CheckovUnavailable(f"{' '.join(command[:4])} ... failed: {result.stderr.strip()[-800:]}")
        marker.write_text(VERSION)
    return executable


def main() -> int:
    try:
        print(ensure_checkov())
    except CheckovUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
