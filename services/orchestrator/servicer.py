"""OrchestratorService: StartRun (start a run, follow its event log from the start),
StreamRun (follow it after a sequence number), CancelRun."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

from services.orchestrator import convert, core
from services.orchestrator.runs import RunManager
from shared import telemetry, wire
from shared.errors import DomainError, InvalidArgument, NotFound, Unavailable
from shared.eventlog import EventLog
from shared.identity import owner_id
from shared.profiles import ProfileRegistry
from shared.settings import Settings


class OrchestratorServicer(pb_grpc.OrchestratorServiceServicer):
    def __init__(
        self, runs: RunManager, event_log: EventLog, profiles: ProfileRegistry, settings: Settings
    ) -> None:
        self.runs = runs
        self.event_log = event_log
        self.profiles = profiles
        self.settings = settings

    async def _follow(self, owner: str, run_id: str, after: int) -> AsyncIterator[list[bytes]]:
        """The run's stored events after `after`, then live ones until the run ends, as
        batches of serialized RunEvents (what was stored when the reader asked)."""
        active = self.runs.active(owner, run_id)
        try:
            if active is not None:
                # Run here: follow its writer, which hands out what the log stored.
                batches = active.writer.follow_batches(after)
            else:
                batches = self.event_log.follow_batches(core.event_log_key(owner, run_id), after)
            async for batch in batches:
                yield [data for _seq, data in batch]
        except KeyError:
            raise NotFound("run not found") from None
        except DomainError:
            raise
        except Exception:
            raise Unavailable(
                "the run's event stream is unavailable; its result will be in the thread's history"
            ) from None

    async def StartRun(  # type: ignore[override]
        self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StartRunResponse]:
        owner = owner_id(context)
        plan = convert.plan_from_pb(
            request,
            owner,
            self.profiles,
            max_message_chars=self.settings.max_message_chars,
            default_time_zone=self.settings.default_timezone,
        )
        telemetry.annotate(profile=plan.profile.name)
        await self.runs.start(plan)
        # The run goes on in its own task: if this caller goes away, only the following stops.
        # Responses are assembled from the stored bytes (field 1 `event` or field 2 `events`
        # of StartRunResponse), so an event is never decoded and re-encoded on its way.
        field = _EVENTS if request.batch_events else _EVENT
        async for batch in self._follow(owner, plan.run_id, 0):
            if request.batch_events:
                yield pb.StartRunResponse.FromString(wire.repeated(field, batch))
            else:
                for data in batch:
                    yield pb.StartRunResponse.FromString(wire.repeated(field, [data]))

    async def StreamRun(  # type: ignore[override]
        self, request: pb.StreamRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamRunResponse]:
        owner = owner_id(context)
        run_id = core.check_identifier(request.run_id, "run_id")
        if request.after_sequence > core.MAX_SEQUENCE:
            raise InvalidArgument("after_sequence", f"must be at most {core.MAX_SEQUENCE}")
        async for batch in self._follow(owner, run_id, request.after_sequence):
            for data in batch:
                yield pb.StreamRunResponse.FromString(wire.repeated(_EVENT, [data]))

    async def CancelRun(  # type: ignore[override]
        self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelRunResponse:
        owner = owner_id(context)
        run_id = core.check_identifier(request.run_id, "run_id")
        cancelled, state, thread_id = await self.runs.cancel(owner, run_id)
        return pb.CancelRunResponse(cancelled=cancelled, state=state, thread_id=thread_id)



# Field numbers of StartRunResponse.event / .events (and StreamRunResponse.event).
_EVENT = pb.StartRunResponse.EVENT_FIELD_NUMBER
_EVENTS = pb.StartRunResponse.EVENTS_FIELD_NUMBER
