"""A profile's agent: system prompt template, model card, sampling and output limit,
validated at load naming the field, carried over gRPC, used by the executor's agents."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.executor import agent_config
from services.executor.agents.memory import MemoryAgent
from services.executor.agents.worker import WorkerAgent
from services.executor.events import StepResult
from services.executor.tools import ToolRegistry
from shared.errors import FailedPrecondition, InvalidArgument
from shared.messages import Role
from shared.model.cards import load_card
from shared.model.factory import agent_problem
from shared.model.scripted import ScriptedModel
from shared.profiles import (
    CHAT_DEFAULT,
    AgentConfig,
    ProfileFileError,
    ProfileRegistry,
    parse_profile,
    profile_from_pb,
    profile_to_pb,
)
from shared.settings import Settings
from shared.tools import REGISTERED_TOOLS
from tests.executor.test_context import SmallModel, card
from tests.executor.test_memory_output import Marks, memory_step
from tests.executor.test_memory_structured import Answers, Tool
from tests.executor.test_worker import run, step

AGENT = {
    "system_prompt": "You are Aster. Today is {weekday} {local_date}, {local_time} in {time_zone}.",
    "model_card": "scripted",
    "temperature": 0.4,
    "max_tokens": 300,
}


def profile(**agent: object) -> dict[str, object]:
    return {"name": "aster", "enable_router": False, "executor": "worker", "agent": agent}


@pytest.mark.parametrize(
    ("agent", "field"),
    [
        ({"system_prompt": "Hi {user_name}"}, "p.agent.system_prompt"),
        ({"system_prompt": "Hi {"}, "p.agent.system_prompt"),
        ({"model_card": "../etc/passwd"}, "p.agent.model_card"),
        ({"temperature": 3}, "p.agent.temperature"),
        ({"top_p": 0}, "p.agent.top_p"),
        ({"max_tokens": 0}, "p.agent.max_tokens"),
        ({"seed": 1}, "p.agent.seed"),
    ],
)
def test_a_bad_agent_is_refused_naming_the_field(agent: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_profile(profile(**agent), field="p", allow_agent=True)
    assert info.value.violations[0][0] == field


def test_a_profile_from_outside_the_operators_file_may_not_set_the_agent() -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_profile(profile(system_prompt="You obey me."), field="execution_profile")
    assert info.value.violations[0][0] == "execution_profile.agent"


def test_the_prompt_template_renders_the_owners_zone_and_local_date() -> None:
    agent = parse_profile(profile(**AGENT), allow_agent=True).agent
    now = datetime(2026, 1, 1, 20, 30, tzinfo=UTC)
    assert agent.render_prompt("Asia/Shanghai", now) == (
        "You are Aster. Today is Friday 2026-01-02, 04:30 in Asia/Shanghai."
    )
    assert AgentConfig().render_prompt("Asia/Shanghai", now) == ""


def test_the_agent_travels_over_grpc_unchanged() -> None:
    p = parse_profile(profile(**AGENT), allow_agent=True)
    assert profile_from_pb(profile_to_pb(p)) == p
    assert profile_from_pb(profile_to_pb(CHAT_DEFAULT)) == CHAT_DEFAULT
    assert not profile_to_pb(CHAT_DEFAULT).HasField("agent")


def test_the_profiles_file_checks_each_agent_against_the_model_cards(tmp_path: Path) -> None:
    settings = Settings()
    path = tmp_path / "profiles.yaml"
    path.write_text(
        "profiles:\n"
        "  - {name: a, enable_router: false, executor: worker, agent: {model_card: nope}}\n"
    )
    with pytest.raises(
        ProfileFileError, match=r"profiles\[0\]\.agent\.model_card: model card nope"
    ):
        ProfileRegistry.load(path, REGISTERED_TOOLS, lambda agent: agent_problem(settings, agent))
    path.write_text(
        "profiles:\n"
        "  - {name: a, enable_router: false, executor: worker, agent: {temperature: 0.5}}\n"
    )
    # The scripted card has no temperature parameter.
    with pytest.raises(
        ProfileFileError, match=r"profiles\[0\]\.agent\.temperature: not a parameter"
    ):
        ProfileRegistry.load(path, REGISTERED_TOOLS, lambda agent: agent_problem(settings, agent))
    path.write_text(
        "profiles:\n"
        "  - {name: a, enable_router: false, executor: worker,\n"
        "     agent: {max_tokens: 100, system_prompt: 'Be brief.'}}\n"
    )
    assert ProfileRegistry.load(path, REGISTERED_TOOLS, lambda a: agent_problem(settings, a)).get(
        "a"
    )


async def test_the_worker_uses_the_profiles_prompt_model_and_options() -> None:
    default, chosen = SmallModel(card()), SmallModel(card(4096, None))
    chosen_options: list[object] = []
    original = chosen.stream

    # A stand-in for the card's stream.
    def stream(messages, *, tools=(), options=None):  # type: ignore[no-untyped-def]
        chosen_options.append(options)
        return original(messages, tools=tools, options=options)

    # Replaced for this test only.
    chosen.stream = stream  # type: ignore[method-assign]
    agent = WorkerAgent(
        default,
        ToolRegistry(()),
        max_tool_rounds=1,
        tool_timeout_seconds=5,
        models=lambda name: {"big": chosen}[name],
    )
    request = step(
        profile=parse_profile(
            profile(system_prompt="You are Aster ({time_zone}).", model_card="big", max_tokens=50),
            allow_agent=True,
        )
    )
    await run(agent, request)
    assert default.seen == [] and len(chosen.seen) == 1
    [sent] = chosen.seen
    assert sent[0].role == Role.SYSTEM and sent[0].text == "You are Aster (Asia/Shanghai)."
    assert chosen_options == [{"max_tokens": 50}]


def test_a_profile_whose_card_rejects_its_options_fails_naming_the_field() -> None:
    agent = parse_profile(profile(temperature=0.5), allow_agent=True).agent
    with pytest.raises(FailedPrecondition, match=r"profile\.agent\.temperature"):
        agent_config.setup(agent, "Asia/Shanghai", ScriptedModel(card=load_card("scripted")), None)


async def test_the_memory_agent_uses_the_profiles_prompt_model_and_options() -> None:
    default = Answers('{"memories": [], "forget": []}')
    chosen = Answers(
        '{"memories": [{"content": "User likes tea", "kind": "preference"}], "forget": []}'
    )
    marks = Marks()
    write = Tool("memory_write", "content")
    agent = MemoryAgent(
        default,
        ToolRegistry((write,)),
        marks,
        max_tool_rounds=1,
        tool_timeout_seconds=5,
        models=lambda name: {"small": chosen}[name],
    )
    memory_profile = parse_profile(
        {
            "name": "memory_small",
            "enable_router": False,
            "executor": "memory",
            "tool_policy": {"allowlist": ["memory_write"]},
            "agent": {
                "system_prompt": "You keep notes for a user in {time_zone}.",
                "model_card": "small",
                "max_tokens": 50,
            },
        },
        allow_agent=True,
    )
    request = replace(memory_step(), profile=memory_profile, tools=("memory_write",))
    items = [item async for item in agent.run(request)]
    assert default.asked == [] and len(chosen.asked) == 1
    [sent] = chosen.messages
    assert sent[0].role == Role.SYSTEM
    assert sent[0].text.startswith("You keep notes for a user in Asia/Shanghai.")
    assert "The job's instructions:\nextract" in sent[0].text
    assert chosen.options == [{"max_tokens": 50}]
    assert write.got == ["User likes tea"] and marks.advanced == 1
    assert isinstance(items[-1], StepResult)


def test_a_memory_profile_whose_card_rejects_its_options_fails_naming_the_field() -> None:
    agent = parse_profile(
        {"name": "m", "enable_router": False, "executor": "memory", "agent": {"top_p": 0.5}},
        allow_agent=True,
    ).agent
    model = ScriptedModel(card=load_card("scripted-structured"))
    with pytest.raises(FailedPrecondition, match=r"profile\.agent\.top_p"):
        agent_config.setup(agent, "Asia/Shanghai", model, None)
