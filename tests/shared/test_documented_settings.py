"""Every AGENTMESH_* variable the documentation names is one the code reads.

docs/tools.md once named AGENTMESH_TOOL_TIMEOUT_SECONDS, which nothing read (the executor's
is AGENTMESH_EXECUTOR_TOOL_TIMEOUT_SECONDS): an operator who set it changed nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]

# The modules whose pydantic-settings classes read the environment.
SETTINGS_MODULES = (
    "shared.settings",
    "shared.model.factory",
    "services.executor.config",
    "services.scheduler.settings",
    "services.orchestrator.service",
)
# Read outside a settings class: the process's targets (services/targets.py), the base URL
# the self-hosted model cards follow (their base_url_env), the CLI's gateway and token
# (agentmesh_client), the test passes' backend and shape (tests/conftest.py).
READ_ELSEWHERE = {
    "AGENTMESH_MODEL_BASE_URL": ROOT / "shared" / "model" / "factory.py",
    "AGENTMESH_TARGET": ROOT / "services" / "targets.py",
    "AGENTMESH_URL": ROOT / "agentmesh_client" / "cli.py",
    "AGENTMESH_TOKEN": ROOT / "agentmesh_client" / "cli.py",
    "AGENTMESH_TEST_BACKEND": ROOT / "tests" / "conftest.py",
    "AGENTMESH_TEST_SHAPE": ROOT / "tests" / "e2e" / "conftest.py",
}
VARIABLE = re.compile(r"AGENTMESH_[A-Z0-9_]*[A-Z0-9]")


def settings_variables() -> set[str]:
    names: set[str] = set()
    for module_name in SETTINGS_MODULES:
        for value in vars(importlib.import_module(module_name)).values():
            if isinstance(value, type) and issubclass(value, BaseSettings):
                prefix = value.model_config.get("env_prefix", "")
                names.update(f"{prefix}{field}".upper() for field in value.model_fields)
    return names


def documented_variables() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name in set(VARIABLE.findall(path.read_text(encoding="utf-8"))):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_documented_variable_is_read_by_the_code() -> None:
    known = settings_variables()
    unread = {
        name: where
        for name, where in documented_variables().items()
        if name not in known and name not in READ_ELSEWHERE
    }
    assert not unread, f"documented but read by nothing: {unread}"


def test_the_variables_read_outside_settings_are_read_where_this_test_says() -> None:
    for name, path in READ_ELSEWHERE.items():
        assert name in path.read_text(encoding="utf-8"), (name, path)
