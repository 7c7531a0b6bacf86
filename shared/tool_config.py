"""The deployment's tools from outside the code: MCP servers and HTTP tools (AGENTMESH_TOOLS_FILE).

The file is YAML (JSON is YAML too) with two optional lists:

    mcp_servers:
      - name: weather                 # the namespace: its tools are weather.<tool>
        transport: stdio              # stdio | http (MCP streamable HTTP)
        command: python               # stdio: the program and its arguments
        args: [-m, weather_server]
        env: {API_KEY: "..."}
        # url: http://weather:8000/mcp   (http)
        # headers: {Authorization: "Bearer ..."}
        timeout_seconds: 10           # one call (default: the executor's tool timeout)
        max_result_chars: 16000       # longer results are cut, and say so
        requires_approval: [weather.set_alarm]   # names or patterns; true: every tool
        owner: {via: argument, name: owner_id}   # argument | meta | none
    http_tools:
      - name: crm.lookup_order        # <namespace>.<tool>
        description: Look up one of the user's orders.
        url: http://crm:8080/tools/lookup_order
        parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
        headers: {}
        owner: {via: header, name: X-Agentmesh-Owner}   # header | argument | none

Every service reads the file: the executor connects to the servers and runs the tools; the
orchestrator, scheduler and profile loader only need to know which names exist (an MCP
server's tools are discovered when it is reached, so any `<server>.<tool>` counts as known
until the executor, which has the live list, decides). A bad file stops the service with a
message naming the file and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# A namespace or a tool's own name: what every model provider accepts in a function name
# (the namespaced name adds one ".").
_PART = r"[A-Za-z0-9_-]{1,48}"
NAMESPACE_RE = re.compile(rf"^{_PART}$")
TOOL_NAME_RE = re.compile(rf"^{_PART}\.{_PART}$")

DEFAULT_MAX_RESULT_CHARS = 16_000


class ToolFileError(ValueError):
    """The tools file cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OwnerPassing(_Strict):
    """How the run's owner id reaches the tool, so the tool can scope its own data.

    header: an HTTP header `name` (HTTP tools); argument: an extra argument `name` (not
    offered to the model, and a value the model put there is overwritten); meta: the MCP
    request's `_meta[name]` (MCP servers); none: not sent."""

    via: Literal["header", "argument", "meta", "none"] = "none"
    name: str = Field(default="", max_length=100)

    @model_validator(mode="after")
    def _named(self) -> OwnerPassing:
        if self.via != "none" and not self.name:
            raise ValueError(f"owner.name is required when owner.via is {self.via!r}")
        return self


Approval = bool | list[str]


class _Source(_Strict):
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] | None = None
    max_result_chars: Annotated[int, Field(ge=100, le=10_000_000)] = DEFAULT_MAX_RESULT_CHARS
    owner: OwnerPassing = OwnerPassing()


class McpServerConfig(_Source):
    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    # Tools of this server that need a person's approval: names / patterns, or true (all).
    requires_approval: Approval = False

    @field_validator("name")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not NAMESPACE_RE.match(value):
            raise ValueError("must be 1-48 letters, digits, '_' or '-'")
        return value

    @model_validator(mode="after")
    def _transport(self) -> McpServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError("command is required for transport stdio")
        if self.transport == "http" and not self.url.startswith(("http://", "https://")):
            raise ValueError("url (http:// or https://) is required for transport http")
        if self.owner.via == "header":
            raise ValueError(
                "owner.via header is for HTTP tools; an MCP server takes argument or meta"
            )
        return self


class HttpToolConfig(_Source):
    name: str
    description: str = Field(default="", max_length=4000)
    url: str
    method: Literal["POST", "PUT"] = "POST"
    # JSON Schema of the arguments (sent as the JSON body).
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    headers: dict[str, str] = Field(default_factory=dict)
    requires_approval: bool = False

    @field_validator("name")
    @classmethod
    def _namespaced(cls, value: str) -> str:
        if not TOOL_NAME_RE.match(value):
            raise ValueError("must be <namespace>.<tool>, each 1-48 letters, digits, '_' or '-'")
        return value

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object"')
        return value

    @model_validator(mode="after")
    def _owner(self) -> HttpToolConfig:
        if self.owner.via == "meta":
            raise ValueError(
                "owner.via meta is for MCP servers; an HTTP tool takes header or argument"
            )
        return self


class ToolsConfig(_Strict):
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    http_tools: list[HttpToolConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ToolsConfig:
        servers = [s.name for s in self.mcp_servers]
        for i, name in enumerate(servers):
            if name in servers[:i]:
                raise ValueError(f"mcp_servers[{i}].name: {name!r} is defined twice")
        tools = [t.name for t in self.http_tools]
        for i, name in enumerate(tools):
            if name in tools[:i]:
                raise ValueError(f"http_tools[{i}].name: {name!r} is defined twice")
            if name.split(".", 1)[0] in servers:
                raise ValueError(f"http_tools[{i}].name: namespace of {name!r} is an MCP server's")
        return self

    def namespaces(self) -> tuple[str, ...]:
        """The MCP servers' namespaces: any `<server>.<tool>` may exist there."""
        return tuple(s.name for s in self.mcp_servers)

    def http_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.http_tools)


def _where(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
    msg = str(first["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def parse_tools_config(data: object, source: str = "tools file") -> ToolsConfig:
    if data is None:
        return ToolsConfig()
    if not isinstance(data, dict):
        raise ToolFileError(f"{source}: expected a mapping with mcp_servers and/or http_tools")
    try:
        return ToolsConfig.model_validate(data)
    except ValidationError as err:
        raise ToolFileError(f"{source}: {_where(err)}") from None


def load_tools_config(path: Path | None) -> ToolsConfig:
    """The file's tools (none without a file); ToolFileError naming the field otherwise."""
    if path is None:
        return ToolsConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ToolFileError(f"{path}: cannot read the tools file ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ToolFileError(f"{path}: not valid YAML or JSON ({err})") from None
    return parse_tools_config(raw, str(path))
