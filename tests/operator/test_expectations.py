"""Expectations: a pod the runner created is not created again while the pod index has not shown it."""
from __future__ import annotations

import asyncio
import copy

from pets_operator.config import OperatorConfig
from pets_operator.expectations import Expectations
from pets_operator.runner import JobRunner

from .test_runner import JOB, FakeKube, FakeLogStreams


def test_created_pods_are_expected_until_seen_or_timed_out():
    expected = Expectations(timeout=30)
    expected.created(0, [0, 1], now=100.0)
    assert expected.to_create(0, [0, 1], now=101.0) == []
    expected.seen([(0, 0)])
    assert expected.to_create(0, [1], now=102.0) == []  # pod 1 still on its way
    assert expected.to_create(0, [0], now=103.0) == [0]  # seen, then gone again: created again at once
    assert expected.to_create(0, [1], now=131.0) == [1]  # never seen within the timeout
    expected.created(0, [1], now=131.0)
    assert expected.to_create(1, [0, 1], now=132.0) == [0, 1]  # a new attempt expects nothing of the old


async def test_a_lagging_pod_index_does_not_make_the_runner_create_the_group_again():
    kube = FakeKube()
    index: list = []  # the pod index, lagging: empty although the pods exist
    job = copy.deepcopy(JOB)
    runner = JobRunner(kube, job, OperatorConfig(), lambda: list(index), lambda event: None, asyncio.Event(),
                       log_streams=FakeLogStreams())
    await runner.carry_out(runner.step())
    assert sorted(kube.created) == ["NetworkPolicy/pets-workers", "Pod/pets-0", "Pod/pets-1", "Service/pets-workers"]
    plan = runner.step()
    assert plan.create_pods == []
    await runner.carry_out(plan)
    assert len(kube.created) == 4
    index.extend(kube.pods.values())  # the index catches up
    assert runner.step().create_pods == []
