"""The `Policy` protocol: `aclose` is part of it, with a default the project's policies inherit."""

from __future__ import annotations

import asyncio

import pytest

from spacetools.agent.policies.hf import HFPolicy
from spacetools.agent.policies.openai import OpenAIPolicy
from spacetools.agent.policies.replay import ReplayPolicy
from spacetools.agent.policies.robot_expert import RobotExpertPolicy
from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.types import EpisodeState, Policy


@pytest.mark.parametrize(
    "policy_class", [HFPolicy, OpenAIPolicy, ReplayPolicy, RobotExpertPolicy, ScriptedPolicy]
)
def test_every_policy_of_the_project_is_a_policy(policy_class: type) -> None:
    assert Policy in policy_class.__mro__  # subclassed, so `aclose` is always there


class Answering(Policy):
    name = "answering"

    async def act(self, state: EpisodeState) -> str:
        return "<answer>yes</answer>"


class OnlyActs:
    name = "only_acts"

    async def act(self, state: EpisodeState) -> str:
        return "<answer>yes</answer>"


def test_a_subclass_inherits_a_close_that_releases_nothing() -> None:
    policy = Answering()
    assert isinstance(policy, Policy)
    assert asyncio.run(policy.aclose()) is None
    assert Answering.aclose is Policy.aclose


def test_a_class_with_only_name_and_act_is_not_taken_for_one_that_closes() -> None:
    assert not isinstance(OnlyActs(), Policy)
