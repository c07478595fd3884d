"""Gang scheduling on the local node: scheduler-plugins' PodGroup kind and its all-or-nothing rule (pure).

`LocalCluster(gang_scheduler="scheduler-plugins-scheduler")` serves the `scheduling.x-k8s.io/v1alpha1`
PodGroup kind (`POD_GROUP_CRD`, applied at start) and its scheduler places the pods that ask for that
scheduler (`spec.schedulerName`) and carry the Coscheduling label `scheduling.x-k8s.io/pod-group`
as a group: none of them until `minMember` pods of the group exist and all of them fit the node
together, then all at once. That is what the Coscheduling plugin achieves on a real cluster (its
PreFilter refuses a pod while the group has fewer than minMember pods; Permit holds the placed ones
until the whole group is placed, for at most scheduleTimeoutSeconds); here nothing is ever held,
so scheduleTimeoutSeconds has nothing to time out. A pod whose PodGroup does not exist is placed on
its own, as Coscheduling does. Volcano is not emulated.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

GROUP = "scheduling.x-k8s.io"
VERSION = "v1alpha1"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
DEFAULT_GANG_SCHEDULER = "scheduler-plugins-scheduler"  # the scheduler-plugins chart's second scheduler

# The PodGroup CRD as scheduler-plugins ships it (config/crd/bases/scheduling.x-k8s.io_podgroups.yaml),
# cut down to the fields the Coscheduling plugin reads; unknown fields are kept, as status is.
POD_GROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"podgroups.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup",
                  "shortNames": ["pg", "pgs"]},
        "versions": [{
            "name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
                        "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                        "minResources": {"type": "object", "additionalProperties": {
                            "anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}},
                        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"},
                    }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        }],
    },
}


def pod_group_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/podgroups/{name}"


def group_of(pod: Mapping[str, Any], gang_scheduler: str | None) -> tuple[str, str] | None:
    """(namespace, PodGroup name) of a pod the gang scheduler places as part of a group; None otherwise."""
    if gang_scheduler is None or (pod.get("spec") or {}).get("schedulerName") != gang_scheduler:
        return None
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    return (meta.get("namespace", "default"), name) if name else None


def min_member(pod_group: Mapping[str, Any]) -> int:
    return max(1, int((pod_group.get("spec") or {}).get("minMember") or 1))


def too_few(first: str, count: int, needed: int) -> str | None:
    """The Coscheduling PreFilter's refusal while the group has fewer pods than minMember; None when it has enough."""
    if count >= needed:
        return None
    return (f"0/1 nodes are available: pre-filter pod {first} cannot find enough sibling pods, "
            f"current pods number: {count}, minMember of group: {needed}.")


def summed(requests: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for one in requests:
        for name, amount in one.items():
            total[name] = total.get(name, Decimal(0)) + amount
    return total


def shortfall(wanted: Mapping[str, Decimal], free: Mapping[str, Decimal], group: str, count: int) -> str | None:
    """Why `count` pods of `group` that together want `wanted` cannot all be placed now; None when they can."""
    short = sorted(name for name, amount in wanted.items() if amount > free.get(name, Decimal(0)))
    if not short:
        return None
    return ("0/1 nodes are available: " + ", ".join(f"1 Insufficient {name}" for name in short) +
            f" for all {count} pods of pod group {group} together.")
