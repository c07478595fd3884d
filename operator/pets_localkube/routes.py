"""The API server's REST paths as aiohttp route patterns, and what a matched path names (pure).

    /api/v1[/namespaces/<namespace>]/<plural>[/<name>[/<subresource>]]
    /apis/<group>/<version>[/namespaces/<namespace>]/<plural>[/<name>[/<subresource>]]

read as the Kubernetes API server reads them: `namespaces/<ns>/<plural>` is a collection in a
namespace, except `/api/v1/namespaces/<name>/status` (and `/finalize`), a namespace's own
subresource; a pod's `log` and `binding` take methods of their own. Each shape is one pattern, and
the patterns are disjoint (the regular expressions below keep them apart), so a path matches one
shape at most and the order of the routes does not matter. Every pattern takes a trailing slash.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import errors
from .resources import Registry, ResourceType

SEGMENT = "[^/]+"  # one path segment
TRAILING_SLASH = "{trailing_slash:/?}"
CORE, GROUPS = "/api/{version:v1}", "/apis/{group}/{version}"
IN_NAMESPACE = "/namespaces/{namespace}"
OWN_METHODS = ("log", "binding")  # subresources with routes of their own


def _not(*words: str) -> str:
    """A path segment other than `words` (the segment is the path's last, trailing slash aside)."""
    return f"(?!(?:{'|'.join(words)})/?$){SEGMENT}"


def resource_paths(root: str) -> dict[str, tuple[str, ...]]:
    """The resource path patterns under one root (`CORE` or `GROUPS`), by shape: a collection, an object,
    an object's subresource (any but those of `OWN_METHODS`), a pod's log, a pod's binding."""
    # Under the core root, namespaces/<name>/status is the namespace's; elsewhere it is a collection.
    collection_plural = _not("status", "finalize") if root == CORE else SEGMENT
    namespaced = f"{root}{IN_NAMESPACE}/{{plural}}/{{name}}"
    cluster_subresource = f"{root}/{{plural:(?!namespaces/){SEGMENT}}}/{{name}}/{{subresource:{_not(*OWN_METHODS)}}}"
    own_subresources = (f"{root}/{{plural:namespaces}}/{{name}}/{{subresource:status|finalize}}",) if root == CORE else ()
    return {
        "collection": (f"{root}{IN_NAMESPACE}/{{plural:{collection_plural}}}", f"{root}/{{plural}}"),
        "object": (namespaced, f"{root}/{{plural}}/{{name}}"),
        "subresource": (f"{namespaced}/{{subresource:{_not(*OWN_METHODS)}}}", cluster_subresource, *own_subresources),
        "log": (f"{namespaced}/{{subresource:log}}",),
        "binding": (f"{namespaced}/{{subresource:binding}}",),
    }


DISCOVERY = ("/api/{version:v1}", "/apis/{group}", "/apis/{group}/{version}")


def not_found() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource")


@dataclass
class Target:
    """What a resource path names: a collection, an object, or an object's subresource."""
    resource: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


def target_of(registry: Registry, match: Mapping[str, str]) -> Target:
    """The served resource a matched resource path names; 404 when it names none."""
    version = match["version"]
    resource = registry.find(match.get("group", ""), version, match["plural"])
    namespace, name, subresource = match.get("namespace"), match.get("name"), match.get("subresource")
    if (resource is None or (namespace is not None and not resource.namespaced)
            or (subresource is not None and subresource not in resource.subresources)
            or (name is not None and resource.namespaced and namespace is None)):
        raise not_found()
    return Target(resource, version, namespace, name, subresource)


def discovery_of(registry: Registry, match: Mapping[str, str]) -> dict[str, Any]:
    """The discovery document of a matched discovery path (a group, or a group-version's resources); 404 when none."""
    group = match.get("group", "")
    document = registry.api_resource_list(group, match["version"]) if "version" in match else registry.api_group(group)
    if document is None:
        raise not_found()
    return document


def named_by(registry: Registry, match: Mapping[str, str]) -> Target | dict[str, Any]:
    """What a matched API path names, resource or discovery document; 404 when nothing served."""
    return target_of(registry, match) if "plural" in match else discovery_of(registry, match)
