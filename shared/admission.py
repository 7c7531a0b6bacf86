"""Load shedding: a bound on the runs in flight in one process, and per owner within it.

The gateway and the orchestrator each apply it (AGENTMESH_MAX_RUNS_IN_FLIGHT,
AGENTMESH_MAX_RUNS_IN_FLIGHT_PER_OWNER) before anything of a run is stored, so a run that
is refused costs a counter check and is safe to send again after `RETRY_AFTER_SECONDS`;
a run that is admitted is not slowed by the ones refused. One owner at its bound does not
take another owner's room: each owner counts on its own as well as in the process total.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from shared.errors import Unavailable

# What a refused caller is told to wait before it sends the run again (Retry-After).
RETRY_AFTER_SECONDS = 1
OVERLOADED = "OVERLOADED"


class Scope(StrEnum):
    PROCESS = "process"
    OWNER = "owner"


@dataclass
class InFlight:
    """Runs in flight now: in the process and per owner, each held until `release`."""

    limit: int
    per_owner: int
    total: int = 0
    owners: Counter[str] = field(default_factory=Counter)

    def full(self) -> bool:
        """The process bound is reached: what a check made before the caller is known (its
        owner authenticated) can tell. `acquire` stays the rule; this only lets a refusal
        skip the work a request costs before it."""
        return self.total >= self.limit

    def refusal(self, owner: str) -> Scope | None:
        """Which bound one more run of `owner` would pass (None: it fits)."""
        if self.full():
            return Scope.PROCESS
        if self.owners[owner] >= self.per_owner:
            return Scope.OWNER
        return None

    def acquire(self, owner: str) -> None:
        """Count one more run of `owner`, or raise `overloaded` (nothing counted)."""
        scope = self.refusal(owner)
        if scope is not None:
            raise self.refused(scope)
        self.total += 1
        self.owners[owner] += 1

    def refused(self, scope: Scope) -> Unavailable:
        """The refusal of one more run over the bound of `scope`."""
        return overloaded(scope, self.limit if scope is Scope.PROCESS else self.per_owner)

    def release(self, owner: str) -> None:
        self.total -= 1
        self.owners[owner] -= 1
        if self.owners[owner] <= 0:
            del self.owners[owner]


def overloaded(scope: Scope, bound: int) -> Unavailable:
    """The refusal of a run over a bound: UNAVAILABLE (HTTP 503 with Retry-After), reason
    OVERLOADED; nothing of the run was stored."""
    whose = "this server's" if scope is Scope.PROCESS else "your"
    return Unavailable(
        f"too many runs in flight ({whose} bound is {bound}); the run was not started and "
        f"nothing was stored: send it again in {RETRY_AFTER_SECONDS} s",
        reason=OVERLOADED,
        metadata={"scope": scope.value, "retry_after_seconds": str(RETRY_AFTER_SECONDS)},
    )
