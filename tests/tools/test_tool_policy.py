"""The tools file's validation and the policy over outside tools (names and patterns)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.scheduler.core import validate_config
from shared.domain import ExecutorKind
from shared.errors import InvalidArgument
from shared.profiles import ExecutionProfile, ProfileFileError, ProfileRegistry, ToolPolicy
from shared.tool_config import ToolFileError, load_tools_config, parse_tools_config
from shared.tools import (
    DenialReason,
    KnownTools,
    authorize,
    effective_tools,
    planned_tools,
)

REGISTERED = ("memory_search", "notes.add_note", "notes.list_notes", "crm.lookup_order")
KNOWN = KnownTools(frozenset({"memory_search", "crm.lookup_order"}), frozenset({"notes"}))


def profile(*allowlist: str) -> ExecutionProfile:
    return ExecutionProfile(
        name="p",
        enable_router=False,
        executor=ExecutorKind.WORKER,
        tool_policy=ToolPolicy(allowlist=allowlist),
    )


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"mcp_servers": [{"name": "a", "transport": "http"}]}, "mcp_servers[0]: url"),
        (
            {"mcp_servers": [{"name": "a b", "transport": "stdio", "command": "x"}]},
            "mcp_servers[0].name",
        ),
        (
            {"mcp_servers": [{"name": "a", "transport": "stdio", "command": "x", "bogus": 1}]},
            "mcp_servers[0].bogus",
        ),
        ({"http_tools": [{"name": "nodot", "url": "http://h"}]}, "http_tools[0].name"),
        ({"http_tools": [{"name": "a.b", "url": "ftp://h"}]}, "http_tools[0].url"),
        (
            {"http_tools": [{"name": "a.b", "url": "http://h", "parameters": {"type": "array"}}]},
            "http_tools[0].parameters",
        ),
        (
            {"http_tools": [{"name": "a.b", "url": "http://h", "timeout_seconds": 0}]},
            "http_tools[0].timeout_seconds",
        ),
        (
            {"http_tools": [{"name": "a.b", "url": "http://h", "owner": {"via": "header"}}]},
            "http_tools[0].owner",
        ),
        (
            {
                "http_tools": [
                    {"name": "a.b", "url": "http://h"},
                    {"name": "a.b", "url": "http://h"},
                ]
            },
            "http_tools[1].name",
        ),
        (
            {
                "mcp_servers": [{"name": "a", "transport": "stdio", "command": "x"}],
                "http_tools": [{"name": "a.b", "url": "http://h"}],
            },
            "http_tools[0].name",
        ),
    ],
)
def test_a_bad_tools_file_is_refused_naming_the_field(data: object, field: str) -> None:
    with pytest.raises(
        ToolFileError, match=r"^tools\.yaml: " + field.replace("[", r"\[").replace("]", r"\]")
    ):
        parse_tools_config(data, "tools.yaml")


def test_tools_file_that_is_not_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text("mcp_servers: [unclosed")
    with pytest.raises(ToolFileError, match=r"tools\.yaml: not valid YAML"):
        load_tools_config(path)


def test_allowlist_patterns_select_the_registered_tools_of_a_namespace() -> None:
    assert effective_tools(["notes.*"], profile("notes.*"), REGISTERED) == (
        "notes.add_note",
        "notes.list_notes",
    )
    assert effective_tools(["*"], profile("notes.list_*", "memory_search"), REGISTERED) == (
        "memory_search",
        "notes.list_notes",
    )
    assert effective_tools(["notes.*"], profile(), REGISTERED) == ()


def test_a_call_outside_the_pattern_is_refused_with_the_most_specific_reason() -> None:
    p = profile("notes.list_*")
    assert authorize("notes.list_notes", ["notes.*"], p, REGISTERED) is None
    assert authorize("notes.add_note", ["notes.*"], p, REGISTERED) is DenialReason.NOT_IN_PROFILE
    assert authorize("notes.gone", ["notes.*"], p, REGISTERED) is DenialReason.NOT_REGISTERED
    assert authorize("notes.list_notes", ["crm.*"], p, REGISTERED) is DenialReason.NOT_DECLARED


def test_known_tools_accept_any_tool_of_a_configured_mcp_server_and_nothing_else() -> None:
    assert (
        KNOWN.knows("notes.anything") and KNOWN.knows("notes.*") and KNOWN.knows("crm.lookup_order")
    )
    assert (
        not KNOWN.knows("weather.now") and not KNOWN.knows("weather.*") and not KNOWN.knows("notes")
    )
    assert KnownTools.of(
        parse_tools_config({"http_tools": [{"name": "crm.x", "url": "http://h"}]})
    ).knows("crm.x")


def test_planned_declaration_keeps_known_entries_the_allowlist_may_allow() -> None:
    p = profile("notes.*", "crm.lookup_order")
    assert planned_tools(
        ["notes.*", "crm.lookup_order", "memory_search", "weather.*"], p, KNOWN
    ) == (
        "notes.*",
        "crm.lookup_order",
    )


def test_a_job_may_declare_outside_tools_the_deployment_knows() -> None:
    assert validate_config("go", ["notes.add_note"], known=KNOWN).tools == ("notes.add_note",)
    with pytest.raises(InvalidArgument) as err:
        validate_config("go", ["weather.now"], known=KNOWN)
    assert err.value.message.startswith("job.config.tools: unknown tools: weather.now")


def test_a_profiles_file_may_allow_a_namespace_pattern(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(
        "profiles: [{name: notes_chat, enable_router: false, executor: worker,"
        " tool_policy: {allowlist: ['notes.*']}}]"
    )
    assert ProfileRegistry.load(path, KNOWN).get("notes_chat").tool_policy.allowlist == ("notes.*",)
    path.write_text(
        "profiles: [{name: w, enable_router: false, executor: worker,"
        " tool_policy: {allowlist: ['weather.*']}}]"
    )
    with pytest.raises(ProfileFileError, match=r"profiles\[0\]\.tool_policy\.allowlist"):
        ProfileRegistry.load(path, KNOWN)
