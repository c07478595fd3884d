"""The pinned tools of the supply-chain checks (docs/supply-chain.md), installed once into the user cache.

- uv, pip-audit, cyclonedx-py, zizmor and shellcheck: one virtual environment installed from
  requirements/tools.lock with `--require-hashes`, in
  `${XDG_CACHE_HOME:-~/.cache}/pets-operator/tools/supply-chain-<digest of the lock>/`; a new lock
  means a new environment, the old one is left alone.
- actionlint: built from its Go module (`go install`, no prebuilt binary to download) into
  `.../pets-operator/tools/actionlint-<version>/`, with GOCACHE and GOMODCACHE under
  `.../pets-operator/go/`; the Go module proxy checks the module against the checksum database.

    python hack/supply_chain_tools.py uv            # prints uv's path (installs on first use)
    python hack/supply_chain_tools.py actionlint    # prints actionlint's path (builds on first use)
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS_LOCK = REPO_ROOT / "requirements" / "tools.lock"
PYTHON_TOOLS = ("uv", "pip-audit", "cyclonedx-py", "zizmor", "shellcheck")
ACTIONLINT_MODULE = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_VERSION = "1.7.12"


class ToolUnavailable(RuntimeError):
    """A tool could not be installed or built (no index or proxy reachable, no Go, a failed step)."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pets-operator"


def python_tools_dir(lock: Path = TOOLS_LOCK) -> Path:
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    return cache_root() / "tools" / f"supply-chain-{digest}"


def actionlint_dir() -> Path:
    return cache_root() / "tools" / f"actionlint-{ACTIONLINT_VERSION}"


def go_environment() -> dict[str, str]:
    """Where `go install` keeps its build and module caches, and no toolchain download."""
    go = cache_root() / "go"
    return {"GOCACHE": str(go / "cache"), "GOMODCACHE": str(go / "mod"), "GOTOOLCHAIN": "local",
            "GOBIN": str(actionlint_dir())}


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        output = (result.stderr.strip() or result.stdout.strip())[-1500:]
        raise ToolUnavailable(f"`{' '.join(command[:6])} ...` failed (exit {result.returncode}): {output}")


def _install_once(directory: Path, executable: Path, install) -> Path:
    """Run `install()` under a lock unless `executable` is there already (concurrent runs install once)."""
    marker = directory / "installed"
    if marker.is_file() and executable.is_file():
        return executable
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_file() and executable.is_file()):
            install()
            if not executable.is_file():
                raise ToolUnavailable(f"the install left no {executable}")
            marker.write_text("ok\n")
    return executable


def ensure_python_tool(name: str) -> Path:
    """The path of `name` (one of PYTHON_TOOLS), installing the locked set on first use."""
    if name not in PYTHON_TOOLS:
        raise ToolUnavailable(f"unknown tool {name!r}: one of {', '.join(PYTHON_TOOLS)} or actionlint")
    if not TOOLS_LOCK.is_file():
        raise ToolUnavailable(f"{TOOLS_LOCK.relative_to(REPO_ROOT)} is missing")
    directory = python_tools_dir()
    venv = directory / "venv"

    def install() -> None:
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", str(TOOLS_LOCK)])

    return _install_once(directory, venv / "bin" / name, install)


def ensure_actionlint() -> Path:
    """actionlint, built with `go install` on first use."""
    directory = actionlint_dir()

    def install() -> None:
        go = shutil.which("go")
        if go is None:
            raise ToolUnavailable("actionlint is built from source and needs Go (`go` is not on PATH)")
        _run([go, "install", f"{ACTIONLINT_MODULE}@v{ACTIONLINT_VERSION}"], env={**os.environ, **go_environment()})

    return _install_once(directory, directory / "actionlint", install)


def ensure(name: str) -> Path:
    return ensure_actionlint() if name == "actionlint" else ensure_python_tool(name)


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or ["actionlint", *PYTHON_TOOLS]
    try:
        for name in names:
            print(ensure(name))
    except ToolUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
