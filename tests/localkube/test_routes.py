"""Which handler a method and path reach, and what a path or method nothing serves gets: a Kubernetes
`Status` (404 for a path that names nothing served, 405 for a method the thing named does not take)."""
from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pets_localkube.server import ApiServer

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
NS = "/api/v1/namespaces/default"


@pytest.fixture
async def http(tmp_path):
    async with TestClient(TestServer(ApiServer(log_root=tmp_path).app())) as session:
        for path, body in ((f"{NS}/configmaps", CONFIGMAP), (f"{NS}/pods", POD)):
            async with session.post(path, json=body) as created:
                assert created.status == 201, await created.text()
        yield session


async def answer(http: TestClient, method: str, path: str) -> tuple[int, str]:
    """The status code and the kind of the JSON body (`text` for a plain one)."""
    body = json.dumps({}) if method in ("POST", "PUT") else None
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {"Content-Type": "application/json"}
    async with http.request(method, path, data=body if method != "PATCH" else "{}", headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text).get("kind", "")
        except ValueError:
            return response.status, "text"


@pytest.mark.parametrize("method, path, status, kind", [
    # fixed paths answer every method
    ("GET", "/version", 200, ""), ("POST", "/version", 200, ""), ("GET", "/healthz", 200, "text"),
    ("GET", "/api", 200, "APIVersions"), ("GET", "/apis", 200, "APIGroupList"), ("GET", "/metrics", 200, "text"),
    # discovery
    ("GET", "/api/v1", 200, "APIResourceList"), ("POST", "/api/v1", 405, "Status"), ("GET", "/api/v2", 404, "Status"),
    ("GET", "/apis/apiextensions.k8s.io", 200, "APIGroup"), ("POST", "/apis/apiextensions.k8s.io", 405, "Status"),
    ("GET", "/apis/apiextensions.k8s.io/v1", 200, "APIResourceList"),
    ("GET", "/apis/no.such.group", 404, "Status"), ("POST", "/apis/no.such.group", 404, "Status"),
    ("GET", "/openapi/v3", 200, ""), ("POST", "/openapi/v3/api/v1", 200, ""), ("GET", "/openapi/v2", 404, "Status"),
    ("GET", "/openapi/v3/apis/no.such.group/v1", 404, "Status"),
    # collections
    ("GET", f"{NS}/configmaps", 200, "ConfigMapList"), ("PUT", f"{NS}/configmaps", 405, "Status"),
    ("PATCH", f"{NS}/configmaps", 405, "Status"), ("GET", "/api/v1/pods", 200, "PodList"),
    ("DELETE", f"{NS}/secrets", 200, "SecretList"), ("PUT", f"{NS}/pods", 405, "Status"),
    ("GET", f"{NS}/widgets", 404, "Status"), ("PUT", f"{NS}/widgets", 404, "Status"), ("PUT", "/api/v1/widgets", 404, "Status"),
    ("GET", f"{NS}/nodes", 404, "Status"),
    # objects
    ("GET", f"{NS}/configmaps/c", 200, "ConfigMap"), ("POST", f"{NS}/configmaps/c", 405, "Status"),
    ("PATCH", f"{NS}/configmaps/c", 200, "ConfigMap"), ("GET", f"{NS}/configmaps/none", 404, "Status"),
    ("GET", "/api/v1/pods/p", 404, "Status"), ("GET", "/api/v1/namespaces/default", 200, "Namespace"),
    ("GET", "/api/v1/nodes/none", 404, "Status"),
    # subresources
    ("GET", f"{NS}/pods/p/status", 200, "Pod"), ("DELETE", f"{NS}/pods/p/status", 405, "Status"),
    ("POST", f"{NS}/pods/p/status", 405, "Status"), ("GET", f"{NS}/pods/p/binding", 405, "Status"),
    ("POST", f"{NS}/pods/p/log", 405, "Status"), ("PUT", f"{NS}/pods/p/log", 405, "Status"),
    ("GET", f"{NS}/pods/p/log", 400, "Status"),  # not started: no log yet
    ("GET", f"{NS}/configmaps/c/status", 404, "Status"), ("GET", f"{NS}/pods/p/log/more", 404, "Status"),
    ("GET", "/api/v1/pods/p/log", 404, "Status"), ("POST", "/api/v1/pods/p/binding", 404, "Status"),
    # a namespace's status, not a resource named "status" in it
    ("GET", f"{NS}/status", 200, "Namespace"), ("POST", f"{NS}/status", 405, "Status"),
    ("GET", f"{NS}/finalize", 404, "Status"),
    ("GET", "/apis/apiextensions.k8s.io/v1/namespaces/default/status", 404, "Status"),
    # trailing slashes are the same paths
    ("GET", "/api/v1/", 200, "APIResourceList"), ("GET", f"{NS}/configmaps/", 200, "ConfigMapList"),
    ("GET", f"{NS}/configmaps/c/", 200, "ConfigMap"), ("GET", "/healthz/", 200, "text"),
    # nothing
    ("GET", "/", 404, "Status"), ("GET", "/no/such/path", 404, "Status"), ("DELETE", "/apis", 200, "APIGroupList"),
])
async def test_a_method_and_path_reach_their_handler_or_a_status(http, method, path, status, kind):
    assert await answer(http, method, path) == (status, kind)


async def test_a_refused_method_is_a_method_not_allowed_status(http):
    async with http.put(f"{NS}/configmaps", json={}) as response:
        body = await response.json()
    assert (response.status, body["reason"], body["code"]) == (405, "MethodNotAllowed", 405)
    async with http.put(f"{NS}/widgets", json={}) as response:
        body = await response.json()
    assert (response.status, body["reason"]) == (404, "NotFound")
