"""A stand-in for Kueue's plain-Pod group integration, as far as the owner of the pods sees it.

What Kueue (pkg/controller/jobs/pod) does with pods labelled `kueue.x-k8s.io/queue-name`, played
with the official client against the local cluster, one `sync()` every 0.1 s in a thread:

- its mutating webhook gives each new pod with a queue-name label the scheduling gate
  `kueue.x-k8s.io/admission`, the finalizer `kueue.x-k8s.io/managed` and the label
  `kueue.x-k8s.io/managed: "true"` as the API server creates it (the operator sets none of them);
  here a proxy in front of the local API server does it to the pods the operator creates through
  it (`operator_env`: the operator's KUBECONFIG). The real webhook (v0.17) also adds the gate
  `kueue.x-k8s.io/topology` (TopologyAwareScheduling is on by default) and removes it with the
  other; tests/realcluster/test_kueue.py sees both on the real one;
- it admits a group (`kueue.x-k8s.io/pod-group-name`, one Workload) only when all
  `kueue.x-k8s.io/pod-group-total-count` pods exist, and then removes the gate from every one;
  `open()`/`close()` stand for the ClusterQueue's quota having room or not;
- `preempt(group)` stops the workload as Kueue does: a `TerminationTarget` condition (reason
  `WorkloadEvictedDueToPreempted`: Kueue v0.17's "WorkloadEvictedDueTo" + the eviction's reason, as
  tests/e2e/test_kueue_jobs.py saw it) on each pod that has not finished, then the pod is deleted;
  nothing is recreated;
- it removes its finalizer from a group's pods once the group is finished: every pod succeeded, or,
  with `kueue.x-k8s.io/retriable-in-group: "false"`, no pod is active any more (a deleted pod not
  bound to a node counts as inactive: the pod garbage collector fails it on a real cluster).

It never ungates a finished group again. Whatever it did is recorded for the test to check.
"""
from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from tests.support.fault_proxy import FaultProxy

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
GATE = "kueue.x-k8s.io/admission"
FINALIZER = "kueue.x-k8s.io/managed"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
MERGE = "application/merge-patch+json"  # lists replaced whole (a strategic merge patch would merge finalizers)
POD_CREATE = re.compile(r"^/api/v1/namespaces/[^/]+/pods$")


def webhook_default(pod: dict) -> dict:
    """What Kueue's pod webhook does to a new pod of a namespace it manages: with a queue-name label,
    its managed label, its finalizer and its admission gate (each once)."""
    labels = pod.setdefault("metadata", {}).get("labels") or {}
    if not labels.get(QUEUE_LABEL):
        return pod
    pod["metadata"]["labels"] = {**labels, MANAGED_LABEL: "true"}
    finalizers = pod["metadata"].get("finalizers") or []
    pod["metadata"]["finalizers"] = finalizers if FINALIZER in finalizers else [*finalizers, FINALIZER]
    gates = pod.setdefault("spec", {}).get("schedulingGates") or []
    if GATE not in [gate.get("name") for gate in gates]:
        pod["spec"]["schedulingGates"] = [*gates, {"name": GATE}]
    return pod


class WebhookProxy(FaultProxy):
    """The local API server as seen through Kueue's mutating pod webhook."""

    def rewrite(self, method: str, path: str, body: bytes) -> bytes:
        if method != "POST" or not POD_CREATE.match(path) or not body:
            return body
        return json.dumps(webhook_default(json.loads(body))).encode()


class KueueStandIn:
    def __init__(self, core, namespace: str = "default"):
        self.core = core
        self.namespace = namespace
        self._workdir = tempfile.TemporaryDirectory(prefix="kueue-stand-in-")
        self.webhook = WebhookProxy(core.api_client.configuration.host, Path(self._workdir.name))
        self.admitted: list[str] = []  # groups, in the order they were admitted
        self.preempted: list[str] = []
        self.finished: list[str] = []  # groups whose finalizers it removed
        self.seen_before_admission: dict[str, int] = {}  # group -> pods that were gated and unbound when admitted
        self.errors: list[str] = []
        self._open = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="kueue-stand-in", daemon=True)

    def start(self) -> KueueStandIn:
        self.webhook.start()
        self._thread.start()
        return self

    @property
    def operator_env(self) -> dict[str, str]:
        """The operator's environment for its pods to pass the webhook."""
        return {"KUBECONFIG": str(self.webhook.kubeconfig)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.webhook.stop()
        self._workdir.cleanup()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    self.sync()
            except ApiException as error:  # a conflict with the kubelet or the operator: next round
                self.errors.append(f"{error.status} {error.reason}")
            time.sleep(0.1)

    def _pods(self) -> dict[str, list]:
        groups = defaultdict(list)
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=QUEUE_LABEL).items:
            groups[pod.metadata.labels.get(GROUP_LABEL, "")].append(pod)
        return groups

    def sync(self) -> None:
        for group, pods in self._pods().items():
            live = [p for p in pods if not p.metadata.deletion_timestamp]
            total = int(pods[0].metadata.annotations[TOTAL_ANNOTATION])
            gated = [p for p in live if any(g.name == GATE for g in p.spec.scheduling_gates or [])]
            if self._open.is_set() and group not in self.finished and len(live) == total and gated:
                if group not in self.admitted:
                    self.admitted.append(group)
                    self.seen_before_admission[group] = sum(1 for p in gated if not p.spec.node_name)
                for pod in gated:
                    index = [g.name for g in pod.spec.scheduling_gates].index(GATE)
                    self.core.patch_namespaced_pod(pod.metadata.name, self.namespace,
                                                   [{"op": "remove", "path": f"/spec/schedulingGates/{index}"}])
            succeeded = sum(1 for p in pods if p.status.phase == "Succeeded")
            unretriable = any((p.metadata.annotations or {}).get(RETRIABLE_ANNOTATION) == "false" for p in pods)
            active = any(p.status.phase in ("Pending", "Running") and not (p.metadata.deletion_timestamp and not p.spec.node_name)
                         for p in pods)
            if group not in self.finished and (succeeded == total or (unretriable and not active)):
                self.finished.append(group)
            if group in self.finished:
                for pod in pods:
                    finalizers = pod.metadata.finalizers or []
                    if FINALIZER in finalizers:
                        self.core.patch_namespaced_pod(pod.metadata.name, self.namespace, {"metadata": {
                            "finalizers": [f for f in finalizers if f != FINALIZER] or None}}, _content_type=MERGE)

    def preempt(self, group: str) -> None:
        with self._lock:
            for pod in self._pods().get(group, []):
                if pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp:
                    continue
                self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, {"status": {"conditions": [
                    {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
                     "message": "Preempted to accommodate a workload due to prioritization in the ClusterQueue"}]}})
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
            self.preempted.append(group)
