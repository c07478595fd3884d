"""The bodies of the objects a PetsTrainingJob owns: headless Service, NetworkPolicy, one pod per node (pure).

With spec.gangScheduling also the gang scheduler's PodGroup; with a Kueue queue the pods carry
Kueue's plain-Pod group labels and annotations (`_scheduling`; Kueue's webhook adds its gate).

`spec` is always the spec with defaults applied (`spec.with_defaults`) and already validated.
"""
from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pets_api import contract, names
from pets_api.ownership import owner_reference
from pets_api.quantities import parse_quantity

from .spec import CACHE_MOUNT_PATH, FUNCTION_MOUNT_PATH, HOME_MOUNT_PATH, TMP_MOUNT_PATH, data_mount_path
from .validation import DATA_SOURCES

CONTAINER_NAME = "trainer"
RENDEZVOUS_PORT_NAME = "rendezvous"
RUN_AS_USER = 10001  # the trainer image's non-root user (USER 10001:10001 in trainer_image/Dockerfile)
SHM_MOUNT_PATH = "/dev/shm"
# Kubernetes' default path; the trainer writes its one-line error there (TERMINATION_MESSAGE_PATH), and
# FallbackToLogsOnError gives the log's tail when it did not (a crash, a kill).
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
TENSORBOARD_SUBDIR = "tensorboard"  # under output.path, when TensorBoard has no volume of its own


def owned_metadata(job: Mapping[str, Any], object_name: str) -> dict[str, Any]:
    """Metadata of an object the job owns (Service, NetworkPolicy, PodGroup): garbage-collected with it."""
    name = job["metadata"]["name"]
    return {
        "name": object_name,
        "namespace": job["metadata"]["namespace"],
        "labels": {names.LABEL_JOB_NAME: name, names.LABEL_MANAGED_BY: names.MANAGED_BY},
        "ownerReferences": [owner_reference(job)],
    }


def has_data(spec: Mapping[str, Any]) -> bool:
    """Whether the job has data (a job with spec.function may have none)."""
    return any((spec.get("data") or {}).get(source) is not None for source in DATA_SOURCES)


def data_archive_dir(spec: Mapping[str, Any]) -> str | None:
    """Where a downloaded archive is unpacked: on the cache volume, named by its checksum, so jobs
    sharing a cache share an archive and different archives never replace each other."""
    download = contract.data_download(spec)
    if download is None:
        return None
    algorithm, _, digest = download[1].partition(":")
    return posixpath.join(cache_path(spec), "datasets", f"{algorithm}-{digest[:16]}")


def data_dir(spec: Mapping[str, Any]) -> str | None:
    if not has_data(spec):
        return None
    path = (spec.get("data") or {}).get("path") or ""
    root = data_archive_dir(spec) or data_mount_path(spec)
    return posixpath.normpath(posixpath.join(root, path))


def hub_weights(spec: Mapping[str, Any]) -> bool:
    """Whether pets-train downloads pretrained weights from the Hub (pretrained, no local file, the built-in
    recipe: a shipped function loads its own)."""
    return bool(spec.get("pretrained")) and not spec.get("pretrainedWeights") and not spec.get("function")


def hub_offline(spec: Mapping[str, Any]) -> str | None:
    """HF_HUB_OFFLINE: "1" with hub.offline, "0" where pets-train fetches Hub weights (the trainer image
    sets 1), else None (unset)."""
    if (spec.get("hub") or {}).get("offline"):
        return "1"
    return "0" if hub_weights(spec) else None


def cache_path(spec: Mapping[str, Any]) -> str:
    return (spec.get("cache") or {}).get("path") or CACHE_MOUNT_PATH


def has_cache(spec: Mapping[str, Any]) -> bool:
    """Whether the pods get the cache volume: spec.cache, or something to download into it."""
    return spec.get("cache") is not None or contract.data_download(spec) is not None or hub_weights(spec)


def output_dir(spec: Mapping[str, Any]) -> str | None:
    output = spec.get("output")
    return None if output is None else output["path"]


def tensorboard(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """spec.tracking.tensorboard when TensorBoard is on, else None."""
    settings = (spec.get("tracking") or {}).get("tensorboard")
    return settings if settings is not None and settings.get("enabled", True) else None


def has_tensorboard_volume(spec: Mapping[str, Any]) -> bool:
    """Whether TensorBoard's event files go to a volume of their own (else under spec.output)."""
    settings = tensorboard(spec) or {}
    return settings.get("persistentVolumeClaim") is not None or settings.get("hostPath") is not None


def tensorboard_dir(spec: Mapping[str, Any]) -> str | None:
    """Where pod 0's main process writes TensorBoard event files: tracking.tensorboard.logDir, else
    <output.path>/tensorboard; None when TensorBoard is off (or has nowhere to go: a validation problem)."""
    settings = tensorboard(spec)
    if settings is None:
        return None
    if settings.get("logDir"):
        return settings["logDir"]
    output = spec.get("output")
    return None if output is None else posixpath.join(output["path"], TENSORBOARD_SUBDIR)


def function_file(spec: Mapping[str, Any]) -> str | None:
    function = spec.get("function")
    return None if function is None else posixpath.join(FUNCTION_MOUNT_PATH, function["key"])


def checkpoint_dir(spec: Mapping[str, Any]) -> str | None:
    checkpoint = spec.get("checkpoint")
    return None if checkpoint is None else checkpoint["path"]


def pod_env(job: str, namespace: str, index: int, spec: Mapping[str, Any],
            uid: str | None = None) -> list[dict[str, str]]:
    """The contract's variables (`contract.ENTRIES`, in its order), then the spec's extra env.

    `uid` is the job's metadata.uid: its checkpoints record it (JOB_UID).
    """
    num_nodes, per_node = int(spec["numNodes"]), int(spec["processesPerNode"])
    values = contract.environment(spec, derived={
        "MASTER_ADDR": names.master_addr(job, namespace),
        "MACHINE_RANK": index,
        "JOB_COMPLETION_INDEX": index,
        "WORLD_SIZE": num_nodes * per_node,
        "DATA_DIR": data_dir(spec),
        "CHECKPOINT_DIR": checkpoint_dir(spec),
        "JOB_UID": uid,
        "JOB_NAME": job,
        "JOB_NAMESPACE": namespace,
        "FUNCTION_FILE": function_file(spec),
        "PYTHONUNBUFFERED": 1,
        "HOME": HOME_MOUNT_PATH,
        "XDG_CACHE_HOME": posixpath.join(HOME_MOUNT_PATH, ".cache"),
        "TERMINATION_MESSAGE_PATH": TERMINATION_MESSAGE_PATH,
        "DATA_URL": (contract.data_download(spec) or (None, None))[0],
        "DATA_CHECKSUM": (contract.data_download(spec) or (None, None))[1],
        "DATA_ARCHIVE_DIR": data_archive_dir(spec),
        "HF_HOME": posixpath.join(cache_path(spec), "huggingface") if has_cache(spec) else None,
        "OUTPUT_DIR": output_dir(spec),
        "HF_HUB_OFFLINE": hub_offline(spec),
        "TENSORBOARD_LOG_DIR": tensorboard_dir(spec),
    })
    env = [{"name": key, "value": value} for key, value in values.items()]
    env += contract.secret_env(spec)
    env += [{"name": item["name"], "value": str(item.get("value", ""))} for item in spec.get("env") or []]
    return env


def service_body(job: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(job, names.service_name(name)),
        "spec": {
            "clusterIP": "None",
            # Pods must resolve each other before they are Ready: the rendezvous is what makes them ready.
            "publishNotReadyAddresses": True,
            "selector": names.job_selector(name),
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": int(spec["masterPort"]),
                       "targetPort": int(spec["masterPort"]), "protocol": "TCP"}],
        },
    }


def network_policy_body(job: Mapping[str, Any]) -> dict[str, Any]:
    """Ingress to the job's pods only from the job's own pods (the operator reads logs through the API server).

    torch.distributed's rendezvous store on pod 0 (masterPort) accepts any connection, and the
    collectives (gloo, NCCL) then connect the pods to each other on ports of their own choosing, so
    the policy admits every port between the job's pods and nothing from anywhere else. Egress is
    left alone (DNS, data and checkpoint storage). It selects by the job-name label, the one every
    pod of every attempt carries.
    """
    name = job["metadata"]["name"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owned_metadata(job, names.service_name(name)),
        "spec": {
            "podSelector": {"matchLabels": names.job_selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": names.job_selector(name)}}]}],
        },
    }


def _volume(name: str, source: Mapping[str, Any], host_path_type: str = "DirectoryOrCreate",
            read_only: bool | None = None, size_limit: Any = None) -> dict[str, Any]:
    """A volume from a spec section: its persistentVolumeClaim (`read_only`: the claim's readOnly, when it
    has one) or hostPath, else an emptyDir (`size_limit`, when given)."""
    if source.get("persistentVolumeClaim") is not None:
        claim = {"claimName": source["persistentVolumeClaim"]["claimName"]}
        if read_only is not None:
            claim["readOnly"] = read_only
        return {"name": name, "persistentVolumeClaim": claim}
    if source.get("hostPath") is not None:
        return {"name": name, "hostPath": {"path": source["hostPath"], "type": host_path_type}}
    return {"name": name, "emptyDir": {} if size_limit is None else {"sizeLimit": str(size_limit)}}


def _volumes_and_mounts(spec: Mapping[str, Any], index: int = 0) -> tuple[list[dict], list[dict]]:
    """`index`: the pod's; only pod 0 mounts the output volume (the main process, on node 0, writes the
    model), so a ReadWriteOnce claim serves a group spread over several nodes."""
    data = spec.get("data") or {}
    data_read_only = bool((data.get("persistentVolumeClaim") or {}).get("readOnly", True)) \
        if data.get("persistentVolumeClaim") is not None else False
    # Data with neither a claim nor a hostPath is an emptyDir: synthetic, each pod generates the same images.
    volumes = [_volume("data", data, "Directory", data_read_only), {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts = [{"name": "data", "mountPath": data_mount_path(spec), "readOnly": data_read_only},
              # DataLoader workers pass batches through shared memory; the runtime's default 64 MiB is too small.
              {"name": "dshm", "mountPath": SHM_MOUNT_PATH}]
    if not has_data(spec) or contract.data_download(spec) is not None:  # no data, or data in the cache volume
        del volumes[0], mounts[0]
    if has_cache(spec):
        cache = spec.get("cache") or {}
        volumes.append(_volume("cache", cache, size_limit=cache.get("sizeLimit")))
        mounts.append({"name": "cache", "mountPath": cache_path(spec)})
    output = spec.get("output")
    if output is not None and index == 0:
        volumes.append(_volume("output", output))
        mounts.append({"name": "output", "mountPath": output["path"]})
    if has_tensorboard_volume(spec) and index == 0:  # the main process, on node 0, writes the event files
        volumes.append(_volume("tensorboard", tensorboard(spec) or {}))
        mounts.append({"name": "tensorboard", "mountPath": tensorboard_dir(spec)})
    function = spec.get("function")
    if function is not None:
        volumes.append({"name": "function", "configMap": {"name": function["configMap"]}})
        mounts.append({"name": "function", "mountPath": FUNCTION_MOUNT_PATH, "readOnly": True})
    checkpoint = spec.get("checkpoint")
    if checkpoint is not None:
        volumes.append(_volume("checkpoint", checkpoint))
        mounts.append({"name": "checkpoint", "mountPath": checkpoint["path"]})
    # The root filesystem is read-only: temporary files (the decoded-image cache among them) and the home
    # directory with its caches go to emptyDirs, which live as long as the pod.
    volumes += [{"name": "tmp", "emptyDir": {}}, {"name": "home", "emptyDir": {}}]
    mounts += [{"name": "tmp", "mountPath": TMP_MOUNT_PATH}, {"name": "home", "mountPath": HOME_MOUNT_PATH}]
    return volumes, mounts


def queue_name(job: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue of the job's groups: spec.queueName, else the job's own queue-name label."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return spec.get("queueName") or labels.get(names.KUEUE_QUEUE_NAME_LABEL) or None


def _scheduling(job: Mapping[str, Any], spec: Mapping[str, Any], attempt: int,
                scheduler_names: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """The labels, annotations and pod spec fields that hand the group to Kueue and a gang scheduler.

    Kueue's plain-Pod group: every pod of the attempt carries the queue and the group name (labels) and
    the group's size (annotation); `retriable-in-group: "false"` makes a failed or preempted attempt
    finish as a whole (Kueue then lets its pods go: the operator restarts whole groups, never single
    pods). The job's own label `kueue.x-k8s.io/priority-class` (a WorkloadPriorityClass) goes on every
    pod, where Kueue reads the workload's priority. The admission gate `kueue.x-k8s.io/admission` and the finalizer are Kueue's: its pod webhook
    adds both when it creates a pod of a namespace it manages (and refuses the pod if it cannot be
    reached), and only Kueue removes them. Set here, the gate would hold the pods forever where Kueue
    does not manage the namespace (or does not run).
    """
    name = job["metadata"]["name"]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    fields: dict[str, Any] = {}
    queue = queue_name(job, spec)
    if queue:
        labels[names.KUEUE_QUEUE_NAME_LABEL] = queue
        labels[names.KUEUE_POD_GROUP_NAME_LABEL] = names.kueue_pod_group_name(name, attempt, job["metadata"].get("uid") or "")
        annotations[names.KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] = str(int(spec["numNodes"]))
        annotations[names.KUEUE_RETRIABLE_IN_GROUP_ANNOTATION] = "false"
        priority = ((job.get("metadata") or {}).get("labels") or {}).get(names.KUEUE_PRIORITY_CLASS_LABEL)
        if priority:
            labels[names.KUEUE_PRIORITY_CLASS_LABEL] = priority
    gang = spec.get("gangScheduling")
    if gang is not None:
        scheduler = gang.get("scheduler") or "coscheduling"
        fields["schedulerName"] = scheduler_names.get(scheduler) or names.DEFAULT_GANG_SCHEDULER_NAMES[scheduler]
        if scheduler == "volcano":
            annotations[names.VOLCANO_GROUP_NAME_ANNOTATION] = names.pod_group_name(name)
        else:
            labels[names.COSCHEDULING_POD_GROUP_LABEL] = names.pod_group_name(name)
    if spec.get("priorityClassName"):
        fields["priorityClassName"] = spec["priorityClassName"]
    return labels, annotations, fields


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """One pod's resource requests: spec.resources.requests, limits standing in for missing requests
    (as the API server defaults them)."""
    resources = spec.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {resource: parse_quantity(amount) for resource, amount in wanted.items()}


def format_quantity(amount: Decimal) -> str:
    """An exact Decimal as a Kubernetes quantity: `4`, `1500m`, `0.0000005` (never a float's rounding)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    millis = amount * 1000
    if millis == millis.to_integral_value():
        return f"{int(millis)}m"
    return format(amount.normalize(), "f")


def pod_group_body(job: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The gang scheduler's PodGroup (spec.gangScheduling), None without one: minMember is the whole
    group, minResources what all its pods request together, so the scheduler places all or none."""
    gang = spec.get("gangScheduling")
    if gang is None:
        return None
    name = job["metadata"]["name"]
    num_nodes = int(spec["numNodes"])
    group_spec: dict[str, Any] = {"minMember": num_nodes}
    requests = pod_requests(spec)
    if requests:
        group_spec["minResources"] = {resource: format_quantity(amount * num_nodes)
                                      for resource, amount in sorted(requests.items())}
    if (gang.get("scheduler") or "coscheduling") == "volcano":
        api_version = "scheduling.volcano.sh/v1beta1"
        if spec.get("priorityClassName"):
            group_spec["priorityClassName"] = spec["priorityClassName"]
    else:
        api_version = "scheduling.x-k8s.io/v1alpha1"
        if gang.get("scheduleTimeoutSeconds") is not None:
            group_spec["scheduleTimeoutSeconds"] = int(gang["scheduleTimeoutSeconds"])
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": owned_metadata(job, names.pod_group_name(name)),
        "spec": group_spec,
    }


def pod_body(job: Mapping[str, Any], spec: Mapping[str, Any], index: int, attempt: int,
             command: Sequence[str] = contract.TRAINER_COMMAND,
             scheduler_names: Mapping[str, str] = names.DEFAULT_GANG_SCHEDULER_NAMES) -> dict[str, Any]:
    """Pod `index` of group attempt `attempt`; `scheduler_names`: the gang schedulers' schedulerNames."""
    name = job["metadata"]["name"]
    namespace = job["metadata"]["namespace"]
    volumes, mounts = _volumes_and_mounts(spec, index)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec["image"],
        "command": list(command),
        "env": pod_env(name, namespace, index, spec, uid=job["metadata"]["uid"]),
        "ports": [{"name": RENDEZVOUS_PORT_NAME, "containerPort": int(spec["masterPort"]), "protocol": "TCP"}],
        "resources": dict(spec.get("resources") or {}),
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
        },
    }
    if spec.get("imagePullPolicy"):
        container["imagePullPolicy"] = spec["imagePullPolicy"]
    pod_spec: dict[str, Any] = {
        "hostname": names.pod_hostname(name, index),
        "subdomain": names.service_name(name),
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": bool(spec.get("serviceAccountName")),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if spec.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = spec["serviceAccountName"]
    if spec.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(spec["nodeSelector"])
    if spec.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in spec["tolerations"]]
    labels, annotations, scheduling = _scheduling(job, spec, attempt, scheduler_names)
    pod_spec.update(scheduling)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(name, index),
            "namespace": namespace,
            "labels": {**names.pod_labels(name, index, attempt), **labels},
            "annotations": {names.ANNOTATION_COMPLETION_INDEX: str(index), **annotations},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }
