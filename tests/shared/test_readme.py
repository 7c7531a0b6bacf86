"""The README documents every setting."""

from __future__ import annotations

from pathlib import Path

from shared.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme_table() -> None:
    missing = [
        f"AGENTMESH_{name.upper()}"
        for name in Settings.model_fields
        if f"`AGENTMESH_{name.upper()}`" not in README
    ]
    assert not missing, f"document these in README.md: {missing}"


def test_every_service_setting_is_in_the_readme() -> None:
    from services.executor.config import ExecutorConfig
    from services.orchestrator.service import RunSettings
    from services.scheduler.settings import SchedulerSettings

    missing = [
        f"{cls.model_config['env_prefix']}{name}".upper()
        for cls in (ExecutorConfig, RunSettings, SchedulerSettings)
        for name in cls.model_fields
        if f"`{cls.model_config['env_prefix']}{name}`".upper() not in README
    ]
    assert not missing, f"document these in README.md: {missing}"


def test_readme_shows_the_two_commands() -> None:
    assert "make run" in README and "make test" in README
