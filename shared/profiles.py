"""Execution profiles: which topology a run has (router on or off, which executor, which
tools, which context window) and who its agent is (AgentConfig: system prompt template,
model card, sampling, output limit), validated strictly, with the built-in registry."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol, TypeVar, runtime_checkable

import yaml
from agentmesh.type.v1 import execution_profile_pb2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.domain import EXECUTOR_FROM_PB, EXECUTOR_TO_PB, ExecutorKind
from shared.errors import InvalidArgument

_K = TypeVar("_K")
_V = TypeVar("_V")

# \Z, not $: "all\n" is not a window.
WINDOW_RE = re.compile(r"^(all|today_yesterday|last_n:[1-9][0-9]{0,5})\Z")


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["intersection"] = "intersection"
    allowlist: tuple[str, ...] = ()
    # Tools (names or patterns) whose every call waits for a person's approval (docs/tools.md).
    requires_approval: tuple[str, ...] = ()


class HistoryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    window: str = "all"

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if not WINDOW_RE.match(value):
            raise ValueError("must be all, today_yesterday or last_n:<N> (N from 1 to 999999)")
        return value


class MemoryPolicy(BaseModel):
    """Which of the owner's memories a run sees: off, or recall (the `top_k` memories most
    relevant to the input, of at least `min_relevance`, within `max_tokens` of the context;
    services/executor/recall.py). With `conversation`, recall also searches the owner's
    past chat messages (the memory service's conversation index), ranked with the memories
    under the same bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["off", "recall"] = "off"
    top_k: int = Field(default=5, ge=1, le=50)
    min_relevance: float = Field(default=0.0, ge=0, le=1)
    max_tokens: int = Field(default=400, ge=1, le=100_000)
    conversation: StrictBool = False


# What a system prompt template may use: the owner's zone and their local date and time,
# and where the recalled memories go (MemoryPolicy; without it they follow the prompt).
PROMPT_FIELDS = ("time_zone", "local_date", "local_time", "weekday", "memories")
MEMORIES_FIELD = "memories"
CARD_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class AgentConfig(BaseModel):
    """Who the profile's agent is. Every field is optional: unset, the executor's default
    (its configured card, the card's parameter defaults, the agent's own prompt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # A str.format template over PROMPT_FIELDS ("You help {local_date}'s user; zone {time_zone}").
    system_prompt: str = Field(default="", max_length=8000)
    # A model card name (models/<name>.yaml); its provider must be the configured one.
    model_card: str = ""
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)

    @field_validator("system_prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
        except ValueError as err:
            raise ValueError(
                f"not a valid template ({err}); write a literal brace as {{{{ or }}}}"
            ) from None
        for name in names:
            if name not in PROMPT_FIELDS:
                raise ValueError(
                    f"unknown placeholder {{{name}}} (known: {', '.join(PROMPT_FIELDS)})"
                )
        return value

    @field_validator("model_card")
    @classmethod
    def _card_name(cls, value: str) -> str:
        if value and not CARD_NAME_RE.match(value):
            raise ValueError("must be a model card name (lowercase letters, digits, . _ -)")
        return value

    def options(self) -> dict[str, float | int]:
        """The model call options this config sets (checked against the card by the caller)."""
        values = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        return {k: v for k, v in values.items() if v is not None}

    def places_memories(self) -> bool:
        """Whether the template has a {memories} placeholder."""
        return any(
            name == MEMORIES_FIELD for _, name, _, _ in string.Formatter().parse(self.system_prompt)
        )

    def render_prompt(self, time_zone: str, now: datetime, memories: str = "") -> str:
        """The system prompt for an owner in `time_zone` at `now` (aware), with the recalled
        memories block at its {memories} placeholder."""
        if not self.system_prompt:
            return ""
        from zoneinfo import ZoneInfo

        local = now.astimezone(ZoneInfo(time_zone))
        return self.system_prompt.format(
            time_zone=time_zone,
            local_date=local.date().isoformat(),
            local_time=local.strftime("%H:%M"),
            weekday=local.strftime("%A"),
            memories=memories,
        )


class ExecutionProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(default="custom", min_length=1, max_length=100)
    # Seed 001 §6.2: a required boolean; "no", 1 or "true" are not one.
    enable_router: StrictBool
    executor: ExecutorKind
    tool_policy: ToolPolicy = ToolPolicy()
    history_policy: HistoryPolicy = HistoryPolicy()
    agent: AgentConfig = AgentConfig()
    memory: MemoryPolicy = MemoryPolicy()

    @model_validator(mode="before")
    @classmethod
    def _needs_an_executor(cls, data: object) -> object:
        # Seed 001 §4.4: a run always has an executor; without a router nothing else could
        # run, so that case gets its own message.
        if isinstance(data, dict) and data.get("executor") in (None, ""):
            if data.get("enable_router") is False:
                raise _Missing(
                    "executor",
                    "is required when the router is off (a run needs an executor): "
                    "worker or memory",
                )
            raise _Missing("executor", "is required: worker or memory")
        return data


class _Missing(ValueError):
    """A required field is absent; names the field (pydantic reports model errors at the root)."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


# The worker's one server-side tool: reading the user's own memories. An empty allowlist
# would give a profile no server-side tools at all (shared.tools).
CHAT_DEFAULT = ExecutionProfile(
    name="chat_default",
    enable_router=True,
    executor=ExecutorKind.WORKER,
    tool_policy=ToolPolicy(allowlist=("memory_search",)),
    # The owner's memories and, for what was said but never extracted, their past chat
    # messages (the conversation index), ranked together.
    memory=MemoryPolicy(mode="recall", conversation=True),
)
AUTOMATION_MEMORY_DEFAULT = ExecutionProfile(
    name="automation_memory_default",
    enable_router=False,
    executor=ExecutorKind.MEMORY,
    tool_policy=ToolPolicy(allowlist=("memory_write", "memory_forget")),
    history_policy=HistoryPolicy(window="today_yesterday"),
    # The memories the new messages may update or contradict: the agent rewrites them
    # instead of writing a near-duplicate.
    memory=MemoryPolicy(mode="recall", top_k=20, max_tokens=800),
)
BUILT_INS = {p.name: p for p in (CHAT_DEFAULT, AUTOMATION_MEMORY_DEFAULT)}


def _first_error(err: ValidationError, prefix: str) -> InvalidArgument:
    first = err.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, _Missing):
        return InvalidArgument(f"{prefix}.{cause.field}", cause.description)
    loc = ".".join(str(p) for p in first["loc"])
    field = f"{prefix}.{loc}" if loc else prefix
    return InvalidArgument(field, first["msg"])


@runtime_checkable
class KnowsTools(Protocol):
    """The deployment's tools as shared.tools.KnownTools knows them: names and patterns."""

    def knows(self, entry: str) -> bool: ...


def parse_profile(
    data: object,
    *,
    registered_tools: Iterable[str] | KnowsTools | None = None,
    field: str = "execution_profile",
    allow_agent: bool = False,
) -> ExecutionProfile:
    """Validate a profile from JSON/YAML data; INVALID_ARGUMENT naming the field otherwise.

    `agent` is the operator's (the profiles file, and the profile a run carries between the
    services): data from elsewhere (a job's profile over HTTP) may not set it."""
    try:
        profile = ExecutionProfile.model_validate(data)
    except ValidationError as err:
        raise _first_error(err, field) from None
    if profile.executor is ExecutorKind.MEMORY and profile.tool_policy.requires_approval:
        raise InvalidArgument(
            f"{field}.tool_policy.requires_approval",
            "a memory profile runs with no person to ask; none of its tools can wait for approval",
        )
    if not allow_agent and profile.agent != AgentConfig():
        raise InvalidArgument(f"{field}.agent", "is set by the operator's profiles file only")
    if registered_tools is not None:
        # Names, or the deployment's KnownTools (shared.tools), which also knows patterns.
        knows: Callable[[str], bool]
        if isinstance(registered_tools, KnowsTools):
            knows = registered_tools.knows
        else:
            knows = set(registered_tools).__contains__
        unknown = [t for t in profile.tool_policy.allowlist if not knows(t)]
        if unknown:
            raise InvalidArgument(
                f"{field}.tool_policy.allowlist", f"unknown tools: {', '.join(unknown)}"
            )
    return profile


# Runs carry a handful of distinct profiles, and each is converted on every hop (the
# orchestrator sends it to history, the router and the executor; each of them reads it
# back): both directions are remembered, bounded, and only for what converted cleanly.
# ExecutionProfile is frozen all the way down, so one instance may serve every caller.
_CONVERTED_MAX = 256
_TO_PB: dict[ExecutionProfile, bytes] = {}
_FROM_PB: dict[bytes, ExecutionProfile] = {}


def _remember(cache: dict[_K, _V], key: _K, value: _V) -> _V:
    if len(cache) >= _CONVERTED_MAX:
        cache.pop(next(iter(cache)))  # the oldest
    cache[key] = value
    return value


def profile_to_pb(profile: ExecutionProfile) -> execution_profile_pb2.ExecutionProfile:
    """A new message each call (callers may change it); built once per distinct profile."""
    raw = _TO_PB.get(profile)
    if raw is None:
        raw = _remember(_TO_PB, profile, _build_pb(profile).SerializeToString())
    return execution_profile_pb2.ExecutionProfile.FromString(raw)


def _build_pb(profile: ExecutionProfile) -> execution_profile_pb2.ExecutionProfile:
    return execution_profile_pb2.ExecutionProfile(
        name=profile.name,
        enable_router=profile.enable_router,
        executor=EXECUTOR_TO_PB[profile.executor],
        tool_policy=execution_profile_pb2.ToolPolicy(
            mode=execution_profile_pb2.TOOL_POLICY_MODE_INTERSECTION,
            allowlist=list(profile.tool_policy.allowlist),
            requires_approval=list(profile.tool_policy.requires_approval),
        ),
        history_policy=execution_profile_pb2.HistoryPolicy(window=profile.history_policy.window),
        agent=agent_to_pb(profile.agent) if profile.agent != AgentConfig() else None,
        memory=memory_to_pb(profile.memory) if profile.memory != MemoryPolicy() else None,
    )


_MEMORY_MODE_TO_PB = {
    "off": execution_profile_pb2.MEMORY_MODE_OFF,
    "recall": execution_profile_pb2.MEMORY_MODE_RECALL,
}
_MEMORY_MODE_FROM_PB = {v: k for k, v in _MEMORY_MODE_TO_PB.items()}


def memory_to_pb(policy: MemoryPolicy) -> execution_profile_pb2.MemoryPolicy:
    return execution_profile_pb2.MemoryPolicy(
        mode=_MEMORY_MODE_TO_PB[policy.mode],
        top_k=policy.top_k,
        min_relevance=policy.min_relevance,
        max_tokens=policy.max_tokens,
        conversation=policy.conversation,
    )


def memory_from_pb(pb: execution_profile_pb2.MemoryPolicy) -> dict[str, object]:
    """Unset numbers take their defaults; an unset mode is off."""
    data: dict[str, object] = {"mode": _MEMORY_MODE_FROM_PB.get(pb.mode, "off")}
    if pb.top_k:
        data["top_k"] = pb.top_k
    if pb.min_relevance:
        data["min_relevance"] = pb.min_relevance
    if pb.max_tokens:
        data["max_tokens"] = pb.max_tokens
    if pb.conversation:
        data["conversation"] = True
    return data


def agent_to_pb(agent: AgentConfig) -> execution_profile_pb2.AgentConfig:
    pb = execution_profile_pb2.AgentConfig(
        system_prompt=agent.system_prompt, model_card=agent.model_card
    )
    if agent.temperature is not None:
        pb.temperature = agent.temperature
    if agent.top_p is not None:
        pb.top_p = agent.top_p
    if agent.max_tokens is not None:
        pb.max_tokens = agent.max_tokens
    return pb


def agent_from_pb(pb: execution_profile_pb2.AgentConfig) -> dict[str, object]:
    data: dict[str, object] = {"system_prompt": pb.system_prompt, "model_card": pb.model_card}
    for name in ("temperature", "top_p", "max_tokens"):
        if pb.HasField(name):
            data[name] = getattr(pb, name)
    return data


def profile_from_pb(
    pb: execution_profile_pb2.ExecutionProfile, field: str = "profile"
) -> ExecutionProfile:
    raw = pb.SerializeToString(deterministic=True)
    known = _FROM_PB.get(raw)
    if known is not None:
        return known
    return _remember(_FROM_PB, raw, _parse_pb(pb, field))


def _parse_pb(pb: execution_profile_pb2.ExecutionProfile, field: str) -> ExecutionProfile:
    if pb.executor not in EXECUTOR_FROM_PB:
        raise InvalidArgument(f"{field}.executor", "must be worker or memory")
    return parse_profile(
        {
            "name": pb.name or "custom",
            "enable_router": pb.enable_router,
            "executor": EXECUTOR_FROM_PB[pb.executor].value,
            "tool_policy": {
                "allowlist": list(pb.tool_policy.allowlist),
                "requires_approval": list(pb.tool_policy.requires_approval),
            },
            "history_policy": {"window": pb.history_policy.window or "all"},
            "agent": agent_from_pb(pb.agent),
            "memory": memory_from_pb(pb.memory),
        },
        field=field,
        allow_agent=True,
    )


class ProfileFileError(ValueError):
    """The profiles file cannot be used; the message names the file, the entry and the field."""


class ProfileRegistry:
    """Built-in profiles plus those of a YAML file, all validated before any is used.

    The file (AGENTMESH_PROFILES_FILE) is a mapping with one key, `profiles`, a list of
    profiles; each entry is validated like any profile, its allowlist against the registered
    tools; names are unique and may not redefine a built-in. Any fault rejects the whole
    file (ProfileFileError): a service never runs with half of it.
    """

    def __init__(self, profiles: Mapping[str, ExecutionProfile]) -> None:
        self._profiles = dict(profiles)

    @classmethod
    def load(
        cls,
        path: Path | None,
        registered_tools: Iterable[str] | KnowsTools,
        check_agent: Callable[[AgentConfig], str] | None = None,
    ) -> ProfileRegistry:
        """`check_agent` says what is wrong with an entry's agent against the model cards
        ("agent.<field>: ..."; "" when nothing is)."""
        profiles = dict(BUILT_INS)
        if path is None:
            return cls(profiles)
        tools = (
            registered_tools if isinstance(registered_tools, KnowsTools) else list(registered_tools)
        )
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ProfileFileError(
                f"{path}: cannot read the profiles file ({err.strerror})"
            ) from None
        except yaml.YAMLError as err:
            raise ProfileFileError(f"{path}: not valid YAML ({err})") from None
        if (
            not isinstance(raw, dict)
            or set(raw) != {"profiles"}
            or not isinstance(raw["profiles"], list)
        ):
            raise ProfileFileError(
                f"{path}: expected a mapping with exactly one key, 'profiles', holding a list"
            )
        for i, entry in enumerate(raw["profiles"]):
            if not isinstance(entry, dict):
                raise ProfileFileError(f"{path}: profiles[{i}]: must be a mapping")
            if "name" not in entry:
                raise ProfileFileError(f"{path}: profiles[{i}].name: is required")
            try:
                profile = parse_profile(
                    entry, registered_tools=tools, field=f"profiles[{i}]", allow_agent=True
                )
            except InvalidArgument as err:
                raise ProfileFileError(f"{path}: {err.message}") from None
            problem = check_agent(profile.agent) if check_agent is not None else ""
            if problem:
                raise ProfileFileError(f"{path}: profiles[{i}].{problem}")
            if profile.name in BUILT_INS:
                raise ProfileFileError(
                    f"{path}: profiles[{i}].name: {profile.name!r} is a built-in profile; "
                    "use another name"
                )
            if profile.name in profiles:
                raise ProfileFileError(
                    f"{path}: profiles[{i}].name: {profile.name!r} is defined twice"
                )
            profiles[profile.name] = profile
        return cls(profiles)

    def get(self, name: str) -> ExecutionProfile:
        try:
            return self._profiles[name]
        except KeyError:
            raise InvalidArgument("profile_name", f"unknown execution profile {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._profiles)
