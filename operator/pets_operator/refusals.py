"""What a failed Kubernetes API call means for a job (pure): give up, wait for quota, or retry.

`kube` turns every failed call into an `ApiFailure` (the HTTP code, the Status reason and
message; no code when no answer came: a timeout, a dropped connection). `classify` says what
kind of failure it is; the job's reconcile step decides what that does to the job. A 409 reaches
a job only for an object that is not its own (`occupants`): the runner adopts its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .occupants import Occupant

REFUSED = "Refused"  # the API will refuse the same call again: 400, 403 (not quota), 405, 413, 415, 422
QUOTA = "QuotaExceeded"  # a ResourceQuota refused it: may pass once other objects are gone or the quota grows
TRANSIENT = "Transient"  # 5xx, 429, timeouts, dropped connections, ...: retry
CONFLICT = "NameConflict"  # 409: the name is taken by an object that is not the job's (see `occupants`)
NOT_SERVED = "NotServed"  # 404 to a create: the API serves no such resource (a CRD that is not installed)
PERMANENT_CODES = frozenset({400, 403, 405, 413, 415, 422})
# Kubernetes' ResourceQuota admission: `pods "x" is forbidden: exceeded quota: q, requested: ..., used: ..., limited: ...`
QUOTA_MARKER = "exceeded quota"

RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


@dataclass(frozen=True)
class ApiFailure:
    code: int | None  # the HTTP status; None when no answer came
    reason: str  # the Status reason (Invalid, Forbidden, ...), the HTTP reason, or the error's class
    message: str  # the API's message (Status.message), or the error's text

    @property
    def kind(self) -> str:
        return classify(self.code, self.message)

    def describe(self) -> str:
        """`422 Invalid: Pod "x" is invalid: ...`, `no answer (ReadTimeoutError): ...`."""
        head = f"{self.code} {self.reason}" if self.code is not None else f"no answer ({self.reason})"
        return f"{head}: {self.message}" if self.message else head


def classify(code: int | None, message: str) -> str:
    if code == 409:
        return CONFLICT
    if code == 404:
        return NOT_SERVED
    if code == 403 and QUOTA_MARKER in (message or "").lower():
        return QUOTA
    if code in PERMANENT_CODES:
        return REFUSED
    return TRANSIENT


def backoff_seconds(failures: int) -> float:
    """The wait before retry number `failures` (1, 2, ...): doubling from 1 s up to 60 s."""
    return min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** max(0, failures - 1))


@dataclass(frozen=True)
class CreateFailure:
    """The last attempt to create a group's objects failed (the runner keeps it for the next step)."""
    what: str  # the object: `Service pets-workers`, `Pod pets-1`
    failure: ApiFailure
    attempt: int  # the group attempt (status.restarts) the objects were for
    failures: int  # consecutive failed tries
    at: datetime
    occupant: Occupant | None = None  # a CONFLICT's: the object that has the name

    @property
    def object_kind(self) -> str:
        """`Pod`, `Service`, `NetworkPolicy`, `PodGroup`: the kind of object that was not created."""
        return self.what.split(" ", 1)[0]

    @property
    def kind(self) -> str:
        return self.failure.kind

    @property
    def retry_at(self) -> datetime:
        return self.at + timedelta(seconds=backoff_seconds(self.failures))


MOST_SEVERE_FIRST = (REFUSED, CONFLICT, NOT_SERVED, QUOTA, TRANSIENT)


def most_severe(failures: list[tuple[str, ApiFailure]]) -> tuple[str, ApiFailure] | None:
    """Of several calls' failures, the one that decides: a refusal before a quota before a transient one."""
    if not failures:
        return None
    return min(failures, key=lambda item: MOST_SEVERE_FIRST.index(item[1].kind))
