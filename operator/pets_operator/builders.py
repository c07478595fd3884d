"""The bodies of the objects a PetsTrainingJob owns: headless Service and one pod per node (pure).

`spec` is always the spec with defaults applied (`spec.with_defaults`) and already validated.
"""
from __future__ import annotations

import posixpath
from typing import Any, Mapping, Sequence

from pets_operator import API_VERSION, KIND

from . import names
from .spec import DATA_MOUNT_PATH

CONTAINER_NAME = "trainer"
TRAINER_COMMAND = ["pets-train"]
RENDEZVOUS_PORT_NAME = "rendezvous"
RUN_AS_USER = 10001  # the trainer image's non-root user (USER 10001:10001 in trainer_image/Dockerfile)
SHM_MOUNT_PATH = "/dev/shm"

# Every variable the operator derives from the spec; spec.env may not override them.
MANAGED_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "NUM_MACHINES", "MACHINE_RANK", "JOB_COMPLETION_INDEX", "NPROC_PER_NODE",
    "WORLD_SIZE", "MIXED_PRECISION", "SEED", "BATCH_SIZE", "EPOCHS", "MAX_LR", "MODEL", "DATA_DIR",
    "NUM_WORKERS", "IMAGE_SIZE", "PRETRAINED", "PRETRAINED_WEIGHTS", "CHECKPOINT_DIR",
    "SYNTHETIC_CLASSES", "SYNTHETIC_IMAGES_PER_CLASS", "SYNTHETIC_IMAGE_SIZE", "PYTHONUNBUFFERED",
})


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
    """The rendezvous contract of docs/ARCHITECTURE.md, then the spec's extra env."""
    num_nodes = int(spec["numNodes"])
    per_node = int(spec["processesPerNode"])
    values: dict[str, str] = {
        "MASTER_ADDR": names.master_addr(job, namespace),
        "MASTER_PORT": str(spec["masterPort"]),
        "NUM_MACHINES": str(num_nodes),
        "MACHINE_RANK": str(index),
        "JOB_COMPLETION_INDEX": str(index),
        "NPROC_PER_NODE": str(per_node),
        "WORLD_SIZE": str(num_nodes * per_node),
        "MIXED_PRECISION": str(spec["mixedPrecision"]),
        "SEED": str(spec["seed"]),
        "BATCH_SIZE": str(spec["batchSize"]),
        "EPOCHS": str(spec["epochs"]),
        "MAX_LR": str(spec["maxLearningRate"]),
        "MODEL": str(spec["model"]),
        "DATA_DIR": data_dir(spec),
        "NUM_WORKERS": str(spec["numWorkers"]),
        "IMAGE_SIZE": str(spec["imageSize"]),
        "PRETRAINED": "true" if spec.get("pretrained") else "false",
        # Metric lines must reach the log the moment they are printed.
        "PYTHONUNBUFFERED": "1",
    }
    if spec.get("pretrainedWeights"):
        values["PRETRAINED_WEIGHTS"] = spec["pretrainedWeights"]
    if checkpoint_dir(spec) is not None:
        values["CHECKPOINT_DIR"] = checkpoint_dir(spec)
    synthetic = (spec.get("data") or {}).get("synthetic")
    if synthetic is not None:
        values["SYNTHETIC_CLASSES"] = str(synthetic["classes"])
        values["SYNTHETIC_IMAGES_PER_CLASS"] = str(synthetic["imagesPerClass"])
        values["SYNTHETIC_IMAGE_SIZE"] = str(synthetic["imageSize"])
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
             command: Sequence[str] = TRAINER_COMMAND) -> dict[str, Any]:
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
