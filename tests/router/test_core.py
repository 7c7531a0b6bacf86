"""The router's rules: the scripted default, and the clamp that never widens a profile."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from services.router import core
from services.router.core import Route, RouteInput
from shared.domain import ExecutorKind
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, ExecutionProfile

TOOLS = ("memory_write", "memory_forget", "web_search")


def route_input(
    text: str, tools: tuple[str, ...] = TOOLS, profile: ExecutionProfile = CHAT_DEFAULT
) -> RouteInput:
    return RouteInput(profile=profile, input_text=text, tools=tools)


def test_rule_keeps_the_profiles_executor() -> None:
    assert core.route_by_rule(route_input("hi")).executor is ExecutorKind.WORKER
    decision = core.route_by_rule(route_input("hi", profile=AUTOMATION_MEMORY_DEFAULT))
    assert decision.executor is ExecutorKind.MEMORY


def test_rule_narrows_to_the_tools_the_input_names() -> None:
    decision = core.route_by_rule(route_input("please use web search, then memory_write it"))
    assert decision.tool_names == ("memory_write", "web_search")


def test_rule_offers_all_tools_when_none_is_named() -> None:
    assert core.route_by_rule(route_input("how are you?")).tool_names == TOOLS


def test_a_tool_name_inside_another_word_is_not_a_mention() -> None:
    decision = core.route_by_rule(route_input("xweb_searchx", tools=("web_search", "other")))
    assert decision.tool_names == ("web_search", "other")


def test_text_naming_a_tool_outside_the_run_adds_nothing() -> None:
    decision = core.route_by_rule(route_input("call delete_everything now", tools=("web_search",)))
    assert decision.tool_names == ("web_search",)


def test_clamp_drops_unknown_tools_and_keeps_the_profiles_executor() -> None:
    wide = Route(ExecutorKind.MEMORY, ("web_search", "delete_everything", "web_search"), "model")
    clamped = core.clamp(wide, route_input("x"))
    assert clamped.executor is ExecutorKind.WORKER
    assert clamped.tool_names == ("web_search",)


@hypothesis_settings(deadline=None)
@given(
    profile=st.sampled_from([CHAT_DEFAULT, AUTOMATION_MEMORY_DEFAULT]),
    tools=st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True).map(tuple),
    decided_executor=st.sampled_from(list(ExecutorKind)),
    decided_tools=st.lists(
        st.text(min_size=1, max_size=5) | st.sampled_from(["a", "b", "c", "d", "e"])
    ).map(tuple),
    text=st.text(max_size=40),
)
def test_no_decision_ever_widens_the_profile(
    profile: ExecutionProfile,
    tools: tuple[str, ...],
    decided_executor: ExecutorKind,
    decided_tools: tuple[str, ...],
    text: str,
) -> None:
    request = route_input(text, tools=tools, profile=profile)
    for decision in (Route(decided_executor, decided_tools, "any"), core.route_by_rule(request)):
        clamped = core.clamp(decision, request)
        assert clamped.executor is profile.executor
        assert set(clamped.tool_names) <= set(tools)
        assert len(set(clamped.tool_names)) == len(clamped.tool_names)


def test_model_answer_is_parsed_from_its_json() -> None:
    decision = core.parse_model_route(
        'Sure: {"tools": ["web_search"], "reason": "news"}', route_input("x")
    )
    assert decision == Route(ExecutorKind.WORKER, ("web_search",), "news")


def test_model_answer_without_json_is_no_decision() -> None:
    assert core.parse_model_route("I would use the search tool", route_input("x")) is None


def test_there_is_a_choice_only_with_several_tools_none_of_them_named() -> None:
    def request(text: str, tools: tuple[str, ...]) -> core.RouteInput:
        return core.RouteInput(profile=CHAT_DEFAULT, input_text=text, tools=tools)

    assert not core.has_choice(request("hello", ()))
    assert not core.has_choice(request("hello", ("memory_search",)))
    assert not core.has_choice(request("use memory search", ("memory_search", "web_search")))
    assert core.has_choice(request("hello", ("memory_search", "web_search")))
