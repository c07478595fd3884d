"""The lock files: every package the images (and the supply-chain tools) install, pinned with hashes.

    python -m hack.locks --write              # regenerate requirements/*.lock (make locks)
    python -m hack.locks --write --upgrade    # the same, taking the newest versions the inputs allow
    python -m hack.locks --check              # fail when --write would change them (make check-locks)
    python -m hack.locks --write --torch-backend cpu   # also requirements/trainer-cpu.lock (see below)

Each lock is `uv pip compile --generate-hashes` (uv pinned in requirements/tools.lock) of its inputs,
resolved for the images' Python and platform (3.11, x86_64, glibc 2.36: Debian bookworm, the
oldest of the two bases), so it is the same lock whatever machine runs it. uv keeps the versions
already in a lock unless --upgrade; so --check, which compiles into a copy of each lock, changes
nothing unless pyproject.toml (or tools.in, or TORCH_PINS) asks for something the lock does not hold.

| lock | inputs | installed by |
| --- | --- | --- |
| operator.lock | pyproject.toml's `operator` extra | Dockerfile |
| trainer.lock | the `trainer` extra, torch and torchvision held at the Makefile's TORCH_PINS | trainer_image/Dockerfile |
| build.lock | pyproject.toml's [build-system] requires (setuptools) | both Dockerfiles, to build the project's wheel |
| tools.lock | requirements/tools.in | hack/supply_chain_tools.py |

torch as PyPI serves it for Linux x86_64 is the CUDA build (its CUDA libraries as nvidia-* wheels),
so trainer.lock is that. `--torch-backend cpu` (or cu126, ...) also writes trainer-cpu.lock from
the PyTorch wheel index of that variant (uv's --torch-backend), for `docker build --build-arg
VARIANT=cpu`; it needs that index to be reachable.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO_ROOT / "requirements"
PYPROJECT = REPO_ROOT / "pyproject.toml"
MAKEFILE = REPO_ROOT / "Makefile"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_36"
COMPILE_COMMAND = "make locks"


@dataclass(frozen=True)
class LockSpec:
    """What one lock file is compiled from."""
    name: str
    extras: tuple[str, ...] = ()  # of pyproject.toml; none means the lock does not read pyproject.toml
    requirements_file: str | None = None  # relative to the repository root
    build_requirements: bool = False  # pyproject.toml's [build-system] requires
    torch_pins: bool = False  # hold torch and torchvision at the Makefile's TORCH_PINS
    torch_backend: str | None = None  # a PyTorch wheel index variant (cpu, cu126, ...) for torch

    @property
    def path(self) -> Path:
        return REQUIREMENTS / f"{self.name}.lock"


LOCKS = (
    LockSpec("operator", extras=("operator",)),
    LockSpec("trainer", extras=("trainer",), torch_pins=True),
    LockSpec("build", build_requirements=True),
    LockSpec("tools", requirements_file="requirements/tools.in"),
)


def variant_lock(torch_backend: str) -> LockSpec:
    """trainer-<variant>.lock: the trainer's lock with torch from the PyTorch index of that variant."""
    if not re.fullmatch(r"cpu|cu\d+|rocm[\d.]+|xpu", torch_backend):
        raise ValueError(f"--torch-backend must be cpu, cuNNN, rocmX.Y or xpu, got {torch_backend!r}")
    return LockSpec(f"trainer-{torch_backend}", extras=("trainer",), torch_pins=True, torch_backend=torch_backend)


# --- reading what the locks are made from -------------------------------------------------------

def makefile_torch_pins(makefile: Path = MAKEFILE) -> list[str]:
    """The Makefile's TORCH_PINS (`torch==X torchvision==Y`), the one place the torch versions are set."""
    match = re.search(r"^TORCH_PINS\s*\??=\s*(.+)$", makefile.read_text(), re.MULTILINE)
    if not match:
        raise ValueError(f"{makefile.name} sets no TORCH_PINS")
    return match.group(1).split()


def pyproject(path: Path = PYPROJECT) -> dict:
    return tomllib.loads(path.read_text())


def direct_requirements(spec: LockSpec, project: dict, torch_pins: list[str]) -> list[str]:
    """The requirements a lock must satisfy, as written in its inputs (self-references expanded)."""
    found: list[str] = []
    if spec.extras:
        name = project["project"]["name"]
        optional = project["project"].get("optional-dependencies", {})
        pending, seen = list(spec.extras), set()
        found += project["project"].get("dependencies", [])
        while pending:
            extra = pending.pop()
            if extra in seen:
                continue
            if extra not in optional:
                raise ValueError(f"pyproject.toml has no extra {extra!r}")
            seen.add(extra)
            for requirement in optional[extra]:
                self_reference = re.fullmatch(rf"{re.escape(name)}\[([^\]]+)\]", requirement.strip())
                if self_reference:
                    pending += [e.strip() for e in self_reference.group(1).split(",")]
                else:
                    found.append(requirement)
    if spec.build_requirements:
        found += project["build-system"]["requires"]
    if spec.requirements_file:
        found += requirement_lines((REPO_ROOT / spec.requirements_file).read_text())
    if spec.torch_pins:
        found += torch_pins
    return found


def requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements.in-style file (comments and blank lines dropped)."""
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line]


# --- reading a lock -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    hashes: tuple[str, ...] = field(default=())


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


PIN_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?P<rest>.*)$")


def parse_lock(text: str) -> dict[str, Pin]:
    """The pins of a lock file. Anything but `name==version --hash=sha256:...` is an error: an
    unpinned line, an editable, a URL or an option would let pip install something not hashed."""
    pins: dict[str, Pin] = {}
    joined = re.sub(r"\\\n", " ", text)
    for number, line in enumerate(joined.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN_LINE.match(line)
        if not match:
            raise ValueError(f"requirement {number}: {line[:80]!r} is not `name==version --hash=...`")
        name = normalize(match.group("name"))
        hashes = tuple(re.findall(r"--hash=(sha256:[0-9a-f]{64})\b", match.group("rest")))
        leftover = re.sub(r"--hash=sha256:[0-9a-f]{64}", "", match.group("rest")).strip()
        if not hashes or leftover:
            raise ValueError(f"{name}=={match.group('version')}: "
                             + ("no sha256 hash" if not hashes else f"unexpected {leftover[:60]!r}"))
        if name in pins:
            raise ValueError(f"{name} is pinned twice")
        pins[name] = Pin(name, match.group("version"), hashes)
    return pins


PROJECT_INPUT = re.compile(r"\(pyproject\.toml\)$|^-r ")  # uv's `# via` for a lock's own inputs


def required_by(text: str) -> dict[str, set[str]]:
    """{package: the packages that require it} from uv's `# via` annotations; "" stands for the
    lock's inputs (pyproject.toml's extra, a requirements file)."""
    parents: dict[str, set[str]] = {}
    current: str | None = None
    in_via_list = False
    for line in re.sub(r"\\\n", " ", text).splitlines():
        stripped = line.strip()
        match = PIN_LINE.match(stripped)
        if match:
            current, in_via_list = normalize(match.group("name")), False
            parents[current] = set()
            continue
        comment = re.fullmatch(r"#\s*(via\b)?\s*(.*)", stripped)
        if current is None or comment is None:
            continue
        if comment.group(1):  # `# via X`, or `# via` with a list of `#   X` below
            in_via_list = not comment.group(2)
            names = [comment.group(2)] if comment.group(2) else []
        elif in_via_list and line.startswith("    #   "):
            names = [comment.group(2)]
        else:
            in_via_list = False
            continue
        parents[current] |= {"" if PROJECT_INPUT.search(name) else normalize(name) for name in names}
    return parents


# --- compiling ----------------------------------------------------------------------------------

def compile_command(spec: LockSpec, uv: str, output: Path, upgrade: bool = False) -> list[str]:
    """The `uv pip compile` of one lock; its requirements not read from a file come on stdin."""
    command = [uv, "pip", "compile", "--quiet", "--generate-hashes", "--python-version", PYTHON_VERSION,
               "--python-platform", PLATFORM, "--custom-compile-command", COMPILE_COMMAND, "--output-file", str(output)]
    if spec.extras:
        command += ["pyproject.toml", *[arg for extra in spec.extras for arg in ("--extra", extra)]]
    if spec.requirements_file:
        command.append(spec.requirements_file)
    if spec.build_requirements:
        command.append("-")  # [build-system] requires, on stdin
    if spec.torch_pins:
        command += ["--constraint", "-"]  # TORCH_PINS, on stdin
    if spec.torch_backend:
        command += ["--torch-backend", spec.torch_backend]
    if upgrade:
        command.append("--upgrade")
    return command


def compile_stdin(spec: LockSpec, project: dict, torch_pins: list[str]) -> str:
    lines = list(project["build-system"]["requires"]) if spec.build_requirements else []
    if spec.torch_pins:
        lines += torch_pins
    return "".join(f"{line}\n" for line in lines)


def compile_lock(spec: LockSpec, uv: str, output: Path, torch_pins: list[str], upgrade: bool = False) -> None:
    command = compile_command(spec, uv, output, upgrade)
    result = subprocess.run(command, cwd=REPO_ROOT, input=compile_stdin(spec, pyproject(), torch_pins),
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{spec.name}.lock: uv pip compile failed:\n{result.stderr.strip()[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the lock files")
    mode.add_argument("--check", action="store_true", help="fail when --write would change a lock file")
    parser.add_argument("--upgrade", action="store_true", help="with --write: the newest versions allowed")
    parser.add_argument("--torch-pins", help="default: the Makefile's TORCH_PINS")
    parser.add_argument("--torch-backend", help="also write trainer-<backend>.lock (cpu, cu126, ...)")
    args = parser.parse_args(argv)
    if args.upgrade and args.check:
        parser.error("--upgrade goes with --write")

    from hack import supply_chain_tools

    torch_pins = args.torch_pins.split() if args.torch_pins else makefile_torch_pins()
    specs = list(LOCKS)
    try:
        if args.torch_backend:
            specs.append(variant_lock(args.torch_backend))
        uv = str(supply_chain_tools.ensure_python_tool("uv"))
        stale = []
        for spec in specs:
            if args.write:
                compile_lock(spec, uv, spec.path, torch_pins, args.upgrade)
                print(f"locks: wrote {spec.path.relative_to(REPO_ROOT)}")
                continue
            if not spec.path.is_file():
                stale.append(f"{spec.path.relative_to(REPO_ROOT)} is missing")
                continue
            with tempfile.TemporaryDirectory() as scratch:
                fresh = Path(scratch) / spec.path.name
                shutil.copyfile(spec.path, fresh)  # uv keeps the versions an existing output file pins
                compile_lock(spec, uv, fresh, torch_pins)
                if fresh.read_text() != spec.path.read_text():
                    stale.append(f"{spec.path.relative_to(REPO_ROOT)} differs from what `make locks` writes")
    except (ValueError, RuntimeError, supply_chain_tools.ToolUnavailable) as error:
        print(f"locks: error: {error}", file=sys.stderr)
        return 1
    for line in stale:
        print(f"locks: {line}", file=sys.stderr)
    if stale:
        print("locks: run `make locks` and commit requirements/", file=sys.stderr)
        return 1
    if args.check:
        print(f"locks: {len(specs)} lock files are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
