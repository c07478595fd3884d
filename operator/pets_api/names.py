"""Names, labels and addresses of the objects a PetsTrainingJob owns (pure, no IO).

The operator names them; the SDK and the trainer find them by the same rules."""
from __future__ import annotations

import hashlib

from . import GROUP
from .k8s_names import (  # noqa: F401
    _DNS1035_LABEL,
    _DNS1123_LABEL,
    ANNOTATION_COMPLETION_INDEX,
    DNS1123_LABEL_MAX,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
)

LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
# Which group attempt (status.restarts at creation) a pod belongs to: events of an older attempt are stale.
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "pets-operator"

# Kueue's plain-Pod integration (kueue.x-k8s.io): the pods of one group attempt are one pod group, so
# one Workload, admitted (its scheduling gate removed from every pod) only as a whole.
KUEUE_QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# Kueue's WorkloadPriorityClass of a workload, read from its pods (the job's own label passes it on).
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_FINALIZER = "kueue.x-k8s.io/managed"  # Kueue's webhook adds it; only Kueue removes it
# Gang scheduling: the pod's group, as each scheduler reads it.
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins' Coscheduling
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"  # Volcano
# The schedulers' own names (their default `schedulerName`s); the operator's configuration may change them.
DEFAULT_GANG_SCHEDULER_NAMES = {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}

SERVICE_SUFFIX = "-workers"


def service_name(job: str) -> str:
    return f"{job}{SERVICE_SUFFIX}"


def pod_name(job: str, index: int) -> str:
    return f"{job}-{index}"


def pod_hostname(job: str, index: int) -> str:
    return pod_name(job, index)


def master_addr(job: str, namespace: str) -> str:
    """The DNS name of pod 0 through the headless Service (stable across pod recreation)."""
    return f"{pod_hostname(job, 0)}.{service_name(job)}.{namespace}.svc"


def max_job_name_length(num_nodes: int) -> int:
    """Longest job name whose pods (`<job>-<last index>`) and Service (`<job>-workers`) fit in a 63-character label."""
    longest_suffix = max(len(f"-{num_nodes - 1}"), len(SERVICE_SUFFIX))
    return DNS1123_LABEL_MAX - longest_suffix


def job_name_problems(job: str, num_nodes: int) -> list[str]:
    """Why `job` cannot name this job's pods, hostnames and Service; empty when it can."""
    if not _DNS1123_LABEL.match(job):
        return [f"metadata.name {job!r} must be a DNS-1123 label (lowercase letters, digits and '-', "
                "starting and ending with a letter or digit): it becomes the pods' hostnames"]
    if not _DNS1035_LABEL.match(job):
        return [f"metadata.name {job!r} must start with a letter: it begins the Service name "
                f"{service_name(job)!r}, and a Service name must be a DNS-1035 label"]
    limit = max_job_name_length(num_nodes)
    if len(job) > limit:
        return [f"metadata.name {job!r} is {len(job)} characters; at most {limit} fit so that "
                f"{pod_name(job, num_nodes - 1)!r} and {service_name(job)!r} stay within "
                f"{DNS1123_LABEL_MAX} characters"]
    return []


def job_selector(job: str) -> dict[str, str]:
    return {LABEL_JOB_NAME: job}


def pod_labels(job: str, index: int, attempt: int) -> dict[str, str]:
    return {
        LABEL_JOB_NAME: job,
        LABEL_REPLICA_INDEX: str(index),
        LABEL_ATTEMPT: str(attempt),
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def pod_group_name(job: str) -> str:
    """The gang scheduler's PodGroup of the job: one for all its attempts (a namespace holds one job of a name)."""
    return job


def kueue_pod_group_name(job: str, attempt: int, uid: str = "") -> str:
    """`<job>-<uid>-<attempt>`: the Kueue pod group (and so Workload) of one group attempt, a DNS-1123 label;
    `<uid>` is the job's metadata.uid up to its first '-' (8 hex digits), left out when there is none.

    Each attempt is a group of its own: Kueue finishes the group of a failed or preempted attempt and
    the next one queues anew. The uid keeps a job deleted and created again under its name from
    sending its first group into the old job's Workload (a finished one, until the garbage collector
    takes it with the old pods), which would never admit it. Neither the attempt nor the uid part has
    a '-', so no two (job, uid, attempt) share a name; a job name too long for the suffix is shortened
    and made unique again with a hash of the whole name.
    """
    incarnation = uid.split("-", 1)[0][:8]
    suffix = f"-{incarnation}-{attempt}" if incarnation else f"-{attempt}"
    if len(job) + len(suffix) <= DNS1123_LABEL_MAX:
        return f"{job}{suffix}"
    digest = hashlib.sha256(job.encode()).hexdigest()[:8]
    keep = DNS1123_LABEL_MAX - len(suffix) - len(digest) - 1
    return f"{job[:keep].rstrip('-')}-{digest}{suffix}"
