"""Kubernetes' own name rules (apimachinery's validation.IsDNS1123Label/IsDNS1123Subdomain/IsDNS1035Label) and
well-known names, written once: the operator's checks and the local cluster's API server both use these (pure)."""
from __future__ import annotations

import re

# The completion index of an indexed pod, as the Job controller writes it (the operator writes the same).
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_MAX = 63
_DNS1123_LABEL_FORMAT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{_DNS1123_LABEL_FORMAT}$")
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL_FORMAT}(\.{_DNS1123_LABEL_FORMAT})*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_dns1123_label(text: str) -> bool:
    """Lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters
    (names of namespaces, pods' hostnames)."""
    return len(text) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.match(text))


def is_dns1123_subdomain(text: str) -> bool:
    """DNS-1123 labels joined by '.', at most 253 characters (names of most objects: pods, service accounts)."""
    return len(text) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.match(text))


def is_dns1035_label(text: str) -> bool:
    """A DNS-1123 label that starts with a letter, at most 63 characters (names of Services)."""
    return len(text) <= DNS1035_LABEL_MAX and bool(_DNS1035_LABEL.match(text))
