"""Pure rules of a run: validation, profile resolution, topology, numbering, spans, errors."""

from __future__ import annotations

import pytest
from agentmesh.type.v1.run_event_pb2 import (
    ReasoningStart,
    RunEvent,
    TextMessageContent,
    TextMessageStart,
    ToolCallStart,
)

from services.orchestrator import convert, core
from shared.domain import MessageKind, RuntimeMode
from shared.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    Unavailable,
)
from shared.ids import is_owner_id
from shared.messages import ToolResultBlock, assistant, user
from shared.profiles import (
    AUTOMATION_MEMORY_DEFAULT,
    BUILT_INS,
    CHAT_DEFAULT,
    ExecutionProfile,
    ProfileRegistry,
    ToolPolicy,
)

# pydantic reads the executor's name as its enum.
DIRECT = ExecutionProfile(name="chat_direct", enable_router=False, executor="worker")  # type: ignore[arg-type]
REGISTRY = ProfileRegistry({**BUILT_INS, DIRECT.name: DIRECT})


def field_of(exc: pytest.ExceptionInfo[InvalidArgument]) -> str:
    return exc.value.violations[0][0]


def test_chat_resolves_to_chat_default() -> None:
    assert core.resolve_profile(RuntimeMode.CHAT, "", None, REGISTRY) == CHAT_DEFAULT


def test_chat_may_name_a_registered_profile() -> None:
    assert core.resolve_profile(RuntimeMode.CHAT, "chat_direct", None, REGISTRY) == DIRECT


def test_chat_naming_an_unknown_profile_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.resolve_profile(RuntimeMode.CHAT, "nope", None, REGISTRY)
    assert field_of(info) == "profile_name"


def test_chat_cannot_bring_its_own_profile_snapshot() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.resolve_profile(RuntimeMode.CHAT, "", DIRECT, REGISTRY)
    assert field_of(info) == "profile"


def test_automation_uses_the_jobs_snapshot() -> None:
    # pydantic reads the executor's name as its enum.
    snapshot = ExecutionProfile(name="job", enable_router=False, executor="worker")  # type: ignore[arg-type]
    assert core.resolve_profile(RuntimeMode.AUTOMATION, "", snapshot, REGISTRY) == snapshot


def test_automation_without_a_snapshot_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.resolve_profile(RuntimeMode.AUTOMATION, "", None, REGISTRY)
    assert field_of(info) == "profile"


def test_router_step_only_when_the_profile_enables_it() -> None:
    assert core.plan_steps(CHAT_DEFAULT) == ("router", "worker")
    assert core.plan_steps(DIRECT) == ("worker",)
    assert core.plan_steps(AUTOMATION_MEMORY_DEFAULT) == ("memory",)


def test_server_tools_are_declared_and_allowed_by_the_profile() -> None:
    profile = ExecutionProfile(
        # pydantic reads the executor's name as its enum.
        name="p",
        enable_router=False,
        executor="memory",  # type: ignore[arg-type]
        tool_policy=ToolPolicy(allowlist=("memory_write", "memory_forget")),
    )
    assert core.server_tools_for(
        RuntimeMode.AUTOMATION, profile, ["memory_forget", "web_search", "memory_forget"]
    ) == ("memory_forget",)
    assert core.server_tools_for(RuntimeMode.CHAT, CHAT_DEFAULT, ["memory_write"]) == (
        "memory_search",
    )


def test_narrow_only_removes() -> None:
    assert core.narrow(("a", "b", "c"), ["c", "z", "a"]) == ("a", "c")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("t-1", True),
        ("", False),
        ("x" * 128, True),
        ("x" * 129, False),
        ("a b", False),
        ("a\x00", False),
    ],
)
def test_identifiers_are_short_and_printable(value: str, ok: bool) -> None:
    if ok:
        assert core.check_identifier(value, "run_id") == value
    else:
        with pytest.raises(InvalidArgument):
            core.check_identifier(value, "run_id")


def test_inputs_need_a_message() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.check_inputs([], 100)
    assert field_of(info) == "messages"


def test_last_input_must_be_the_users_with_text() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.check_inputs([user("hi"), assistant("hello")], 100)
    assert field_of(info) == "messages[1].role"
    with pytest.raises(InvalidArgument) as info:
        core.check_inputs([user("   ")], 100)
    assert field_of(info) == "messages[0].content"


def test_input_text_is_bounded() -> None:
    with pytest.raises(InvalidArgument) as info:
        core.check_inputs([user("x" * 11)], 10)
    assert field_of(info) == "messages[0].content"


def test_client_tool_results_are_accepted_input() -> None:
    results = assistant([ToolResultBlock("c1", "confirm", "yes")])
    core.check_inputs([results, user("go on")], 100)
    assert core.input_kind(results, "m") is MessageKind.TOOL_RESULT


def test_metadata_hides_only_automation_input() -> None:
    chat = core.message_metadata(RuntimeMode.CHAT, CHAT_DEFAULT, MessageKind.USER_MESSAGE)
    assert chat == {
        "hidden_from_user": False,
        "origin": "chat",
        "executor": "worker",
        "execution_profile_name": "chat_default",
    }
    auto = AUTOMATION_MEMORY_DEFAULT
    assert core.message_metadata(RuntimeMode.AUTOMATION, auto, MessageKind.USER_MESSAGE)[
        "hidden_from_user"
    ]
    assert not core.message_metadata(RuntimeMode.AUTOMATION, auto, MessageKind.AGENT_REPLY)[
        "hidden_from_user"
    ]


def test_event_log_key_separates_owners() -> None:
    assert core.event_log_key("alice", "run-1") != core.event_log_key("bob", "run-1")
    # The key is unambiguous because an owner id never contains the separator.
    assert not is_owner_id("alice/x")


def test_sequence_numbers_are_dense_from_one() -> None:
    seq = core.Sequencer()
    assert [seq.next() for _ in range(5)] == [1, 2, 3, 4, 5]


def test_open_spans_close_innermost_first_and_keep_streamed_text() -> None:
    spans = core.OpenSpans()
    for event in [
        convert.step_started("router"),
        convert.step_finished("router"),
        convert.step_started("worker"),
        RunEvent(text_message_start=TextMessageStart(message_id="m1")),
        RunEvent(text_message_content=TextMessageContent(message_id="m1", delta="Hel")),
        RunEvent(text_message_content=TextMessageContent(message_id="m1", delta="lo")),
        RunEvent(reasoning_start=ReasoningStart(message_id="r1")),
        RunEvent(tool_call_start=ToolCallStart(tool_call_id="c1")),
    ]:
        convert.observe(spans, event)
    assert [(k.payload, ident) for k, ident in spans.closing()] == [
        ("tool_call_end", "c1"),
        ("reasoning_end", "r1"),
        ("text_message_end", "m1"),
        ("step_finished", "worker"),
    ]
    assert spans.partial_texts(stored_ids=[]) == [("m1", "Hello")]
    assert spans.partial_texts(stored_ids=["m1"]) == []


def test_user_errors_never_show_internals() -> None:
    assert core.user_error(Internal("db password wrong at host x")) == (
        "INTERNAL",
        "the run failed because of an internal error",
    )
    code, message = core.user_error(Unavailable("connect failed: 10.0.0.3:50053"))
    assert code == "UNAVAILABLE" and "10.0.0.3" not in message
    assert core.user_error(DeadlineExceeded("deadline"))[0] == "DEADLINE_EXCEEDED"
    assert core.user_error(InvalidArgument("thread_id", "belongs to automation")) == (
        "INVALID_ARGUMENT",
        "thread_id: belongs to automation",
    )
    assert core.as_domain_error(RuntimeError("boom")).message == "internal error"


def test_a_chat_run_may_not_name_a_jobs_thread() -> None:
    with pytest.raises(FailedPrecondition) as err:
        core.check_thread_for_origin("automation:job-1", RuntimeMode.CHAT)
    assert err.value.reason == "AUTOMATION_THREAD"
    assert [f for f, _ in err.value.violations] == ["thread_id"]


def test_automation_runs_and_other_chat_threads_pass_the_thread_rule() -> None:
    core.check_thread_for_origin("automation:job-1", RuntimeMode.AUTOMATION)
    core.check_thread_for_origin("my-automation:notes", RuntimeMode.CHAT)


def test_a_model_that_is_unavailable_is_not_retried_on_another_executor_replica() -> None:
    from shared.model.base import ModelStreamBroken, ModelUnavailable

    assert core.retries_executor_step(Unavailable("replica down"), produced=False, attempt=1)
    assert not core.retries_executor_step(ModelUnavailable("model down"), produced=False, attempt=1)
    assert not core.retries_executor_step(ModelStreamBroken("cut"), produced=False, attempt=1)
