"""One corpus of API requests, sent in order to the emulator (`pets_localkube`) and to Kubernetes'
own API server by `test_differential.py`, which compares what comes back.

Each `Call` is one request of a kind the operator, kubectl or the official client makes. `fields`
names what of a 2xx body is compared (dotted paths; `[*]` maps over a list); error responses are
compared by status code, `reason` and the sorted `details.causes[].field`. `save` keeps the
response's `metadata.resourceVersion` under a name for later calls (`{name}` in path or body), per
server. `known` marks a documented divergence (docs/emulator-divergences.md): the test asserts
that difference, so it fails once the emulator changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NS = "differential"
JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
PROTOBUF = "application/vnd.kubernetes.protobuf"

PODS = f"/api/v1/namespaces/{NS}/pods"
SERVICES = f"/api/v1/namespaces/{NS}/services"
EVENTS = f"/api/v1/namespaces/{NS}/events"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
JOBS = f"/apis/training.pets.dev/v1alpha1/namespaces/{NS}/petstrainingjobs"


@dataclass(frozen=True)
class Known:
    """A documented divergence: what each server answers for the compared view."""
    doc: str                 # the heading in docs/emulator-divergences.md
    emulator: Any
    real: Any


@dataclass(frozen=True)
class Call:
    name: str
    method: str
    path: str
    body: Any = None
    content_type: str = JSON
    accept: str = JSON
    fields: tuple[str, ...] = ()
    save: str | None = None
    watch_events: int = 0    # a watch: read this many events, compare their (type, name)
    known: Known | None = None
    setup: bool = field(default=False)  # compared too, but a failure here stops the run


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "diff"}},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                     "nodeName": "nowhere"}}


def job(name: str, **spec: Any) -> dict[str, Any]:
    body = {"data": {"synthetic": {"classes": 2, "imagesPerClass": 4, "imageSize": 32}}}
    body.update(spec)
    return {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
            "metadata": {"name": name, "labels": {"team": "a"}}, "spec": body}


def lease(name: str, holder: str, seconds: int) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds}}


POD_FIELDS = ("metadata.name", "metadata.labels", "spec.containers[*].name", "spec.containers[*].image",
              "spec.containers[*].imagePullPolicy", "spec.containers[*].terminationMessagePath",
              "spec.restartPolicy", "spec.dnsPolicy", "spec.schedulerName", "spec.terminationGracePeriodSeconds",
              "spec.enableServiceLinks", "spec.nodeName")
SERVICE_FIELDS = ("metadata.name", "spec.type", "spec.ports", "spec.sessionAffinity", "spec.selector",
                  "spec.ipFamilyPolicy", "spec.internalTrafficPolicy")
LEASE_FIELDS = ("metadata.name", "metadata.labels", "spec")
JOB_FIELDS = ("metadata.name", "metadata.labels", "metadata.generation", "spec", "status")
EVENT_FIELDS = ("metadata.name", "reason", "message", "type", "count", "involvedObject.kind", "involvedObject.name")

CORPUS: tuple[Call, ...] = (
    Call("namespace: create", "POST", "/api/v1/namespaces", {"metadata": {"name": NS}},
         fields=("metadata.name", "status.phase"), setup=True),

    # -- pods --------------------------------------------------------------------------------
    Call("pod: create", "POST", PODS, pod("p1"), fields=POD_FIELDS, save="p1"),
    Call("pod: create again is 409 AlreadyExists", "POST", PODS, pod("p1")),
    Call("pod: get", "GET", f"{PODS}/p1", fields=POD_FIELDS),
    Call("pod: admission plugins' defaults", "GET", f"{PODS}/p1", fields=("spec.serviceAccountName", "spec.priority"),
         known=Known("No admission plugins", {"code": 200, "spec.serviceAccountName": None, "spec.priority": None},
                     {"code": 200, "spec.serviceAccountName": "default", "spec.priority": 0})),
    Call("pod: get missing is 404", "GET", f"{PODS}/missing"),
    Call("pod: create without containers is 422", "POST", PODS,
         {"metadata": {"name": "bad"}, "spec": {"containers": []}}),
    Call("pod: dry-run create", "POST", f"{PODS}?dryRun=All", pod("p2"), fields=POD_FIELDS),
    Call("pod: a dry-run create stores nothing", "GET", f"{PODS}/p2"),
    Call("pod: list by label", "GET", f"{PODS}?labelSelector=app%3Ddiff", fields=("kind", "items[*].metadata.name")),
    Call("pod: merge patch labels", "PATCH", f"{PODS}/p1", {"metadata": {"labels": {"tier": "x"}}},
         content_type=MERGE, fields=POD_FIELDS),
    Call("pod: JSON patch adds a label", "PATCH", f"{PODS}/p1",
         [{"op": "add", "path": "/metadata/labels/step", "value": "json"}], content_type=JSON_PATCH, fields=POD_FIELDS),
    Call("pod: strategic merge by container name", "PATCH", f"{PODS}/p1",
         {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}, content_type=STRATEGIC,
         fields=POD_FIELDS),
    Call("pod: JSON patch that is not a list is 400", "PATCH", f"{PODS}/p1", {"op": "add"}, content_type=JSON_PATCH),
    Call("pod: merge patch that is not JSON is 400", "PATCH", f"{PODS}/p1", "{not json", content_type=MERGE),
    Call("pod: JSON patch test op that fails", "PATCH", f"{PODS}/p1",
         [{"op": "test", "path": "/metadata/name", "value": "other"}], content_type=JSON_PATCH),
    Call("pod: update with a stale resourceVersion is 409 Conflict", "PUT", f"{PODS}/p1",
         {**pod("p1"), "metadata": {"name": "p1", "resourceVersion": "{p1}"}}),
    Call("pod: Table", "GET", PODS, accept=TABLE,
         fields=("kind", "apiVersion", "columnDefinitions[*].name", "rows[*].cells[0]")),
    Call("pod: protobuf", "GET", f"{PODS}/p1", accept=PROTOBUF, fields=("@content-type", "@magic"),
         known=Known("Answers in JSON only",
                     {"code": 200, "@content-type": "application/json", "@magic": b'{"ap'.hex()},
                     {"code": 200, "@content-type": PROTOBUF, "@magic": b"k8s\0".hex()})),

    # -- services ----------------------------------------------------------------------------
    Call("service: create", "POST", SERVICES,
         {"metadata": {"name": "s1"}, "spec": {"selector": {"app": "diff"}, "ports": [{"port": 80}]}},
         fields=SERVICE_FIELDS),
    Call("service: port 0 is 422", "POST", SERVICES,
         {"metadata": {"name": "s2"}, "spec": {"ports": [{"port": 0}]}}),
    Call("service: headless create", "POST", SERVICES,
         {"metadata": {"name": "s3"}, "spec": {"clusterIP": "None", "selector": {"app": "diff"},
                                               "ports": [{"name": "rdzv", "port": 29500}]}},
         fields=SERVICE_FIELDS + ("spec.clusterIP",)),

    # -- events ------------------------------------------------------------------------------
    Call("event: create", "POST", EVENTS,
         {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p1", "namespace": NS},
          "reason": "Started", "message": "started", "type": "Normal", "count": 1},
         fields=EVENT_FIELDS),
    Call("event: list by field selector", "GET", f"{EVENTS}?fieldSelector=reason%3DStarted",
         fields=("items[*].metadata.name",)),

    # -- leases ------------------------------------------------------------------------------
    Call("lease: create", "POST", LEASES, lease("l1", "alpha", 15), fields=LEASE_FIELDS, save="l1"),
    Call("lease: update", "PUT", f"{LEASES}/l1", {**lease("l1", "alpha", 30), "metadata": {"name": "l1",
                                                                                           "resourceVersion": "{l1}"}},
         fields=LEASE_FIELDS),
    Call("lease: update with a stale resourceVersion is 409 Conflict", "PUT", f"{LEASES}/l1",
         {**lease("l1", "gamma", 30), "metadata": {"name": "l1", "resourceVersion": "{l1}"}}),
    Call("lease: server-side apply", "PATCH", f"{LEASES}/l2?fieldManager=alpha", lease("l2", "alpha", 15),
         content_type=APPLY, fields=LEASE_FIELDS,
         known=Known("No server-side apply", {"code": 404, "reason": "NotFound"},
                     {"code": 201, "metadata.name": "l2", "metadata.labels": None,
                      "spec": {"holderIdentity": "alpha", "leaseDurationSeconds": 15}})),
    Call("lease: apply of a field another manager owns is 409 Conflict", "PATCH", f"{LEASES}/l2?fieldManager=beta",
         lease("l2", "beta", 15), content_type=APPLY,
         known=Known("No server-side apply", {"code": 404, "reason": "NotFound"},
                     {"code": 409, "reason": "Conflict", "causes": [".spec.holderIdentity"]})),
    Call("lease: apply to an existing object", "PATCH", f"{LEASES}/l1?fieldManager=alpha&force=true",
         lease("l1", "beta", 30), content_type=APPLY, fields=LEASE_FIELDS,
         known=Known("No server-side apply", {"code": 415, "reason": "UnsupportedMediaType"},
                     {"code": 200, "metadata.name": "l1", "metadata.labels": None,
                      "spec": {"holderIdentity": "beta", "leaseDurationSeconds": 30}})),
    Call("lease: apply without fieldManager is 422", "PATCH", f"{LEASES}/l1", lease("l1", "beta", 30),
         content_type=APPLY,
         known=Known("No server-side apply", {"code": 415, "reason": "UnsupportedMediaType"},
                     {"code": 422, "reason": "Invalid", "causes": ["fieldManager"]})),

    # -- PetsTrainingJobs --------------------------------------------------------------------
    Call("job: create applies the CRD's defaults", "POST", JOBS, job("j1"), fields=JOB_FIELDS, save="j1"),
    Call("job: create again is 409 AlreadyExists", "POST", JOBS, job("j1")),
    Call("job: get missing is 404", "GET", f"{JOBS}/missing"),
    Call("job: numNodes 0 is 422 from the schema", "POST", JOBS, job("bad1", numNodes=0)),
    Call("job: an unknown enum value is 422", "POST", JOBS, job("bad2", mixedPrecision="fp8")),
    Call("job: a wrong type is 422", "POST", JOBS, job("bad3", epochs="many")),
    Call("job: neither data nor function is 422 from CEL", "POST", JOBS,
         {"apiVersion": "training.pets.dev/v1alpha1", "kind": "PetsTrainingJob",
          "metadata": {"name": "bad4"}, "spec": {"numNodes": 1}}),
    Call("job: dry-run create", "POST", f"{JOBS}?dryRun=All", job("j2"), fields=JOB_FIELDS),
    Call("job: a dry-run create stores nothing", "GET", f"{JOBS}/j2"),
    Call("job: merge patch of the spec bumps the generation", "PATCH", f"{JOBS}/j1", {"spec": {"epochs": 7}},
         content_type=MERGE, fields=JOB_FIELDS),
    Call("job: JSON patch", "PATCH", f"{JOBS}/j1", [{"op": "replace", "path": "/spec/batchSize", "value": 8}],
         content_type=JSON_PATCH, fields=JOB_FIELDS),
    Call("job: adding an immutable field is 422 from a CEL transition rule", "PATCH", f"{JOBS}/j1",
         {"spec": {"image": "trainer:2"}}, content_type=MERGE),
    Call("job: strategic merge on a custom resource is 415", "PATCH", f"{JOBS}/j1", {"spec": {"epochs": 3}},
         content_type=STRATEGIC),
    Call("job: a spec change through /status is ignored", "PATCH", f"{JOBS}/j1/status",
         {"spec": {"epochs": 99}, "status": {"phase": "Running", "message": "up"}}, content_type=MERGE,
         fields=JOB_FIELDS),
    Call("job: a status change through the main resource is ignored", "PATCH", f"{JOBS}/j1",
         {"status": {"phase": "Failed"}, "metadata": {"labels": {"seen": "yes"}}}, content_type=MERGE,
         fields=JOB_FIELDS),
    Call("job: /status with a bad enum is 422", "PATCH", f"{JOBS}/j1/status", {"status": {"phase": "Exploded"}},
         content_type=MERGE),
    Call("job: update with a stale resourceVersion is 409 Conflict", "PUT", f"{JOBS}/j1",
         {**job("j1"), "metadata": {"name": "j1", "resourceVersion": "{j1}"}}),
    Call("job: create a second", "POST", JOBS, job("j3", numNodes=2), fields=JOB_FIELDS),
    Call("job: dry-run patch changes nothing", "PATCH", f"{JOBS}/j1?dryRun=All", {"spec": {"epochs": 1}},
         content_type=MERGE, fields=JOB_FIELDS),
    Call("job: get after the dry-run patch", "GET", f"{JOBS}/j1", fields=JOB_FIELDS),
    Call("job: Table has the printer columns", "GET", JOBS, accept=TABLE,
         fields=("kind", "columnDefinitions[*].name", "columnDefinitions[*].type", "rows[*].cells[0]",
                 "rows[*].cells[1]", "rows[*].cells[2]")),
    Call("job: protobuf only is 406 for a custom resource", "GET", f"{JOBS}/j1", accept=PROTOBUF),
    Call("job: watch starts with ADDED of each job", "GET", f"{JOBS}?watch=1&timeoutSeconds=2", watch_events=2),
    Call("job: list", "GET", JOBS, fields=("kind", "apiVersion", "items[*].metadata.name")),
    Call("job: delete answers a Status", "DELETE", f"{JOBS}/j3",
         fields=("kind", "status", "details.name", "details.group", "details.kind")),
    Call("pod: delete", "DELETE", f"{PODS}/p1?gracePeriodSeconds=0", fields=("kind", "metadata.name")),
    Call("job: get deleted is 404", "GET", f"{JOBS}/j3"),
    Call("job: delete missing is 404", "DELETE", f"{JOBS}/j3"),
    Call("job: server-side apply", "PATCH", f"{JOBS}/j4?fieldManager=alpha", job("j4", numNodes=2),
         content_type=APPLY, fields=("metadata.name", "metadata.generation", "spec.numNodes", "spec.epochs"),
         known=Known("No server-side apply", {"code": 404, "reason": "NotFound"},
                     {"code": 201, "metadata.name": "j4", "metadata.generation": 1, "spec.numNodes": 2,
                      "spec.epochs": 5})),
)
