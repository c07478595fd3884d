"""The differential test of the emulator: `corpus.CORPUS` goes to `pets_localkube`'s API server and
to Kubernetes' own (both with manifests/crd.yaml), and every answer must match, or differ exactly as
docs/emulator-divergences.md says (`Call.known`)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from pets_localkube import LocalCluster
from tests.realcluster.corpus import CORPUS, NS, Call

pytestmark = pytest.mark.realcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "manifests" / "crd.yaml"
DOC = REPO_ROOT / "docs" / "emulator-divergences.md"
VOLATILE = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink")


class Server:
    def __init__(self, url: str, session: requests.Session):
        self.url, self.session, self.saved = url, session, {}

    def send(self, call: Call) -> requests.Response:
        path, body = call.path, call.body
        for key, value in self.saved.items():
            path = path.replace("{" + key + "}", value)
        if body is not None and not isinstance(body, str):
            text = json.dumps(body)
            for key, value in self.saved.items():
                text = text.replace("{" + key + "}", value)
            body = text
        return self.session.request(call.method, self.url + path, data=body, timeout=30, stream=bool(call.watch_events),
                                    headers={"Content-Type": call.content_type, "Accept": call.accept})


def pick(value: Any, path: str) -> Any:
    if not path:
        return value
    head, _, rest = path.partition(".")
    if head.endswith("[*]"):
        items = value.get(head[:-3]) if isinstance(value, dict) else None
        return None if items is None else [pick(item, rest) for item in items]
    if "[" in head:
        name, index = head[:-1].split("[")
        items = value.get(name) if isinstance(value, dict) else None
        return pick(items[int(index)], rest) if items and len(items) > int(index) else None
    if isinstance(value, list) and head.isdigit():
        return pick(value[int(head)], rest) if len(value) > int(head) else None
    return pick(value.get(head), rest) if isinstance(value, dict) else None


def strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_volatile(v) for k, v in value.items() if k not in VOLATILE and not k.endswith("Time")}
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    return value


def view(call: Call, response: requests.Response) -> dict[str, Any]:
    """What of a response is compared."""
    seen: dict[str, Any] = {"code": response.status_code}
    if call.watch_events and response.ok:
        events = []
        for line in response.iter_lines():
            if line:
                event = json.loads(line)
                events.append((event["type"], event["object"]["metadata"]["name"]))
            if len(events) >= call.watch_events:
                break
        response.close()
        seen["events"] = events
        return seen
    content_type = response.headers.get("Content-Type", "").split(";")[0]
    if response.status_code == 406:
        return seen  # its body comes in a form of the server's choosing (protobuf from Kubernetes); clients read the code
    if not response.ok:
        try:
            status = response.json()
        except ValueError:
            seen["body"] = "not JSON"
            return seen
        seen["reason"] = status.get("reason")
        causes = (status.get("details") or {}).get("causes")
        if causes:
            seen["causes"] = sorted(cause.get("field", "") for cause in causes)
        return seen
    body = response.json() if content_type == "application/json" else None
    for path in call.fields:
        if path == "@content-type":
            seen[path] = content_type
        elif path == "@magic":
            seen[path] = response.content[:4].hex()
        else:
            seen[path] = strip_volatile(pick(body, path))
    return seen


def wait_for(condition, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.25)


def prepare(server: Server) -> None:
    """The CRD, installed and served."""
    manifest = yaml.safe_load(CRD.read_text())
    answer = server.session.post(server.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                 json=manifest, timeout=30)
    assert answer.status_code in (200, 201, 409), answer.text
    wait_for(lambda: server.session.get(server.url + "/apis/training.pets.dev/v1alpha1/petstrainingjobs",
                                        timeout=10).status_code == 200, what="the CRD to be served")


def after_setup(server: Server, real: bool) -> None:
    """On the real server, the namespace's default ServiceAccount must exist before pods can be made."""
    if real:
        wait_for(lambda: server.session.get(server.url + f"/api/v1/namespaces/{NS}/serviceaccounts/default",
                                            timeout=10).status_code == 200, what="the default ServiceAccount")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with LocalCluster(workdir=tmp_path_factory.mktemp("emulator"), simulate=True) as cluster:
        server = Server(cluster.url, requests.Session())
        prepare(server)
        yield server


@pytest.fixture(scope="module")
def real(control_plane):
    session = requests.Session()
    pki = control_plane.workdir / "pki"
    session.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
    session.verify = str(pki / "ca.crt")
    session.trust_env = False  # else REQUESTS_CA_BUNDLE replaces the cluster's CA
    server = Server(control_plane.url, session)
    prepare(server)
    yield server


def run_corpus(emulator: Server, real: Server) -> list[tuple[Call, dict, dict]]:
    results = []
    for call in CORPUS:
        seen = []
        for server, is_real in ((emulator, False), (real, True)):
            response = server.send(call)
            seen.append(view(call, response))
            if call.save and response.ok:
                server.saved[call.save] = response.json()["metadata"]["resourceVersion"]
            if call.setup:
                assert response.ok, f"{call.name}: {response.status_code} {response.text}"
                after_setup(server, is_real)
        results.append((call, seen[0], seen[1]))
    return results


def test_the_emulator_answers_the_corpus_as_kubernetes_does(emulator, real):
    results = run_corpus(emulator, real)
    identical = [call for call, mine, theirs in results if call.known is None and mine == theirs]
    known = [call for call, mine, theirs in results if call.known is not None]
    print(f"\ndifferential: {len(results)} requests, {len(identical)} identical, {len(known)} known divergences")
    documented = DOC.read_text()
    problems = []
    for call, mine, theirs in results:
        if call.known is None:
            if mine != theirs:
                problems.append(f"{call.name}:\n  emulator {mine}\n  real     {theirs}")
            continue
        assert f"## {call.known.doc}" in documented, f"{call.name}: '{call.known.doc}' is not in {DOC.name}"
        if (mine, theirs) != (call.known.emulator, call.known.real):
            problems.append(f"{call.name} (known divergence '{call.known.doc}' changed):\n"
                            f"  emulator {mine}\n  real     {theirs}")
    assert not problems, "\n".join(problems)
