"""A typed client of the gateway's HTTP API (docs/protocols/agent/api-endpoints.md).

    from agentmesh_client import Client

    with Client("http://127.0.0.1:8080", token) as am:
        with am.start_run("t-1", "Hello") as run:
            for event in run:             # ag_ui.core events, typed
                ...
        am.history("t-1").messages

Every error the gateway answers is an `ApiError` carrying its status, `code`, `message`,
`details` and request id, exactly as the API gave them; a gateway that cannot be reached is
a `GatewayUnreachable`. Nothing is retried behind the caller's back: whether a request is
safe to send again is the API's rule (api-endpoints.md, "Did the run start?").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import ag_ui.core
import httpx
import httpx_sse
from pydantic import TypeAdapter, ValidationError

from agentmesh_client.models import (
    ApiModel,
    AuditPage,
    CancelResult,
    Job,
    JobPage,
    JobRun,
    JobRunPage,
    Memory,
    MemoryChangePage,
    MemoryPage,
    Message,
    MessagePage,
    Registration,
    Run,
    Thread,
    ThreadPage,
)

DEFAULT_URL = "http://127.0.0.1:8080"
# A run stream with nothing to say carries a heartbeat every 15 s (AGENTMESH_SSE_HEARTBEAT_SECONDS):
# silence for much longer than that means the connection is gone.
STREAM_READ_TIMEOUT = 75.0

_EVENT = TypeAdapter[ag_ui.core.Event](ag_ui.core.Event)
_TERMINAL = (ag_ui.core.EventType.RUN_FINISHED, ag_ui.core.EventType.RUN_ERROR)
_M = TypeVar("_M", bound=ApiModel)


class AgentmeshError(Exception):
    """Base of the client's errors."""


class GatewayUnreachable(AgentmeshError):
    """The gateway could not be reached (connection refused, DNS, timeout before an answer)."""


class ApiError(AgentmeshError):
    """An error answer of the gateway: the HTTP status and the error body as it was sent."""

    def __init__(self, status: int, body: Mapping[str, Any], request_id: str = "") -> None:
        error = body.get("error") if isinstance(body.get("error"), Mapping) else {}
        assert isinstance(error, Mapping)
        self.status = status
        self.code = str(error.get("code", "")) or f"HTTP_{status}"
        self.message = str(error.get("message", "")) or f"HTTP {status}"
        self.request_id = str(error.get("requestId", "")) or request_id
        details = error.get("details")
        self.details: list[dict[str, Any]] = list(details) if isinstance(details, list) else []
        # Fields some errors add (reason, runId, activeRunId, state, ...).
        self.error: dict[str, Any] = dict(error)
        super().__init__(f"{status} {self.code}: {self.message}")

    @property
    def field(self) -> str | None:
        """The field the first detail names, if any."""
        return str(self.details[0].get("field")) if self.details else None


def _path_id(value: str) -> str:
    """An id as one path segment (`automation:<job>` keeps its meaning; `/` cannot split it)."""
    return quote(value, safe="")


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters without the ones left unset (the API refuses nothing it does not list)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None or value == "":
            continue
        out[key] = value.isoformat() if isinstance(value, datetime) else value
    return out


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = json.loads(resp.read())
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    raise ApiError(resp.status_code, body, resp.headers.get("x-request-id", ""))


class _Closing:
    """`with` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RunStream(_Closing):
    """The AG-UI events of one run, typed (`ag_ui.core` models), as they arrive.

    Iterate it once; `last_event_id` is the sequence of the last event received (what
    `Client.resume_run(run_id, after=...)` continues after). Closing it stops following the
    run; the run itself goes on (the API's disconnect policy)."""

    def __init__(self, response: httpx.Response | None, run_id: str, thread_id: str) -> None:
        self._response = response
        self.run_id = run_id
        self.thread_id = thread_id
        self.last_event_id: int | None = None
        self.terminal: ag_ui.core.BaseEvent | None = None

    def __iter__(self) -> Iterator[ag_ui.core.BaseEvent]:
        if self._response is None:  # 204: nothing after what the caller already has
            return
        try:
            for sse in httpx_sse.EventSource(self._response).iter_sse():
                if sse.id:
                    self.last_event_id = int(sse.id)
                try:
                    event: ag_ui.core.BaseEvent = _EVENT.validate_json(sse.data)
                except ValidationError:
                    # A newer gateway's event type: unknown stages are skipped, not fatal.
                    continue
                if event.type in _TERMINAL:
                    self.terminal = event
                yield event
        except httpx.TransportError as err:
            raise GatewayUnreachable(f"the run's stream broke: {err}") from err
        finally:
            self.close()

    def close(self) -> None:
        if self._response is not None:
            self._response.close()


class Client(_Closing):
    """The gateway's HTTP API, one method per endpoint; `token` is the bearer token."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    # ---- plumbing ----------------------------------------------------------------------------

    def _unreachable(self, err: httpx.TransportError) -> GatewayUnreachable:
        return GatewayUnreachable(f"cannot reach the gateway at {self._http.base_url}: {err}")

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            resp = self._http.request(
                method,
                path,
                params=params,
                json=body,
                headers=dict(headers or {}),
            )
        except httpx.TransportError as err:
            raise self._unreachable(err) from err
        _raise_for(resp)
        return resp

    def _get(self, model: type[_M], path: str, **params: Any) -> _M:
        return model.model_validate(self._send("GET", path, params=_params(**params)).json())

    def _stream(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str]
    ) -> httpx.Response:
        request = self._http.build_request(
            method,
            path,
            json=body,
            headers={"Accept": "text/event-stream", **headers},
            timeout=httpx.Timeout(self._http.timeout.connect, read=STREAM_READ_TIMEOUT),
        )
        try:
            resp = self._http.send(request, stream=True)
        except httpx.TransportError as err:
            raise self._unreachable(err) from err
        try:
            _raise_for(resp)
        except ApiError:
            resp.close()
            raise
        return resp

    # ---- health ------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """GET /healthz: the gateway process is alive."""
        return dict(self._send("GET", "/healthz").json())

    def ready(self) -> dict[str, Any]:
        """GET /readyz: every service answers SERVING (else `ApiError` 503 naming the others)."""
        return dict(self._send("GET", "/readyz").json())

    # ---- runs --------------------------------------------------------------------------------

    def start_run(
        self,
        thread_id: str,
        text: str,
        *,
        run_id: str | None = None,
        message_id: str | None = None,
        profile: str | None = None,
        multitask_strategy: str | None = None,
        cancel_on_disconnect: bool | None = None,
        timezone: str | None = None,
    ) -> RunStream:
        """POST /api/v1/agent/runs with `text` as the new user message; the stream of its
        events. `run_id` defaults to a new id: send a 504 OUTCOME_UNKNOWN again with the
        same one."""
        run_id = run_id or f"run-{uuid.uuid4().hex}"
        agentmesh: dict[str, Any] = {}
        if profile:
            agentmesh["profile"] = profile
        if multitask_strategy:
            agentmesh["multitaskStrategy"] = multitask_strategy
        if cancel_on_disconnect is not None:
            agentmesh["cancelOnDisconnect"] = cancel_on_disconnect
        body: dict[str, Any] = {
            "threadId": thread_id,
            "runId": run_id,
            "messages": [{"id": message_id or f"{run_id}-user", "role": "user", "content": text}],
        }
        if agentmesh:
            body["forwardedProps"] = {"agentmesh": agentmesh}
        headers = {"X-Timezone": timezone} if timezone else {}
        resp = self._stream("POST", "/api/v1/agent/runs", body=body, headers=headers)
        return RunStream(resp, run_id, thread_id)

    def resume_run(self, run_id: str, after: int | None = None) -> RunStream:
        """GET /api/v1/agent/runs/{run_id}/events after sequence `after` (None: from the start)."""
        headers = {"Last-Event-ID": str(after)} if after is not None else {}
        resp = self._stream("GET", f"/api/v1/agent/runs/{_path_id(run_id)}/events", headers=headers)
        if resp.status_code == 204:
            resp.close()
            return RunStream(None, run_id, "")
        return RunStream(resp, run_id, "")

    def cancel_run(self, run_id: str) -> CancelResult:
        resp = self._send("POST", f"/api/v1/agent/runs/{_path_id(run_id)}:cancel")
        return CancelResult.model_validate(resp.json())

    def get_run(self, run_id: str) -> Run:
        return self._get(Run, f"/api/v1/agent/runs/{_path_id(run_id)}")

    # ---- threads and history -----------------------------------------------------------------

    def threads(self, *, page_size: int = 0, page_token: str | None = None) -> ThreadPage:
        return self._get(
            ThreadPage, "/api/v1/agent/threads", page_size=page_size or None, page_token=page_token
        )

    def iter_threads(self, *, page_size: int = 0) -> Iterator[Thread]:
        token: str | None = None
        while True:
            page = self.threads(page_size=page_size, page_token=token)
            yield from page.threads
            if not page.next_page_token:
                return
            token = page.next_page_token

    def history(
        self,
        thread_id: str,
        *,
        page_size: int = 0,
        page_token: str | None = None,
        direction: str | None = None,
    ) -> MessagePage:
        return self._get(
            MessagePage,
            f"/api/v1/agent/threads/{_path_id(thread_id)}/history",
            page_size=page_size or None,
            page_token=page_token,
            direction=direction,
        )

    def iter_history(self, thread_id: str, *, page_size: int = 0) -> Iterator[Message]:
        token: str | None = None
        while True:
            page = self.history(thread_id, page_size=page_size, page_token=token)
            yield from page.messages
            if not page.next_page_token:
                return
            token = page.next_page_token

    def audit(
        self,
        owner_id: str,
        *,
        origin: str | None = None,
        executor: str | None = None,
        execution_profile_name: str | None = None,
        thread_id: str | None = None,
        start_time: datetime | str | None = None,
        end_time: datetime | str | None = None,
        page_size: int = 0,
        page_token: str | None = None,
    ) -> AuditPage:
        """GET /api/v1/admin/audit (an admin token)."""
        return self._get(
            AuditPage,
            "/api/v1/admin/audit",
            owner_id=owner_id,
            origin=origin,
            executor=executor,
            execution_profile_name=execution_profile_name,
            thread_id=thread_id,
            start_time=start_time,
            end_time=end_time,
            page_size=page_size or None,
            page_token=page_token,
        )

    # ---- memories ----------------------------------------------------------------------------

    def memories(
        self, *, query: str | None = None, page_size: int = 0, page_token: str | None = None
    ) -> MemoryPage:
        """A page of the caller's memories, or (with `query`) the one page of a search."""
        return self._get(
            MemoryPage,
            "/api/v1/memories",
            query=query,
            page_size=page_size or None,
            page_token=page_token,
        )

    def get_memory(self, memory_id: str) -> Memory:
        return self._get(Memory, f"/api/v1/memories/{_path_id(memory_id)}")

    def create_memory(self, content: str, *, kind: str | None = None) -> Memory:
        """POST /api/v1/memories (the same fact again rewrites that memory: version + 1)."""
        body: dict[str, Any] = {"content": content, **({"kind": kind} if kind else {})}
        return Memory.model_validate(self._send("POST", "/api/v1/memories", body=body).json())

    def edit_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        kind: str | None = None,
        version: int | None = None,
    ) -> Memory:
        """PATCH /api/v1/memories/{id}; with `version`, a memory changed since is a 409
        (VERSION_MISMATCH) and nothing is written."""
        body: dict[str, Any] = {
            key: value
            for key, value in (("content", content), ("kind", kind), ("version", version))
            if value is not None
        }
        resp = self._send("PATCH", f"/api/v1/memories/{_path_id(memory_id)}", body=body)
        return Memory.model_validate(resp.json())

    def memory_changes(
        self, *, page_size: int = 0, page_token: str | None = None
    ) -> MemoryChangePage:
        """A page of the record of every change of the caller's memories, oldest first."""
        return self._get(
            MemoryChangePage,
            "/api/v1/memories:changes",
            page_size=page_size or None,
            page_token=page_token,
        )

    def forget_memory(self, memory_id: str) -> None:
        self._send("DELETE", f"/api/v1/memories/{_path_id(memory_id)}")

    # ---- users and automation ----------------------------------------------------------------

    def register(self, timezone: str | None = None) -> Registration:
        """POST /api/v1/users: the caller's default jobs exist afterwards (idempotent)."""
        body = {"timezone": timezone} if timezone else {}
        return Registration.model_validate(self._send("POST", "/api/v1/users", body=body).json())

    def jobs(self, *, page_size: int = 0, page_token: str | None = None) -> JobPage:
        return self._get(
            JobPage, "/api/v1/automation/jobs", page_size=page_size or None, page_token=page_token
        )

    def get_job(self, job_id: str) -> Job:
        return self._get(Job, f"/api/v1/automation/jobs/{_path_id(job_id)}")

    def create_job(self, job: Mapping[str, Any], *, idempotency_key: str | None = None) -> Job:
        """POST a job in the API's JSON (camelCase; api-endpoints.md "Job JSON")."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        resp = self._send("POST", "/api/v1/automation/jobs", body=dict(job), headers=headers)
        return Job.model_validate(resp.json())

    def replace_job(self, job_id: str, job: Mapping[str, Any], *, version: int) -> Job:
        body = {**job, "version": version}
        resp = self._send("PUT", f"/api/v1/automation/jobs/{_path_id(job_id)}", body=body)
        return Job.model_validate(resp.json())

    def update_job(self, job_id: str, changes: Mapping[str, Any], *, version: int) -> Job:
        """PATCH (a merge patch one level deep): each top-level field given replaces the job's."""
        body = {**changes, "version": version}
        resp = self._send("PATCH", f"/api/v1/automation/jobs/{_path_id(job_id)}", body=body)
        return Job.model_validate(resp.json())

    def delete_job(self, job_id: str) -> None:
        self._send("DELETE", f"/api/v1/automation/jobs/{_path_id(job_id)}")

    def _job_action(self, job_id: str, action: str) -> httpx.Response:
        return self._send("POST", f"/api/v1/automation/jobs/{_path_id(job_id)}:{action}")

    def pause_job(self, job_id: str) -> Job:
        return Job.model_validate(self._job_action(job_id, "pause").json())

    def resume_job(self, job_id: str) -> Job:
        return Job.model_validate(self._job_action(job_id, "resume").json())

    def trigger_job(self, job_id: str) -> JobRun:
        """Run the job now (202): the recorded job run; follow it with `job_runs`."""
        return JobRun.model_validate(self._job_action(job_id, "trigger").json())

    def job_runs(
        self, job_id: str, *, page_size: int = 0, page_token: str | None = None
    ) -> JobRunPage:
        return self._get(
            JobRunPage,
            f"/api/v1/automation/jobs/{_path_id(job_id)}/runs",
            page_size=page_size or None,
            page_token=page_token,
        )
