"""Freed memory is reused: a process that allocates and frees big blocks stops page-faulting them in."""
from __future__ import annotations

import platform
import subprocess
import sys

from pets_trainer import allocator

# Allocates and frees a 64 MiB array ten times; prints the minor page faults of the last nine.
PROBE = """
import resource, sys
import numpy as np
from pets_trainer.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
np.ones(16 << 20, dtype=np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(9):
    np.ones(16 << 20, dtype=np.float32)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def minor_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_big_blocks_are_reused_instead_of_faulted_in_again():
    default, kept = minor_faults("default"), minor_faults("keep")
    # glibc maps each block anew: at least one fault per 2 MiB (a transparent huge page) of each.
    assert default >= 9 * (64 // 2)
    assert kept <= default // 20  # the heap keeps the first block for the other nine


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    assert allocator.keep_freed_memory() is False
