"""The local API server: Kubernetes REST paths over aiohttp, on top of `Storage`.

It serves discovery (`/api`, `/apis`, `/apis/<g>/<v>`), the built-in resources the operator,
kubectl and kopf use, and any custom resource of an applied CRD, with lists, watches (each
stream is a `watch.WatchStream`), `Table`s, the status subresource, pod bindings and pod logs.
Each method of each path shape (`routes.py`) is a route with a handler of its own.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from . import errors, logs, openapi, protobuf, routes
from .apimetrics import RequestCounter
from .collector import Collector
from .resources import Registry, ResourceType
from .routes import Target, not_found, target_of
from .selectors import parse_field_selector, parse_label_selector
from .storage import POD_KEY, Storage
from .store import Store
from .tables import to_table, wants_table
from .watch import WatchOptions, WatchStream, query_flag

logger = logging.getLogger(__name__)

SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-pets-local", "platform": "linux/amd64",
                  "gitCommit": "local", "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
                  "goVersion": "go1.23", "compiler": "gc"}
DRY_RUN_ALL = "All"  # the one dryRun value the API defines
# Request body media types (a PATCH's own types are checked by patch.apply_patch).
_JSON_TYPES = ("", "application/json", "*/*")
_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


def accepts_json(accept: str) -> bool:
    """Whether an Accept header admits a JSON answer (no header, */*, application/*, or a JSON type)."""
    if not accept.strip():
        return True
    types = [part.split(";")[0].strip() for part in accept.split(",")]
    return any(t in ("*/*", "application/*", "application/json", "application/yaml") or t.endswith("+json") for t in types)


def deleted_status(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What Kubernetes answers a DELETE of a custom resource that is gone at once (no finalizers)."""
    meta = obj["metadata"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": meta["name"], "group": resource.group, "kind": resource.plural, "uid": meta.get("uid")}}


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
        app = web.Application(middlewares=[self.requests.middleware, self._errors, self._unrouted],
                              client_max_size=64 * 1024 * 1024)
        app.router.add_routes(self._routes())
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

    @web.middleware
    async def _unrouted(self, request: web.Request, handler):
        """What no route takes, answered as the API server answers it: 405 for a method the path's routes
        do not take (once the path names something served), else 404; both as a `Status`."""
        refused = request.match_info.http_exception
        if refused is None:
            return await handler(request)
        if isinstance(refused, web.HTTPMethodNotAllowed):
            taken = await request.app.router.resolve(request.clone(method=min(refused.allowed_methods)))
            routes.named_by(self.registry, taken)
            raise errors.method_not_allowed()
        raise not_found()

    # --- routing -----------------------------------------------------------------------------

    def _routes(self) -> list[web.RouteDef]:
        def route(method: str, path: str, handler: Callable) -> web.RouteDef:
            return web.route(method, path + routes.TRAILING_SLASH, handler)

        table = [route("*", path, handler) for path, handler in (
            ("/version", self._version), ("/healthz", self._healthy), ("/readyz", self._healthy), ("/livez", self._healthy),
            ("/metrics", self._metrics), ("/api", self._api_versions), ("/apis", self._api_groups),
            ("/openapi/v3", self._openapi_root), ("/openapi/v3/api/{version}", self._openapi_group_version),
            ("/openapi/v3/apis/{group}/{version}", self._openapi_group_version))]
        table += [route("GET", path, self._discovery) for path in routes.DISCOVERY]
        handlers = {
            "collection": {"GET": self._list, "POST": self._create, "DELETE": self._delete_collection},
            "object": {"GET": self._get, "PUT": self._replace, "PATCH": self._patch, "DELETE": self._delete},
            "subresource": {"GET": self._get, "PUT": self._replace, "PATCH": self._patch},
            "log": {"GET": self._pod_log},
            "binding": {"POST": self._bind},
        }
        for root in (routes.CORE, routes.GROUPS):
            for shape, paths in routes.resource_paths(root).items():
                table += [route(method, path, handler) for path in paths for method, handler in handlers[shape].items()]
        return table

    def _target(self, request: web.Request) -> Target:
        target = target_of(self.registry, request.match_info)
        if target.resource.is_custom and not accepts_json(request.headers.get("Accept", "")):
            # A real API server has no protobuf form of a custom resource: an Accept of protobuf only is 406.
            raise errors.ApiError(406, "NotAcceptable", "only the following media types are accepted: application/json, "
                                  "application/yaml, application/json;stream=watch")
        return target

    # --- fixed paths and discovery -----------------------------------------------------------

    async def _version(self, request: web.Request) -> web.Response:
        return _json(SERVER_VERSION)

    async def _healthy(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.Response:
        return self.requests.response()

    async def _api_versions(self, request: web.Request) -> web.Response:
        return _json({"kind": "APIVersions", "versions": ["v1"],
                      "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]})

    async def _api_groups(self, request: web.Request) -> web.Response:
        return _json(self.registry.api_group_list())

    async def _discovery(self, request: web.Request) -> web.Response:
        return _json(routes.discovery_of(self.registry, request.match_info))

    async def _openapi_root(self, request: web.Request) -> web.Response:
        return _json(openapi.root_document(self.registry))  # v2 is protobuf-only on real servers; kubectl uses v3

    async def _openapi_group_version(self, request: web.Request) -> web.Response:
        match = request.match_info
        document = openapi.group_version_document(self.registry, match.get("group", ""), match["version"])
        if document is None:
            raise not_found()
        return _json(document)

    # --- objects -----------------------------------------------------------------------------

    @staticmethod
    def _strict(request: web.Request) -> bool:
        return request.query.get("fieldValidation") == "Strict"

    async def _create(self, request: web.Request) -> web.Response:
        target = self._target(request)
        dry_run = self._dry_run(request, "CreateOptions")
        obj, warnings = self.storage.create(target.resource, target.namespace, await self._body(request), target.version,
                                            self._strict(request), dry_run=dry_run)
        return _json(obj, 201, warnings)

    async def _get(self, request: web.Request) -> web.Response:
        target = self._target(request)
        storage, resource = self.storage, target.resource
        obj = storage._versioned(storage.get(resource, target.namespace, target.name), resource, target.version)
        if wants_table(request.headers.get("Accept", "")):
            # `kubectl get KIND NAME` asks for a Table as `kubectl get KIND` does: the same columns.
            return _json(to_table(resource, target.version, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                                  include_object=request.query.get("includeObject")))
        return _json(obj)

    async def _replace(self, request: web.Request) -> web.Response:
        target = self._target(request)
        dry_run = self._dry_run(request, "UpdateOptions")
        obj, warnings = self.storage.update(target.resource, target.namespace, target.name, await self._body(request),
                                            target.subresource, target.version, self._strict(request), dry_run=dry_run)
        return _json(obj, 200, warnings)

    async def _patch(self, request: web.Request) -> web.Response:
        target = self._target(request)
        dry_run = self._dry_run(request, "PatchOptions")
        content_type = request.headers.get("Content-Type", "")
        obj, warnings = self.storage.patch(target.resource, target.namespace, target.name, content_type, await self._body(request),
                                           target.subresource, target.version, self._strict(request), dry_run=dry_run)
        return _json(obj, 200, warnings)

    async def _delete(self, request: web.Request) -> web.Response:
        target = self._target(request)
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, "DeleteOptions", options.get("dryRun"))
        obj = self.storage.delete(target.resource, target.namespace, target.name, options, dry_run=dry_run)
        if target.resource.is_custom and not obj["metadata"].get("deletionTimestamp"):
            return _json(deleted_status(target.resource, obj))  # deleted at once: Kubernetes answers a Status
        return _json(obj)

    async def _bind(self, request: web.Request) -> web.Response:
        target = self._target(request)
        if self._dry_run(request, "CreateOptions"):
            raise errors.bad_request("dryRun is not supported for pods/binding by the local API server")
        return _json(self.storage.bind(target.namespace, target.name, await self._body(request)), 201)

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

    async def _list(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        if query_flag(request.query, "watch"):
            return await self._watch(request, target)
        items = self._items(request, target)
        meta = {"resourceVersion": str(self.store.resource_version)}
        if wants_table(request.headers.get("Accept", "")):
            return _json(to_table(target.resource, target.version, items, meta, include_object=request.query.get("includeObject")))
        return _json({"kind": target.resource.list_kind, "apiVersion": target.resource.api_version(target.version),
                      "metadata": meta, "items": items})

    async def _delete_collection(self, request: web.Request) -> web.Response:
        target = self._target(request)
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

    async def _pod_log(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
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
        try:
            options = logs.LogOptions.from_query(query)
        except ValueError as error:
            raise errors.bad_request(str(error)) from None
        uid = pod["metadata"]["uid"]

        def finished() -> bool:
            current = self.store.peek(POD_KEY, pod["metadata"]["namespace"], pod["metadata"]["name"])
            return logs.container_finished(current, uid, container)

        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await logs.stream(path, options, response.write, finished, self.closing)
        return response
