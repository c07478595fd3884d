"""actionlint and zizmor on .github/workflows/ (make lint-workflows); either's finding fails it.

    python -m hack.lint_workflows

actionlint (built from its Go module by hack/supply_chain_tools.py) checks the workflow syntax,
expressions and, through shellcheck (from requirements/tools.lock), the `run:` scripts. zizmor
(requirements/tools.lock) runs its security audits `--offline`: no GitHub token and no GitHub API,
so its online audits (impostor commits, known-vulnerable actions, ref confusion) do not run;
docs/supply-chain.md says how the pinned commits were checked instead.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
TOKEN_VARIABLES = ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")


def lint_commands(actionlint: str, shellcheck: str, zizmor: str) -> list[list[str]]:
    workflows = sorted(str(path) for path in WORKFLOWS.glob("*.y*ml"))
    return [[actionlint, "-shellcheck", shellcheck, *workflows],
            [zizmor, "--offline", "--no-progress", str(WORKFLOWS)]]


def main() -> int:
    from hack import supply_chain_tools

    try:
        tools = {name: str(supply_chain_tools.ensure(name)) for name in ("actionlint", "shellcheck", "zizmor")}
    except supply_chain_tools.ToolUnavailable as error:
        print(f"lint-workflows: error: {error}", file=sys.stderr)
        return 1
    environment = {key: value for key, value in os.environ.items() if key not in TOKEN_VARIABLES}
    failed = []
    for command in lint_commands(tools["actionlint"], tools["shellcheck"], tools["zizmor"]):
        name = Path(command[0]).name
        if subprocess.run(command, cwd=REPO_ROOT, env=environment).returncode != 0:
            failed.append(name)
        else:
            print(f"lint-workflows: {name}: clean")
    if failed:
        print(f"lint-workflows: {' and '.join(failed)} found problems in {WORKFLOWS.relative_to(REPO_ROOT)}/",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
