"""The memory policy of an execution profile (shared.profiles.MemoryPolicy): validated like
the rest of a profile, carried between services whole, placed by the prompt template."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.errors import InvalidArgument
from shared.profiles import (
    AUTOMATION_MEMORY_DEFAULT,
    CHAT_DEFAULT,
    AgentConfig,
    MemoryPolicy,
    parse_profile,
    profile_from_pb,
    profile_to_pb,
)


def test_chat_default_recalls_and_a_profile_without_a_policy_does_not() -> None:
    assert CHAT_DEFAULT.memory.mode == "recall"
    assert AUTOMATION_MEMORY_DEFAULT.memory.mode == "recall"
    custom = parse_profile({"enable_router": False, "executor": "worker"})
    assert custom.memory == MemoryPolicy(mode="off")


@pytest.mark.parametrize(
    "profile", [CHAT_DEFAULT, AUTOMATION_MEMORY_DEFAULT], ids=["chat", "automation"]
)
def test_the_policy_survives_the_trip_between_services(profile: object) -> None:
    # The profile of the test, converted both ways.
    assert profile_from_pb(profile_to_pb(profile)) == profile  # type: ignore[arg-type]


def test_a_policy_set_by_a_caller_round_trips() -> None:
    data = {
        "enable_router": False,
        "executor": "memory",
        "memory": {"mode": "recall", "top_k": 3, "min_relevance": 0.25, "max_tokens": 120},
    }
    profile = parse_profile(data)
    assert profile.memory == MemoryPolicy(
        mode="recall", top_k=3, min_relevance=0.25, max_tokens=120
    )
    assert profile_from_pb(profile_to_pb(profile)).memory == profile.memory


def test_conversation_recall_is_on_in_chat_default_off_unless_asked_and_survives_the_trip() -> None:
    # Chat remembers what was said but never extracted; the memory job reads its own window.
    assert CHAT_DEFAULT.memory.conversation
    assert not AUTOMATION_MEMORY_DEFAULT.memory.conversation
    data = {"enable_router": False, "executor": "worker", "memory": {"mode": "recall"}}
    assert not parse_profile(data).memory.conversation
    data = {
        "enable_router": False,
        "executor": "worker",
        "memory": {"mode": "recall", "conversation": True},
    }
    profile = parse_profile(data)
    assert profile.memory.conversation
    assert profile_from_pb(profile_to_pb(profile)).memory == profile.memory


@pytest.mark.parametrize(
    ("memory", "field"),
    [
        ({"mode": "always"}, "execution_profile.memory.mode"),
        ({"mode": "recall", "top_k": 0}, "execution_profile.memory.top_k"),
        ({"mode": "recall", "top_k": 51}, "execution_profile.memory.top_k"),
        ({"mode": "recall", "min_relevance": 1.5}, "execution_profile.memory.min_relevance"),
        ({"mode": "recall", "max_tokens": 0}, "execution_profile.memory.max_tokens"),
        ({"mode": "recall", "owner": "bob"}, "execution_profile.memory.owner"),
        ({"mode": "recall", "conversation": "yes"}, "execution_profile.memory.conversation"),
        ({"mode": "recall", "conversation": 1}, "execution_profile.memory.conversation"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(memory: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_profile({"enable_router": False, "executor": "worker", "memory": memory})
    assert err.value.violations[0][0] == field


def test_the_template_may_place_the_memories() -> None:
    agent = AgentConfig(system_prompt="Zone {time_zone}. You know: {memories}")
    assert agent.places_memories()
    now = datetime(2025, 1, 2, tzinfo=UTC)
    assert agent.render_prompt("UTC", now, "- tea") == "Zone UTC. You know: - tea"
    assert agent.render_prompt("UTC", now) == "Zone UTC. You know: "
    assert not AgentConfig(system_prompt="Zone {time_zone}.").places_memories()
