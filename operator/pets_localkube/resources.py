"""The resource types the local API server serves: built-in ones plus those from applied CRDs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import CustomResourceSchema

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceType:
    group: str
    versions: list[str]
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    subresources: tuple[str, ...] = ()
    # Custom resources only: per served version.
    schemas: dict[str, CustomResourceSchema] = field(default_factory=dict)
    printer_columns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    crd_name: str | None = None

    def __post_init__(self) -> None:
        self.singular = self.singular or self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        return self.group, self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def is_custom(self) -> bool:
        return self.crd_name is not None

    def api_version(self, version: str | None = None) -> str:
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version


def _builtin(group: str, version: str, plural: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(group=group, versions=[version], plural=plural, kind=kind, namespaced=namespaced, **kw)


BUILTIN_TYPES = [
    _builtin("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], subresources=("status",)),
    _builtin("", "v1", "nodes", "Node", namespaced=False, short_names=["no"], subresources=("status",)),
    _builtin("", "v1", "pods", "Pod", short_names=["po"], categories=["all"], subresources=("status", "log", "binding")),
    _builtin("", "v1", "services", "Service", short_names=["svc"], categories=["all"], subresources=("status",)),
    _builtin("", "v1", "endpoints", "Endpoints", short_names=["ep"]),
    _builtin("", "v1", "events", "Event", short_names=["ev"]),
    _builtin("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
    _builtin("", "v1", "secrets", "Secret"),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
    _builtin("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=["pvc"], subresources=("status",)),
    _builtin("events.k8s.io", "v1", "events", "Event", short_names=["ev"]),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease"),
    # Stored and served (the operator creates one per job), never enforced: local pods share the host network.
    _builtin("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=["netpol"]),
    _builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
             namespaced=False, short_names=["crd", "crds"], subresources=("status",)),
]


def from_crd(crd: dict[str, Any]) -> ResourceType:
    """The served resource of a CRD (all served versions share one storage, no conversion)."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    storage_first = sorted(served, key=lambda v: not v.get("storage", False))
    subresources = set()
    for version in served:
        subresources.update((version.get("subresources") or {}).keys())
    return ResourceType(
        group=spec["group"],
        versions=[v["name"] for v in storage_first],
        plural=names["plural"],
        kind=names["kind"],
        singular=names.get("singular", ""),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        subresources=tuple(sorted(subresources)),
        schemas={v["name"]: CustomResourceSchema((v.get("schema") or {}).get("openAPIV3Schema")
                                                 or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
                 for v in served},
        printer_columns={v["name"]: list(v.get("additionalPrinterColumns") or []) for v in served},
        crd_name=crd["metadata"]["name"],
    )


class Registry:
    """Which (group, version, plural) the server answers, and the discovery documents about them."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str], ResourceType] = {}
        for resource in BUILTIN_TYPES:
            self.add(resource)

    def add(self, resource: ResourceType) -> None:
        self._types[resource.key] = resource

    def remove(self, key: tuple[str, str]) -> None:
        self._types.pop(key, None)

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        resource = self._types.get((group, plural))
        return resource if resource and version in resource.versions else None

    def __iter__(self):
        return iter(list(self._types.values()))

    def groups(self) -> dict[str, list[str]]:
        """group -> versions, preferred version first, in a stable order."""
        found: dict[str, list[str]] = {}
        for resource in self:
            if resource.group:
                versions = found.setdefault(resource.group, [])
                versions.extend(v for v in resource.versions if v not in versions)
        return dict(sorted(found.items()))

    def api_group_list(self) -> dict[str, Any]:
        groups = []
        for name, versions in self.groups().items():
            entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
            groups.append({"name": name, "versions": entries, "preferredVersion": entries[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}

    def api_resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        resources = []
        for resource in self:
            if resource.group != group or version not in resource.versions:
                continue
            entry: dict[str, Any] = {
                "name": resource.plural, "singularName": resource.singular, "namespaced": resource.namespaced,
                "kind": resource.kind, "verbs": ALL_VERBS,
            }
            if resource.short_names:
                entry["shortNames"] = resource.short_names
            if resource.categories:
                entry["categories"] = resource.categories
            resources.append(entry)
            for sub in resource.subresources:
                verbs = {"status": ["get", "patch", "update"], "log": ["get"], "binding": ["create"]}[sub]
                kind = {"status": resource.kind, "log": resource.kind, "binding": "Binding"}[sub]
                resources.append({"name": f"{resource.plural}/{sub}", "singularName": "", "namespaced": resource.namespaced,
                                  "kind": kind, "verbs": verbs})
        if not resources:
            return None
        group_version = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
