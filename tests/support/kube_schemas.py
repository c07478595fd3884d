"""Offline validation of Kubernetes objects: built-in kinds against the real OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors), custom resources against their CRD."""
from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import kubernetes_validate

from pets_localkube.schema import CustomResourceSchema

# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25", kubernetes_validate.utils.latest_version())
# Kinds newer than the floor, checked from the release that serves them: the chart renders them only for such
# clusters (the admission policy needs 1.30 and refuses to render for older ones: templates/policy.yaml).
INTRODUCED = {("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30",
              ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30"}


def describe(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def crd_schemas(crds: Iterable[dict[str, Any]]) -> dict[tuple[str, str], CustomResourceSchema]:
    """(apiVersion, kind) -> schema of that served version, for each CRD given."""
    schemas = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            schemas[key] = CustomResourceSchema(version["schema"]["openAPIV3Schema"])
    return schemas


def problems(obj: dict[str, Any], custom: dict[tuple[str, str], CustomResourceSchema]) -> list[str]:
    """Why `obj` would be refused (or silently pruned) by an API server; empty when it is valid."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in custom:
        schema = custom[key]
        candidate = copy.deepcopy(obj)
        pruned = schema.prune(candidate)
        schema.default(candidate)
        found = [f"{describe(obj)}: unknown field {path}" for path in pruned]
        return found + [f"{describe(obj)}: {cause['field']}: {cause['message']}" for cause in schema.validate(candidate)]
    found = []
    for version in (INTRODUCED.get(key, version) for version in KUBE_VERSIONS):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            return [f"{describe(obj)}: no schema for {key[0]} {key[1]} (neither built in nor a CRD given)"]
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            found.append(f"{describe(obj)} (Kubernetes {version}): {path}: {error.message}")
    return found
