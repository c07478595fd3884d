"""A security scan (checkov, its Kubernetes checks) of what gets deployed: the chart as `helm template`
renders it, and the objects the operator builds for a job (`builders.*_body`: Service, NetworkPolicy,
pod). One checkov run over a directory of rendered files; any finding outside `ALLOWED` fails.

checkov comes from PyPI into a virtual environment of its own (`hack/checkov_tool.py` says why) and
runs offline; the test is skipped when it cannot be installed.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from hack import chart, checkov_tool
from pets_api import packaged
from pets_operator import builders
from pets_operator.spec import with_defaults

pytestmark = pytest.mark.slow  # checkov: its own virtual environment (installed on first use), a scan of many seconds

# (check, resource kind or "Kind.namespace.name") -> why the finding stays. Keep it short and true: an
# entry that no longer matches a finding fails the test too.
ALLOWED = {
    # The operator's Deployment.
    ("CKV_K8S_38", "Deployment"): "the operator talks to the API server with its service account token",
    ("CKV_K8S_9", "Deployment"): "no readiness probe: only Prometheus scrapes it (its metrics Service); startup and "
                                 "liveness probes watch kopf",
    ("CKV_K8S_43", "Deployment"): "deployed by tag (image.tag, default appVersion), as `make images` builds it",
    ("CKV_K8S_15", "Deployment"): "image.pullPolicy IfNotPresent by default: kind and air-gapped nodes load images",
    # The trainer pods.
    ("CKV_K8S_9", "Pod"): "a batch pod serves nothing; its Service publishes not-ready addresses for the rendezvous",
    ("CKV_K8S_8", "Pod"): "no liveness probe: restartPolicy Never; hangs end by activeDeadlineSeconds, not restarts",
    ("CKV_K8S_43", "Pod"): "the image is the job's spec.image or the operator's trainerImage; either may be a digest",
    ("CKV_K8S_15", "Pod"): "the pull policy is the job's spec.imagePullPolicy (the cluster's default when unset)",
    ("CKV_K8S_11", "Pod.ml.minimal-0"): "CPU limits are the job's spec.resources (the sample job sets them)",
    ("CKV_K8S_13", "Pod.ml.minimal-0"): "memory limits are the job's spec.resources (the sample job sets them)",
}
NAMESPACE = "ml"  # the jobs' namespace (not "default", which CKV_K8S_21 flags)


def job_objects(name: str, spec: dict) -> list[dict]:
    job = {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
           "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"}}
    spec = with_defaults(spec, "pets-trainer:0.1.0")
    return [builders.service_body(job, spec), builders.network_policy_body(job), builders.pod_body(job, spec, 0, 0)]


@pytest.fixture(scope="module")
def scan(k8s_tools, tmp_path_factory) -> dict:
    try:
        checkov = checkov_tool.ensure_checkov()
    except checkov_tool.CheckovUnavailable as error:
        pytest.skip(f"checkov unavailable: {error}")
    directory = tmp_path_factory.mktemp("rendered")
    (directory / "chart-default.yaml").write_text(chart.template(k8s_tools.helm))
    (directory / "chart-namespaced-peering.yaml").write_text(
        chart.template(k8s_tools.helm, sets=("watchNamespaces={team-a}", "peering.enabled=true")))
    sample = yaml.safe_load(packaged.sample_job_text())["spec"]
    with_checkpoint = {**sample, "checkpoint": {"persistentVolumeClaim": {"claimName": "checkpoints"}}}
    (directory / "job-sample.yaml").write_text(yaml.safe_dump_all(job_objects("pets-demo", with_checkpoint)))
    (directory / "job-minimal.yaml").write_text(yaml.safe_dump_all(job_objects("minimal", {"data": {"synthetic": {}}})))
    result = subprocess.run([str(checkov), "--directory", str(directory), "--framework", "kubernetes",
                             "--output", "json", "--skip-download"],
                            cwd=directory, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **checkov_tool.OFFLINE_ENV})
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: there are findings
    report = json.loads(result.stdout)
    assert not isinstance(report, list), "one framework, one report"
    return report


def allowed_reason(finding: dict) -> str | None:
    resource = finding["resource"]
    return ALLOWED.get((finding["check_id"], resource)) or ALLOWED.get((finding["check_id"], resource.split(".")[0]))


def test_every_finding_is_fixed_or_allowed_with_a_reason(scan):
    failed = scan["results"]["failed_checks"]
    unexpected = sorted({f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}"
                         for f in failed if allowed_reason(f) is None})
    assert unexpected == [], "new checkov findings: fix them, or allow them in ALLOWED with a reason:\n" + \
        "\n".join(unexpected)
    used = {key for f in failed for key in ((f["check_id"], f["resource"]),
                                            (f["check_id"], f["resource"].split(".")[0])) if key in ALLOWED}
    assert set(ALLOWED) - used == set(), "allowed findings that no longer occur: remove them from ALLOWED"


def test_the_scan_saw_every_object(scan):
    seen = {check["resource"] for check in scan["results"]["passed_checks"] + scan["results"]["failed_checks"]}
    for job in ("pets-demo", "minimal"):
        assert {f"Pod.{NAMESPACE}.{job}-0", f"Service.{NAMESPACE}.{job}-workers"} <= seen
    assert {"Deployment.pets-operator.pets-operator", "ClusterRole.default.pets-operator",
            "Role.team-a.pets-operator"} <= seen
    assert scan["summary"]["parsing_errors"] == 0


def test_what_was_fixed_stays_fixed(scan):
    """The trainer pods' read-only root; a NetworkPolicy for every pod (the job's own, the chart's for the operator)."""
    passed = {(check["check_id"], check["resource"]) for check in scan["results"]["passed_checks"]}
    for job in ("pets-demo", "minimal"):
        assert ("CKV_K8S_22", f"Pod.{NAMESPACE}.{job}-0") in passed  # read-only root filesystem
        assert ("CKV2_K8S_6", f"Pod.{NAMESPACE}.{job}-0") in passed  # selected by a NetworkPolicy
    operator_pods = [resource for check, resource in passed if check == "CKV2_K8S_6"
                     and resource.startswith("Pod.pets-operator.")]  # the Deployment's pod template
    assert operator_pods
    assert ("CKV_K8S_11", f"Pod.{NAMESPACE}.pets-demo-0") in passed  # the sample job sets limits
