from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Executor(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_UNSPECIFIED: _ClassVar[Executor]
    EXECUTOR_WORKER: _ClassVar[Executor]
    EXECUTOR_MEMORY: _ClassVar[Executor]

class ToolPolicyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_POLICY_MODE_UNSPECIFIED: _ClassVar[ToolPolicyMode]
    TOOL_POLICY_MODE_INTERSECTION: _ClassVar[ToolPolicyMode]

class MemoryMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_MODE_UNSPECIFIED: _ClassVar[MemoryMode]
    MEMORY_MODE_OFF: _ClassVar[MemoryMode]
    MEMORY_MODE_RECALL: _ClassVar[MemoryMode]
EXECUTOR_UNSPECIFIED: Executor
EXECUTOR_WORKER: Executor
EXECUTOR_MEMORY: Executor
TOOL_POLICY_MODE_UNSPECIFIED: ToolPolicyMode
TOOL_POLICY_MODE_INTERSECTION: ToolPolicyMode
MEMORY_MODE_UNSPECIFIED: MemoryMode
MEMORY_MODE_OFF: MemoryMode
MEMORY_MODE_RECALL: MemoryMode

class ToolPolicy(_message.Message):
    __slots__ = ("mode", "allowlist", "requires_approval")
    MODE_FIELD_NUMBER: _ClassVar[int]
    ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    mode: ToolPolicyMode
    allowlist: _containers.RepeatedScalarFieldContainer[str]
    requires_approval: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[ToolPolicyMode, str]] = ..., allowlist: _Optional[_Iterable[str]] = ..., requires_approval: _Optional[_Iterable[str]] = ...) -> None: ...

class HistoryPolicy(_message.Message):
    __slots__ = ("window",)
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    window: str
    def __init__(self, window: _Optional[str] = ...) -> None: ...

class AgentConfig(_message.Message):
    __slots__ = ("system_prompt", "model_card", "temperature", "top_p", "max_tokens")
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_CARD_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    system_prompt: str
    model_card: str
    temperature: float
    top_p: float
    max_tokens: int
    def __init__(self, system_prompt: _Optional[str] = ..., model_card: _Optional[str] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class MemoryPolicy(_message.Message):
    __slots__ = ("mode", "top_k", "min_relevance", "max_tokens")
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    mode: MemoryMode
    top_k: int
    min_relevance: float
    max_tokens: int
    def __init__(self, mode: _Optional[_Union[MemoryMode, str]] = ..., top_k: _Optional[int] = ..., min_relevance: _Optional[float] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class ExecutionProfile(_message.Message):
    __slots__ = ("name", "enable_router", "executor", "tool_policy", "history_policy", "agent", "memory")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENABLE_ROUTER_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    TOOL_POLICY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_POLICY_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    name: str
    enable_router: bool
    executor: Executor
    tool_policy: ToolPolicy
    history_policy: HistoryPolicy
    agent: AgentConfig
    memory: MemoryPolicy
    def __init__(self, name: _Optional[str] = ..., enable_router: _Optional[bool] = ..., executor: _Optional[_Union[Executor, str]] = ..., tool_policy: _Optional[_Union[ToolPolicy, _Mapping]] = ..., history_policy: _Optional[_Union[HistoryPolicy, _Mapping]] = ..., agent: _Optional[_Union[AgentConfig, _Mapping]] = ..., memory: _Optional[_Union[MemoryPolicy, _Mapping]] = ...) -> None: ...
