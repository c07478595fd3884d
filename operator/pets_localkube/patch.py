"""The patch formats the API server accepts: JSON merge patch, JSON patch, strategic merge patch."""
from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

# Strategic merge keys of the core types the operator and kubectl touch; other lists are replaced.
_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
    "volumeMounts": "mountPath", "ports": "containerPort", "conditions": "type",
    "ownerReferences": "uid", "imagePullSecrets": "name", "tolerations": "key",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch for the common cases: lists of named items merge by their key.

    `$patch`/`$retainKeys`/`$setElementOrder` directives are dropped: kubectl sends them only
    alongside the plain values that already carry the change.
    """
    if isinstance(patch, list):
        key = _MERGE_KEYS.get(field)
        if not key or not isinstance(target, list) or not all(isinstance(p, dict) for p in patch):
            return copy.deepcopy([p for p in patch if not (isinstance(p, dict) and "$patch" in p)])
        merged = [copy.deepcopy(item) for item in target]
        for item in patch:
            if item.get("$patch") == "delete":
                merged = [m for m in merged if m.get(key) != item.get(key)]
                continue
            for index, existing in enumerate(merged):
                if isinstance(existing, dict) and existing.get(key) == item.get(key):
                    merged[index] = strategic_merge_patch(existing, item)
                    break
            else:
                merged.append(strategic_merge_patch({}, item))
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}: must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ApiError(422, "Invalid", f"jsonpatch: path {path!r} does not exist")
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-":
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), copy.deepcopy(value))
        else:
            raise ApiError(422, "Invalid", f"jsonpatch add: index out of range in {path!r}")
    else:
        raise ApiError(422, "Invalid", f"jsonpatch add: parent of {path!r} is not a container")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise ApiError(422, "Invalid", "jsonpatch remove: cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    removed = _walk(parent, parts[-1:], path)
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return doc, removed


def _replace(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], path)
    _walk(parent, parts[-1:], path)
    parent[parts[-1] if isinstance(parent, dict) else int(parts[-1])] = copy.deepcopy(value)
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 with all six operations; a failed `test` refuses the whole patch."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"invalid JSON patch operation: {operation!r}")
        op, path = operation["op"], operation["path"]
        if op == "add":
            doc = _add(doc, path, operation.get("value"))
        elif op == "remove":
            doc, _ = _remove(doc, path)
        elif op == "replace":
            doc = _replace(doc, path, operation.get("value"))
        elif op == "move":
            doc, value = _remove(doc, operation["from"])
            doc = _add(doc, path, value)
        elif op == "copy":
            doc = _add(doc, path, _walk(doc, _pointer(operation["from"]), operation["from"]))
        elif op == "test":
            if _walk(doc, _pointer(path), path) != operation.get("value"):
                raise ApiError(422, "Invalid", f"jsonpatch test operation does not apply: doc is missing path: {path!r} or has a different value")
        else:
            raise bad_request(f"unknown JSON patch operation {op!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    kind = content_type.split(";")[0].strip()
    if kind == MERGE:
        result = merge_patch(target, patch)
    elif kind == JSON:
        result = json_patch(target, patch)
    elif kind == STRATEGIC:
        result = strategic_merge_patch(target, patch)
    else:
        raise ApiError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format - accepted media types include: {JSON}, {MERGE}, {STRATEGIC}")
    if not isinstance(result, dict):
        raise bad_request("the patched object is not a JSON object")
    return result
