"""manifests/job.yaml's comments stay true to the CRD.

Its header comment shows commands and spec fragments, each on an indented line (`#   ...`): a line
that is not a `kubectl` command is a YAML fragment of the spec. Applied to the sample in order (a later
fragment replaces an earlier one's key, as a reader editing the file would), each step must still be a
job the API server accepts, unknown fields refused, and one the operator runs. `spec.<path>` mentioned
anywhere in the comment must be a field of the CRD's spec.
"""
from __future__ import annotations

import copy
import re

import yaml

from hack import chart
from pets_api.contract import RESERVED_ENV
from pets_operator.spec import with_defaults
from pets_operator.validation import spec_problems
from tests.support.kube_schemas import crd_schemas, problems

SAMPLE_JOB = chart.MANIFESTS_DIR / "job.yaml"
CRD = chart.MANIFESTS_DIR / "crd.yaml"
INDENTED = re.compile(r"^#\s{2,}(?P<text>\S.*)$")
SPEC_PATH = re.compile(r"\bspec\.(?P<path>[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*)")


def header_comment(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def fragments(comment: list[str]) -> list[dict]:
    found = []
    for line in comment:
        match = INDENTED.match(line)
        if match is None or match["text"].startswith("kubectl "):
            continue
        fragment = yaml.safe_load(match["text"])
        assert isinstance(fragment, dict), f"an indented comment line is neither a kubectl command nor YAML: {line!r}"
        found.append(fragment)
    return found


def spec_schema() -> dict:
    (crd,) = chart.documents(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def has_path(schema: dict, path: str) -> bool:
    for name in path.split("."):
        schema = (schema.get("properties") or {}).get(name)
        if schema is None:
            return False
    return True


def unknown_spec_paths(comment: list[str]) -> list[str]:
    named = [match["path"] for line in comment for match in SPEC_PATH.finditer(line)]
    return [path for path in named if not has_path(spec_schema(), path)]


def fragment_problems(comment: list[str], job: dict) -> list[str]:
    """Why the job with the comment's fragments applied one after another would be refused or not run."""
    schemas = crd_schemas(chart.documents(CRD.read_text()))
    found = []
    for fragment in fragments(comment):
        job = copy.deepcopy(job)
        job["spec"].update(fragment)
        found += problems(job, schemas)
        found += spec_problems(job["metadata"]["name"], with_defaults(job["spec"], "img"), RESERVED_ENV)
    return found


def sample() -> tuple[list[str], dict]:
    text = SAMPLE_JOB.read_text()
    (job,) = chart.documents(text)
    return header_comment(text), job


def test_the_comment_names_only_spec_fields_the_crd_has():
    comment, _ = sample()
    assert unknown_spec_paths(comment) == []


def test_each_fragment_in_the_comment_applied_in_order_is_a_valid_job():
    comment, job = sample()
    assert fragments(comment), "the sample's comment shows how to point it at real data (and the check is not vacuous)"
    assert fragment_problems(comment, job) == []


def test_a_field_the_crd_does_not_have_is_caught():
    _, job = sample()
    assert any("pretrainedWeight" in problem for problem in fragment_problems(["#   pretrainedWeight: /w.safetensors"], job))
    assert unknown_spec_paths(["# weights: spec.pretrained.file"]) == ["pretrained.file"]
