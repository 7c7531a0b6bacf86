"""The tool policy (shared/tools.py): effective tools and the reason of every refusal."""

from __future__ import annotations

import hashlib

import pytest

from shared.domain import ExecutorKind
from shared.errors import InvalidArgument
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, CHAT_DEFAULT, ExecutionProfile, ToolPolicy
from shared.tools import (
    REGISTERED_TOOLS,
    DenialReason,
    KnownTools,
    arguments_digest,
    authorize,
    check_client_tools,
    effective_tools,
)


def profile(*allowlist: str) -> ExecutionProfile:
    return ExecutionProfile(
        name="p",
        enable_router=False,
        executor=ExecutorKind.MEMORY,
        tool_policy=ToolPolicy(allowlist=allowlist),
    )


def test_effective_tools_are_declared_and_allowed_and_registered_in_declared_order() -> None:
    declared = ["memory_forget", "web_search", "memory_search", "memory_write", "memory_forget"]
    assert effective_tools(
        declared, profile("memory_write", "memory_forget", "web_search"), REGISTERED_TOOLS
    ) == (
        "memory_forget",
        "memory_write",
    )


def test_empty_allowlist_allows_no_tool() -> None:
    assert effective_tools(REGISTERED_TOOLS, profile(), REGISTERED_TOOLS) == ()
    assert (
        authorize("memory_search", REGISTERED_TOOLS, profile(), REGISTERED_TOOLS)
        is DenialReason.NOT_IN_PROFILE
    )


def test_chat_default_gives_the_worker_memory_search_only() -> None:
    assert effective_tools(CHAT_DEFAULT.tool_policy.allowlist, CHAT_DEFAULT, REGISTERED_TOOLS) == (
        "memory_search",
    )


def test_automation_memory_default_allows_write_and_forget() -> None:
    declared = ["memory_write", "memory_forget"]
    assert effective_tools(declared, AUTOMATION_MEMORY_DEFAULT, REGISTERED_TOOLS) == tuple(declared)


def test_authorize_gives_the_most_specific_reason() -> None:
    p = profile("memory_write", "memory_forget")
    declared = ["memory_write"]
    assert authorize("memory_write", declared, p, REGISTERED_TOOLS) is None
    assert authorize("rm_rf", declared, p, REGISTERED_TOOLS) is DenialReason.NOT_REGISTERED
    assert authorize("memory_search", declared, p, REGISTERED_TOOLS) is DenialReason.NOT_IN_PROFILE
    assert authorize("memory_forget", declared, p, REGISTERED_TOOLS) is DenialReason.NOT_DECLARED


def test_a_tool_allowed_and_declared_but_not_registered_is_not_registered() -> None:
    p = profile("web_search")
    assert (
        authorize("web_search", ["web_search"], p, REGISTERED_TOOLS) is DenialReason.NOT_REGISTERED
    )
    assert effective_tools(["web_search"], p, REGISTERED_TOOLS) == ()


def test_authorize_agrees_with_effective_tools() -> None:
    p = profile("memory_write", "memory_search")
    declared = ["memory_search", "memory_forget"]
    for name in [*REGISTERED_TOOLS, "other"]:
        allowed = authorize(name, declared, p, REGISTERED_TOOLS) is None
        assert allowed == (name in effective_tools(declared, p, REGISTERED_TOOLS))


def test_arguments_digest_is_sha256_hex_of_the_text() -> None:
    args = '{"content": "secret"}'
    assert arguments_digest(args) == hashlib.sha256(args.encode()).hexdigest()
    assert "secret" not in arguments_digest(args)


KNOWN = KnownTools(frozenset({"memory_search", "weather"}), frozenset({"notes"}))


@pytest.mark.parametrize(
    ("client", "field"),
    [
        (["lookup", "memory_search"], "tools[1].name"),
        (["weather"], "tools[0].name"),
        (["notes.add_note"], "tools[0].name"),
        (["notes.anything"], "tools[0].name"),
        (["lookup", "lookup"], "tools[1].name"),
        ([""], "tools[0].name"),
    ],
)
def test_a_client_tool_named_like_a_server_tool_or_twice_is_invalid(
    client: list[str], field: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_client_tools(client, KNOWN.has, "tools")
    assert info.value.violations[0][0] == field


def test_client_tools_outside_the_server_tools_names_are_valid() -> None:
    # A pattern is not a tool name: a client tool "*" names only itself.
    check_client_tools(["lookup", "notes", "note.add", "*", "weather2"], KNOWN.has, "tools")
