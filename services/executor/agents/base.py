"""What an agent is: something that runs one step of a run and streams what it produces."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from services.executor.events import StepItem
from shared.approvals import Decision
from shared.domain import ExecutorKind
from shared.messages import Msg
from shared.model.base import ToolSpec
from shared.profiles import ExecutionProfile


@dataclass(frozen=True)
class StepRequest:
    run_id: str
    thread_id: str
    # The run's owner: every tool runs on their behalf.
    owner: str
    executor: ExecutorKind
    profile: ExecutionProfile
    context: tuple[Msg, ...]
    input: Msg
    # Server-side tools the run authorised (names; this executor knows their specs).
    tools: tuple[str, ...]
    # Client-side tools: a call to one ends the step.
    client_tools: tuple[ToolSpec, ...]
    time_zone: str
    reply_message_id: str
    # Server-side tools the run declared (shared.tools: declared ∩ allowlist ∩ registered).
    declared_tools: tuple[str, ...] = ()
    # The memory executor: history's sequence horizon of `context` (0: unknown).
    sequence_horizon: int = 0
    # Decisions on the thread's pending approvals (shared.approvals), run or refused first.
    decisions: tuple[Decision, ...] = ()

    @property
    def declared(self) -> tuple[str, ...]:
        """The declaration; an orchestrator that sends none declares its authorised tools."""
        return self.declared_tools or self.tools


class Agent(Protocol):
    def run(self, step: StepRequest) -> AsyncGenerator[StepItem, None]:
        """Stream the step's events and finished messages; a StepResult comes last."""
        ...
