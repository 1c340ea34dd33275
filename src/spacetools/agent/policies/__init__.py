"""Policies write assistant turns; :func:`make_policy` builds one by name without importing the others.

Each policy lives in its own module so that, for example, using ``openai`` never imports torch.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from spacetools.agent.types import Policy

# name -> (module, class or factory); modules are imported only when their policy is asked for.
POLICIES: dict[str, tuple[str, str]] = {
    "scripted": ("spacetools.agent.policies.scripted", "ScriptedPolicy"),
    "openai": ("spacetools.agent.policies.openai", "OpenAIPolicy"),
    "hf": ("spacetools.agent.policies.hf", "load_hf_policy"),
    "replay": ("spacetools.agent.policies.replay", "ReplayPolicy"),
    "robot_scripted": ("spacetools.agent.policies.robot_expert", "RobotExpertPolicy"),
}


def make_policy(name: str, **options: Any) -> Policy:
    """Build the policy called ``name`` (one of :data:`POLICIES`) with its keyword options."""
    try:
        module_name, factory_name = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(sorted(POLICIES))}") from None
    factory = getattr(importlib.import_module(module_name), factory_name)
    valid = option_names(factory)
    unknown = sorted(set(options) - set(valid))
    takes_any = any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(factory).parameters.values()
    )
    if unknown and not takes_any:
        accepted = ", ".join(valid) if valid else "none"
        raise ValueError(f"policy {name!r} has no option {unknown[0]!r}; its options: {accepted}")
    policy: Policy = factory(**options)
    return policy


def option_names(factory: Any) -> list[str]:
    """The keyword options a policy's class or factory takes (its parameters, without ``self``)."""
    parameters = inspect.signature(factory).parameters.values()
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in keyword]


__all__ = ["POLICIES", "make_policy"]
