"""What the API server does to objects on create/update/patch/delete, independent of HTTP.

Metadata stamping (uid, resourceVersion, creationTimestamp, generation), the status subresource
split, optimistic concurrency, CRD validation/defaulting, finalizers and graceful deletion.
"""
from __future__ import annotations

import copy
import datetime
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from pets_api.k8s_names import (
    DNS1035_LABEL_MAX,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN_MAX,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
)

from . import errors
from .patch import JSON as JSON_PATCH
from .patch import MERGE, STRATEGIC, apply_patch
from .resources import Registry, ResourceType, from_crd
from .store import Obj, Store

MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_KEY = ("", "namespaces")
POD_KEY = ("", "pods")
SERVICE_KEY = ("", "services")
SECRET_KEY = ("", "secrets")
# The pod phases a pod never leaves (the kubelet, scheduler and API server all use this one).
POD_SUCCEEDED, POD_FAILED = "Succeeded", "Failed"
TERMINAL_POD_PHASES = (POD_SUCCEEDED, POD_FAILED)
# Which Kubernetes name rule an object's name must follow (apimachinery's messages); the rules
# themselves are `pets_api.names`, the same ones the operator checks job names with.
_NAME_RULES: dict[tuple[str, str], tuple[Callable[[str], bool], int, str]] = {
    NAMESPACE_KEY: (is_dns1123_label, DNS1123_LABEL_MAX,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character"),
    SERVICE_KEY: (is_dns1035_label, DNS1035_LABEL_MAX,
                  "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                  "start with an alphabetic character, and end with an alphanumeric character"),
}
_SUBDOMAIN_RULE = (is_dns1123_subdomain, DNS1123_SUBDOMAIN_MAX,
                   "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                   "and must start and end with an alphanumeric character")
# The hostPath volume types the API accepts ("" = no check), as `kubectl explain pod.spec.volumes.hostPath.type` lists them.
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
# Set by the API server while a namespace or CRD is emptied before it goes.
CLEANUP_FINALIZERS = {NAMESPACE_KEY: "kubernetes", CRD_KEY: "customresourcecleanup.apiextensions.k8s.io"}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _random_suffix() -> str:
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def _content(obj: Obj) -> Obj:
    """What `generation` tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Storage:
    def __init__(self, store: Store, registry: Registry):
        self.store = store
        self.registry = registry
        self._service_ips = 0
        for name in SYSTEM_NAMESPACES:
            self.create(self.registry.find("", "v1", "namespaces"), None, {"metadata": {"name": name}})

    # --- reading -----------------------------------------------------------------------------

    def get(self, resource: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.store.get(resource.key, namespace or "", name)
        if obj is None:
            raise errors.not_found(resource.plural, resource.group, name)
        return obj

    # --- creating ----------------------------------------------------------------------------

    def create(self, resource: ResourceType, namespace: str | None, body: Any, version: str | None = None,
               strict: bool = False, dry_run: bool = False) -> tuple[Obj, list[str]]:
        """The stored object and the warnings (pruned unknown fields).

        With `dry_run` (`?dryRun=All`) everything up to the write runs, names, defaults and admission
        included, and the answer is what would have been stored, without a resourceVersion, as a
        real API server's dry-run create answers.
        """
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + _random_suffix()
        name = meta.get("name") or ""
        if resource.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            namespace = namespace or body_ns or "default"
            if self.store.get(NAMESPACE_KEY, "", namespace) is None:
                raise errors.not_found("namespaces", "", namespace)
            if self.store.get(NAMESPACE_KEY, "", namespace)["metadata"].get("deletionTimestamp"):
                raise errors.ApiError(403, "Forbidden", f'{resource.plural} "{name}" is forbidden: '
                                      f"unable to create new content in namespace {namespace} because it is being terminated")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["apiVersion"] = resource.api_version(version)
        obj["kind"] = resource.kind
        self._check_name(resource, name)
        if self.store.get(resource.key, meta.get("namespace", ""), name) is not None:
            raise errors.already_exists(resource.plural, resource.group, name)
        if resource.has_status:
            obj.pop("status", None)
        for system_field in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "managedFields"):
            meta.pop(system_field, None)
        service_ips = self._service_ips
        warnings = self._admit(resource, obj, version, strict, created=True)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        if dry_run:
            self._service_ips = service_ips  # a dry run allocates nothing
            return self._versioned(obj, resource, version), warnings
        meta["resourceVersion"] = str(self.store.next_resource_version())
        self.store.put(resource.key, obj)
        self._on_stored(resource, obj)
        return self._versioned(obj, resource, version), warnings

    def _check_name(self, resource: ResourceType, name: str) -> None:
        if not name:
            raise errors.invalid(resource.kind, resource.group, name, [{
                "reason": "FieldValueRequired", "field": "metadata.name", "message": "Required value: name or generateName is required"}])
        valid, limit, rule = _NAME_RULES.get(resource.key, _SUBDOMAIN_RULE)
        if not valid(name):
            raise errors.invalid(resource.kind, resource.group, name, [{
                "reason": "FieldValueInvalid", "field": "metadata.name",
                "message": f'Invalid value: "{name}": {rule} (at most {limit} characters)'}])

    # --- admission: defaults and validation per type -----------------------------------------

    def _admit(self, resource: ResourceType, obj: Obj, version: str | None, strict: bool, created: bool,
               old: Obj | None = None) -> list[str]:
        """`old`: the stored object, on updates (the CRD's transition rules compare with it)."""
        warnings: list[str] = []
        if resource.is_custom:
            schema = resource.schemas[version or resource.versions[0]]
            pruned = schema.prune(obj)
            if pruned and strict:
                raise errors.bad_request(f"{resource.kind} in version \"{version or resource.versions[0]}\" cannot be handled as a {resource.kind}: "
                                         "strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in pruned))
            warnings = [f'unknown field "{p}"' for p in pruned]
            schema.default(obj)
            causes = schema.validate(obj, old, warnings)
            if causes:
                raise errors.invalid(resource.kind, resource.group, obj["metadata"].get("name", ""), causes)
        elif resource.key == POD_KEY:
            self._admit_pod(obj, created)
        elif resource.key == SERVICE_KEY and created:
            self._admit_service(obj)
        elif resource.key == NAMESPACE_KEY and created:
            obj["status"] = {"phase": "Active"}
        elif resource.key == SECRET_KEY and not obj.get("type"):
            obj["type"] = "Opaque"  # the API's default for a Secret
        elif resource.key == CRD_KEY:
            self._admit_crd(obj)
        return warnings

    def _admit_pod(self, obj: Obj, created: bool) -> None:
        spec = obj.setdefault("spec", {})
        containers = spec.get("containers")
        name = obj["metadata"].get("name", "")
        if not containers:
            raise errors.invalid("Pod", "", name, [{"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"}])
        for index, container in enumerate(containers):
            for required in ("name", "image"):
                if not container.get(required):
                    raise errors.invalid("Pod", "", name, [{"reason": "FieldValueRequired", "field": f"spec.containers[{index}].{required}",
                                                            "message": "Required value"}])
        self._admit_pod_volumes(name, spec)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("enableServiceLinks", True)
        for container in list(containers) + list(spec.get("initContainers") or []):
            _default_container(container)
        if created:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    @staticmethod
    def _admit_pod_volumes(name: str, spec: Obj) -> None:
        """hostPath volumes: `type` defaults to "" and must be a known one, `path` is required (no `..`)."""
        for index, volume in enumerate(spec.get("volumes") or []):
            host = volume.get("hostPath") if isinstance(volume, dict) else None
            if not isinstance(host, dict):
                continue
            field = f"spec.volumes[{index}].hostPath"
            host.setdefault("type", "")
            if host["type"] not in HOST_PATH_TYPES:
                supported = ", ".join(f'"{t}"' for t in sorted(HOST_PATH_TYPES))
                raise errors.invalid("Pod", "", name, [{"reason": "FieldValueNotSupported", "field": f"{field}.type",
                                                        "message": f'Unsupported value: "{host["type"]}": supported values: {supported}'}])
            path = host.get("path")
            if not path:
                raise errors.invalid("Pod", "", name, [{"reason": "FieldValueRequired", "field": f"{field}.path", "message": "Required value"}])
            if ".." in str(path).split("/"):
                raise errors.invalid("Pod", "", name, [{"reason": "FieldValueInvalid", "field": f"{field}.path",
                                                        "message": f"Invalid value: \"{path}\": must not contain '..'"}])

    def _admit_service(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        if "clusterIP" not in spec and spec["type"] != "ExternalName":  # an ExternalName service gets no cluster IP
            self._service_ips += 1
            spec["clusterIP"] = f"10.96.{self._service_ips // 250}.{self._service_ips % 250 + 2}"
        if spec["type"] != "ExternalName":
            spec.setdefault("sessionAffinity", "None")
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        causes = []
        for index, port in enumerate(spec.get("ports") or []):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
            for field in ("port", "targetPort"):
                value = port.get(field)
                if value is None or isinstance(value, int) and not 1 <= value <= 65535:
                    causes.append({"reason": "FieldValueInvalid", "field": f"spec.ports[{index}].{field}",
                                   "message": f"Invalid value: {json.dumps(value)}: must be between 1 and 65535, inclusive"})
        if causes:
            raise errors.invalid("Service", "", obj["metadata"].get("name", ""), causes)
        obj["status"] = {"loadBalancer": {}}

    def _admit_crd(self, obj: Obj) -> None:
        name = obj["metadata"].get("name", "")
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        causes = []
        for field, value in (("spec.group", spec.get("group")), ("spec.names.plural", names.get("plural")),
                             ("spec.names.kind", names.get("kind")), ("spec.versions", spec.get("versions"))):
            if not value:
                causes.append({"reason": "FieldValueRequired", "field": field, "message": "Required value"})
        if not causes and name != f"{names['plural']}.{spec['group']}":
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                           "message": f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'})
        if causes:
            raise errors.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)
        try:
            from_crd(obj)
        except Exception as error:  # a schema jsonschema cannot compile
            raise errors.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, [{
                "reason": "FieldValueInvalid", "field": "spec.versions", "message": f"Invalid value: {error}"}]) from None
        accepted = dict(names)
        accepted.setdefault("singular", names["kind"].lower())
        accepted.setdefault("listKind", names["kind"] + "List")
        obj["status"] = {
            "acceptedNames": accepted,
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
            "conditions": [{"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now()}
                           for t, r, m in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                           ("Established", "InitialNamesAccepted", "the initial names have been accepted"))],
        }

    # --- updating ----------------------------------------------------------------------------

    def update(self, resource: ResourceType, namespace: str | None, name: str, body: Any, subresource: str | None = None,
               version: str | None = None, strict: bool = False, dry_run: bool = False) -> tuple[Obj, list[str]]:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        current = self.get(resource, namespace, name)
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if not wanted_rv and resource.is_custom:
            raise errors.invalid(resource.kind, resource.group, name, [{
                "reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                "message": "Invalid value: 0x0: must be specified for an update"}])
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request(f'the name of the object ({body_name}) does not match the name on the URL ({name})')
        return self._replace(resource, current, copy.deepcopy(body), subresource, version, strict, dry_run)

    def patch(self, resource: ResourceType, namespace: str | None, name: str, content_type: str, patch: Any,
              subresource: str | None = None, version: str | None = None, strict: bool = False,
              dry_run: bool = False) -> tuple[Obj, list[str]]:
        current = self.get(resource, namespace, name)
        if resource.is_custom and content_type.split(";")[0].strip() == STRATEGIC:
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                  f"accepted media types include: {JSON_PATCH}, {MERGE}, application/apply-patch+yaml")
        patched = apply_patch(content_type, self._versioned(current, resource, version), patch)
        return self._replace(resource, current, patched, subresource, version, strict, dry_run)

    def _replace(self, resource: ResourceType, current: Obj, new: Obj, subresource: str | None,
                 version: str | None, strict: bool, dry_run: bool = False) -> tuple[Obj, list[str]]:
        name = current["metadata"]["name"]
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            new_meta = new["metadata"] = {}
        wanted_rv = new_meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(resource.plural, resource.group, name, MODIFIED)
        if subresource == "status":
            merged = copy.deepcopy(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        else:
            if resource.has_status:
                new["status"] = copy.deepcopy(current["status"]) if "status" in current else None
                if new["status"] is None:
                    new.pop("status")
            meta = new["metadata"]
            # Fields the server owns; clients cannot change them.
            for system_field in ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp",
                                 "deletionGracePeriodSeconds"):
                if system_field in current["metadata"]:
                    meta[system_field] = current["metadata"][system_field]
                else:
                    meta.pop(system_field, None)
        new["apiVersion"], new["kind"] = resource.api_version(version), resource.kind
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        new["metadata"].pop("managedFields", None)
        warnings = self._admit(resource, new, version, strict, created=False, old=current)
        if resource.key == POD_KEY and subresource != "status":
            self._keep_immutable_pod_fields(current, new)
        if _content(new) != _content(current):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        if self._stored_form(new) == self._stored_form(current):
            return self._versioned(current, resource, version), warnings  # no-op: no new resourceVersion, no event
        if dry_run:  # what would be stored, with the current resourceVersion, as a real dry-run update answers
            return self._versioned(new, resource, version), warnings
        new["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
        self.store.put(resource.key, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") and not self._held(resource, new):
            self.store.remove(resource.key, new)
        self._on_stored(resource, new)
        return self._versioned(new, resource, version), warnings

    @staticmethod
    def _stored_form(obj: Obj) -> Obj:
        return {k: v for k, v in obj.items() if k not in ("apiVersion",)}

    @staticmethod
    def _keep_immutable_pod_fields(current: Obj, new: Obj) -> None:
        """Pod specs are immutable but for a few fields; nodeName is set only through /binding."""
        for field in ("nodeName", "containers", "initContainers", "volumes", "restartPolicy"):
            if field in current.get("spec", {}):
                wanted = new["spec"].get(field)
                new["spec"][field] = copy.deepcopy(current["spec"][field])
                if field in ("containers", "initContainers") and isinstance(wanted, list):
                    _take_new_images(new["spec"][field], wanted)

    def bind(self, namespace: str, name: str, binding: Any) -> Obj:
        pod = self.get(self.registry.find("", "v1", "pods"), namespace, name)
        target = (binding or {}).get("target") or {}
        if not target.get("name"):
            raise errors.bad_request("a Binding needs target.name")
        if pod["spec"].get("nodeName"):
            raise errors.conflict("pods", "", name, f"pod {name} is already assigned to node \"{pod['spec']['nodeName']}\"")
        pod["spec"]["nodeName"] = target["name"]
        conditions = [c for c in pod["status"].get("conditions", []) if c.get("type") != "PodScheduled"]
        pod["status"]["conditions"] = conditions + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]
        pod["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
        self.store.put(POD_KEY, pod)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # --- deleting ----------------------------------------------------------------------------

    def delete(self, resource: ResourceType, namespace: str | None, name: str, options: dict[str, Any],
               dry_run: bool = False) -> Obj:
        """The deleted object, or the object marked for deletion (finalizers, grace period).

        With `dry_run` the answer is the same and nothing changes: `current` is the store's copy.
        """
        current = self.get(resource, namespace, name)
        meta = current["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise errors.conflict(resource.plural, resource.group, name,
                                  f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta['uid']}")
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(resource.plural, resource.group, name, MODIFIED)
        policy = options.get("propagationPolicy") or ("Orphan" if options.get("orphanDependents") else "Background")
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        elif policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        grace = self._grace_period(resource, current, options)
        if not finalizers and not grace and not self._held(resource, current):
            if dry_run:
                return self._versioned(current, resource, None)
            return self._versioned(self.store.remove(resource.key, current), resource, None)
        changed = False
        if finalizers != list(meta.get("finalizers") or []):
            meta["finalizers"], changed = finalizers, True
        if not meta.get("deletionTimestamp"):
            deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=grace or 0)
            meta["deletionTimestamp"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["deletionGracePeriodSeconds"] = grace or 0
            changed = True
        elif grace is not None and grace < int(meta.get("deletionGracePeriodSeconds") or 0):
            meta["deletionGracePeriodSeconds"], changed = grace, True
        if resource.key == NAMESPACE_KEY:
            current.setdefault("status", {})["phase"] = "Terminating"
        if dry_run:
            return self._versioned(current, resource, None)
        if grace == 0 and not finalizers and resource.key == POD_KEY:
            return self._versioned(self.store.remove(resource.key, current), resource, None)
        if changed:
            meta["resourceVersion"] = str(self.store.next_resource_version())
            self.store.put(resource.key, current)
        return self._versioned(current, resource, None)

    def _grace_period(self, resource: ResourceType, obj: Obj, options: dict[str, Any]) -> int | None:
        """Only pods running on a node get a graceful deletion; the kubelet finishes it."""
        if resource.key != POD_KEY:
            return None
        if not obj["spec"].get("nodeName") or obj.get("status", {}).get("phase") in TERMINAL_POD_PHASES:
            return 0
        requested = options.get("gracePeriodSeconds")
        return int(requested if requested is not None else obj["spec"].get("terminationGracePeriodSeconds", 30))

    def _held(self, resource: ResourceType, obj: Obj) -> bool:
        """Namespaces and CRDs wait, once deleted, until the collector has emptied them."""
        return resource.key in CLEANUP_FINALIZERS

    def finish_deletion(self, resource: ResourceType, obj: Obj) -> None:
        """Called by the collector once a held namespace/CRD is empty."""
        current = self.store.get(resource.key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if current and current["metadata"].get("deletionTimestamp") and not current["metadata"].get("finalizers"):
            self.store.remove(resource.key, current)
            self._on_removed(resource, current)

    def _on_stored(self, resource: ResourceType, obj: Obj) -> None:
        if resource.key == CRD_KEY and not obj["metadata"].get("deletionTimestamp"):
            self.registry.add(from_crd(obj))

    def _on_removed(self, resource: ResourceType, obj: Obj) -> None:
        if resource.key == CRD_KEY:
            self.registry.remove((obj["spec"]["group"], obj["spec"]["names"]["plural"]))

    @staticmethod
    def _versioned(obj: Obj, resource: ResourceType, version: str | None) -> Obj:
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = resource.api_version(version)
        return obj


def _default_container(container: Obj) -> None:
    """The API's defaults for a container (pkg/apis/core/v1/defaults.go)."""
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1].partition("@")[0]
    untagged_or_latest = ":" not in tag or tag.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if untagged_or_latest and "@" not in image else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def _take_new_images(kept: list[Obj], wanted: list[Obj]) -> None:
    """A pod's containers may change only their image (by container name), as on a real API server."""
    images = {c.get("name"): c.get("image") for c in wanted if isinstance(c, dict) and c.get("image")}
    for container in kept:
        if container.get("name") in images:
            container["image"] = images[container["name"]]
