"""Label and field selectors as the API server parses them (`a=b,c!=d,e in (x,y),!f`)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_CMP_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside `in (...)` parentheses."""
    terms, depth, current = [], 0, []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "=":
            return present and value == self.values[0]
        if self.operator == "!=":
            return not present or value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present


def parse_label_selector(selector: str | None) -> Predicate:
    requirements: list[_Requirement] = []
    for term in _split_terms(selector or ""):
        compared = _CMP_RE.match(term)
        if compared:
            key, op, value = compared.groups()
            requirements.append(_Requirement(key, "!=" if op == "!=" else "=", (value,)))
            continue
        in_set = _SET_RE.match(term)
        if in_set:
            negated, key, op, values = in_set.groups()
            if op and negated:
                raise bad_request(f"unable to parse requirement: {term!r}")
            if op:
                requirements.append(_Requirement(key, op, tuple(v.strip() for v in values.split(",") if v.strip())))
            else:
                requirements.append(_Requirement(key, "!exists" if negated else "exists"))
            continue
        raise bad_request(f"unable to parse requirement: found {term!r}, expected: key, key=value, key!=value, key in (...)")

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)

    return matches


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string value a field selector compares (`spec.nodeName`); missing fields read as ""."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(selector: str | None) -> Predicate:
    terms: list[tuple[str, bool, str]] = []
    for term in _split_terms(selector or ""):
        compared = _CMP_RE.match(term)
        if not compared:
            raise bad_request(f"invalid field selector: {term!r}: expected field=value or field!=value")
        key, op, value = compared.groups()
        terms.append((key, op != "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, key) == value) == equal for key, equal, value in terms)

    return matches
