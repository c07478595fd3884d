"""Kubernetes `Status` errors, shaped the way the official client and `kubectl` decode them."""
from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as a `kind: Status` body with the HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def qualified(plural: str, group: str) -> str:
    """`pods`, `petstrainingjobs.training.pets.dev`: the resource name as error messages spell it."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found',
                    {"name": name, "group": group, "kind": plural})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists',
                    {"name": name, "group": group, "kind": plural})


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
                    {"name": name, "group": group, "kind": plural})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 with one cause per field, message as `Kind.group "name" is invalid: field: detail`."""
    rendered = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {joined}',
                    {"name": name, "group": group, "kind": kind, "causes": causes})
