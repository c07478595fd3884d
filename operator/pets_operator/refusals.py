"""What a failed Kubernetes API call means for a job (pure): give up, wait for quota, or retry.

`kube` turns every failed call into an `ApiFailure` (the HTTP code, the Status reason and
message, the wait the server asked for in Retry-After; no code when no answer came: a timeout, a
dropped connection). `classify` says what kind of failure it is; the job's reconcile step decides
what that does to the job. A transient failure is retried after `backoff_seconds`: doubling from
1 s up to 60 s, and never sooner than the server's Retry-After. A 409 reaches a job only for an
object that is not its own (`occupants`): the runner adopts its own.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

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
# A Retry-After is honoured up to this: a broken proxy's `Retry-After: 86400` must not stop the operator for a day.
RETRY_AFTER_MAX_SECONDS = 300.0
# Codes that are an answer, not an error, where they come (a read of a deleted object, a create of an existing one,
# a watch's expired resourceVersion): not counted in the API error metric.
EXPECTED_CODES = frozenset({404, 409, 410})


@dataclass(frozen=True)
class ApiFailure:
    code: int | None  # the HTTP status; None when no answer came
    reason: str  # the Status reason (Invalid, Forbidden, ...), the HTTP reason, or the error's class
    message: str  # the API's message (Status.message), or the error's text
    retry_after: float | None = None  # seconds the server asked to wait (Retry-After of a 429 or 5xx)

    @property
    def kind(self) -> str:
        return classify(self.code, self.message)

    def describe(self) -> str:
        """`422 Invalid: Pod "x" is invalid: ...`, `no answer (ReadTimeoutError): ...`, `429 TooManyRequests: ... (Retry-After 2s)`."""
        head = f"{self.code} {self.reason}" if self.code is not None else f"no answer ({self.reason})"
        text = f"{head}: {self.message}" if self.message else head
        return f"{text} (Retry-After {self.retry_after:g}s)" if self.retry_after is not None else text


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


def backoff_seconds(failures: int, retry_after: float | None = None) -> float:
    """The wait before retry number `failures` (1, 2, ...): doubling from 1 s up to 60 s, and at least the
    server's `retry_after` (capped at 5 minutes)."""
    backoff = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** max(0, min(failures, 64) - 1))
    return max(backoff, min(retry_after or 0.0, RETRY_AFTER_MAX_SECONDS))


def retry_after_seconds(headers: Mapping[str, str] | None, now: datetime | None = None) -> float | None:
    """The Retry-After of a response (RFC 9110 10.2.3: delay-seconds, or an HTTP date), in seconds; None if absent
    or unreadable. Kubernetes sends whole seconds (429 from API Priority and Fairness, some 503s)."""
    text = next((str(value).strip() for key, value in (headers or {}).items() if key.lower() == "retry-after"), "")
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        seconds = (moment - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN: unreadable


def is_api_error(code: int | None) -> bool:
    """Whether an answer with this HTTP code (None: no answer) counts as a failed API call."""
    return code is None or (code >= 400 and code not in EXPECTED_CODES)


class CappedBackoffs:
    """`backoff_seconds(1), (2), ...` without end: kopf's `settings.networking.error_backoffs`, so that kopf
    retries its own calls (watches, patches) through an API outage of any length instead of giving up."""

    def __iter__(self) -> Iterator[float]:
        failures = 0
        while True:
            failures += 1
            yield backoff_seconds(failures)


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
        return self.at + timedelta(seconds=backoff_seconds(self.failures, self.failure.retry_after))


MOST_SEVERE_FIRST = (REFUSED, CONFLICT, NOT_SERVED, QUOTA, TRANSIENT)


def most_severe(failures: list[tuple[str, ApiFailure]]) -> tuple[str, ApiFailure] | None:
    """Of several calls' failures, the one that decides: a refusal before a quota before a transient one."""
    if not failures:
        return None
    return min(failures, key=lambda item: MOST_SEVERE_FIRST.index(item[1].kind))
