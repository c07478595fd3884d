"""The kopf wiring: no finalizer on the jobs, the pod index by owner, a deleted job's daemon stopping."""
from __future__ import annotations

import asyncio

import kopf

from pets_operator import handlers

LABELS = {"training.pets.dev/job-name": "pets", "training.pets.dev/replica-index": "1",
          "training.pets.dev/attempt": "0"}


def test_no_handler_puts_a_finalizer_on_a_job():
    registry = kopf.get_default_registry()
    daemons = [h for h in registry._spawning.get_all_handlers() if h.fn is handlers.run_job]
    assert len(daemons) == 1 and not daemons[0].requires_finalizer
    changing = [h for h in registry._changing.get_all_handlers() if h.requires_finalizer]
    assert changing == []  # no @kopf.on.delete (or other change handler) that would ask for one


def pod(owner_references):
    return {"metadata": {"name": "pets-1", "labels": LABELS, "ownerReferences": owner_references},
            "status": {"phase": "Running"}}


def test_the_pod_index_keys_a_pod_by_its_owning_job_s_uid_only():
    owned = pod([{"kind": "PetsTrainingJob", "name": "pets", "uid": "uid-1", "controller": True}])
    keyed = asyncio.run(handlers.job_pods(namespace="ml", body=owned))
    assert list(keyed) == [("ml", "uid-1")] and keyed[("ml", "uid-1")].name == "pets-1"
    assert asyncio.run(handlers.job_pods(namespace="ml", body=pod([]))) is None  # only labelled: not the job's
    other = pod([{"kind": "Job", "name": "pets", "uid": "uid-2", "controller": True}])
    assert asyncio.run(handlers.job_pods(namespace="ml", body=other)) is None


class Memo:
    pass


def test_a_deleted_job_stops_its_daemon():
    async def scenario():
        memo = Memo()
        memo.deletions = {"uid-1": asyncio.Event()}

        class DaemonStopped:
            reason = None

            def __bool__(self):
                return False

            async def wait(self, timeout=None):
                await asyncio.sleep(3600)

        stopped = handlers.JobStopped(DaemonStopped(), memo.deletions["uid-1"])
        waiting = asyncio.create_task(stopped.wait(30))
        await handlers.job_deleted(type="MODIFIED", uid="uid-1", memo=memo)
        assert not stopped
        await handlers.job_deleted(type="DELETED", uid="uid-1", memo=memo)
        assert await asyncio.wait_for(waiting, 1) is True and stopped and stopped.job_deleted

    asyncio.run(scenario())


def test_a_spec_change_wakes_the_job_s_daemon_and_its_own_status_patches_do_not():
    assert handlers.spec_ahead(meta={"generation": 2}, status={"observedGeneration": 1})  # e.g. suspend set
    assert handlers.spec_ahead(meta={"generation": 1}, status={})  # no step has reported on it yet
    assert not handlers.spec_ahead(meta={"generation": 2}, status={"observedGeneration": 2})  # an epoch's patch
    assert not handlers.spec_ahead(meta={}, status={})

    class Memo:
        wakeups = {("ml", "pets"): asyncio.Event()}

    asyncio.run(handlers.wake_on_spec_change(namespace="ml", name="pets", memo=Memo()))
    asyncio.run(handlers.wake_on_spec_change(namespace="ml", name="other", memo=Memo()))  # no daemon: nothing to wake
    assert Memo.wakeups[("ml", "pets")].is_set()
    registered = [h for h in kopf.get_default_registry()._watching.get_all_handlers()
                  if h.fn is handlers.wake_on_spec_change]
    assert len(registered) == 1 and registered[0].when is handlers.spec_ahead
