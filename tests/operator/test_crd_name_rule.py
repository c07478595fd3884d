"""A job name too long for its pods' and Service's names is refused by the API server (the CRD's CEL rule on
metadata.name), with the operator's own message, instead of being stored and failed a second later.

The message is static (Kubernetes before 1.27 has no messageExpression): the operator's words without the name."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from pets_api.names import job_name_problems
from pets_localkube import celrules

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd.yaml"
SPEC = {"data": {"synthetic": {}}}


def root_schema() -> dict:
    return yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def name_errors(name: str, num_nodes: int) -> list[str]:
    job = {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob", "metadata": {"name": name},
           "spec": {**SPEC, "numNodes": num_nodes}}
    prefix = 'Invalid value: "object": '
    return [error["message"].removeprefix(prefix) for error in celrules.compile_rules(root_schema()).validate(job)
            if error["field"] == "<nil>"]


MESSAGE = ("metadata.name is too long: at most 55 characters fit so that '<name>-<index>' (each pod) and "
           "'<name>-workers' (the Service) stay within 63 characters")


@pytest.mark.parametrize("num_nodes", [1, 2, 10, 11, 100, 256])
def test_the_rule_refuses_exactly_the_names_the_operator_would_fail(num_nodes):
    for length in range(50, 64):
        name = "j" * length
        refused = bool(job_name_problems(name, num_nodes))
        assert name_errors(name, num_nodes) == ([MESSAGE] if refused else []), (length, num_nodes)


def test_the_message_says_what_the_operator_says_for_every_allowed_num_nodes():
    maximum = root_schema()["properties"]["spec"]["properties"]["numNodes"]["maximum"]
    for num_nodes in range(1, maximum + 1):
        (problem,) = job_name_problems("j" * 56, num_nodes)
        assert "at most 55 fit so that" in problem and problem.endswith("stay within 63 characters")


def test_the_rule_sits_at_the_root_and_is_no_transition_rule():
    (rule,) = root_schema()["x-kubernetes-validations"]
    assert "self.metadata.name" in rule["rule"] and "oldSelf" not in rule["rule"]
    assert rule["message"] and "\n" not in rule["message"]  # what a server without messageExpression shows


def test_kubectl_apply_refuses_a_56_character_name(kubectl, local_cluster, tmp_path):
    name = "pets-" + "x" * 51
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
                                        "metadata": {"name": name}, "spec": {"numNodes": 2, **SPEC}}))
    done = subprocess.run([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), "apply", "-f", str(manifest)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert MESSAGE in done.stderr, done.stderr
    listed = subprocess.run([kubectl, "--kubeconfig", str(local_cluster.kubeconfig), "get", "ptj", "-o", "name"],
                            capture_output=True, text=True, timeout=60)
    assert listed.stdout.strip() == ""  # nothing was stored
