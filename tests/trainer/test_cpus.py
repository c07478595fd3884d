"""CPU count for torch threads: the cgroup quota caps the affinity mask."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pets_trainer.cpus import available_cpus, cgroup_cpu_limit


def write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota(tmp_path):
    write(tmp_path, "cpu.max", "150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5


def test_cgroup_v2_unlimited(tmp_path):
    write(tmp_path, "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota_and_unlimited(tmp_path):
    write(tmp_path, "cpu/cpu.cfs_quota_us", "200000\n")
    write(tmp_path, "cpu/cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2
    write(tmp_path, "cpu/cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity mask on this platform")
def test_available_cpus_is_the_affinity_mask_capped_by_the_quota_rounded_up(tmp_path):
    mask = len(os.sched_getaffinity(0))
    assert available_cpus(tmp_path) == mask
    write(tmp_path, "cpu.max", "50000 100000\n")  # half a CPU: still one thread
    assert available_cpus(tmp_path) == 1
    write(tmp_path, "cpu.max", f"{(mask + 8) * 100000} 100000\n")  # a quota above the mask changes nothing
    assert available_cpus(tmp_path) == mask
