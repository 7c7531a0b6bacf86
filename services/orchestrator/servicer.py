"""OrchestratorService: StartRun (start a run, follow its event log from the start),
StreamRun (follow it after a sequence number), CancelRun."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc
from agentmesh.type.v1 import run_event_pb2

from services.orchestrator import convert, core
from services.orchestrator.eventlog import EventLog
from services.orchestrator.owner_data import RunEventLogs
from services.orchestrator.runs import ActiveRun, RunManager
from shared import telemetry, wire
from shared.domain import RuntimeMode
from shared.errors import DeadlineExceeded, DomainError, InvalidArgument, NotFound, Unavailable
from shared.identity import owner_id
from shared.ids import check_identifier
from shared.pagination import MAX_PAGE_SIZE
from shared.profiles import ProfileRegistry
from shared.settings import Settings
from shared.tools import BUILTIN_KNOWN, KnownTools


class OrchestratorServicer(pb_grpc.OrchestratorServiceServicer):
    def __init__(
        self,
        runs: RunManager,
        event_log: EventLog,
        profiles: ProfileRegistry,
        settings: Settings,
        known_tools: KnownTools = BUILTIN_KNOWN,
    ) -> None:
        self.known_tools = known_tools
        self.runs = runs
        self.event_log = event_log
        self.profiles = profiles
        self.settings = settings

    async def _follow(
        self, owner: str, run_id: str, after: int, *, started: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """The run's stored events after `after`, then live ones until the run ends, as
        batches of serialized RunEvents (what was stored when the reader asked).

        A stream lost once the run is under way (`started`: this call started it; or some
        of its events were sent) is not the run's failure: the run goes on and history
        records its end. The stream then ends with RUN_ERROR OUTCOME_UNKNOWN (the caller
        reads the run's record), never with a retryable error a client would answer with
        a second run. A run that history never admitted ends with why."""
        active = self.runs.active(owner, run_id)
        sent = False
        try:
            if active is not None:
                # Run here: follow its writer, which hands out what the log stored.
                batches = active.writer.follow_batches(after)
            else:
                batches = self.event_log.follow_batches(core.event_log_key(owner, run_id), after)
            async for batch in batches:
                sent = True
                yield [data for _seq, data in batch]
        except KeyError:
            raise NotFound("run not found") from None
        except Exception as exc:
            if isinstance(exc, DomainError) and not isinstance(exc, Unavailable):
                raise
            if not (started or sent):
                if isinstance(exc, Unavailable):
                    raise
                raise Unavailable(
                    "the run's event stream is unavailable; read the run's record "
                    "(GetRun) for its outcome"
                ) from None
            yield [_lost_stream_end(active).SerializeToString()]

    async def StartRun(
        self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.StartRunResponse]:
        owner = owner_id(context)
        plan = convert.plan_from_pb(
            request,
            owner,
            self.profiles,
            max_message_chars=self.settings.max_message_chars,
            default_time_zone=self.settings.default_timezone,
            known_tools=self.known_tools,
        )
        telemetry.annotate(profile=plan.profile.name)
        # Shielded: a caller that gives up while the run is being admitted (the gateway's
        # first-event timeout) does not cut the start in half. The run is started or
        # refused as a whole, so the same StartRun sent again is refused as RUN_EXISTS or
        # starts it, never a second run (api-endpoints.md, "Did the run start?").
        start = asyncio.ensure_future(self.runs.start(plan))
        start.add_done_callback(_retrieved)
        await asyncio.shield(start)
        # The run goes on in its own task: if this caller goes away, only the following stops.
        # Responses are assembled from the stored bytes (field 1 `event` or field 2 `events`
        # of StartRunResponse), so an event is never decoded and re-encoded on its way.
        field = _EVENTS if request.batch_events else _EVENT
        async for batch in self._follow(owner, plan.run_id, 0, started=True):
            if request.batch_events:
                yield pb.StartRunResponse.FromString(wire.repeated(field, batch))
            else:
                for data in batch:
                    yield pb.StartRunResponse.FromString(wire.repeated(field, [data]))

    async def StreamRun(
        self, request: pb.StreamRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.StreamRunResponse]:
        owner = owner_id(context)
        run_id = check_identifier(request.run_id, "run_id")
        if request.after_sequence > core.MAX_SEQUENCE:
            raise InvalidArgument("after_sequence", f"must be at most {core.MAX_SEQUENCE}")
        async for batch in self._follow(owner, run_id, request.after_sequence):
            for data in batch:
                yield pb.StreamRunResponse.FromString(wire.repeated(_EVENT, [data]))

    async def CancelRun(
        self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CancelRunResponse:
        owner = owner_id(context)
        run_id = check_identifier(request.run_id, "run_id")
        cancelled, state, thread_id = await self.runs.cancel(owner, run_id)
        return pb.CancelRunResponse(cancelled=cancelled, state=state, thread_id=thread_id)

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListToolsResponse:
        owner = owner_id(context)
        profile = core.resolve_profile(RuntimeMode.CHAT, request.profile_name, None, self.profiles)
        listed = await self.runs.peers.list_tools(owner)
        effective, asking = core.tools_for_chat(
            profile, [(t.spec.name, t.requires_approval) for t in listed.tools], self.known_tools
        )
        return pb.ListToolsResponse(
            tools=listed.tools,
            profile_name=profile.name,
            effective_tool_names=effective,
            approval_tool_names=asking,
            sources=listed.sources,
        )

    async def DeleteRunEvents(
        self, request: pb.DeleteRunEventsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteRunEventsResponse:
        owner = owner_id(context)
        if len(request.run_ids) > MAX_PAGE_SIZE:
            raise InvalidArgument("run_ids", f"must hold at most {MAX_PAGE_SIZE} ids")
        keys = [
            core.event_log_key(owner, check_identifier(run_id, f"run_ids[{i}]"))
            for i, run_id in enumerate(request.run_ids)
        ]
        return pb.DeleteRunEventsResponse(deleted_count=await self.event_log.delete(keys))

    async def DeleteOwnerData(
        self, request: pb.DeleteOwnerDataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteOwnerDataResponse:
        """Deprecated twin of agentmesh.platform.v1's, over the same store."""
        logs = RunEventLogs(self.event_log)
        gone = await logs.delete_owner(owner_id(context))
        return pb.DeleteOwnerDataResponse(deleted_counts={logs.name: gone})


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A start whose caller went away: its refusal has no one to go to (nothing to log)."""
    if not task.cancelled():
        task.exception()


def _lost_stream_end(active: ActiveRun | None) -> run_event_pb2.RunEvent:
    """The end of a stream lost mid-run (not stored, so without a sequence number)."""
    if active is not None and active.lifecycle.refusal is not None:
        refused = core.as_domain_error(active.lifecycle.refusal)
        if not isinstance(refused, DeadlineExceeded):
            # History refused the run or could not be reached: that is its real end. (A
            # BeginRun that timed out may have been stored: its outcome is unknown.)
            return convert.run_error(*core.user_error(refused))
    event = convert.run_error(core.OUTCOME_UNKNOWN, core.OUTCOME_UNKNOWN_MESSAGE)
    if active is not None:
        event.run_id, event.thread_id = active.plan.run_id, active.plan.thread_id
    return event


# Field numbers of StartRunResponse.event / .events (and StreamRunResponse.event).
_EVENT = pb.StartRunResponse.EVENT_FIELD_NUMBER
_EVENTS = pb.StartRunResponse.EVENTS_FIELD_NUMBER
