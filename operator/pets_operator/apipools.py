"""The operator's thread pools for blocking API calls: the jobs' steps, and their epochs' status patches apart.

`steps` runs what a job's daemon does (`runner.JobRunner.call`): the creation of its group (Service,
NetworkPolicy, pods), the reconcile steps' status patches, deletions. `epochs` runs the epoch
books' `add` for the followed logs (`logfollow`), i.e. the status patches of `epochs.EpochBook`.
In one shared pool the epoch patches of running jobs waited behind the creations of new ones
(1,000 jobs on kube-apiserver: epoch line -> status p99 39 s; docs/performance-operator.md).

The epochs pool needs no queue of its own to stay bounded: a job's follower awaits its book's
add before reading on, so each followed log has at most one add waiting, and the lines that come
meanwhile reach the next add together (one patch for all of them, in order).
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

STEP_THREADS = 32  # the jobs' daemons' calls, of every job at once
EPOCH_THREADS = 16  # the epoch books' status patches, of every followed log at once


@dataclasses.dataclass(frozen=True)
class ApiPools:
    steps: ThreadPoolExecutor
    epochs: ThreadPoolExecutor

    @classmethod
    def start(cls, step_threads: int = STEP_THREADS, epoch_threads: int = EPOCH_THREADS) -> ApiPools:
        return cls(ThreadPoolExecutor(max_workers=step_threads, thread_name_prefix="kube"),
                   ThreadPoolExecutor(max_workers=epoch_threads, thread_name_prefix="kube-epochs"))

    def shutdown(self) -> None:
        """Queued calls are dropped, running ones end by themselves (each has its read timeout)."""
        for pool in (self.steps, self.epochs):
            pool.shutdown(wait=False, cancel_futures=True)
