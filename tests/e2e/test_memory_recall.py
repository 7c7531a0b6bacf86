"""Memory that reaches chat, end to end on the real processes and the scripted model: a fact
told in one thread, saved by a memory run, is in the context of a new thread's run (and in
its audit, never in its history); each memory job has its own watermark; the memory API
creates, edits, deletes, searches and exports, and every change is on record. The shared
suite searches by words only (conftest.make_suite); `make run` as it is (the launcher with
its local embedding model) recalls a memory asked for in other words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import httpx
import pytest
from agentmesh.orchestrator.v1 import orchestrator_service_pb2 as orch_pb
from agentmesh.orchestrator.v1 import orchestrator_service_pb2_grpc as orch_grpc
from agentmesh.type.v1 import message_pb2, run_event_pb2

from services.launcher import ROOT, Suite, free_port, free_ports
from shared.identity import call_metadata
from shared.messages import msg_to_pb, user
from shared.profiles import AUTOMATION_MEMORY_DEFAULT, profile_to_pb
from tests.e2e.conftest import SECRET, parse_sse, run_body
from tests.e2e.test_memory_agent import JOB_PROMPT, _auth, _owner, memories


@pytest.fixture(scope="module")
def orchestrator(suite: Suite) -> Iterator[orch_grpc.OrchestratorServiceStub]:
    with grpc.insecure_channel(suite.address("orchestrator")) as ch:
        yield orch_grpc.OrchestratorServiceStub(ch)


def chat(suite: Suite, owner: str, thread_id: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    resp = httpx.post(
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=run_body(thread_id, run_id, text),
        headers=_auth(owner),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    events = parse_sse(resp.content)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return run_id, events


def job_run(
    orchestrator: orch_grpc.OrchestratorServiceStub,
    owner: str,
    job_thread: str,
    declared: tuple[str, ...],
) -> list[run_event_pb2.RunEvent]:
    """What the scheduler sends for a memory job of `declared` tools (a job's own thread)."""
    run_id = f"job-{uuid.uuid4().hex[:10]}"
    request = orch_pb.StartRunRequest(
        thread_id=job_thread,
        run_id=run_id,
        messages=[msg_to_pb(user(JOB_PROMPT, id=f"in-{run_id}"))],
        origin=message_pb2.RUNTIME_MODE_AUTOMATION,
        profile=profile_to_pb(AUTOMATION_MEMORY_DEFAULT),
        declared_tools=list(declared),
        time_zone="Asia/Shanghai",
    )
    events = list(
        r.event for r in orchestrator.StartRun(request, metadata=call_metadata(owner), timeout=60)
    )
    assert events[-1].WhichOneof("payload") == "run_finished", events[-1]
    return events


def audit(suite: Suite, owner: str, thread_id: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/admin/audit",
        params={"owner_id": owner, "thread_id": thread_id},
        headers=_auth("root", admin=True),
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def history(suite: Suite, owner: str, thread_id: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/agent/threads/{thread_id}/history",
        headers=_auth(owner),
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def recalls(messages: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("runId") == run_id and m["role"] == "system"]


def test_a_fact_told_in_one_thread_is_in_the_context_of_a_new_thread(
    suite: Suite, orchestrator: orch_grpc.OrchestratorServiceStub
) -> None:
    owner = _owner("lin")
    told_run, _ = chat(suite, owner, f"a-{owner}", "I love green tea")
    job_run(orchestrator, owner, f"job-{owner}", ("memory_write", "memory_forget"))
    [memory] = memories(suite, owner).values()
    assert memory["content"] == "User likes green tea"
    # It cites the message that stated it.
    assert memory["sourceMessageIds"] == [f"m-{told_run}"]

    thread = f"b-{owner}"
    # Words every one of which the memory holds: what the lexical search of today finds
    # (hybrid search finds paraphrases too; its tests are its own).
    run_id, _ = chat(suite, owner, thread, "Green tea?")
    [recalled] = recalls(audit(suite, owner, thread), run_id)
    assert recalled["kind"] == "memory_recall"
    assert "User likes green tea" in recalled["content"]
    used_all = recalled["metadata"]["memoryRecall"]
    [used] = [u for u in used_all if u.get("source") != "conversation"]
    assert used["id"] == memory["id"] and 0 <= used["score"] <= 1
    # chat_default recalls the conversation too: the message that said it, in thread a.
    said = [u for u in used_all if u.get("source") == "conversation"]
    assert f"a-{owner}" in {u["threadId"] for u in said}, used_all
    # How its search ran: this suite has no embedding model (conftest.make_suite).
    assert recalled["metadata"]["memorySearch"] == {
        "mode": "lexical",
        "modeReason": "no_embedding_model",
    }
    # Never shown to the user, never in a later run's context.
    assert recalled["id"] not in {m["id"] for m in history(suite, owner, thread)}
    assert all(m["role"] != "system" for m in history(suite, owner, thread))

    # Another owner's run recalls nothing of it.
    other = _owner("kai")
    other_run, _ = chat(suite, other, f"b-{other}", "Green tea?")
    assert recalls(audit(suite, other, f"b-{other}"), other_run) == []


def test_a_job_that_cannot_forget_does_not_use_up_a_forget_request(
    suite: Suite, orchestrator: orch_grpc.OrchestratorServiceStub
) -> None:
    """The pears scenario of issue 19: each job has its own watermark."""
    owner = _owner("pear")
    write_only, default = f"job-w-{owner}", f"job-d-{owner}"
    chat(suite, owner, f"c-{owner}", "I love pears.")
    job_run(orchestrator, owner, write_only, ("memory_write",))
    assert set(memories(suite, owner)) == {"User likes pears"}

    chat(suite, owner, f"c-{owner}", "Please forget that I love pears.")
    job_run(orchestrator, owner, write_only, ("memory_write",))
    assert set(memories(suite, owner)) == {"User likes pears"}

    # The default job (write and forget) has read nothing yet: it reads both messages.
    events = job_run(orchestrator, owner, default, ("memory_write", "memory_forget"))
    names = [
        e.tool_call_start.tool_call_name
        for e in events
        if e.WhichOneof("payload") == "tool_call_start"
    ]
    assert "memory_forget" in names
    assert memories(suite, owner) == {}

    # The forget is on record: what it forgot, the run's messages that asked, and why.
    changes = httpx.get(
        f"{suite.gateway_url}/api/v1/memories:changes", headers=_auth(owner), timeout=10
    ).json()["changes"]
    [forget] = [c for c in changes if c["action"] == "forget"]
    assert forget["content"] == "User likes pears"
    assert forget["actor"] == "run"
    assert len(forget["sourceMessageIds"]) == 1
    assert "forget" in forget["reason"].lower()


def test_the_memory_api_creates_edits_searches_deletes_and_exports(suite: Suite) -> None:
    owner, other = _owner("ann"), _owner("bob")
    url = f"{suite.gateway_url}/api/v1/memories"
    created = httpx.post(
        url, json={"content": "I live in Hangzhou", "kind": "place"}, headers=_auth(owner)
    )
    assert created.status_code == 201, created.text
    memory = created.json()
    assert created.headers["location"] == f"/api/v1/memories/{memory['id']}"
    again = httpx.post(url, json={"content": "i live in  hangzhou."}, headers=_auth(owner))
    assert again.status_code == 200 and again.json()["id"] == memory["id"]

    edited = httpx.patch(
        f"{url}/{memory['id']}",
        json={"content": "I live in Shanghai", "version": 2},
        headers=_auth(owner),
    )
    assert edited.status_code == 200, edited.text
    assert (edited.json()["content"], edited.json()["version"]) == ("I live in Shanghai", 3)
    stale = httpx.patch(
        f"{url}/{memory['id']}", json={"kind": "fact", "version": 2}, headers=_auth(owner)
    )
    assert stale.status_code == 409, stale.text

    found = httpx.get(url, params={"q": "Shanghai"}, headers=_auth(owner)).json()["memories"]
    assert [m["id"] for m in found] == [memory["id"]]

    # Another owner can neither see, edit nor delete it.
    assert httpx.get(f"{url}/{memory['id']}", headers=_auth(other)).status_code == 404
    assert (
        httpx.patch(
            f"{url}/{memory['id']}", json={"kind": "fact"}, headers=_auth(other)
        ).status_code
        == 404
    )
    assert httpx.delete(f"{url}/{memory['id']}", headers=_auth(other)).status_code == 404
    assert httpx.get(url, params={"q": "Shanghai"}, headers=_auth(other)).json()["memories"] == []

    second = httpx.post(url, json={"content": "My name is Ann"}, headers=_auth(owner)).json()
    assert httpx.delete(f"{url}/{second['id']}", headers=_auth(owner)).status_code == 204
    assert httpx.delete(f"{url}/{second['id']}", headers=_auth(owner)).status_code == 404

    export = httpx.get(f"{url}:export", headers=_auth(owner))
    assert export.status_code == 200, export.text
    body = export.json()
    assert [m["content"] for m in body["memories"]] == ["I live in Shanghai"]
    assert [(c["action"], c["actor"]) for c in body["changes"]] == [
        ("write", "api"),
        ("rewrite", "api"),
        ("update", "api"),
        ("write", "api"),
        ("forget", "api"),
    ]
    assert body["changes"][2]["previousContent"] == "i live in  hangzhou."
    nothing = httpx.get(f"{url}:export", headers=_auth(other)).json()
    assert (nothing["memories"], nothing["changes"]) == ([], [])


def test_a_search_answers_each_memorys_relevance_and_a_listing_none(suite: Suite) -> None:
    owner = _owner("score")
    url = f"{suite.gateway_url}/api/v1/memories"
    ids = {}
    for content in ("I like green tea", "I drink tea at night", "My name is Ann"):
        created = httpx.post(url, json={"content": content}, headers=_auth(owner))
        assert created.status_code == 201, created.text
        ids[content] = created.json()["id"]

    found = httpx.get(url, params={"q": "green tea"}, headers=_auth(owner))
    assert found.status_code == 200, found.text
    assert (found.json()["mode"], found.json()["modeReason"]) == ("lexical", "no_embedding_model")
    hits = found.json()["memories"]
    assert hits[0]["id"] == ids["I like green tea"]
    assert ids["I drink tea at night"] in [m["id"] for m in hits]
    scores = [m["score"] for m in hits]
    # Relevance 0..1, best first; the memory holding every word of q is the best there is.
    assert all(isinstance(s, float) and 0 < s <= 1 for s in scores), scores
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1], scores
    assert scores[0] == 1.0

    listed = httpx.get(url, headers=_auth(owner)).json()["memories"]
    assert {m["id"] for m in listed} == set(ids.values())
    assert all("score" not in m for m in listed)
    one = httpx.get(f"{url}/{hits[0]['id']}", headers=_auth(owner)).json()
    assert "score" not in one


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("post", {}, "content"),
        ("post", {"content": "   "}, "content"),
        ("post", {"content": "tea", "kind": "drink"}, "kind"),
        ("post", {"content": "tea", "owner": "someone"}, "owner"),
        ("post", {"content": 5}, "content"),
        ("post", {"content": "a\u0000b"}, "content"),
        ("patch", {}, "content"),
        ("patch", {"version": 0, "kind": "fact"}, "version"),
        ("patch", {"content": "x" * 2001}, "content"),
    ],
)
def test_bad_memory_input_is_400_naming_the_field(
    suite: Suite, method: str, body: dict[str, Any], field: str
) -> None:
    owner = _owner("val")
    url = f"{suite.gateway_url}/api/v1/memories"
    if method == "patch":
        memory = httpx.post(url, json={"content": "I like tea"}, headers=_auth(owner)).json()
        url = f"{url}/{memory['id']}"
    resp = httpx.request(method.upper(), url, json=body, headers=_auth(owner))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field


def test_a_job_sets_its_memory_policy_in_camel_case(suite: Suite) -> None:
    owner = _owner("job")
    url = f"{suite.gateway_url}/api/v1/automation/jobs"
    profile = {
        "name": "digest",
        "enableRouter": False,
        "executor": "memory",
        # A memory job acts through memory_write / memory_forget: its profile allows one.
        "toolPolicy": {"allowlist": ["memory_write"]},
        "memory": {"mode": "recall", "topK": 3, "maxTokens": 100},
    }
    body = {
        "title": "digest",
        "schedule": {"type": "daily", "localTime": "10:00"},
        "config": {"prompt": "Extract."},
        "executionProfile": profile,
    }
    created = httpx.post(url, json=body, headers=_auth(owner), timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["executionProfile"]["memory"] == {
        "mode": "recall",
        "topK": 3,
        "minRelevance": 0.0,
        "maxTokens": 100,
    }
    for memory, field in [
        ({"mode": "recall", "top_k": 3}, "executionProfile.memory.top_k"),
        ({"mode": "recall", "topK": 99}, "executionProfile.memory.topK"),
        ({"mode": "sometimes"}, "executionProfile.memory.mode"),
    ]:
        bad = {**body, "executionProfile": {**profile, "memory": memory}}
        resp = httpx.post(url, json=bad, headers=_auth(owner), timeout=10)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["details"][0]["field"] == field


def trigger_and_wait(suite: Suite, owner: str, job_id: str, timeout: float = 60) -> dict[str, Any]:
    """`:trigger` a job and wait (up to `timeout` seconds) for that run to end; the job run."""
    url = f"{suite.gateway_url}/api/v1/automation/jobs/{job_id}"
    triggered = httpx.post(f"{url}:trigger", headers=_auth(owner), timeout=10)
    assert triggered.status_code == 202, triggered.text
    run_id = triggered.json()["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = httpx.get(f"{url}/runs", headers=_auth(owner), timeout=10).json()["runs"]
        [run] = [r for r in runs if r["id"] == run_id]
        if run["state"] in ("succeeded", "failed"):
            return dict(run)
        time.sleep(0.3)
    raise AssertionError(f"job run {run_id} did not end")


def test_the_pears_scenario_of_issue_19_through_the_api(suite: Suite) -> None:
    owner = _owner("pears")
    base = suite.gateway_url
    registered = httpx.post(f"{base}/api/v1/users", json={}, headers=_auth(owner), timeout=10)
    assert registered.status_code == 200, registered.text
    [default] = [j for j in registered.json()["jobs"] if j["defaultJob"]]
    writer = httpx.post(
        f"{base}/api/v1/automation/jobs",
        json={
            "title": "writer",
            "schedule": {"type": "daily", "localTime": "03:00"},
            "config": {"prompt": JOB_PROMPT, "tools": ["memory_write"]},
        },
        headers=_auth(owner),
        timeout=10,
    )
    assert writer.status_code == 201, writer.text

    chat(suite, owner, f"c-{owner}", "I love pears.")
    assert trigger_and_wait(suite, owner, writer.json()["id"])["state"] == "succeeded"
    assert set(memories(suite, owner)) == {"User likes pears"}
    chat(suite, owner, f"c-{owner}", "Please forget that I love pears.")
    assert trigger_and_wait(suite, owner, writer.json()["id"])["state"] == "succeeded"
    assert set(memories(suite, owner)) == {"User likes pears"}

    # The default job may forget: the request is still there for it.
    assert trigger_and_wait(suite, owner, default["id"])["state"] == "succeeded"
    assert memories(suite, owner) == {}


@dataclass(frozen=True)
class Launched:
    """The suite `make run` starts (python -m services.launcher), as these helpers reach it."""

    gateway_url: str


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    """`make run` as it is by default (embedded backend, one process, the local embedding
    model beside it), on free ports."""
    tmp = tmp_path_factory.mktemp("launched")
    gateway, embedding, base = free_port(), free_port(), free_ports(6)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMESH_")}
    env.update(
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'protos'}",
        AGENTMESH_DATA_DIR=str(tmp / "data"),
        AGENTMESH_JWT_SECRET=SECRET,
        AGENTMESH_QUOTA_RUNS_PER_MINUTE="0",
    )
    command = [sys.executable, "-m", "services.launcher", "--port", str(gateway)]
    command += ["--grpc-port-base", str(base), "--embedding-port", str(embedding)]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line.decode())
        if "console:" in said[-1] or proc.poll() is not None:
            break
    try:
        assert any("agentmesh is running" in line for line in said), "".join(said)
        yield Launched(f"http://127.0.0.1:{gateway}")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_make_run_recalls_a_memory_asked_for_in_other_words(launched: Launched) -> None:
    """Issue 31: with `make run` as it is, "What is my favourite drink?" recalls that the
    user loves jasmine green tea (no word in common: found by meaning, hybrid search)."""
    suite = cast(Suite, launched)
    owner = _owner("drink")
    registered = httpx.post(
        f"{launched.gateway_url}/api/v1/users", json={}, headers=_auth(owner), timeout=10
    )
    assert registered.status_code == 200, registered.text
    [job] = [j for j in registered.json()["jobs"] if j["defaultJob"]]
    chat(suite, owner, f"a-{owner}", "I love jasmine green tea")
    assert trigger_and_wait(suite, owner, job["id"])["state"] == "succeeded"
    assert set(memories(suite, owner)) == {"User likes jasmine green tea"}

    question = "What is my favourite drink?"
    # The memory service embeds a new memory in the background: until then search finds
    # it by its words only (and this question has none of them).
    deadline = time.monotonic() + 30
    while True:
        found = httpx.get(
            f"{launched.gateway_url}/api/v1/memories",
            params={"q": question},
            headers=_auth(owner),
            timeout=10,
        ).json()
        assert found["mode"] == "hybrid", found
        if found["memories"]:
            break
        assert time.monotonic() < deadline, "the memory was never found by meaning"
        time.sleep(0.3)
    assert found["memories"][0]["content"] == "User likes jasmine green tea"

    thread = f"b-{owner}"
    run_id, _ = chat(suite, owner, thread, question)
    [recalled] = recalls(audit(suite, owner, thread), run_id)
    assert "User likes jasmine green tea" in recalled["content"]
    assert recalled["metadata"]["memorySearch"] == {"mode": "hybrid"}


def test_the_memory_api_merges_duplicates_and_consolidates_what_edits_left(suite: Suite) -> None:
    owner, other = _owner("tidy"), _owner("untidy")
    url = f"{suite.gateway_url}/api/v1/memories"
    tea = httpx.post(url, json={"content": "User likes tea"}, headers=_auth(owner)).json()
    # The same fact in other words: merged into its memory on write.
    again = httpx.post(url, json={"content": "The user likes tea."}, headers=_auth(owner))
    assert again.status_code == 200 and again.json()["id"] == tea["id"], again.text
    # Edits are not consolidated: one leaves a duplicate, one a contradiction.
    made = {}
    for content in ("User plays chess", "User lives in Shanghai", "User plays the violin"):
        made[content] = httpx.post(url, json={"content": content}, headers=_auth(owner)).json()
    for content, edited in (
        ("User plays chess", "the user likes tea!"),
        ("User plays the violin", "User lives in Hangzhou"),
    ):
        changed = httpx.patch(
            f"{url}/{made[content]['id']}", json={"content": edited}, headers=_auth(owner)
        )
        assert changed.status_code == 200, changed.text

    done = httpx.post(f"{url}:consolidate", headers=_auth(owner))
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["merged"], body["superseded"]) == (1, 1)
    assert [(c["action"], c["memoryId"]) for c in body["changes"]] == [
        ("merge", made["User plays chess"]["id"]),
        ("supersede", made["User lives in Shanghai"]["id"]),
    ]
    listed = httpx.get(url, headers=_auth(owner)).json()["memories"]
    assert {m["content"] for m in listed} == {"User likes tea", "User lives in Hangzhou"}
    recorded = httpx.get(f"{url}:changes", headers=_auth(owner)).json()["changes"]
    assert [c["action"] for c in recorded].count("merge") == 2  # the write's and the pass's

    nothing = httpx.post(f"{url}:consolidate", headers=_auth(other)).json()
    assert nothing == {"merged": 0, "superseded": 0, "changes": []}
    unknown = httpx.post(f"{url}:consolidate?dry_run=1", headers=_auth(owner))
    assert unknown.status_code == 400, unknown.text
