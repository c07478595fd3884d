"""pip-audit over the lock files: fails on a known vulnerability that has a fix (make audit).

    python -m hack.audit                       # every lock in requirements/ that hack/locks.py makes
    python -m hack.audit --if-unaudited warn   # where the vulnerability service cannot be reached

pip-audit (pinned in requirements/tools.lock) reads each lock as it is (`--disable-pip
--require-hashes`: nothing is installed or resolved) and asks its vulnerability service (`pypi`,
PyPI's JSON API) about each pinned version. The verdict:

- a vulnerability with a fixed version, not in the allowlist: fails (exit 1): upgrade it
  (`make locks LOCKS_ARGS=--upgrade`, or a floor in pyproject.toml) or allowlist it with a reason;
- a vulnerability without a fix: reported, does not fail (there is nothing to upgrade to);
- a package pip-audit could not audit (it says "Dependency not found on PyPI and could not be
  audited" when the JSON API does not answer, and then "No known vulnerabilities found"): fails
  (exit 3), since nothing was checked, unless `--if-unaudited warn`, which .ci/run uses because
  that API is blocked on the network CI runs on (docs/supply-chain.md).

The allowlist, requirements/audit-allowlist.txt, has one `ID  # reason` a line; each ID goes to
pip-audit as `--ignore-vuln ID`; an entry without a reason is an error.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ALLOWLIST = REPO_ROOT / "requirements" / "audit-allowlist.txt"
VULNERABLE, UNAUDITED = 1, 3


def parse_allowlist(text: str) -> dict[str, str]:
    """{vulnerability ID: reason}; a line without a reason, or an ID given twice, is an error."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"(?P<id>[A-Za-z][A-Za-z0-9._:-]*)\s+#\s*(?P<reason>\S.*)", line)
        if not match:
            raise ValueError(f"audit allowlist line {number}: {line!r} is not `ID  # reason`")
        if match["id"] in entries:
            raise ValueError(f"audit allowlist line {number}: {match['id']} is listed twice")
        entries[match["id"]] = match["reason"].strip()
    return entries


@dataclass
class Verdict:
    fixable: list[str] = field(default_factory=list)  # fail
    unfixable: list[str] = field(default_factory=list)  # reported
    unaudited: list[str] = field(default_factory=list)  # fail unless --if-unaudited warn


def judge(report: dict, verdict: Verdict | None = None) -> Verdict:
    """Sort the findings of one pip-audit JSON report (run with the allowlist's --ignore-vuln, so
    what it reports is not allowlisted)."""
    verdict = verdict or Verdict()
    for dependency in report.get("dependencies", []):
        name = dependency.get("name", "?")
        if "skip_reason" in dependency:
            verdict.unaudited.append(f"{name}: {dependency['skip_reason']}")
            continue
        for vuln in dependency.get("vulns", []):
            line = f"{name} {dependency.get('version', '?')}: {vuln.get('id', '?')}"
            if vuln.get("fix_versions"):
                verdict.fixable.append(f"{line} (fixed in {', '.join(vuln['fix_versions'])})")
            else:
                verdict.unfixable.append(f"{line} (no fixed version yet)")
    return verdict


def exit_code(verdict: Verdict, if_unaudited: str) -> int:
    """1 on a vulnerability with a fix; 3 on a package not audited unless `if_unaudited` is "warn"; else 0."""
    if verdict.fixable:
        return VULNERABLE
    if verdict.unaudited and if_unaudited == "fail":
        return UNAUDITED
    return 0


def audit_command(pip_audit: str, lock: Path, allowlist: dict[str, str]) -> list[str]:
    command = [pip_audit, "--requirement", str(lock), "--disable-pip", "--require-hashes",
               "--vulnerability-service", "pypi", "--format", "json", "--progress-spinner", "off"]
    for vuln_id in allowlist:
        command += ["--ignore-vuln", vuln_id]
    return command


def run_audit(pip_audit: str, lock: Path, allowlist: dict[str, str]) -> dict:
    """pip-audit's JSON report of one lock; a run that gives none is one unaudited entry."""
    result = subprocess.run(audit_command(pip_audit, lock, allowlist), capture_output=True, text=True)
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        said = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"dependencies": [{"name": lock.name, "skip_reason": f"pip-audit exited {result.returncode}: {said}"}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locks", nargs="*", type=Path, help="default: every lock hack/locks.py makes")
    parser.add_argument("--if-unaudited", choices=("fail", "warn"), default="fail",
                        help="what a package the service could not audit does (default: fail)")
    args = parser.parse_args(argv)

    from hack import locks, supply_chain_tools

    try:
        allowlist = parse_allowlist(ALLOWLIST.read_text()) if ALLOWLIST.is_file() else {}
        pip_audit = str(supply_chain_tools.ensure_python_tool("pip-audit"))
    except (ValueError, supply_chain_tools.ToolUnavailable) as error:
        print(f"audit: error: {error}", file=sys.stderr)
        return 1
    verdict = Verdict()
    lock_paths = args.locks or [spec.path for spec in locks.LOCKS]
    for lock in lock_paths:
        report = run_audit(pip_audit, lock, allowlist)
        before = len(verdict.unaudited)
        judge(report, verdict)
        print(f"audit: {lock.name}: {len(report.get('dependencies', []))} packages, "
              f"{len(verdict.unaudited) - before} of them could not be audited")
    for line in verdict.unfixable:
        print(f"audit: known vulnerability, no fix yet: {line}")
    if verdict.unaudited:
        print(f"audit: {len(verdict.unaudited)} packages could not be audited, e.g. {verdict.unaudited[0]}",
              file=sys.stderr)
    for line in verdict.fixable:
        print(f"audit: VULNERABLE, fix available: {line}", file=sys.stderr)
    code = exit_code(verdict, args.if_unaudited)
    if code == 0 and verdict.unaudited:
        print("audit: WARNING: vulnerabilities were NOT checked (--if-unaudited warn)", file=sys.stderr)
    elif code == 0:
        print(f"audit: {len(lock_paths)} lock files, no known vulnerability with a fix")
    return code


if __name__ == "__main__":
    sys.exit(main())
