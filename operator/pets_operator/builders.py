"""The bodies of the objects a PetsTrainingJob owns: headless Service and one pod per node (pure).

`spec` is always the spec with defaults applied (`spec.with_defaults`) and already validated.
"""
from __future__ import annotations

import posixpath
from typing import Any, Mapping, Sequence

from pets_operator import API_VERSION, KIND

from . import contract, names
from .spec import DATA_MOUNT_PATH

CONTAINER_NAME = "trainer"
RENDEZVOUS_PORT_NAME = "rendezvous"
RUN_AS_USER = 10001  # the trainer image's non-root user (USER 10001:10001 in trainer_image/Dockerfile)
SHM_MOUNT_PATH = "/dev/shm"


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def data_dir(spec: Mapping[str, Any]) -> str:
    path = (spec.get("data") or {}).get("path") or ""
    return posixpath.normpath(posixpath.join(DATA_MOUNT_PATH, path))


def checkpoint_dir(spec: Mapping[str, Any]) -> str | None:
    checkpoint = spec.get("checkpoint")
    return None if checkpoint is None else checkpoint["path"]


def pod_env(job: str, namespace: str, index: int, spec: Mapping[str, Any]) -> list[dict[str, str]]:
    """The contract's variables (`contract.ENTRIES`, in its order), then the spec's extra env."""
    num_nodes, per_node = int(spec["numNodes"]), int(spec["processesPerNode"])
    values = contract.environment(spec, derived={
        "MASTER_ADDR": names.master_addr(job, namespace),
        "MACHINE_RANK": index,
        "JOB_COMPLETION_INDEX": index,
        "WORLD_SIZE": num_nodes * per_node,
        "DATA_DIR": data_dir(spec),
        "CHECKPOINT_DIR": checkpoint_dir(spec),
        "PYTHONUNBUFFERED": 1,
    })
    env = [{"name": key, "value": value} for key, value in values.items()]
    env += [{"name": item["name"], "value": str(item.get("value", ""))} for item in spec.get("env") or []]
    return env


def service_body(job: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service_name(name),
            "namespace": job["metadata"]["namespace"],
            "labels": {names.LABEL_JOB_NAME: name, names.LABEL_MANAGED_BY: names.MANAGED_BY},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            # Pods must resolve each other before they are Ready: the rendezvous is what makes them ready.
            "publishNotReadyAddresses": True,
            "selector": names.job_selector(name),
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": int(spec["masterPort"]),
                       "targetPort": int(spec["masterPort"]), "protocol": "TCP"}],
        },
    }


def _data_volume(data: Mapping[str, Any]) -> dict[str, Any]:
    if data.get("persistentVolumeClaim") is not None:
        claim = data["persistentVolumeClaim"]
        return {"name": "data", "persistentVolumeClaim": {"claimName": claim["claimName"],
                                                          "readOnly": bool(claim.get("readOnly", True))}}
    if data.get("hostPath") is not None:
        return {"name": "data", "hostPath": {"path": data["hostPath"], "type": "Directory"}}
    return {"name": "data", "emptyDir": {}}  # synthetic: each pod generates the same images


def _checkpoint_volume(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    if checkpoint.get("persistentVolumeClaim") is not None:
        return {"name": "checkpoint", "persistentVolumeClaim": {"claimName": checkpoint["persistentVolumeClaim"]["claimName"]}}
    if checkpoint.get("hostPath") is not None:
        return {"name": "checkpoint", "hostPath": {"path": checkpoint["hostPath"], "type": "DirectoryOrCreate"}}
    return {"name": "checkpoint", "emptyDir": {}}


def _volumes_and_mounts(spec: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    data = spec.get("data") or {}
    data_read_only = bool((data.get("persistentVolumeClaim") or {}).get("readOnly", True)) \
        if data.get("persistentVolumeClaim") is not None else False
    volumes = [_data_volume(data), {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts = [{"name": "data", "mountPath": DATA_MOUNT_PATH, "readOnly": data_read_only},
              # DataLoader workers pass batches through shared memory; the runtime's default 64 MiB is too small.
              {"name": "dshm", "mountPath": SHM_MOUNT_PATH}]
    checkpoint = spec.get("checkpoint")
    if checkpoint is not None:
        volumes.append(_checkpoint_volume(checkpoint))
        mounts.append({"name": "checkpoint", "mountPath": checkpoint["path"]})
    return volumes, mounts


def pod_body(job: Mapping[str, Any], spec: Mapping[str, Any], index: int, attempt: int,
             command: Sequence[str] = contract.TRAINER_COMMAND) -> dict[str, Any]:
    name = job["metadata"]["name"]
    namespace = job["metadata"]["namespace"]
    volumes, mounts = _volumes_and_mounts(spec)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec["image"],
        "command": list(command),
        "env": pod_env(name, namespace, index, spec),
        "ports": [{"name": RENDEZVOUS_PORT_NAME, "containerPort": int(spec["masterPort"]), "protocol": "TCP"}],
        "resources": dict(spec.get("resources") or {}),
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(name, index),
            "namespace": namespace,
            "labels": names.pod_labels(name, index, attempt),
            "annotations": {names.ANNOTATION_COMPLETION_INDEX: str(index)},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }
