"""CycloneDX SBOMs of both images, from the locks they install (make sbom).

    python hack/sbom.py                      # build/sbom/pets-operator.cdx.json, build/sbom/pets-trainer.cdx.json
    python hack/sbom.py --output-dir DIR

cyclonedx-py (cyclonedx-bom, pinned in requirements/tools.lock) reads the image's lock file: each
pinned package with its version, package URL and the sha256 of every file the lock allows; the
root component is the project from pyproject.toml. `--output-reproducible`: no timestamp or random
serial number, so the same lock gives the same file. What the lock does not list is not in it: the
base image's Debian packages and its own pip, and the dependency graph (a lock is a flat list).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGE_LOCKS = {"pets-operator": "operator", "pets-trainer": "trainer"}  # image -> requirements/<lock>.lock
SPEC_VERSION = "1.6"


def sbom_command(cyclonedx_py: str, lock: Path, output: Path) -> list[str]:
    return [cyclonedx_py, "requirements", "--pyproject", str(REPO_ROOT / "pyproject.toml"),
            "--mc-type", "application", "--spec-version", SPEC_VERSION, "--output-reproducible",
            "--output-format", "JSON", "--output-file", str(output), str(lock)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "build" / "sbom")
    args = parser.parse_args(argv)

    import supply_chain_tools

    try:
        cyclonedx_py = str(supply_chain_tools.ensure_python_tool("cyclonedx-py"))
    except supply_chain_tools.ToolUnavailable as error:
        print(f"sbom: error: {error}", file=sys.stderr)
        return 1
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for image, lock_name in IMAGE_LOCKS.items():
        lock = REPO_ROOT / "requirements" / f"{lock_name}.lock"
        output = args.output_dir / f"{image}.cdx.json"
        # -W: cyclonedx-py warns that a requirements file gives no dependency graph; the docstring says so.
        result = subprocess.run(sbom_command(cyclonedx_py, lock, output), capture_output=True, text=True,
                                env={**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"})
        if result.returncode != 0:
            print(f"sbom: cyclonedx-py failed on {lock.name}:\n{result.stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        print(f"sbom: {output}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
