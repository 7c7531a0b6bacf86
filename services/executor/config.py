"""Executor settings that are not (yet) in shared.settings: AGENTMESH_EXECUTOR_* variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ExecutorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMESH_EXECUTOR_", extra="ignore", frozen=True)

    # Rounds of server-side tool results a step may feed back to the model; the turn after
    # the last round is offered no tools, so a step makes at most this + 1 model turns.
    max_tool_rounds: int = Field(default=8, ge=0, le=100)
    # Deadline of one tool execution.
    tool_timeout_seconds: float = Field(default=30.0, gt=0)
