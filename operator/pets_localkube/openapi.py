"""The OpenAPI v3 discovery kubectl reads before `apply`: one document per group-version.

kubectl checks there that PATCH accepts `fieldValidation` and then leaves validation to the
server (`fieldValidation=Strict`); custom resources carry their CRD's schema, so
`kubectl explain` and apply's merge-patch decisions see the real fields.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from .resources import Registry, ResourceType

_QUERY_PARAMS = ["dryRun", "fieldManager", "fieldValidation", "force", "pretty"]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(resource: ResourceType, version: str) -> str:
    group = ".".join(reversed(resource.group.split("."))) if resource.group else "io.k8s.api.core"
    return f"{group}.{version}.{resource.kind}"


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource in registry:
        if resource.group != group or version not in resource.versions:
            continue
        gvk = {"group": group, "version": version, "kind": resource.kind}
        name = _schema_name(resource, version)
        schema = dict(resource.schemas[version].schema) if resource.is_custom else {"type": "object"}
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[name] = schema
        ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
        params = [{"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for p in _QUERY_PARAMS]
        prefix = f"/{_gv_path(group, version)}/" + ("namespaces/{namespace}/" if resource.namespaced else "")

        def operation(action: str) -> dict[str, Any]:
            return {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "parameters": params,
                    "responses": {"200": {"description": "OK", **ref}}}

        paths[prefix + resource.plural] = {"get": operation("list"), "post": operation("post")}
        paths[prefix + resource.plural + "/{name}"] = {
            "get": operation("get"), "put": operation("put"), "patch": operation("patch"), "delete": operation("delete")}
    if not paths:
        return None
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
            "components": {"schemas": schemas}}


def root_document(registry: Registry) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pairs = {("", "v1")} | {(r.group, v) for r in registry for v in r.versions}
    for group, version in sorted(pairs):
        document = group_version_document(registry, group, version)
        if document:
            digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            found[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": found}
