"""The local API server: Kubernetes REST paths over aiohttp, on top of `Storage`.

It serves discovery (`/api`, `/apis`, `/apis/<g>/<v>`), the built-in resources the operator,
kubectl and kopf use, and any custom resource of an applied CRD, with lists, watches (each
stream is a `watch.WatchStream`), `Table`s, the status subresource, pod bindings and pod logs.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from . import errors, logs, openapi, protobuf
from .apimetrics import RequestCounter
from .collector import Collector
from .resources import Registry, ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .storage import POD_KEY, TERMINAL_POD_PHASES, Storage
from .store import Store
from .tables import to_table, wants_table
from .watch import WatchOptions, WatchStream, query_flag

logger = logging.getLogger(__name__)

SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-pets-local", "platform": "linux/amd64",
                  "gitCommit": "local", "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                  "goVersion": "go1.23", "compiler": "gc"}
LOG_POLL_INTERVAL = 0.1
DRY_RUN_ALL = "All"  # the one dryRun value the API defines
# Request body media types (a PATCH's own types are checked by patch.apply_patch).
_JSON_TYPES = ("", "application/json", "*/*")
_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


@dataclass
class Target:
    """A parsed resource path: /api(s)/<gv>/[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]."""
    resource: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {"Warning": ", ".join(f'299 - {json.dumps(w)}' for w in warnings)} if warnings else None
    return web.Response(text=json.dumps(body), status=status, content_type="application/json", headers=headers)


class ApiServer:
    def __init__(self, log_root: Path):
        self.store = Store()
        self.registry = Registry()
        self.storage = Storage(self.store, self.registry)
        self.collector = Collector(self.storage)
        self.log_root = log_root
        self.closing = asyncio.Event()
        self._collector_task: asyncio.Task | None = None
        self.requests = RequestCounter()  # served at /metrics

    # --- application -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.requests.middleware, self._errors], client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._shutdown)
        return app

    async def _start(self, app: web.Application) -> None:
        self._collector_task = asyncio.create_task(self.collector.run())

    async def _shutdown(self, app: web.Application) -> None:
        self.closing.set()
        self.store.close_watchers()
        if self._collector_task:
            self._collector_task.cancel()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except errors.ApiError as error:
            return _json(error.status(), status=error.code)
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except ConnectionError as error:
            # The client went away mid-answer (a watch or `logs -f` closed; aiohttp's ClientConnectionResetError
            # is a ConnectionError): nothing to report. Raised on, aiohttp would log it with a traceback; a
            # response returned is written to the closed connection, which aiohttp ignores quietly.
            logger.debug("%s %s: the client went away (%s)", request.method, request.path, error)
            return web.Response(status=499)  # "client closed request"; it reaches nobody
        except Exception as error:  # answered as a Status, logged here with the traceback
            logger.exception("internal error on %s %s", request.method, request.path)
            return _json(errors.ApiError(500, "InternalError", f"Internal error occurred: {error}").status(), status=500)

    async def _api_versions(self, request: web.Request) -> web.Response:
        return _json({"kind": "APIVersions", "versions": ["v1"],
                      "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]})

    # --- routing -----------------------------------------------------------------------------

    @staticmethod
    def _found(document: dict[str, Any] | None, error: errors.ApiError) -> dict[str, Any]:
        if document is None:
            raise error
        return document

    def _parse(self, path: str) -> Target | dict[str, Any]:
        parts = [p for p in path.split("/") if p]
        not_found = errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 2 and parts[0] == "apis":
            group = parts[1]
            if len(parts) == 2:
                return self._found(self.registry.api_group(group), not_found)
            version, rest = parts[2], parts[3:]
        else:
            raise not_found
        if not rest:
            return self._found(self.registry.api_resource_list(group, version), not_found)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize") and len(rest) == 3):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise not_found
        resource = self.registry.find(group, version, rest[0])
        if resource is None or (namespace is not None and not resource.namespaced):
            raise not_found
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource and subresource not in resource.subresources:
            raise not_found
        if name and resource.namespaced and namespace is None:
            raise not_found
        return Target(resource, version, namespace, name, subresource)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path == "/version":
            return _json(SERVER_VERSION)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/metrics":
            return self.requests.response()
        if path == "/api":
            return await self._api_versions(request)
        if path == "/apis":
            return _json(self.registry.api_group_list())
        if path.startswith("/openapi"):
            return self._openapi(path)
        target = self._parse(path)
        if isinstance(target, dict):
            if request.method != "GET":
                raise errors.method_not_allowed()
            return _json(target)
        method, query = request.method, request.query
        strict = query.get("fieldValidation") == "Strict"
        storage, resource = self.storage, target.resource
        if target.name is None:
            if method == "GET":
                return await (self._watch(request, target) if query_flag(query, "watch") else self._list(request, target))
            if method == "POST":
                dry_run = self._dry_run(request, "CreateOptions")
                obj, warnings = storage.create(resource, target.namespace, await self._body(request), target.version, strict,
                                               dry_run=dry_run)
                return _json(obj, 201, warnings)
            if method == "DELETE":
                return await self._delete_collection(request, target)
            raise errors.method_not_allowed()
        if target.subresource == "log":
            if method != "GET":
                raise errors.method_not_allowed()
            return await self._pod_log(request, target)
        if target.subresource == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            if self._dry_run(request, "CreateOptions"):
                raise errors.bad_request("dryRun is not supported for pods/binding by the local API server")
            return _json(storage.bind(target.namespace, target.name, await self._body(request)), 201)
        if method == "GET":
            obj = storage._versioned(storage.get(resource, target.namespace, target.name), resource, target.version)
            if wants_table(request.headers.get("Accept", "")):
                # `kubectl get KIND NAME` asks for a Table as `kubectl get KIND` does: the same columns.
                return _json(to_table(resource, target.version, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                                      include_object=query.get("includeObject")))
            return _json(obj)
        if method == "PUT":
            dry_run = self._dry_run(request, "UpdateOptions")
            obj, warnings = storage.update(resource, target.namespace, target.name, await self._body(request),
                                           target.subresource, target.version, strict, dry_run=dry_run)
            return _json(obj, 200, warnings)
        if method == "PATCH":
            dry_run = self._dry_run(request, "PatchOptions")
            content_type = request.headers.get("Content-Type", "")
            obj, warnings = storage.patch(resource, target.namespace, target.name, content_type, await self._body(request),
                                          target.subresource, target.version, strict, dry_run=dry_run)
            return _json(obj, 200, warnings)
        if method == "DELETE":
            if target.subresource:
                raise errors.method_not_allowed()
            options = await self._delete_options(request)
            dry_run = self._dry_run(request, "DeleteOptions", options.get("dryRun"))
            return _json(storage.delete(resource, target.namespace, target.name, options, dry_run=dry_run))
        raise errors.method_not_allowed()

    @staticmethod
    def _dry_run(request: web.Request, options_kind: str, in_body: Any = None) -> bool:
        """`dryRun` from the query (and a DeleteOptions body): absent -> False, `All` -> True, else 422
        as a real API server answers (its handlers validate the CreateOptions/UpdateOptions/... first)."""
        values = list(request.query.getall("dryRun", []))
        if isinstance(in_body, list):
            values += [str(v) for v in in_body]
        if not values:
            return False
        if any(value != DRY_RUN_ALL for value in values):
            listed = ", ".join(json.dumps(value) for value in values)
            raise errors.invalid(options_kind, "meta.k8s.io", "", [{
                "reason": "FieldValueNotSupported", "field": "dryRun",
                "message": f'Unsupported value: []string{{{listed}}}: supported values: "{DRY_RUN_ALL}"'}])
        return True

    def _openapi(self, path: str) -> web.Response:
        parts = [p for p in path.split("/") if p]
        not_found = errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts[:2] != ["openapi", "v3"]:
            raise not_found  # v2 is protobuf-only on real servers; kubectl uses v3 when it is there
        if len(parts) == 2:
            return _json(openapi.root_document(self.registry))
        rest = parts[2:]
        if rest[0] == "api" and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            raise not_found
        return _json(self._found(openapi.group_version_document(self.registry, group, version), not_found))

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            raise errors.bad_request("the request body is empty")
        return self._decode(request.headers.get("Content-Type", ""), raw, "the request body")

    @staticmethod
    def _decode(content_type: str, raw: bytes, what: str) -> Any:
        """A request body by its media type: JSON (also the patch types `*+json`), YAML, or Kubernetes
        protobuf for the kinds `protobuf` reads; anything else is 415, as a real API server answers."""
        media = content_type.split(";")[0].strip().lower()
        if media == protobuf.MEDIA_TYPE:
            try:
                return protobuf.decode(raw)
            except protobuf.UnsupportedKind as unsupported:
                raise errors.ApiError(415, "UnsupportedMediaType",
                                      f"the local API server reads {protobuf.MEDIA_TYPE} bodies only for "
                                      f"{', '.join(protobuf.supported_kinds())}, not {unsupported.api_version} {unsupported.kind}; "
                                      "send this object as application/json") from None
            except protobuf.ProtobufError as error:
                raise errors.bad_request(f"{what} could not be decoded as {protobuf.MEDIA_TYPE}: {error}") from None
        try:
            if media in _YAML_TYPES or media.endswith("+yaml"):
                return yaml.safe_load(raw)
            if media in _JSON_TYPES or media.endswith("+json"):
                return json.loads(raw)
        except (ValueError, yaml.YAMLError) as error:
            raise errors.bad_request(f"{what} could not be decoded: {error}") from None
        raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types "
                              f"include: application/json, application/yaml, {protobuf.MEDIA_TYPE}")

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw:
            options = self._decode(request.headers.get("Content-Type", ""), raw, "the DeleteOptions") or {}
            if not isinstance(options, dict):
                raise errors.bad_request("the DeleteOptions must be an object")
        for name in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
            if name in request.query:
                value: Any = request.query[name]
                options[name] = int(value) if name == "gracePeriodSeconds" else (value == "true" if name == "orphanDependents" else value)
        return options

    # --- lists and watches -------------------------------------------------------------------

    def _matcher(self, request: web.Request):
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"))
        return lambda obj: labels(obj) and fields(obj)

    def _items(self, request: web.Request, target: Target) -> list[dict[str, Any]]:
        matches = self._matcher(request)
        items = self.store.items(target.resource.key, target.namespace)
        return [self.storage._versioned(o, target.resource, target.version) for o in items if matches(o)]

    async def _list(self, request: web.Request, target: Target) -> web.Response:
        items = self._items(request, target)
        meta = {"resourceVersion": str(self.store.resource_version)}
        if wants_table(request.headers.get("Accept", "")):
            return _json(to_table(target.resource, target.version, items, meta, include_object=request.query.get("includeObject")))
        return _json({"kind": target.resource.list_kind, "apiVersion": target.resource.api_version(target.version),
                      "metadata": meta, "items": items})

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, "DeleteOptions", options.get("dryRun"))
        deleted = []
        for obj in self._items(request, target):
            meta = obj["metadata"]
            try:
                deleted.append(self.storage.delete(target.resource, meta.get("namespace"), meta["name"], options, dry_run=dry_run))
            except errors.ApiError as error:
                if error.code != 404:
                    raise
        return _json({"kind": target.resource.list_kind, "apiVersion": target.resource.api_version(target.version),
                      "metadata": {"resourceVersion": str(self.store.resource_version)}, "items": deleted})

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        matches = self._matcher(request)
        options = WatchOptions.parse(request.query, request.headers.get("Accept", ""))
        stream = WatchStream(self.store, target.resource, target.version, target.namespace, matches, options, self.closing)
        return await stream.serve(request)

    # --- pod logs ----------------------------------------------------------------------------

    async def _pod_log(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        pod = self.storage.get(target.resource, target.namespace, target.name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        container = query.get("container")
        if not container:
            if len(names) != 1:
                raise errors.bad_request(f"a container name must be specified for pod {target.name}, choose one of: [{' '.join(names)}]")
            container = names[0]
        elif container not in names + [c["name"] for c in pod["spec"].get("initContainers") or []]:
            raise errors.bad_request(f"container {container} is not valid for pod {target.name}")
        path = logs.container_log_path(self.log_root, pod, container)
        if not path.exists():
            raise errors.bad_request(f'container "{container}" in pod "{target.name}" is waiting to start: ContainerCreating')
        since = None
        if query.get("sinceTime"):
            try:
                since = logs.parse_time(query["sinceTime"])
            except ValueError:
                raise errors.bad_request(f"invalid sinceTime {query['sinceTime']!r}") from None
        elif query.get("sinceSeconds"):
            since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=int(query["sinceSeconds"]))
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        timestamps = query_flag(query, "timestamps")
        follow = query_flag(query, "follow")

        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0

        async def write(lines: list[str]) -> bool:
            nonlocal sent
            data = "".join(logs.render(line, timestamps) for line in lines).encode()
            if limit is not None:
                data = data[: max(0, limit - sent)]
            sent += len(data)
            if data:
                await response.write(data)
            return limit is None or sent < limit

        with path.open("r", encoding="utf-8", errors="replace") as stream:
            existing = stream.readlines()
            pending = existing[-1] if existing and not existing[-1].endswith("\n") else ""
            complete = existing[:-1] if pending else existing
            if not await write(logs.select_lines(complete, since, tail)) or not follow:
                if not follow and pending:
                    await write([pending])
                return response
            while not self.closing.is_set():
                chunk = stream.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        if not await write(logs.select_lines([pending], since)):
                            return response
                        pending = ""
                    continue
                if self._container_finished(pod, container):
                    rest = stream.read()
                    if pending or rest:
                        await write(logs.select_lines((pending + rest).splitlines(keepends=True), since))
                    return response
                await asyncio.sleep(LOG_POLL_INTERVAL)
        return response

    def _container_finished(self, pod: dict[str, Any], container: str) -> bool:
        """The log is complete once the pod is gone or finished, or its container stopped for good."""
        current = self.store.peek(POD_KEY, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
            return True
        status = current.get("status") or {}
        if status.get("phase") in TERMINAL_POD_PHASES:
            return True
        for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
            if entry.get("name") == container and "terminated" in (entry.get("state") or {}):
                return current["spec"].get("restartPolicy") == "Never" or bool(current["metadata"].get("deletionTimestamp"))
        return False
