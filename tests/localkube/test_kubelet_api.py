"""The kubelet API (`kubelet_api.py`): TLS with a client certificate required, only kube-apiserver's
kubelet-client identity (or system:masters) served, and `/containerLogs` with the log rules of
`logs.py`. The certificates come from a test CA made with the openssl command."""
from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pets_localkube import logs
from pets_localkube.control_plane import Pki
from pets_localkube.kubelet_api import Access, KubeletApi, Subject, serving_context, subject_of

UID = "0b7f6a52-5c1e-4a51-9d2f-4f1c3d1e2a10"


@dataclass
class Pods:
    """The kubelet as the API sees it: its pods as last seen, and the log root."""
    log_root: Path
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))


def a_pod(phase: str = "Running", restart: str = "Never") -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "ns", "uid": UID},
            "spec": {"restartPolicy": restart, "containers": [{"name": "main"}], "initContainers": [{"name": "setup"}]},
            "status": {"phase": phase}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    issuer = Pki(directory)
    ca = issuer.ca("ca", "test-cluster-ca")
    other_ca = issuer.ca("other-ca", "someone-elses-ca")
    return {
        "ca": ca,
        "serving": issuer.issue(ca, "kubelet-serving", "local-node", server=True, dns=["localhost"], ips=["127.0.0.1"]),
        "apiserver": issuer.issue(ca, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                  organizations=["system:masters"], client=True),
        "node": issuer.issue(ca, "node", "system:node:local-node", organizations=["system:nodes"], client=True),
        "stranger": issuer.issue(other_ca, "stranger", "kube-apiserver-kubelet-client", client=True),
    }


@pytest.fixture
async def served(pki, tmp_path):
    """(pods, base URL, client TLS factory): the API on a free port of 127.0.0.1."""
    pods = Pods(tmp_path / "logs")
    api = KubeletApi(pods)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    await api.start(listener, serving_context(pki["serving"].cert, pki["serving"].key, pki["ca"].cert))

    def tls(identity: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(pki["ca"].cert))
        if identity:
            context.load_cert_chain(str(pki[identity].cert), str(pki[identity].key))
        return context

    yield pods, f"https://127.0.0.1:{port}", tls
    await api.stop()


async def get(url: str, tls: ssl.SSLContext) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, ssl=tls) as response:
        return response.status, await response.text()


def write_log(pods: Pods, pod: dict[str, Any], lines: list[tuple[str, str]]) -> Path:
    path = logs.container_log_path(pods.log_root, pod, "main")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{stamp} {text}\n" for stamp, text in lines))
    return path


LINES = [("2026-01-01T10:00:00.000000000Z", "first"), ("2026-01-01T10:00:01.000000000Z", "second"),
         ("2026-01-01T10:00:02.000000000Z", "third")]


def test_the_subject_is_the_certificates_common_name_and_organizations():
    peercert = {"subject": ((("organizationName", "system:nodes"),), (("commonName", "system:node:n1"),))}
    assert subject_of(peercert) == Subject("system:node:n1", ("system:nodes",))
    assert subject_of(None) is None and subject_of({}) is None
    access = Access()
    assert access.allows(Subject("kube-apiserver-kubelet-client"))
    assert access.allows(Subject("kubernetes-admin", ("system:masters",)))
    assert not access.allows(Subject("system:node:n1", ("system:nodes",)))
    assert not access.allows(None)


async def test_kube_apiservers_client_certificate_reads_a_containers_log(served):
    pods, url, tls = served
    pod = pods.pods[("ns", "web")] = a_pod(phase="Succeeded")
    write_log(pods, pod, LINES)
    assert await get(f"{url}/containerLogs/ns/web/main", tls("apiserver")) == (200, "first\nsecond\nthird\n")
    status, body = await get(f"{url}/containerLogs/ns/web/main?tailLines=1&timestamps=true", tls("apiserver"))
    assert (status, body) == (200, f"{LINES[2][0]} third\n")
    since = await get(f"{url}/containerLogs/ns/web/main?sinceTime=2026-01-01T10:00:01Z", tls("apiserver"))
    assert since == (200, "second\nthird\n")
    assert await get(f"{url}/containerLogs/ns/web/main?limitBytes=8", tls("apiserver")) == (200, "first\nse")


async def test_a_certificate_of_another_ca_or_none_fails_the_handshake(served):
    pods, url, tls = served
    for identity in (None, "stranger"):
        with pytest.raises(aiohttp.ClientError):
            await get(f"{url}/healthz", tls(identity))
    assert await get(f"{url}/healthz", tls("apiserver")) == (200, "ok")


async def test_a_node_certificate_of_the_cluster_ca_is_forbidden(served):
    pods, url, tls = served
    pods.pods[("ns", "web")] = a_pod()
    status, body = await get(f"{url}/containerLogs/ns/web/main", tls("node"))
    assert status == 403
    assert body == "Forbidden (user=system:node:local-node, verb=get, resource=nodes, subresource(s)=[proxy])"


async def test_unknown_pods_containers_and_bad_options_are_answered_as_a_kubelet_does(served):
    pods, url, tls = served
    pods.pods[("ns", "web")] = a_pod()
    client = tls("apiserver")
    assert await get(f"{url}/containerLogs/ns/nope/main", client) == (404, 'pod "nope" does not exist')
    assert await get(f"{url}/containerLogs/ns/web/sidecar", client) == (404, 'container "sidecar" not found in pod "web"')
    assert await get(f"{url}/containerLogs/ns/web/setup", client) == (
        400, 'container "setup" in pod "web" is waiting to start: ContainerCreating')
    status, body = await get(f"{url}/containerLogs/ns/web/main?tailLines=-1", client)
    assert (status, body) == (400, "invalid tailLines -1: must be non-negative")
    status, body = await get(f"{url}/containerLogs/ns/web/main?previous=true", client)
    assert status == 400 and body.startswith('previous terminated container "main" in pod "web" not found')
    status, body = await get(f"{url}/containerLogs/ns/web/main?stream=Stderr", client)
    assert status == 400 and "unable to return the given log stream" in body


async def test_follow_streams_new_lines_until_the_container_has_ended(served):
    pods, url, tls = served
    pod = pods.pods[("ns", "web")] = a_pod()
    path = write_log(pods, pod, LINES[:1])
    received: list[str] = []
    async with aiohttp.ClientSession() as session, \
            session.get(f"{url}/containerLogs/ns/web/main?follow=true", ssl=tls("apiserver")) as response:
        assert response.status == 200
        received.append((await response.content.readline()).decode())
        with path.open("a") as log:
            log.write(logs.format_line("later"))
        received.append((await asyncio.wait_for(response.content.readline(), 5)).decode())
        # The container ends: the pod as the kubelet now sees it is finished, the stream ends.
        with path.open("a") as log:
            log.write(logs.format_line("last words"))
        pods.pods[("ns", "web")] = {**pod, "status": {"phase": "Failed"}}
        received.append((await asyncio.wait_for(response.content.read(), 5)).decode())
    assert received == ["first\n", "later\n", "last words\n"]


def test_log_options_refuse_what_the_api_refuses():
    assert logs.LogOptions.from_query({}) == logs.LogOptions()
    parsed = logs.LogOptions.from_query({"follow": "true", "tailLines": "0", "limitBytes": "5", "timestamps": "1"})
    assert (parsed.follow, parsed.tail, parsed.limit, parsed.timestamps) == (True, 0, 5, True)
    for query, message in (({"limitBytes": "0"}, "invalid limitBytes 0: must be positive"),
                           ({"sinceSeconds": "x"}, "invalid sinceSeconds 'x': not an integer"),
                           ({"sinceTime": "yesterday"}, "invalid sinceTime 'yesterday'")):
        with pytest.raises(ValueError) as raised:
            logs.LogOptions.from_query(query)
        assert str(raised.value) == message


def test_a_containers_log_is_complete_when_its_pod_is_gone_finished_or_it_stopped_for_good():
    running = a_pod()
    assert not logs.container_finished(running, UID, "main")
    assert logs.container_finished(None, UID, "main")
    assert logs.container_finished({**running, "metadata": {**running["metadata"], "uid": "another"}}, UID, "main")
    assert logs.container_finished(a_pod(phase="Succeeded"), UID, "main")
    ended = {"containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 1}}}], "phase": "Running"}
    assert logs.container_finished({**running, "status": ended}, UID, "main")
    assert not logs.container_finished({**a_pod(restart="Always"), "status": ended}, UID, "main")  # it restarts
