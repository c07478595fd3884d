"""CycloneDX SBOMs of both images, from the locks they install (make sbom).

    python -m hack.sbom                      # build/sbom/pets-operator.cdx.json, build/sbom/pets-trainer.cdx.json
    python -m hack.sbom --output-dir DIR

cyclonedx-py (cyclonedx-bom, pinned in requirements/tools.lock) reads the image's lock file: each
pinned package with its version, package URL and the sha256 of every file the lock allows; the
root component is the project from pyproject.toml. `--output-reproducible`: no timestamp or random
serial number, so the same lock gives the same file. cyclonedx-py gives no dependency graph for a
requirements file; this script adds it from the lock's `# via` annotations (uv writes them), the
root component depending on the lock's direct requirements, and validates the result against the
CycloneDX schema (cyclonedx-python-lib's strict JSON validator). What the lock does not list is not in
it: the base image's Debian packages and its own pip and setuptools.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from hack import locks

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGE_LOCKS = {"pets-operator": "operator", "pets-trainer": "trainer"}  # image -> requirements/<lock>.lock
SPEC_VERSION = "1.6"
# Run by the tools' own Python, which has cyclonedx-python-lib: prints the first schema error, if any.
VALIDATE = """
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
error = JsonStrictValidator(SchemaVersion.from_version(sys.argv[1])).validate_str(open(sys.argv[2]).read())
sys.exit(str(error).splitlines()[0] if error else 0)
"""


def sbom_command(cyclonedx_py: str, lock: Path, output: Path) -> list[str]:
    return [cyclonedx_py, "requirements", "--pyproject", str(REPO_ROOT / "pyproject.toml"),
            "--mc-type", "application", "--spec-version", SPEC_VERSION, "--output-reproducible",
            "--output-format", "JSON", "--output-file", str(output), str(lock)]


def with_dependency_graph(bom: dict, required_by: dict[str, set[str]]) -> dict:
    """`bom` with its `dependencies` made from `required_by` ({package: its dependents}, "" for the
    root), each component under its bom-ref, sorted so the output stays reproducible."""
    root = bom["metadata"]["component"]["bom-ref"]
    refs = {locks.normalize(component["name"]): component["bom-ref"] for component in bom["components"]}
    depends_on: dict[str, set[str]] = {ref: set() for ref in [root, *refs.values()]}
    for package, dependents in required_by.items():
        for dependent in dependents:
            depends_on[refs[dependent] if dependent else root].add(refs[package])
    bom["dependencies"] = [{"ref": ref, "dependsOn": sorted(children)} for ref, children in sorted(depends_on.items())]
    return bom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT / "build" / "sbom")
    args = parser.parse_args(argv)

    from hack import supply_chain_tools

    try:
        cyclonedx_py = str(supply_chain_tools.ensure_python_tool("cyclonedx-py"))
    except supply_chain_tools.ToolUnavailable as error:
        print(f"sbom: error: {error}", file=sys.stderr)
        return 1
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for image, lock_name in IMAGE_LOCKS.items():
        lock = REPO_ROOT / "requirements" / f"{lock_name}.lock"
        output = args.output_dir / f"{image}.cdx.json"
        # cyclonedx-py warns that a requirements file gives no dependency graph: added below.
        result = subprocess.run(sbom_command(cyclonedx_py, lock, output), capture_output=True, text=True,
                                env={**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"})
        if result.returncode != 0:
            print(f"sbom: cyclonedx-py failed on {lock.name}:\n{result.stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        bom = with_dependency_graph(json.loads(output.read_text()), locks.required_by(lock.read_text()))
        output.write_text(json.dumps(bom, indent=2, sort_keys=True) + "\n")
        tools_python = Path(cyclonedx_py).with_name("python")
        check = subprocess.run([str(tools_python), "-c", VALIDATE, SPEC_VERSION, str(output)], capture_output=True, text=True)
        if check.returncode != 0:
            print(f"sbom: {output} is not valid CycloneDX {SPEC_VERSION}: {check.stderr.strip()[-1000:]}", file=sys.stderr)
            return 1
        print(f"sbom: {output} (CycloneDX {SPEC_VERSION}, {len(bom['components'])} components, valid)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
