"""Keep freed memory in the process, so each batch reuses the last one's instead of faulting in new pages.

glibc's malloc serves a large allocation (above a threshold that grows to at most 32 MiB) with a
fresh `mmap` and unmaps it on free. A CPU forward pass frees and allocates activations of tens of
MiB per layer per batch, so every batch the kernel maps and zeroes them again, page by page:
for resnet50d at 224 px and batch 32 that was about 2 million page faults and a quarter of the CPU
time spent in the kernel. With mmap off and no trimming, freed blocks stay in the heap and the
next batch reuses them: the same effect as the jemalloc or tcmalloc that CPU tuning guides for
PyTorch preload, without a library to install. The price: the process keeps its peak memory until
it exits, which a training process reaches in its first batch anyway.

Set at run time with `mallopt`, it applies to every later allocation of this process and of
processes forked from it (the data loader workers). Other C libraries are left alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform

# From glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # mallopt takes an int; 2 GiB of free heap top before any is given back


def keep_freed_memory() -> bool:
    """Turn off mmap for allocations and heap trimming in glibc's malloc; False where that is not possible."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    # mallopt returns 1 on success.
    return libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
