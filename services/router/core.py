"""Pure rules of the router: the deterministic routing rule, and the clamp that keeps any
decision (the rule's or a model's) inside the profile. No I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shared.domain import ExecutorKind
from shared.messages import Usage
from shared.profiles import ExecutionProfile


@dataclass(frozen=True)
class RouteInput:
    profile: ExecutionProfile
    input_text: str
    # The run's tools: a decision may narrow them, never widen them.
    tools: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    executor: ExecutorKind
    tool_names: tuple[str, ...]
    reason: str
    # What the model call that decided used (None: the rule decided, no model was asked).
    usage: Usage | None = None


def _mentions(text: str, tool: str) -> bool:
    """Whether `text` names `tool` as a word ("memory_write" or "memory write")."""
    spelled = r"[\s_-]+".join(re.escape(part) for part in re.split(r"[_\-\s]+", tool) if part)
    if not spelled:
        return False
    return re.search(rf"(?<![\w]){spelled}(?![\w])", text, flags=re.IGNORECASE) is not None


def route_by_rule(request: RouteInput) -> Route:
    """The scripted default: the profile's executor; the tools the input names, else all."""
    named = tuple(t for t in request.tools if _mentions(request.input_text, t))
    if named:
        return Route(request.profile.executor, named, "the input names these tools")
    return Route(request.profile.executor, request.tools, "no tool named: all of the run's tools")


def has_choice(request: RouteInput) -> bool:
    """Whether a model could decide anything the rule does not: the executor is always the
    profile's, so only which tools; with at most one tool, or when the input names the
    tools it wants, the rule's answer is the answer."""
    if len(request.tools) <= 1:
        return False
    return not any(_mentions(request.input_text, t) for t in request.tools)


def clamp(decision: Route, request: RouteInput) -> Route:
    """Keep a decision inside the profile: its executor, and only tools the run already has.

    This is the one guarantee of the router: whatever decided (a rule, a model, text a user
    injected), the result never widens what the profile and the run allow.
    """
    allowed = set(request.tools)
    seen: set[str] = set()
    tools = []
    for name in decision.tool_names:
        if name in allowed and name not in seen:
            seen.add(name)
            tools.append(name)
    reason = decision.reason
    if decision.executor != request.profile.executor:
        reason = f"{reason} (executor kept to the profile's)"
    return Route(request.profile.executor, tuple(tools), reason, decision.usage)


ROUTING_PROMPT = (
    "You route one step of an agent run. Tools available: {tools}. "
    'Answer with JSON only: {{"tools": [names of the tools the step needs], "reason": "..."}}.'
)


def routing_prompt(tools: Sequence[str]) -> str:
    return ROUTING_PROMPT.format(tools=", ".join(tools) or "none")


def parse_model_route(text: str, request: RouteInput) -> Route | None:
    """A model's JSON answer as a decision (clamped by the caller); None if it is not one."""
    match = re.search(r"\{.*\}", text, flags=re.DOTALL)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        return None
    names: Iterable[object] = data["tools"]
    executor = request.profile.executor
    raw_executor = data.get("executor")
    if isinstance(raw_executor, str) and raw_executor in ExecutorKind.__members__.values():
        executor = ExecutorKind(raw_executor)
    reason = data.get("reason")
    return Route(
        executor,
        tuple(n for n in names if isinstance(n, str)),
        reason if isinstance(reason, str) and reason else "the model's decision",
    )
