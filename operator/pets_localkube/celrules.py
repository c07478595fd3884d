"""CRD validation rules (`x-kubernetes-validations`, CEL) checked as the Kubernetes API server checks them.

What the API server does (k8s.io/apiextensions-apiserver, `pkg/apiserver/schema/cel` and the CRD
validation in `pkg/apis/apiextensions/validation`), and so what this module does:

- A rule is scoped to the schema node that carries it: `self` is the value there, and the rule runs
  for every value at that node (each list item, each map value) on create and on update; never for
  an absent or null value. Objects show only their declared properties (names escaped:
  `x-prop` -> `x__dash__prop`, `namespace` -> `__namespace__`), the root also `apiVersion`, `kind`
  and `metadata.name`/`generateName`; integers are ints, numbers doubles, `date-time`/`date`
  strings timestamps, `duration` strings durations, `byte` strings bytes.
- A rule that uses `oldSelf` is a transition rule: it runs only on update, only where the old value
  can be correlated (object properties, map values by key, items of `x-kubernetes-list-type: map`
  lists by their keys) and exists. With `optionalOldSelf: true` it runs without one too, and
  `oldSelf` is a CEL optional (`oldSelf.hasValue()`, `oldSelf.value()`, `oldSelf.orValue(x)`).
- A rule that does not hold is a field error at the node (or at `fieldPath` below it), with the
  rule's `reason` (default `FieldValueInvalid`) and detail `messageExpression`, else `message`,
  else `failed rule: <rule>`: `spec.numNodes: Invalid value: "integer": numNodes is immutable`. The
  value shown is the node's schema type, as Kubernetes 1.25 to 1.34 show it (1.35 shows scalars'
  values and omits objects'). A rule that fails to evaluate is an error too, never skipped.
- Ratcheting (CRDValidationRatcheting, on by default since 1.30): on update, a rule without
  `oldSelf` that fails on a value that did not change is returned as a warning, not an error.
- When a CRD is created or updated, rules are checked as Kubernetes checks them (rule present,
  message without line breaks, reason, fieldPath, `oldSelf` only where it can be correlated,
  `optionalOldSelf` only with `oldSelf`) and compiled; a rule that does not compile, or that uses a
  function or variable this server cannot evaluate, refuses the CRD (`InvalidRules`). Nothing is
  ever skipped silently.

Not emulated: the static cost estimate and the runtime cost budget (a CRD that a real server refuses
as too expensive is accepted here: add `maxItems`/`maxLength`/`maxProperties` as Kubernetes
advises); CEL type checking (a wrong field name or a type mismatch is found when the rule runs, as
a 422 like a real server's runtime errors, not when the CRD is applied); order-insensitive equality
of `x-kubernetes-list-type: set`/`map` lists (here `==` on them keeps order, which can only refuse
more); Kubernetes' own CEL libraries (`quantity()`, `url()`, `ip()`, `isSorted()`, `format()`, ...)
and rules inside `allOf`/`anyOf`/`oneOf`/`not`, which are refused at CRD apply time.

The CEL engine is `common-expression-language` (PyPI; import `cel`: Python bindings of the Rust
`cel` crate), chosen over `cel-python` (`celpy`, pure Python on lark), which also installs offline
from PyPI, because:
- it reports what a compiled expression references (variables, functions) without evaluating it,
  so a rule using something this server cannot evaluate is refused when the CRD is applied rather
  than discovered later;
- it has CEL optionals (`optionalOldSelf`) and cel-go's cross-type numeric equality (`1 == 1.0`),
  which the API server has and celpy lacks (it raises "no such overload");
- it compiles a rule once in microseconds and evaluates one in microseconds.
Its cost: binary wheels per Python version, and its command-line tool's dependencies (typer, rich).
"""
from __future__ import annotations

import base64
import datetime
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The root fields every rule at the root sees besides the schema's properties.
_ROOT_META = ("apiVersion", "kind")
_ROOT_METADATA = ("name", "generateName")

SUPPORTED_REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes

# CEL's reserved words: properties with these names are `__<word>__` in expressions.
_RESERVED = frozenset(("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
                       "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"))
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_ESCAPE_MATCHER = re.compile(r"(__|[-./]|[^a-zA-Z0-9\-./_])")

# What the engine evaluates natively (each one is exercised by tests/localkube/test_cel_rules.py):
# operators, the standard functions, macros (has, all, exists, exists_one, map, filter: not
# reported as functions) and the optional-value methods.
_NATIVE_FUNCTIONS = frozenset((
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_&&_", "_||_", "!_", "-_", "_+_", "_-_", "_*_", "_/_", "_%_",
    "_[_]", "_?_:_", "@in", "@not_strictly_false",
    "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double", "string", "bytes", "type", "dyn",
    "duration", "timestamp", "getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
    "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    "hasValue", "value", "orValue",
))
# cel-go's string extension library, which Kubernetes enables; the engine has them as Python
# functions (`cel.stdlib`), registered for the rules that use them.
STRING_FUNCTIONS = ("charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split", "substring",
                    "trim", "join")
SUPPORTED_FUNCTIONS = _NATIVE_FUNCTIONS | frozenset(STRING_FUNCTIONS)
_NAMESPACED_FUNCTIONS = frozenset(("optional.of", "optional.none", "optional.ofNonZeroValue"))
_TYPE_NAMES = frozenset(("int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"))
_MACRO_VARIABLE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
_NAMESPACED_CALL = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# The field errors that keep the API server from running the rules (apiextensions' hasBlockingErr).
BLOCKING_REASONS = frozenset(("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong",
                              "FieldValueTooMany", "FieldValueTypeInvalid"))
BLOCKED_CAUSE = {"reason": "FieldValueInvalid", "field": "<nil>",
                 "message": "Invalid value: null: some validation rules were not checked because the object was invalid; "
                            "correct the existing errors to complete validation"}


def _engine():
    import cel  # imported on the first CRD with rules: it takes a few hundred milliseconds

    return cel


class InvalidRules(ValueError):
    """A CRD's rules that the API server would refuse (or this one cannot evaluate): Kubernetes-style lines."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


# --- values as CEL sees them ------------------------------------------------------------------

def escape(name: str) -> str | None:
    """A property name as expressions spell it, None when expressions cannot reach it."""
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    unsupported = False

    def replace(match: re.Match) -> str:
        nonlocal unsupported
        if match.group(0) not in _ESCAPES:
            unsupported = True
            return ""
        return _ESCAPES[match.group(0)]

    escaped = _ESCAPE_MATCHER.sub(replace, name)
    return None if unsupported else escaped


def _unknown_type(schema: dict[str, Any] | None) -> bool:
    """A schema whose values expressions cannot see (Kubernetes' "unknown type")."""
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return False
    if not kind:
        return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or not schema.get("properties")
    if kind == "array":
        return _unknown_type(schema.get("items"))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict) and not schema.get("properties"):
        return _unknown_type(schema["additionalProperties"])
    return False


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> datetime.timedelta | None:
    """Go's duration syntax (`1h30m`, `-2.5s`)."""
    sign, rest = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    if rest == "0":
        return datetime.timedelta(0)
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(rest):
        if match.start() != position:
            return None
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(rest) or not rest:
        return None
    return datetime.timedelta(seconds=sign * seconds)


def _string(value: str, schema_format: str | None) -> Any:
    try:
        if schema_format == "date-time":
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        if schema_format == "date":
            return datetime.datetime.combine(datetime.date.fromisoformat(value), datetime.time(), datetime.timezone.utc)
        if schema_format == "duration":
            return _duration(value) or value
        if schema_format == "byte":
            return base64.b64decode(value, validate=True)
    except ValueError:
        pass
    return value


def to_cel(value: Any, schema: dict[str, Any] | None, root: bool = False) -> Any:
    """`value` as rules see it: typed by its schema, null fields absent, undeclared fields hidden."""
    if value is None or not isinstance(schema, dict):
        return value
    if schema.get("x-kubernetes-int-or-string"):
        return value
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() else value
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "string" and isinstance(value, str):
        return _string(value, schema.get("format"))
    if kind == "array" and isinstance(value, list):
        return [to_cel(item, schema.get("items")) for item in value]
    if isinstance(value, dict) and kind in ("object", None):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict) and not properties:
            return {key: to_cel(item, additional) for key, item in value.items() if item is not None}
        shown: dict[str, Any] = {}
        for key, item in value.items():
            name = escape(key)
            if key in properties and item is not None and name is not None and not _unknown_type(properties[key]):
                shown[name] = to_cel(item, properties[key])
        if root or schema.get("x-kubernetes-embedded-resource"):
            for key in _ROOT_META:
                if isinstance(value.get(key), str):
                    shown[key] = value[key]
            metadata = value.get("metadata")
            if isinstance(metadata, dict):
                shown["metadata"] = {k: metadata[k] for k in _ROOT_METADATA if isinstance(metadata.get(k), str)}
        return shown
    return value


# --- compiled rules, one node per schema node that has rules at or below it --------------------

@dataclass
class Rule:
    source: dict[str, Any]  # the rule as written in the CRD
    program: Any
    uses_old_self: bool
    optional_old_self: bool
    reason: str | None
    field_path: str  # normalized, "" when unset: appended to the node's path
    message_program: Any = None
    string_functions: tuple[str, ...] = ()

    @property
    def rule(self) -> str:
        return str(self.source.get("rule") or "").strip()

    @property
    def message(self) -> str:
        return str(self.source.get("message") or "").strip()

    def error_string(self) -> str:
        """Kubernetes' ruleErrorString: the message, else the rule."""
        return self.message or self.rule

    def default_message(self) -> str:
        return self.message or f"failed rule: {self.rule}"


@dataclass
class Node:
    schema: dict[str, Any]
    root: bool = False
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, Node] = field(default_factory=dict)
    items: Node | None = None
    additional: Node | None = None

    @property
    def type(self) -> str:
        return str(self.schema.get("type") or "")


def _schema_path(parts: list[str]) -> str:
    return "".join(parts)


def _normalize_field_path(path: str, schema: dict[str, Any]) -> str | None:
    """Kubernetes' ValidFieldPath: `.a.b`, `['x.y']` into declared properties and map keys; None if invalid."""
    tokens = re.findall(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+", path)
    rendered, current, position = "", schema, 0

    def descend(name: str) -> bool:
        nonlocal rendered, current
        if not isinstance(current, dict):
            return False
        if current.get("properties"):
            if name not in current["properties"]:
                return False
            rendered += f".{name}" if rendered else name
            current = current["properties"][name]
        elif isinstance(current.get("additionalProperties"), dict):
            rendered += f"[{name}]"
            current = current["additionalProperties"]
        else:
            return False
        return True

    while position < len(tokens):
        token = tokens[position]
        if token == "." and position + 1 < len(tokens) and tokens[position + 1] not in ".[]":
            if not descend(tokens[position + 1]):
                return None
            position += 2
        elif token == "[" and position + 2 < len(tokens) and tokens[position + 2] == "]" and tokens[position + 1].startswith("'"):
            literal = tokens[position + 1][1:-1]
            if not descend(re.sub(r"\\(.)", r"\1", literal)):
                return None
            position += 3
        else:
            return None
    return rendered or None


class _Compiler:
    def __init__(self) -> None:
        self.cel = _engine()
        self.problems: list[str] = []

    def node(self, schema: Any, path: list[str], root: bool = False, uncorrelatable: str | None = None) -> Node | None:
        if not isinstance(schema, dict):
            return None
        node = Node(schema, root=root)
        for index, raw in enumerate(schema.get("x-kubernetes-validations") or []):
            rule = self.rule(raw, schema, path + [f".x-kubernetes-validations[{index}]"], uncorrelatable)
            if rule is not None:
                node.rules.append(rule)
        for junctor in ("allOf", "anyOf", "oneOf", "not"):
            nested = schema.get(junctor)
            for index, sub in enumerate(nested if isinstance(nested, list) else [nested] if nested else []):
                if _has_rules(sub):
                    where = path + [f".{junctor}[{index}]" if isinstance(nested, list) else f".{junctor}"]
                    self.problems.append(f"{_schema_path(where)}.x-kubernetes-validations: Forbidden: rules inside "
                                         f"{junctor} are not supported by the local API server (pets_localkube)")
        for name, sub in (schema.get("properties") or {}).items():
            child = self.node(sub, path + [f".properties[{name}]"], uncorrelatable=uncorrelatable)
            if child is not None:
                node.properties[name] = child
        if isinstance(schema.get("additionalProperties"), dict):
            correlatable = schema.get("x-kubernetes-map-type") in (None, "granular", "atomic")
            where = _schema_path(path)
            node.additional = self.node(schema["additionalProperties"], path + [".additionalProperties"],
                                        uncorrelatable=uncorrelatable or (None if correlatable else where))
        if isinstance(schema.get("items"), dict):
            correlatable = schema.get("x-kubernetes-list-type") == "map"
            where = _schema_path(path)
            node.items = self.node(schema["items"], path + [".items"],
                                   uncorrelatable=uncorrelatable or (None if correlatable else where))
        if node.rules or node.properties or node.items or node.additional:
            return node
        return None

    def rule(self, raw: Any, schema: dict[str, Any], path: list[str], uncorrelatable: str | None) -> Rule | None:
        where = _schema_path(path)
        if not isinstance(raw, dict):
            self.problems.append(f"{where}: Invalid value: {json.dumps(raw)}: must be an object")
            return None
        text, message = str(raw.get("rule") or ""), raw.get("message")
        problems: list[str] = []
        if not text.strip():
            problems.append(f"{where}.rule: Required value: rule is not specified")
        elif message is not None and str(message) and not str(message).strip():
            problems.append(f"{where}.message: Invalid value: {json.dumps(message)}: must be non-empty if specified")
        elif message is not None and "\n" in str(message).strip():
            problems.append(f"{where}.message: Invalid value: {json.dumps(message)}: must not contain line breaks")
        elif "\n" in text.strip() and not str(message or "").strip():
            problems.append(f"{where}.message: Required value: message must be specified if rule contains line breaks")
        expression = raw.get("messageExpression")
        if expression is not None and str(expression) and not str(expression).strip():
            problems.append(f"{where}.messageExpression: Required value: messageExpression must be non-empty if specified")
        reason = raw.get("reason")
        if reason is not None and reason not in SUPPORTED_REASONS:
            supported = ", ".join(json.dumps(r) for r in SUPPORTED_REASONS)
            problems.append(f"{where}.reason: Unsupported value: {json.dumps(reason)}: supported values: {supported}")
        field_path = ""
        if raw.get("fieldPath") is not None and str(raw.get("fieldPath")) != "":
            normalized = _normalize_field_path(str(raw["fieldPath"]).strip(), schema) if "\n" not in str(raw["fieldPath"]) else None
            if normalized is None:
                problems.append(f"{where}.fieldPath: Invalid value: {json.dumps(raw['fieldPath'])}: must be a valid path")
            else:
                field_path = normalized
        if problems:
            self.problems.extend(problems)
            return None
        program, uses_old_self = self.compile(text, f"{where}.rule")
        if program is None:
            return None
        optional_old_self = raw.get("optionalOldSelf")
        if uses_old_self and uncorrelatable is not None:
            self.problems.append(f"{where}.rule: Invalid value: {json.dumps(text)}: oldSelf cannot be used on the "
                                 f"uncorrelatable portion of the schema within {uncorrelatable}")
            return None
        if optional_old_self is not None and not uses_old_self:
            self.problems.append(f"{where}.optionalOldSelf: Invalid value: {json.dumps(optional_old_self)}: "
                                 "may not be set if oldSelf is not used in rule")
            return None
        message_program = None
        if expression is not None and str(expression).strip():
            message_program, _ = self.compile(str(expression), f"{where}.messageExpression", message=True)
            if message_program is None:
                return None
        used = set(program.functions()) | (set(message_program.functions()) if message_program is not None else set())
        return Rule(raw, program, uses_old_self, bool(optional_old_self), reason, field_path, message_program,
                    tuple(name for name in STRING_FUNCTIONS if name in used))

    def compile(self, text: str, where: str, message: bool = False) -> tuple[Any, bool]:
        """(program, uses oldSelf), or (None, False) with the problem recorded. Both are declared."""
        what = "messageExpression compilation failed" if message else "compilation failed"
        try:
            program = self.cel.compile(text)
        except (ValueError, TypeError, RuntimeError) as error:
            self.problems.append(f"{where}: Invalid value: {json.dumps(text)}: {what}: {_one_line(error)}")
            return None, False
        variables = set(program.variables())
        bound = set(_MACRO_VARIABLE.findall(text))
        called = {f"{space}.{name}" for space, name in _NAMESPACED_CALL.findall(text)
                  if space in variables - bound - {"self", "oldSelf"}}
        namespaces = {name.split(".")[0] for name in called}
        unsupported = sorted(called - _NAMESPACED_FUNCTIONS)
        unsupported += sorted(name for name in set(program.functions()) - SUPPORTED_FUNCTIONS
                              if not any(call.endswith(f".{name}") for call in called))
        if unsupported:
            self.problems.append(
                f"{where}: Invalid value: {json.dumps(text)}: {what}: the local API server (pets_localkube) cannot "
                f"evaluate {', '.join(repr(name) for name in unsupported)}; it evaluates the CEL standard library, "
                f"optionals and the string extensions ({', '.join(STRING_FUNCTIONS)})")
            return None, False
        uses_old_self = "oldSelf" in variables
        undeclared = sorted(variables - {"self", "oldSelf"} - bound - _TYPE_NAMES - namespaces)
        if undeclared:
            self.problems.append(f"{where}: Invalid value: {json.dumps(text)}: {what}: undeclared reference to "
                                 f"{', '.join(repr(name) for name in undeclared)}")
            return None, False
        return program, uses_old_self


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split("\n")[0].split())


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_has_rules(s) for s in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("x-kubernetes-validations"):
        return True
    children: list[Any] = list((schema.get("properties") or {}).values())
    children += [schema.get(k) for k in ("items", "additionalProperties", "allOf", "anyOf", "oneOf", "not")]
    return any(_has_rules(c) for c in children if c is not None)


def compile_rules(schema: dict[str, Any]) -> RuleSet | None:
    """The rules of one version's `openAPIV3Schema`, None when it has none; InvalidRules when refused."""
    if not _has_rules(schema):
        return None
    compiler = _Compiler()
    root = compiler.node(schema, ["openAPIV3Schema"], root=True)
    if compiler.problems:
        raise InvalidRules(compiler.problems)
    return RuleSet(root, compiler.cel) if root is not None else None


# --- evaluation -------------------------------------------------------------------------------

def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _map_list_key(item: Any, keys: list[str]) -> Any:
    if not isinstance(item, dict):
        return None
    return json.dumps([item.get(k) for k in keys], sort_keys=True)


class RuleSet:
    """The compiled rules of one schema: `validate(new, old)` gives Kubernetes-style causes."""

    def __init__(self, root: Node, engine: Any):
        self.root = root
        self._cel = engine
        from cel.stdlib import EXTENSIONS

        self._string_functions = EXTENSIONS["strings"]

    def validate(self, obj: Any, old: Any = None, warnings: list[str] | None = None) -> list[dict[str, str]]:
        causes: list[dict[str, str]] = []
        unchanged = old is not None and obj == old
        for cause in self._walk(self.root, "", obj, old, unchanged):
            if cause.pop("ratcheted", False):
                if warnings is not None:
                    warnings.append(f"{cause['field']}: {cause['message']}")
            else:
                causes.append(cause)
        return causes

    def _walk(self, node: Node, path: str, obj: Any, old: Any, unchanged: bool) -> Iterator[dict[str, Any]]:
        if obj is None:
            return
        yield from self._rules(node, path, obj, old, unchanged)
        if isinstance(obj, list) and node.items is not None:
            keys = node.schema.get("x-kubernetes-list-map-keys") or []
            correlated = node.schema.get("x-kubernetes-list-type") == "map" and keys and isinstance(old, list)
            old_items = {_map_list_key(item, keys): item for item in old} if correlated else {}
            for index, item in enumerate(obj):
                old_item = old_items.get(_map_list_key(item, keys)) if correlated else None
                same = (old_item is not None and item == old_item) if correlated else unchanged
                yield from self._walk(node.items, f"{path or '<nil>'}[{index}]", item, old_item, same)
        elif isinstance(obj, dict):
            old_map = old if isinstance(old, dict) else {}
            if node.additional is not None:
                correlatable = node.schema.get("x-kubernetes-map-type") in (None, "granular", "atomic")
                for key in sorted(obj):
                    old_value = old_map.get(key) if correlatable else None
                    same = (old_value is not None and obj[key] == old_value) if correlatable else unchanged
                    yield from self._walk(node.additional, f"{path or '<nil>'}[{key}]", obj[key], old_value, same)
            for key in sorted(obj):
                if key in node.properties:
                    old_value = old_map.get(key)
                    yield from self._walk(node.properties[key], _child(path, key), obj[key], old_value,
                                          old_value is not None and obj[key] == old_value)

    def _rules(self, node: Node, path: str, obj: Any, old: Any, unchanged: bool) -> Iterator[dict[str, Any]]:
        if not node.rules:
            return
        shown = path or "<nil>"
        value = to_cel(obj, node.schema, root=node.root)
        old_value = to_cel(old, node.schema, root=node.root) if old is not None else None
        for rule in node.rules:
            if rule.uses_old_self and old_value is None and not rule.optional_old_self:
                continue  # a transition rule: only on update, where an old value exists
            activation: dict[str, Any] = {"self": value}
            for name in rule.string_functions:
                activation[name] = self._string_functions[name]
            plain = dict(activation)
            if rule.uses_old_self:
                if old_value is not None:
                    plain["oldSelf"] = old_value
                activation["oldSelf"] = (self._cel.OptionalValue.of(old_value) if old_value is not None
                                         else self._cel.OptionalValue.none()) if rule.optional_old_self else old_value
            try:
                result = rule.program.execute(activation)
            except Exception as error:  # the engine's runtime errors: KeyError, TypeError, IndexError, ...
                yield {"reason": "FieldValueInvalid", "field": shown,
                       "message": f"Invalid value: {json.dumps(node.type)}: {_runtime_error(error, rule)}"}
                continue
            if result is True:
                continue
            if not isinstance(result, bool):
                yield {"reason": "FieldValueInvalid", "field": shown,
                       "message": f"Invalid value: {json.dumps(node.type)}: the rule evaluated to "
                                  f"{type(result).__name__}, not bool, evaluating rule: {rule.error_string()}"}
                continue
            target = f"{path}.{rule.field_path}" if rule.field_path and path else (rule.field_path or shown)
            cause = _failure(target, node.type, self._message(rule, plain), rule.reason)
            if not rule.uses_old_self and unchanged:
                cause["ratcheted"] = True
            yield cause

    @staticmethod
    def _message(rule: Rule, activation: dict[str, Any]) -> str:
        if rule.message_program is not None:
            try:
                message = rule.message_program.execute(activation)
            except Exception:
                message = None
            if isinstance(message, str):
                message = message.strip()
                if message and "\n" not in message and len(message.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES:
                    return message
        return rule.default_message()


def _runtime_error(error: Exception, rule: Rule) -> str:
    text = _one_line(error)
    if isinstance(error, KeyError):
        return f"no such key: {str(error.args[0]) if error.args else text} evaluating rule: {rule.error_string()}"
    if isinstance(error, TypeError) and text.lower().startswith("no such overload"):
        return ("'no such overload': call arguments did not match a supported operator, function or macro "
                f"signature for rule: {rule.error_string()}")
    if isinstance(error, ZeroDivisionError):
        text = "division by zero"
    elif isinstance(error, OverflowError):
        text = "integer overflow"
    return f"{text} evaluating rule: {rule.error_string()}"


def _failure(field_path: str, schema_type: str, detail: str, reason: str | None) -> dict[str, Any]:
    """apiextensions' fieldErrorForReason, rendered as a Status cause."""
    if reason == "FieldValueForbidden":
        return {"reason": reason, "field": field_path, "message": f"Forbidden: {detail}"}
    if reason == "FieldValueRequired":
        return {"reason": reason, "field": field_path, "message": f"Required value: {detail}"}
    if reason == "FieldValueDuplicate":
        return {"reason": reason, "field": field_path, "message": f"Duplicate value: {json.dumps(schema_type)}"}
    return {"reason": "FieldValueInvalid", "field": field_path, "message": f"Invalid value: {json.dumps(schema_type)}: {detail}"}
