"""Execution profiles: strict validation and the registry file (AGENTMESH_PROFILES_FILE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.errors import InvalidArgument
from shared.profiles import (
    BUILT_INS,
    ProfileFileError,
    ProfileRegistry,
    parse_profile,
    profile_from_pb,
    profile_to_pb,
)
from shared.tools import REGISTERED_TOOLS

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
profiles:
  - name: chat_no_router
    enable_router: false
    executor: worker
    tool_policy: {mode: intersection, allowlist: [memory_search]}
  - name: memory_last_50
    enable_router: false
    executor: memory
    tool_policy: {allowlist: [memory_write]}
    history_policy: {window: "last_n:50"}
"""


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"enable_router": True, "executor": "worker", "colour": "red"}, "p.colour"),
        ({"enable_router": True, "executor": "planner"}, "p.executor"),
        ({"enable_router": True}, "p.executor"),
        ({"enable_router": False}, "p.executor"),
        ({"enable_router": False, "executor": None}, "p.executor"),
        ({"executor": "worker"}, "p.enable_router"),
        (
            {"enable_router": True, "executor": "worker", "tool_policy": {"allowlist": ["rm_rf"]}},
            "p.tool_policy.allowlist",
        ),
        (
            {"enable_router": True, "executor": "worker", "tool_policy": {"mode": "union"}},
            "p.tool_policy.mode",
        ),
        (
            {"enable_router": True, "executor": "worker", "history_policy": {"window": "forever"}},
            "p.history_policy.window",
        ),
        (
            {"enable_router": True, "executor": "worker", "history_policy": {"window": "all\n"}},
            "p.history_policy.window",
        ),
        # Seed 001 §6.2: a required boolean, not something that converts to one.
        ({"enable_router": "no", "executor": "memory"}, "p.enable_router"),
        ({"enable_router": 1, "executor": "memory"}, "p.enable_router"),
        ({"enable_router": "true", "executor": "memory"}, "p.enable_router"),
    ],
)
def test_bad_profile_is_refused_naming_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_profile(data, registered_tools=REGISTERED_TOOLS, field="p")
    assert info.value.violations[0][0] == field


def test_no_router_and_no_executor_says_a_run_needs_an_executor() -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_profile({"enable_router": False}, field="p")
    # The message names only the field it is about (the sibling's name differs by edge).
    assert info.value.violations == (
        (
            "p.executor",
            "is required when the router is off (a run needs an executor): worker or memory",
        ),
    )


def test_registry_adds_the_files_profiles_to_the_built_ins(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(GOOD)
    registry = ProfileRegistry.load(path, REGISTERED_TOOLS)
    assert registry.names() == sorted([*BUILT_INS, "chat_no_router", "memory_last_50"])
    assert registry.get("memory_last_50").history_policy.window == "last_n:50"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (GOOD + "    colour: red\n", "profiles[1].colour"),
        (GOOD.replace("executor: memory", "executor: planner"), "profiles[1].executor"),
        (GOOD.replace("    executor: memory\n", ""), "profiles[1].executor"),
        (
            GOOD.replace("allowlist: [memory_write]", "allowlist: [memory_write, rm_rf]"),
            "profiles[1].tool_policy.allowlist",
        ),
        (GOOD.replace("memory_last_50", "chat_no_router"), "profiles[1].name"),
        (GOOD.replace("memory_last_50", "chat_default"), "profiles[1].name"),
        ("profiles: [{enable_router: true, executor: worker}]", "profiles[0].name"),
        ("profiles: {a: 1}", "'profiles'"),
        ("other: []", "'profiles'"),
        ("profiles: [", "not valid YAML"),
    ],
)
def test_bad_file_is_refused_whole_naming_the_entry_and_field(
    tmp_path: Path, text: str, names: str
) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    with pytest.raises(ProfileFileError) as info:
        ProfileRegistry.load(path, REGISTERED_TOOLS)
    assert str(path) in str(info.value) and names in str(info.value)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileFileError, match="cannot read"):
        ProfileRegistry.load(tmp_path / "absent.yaml", REGISTERED_TOOLS)


def test_orchestrator_with_a_bad_profiles_file_exits_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(GOOD.replace("executor: memory", "executor: planner"))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "protos")]),
        AGENTMESH_PROFILES_FILE=str(path),
        AGENTMESH_PORT="0",
        AGENTMESH_DATA_DIR=str(tmp_path / "data"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "services.orchestrator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "AGENTMESH_PROFILES_FILE" in done.stderr and "profiles[1].executor" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_converted_profile_is_a_new_message_each_time() -> None:
    # The conversion is remembered per profile; a caller changing its message changes no
    # one else's.
    profile = BUILT_INS["chat_default"]
    first = profile_to_pb(profile)
    first.name = "changed"
    first.tool_policy.allowlist.append("other")
    again = profile_to_pb(profile)
    assert again.name == profile.name
    assert list(again.tool_policy.allowlist) == list(profile.tool_policy.allowlist)
    assert profile_from_pb(again) == profile


def test_a_bad_profile_message_is_refused_every_time_naming_the_callers_field() -> None:
    pb = profile_to_pb(BUILT_INS["chat_default"])
    pb.history_policy.window = "yesterday"
    for field in ("profile", "job.execution_profile"):
        with pytest.raises(InvalidArgument) as err:
            profile_from_pb(pb, field)
        assert err.value.violations[0][0] == f"{field}.history_policy.window"
