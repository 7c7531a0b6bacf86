"""Hostile inputs at the HTTP edge, against the real suite on the backend under test (the
PostgreSQL backend refuses NUL and over-long text that SQLite keeps, so both run).

Each row is one request of issue 16 (items 3 and 5) with the status and the error field the
docs promise (api-endpoints.md "Strict input", "Job JSON"; run-agent-input.md); every row
also checks that the answer is small and that nothing the caller owns changed.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from services.launcher import Suite
from tests.e2e.conftest import token

JOBS = "/api/v1/automation/jobs"
RUNS = "/api/v1/agent/runs"
QUOTAS = "/api/v1/admin/owners/hostile-quota/quotas"
KEYS = "/api/v1/admin/api-keys"
WEBHOOKS = "/api/v1/webhooks/endpoints"
OWNER = f"hostile-{uuid.uuid4().hex[:8]}"
# An error answer stays small whatever it refuses (the caps of api-endpoints.md).
MAX_ERROR_BYTES = 2048

JOB = {
    "title": "Digest",
    "schedule": {"type": "daily", "localTime": "08:30"},
    "config": {"prompt": "Summarise my day", "tools": ["memory_write"]},
}


def nested(depth: int, leaf: Any = 1) -> Any:
    """`depth` levels of objects {"a": ...} around `leaf`."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def job(**changes: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(JOB))
    body.update(changes)
    return body


def profile(**fields: Any) -> dict[str, Any]:
    return job(executionProfile={"enableRouter": False, "executor": "memory", **fields})


def run(**changes: Any) -> dict[str, Any]:
    rid = uuid.uuid4().hex[:10]
    body: dict[str, Any] = {
        "threadId": f"t-hostile-{rid}",
        "runId": f"r-hostile-{rid}",
        "messages": [{"id": f"m-{rid}", "role": "user", "content": "hello"}],
    }
    body.update(changes)
    return body


def raw(body: dict[str, Any], old: str, new: str) -> bytes:
    """The JSON text of `body` with `old` (a JSON-encoded value) replaced by raw JSON text:
    what json.dumps cannot write (lone surrogate escapes, NaN, huge integers)."""
    text = json.dumps(body)
    assert old in text
    return text.replace(old, new, 1).encode()


@dataclass(frozen=True)
class Row:
    name: str
    method: str
    path: str  # "{job}" is the module's job id
    body: bytes | None
    field: str
    status: int = 400
    headers: dict[str, Any] = field(default_factory=dict)
    admin: bool = False


def post(name: str, path: str, body: dict[str, Any] | bytes | str, fld: str, **kw: Any) -> Row:
    data = (
        body
        if isinstance(body, bytes)
        else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
    )
    return Row(name, kw.pop("method", "POST"), path, data, fld, **kw)


def get(name: str, path: str, fld: str, **kw: Any) -> Row:
    return Row(name, "GET", path, None, fld, **kw)


ROWS = [
    # --- nesting (RecursionError before): the whole body, state, forwardedProps, parameters
    post("job body 2000 deep", JOBS, "[" * 2000 + "]" * 2000, "body"),
    post(
        "users body 2000 deep",
        "/api/v1/users",
        '{"timezone":' + "[" * 2000 + "]" * 2000 + "}",
        "body",
    ),
    post("job field 40 deep", JOBS, job(config=nested(40)), "config" + ".a" * 31),
    post(
        "run state 2000 deep",
        RUNS,
        json.dumps(run())[:-1] + ',"state":' + "[" * 2000 + "]" * 2000 + "}",
        "body",
    ),
    post("run state 40 deep", RUNS, run(state=nested(40)), "state" + ".a" * 31),
    post(
        "run forwardedProps 40 deep",
        RUNS,
        run(forwardedProps=nested(40)),
        "forwardedProps" + ".a" * 31,
    ),
    post(
        "run tool parameters 40 deep",
        RUNS,
        run(tools=[{"name": "lookup", "parameters": nested(40)}]),
        "tools[0].parameters" + ".a" * 29,
    ),
    # --- lone surrogates (UnicodeEncodeError before), in every kind of string
    post("surrogate threadId", RUNS, raw(run(threadId="T"), '"T"', '"a\\ud800b"'), "threadId"),
    post("surrogate runId", RUNS, raw(run(runId="R"), '"R"', '"a\\ud800b"'), "runId"),
    post("surrogate content", RUNS, raw(run(), '"hello"', '"a\\ud800b"'), "messages[0].content"),
    post(
        "surrogate context",
        RUNS,
        raw(run(context=[{"description": "d", "value": "V"}]), '"V"', '"a\\udc00b"'),
        "context[0].value",
    ),
    post(
        "surrogate tool name",
        RUNS,
        raw(run(tools=[{"name": "N"}]), '"N"', '"\\ud800"'),
        "tools[0].name",
    ),
    post("surrogate key in state", RUNS, raw(run(state={"K": 1}), '"K"', '"\\ud800"'), "state"),
    post("surrogate job title", JOBS, raw(job(title="T"), '"T"', '"a\\ud800b"'), "title"),
    post(
        "surrogate prompt",
        JOBS,
        raw(job(config={"prompt": "P"}), '"P"', '"\\udfff"'),
        "config.prompt",
    ),
    post("surrogate timezone", JOBS, raw(job(timezone="Z"), '"Z"', '"Asia/\\ud800"'), "timezone"),
    post(
        "surrogate localTime",
        JOBS,
        raw(job(schedule={"type": "daily", "localTime": "L"}), '"L"', '"03:0\\ud800"'),
        "schedule.localTime",
    ),
    # --- NUL (PostgreSQL: 500 before; a chat message: 200 then RUN_ERROR INTERNAL)
    post("NUL in job title", JOBS, job(title="a\x00b"), "title"),
    post("NUL in prompt", JOBS, job(config={"prompt": "a\x00b"}), "config.prompt"),
    post("NUL in profile name", JOBS, profile(name="a\x00b"), "executionProfile.name"),
    post(
        "NUL in chat message",
        RUNS,
        run(messages=[{"id": "m-nul", "role": "user", "content": "a\x00b"}]),
        "messages[0].content",
    ),
    post("NUL in state value", RUNS, run(state={"k": "a\x00b"}), "state.k"),
    get("NUL in memory query", "/api/v1/memories?query=tea%00", "query"),
    # The memory service's rule, named as the caller wrote it (it said "query" for q).
    get("memory search of punctuation", "/api/v1/memories?q=%25%25%25", "q"),
    get("memory search of punctuation, former name", "/api/v1/memories?query=%25%25", "query"),
    get("NUL in job id", f"{JOBS}/a%00b", "job_id"),
    get("NUL in thread id", "/api/v1/agent/threads/a%00b/history", "thread_id"),
    get("invalid UTF-8 in query", "/api/v1/memories?query=tea%ff", "query"),
    get("encoded surrogate in query", "/api/v1/memories?query=%ed%a0%80", "query"),
    get("invalid UTF-8 in job id", f"{JOBS}/a%ffb", "job_id"),
    # --- numbers
    post(
        "version past int64 on PATCH",
        f"{JOBS}/{{job}}",
        '{"version": 9223372036854775808, "title": "x"}',
        "version",
        method="PATCH",
    ),
    post(
        "version past int64 on PUT",
        f"{JOBS}/{{job}}",
        raw(job(version=1), '"version": 1', '"version": 9223372036854775808'),
        "version",
        method="PUT",
    ),
    post(
        "NaN jitter",
        JOBS,
        raw(job(jitterSeconds=1), '"jitterSeconds": 1', '"jitterSeconds": NaN'),
        "jitterSeconds",
    ),
    post(
        "Infinity in state", RUNS, raw(run(state={"n": 1}), '"n": 1', '"n": -Infinity'), "state.n"
    ),
    post("1e999 in state", RUNS, raw(run(state={"n": 1}), '"n": 1', '"n": 1e999'), "state.n"),
    # --- instants at the edge of the range
    post(
        "runAt before year 1 in UTC",
        JOBS,
        job(schedule={"type": "once", "runAt": "0001-01-01T00:00:00+14:00"}),
        "schedule.runAt",
    ),
    post(
        "runAt after year 9999 in UTC",
        JOBS,
        job(schedule={"type": "once", "runAt": "9999-12-31T23:59:59-14:00"}),
        "schedule.runAt",
    ),
    # --- instants are RFC 3339 text: a number was taken as seconds since 1970 (ran at once)
    post("runAt a number", JOBS, job(schedule={"type": "once", "runAt": 1}), "schedule.runAt"),
    post(
        "runAt digits",
        JOBS,
        job(schedule={"type": "once", "runAt": "1700000000"}),
        "schedule.runAt",
    ),
    get(
        "audit start_time digits",
        "/api/v1/admin/audit?owner_id=x&start_time=99999999999999",
        "start_time",
        admin=True,
    ),
    get(
        "audit start_time after 9999",
        "/api/v1/admin/audit?owner_id=x&start_time=9999-12-31T23:59:59-14:00",
        "start_time",
        admin=True,
    ),
    get(
        "audit end_time before year 1",
        "/api/v1/admin/audit?owner_id=x&end_time=0001-01-01T00:00:00%2B14:00",
        "end_time",
        admin=True,
    ),
    # --- Last-Event-ID: ASCII digits only ("²" passes str.isdigit())
    get(
        "Last-Event-ID superscript",
        f"{RUNS}/r-x/events",
        "Last-Event-ID",
        headers={"Last-Event-ID": b"\xb2"},
    ),
    get(
        "Last-Event-ID Arabic-Indic digits",
        f"{RUNS}/r-x/events",
        "Last-Event-ID",
        headers={"Last-Event-ID": "\u0661".encode()},
    ),
    get(
        "Last-Event-ID 19 digits",
        f"{RUNS}/r-x/events",
        "Last-Event-ID",
        headers={"Last-Event-ID": "1" * 19},
    ),
    get("after past the bound", f"{RUNS}/r-x/events?after={10**18}", "after"),
    # --- lengths, the same on both backends
    post(
        "cron of 5000 characters",
        JOBS,
        job(schedule={"type": "cron", "cron": "0 0 * * " + ",".join(["1"] * 2496)}),
        "schedule.cron",
    ),
    post("title of 201 characters", JOBS, job(title="x" * 201), "title"),
    post("prompt of 2001 characters", JOBS, job(config={"prompt": "p" * 2001}), "config.prompt"),
    post(
        "localTime with a newline",
        JOBS,
        job(schedule={"type": "daily", "localTime": "03:00\n"}),
        "schedule.localTime",
    ),
    post(
        "window with a newline",
        JOBS,
        profile(historyPolicy={"window": "all\n"}),
        "executionProfile.historyPolicy.window",
    ),
    # --- tool lists: bounded, small errors (429 with gRPC internals before)
    post(
        "10000 unknown config.tools",
        JOBS,
        job(config={"prompt": "p", "tools": [f"tool_{i}" for i in range(10_000)]}),
        "config.tools",
    ),
    post(
        "6 unknown config.tools",
        JOBS,
        job(config={"prompt": "p", "tools": [f"t{i}" * 50 for i in range(6)]}),
        "config.tools",
    ),
    post(
        "10000 unknown allowlist",
        JOBS,
        profile(toolPolicy={"allowlist": [f"tool_{i}" for i in range(10_000)]}),
        "executionProfile.toolPolicy.allowlist",
    ),
    post("129 chat tools", RUNS, run(tools=[{"name": f"tool_{i}"} for i in range(129)]), "tools"),
    # --- seed 001 §6.2: required boolean, enum, unknown fields refused, one spelling
    post("enableRouter no", JOBS, profile(enableRouter="no"), "executionProfile.enableRouter"),
    post("enableRouter 1", JOBS, profile(enableRouter=1), "executionProfile.enableRouter"),
    post(
        "enableRouter true string",
        JOBS,
        profile(enableRouter="true"),
        "executionProfile.enableRouter",
    ),
    post("enableRouter yes", JOBS, profile(enableRouter="yes"), "executionProfile.enableRouter"),
    post(
        "enableRouter missing",
        JOBS,
        job(executionProfile={"executor": "memory"}),
        "executionProfile.enableRouter",
    ),
    post("executor planner", JOBS, profile(executor="planner"), "executionProfile.executor"),
    post(
        "router off without executor",
        JOBS,
        job(executionProfile={"enableRouter": False}),
        "executionProfile.executor",
    ),
    post(
        "snake enable_router",
        JOBS,
        job(executionProfile={"enable_router": False, "executor": "memory"}),
        "executionProfile.enable_router",
    ),
    post("both spellings", JOBS, profile(enable_router=True), "executionProfile.enable_router"),
    post(
        "snake tool_policy",
        JOBS,
        profile(tool_policy={"allowlist": []}),
        "executionProfile.tool_policy",
    ),
    post(
        "snake execution_profile",
        JOBS,
        job(execution_profile={"enableRouter": False, "executor": "memory"}),
        "execution_profile",
    ),
    post("unknown job field", JOBS, job(colour="red"), "colour"),
    post("unknown profile field", JOBS, profile(temperature=0.2), "executionProfile.temperature"),
    post("unknown config field", JOBS, job(config={"prompt": "p", "model": "x"}), "config.model"),
    post(
        "PATCH with enableRouter no",
        f"{JOBS}/{{job}}",
        {"version": 1, "executionProfile": {"enableRouter": "no", "executor": "memory"}},
        "executionProfile.enableRouter",
        method="PATCH",
    ),
    post(
        "PATCH with a snake key",
        f"{JOBS}/{{job}}",
        {"version": 1, "executionProfile": {"enable_router": False, "executor": "memory"}},
        "executionProfile.enable_router",
        method="PATCH",
    ),
    # --- RunAgentInput: unknown keys stay accepted, typed fields are type-strict
    post("threadId a number", RUNS, run(threadId=5), "threadId"),
    post("tools an object", RUNS, run(tools={"name": "x"}), "tools"),
    post("tool name a number", RUNS, run(tools=[{"name": 7}]), "tools[0].name"),
    post(
        "context value a number",
        RUNS,
        run(context=[{"description": "d", "value": 1}]),
        "context[0].value",
    ),
    post("protocolVersion a number", RUNS, run(protocolVersion=1), "protocolVersion"),
    # --- quotas, usage and API keys (admin endpoints of issue 23)
    post(
        "quota negative", QUOTAS, {"runsPerMinute": -1}, "runsPerMinute", method="PUT", admin=True
    ),
    post("quota a string", QUOTAS, {"tokensPerDay": "9"}, "tokensPerDay", method="PUT", admin=True),
    post(
        "quota huge",
        QUOTAS,
        raw({"concurrentRuns": 1}, "1", "1" + "0" * 400),
        "concurrentRuns",
        method="PUT",
        admin=True,
    ),
    post(
        "quota NaN",
        QUOTAS,
        raw({"concurrentRuns": 1}, "1", "NaN"),
        "concurrentRuns",
        method="PUT",
        admin=True,
    ),
    post("quota unknown field", QUOTAS, {"runs": 1}, "runs", method="PUT", admin=True),
    post("quota body 2000 deep", QUOTAS, "[" * 2000 + "]" * 2000, "body", method="PUT", admin=True),
    post(
        "quota owner with a NUL",
        "/api/v1/admin/owners/a%00b/quotas",
        {"runsPerMinute": 1},
        "owner_id",
        method="PUT",
        admin=True,
    ),
    get("usage days 0", "/api/v1/usage?days=0", "days"),
    get("usage days huge", "/api/v1/usage?days=" + "9" * 400, "days"),
    get("usage of another owner by query", "/api/v1/usage?owner_id=someone", "owner_id"),
    post("API key owner invalid", KEYS, {"ownerId": "a b", "name": "k"}, "ownerId", admin=True),
    post("API key name NUL", KEYS, {"ownerId": "a", "name": "k\u0000"}, "name", admin=True),
    post(
        "API key name surrogate",
        KEYS,
        raw({"ownerId": "a", "name": "N"}, '"N"', '"\\ud800"'),
        "name",
        admin=True,
    ),
    post(
        "API key admin a string",
        KEYS,
        {"ownerId": "a", "name": "k", "admin": "true"},
        "admin",
        admin=True,
    ),
    get("API keys page_size -1", f"{KEYS}?page_size=-1", "page_size", admin=True),
    # --- webhook URLs no attempt could be made to (a delivery pass failed on each before)
    post("webhook host with an empty label", WEBHOOKS, {"url": "http://a..b/"}, "url"),
    post("webhook host label of 64", WEBHOOKS, {"url": f"http://{'a' * 64}.example.com/"}, "url"),
    post("webhook host bad A-label", WEBHOOKS, {"url": "http://xn--zz.example.com/"}, "url"),
]


@pytest.fixture(scope="module")
def client(suite: Suite) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {token(OWNER)}", "Content-Type": "application/json"}
    with httpx.Client(base_url=suite.gateway_url, headers=headers, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def job_id(client: httpx.Client) -> str:
    resp = client.post(JOBS, json=JOB)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def _stored(client: httpx.Client) -> dict[str, Any]:
    """What the owner has: their jobs (with versions) and their threads."""
    jobs = client.get(JOBS, params={"page_size": 1000})
    threads = client.get("/api/v1/agent/threads", params={"page_size": 1000})
    assert jobs.status_code == 200 and threads.status_code == 200
    return {"jobs": jobs.json()["jobs"], "threads": threads.json()["threads"]}


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_hostile_input_is_refused_naming_the_field_and_changes_nothing(
    client: httpx.Client, job_id: str, row: Row
) -> None:
    before = _stored(client)
    headers = dict(row.headers)
    if row.admin:
        headers["Authorization"] = f"Bearer {token('hostile-admin', admin=True)}"
    resp = client.request(
        row.method, row.path.replace("{job}", job_id), content=row.body, headers=headers
    )
    assert resp.status_code < 500, resp.text
    assert resp.status_code == row.status, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert len(resp.content) <= MAX_ERROR_BYTES, resp.content[:300]
    error = resp.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert [d["field"] for d in error["details"]] == [row.field], error
    assert _stored(client) == before


def test_unknown_tools_error_names_a_few_of_them_briefly(client: httpx.Client) -> None:
    names = [f"tool_{i}" for i in range(20)]
    resp = client.post(JOBS, json=job(config={"prompt": "p", "tools": names}))
    assert resp.status_code == 400
    description = resp.json()["error"]["details"][0]["description"]
    assert description.startswith(
        "unknown tools: tool_0, tool_1, tool_2, tool_3, tool_4 and 15 more"
    )


def test_a_header_with_a_control_character_gets_the_json_error_body(suite: Suite) -> None:
    url = urlsplit(suite.gateway_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/memories HTTP/1.1\r\nHost: x\r\nX-Timezone: a\x01b\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request"
    assert b"content-type: application/json" in lines
    error = json.loads(body)["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["details"] == [
        {"field": "request", "description": error["details"][0]["description"]}
    ]
    assert f"x-request-id: {error['requestId']}".encode() in lines


def test_a_body_at_the_depth_limit_is_accepted(client: httpx.Client) -> None:
    # 32 levels: the body, then state and the 30 objects inside it.
    body = run(state=nested(31))
    resp = client.post(RUNS, json=body)
    assert resp.status_code == 200, resp.text
    assert b"RUN_FINISHED" in resp.content


def test_unknown_top_level_keys_of_a_run_input_are_still_accepted(client: httpx.Client) -> None:
    resp = client.post(RUNS, json=run(somethingNewInAgUi={"x": [1, 2]}))
    assert resp.status_code == 200, resp.text
    assert b"RUN_FINISHED" in resp.content
