"""The pure cores name some values as Literal types; the models store the same words as
choices. The services hand a field's value to a core with `cast`, which holds only while the
two lists agree: these tests make them agree."""

from __future__ import annotations

from typing import get_args

from apps.cluster.models import Quota, ResourceType
from apps.core import pricing
from apps.jobs.models import IdleMode
from apps.scheduler import engine


def test_idle_modes_are_the_engines():
    assert set(get_args(engine.IdleMode)) == set(IdleMode.values)


def test_queue_strategies_are_the_engines():
    assert set(get_args(engine.QueueStrategy)) == set(Quota.Strategy.values)


def test_resource_types_are_the_markets():
    assert set(get_args(pricing.ResourceType)) == set(ResourceType.values)
