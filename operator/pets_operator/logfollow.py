"""Pod 0's log followed on the operator's event loop: one aiohttp session for every followed log, no threads.

`LogStreams` holds one `aiohttp.ClientSession`, made from the credentials the kubernetes client
uses (its `Configuration`: server, CA, client certificate, bearer token and its refresh hook, proxy),
and `follow(...)` starts one `AsyncPodLogFollower` task per followed pod. A follower reads
`/log?follow=true` from the start until the container has ended, re-reads after a dropped
connection (the epoch book merges, so nothing doubles), retries an unreadable log and gives up
when the pod is gone or the API server keeps refusing its log. An API server that is away
(restarting, its etcd down: no answer, 5xx, 429) is waited out however long it takes, backing
off. 1,000 followed jobs are 1,000 idle sockets and coroutines, not 1,000 threads.

It asks for `timestamps=true`: each line carries the time the kubelet wrote it, so the time from an
epoch line to its status patch can be measured (`on_epoch`). The lines' events are `metric_lines`';
the epoch entries go to the job's `epochs.EpochBook`, those of one read together (one status patch
for a burst, e.g. a re-read after an operator restart). The patch itself stays a blocking call of
the book, run in the executor given (the operator's pool for epoch patches, `apipools`).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import aiohttp

from pets_api.metric_lines import LineSplitter, parse_line, parse_progress_line

from .epochs import EpochBook, epoch_entry
from .initialization import is_init_event
from .status import FINAL_PHASES, PENDING
from .tracking import is_tracking_event

log = logging.getLogger(__name__)
USER_AGENT = "pets-operator/log-follower"
INIT_MARK = '"init'  # in every `init` / `initialized` line (json.dumps writes `"event": "init...`)
TRACKING_MARK = '"tracking'  # in every `tracking` / `tracking_degraded` line
RETRY_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0  # while the API server is away: 0.5 s doubling to 5 s
MAX_FAILURES = 120  # x RETRY_SECONDS: give up on a log the API server keeps refusing
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0  # every call but the followed log itself, which may be silent for a whole epoch


class LogUnavailable(Exception):
    """The API answered the log request with an error (400 while the container starts, 404, ...)."""

    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text.strip()[:300]}")
        self.status = status


class LogBroken(Exception):
    """The followed log's stream ended mid-way (the API server or the kubelet went away): read it again."""


# --- pure parts ---------------------------------------------------------------------------------

def is_transient(error: BaseException) -> bool:
    """Whether a failed read says nothing about the log itself: no answer, a broken stream, a timeout, a
    5xx or a 429 (an API server restarting, its etcd away). Those are retried for as long as they last."""
    if isinstance(error, LogUnavailable):
        return error.status == 429 or error.status >= 500
    return isinstance(error, (LogBroken, aiohttp.ClientError, asyncio.TimeoutError, OSError))


class Retries:
    """A follower's tries (pure): a log the API server keeps refusing (4xx) is given up after MAX_FAILURES
    refusals in a row; an unreachable or failing API server only slows the tries down, to RETRY_MAX_SECONDS."""

    def __init__(self) -> None:
        self.refusals = 0  # refusals since the last read the server answered
        self.transient = 0  # transient failures in a row

    def answered(self) -> None:
        self.refusals = self.transient = 0

    def failed(self, error: BaseException) -> None:
        if is_transient(error):
            self.transient += 1
        else:
            self.transient = 0
            self.refusals += 1

    def give_up(self) -> bool:
        return self.refusals >= MAX_FAILURES

    def delay(self) -> float:
        return min(RETRY_SECONDS * 2 ** max(self.transient - 1, 0), RETRY_MAX_SECONDS) if self.transient else RETRY_SECONDS



def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the kubelet writes it (nanoseconds, `Z`); None if not one."""
    if len(text) < 20 or text[10] != "T":
        return None
    head, _, fraction = text.rstrip("Z").partition(".")
    zone = ""
    for sign in ("+", "-"):
        if sign in fraction:
            fraction, zone = fraction.split(sign, 1)[0], sign + fraction.split(sign, 1)[1]
    if not zone and text.endswith("Z"):
        zone = "+00:00"
    try:
        moment = datetime.fromisoformat(f"{head}.{fraction[:6].ljust(6, '0')}{zone}")
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def split_timestamp(line: str) -> tuple[float | None, str]:
    """(when the line was written, its text) of a `timestamps=true` log line; (None, line) without a timestamp."""
    stamp, space, text = line.partition(" ")
    moment = parse_timestamp(stamp) if space else None
    return (moment, text) if moment is not None else (None, line)


def epoch_batches(lines: Iterable[str]) -> list[tuple[list[dict[str, Any]], list[float | None], bool]]:
    """The epoch entries of `lines` as (entries, their lines' times, resumed) runs: one run per stretch of
    lines with the same `resumed` flag, in order, so each run is one `EpochBook.add`."""
    batches: list[tuple[list[dict[str, Any]], list[float | None], bool]] = []
    for line in lines:
        moment, text = split_timestamp(line)
        event = parse_progress_line(text)  # JSON metric lines and printed `epoch N: P` lines
        entry = epoch_entry(event) if event is not None else None
        if entry is None:
            continue
        resumed = bool(event.get("resumed"))
        if batches and batches[-1][2] == resumed:
            batches[-1][0].append(entry)
            batches[-1][1].append(moment)
        else:
            batches.append(([entry], [moment], resumed))
    return batches


# --- the session --------------------------------------------------------------------------------

def ssl_context(configuration: Any) -> ssl.SSLContext | bool | None:
    """What aiohttp's `ssl=` needs for the client configuration: None for plain http, False for no verification."""
    if not str(configuration.host).startswith("https"):
        return None
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if getattr(configuration, "assert_hostname", None) is False:
        context.check_hostname = False
    return context


def auth_headers(configuration: Any) -> dict[str, str]:
    """The Authorization header the kubernetes client would send now (a refreshed token included)."""
    # A kubeconfig's token is under "BearerToken" (kubernetes.config.load_kube_config); "authorization" by hand.
    token = configuration.get_api_key_with_prefix("BearerToken") or configuration.get_api_key_with_prefix("authorization")
    if token:
        return {"Authorization": token}
    if configuration.username or configuration.password:
        return {"Authorization": configuration.get_basic_auth_token()}
    return {}


class LogStreams:
    """The operator's followed pod logs: one session, one task per pod; made and closed on the event loop."""

    def __init__(self, configuration: Any, executor: Executor | None = None,
                 on_epoch: Callable[[float], None] | None = None,
                 on_error: Callable[[str, str, LogUnavailable | BaseException], None] | None = None,
                 on_delivery: Callable[[float], None] | None = None):
        """`configuration`: the kubernetes client's; `executor`: runs the book's blocking status patches;
        `on_epoch(seconds)`: an epoch line reached the status this long after it was written;
        `on_delivery(seconds)`: the same line had reached the operator this long after it was written;
        `on_error(verb, resource, error)`: a failed request (for the API error count)."""
        self.configuration = configuration
        self.base = str(configuration.host).rstrip("/")
        self.executor = executor
        self.on_epoch = on_epoch
        self.on_delivery = on_delivery
        self.on_error = on_error
        self._ssl = ssl_context(configuration)
        self._proxy = getattr(configuration, "proxy", None) or None
        self._server_hostname = getattr(configuration, "tls_server_name", None) or None
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=self._ssl if self._ssl is not None else True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
            headers={"User-Agent": USER_AGENT})
        self.followers: set[AsyncPodLogFollower] = set()

    async def close(self) -> None:
        for follower in list(self.followers):
            follower.stop()
        await self.session.close()

    def _request(self, path: str, params: dict[str, str], timeout: aiohttp.ClientTimeout | None = None):
        options: dict[str, Any] = {"params": params, "headers": auth_headers(self.configuration)}
        if self._proxy:
            options["proxy"] = self._proxy
        if self._server_hostname:
            options["server_hostname"] = self._server_hostname
        if timeout is not None:
            options["timeout"] = timeout
        return self.session.get(self.base + path, **options)

    def open_log(self, namespace: str, pod: str, container: str):
        """The followed log, with timestamps, as an aiohttp response context."""
        return self._request(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/log",
                             {"container": container, "follow": "true", "timestamps": "true"})

    async def pod_state(self, namespace: str, pod: str) -> tuple[str, str] | None:
        """(uid, phase) of the pod, None when it is gone."""
        timeout = aiohttp.ClientTimeout(total=READ_TIMEOUT, sock_connect=CONNECT_TIMEOUT)
        try:
            async with self._request(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}", {}, timeout) as response:
                if response.status == 404:
                    return None
                if response.status >= 400:
                    raise LogUnavailable(response.status, await response.text())
                body = await response.json()
        except Exception as error:
            self._failed("get", "pods", error)
            raise
        return body["metadata"].get("uid", ""), (body.get("status") or {}).get("phase", PENDING)

    def _failed(self, verb: str, resource: str, error: BaseException) -> None:
        if self.on_error is not None and not isinstance(error, asyncio.CancelledError):
            self.on_error(verb, resource, error)

    def follow(self, namespace: str, pod: str, container: str, uid: str, book: EpochBook,
               on_drained: Callable[[], None], attempt: int | None = None) -> AsyncPodLogFollower:
        follower = AsyncPodLogFollower(self, namespace, pod, container, uid, book, on_drained, attempt)
        self.followers.add(follower)
        follower.start()
        return follower


class AsyncPodLogFollower:
    """Follows one pod (by uid) from the start of its log until its container has ended, as a task."""

    def __init__(self, streams: LogStreams, namespace: str, pod: str, container: str, uid: str, book: EpochBook,
                 on_drained: Callable[[], None], attempt: int | None = None):
        self.streams = streams
        self.namespace, self.pod, self.container = namespace, pod, container
        self.uid = uid
        self.attempt = attempt
        self._book = book
        self._on_drained = on_drained
        self._stopping = False
        self.drained = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> AsyncPodLogFollower:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"log-{self.pod}")
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _container_ended(self) -> bool:
        state = await self.streams.pod_state(self.namespace, self.pod)
        return state is None or state[0] != self.uid or state[1] in FINAL_PHASES

    async def _gone_quietly(self) -> bool:
        try:
            state = await self.streams.pod_state(self.namespace, self.pod)
        except Exception:  # noqa: BLE001 - the API is unreachable too: keep trying
            return False
        return state is None or state[0] != self.uid

    async def _run(self) -> None:
        retries = Retries()
        try:
            while not self._stopping:
                try:
                    if await self._read_once():
                        retries.answered()
                    # The server ends a followed log when the container ends, or when a connection drops.
                    if await self._container_ended():
                        break
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # noqa: BLE001 - an unreadable log is retried, never fatal
                    retries.failed(error)
                    if retries.give_up() or await self._gone_quietly():
                        log.info("stopped following pod %s: %s", self.uid, error)
                        break
                    log.debug("log of pod %s not readable yet: %s", self.uid, error)
                await asyncio.sleep(retries.delay())
        except asyncio.CancelledError:
            log.debug("stopped following pod %s", self.uid)
        finally:
            self.streams.followers.discard(self)
            self.drained.set()
            self._on_drained()

    async def _read_once(self) -> bool:
        """Read the log from the start to where the stream ends; True once the server sent it (a 200)."""
        splitter = LineSplitter()
        opened = False
        try:
            async with self.streams.open_log(self.namespace, self.pod, self.container) as response:
                if response.status >= 400:
                    raise LogUnavailable(response.status, await response.text())
                opened = True
                async for chunk in response.content.iter_any():
                    await self._read(splitter.feed(chunk))
            await self._read(splitter.rest())
        except (asyncio.CancelledError, LogUnavailable) as error:
            if isinstance(error, LogUnavailable) and error.status != 400:  # 400: not started yet, expected
                self.streams._failed("get", "pods/log", error)
            raise
        except aiohttp.ClientError as error:
            self.streams._failed("get", "pods/log", error)
            if opened:  # the stream broke after the server had sent it: the next read starts afresh
                raise LogBroken(error) from error
            raise
        return opened

    async def _read(self, lines: list[str]) -> None:
        for line in lines:
            if INIT_MARK in line:  # the few download progress lines before training (cheap test first)
                event = parse_line(split_timestamp(line)[1])
                if is_init_event(event):
                    self._book.note_init(event, attempt=self.attempt)
            elif TRACKING_MARK in line:  # where the trackers log, and whether one failed
                event = parse_line(split_timestamp(line)[1])
                if is_tracking_event(event):
                    self._book.note_tracking(event, attempt=self.attempt)
        received = time.time()
        for entries, moments, resumed in epoch_batches(lines):
            add = functools.partial(add_entries, self._book, entries, self.attempt, resumed)
            recorded = await asyncio.get_running_loop().run_in_executor(self.streams.executor, add)
            now = time.time()
            for entry, moment in zip(entries, moments):
                if moment is not None and int(entry["epoch"]) in recorded:
                    for report, at in ((self.streams.on_delivery, received), (self.streams.on_epoch, now)):
                        if report is not None:
                            report(max(0.0, at - moment))


def add_entries(book: EpochBook, entries: list[dict[str, Any]], attempt: int | None, resumed: bool) -> set[int]:
    """`book.add` (a blocking status patch when they change the epochs): the epochs it recorded anew or changed."""
    before = {int(e["epoch"]): e for e in book.epochs}
    if not book.add(entries, attempt=attempt, resumed=resumed):
        return set()
    after = {int(e["epoch"]): e for e in book.epochs}
    return {epoch for epoch, entry in after.items() if before.get(epoch) != entry}
