"""Data lifecycle at the edge: driving an owner deletion through every service, and the
export of everything an owner has as one JSON document.

An owner deletion is a job whose record (progress, audit) history keeps; the gateway drives
it, because it is the one component that talks to every service holding an owner's data
(history, memory, scheduler; no service calls another's tables). Each step is idempotent, so
driving is safe from any replica, any number of times: the request that starts a deletion
drives it once, and every gateway replica's resumer drives the unfinished ones again every
lifecycle_sweep_seconds, which is how a deletion finishes after a service was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from agentmesh.history.v1 import history_service_pb2 as history_pb
from agentmesh.memory.v1 import memory_service_pb2 as memory_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from agentmesh.platform.v1 import platform_service_pb2 as platform_pb
from agentmesh.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from sqlalchemy.exc import SQLAlchemyError

from services.gateway import convert, jobs
from services.gateway.clients import PEERS, Clients, unary
from services.gateway.errors import ApiError, store_unavailable
from services.gateway.owner_data import REGISTRY
from services.gateway.routes_webhooks import MAX_ENDPOINTS, endpoint_json
from services.gateway.webhook_store import WebhookStore
from shared import owner_data as shared_owner_data
from shared.pagination import MAX_PAGE_SIZE
from shared.settings import Settings

log = logging.getLogger(__name__)

# The identity the resumer calls history with (admin scope): not an owner of any data.
RESUMER = "lifecycle-resumer"

_KIND_NAMES = {
    history_pb.DELETION_KIND_THREAD: "thread",
    history_pb.DELETION_KIND_OWNER: "owner",
    history_pb.DELETION_KIND_RETENTION: "retention",
}
_STATE_NAMES = {
    history_pb.DELETION_STATE_RUNNING: "running",
    history_pb.DELETION_STATE_SUCCEEDED: "succeeded",
}


def deletion_json(d: history_pb.Deletion) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": d.id,
        "ownerId": d.owner_id,
        "kind": _KIND_NAMES.get(d.kind, "unknown"),
        "state": _STATE_NAMES.get(d.state, "unknown"),
        "requestedBy": d.requested_by,
        "createTime": convert.timestamp(d.create_time),
        "steps": [],
    }
    if d.thread_id:
        out["threadId"] = d.thread_id
    if d.HasField("finish_time"):
        out["finishTime"] = convert.timestamp(d.finish_time)
    for s in d.steps:
        step: dict[str, Any] = {
            "service": s.service,
            "done": s.done,
            "attempts": s.attempts,
            "deletedCounts": dict(sorted(s.deleted_counts.items())),
        }
        if s.last_error:
            step["lastError"] = s.last_error
        if s.HasField("update_time"):
            step["updateTime"] = convert.timestamp(s.update_time)
        out["steps"].append(step)
    return out


async def _gateway_step(webhooks: WebhookStore, owner: str) -> dict[str, int]:
    """The gateway's own step, over its registry (owner_data.py): the owner's API keys (so
    a deleted owner's key stops answering), quota override, webhook endpoints and
    deliveries, and old usage rows."""
    try:
        return await shared_owner_data.delete_owner(webhooks.engine, REGISTRY, owner)
    except SQLAlchemyError:
        log.warning("the gateway's step of an owner deletion failed", exc_info=True)
        raise store_unavailable() from None


class _PerKey:
    """One holder at a time per key in this process (the others wait their turn); a key's
    lock lives while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


# The request that starts a deletion and this replica's resumer drive it one at a time: two
# drivers at once would each delete and report, and history keeps the step's first report,
# which could be the one that found nothing left (its counts 0).
_DRIVING = _PerKey()


async def drive(
    clients: Clients, settings: Settings, webhooks: WebhookStore, d: history_pb.Deletion
) -> history_pb.Deletion:
    """Try the pending steps of deletion `d` in order, recording each outcome; the first
    step that fails stops the pass (the later steps wait for it: the order matters)."""
    async with _DRIVING.hold(d.id):
        return await _drive(clients, settings, webhooks, d)


async def _drive(
    clients: Clients, settings: Settings, webhooks: WebhookStore, d: history_pb.Deletion
) -> history_pb.Deletion:
    owner = d.owner_id
    for step in list(d.steps):
        if step.done:
            continue
        record = history_pb.RecordDeletionStepRequest(deletion_id=d.id, service=step.service)
        try:
            if step.service == "gateway":
                counts = await _gateway_step(webhooks, owner)
            else:
                reply = await unary(
                    clients.platform(step.service).DeleteOwnerData,
                    platform_pb.DeleteOwnerDataRequest(),
                    owner=owner,
                    service=step.service,
                    timeout=settings.rpc_timeout_seconds,
                )
                counts = dict(reply.deleted_counts)
        except ApiError as err:
            record.error = f"{err.code}: {err.message}"
        else:
            record.done = True
            record.deleted_counts.update(counts)
        recorded = await unary(
            clients.history.RecordDeletionStep,
            record,
            owner=owner,
            service="history",
            timeout=settings.rpc_timeout_seconds,
        )
        d = recorded.deletion
        if not record.done:
            break
        if step.service == "history":
            # A chat run that ended between the memory step and this one indexed its
            # messages for recall after the memory step emptied the index; history has
            # deleted them now, so the index lets them go too.
            await forget_conversation(clients, settings, owner, "", strict=False)
    return d


async def delete_run_events(
    clients: Clients, settings: Settings, owner: str, run_ids: Sequence[str]
) -> None:
    """Drop the event logs of a deleted thread's runs. Best effort: the thread is deleted
    already, and a log the orchestrator could not drop now ends with its retention
    (event_log_retention_seconds); nobody can reach it through a run record any more."""
    for i in range(0, len(run_ids), MAX_PAGE_SIZE):
        try:
            await unary(
                clients.orchestrator.DeleteRunEvents,
                orchestrator_pb.DeleteRunEventsRequest(run_ids=run_ids[i : i + MAX_PAGE_SIZE]),
                owner=owner,
                service="orchestrator",
                timeout=settings.rpc_timeout_seconds,
            )
        except ApiError as err:
            log.warning("event logs of a deleted thread not dropped: %s", err.code)
            return


async def forget_conversation(
    clients: Clients, settings: Settings, owner: str, thread_id: str, *, strict: bool
) -> None:
    """The thread's messages (every thread's, with `thread_id` empty) leave the memory
    service's conversation index (conversation recall). `strict`: a failure is the caller's
    error (the thread is then not deleted); otherwise it is logged."""
    request = memory_pb.DeleteConversationRequest(thread_id=thread_id, all_threads=not thread_id)
    try:
        await unary(
            clients.memory.DeleteConversation,
            request,
            owner=owner,
            service="memory",
            timeout=settings.rpc_timeout_seconds,
        )
    except ApiError as err:
        if strict:
            raise
        log.warning("a deleted thread's conversation index not dropped again: %s", err.code)


async def start_owner_deletion(
    clients: Clients,
    settings: Settings,
    webhooks: WebhookStore,
    owner: str,
    *,
    requested_by: str,
    admin: bool,
) -> history_pb.Deletion:
    """The owner's deletion (the running one, or a new one), driven once."""
    started = await unary(
        clients.history.StartOwnerDeletion,
        history_pb.StartOwnerDeletionRequest(requested_by=requested_by),
        owner=owner,
        service="history",
        timeout=settings.rpc_timeout_seconds,
        admin=admin,
    )
    return await drive(clients, settings, webhooks, started.deletion)


async def resume_deletions(clients: Clients, settings: Settings, webhooks: WebhookStore) -> int:
    """Drive every unfinished owner deletion once; how many were driven."""
    listed = await unary(
        clients.history.ListUnfinishedDeletions,
        history_pb.ListUnfinishedDeletionsRequest(page_size=100),
        owner=RESUMER,
        service="history",
        timeout=settings.rpc_timeout_seconds,
        admin=True,
    )
    for d in listed.deletions:
        try:
            await drive(clients, settings, webhooks, d)
        except ApiError as err:  # history itself is away: the next pass tries again
            log.warning("owner deletion %s not resumed: %s", d.id, err.code)
    return len(listed.deletions)


async def resume_forever(clients: Clients, settings: Settings, webhooks: WebhookStore) -> None:
    while True:
        await asyncio.sleep(settings.lifecycle_sweep_seconds)
        try:
            await resume_deletions(clients, settings, webhooks)
        except asyncio.CancelledError:
            raise
        except ApiError as err:
            log.warning("owner deletions not resumed: %s", err.code)
        except Exception:
            log.exception("owner deletion resumer failed")


async def _all_pages(ask: Callable[[str], Awaitable[Any]], field: str) -> list[Any]:
    items: list[Any] = []
    token = ""
    while True:
        reply = await ask(token)
        items.extend(getattr(reply, field))
        token = reply.next_page_token
        if not token:
            return items


async def owner_records(
    clients: Clients, settings: Settings, webhooks: WebhookStore, owner: str
) -> dict[str, dict[str, list[Any]]]:
    """Every row each service's owner-data registry holds for `owner`, by service and table
    (shared/owner_data.py): the export derived from the registries, so it has every table
    with an owner column, whatever feature added it."""
    out: dict[str, dict[str, list[Any]]] = {}
    for service in PEERS:
        tables: dict[str, list[Any]] = {}
        token = ""
        while True:
            page = await unary(
                clients.platform(service).ExportOwnerData,
                platform_pb.ExportOwnerDataRequest(page_size=1000, page_token=token),
                owner=owner,
                service=service,
                timeout=settings.rpc_timeout_seconds,
            )
            for record in page.records:
                tables.setdefault(record.table, []).append(json.loads(record.row_json))
            token = page.next_page_token
            if not token:
                break
        out[service] = tables
    tables = {}
    position = None
    try:
        while True:
            rows, position = await shared_owner_data.export_page(
                webhooks.engine, REGISTRY, owner, position, 1000
            )
            for table, row in rows:
                tables.setdefault(table, []).append(row)
            if position is None:
                break
    except SQLAlchemyError:
        log.warning("reading an owner's gateway records for the export failed", exc_info=True)
        raise store_unavailable() from None
    out["gateway"] = tables
    return out


async def export_owner(
    clients: Clients, settings: Settings, webhooks: WebhookStore, owner: str
) -> dict[str, Any]:
    """Everything the services hold for `owner`, as one JSON document: `records`, every row
    of every registered table (owner_records), and the readable views of the same: threads,
    runs, every message (hidden ones included, as the audit shows them), refused tool calls,
    memories, jobs and their runs, and the owner's webhook endpoints (never their secrets)."""
    timeout = settings.rpc_timeout_seconds
    try:
        endpoints = await webhooks.endpoints(owner, MAX_ENDPOINTS)
    except SQLAlchemyError:
        log.warning("reading an owner's webhook endpoints for the export failed", exc_info=True)
        raise store_unavailable() from None

    def call(rpc: Any, request: Any, service: str, *, admin: bool = False) -> Awaitable[Any]:
        return unary(rpc, request, owner=owner, service=service, timeout=timeout, admin=admin)

    threads = await _all_pages(
        lambda t: call(
            clients.history.ListThreads,
            history_pb.ListThreadsRequest(page_size=MAX_PAGE_SIZE, page_token=t),
            "history",
        ),
        "threads",
    )
    agent_runs = await _all_pages(
        lambda t: call(
            clients.history.ListRuns,
            history_pb.ListRunsRequest(page_size=MAX_PAGE_SIZE, page_token=t),
            "history",
        ),
        "runs",
    )
    # The audit listing is the one that includes hidden messages; the admin scope is the
    # gateway's own here, for the caller's own owner id only.
    messages: list[Any] = []
    denials: list[Any] = []
    token = ""
    while True:
        page = await call(
            clients.history.ListAudit,
            history_pb.ListAuditRequest(owner_id=owner, page_size=MAX_PAGE_SIZE, page_token=token),
            "history",
            admin=True,
        )
        messages.extend(page.messages)
        denials.extend(page.tool_denials)
        token = page.next_page_token
        if not token:
            break
    memories = await _all_pages(
        lambda t: call(
            clients.memory.ListMemories,
            memory_pb.ListMemoriesRequest(page_size=MAX_PAGE_SIZE, page_token=t),
            "memory",
        ),
        "memories",
    )
    job_list = await _all_pages(
        lambda t: call(
            clients.scheduler.ListJobs,
            scheduler_pb.ListJobsRequest(page_size=MAX_PAGE_SIZE, page_token=t),
            "scheduler",
        ),
        "jobs",
    )
    exported_jobs = []
    for job in job_list:

        def job_runs(token: str, job_id: str = job.id) -> Awaitable[Any]:
            return call(
                clients.scheduler.ListJobRuns,
                scheduler_pb.ListJobRunsRequest(
                    job_id=job_id, page_size=MAX_PAGE_SIZE, page_token=token
                ),
                "scheduler",
            )

        runs = await _all_pages(job_runs, "job_runs")
        exported = jobs.job_json(job)
        exported["runs"] = [jobs.job_run_json(r) for r in runs]
        exported_jobs.append(exported)
    return {
        "ownerId": owner,
        "records": await owner_records(clients, settings, webhooks, owner),
        "threads": [convert.thread_json(t) for t in threads],
        "runs": [convert.run_json(r) for r in agent_runs],
        "messages": convert.messages_json(messages, audit=True),
        "toolDenials": [convert.tool_denial_json(d) for d in denials],
        "memories": [convert.memory_json(m) for m in memories],
        "jobs": exported_jobs,
        "webhookEndpoints": [endpoint_json(e) for e in endpoints],
    }
