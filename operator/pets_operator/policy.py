"""The cluster admin's policy for PetsTrainingJobs: which trainer images and hostPath volumes a job may use (pure).

A user who may create a PetsTrainingJob must not get, through the operator's ServiceAccount, pods they could
not create themselves: another image, or a node's file system mounted by hostPath. kube-apiserver refuses such
jobs with the chart's ValidatingAdmissionPolicy (`charts/pets-operator/templates/policy.yaml`); the
operator checks the same rules, with the same messages, before it creates anything, for clusters without that
policy and for jobs created before it. Both read one set of settings: the chart's `policy.*` values, rendered
into one ConfigMap (the policy's parameter object, whose keys the Deployment passes to the operator as
`PETS_OPERATOR_POLICY_*`). Without settings (`pets-operator run` outside the chart, the demo) nothing is
restricted.

The settings' text format is the ConfigMap's: comma-separated lists, `true`/`false`. A path is inside a prefix
when it is the prefix or continues it after a `/`, compared as text, as the policy's CEL compares them; a path
with a `..` segment is inside none.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The spec fields that may name a hostPath volume, in the order both checks report them.
HOST_PATH_FIELDS = ("data", "checkpoint", "cache", "output", "tracking.tensorboard")
# The chart values an admin changes to allow what a message refuses.
IMAGES_VALUE = "policy.allowedImages"
HOST_PATH_VALUE = "policy.hostPath.allowed"
PREFIXES_VALUE = "policy.hostPath.pathPrefixes"


@dataclass(frozen=True)
class Policy:
    # None: any image; else the images a job may name in spec.image, each exact or a prefix ending in `*`
    # (a job that leaves spec.image unset gets the operator's trainer image and is never refused for it).
    allowed_images: tuple[str, ...] | None = None
    host_path_allowed: bool = True
    # With hostPath allowed: the directories it may be under; empty: anywhere.
    host_path_prefixes: tuple[str, ...] = ()


UNRESTRICTED = Policy()


def parse_list(text: str) -> tuple[str, ...]:
    """A comma-separated setting, as the ConfigMap holds it: blanks around items and empty items dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def policy_problems(spec: Mapping[str, Any], policy: Policy, default_image: str) -> list[str]:
    """One sentence per rule the job breaks, naming the field, its value and the chart value that would allow it.

    `spec` as the job gives it or with the defaults applied; `default_image`: the operator's trainer image, which
    a job with no spec.image gets."""
    return [*_image_problems(spec.get("image") or default_image, policy, default_image),
            *_host_path_problems(spec, policy)]


def host_paths(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of each hostPath volume the spec names, in HOST_PATH_FIELDS order."""
    found = []
    for field in HOST_PATH_FIELDS:
        volume: Any = spec
        for part in field.split("."):
            volume = volume.get(part) if isinstance(volume, Mapping) else None
        if isinstance(volume, Mapping) and volume.get("hostPath"):
            found.append((field, str(volume["hostPath"])))
    return found


def image_allowed(image: str, allowed: tuple[str, ...]) -> bool:
    return any(image == entry or (entry.endswith("*") and image.startswith(entry[:-1])) for entry in allowed)


def inside(path: str, prefix: str) -> bool:
    if ".." in path.split("/"):
        return False
    return path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")


def _image_problems(image: str, policy: Policy, default_image: str) -> Iterator[str]:
    allowed = policy.allowed_images
    if allowed is None or image == default_image or image_allowed(image, allowed):
        return
    yield (f'spec.image "{image}" is not an allowed trainer image (allowed: {", ".join(allowed)}); '
           f"a cluster admin allows it with the chart value {IMAGES_VALUE}")


def _host_path_problems(spec: Mapping[str, Any], policy: Policy) -> Iterator[str]:
    for field, path in host_paths(spec):
        if not policy.host_path_allowed:
            yield (f'spec.{field}.hostPath "{path}": hostPath volumes are not allowed (they mount the file system of '
                   f"the node); a cluster admin allows them with the chart value {HOST_PATH_VALUE}")
        elif policy.host_path_prefixes and not any(inside(path, p) for p in policy.host_path_prefixes):
            yield (f'spec.{field}.hostPath "{path}" is outside the allowed hostPath prefixes '
                   f'({", ".join(policy.host_path_prefixes)}); a cluster admin allows it with the chart value '
                   f"{PREFIXES_VALUE}")
