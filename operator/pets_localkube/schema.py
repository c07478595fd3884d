"""Custom resources checked against their CRD's `openAPIV3Schema` as the API server does it.

Order as in the apiextensions server: prune unknown fields, apply `default`s, then validate.
OpenAPI v3.0 schemas are draft-4 JSON schemas in the parts a structural CRD may use (boolean
`exclusiveMinimum`, `nullable`, `x-kubernetes-*` extensions), so validation runs on jsonschema's
Draft4Validator after a small translation; error messages are rendered in the Kubernetes style.
Then the schema's CEL rules (`x-kubernetes-validations`, `celrules`), with the old object on
updates for the transition rules, unless a schema error already blocks them.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import jsonschema

# Defaulting as the API server does it: one implementation, shared with the operator's spec.
from pets_api.contract import apply_schema_defaults as apply_defaults

from . import celrules

# The root fields the API server handles itself; never pruned nor validated by the schema.
_ROOT_META = ("apiVersion", "kind", "metadata")


def prune(obj: Any, schema: dict[str, Any], path: str = "", pruned: list[str] | None = None, root: bool = True) -> list[str]:
    """Drop fields the schema does not declare (in place); return their paths."""
    pruned = [] if pruned is None else pruned
    if isinstance(obj, dict) and schema.get("type", "object") == "object" and not schema.get("x-kubernetes-int-or-string"):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or additional not in (None, False)
        for key in list(obj):
            if root and key in _ROOT_META:
                continue
            child = f"{path}.{key}" if path else key
            if key in properties:
                prune(obj[key], properties[key], child, pruned, root=False)
            elif isinstance(additional, dict):
                prune(obj[key], additional, child, pruned, root=False)
            elif not keep_unknown:
                pruned.append(child)
                del obj[key]
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(obj):
            prune(item, schema["items"], f"{path}[{index}]", pruned, root=False)
    return pruned


def _to_draft4(schema: Any, root: bool = True) -> Any:
    """Translate the OpenAPI v3.0 dialect into draft-4 JSON schema."""
    if isinstance(schema, list):
        return [_to_draft4(s, root=False) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _to_draft4(v, root=False) for k, v in schema.items()
           if k not in ("default", "description", "example", "x-kubernetes-int-or-string", "x-kubernetes-validations")}
    for keyword in ("properties", "patternProperties", "definitions"):
        if keyword in schema:
            out[keyword] = {k: _to_draft4(v, root=False) for k, v in schema[keyword].items()}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "anyOf" not in out:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if root:
        out.setdefault("properties", {})
        for key in _ROOT_META:
            out["properties"][key] = {}
    return out


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _check_date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("date-time")(_check_date_time)


def _field(path: Iterable[Any]) -> str:
    rendered = ""
    for part in path:
        rendered += f"[{part}]" if isinstance(part, int) else (f".{part}" if rendered else str(part))
    return rendered


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return '"object"' if isinstance(value, dict) else '"array"'
    return json.dumps(value)


def _cause(error: jsonschema.ValidationError) -> dict[str, str]:
    """One jsonschema error as the Kubernetes field error (`spec.x: Invalid value: 0: ...`)."""
    field = _field(error.absolute_path)
    where = f"{field or '<root>'} in body"
    value, validator, expected = error.instance, error.validator, error.validator_value
    schema = error.schema
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else str(expected)
        return {"reason": "FieldValueRequired", "field": f"{field}.{missing}" if field else missing, "message": "Required value"}
    if validator == "enum":
        supported = ", ".join(json.dumps(v) for v in expected)
        return {"reason": "FieldValueNotSupported", "field": field,
                "message": f"Unsupported value: {_show(value)}: supported values: {supported}"}
    if validator == "type":
        type_name = expected[0] if isinstance(expected, list) else expected
        return {"reason": "FieldValueTypeInvalid", "field": field,
                "message": f"Invalid value: {_show(value)}: {where} must be of type {type_name}: {_show(value)}"}
    detail = {
        "minimum": lambda: (f"should be greater than {expected}" if schema.get("exclusiveMinimum") is True
                            else f"should be greater than or equal to {expected}"),
        "maximum": lambda: (f"should be less than {expected}" if schema.get("exclusiveMaximum") is True
                            else f"should be less than or equal to {expected}"),
        "minLength": lambda: f"should be at least {expected} chars long",
        "maxLength": lambda: f"should be at most {expected} chars long",
        "pattern": lambda: f"should match '{expected}'",
        "minItems": lambda: f"should have at least {expected} items",
        "maxItems": lambda: f"should have at most {expected} items",
        "uniqueItems": lambda: "shouldn't contain duplicates",
        "oneOf": lambda: "must validate one and only one schema (oneOf)",
        "anyOf": lambda: "must validate at least one schema (anyOf)",
        "allOf": lambda: "must validate all the schemas (allOf)",
        "not": lambda: "must not validate the schema (not)",
        "format": lambda: f"must be of type {expected}",
        "minProperties": lambda: f"should have at least {expected} properties",
        "maxProperties": lambda: f"should have at most {expected} properties",
        "multipleOf": lambda: f"should be a multiple of {expected}",
    }.get(validator, lambda: error.message)()
    if validator == "format":
        return {"reason": "FieldValueInvalid", "field": field,
                "message": f"Invalid value: {_show(value)}: {where} must be of type {expected}: {_show(value)}"}
    return {"reason": "FieldValueInvalid", "field": field, "message": f"Invalid value: {_show(value)}: {where} {detail}"}


class CustomResourceSchema:
    """The checks of one served version of a CRD; `celrules.InvalidRules` when its rules are refused."""

    def __init__(self, open_api_v3_schema: dict[str, Any]):
        self.schema = open_api_v3_schema
        self._validator = jsonschema.Draft4Validator(_to_draft4(open_api_v3_schema), format_checker=_FORMATS)
        self.rules = celrules.compile_rules(open_api_v3_schema)

    def prune(self, obj: dict[str, Any]) -> list[str]:
        return prune(obj, self.schema)

    def default(self, obj: dict[str, Any]) -> None:
        apply_defaults(obj, self.schema)

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None,
                 warnings: list[str] | None = None) -> list[dict[str, str]]:
        """Kubernetes-style causes, empty when the object is valid. `old`: the stored object, on
        updates (transition rules run only then); ratcheted rule failures are added to `warnings`."""
        errors = sorted(self._validator.iter_errors(obj), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
        causes = [_cause(e) for e in errors]
        if self.rules is not None:
            if any(c["reason"] in celrules.BLOCKING_REASONS for c in causes):
                causes.append(dict(celrules.BLOCKED_CAUSE))
            else:
                causes += self.rules.validate(obj, old, warnings)
        return causes
