"""The GitHub workflows' supply-chain rules (actionlint and zizmor check more: make lint-workflows):
every action pinned to a commit with its release tag beside it, no permission by default, and no
checkout that leaves the token in .git/config."""
from __future__ import annotations

import re

import pytest
import yaml

from hack import chart

WORKFLOWS = sorted((chart.REPO_ROOT / ".github" / "workflows").glob("*.y*ml"))
PINNED_USES = re.compile(r"^\s*(-\s+)?uses:\s+[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+#\s+v\d+\.\d+\.\d+\s*$")


def test_there_are_workflows():
    assert WORKFLOWS


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_every_action_is_pinned_to_a_commit_with_its_version_beside_it(workflow):
    uses = [line for line in workflow.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert uses
    unpinned = [line.strip() for line in uses if not PINNED_USES.match(line)]
    assert not unpinned, f"{workflow.name}: not `owner/repo@<40-hex commit>  # vX.Y.Z`: {unpinned}"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_no_permission_by_default_and_no_job_may_write(workflow):
    document = yaml.safe_load(workflow.read_text())
    assert document.get("permissions") in ({}, {"contents": "read"}), \
        f"{workflow.name}: top-level permissions {document.get('permissions')!r}"
    for name, job in document["jobs"].items():
        granted = job.get("permissions", {})
        assert isinstance(granted, dict) and set(granted.values()) <= {"read", "none"}, f"job {name}: {granted!r}"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_checkout_does_not_persist_the_token(workflow):
    document = yaml.safe_load(workflow.read_text())
    checkouts = [(name, step) for name, job in document["jobs"].items() for step in job.get("steps", [])
                 if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert checkouts
    for name, step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False, f"job {name}: {step}"
