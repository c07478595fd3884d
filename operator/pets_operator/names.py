"""Names, labels and addresses of the objects a PetsTrainingJob owns (pure, no IO)."""
from __future__ import annotations

import re

from pets_operator import GROUP

LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
# Which group attempt (status.restarts at creation) a pod belongs to: events of an older attempt are stale.
LABEL_ATTEMPT = f"{GROUP}/attempt"
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "pets-operator"

DNS1123_LABEL_MAX = 63
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SERVICE_SUFFIX = "-workers"


def is_dns1123_label(text: str) -> bool:
    return len(text) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.match(text))


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
    """Longest job name whose pods (`<job>-<last index>`) and Service (`<job>-workers`) are DNS-1123 labels."""
    longest_suffix = max(len(f"-{num_nodes - 1}"), len(SERVICE_SUFFIX))
    return DNS1123_LABEL_MAX - longest_suffix


def job_name_problems(job: str, num_nodes: int) -> list[str]:
    """Why `job` cannot name this job's pods, hostnames and Service; empty when it can."""
    if not _DNS1123_LABEL.match(job):
        return [f"metadata.name {job!r} must be a DNS-1123 label (lowercase letters, digits and '-', "
                "starting and ending with a letter or digit): it becomes the pods' hostnames"]
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
