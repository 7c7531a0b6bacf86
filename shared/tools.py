"""The tool policy, in one place: which server-side tools a run may call, and why a call is
refused (seed 001 §4.4, §7.3).

    effective tools = declared ∩ profile allowlist ∩ registered

- declared: what the run asks for — an automation job's config.tools; a chat run declares
  its profile's allowlist (chat callers declare only client-side AG-UI tools, which the
  client runs itself and which are not subject to this policy).
- profile allowlist: profile.tool_policy.allowlist. An EMPTY allowlist allows NOTHING:
  least privilege, and the only reading of "intersection" that cannot widen by accident
  (a profile that forgot its allowlist gets no tools, not all of them). That is why the
  built-in chat_default lists the worker's tool (memory_search) explicitly.
- registered: the tools the system has: the built-ins (REGISTERED_TOOLS), the HTTP tools and
  MCP servers' tools of AGENTMESH_TOOLS_FILE (shared.tool_config). The executor passes the
  tools it really runs (an MCP server's are those it listed); the other services know only
  the file (KnownTools: any `<server>.<tool>` of a configured server may exist).

Allowlist and declared entries are tool names or patterns (`weather.*`, `*`; fnmatch, case
sensitive): a tool is allowed when some entry matches its name.

Only effective tools are offered to a model. A call to any other tool is not executed; the
model gets an error result and an audit record keeps the reason, the most specific first:
not_registered (no such tool), not_in_profile (the profile does not allow it), not_declared
(allowed, but the job or run did not ask for it). The record holds a digest of the
arguments (sha256), never the arguments themselves.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from shared.errors import InvalidArgument
from shared.profiles import ExecutionProfile
from shared.settings import Settings
from shared.tool_config import TOOL_NAME_RE, ToolFileError, ToolsConfig, load_tools_config

# The server-side tools of the system. The executor registers exactly these.
REGISTERED_TOOLS: tuple[str, ...] = (
    "memory_write",
    "memory_forget",
    "memory_search",
    "conversation_search",
)


class DenialReason(StrEnum):
    NOT_DECLARED = "not_declared"
    NOT_IN_PROFILE = "not_in_profile"
    NOT_REGISTERED = "not_registered"
    # A person's decision on a call that needed approval (shared.approvals.PERSON_DENIALS):
    # in the audit's tool denials beside the policy's.
    DENIED_BY_USER = "denied_by_user"
    CANCELLED_BY_USER = "cancelled_by_user"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_UNANSWERED = "approval_unanswered"


def is_pattern(entry: str) -> bool:
    return any(c in entry for c in "*?[")


def matches(entries: Iterable[str], tool_name: str) -> bool:
    """Whether some entry (a name or a pattern) names `tool_name`."""
    return any(
        fnmatch.fnmatchcase(tool_name, e) if is_pattern(e) else e == tool_name for e in entries
    )


def effective_tools(
    declared: Iterable[str], profile: ExecutionProfile, registered: Iterable[str]
) -> tuple[str, ...]:
    """declared ∩ allowlist ∩ registered: the registered names some declared entry and some
    allowlist entry match, in the declared order (a pattern's names sorted), each once."""
    names = sorted(set(registered))
    allowlist = profile.tool_policy.allowlist
    out: dict[str, None] = {}
    for entry in declared:
        for name in names:
            if matches((entry,), name) and matches(allowlist, name):
                out[name] = None
    return tuple(out)


def authorize(
    tool_name: str,
    declared: Iterable[str],
    profile: ExecutionProfile,
    registered: Iterable[str],
) -> DenialReason | None:
    """None when the run may call `tool_name`; otherwise why not (most specific reason)."""
    if tool_name not in set(registered):
        return DenialReason.NOT_REGISTERED
    if not matches(profile.tool_policy.allowlist, tool_name):
        return DenialReason.NOT_IN_PROFILE
    if not matches(declared, tool_name):
        return DenialReason.NOT_DECLARED
    return None


@dataclass(frozen=True)
class KnownTools:
    """The tools a deployment may have, as the services other than the executor know them:
    the built-ins and HTTP tools by name, and any `<server>.<tool>` of a configured MCP
    server (its tools are listed only when the executor reaches it)."""

    names: frozenset[str]
    namespaces: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: ToolsConfig) -> KnownTools:
        names = frozenset(REGISTERED_TOOLS) | set(config.http_names())
        return cls(names, frozenset(config.namespaces()))

    def has(self, name: str) -> bool:
        """Whether `name` (taken literally) is, or may be, a tool of the deployment: a
        built-in or HTTP tool, or any name in a configured MCP server's namespace."""
        if name in self.names:
            return True
        return bool(TOOL_NAME_RE.match(name)) and name.split(".", 1)[0] in self.namespaces

    def knows(self, entry: str) -> bool:
        """Whether a name or pattern can name a tool of the deployment."""
        if not is_pattern(entry):
            return self.has(entry)
        if any(fnmatch.fnmatchcase(n, entry) for n in self.names):
            return True
        namespace, dot, _ = entry.partition(".")
        return bool(dot) and namespace in self.namespaces

    def listing(self) -> str:
        """What an error message lists as registered."""
        return ", ".join([*sorted(self.names), *(f"{n}.*" for n in sorted(self.namespaces))])


BUILTIN_KNOWN = KnownTools(frozenset(REGISTERED_TOOLS))


def planned_tools(
    declared: Iterable[str], profile: ExecutionProfile, known: KnownTools
) -> tuple[str, ...]:
    """What a run passes to the executor as its declaration: the declared entries the
    deployment knows that the allowlist may allow (a name it matches, or a pattern: the
    executor intersects patterns with the tools it really has), each once, in order."""
    allowlist = profile.tool_policy.allowlist
    keep = (e for e in declared if known.knows(e) and (is_pattern(e) or matches(allowlist, e)))
    return tuple(dict.fromkeys(keep))


def check_client_tools(
    client: Sequence[str], is_server_tool: Callable[[str], bool], field: str
) -> None:
    """A run's client-side tools (AG-UI `tools`) have unique names, none of them a
    server-side tool's: a call by that name could not be told apart. INVALID_ARGUMENT naming
    `<field>[i].name` otherwise. The orchestrator applies it before anything of the run is
    stored (with the tools the deployment may have); the executor again (with the ones it has)."""
    seen: set[str] = set()
    for i, name in enumerate(client):
        where = f"{field}[{i}].name"
        if not name:
            raise InvalidArgument(where, "must not be empty")
        if name in seen:
            raise InvalidArgument(where, f"duplicate tool {name!r}")
        if is_server_tool(name):
            raise InvalidArgument(where, f"{name!r} is the name of a server-side tool")
        seen.add(name)


def arguments_digest(arguments: str) -> str:
    """What an audit record keeps of a call's arguments: sha256 of their text, hex."""
    return hashlib.sha256(arguments.encode("utf-8", "surrogatepass")).hexdigest()


def deployment_tools(settings: Settings, service: str) -> tuple[ToolsConfig, KnownTools]:
    """AGENTMESH_TOOLS_FILE and the tools it makes known; a bad file stops `service` with a
    message naming the file and the field."""
    try:
        config = load_tools_config(settings.tools_file)
    except ToolFileError as err:
        raise SystemExit(f"{service}: AGENTMESH_TOOLS_FILE is invalid: {err}") from None
    return config, KnownTools.of(config)
