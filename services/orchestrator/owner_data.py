"""The orchestrator's owner data (shared/owner_data.py): no table, the run event logs (Redis
streams, or the embedded in-memory log) under keys that start with the owner's id."""

from __future__ import annotations

from typing import Any

from agentmesh.type.v1 import run_event_pb2
from google.protobuf import json_format

from services.orchestrator.core import event_log_key
from services.orchestrator.eventlog import EventLog
from shared.owner_data import Registry


class RunEventLogs:
    """The owner's run event logs; keys are "<owner>/<run id>" and owner ids hold no "/",
    so the prefix "<owner>/" is the owner's alone."""

    name = "event_logs"

    def __init__(self, log: EventLog) -> None:
        self._log = log

    async def delete_owner(self, owner: str) -> int:
        return await self._log.delete_prefix(event_log_key(owner, ""))

    async def export_owner(self, owner: str) -> list[dict[str, Any]]:
        prefix = event_log_key(owner, "")
        logs = []
        for key in await self._log.keys(prefix):
            try:
                entries, _ = await self._log.read(key, 0)
            except KeyError:  # its retention ended meanwhile
                continue
            events = [
                json_format.MessageToDict(run_event_pb2.RunEvent.FromString(raw))
                for _, raw in entries
            ]
            logs.append({"run_id": key[len(prefix) :], "events": events})
        return logs


def registry(log: EventLog) -> Registry:
    return Registry("orchestrator", stores=(RunEventLogs(log),))
