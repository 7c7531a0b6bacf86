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
- registered: the tools the system has (REGISTERED_TOOLS; the executor passes the tools it
  really runs).

Only effective tools are offered to a model. A call to any other tool is not executed; the
model gets an error result and an audit record keeps the reason, the most specific first:
not_registered (no such tool), not_in_profile (the profile does not allow it), not_declared
(allowed, but the job or run did not ask for it). The record holds a digest of the
arguments (sha256), never the arguments themselves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from enum import StrEnum

from shared.profiles import ExecutionProfile

# The server-side tools of the system. The executor registers exactly these.
REGISTERED_TOOLS: tuple[str, ...] = ("memory_write", "memory_forget", "memory_search")


class DenialReason(StrEnum):
    NOT_DECLARED = "not_declared"
    NOT_IN_PROFILE = "not_in_profile"
    NOT_REGISTERED = "not_registered"


def effective_tools(
    declared: Iterable[str], profile: ExecutionProfile, registered: Iterable[str]
) -> tuple[str, ...]:
    """declared ∩ allowlist ∩ registered, in the declared order, each name once."""
    allowed = set(profile.tool_policy.allowlist) & set(registered)
    return tuple(dict.fromkeys(t for t in declared if t in allowed))


def authorize(
    tool_name: str,
    declared: Iterable[str],
    profile: ExecutionProfile,
    registered: Iterable[str],
) -> DenialReason | None:
    """None when the run may call `tool_name`; otherwise why not (most specific reason)."""
    if tool_name not in set(registered):
        return DenialReason.NOT_REGISTERED
    if tool_name not in set(profile.tool_policy.allowlist):
        return DenialReason.NOT_IN_PROFILE
    if tool_name not in set(declared):
        return DenialReason.NOT_DECLARED
    return None


def arguments_digest(arguments: str) -> str:
    """What an audit record keeps of a call's arguments: sha256 of their text, hex."""
    return hashlib.sha256(arguments.encode("utf-8", "surrogatepass")).hexdigest()
