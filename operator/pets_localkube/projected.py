"""Projected volumes as a kubelet fills them: the files of each source under one directory.

The source that matters most is the one Kubernetes' ServiceAccount admission adds to every pod that
does not set `automountServiceAccountToken: false`, the `kube-api-access-<suffix>` volume:
- `serviceAccountToken`: a token from the TokenRequest API (`serviceaccounts/<sa>/token`), bound to
  the pod (kube-apiserver's NodeRestriction lets a node ask only for pods bound to it); the
  audience and expiration of the source;
- `configMap` `kube-root-ca.crt`, key `ca.crt`: the cluster CA;
- `downwardAPI` `metadata.namespace`: the namespace.
`secret` sources and `downwardAPI` items of other fieldRefs are filled the same way; `items`
select keys and name their files. The token is written once, when the volume is set up (a kubelet
refreshes it at 80% of its lifetime; the API server's default lifetime for these tokens is an hour,
extended to a year for the legacy-compatible `kube-api-access` volumes).

A source that cannot be read is a `MountError` (a `FailedMount` Event, retried), as on a node.
"""
from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .client import ApiStatusError, Client
from .environment import field_ref
from .volumes import MountError


def _select(files: Mapping[str, bytes], items: list[Mapping[str, Any]] | None, what: str,
            volume: str) -> dict[str, bytes]:
    """All keys as files, or only `items` (key -> path); a missing item key is an error."""
    if not items:
        return dict(files)
    chosen = {}
    for item in items:
        if item["key"] not in files:
            raise MountError(volume, f"configmap references non-existent config key: {item['key']}" if what == "configmap"
                             else f"references non-existent secret key: {item['key']}")
        chosen[item.get("path") or item["key"]] = files[item["key"]]
    return chosen


def config_map_files(source: Mapping[str, Any]) -> dict[str, bytes]:
    files = {k: str(v).encode("utf-8") for k, v in (source.get("data") or {}).items()}
    files.update({k: base64.b64decode(v) for k, v in (source.get("binaryData") or {}).items()})
    return files


def secret_files(source: Mapping[str, Any]) -> dict[str, bytes]:
    files = {k: base64.b64decode(v) for k, v in (source.get("data") or {}).items()}
    files.update({k: str(v).encode("utf-8") for k, v in (source.get("stringData") or {}).items()})
    return files


def token_request(pod: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The TokenRequest of a `serviceAccountToken` projection, bound to the pod."""
    meta = pod["metadata"]
    spec: dict[str, Any] = {"expirationSeconds": int(source.get("expirationSeconds") or 3600),
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}
    if source.get("audience"):
        spec["audiences"] = [source["audience"]]
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


async def _read(client: Client, path: str, volume: str, what: str, name: str, optional: bool) -> dict[str, Any] | None:
    try:
        return await client.get(path)
    except ApiStatusError as error:
        if error.code == 404 and optional:
            return None
        if error.code == 404:
            raise MountError(volume, f'{what} "{name}" not found') from None
        raise MountError(volume, f'{what} "{name}": {error}') from None


async def projected_files(client: Client, pod: Mapping[str, Any], volume: Mapping[str, Any]) -> dict[str, bytes]:
    """Relative path -> content of a `projected` volume; MountError when a source cannot be read."""
    name = volume["name"]
    namespace = pod["metadata"]["namespace"]
    files: dict[str, bytes] = {}
    for source in (volume.get("projected") or {}).get("sources") or []:
        if "serviceAccountToken" in source:
            account = pod["spec"].get("serviceAccountName") or "default"
            try:
                answer = await client.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                             token_request(pod, source["serviceAccountToken"]))
            except ApiStatusError as error:
                raise MountError(name, f'failed to fetch token for serviceaccount "{account}": {error}') from None
            files[source["serviceAccountToken"]["path"]] = answer["status"]["token"].encode()
        elif "configMap" in source:
            ref = source["configMap"]
            found = await _read(client, f"/api/v1/namespaces/{namespace}/configmaps/{ref['name']}", name, "configmap",
                                ref["name"], bool(ref.get("optional")))
            if found is not None:
                files.update(_select(config_map_files(found), ref.get("items"), "configmap", name))
        elif "secret" in source:
            ref = source["secret"]
            found = await _read(client, f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}", name, "secret",
                                ref["name"], bool(ref.get("optional")))
            if found is not None:
                files.update(_select(secret_files(found), ref.get("items"), "secret", name))
        elif "downwardAPI" in source:
            for item in source["downwardAPI"].get("items") or []:
                if "fieldRef" not in item:
                    raise MountError(name, f"downwardAPI item {item.get('path')!r}: only fieldRef is supported locally")
                try:
                    files[item["path"]] = field_ref(dict(pod), item["fieldRef"]["fieldPath"]).encode()
                except ValueError as error:
                    raise MountError(name, str(error)) from None
        else:
            raise MountError(name, f"projected source {sorted(source)} is not supported by the local kubelet")
    for relative in files:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise MountError(name, f"invalid path {relative!r}: must be relative and may not contain '..'")
    return files


def write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    for relative, content in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
