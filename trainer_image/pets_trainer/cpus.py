"""How many CPUs this process may really use: the affinity mask, capped by a cgroup CPU quota.

In a pod with `resources.limits.cpu: 2` on a 64-core node, `os.cpu_count()` says 64 and the
affinity mask usually says 64 too; only the cgroup's CFS quota says 2. Sizing torch's thread
pool by the node instead of the quota makes every process thrash under CFS throttling.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup's quota (v2 `cpu.max`, else v1 CFS files); None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def available_cpus(root: Path = CGROUP_ROOT) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)
