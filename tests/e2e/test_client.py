"""The Python client (agentmesh_client.Client) against the real suite: typed answers for every
endpoint it covers, and the API's errors as `ApiError`s carrying what the gateway said."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from ag_ui.core import EventType, RunFinishedEvent, TextMessageContentEvent, ToolCallResultEvent

from agentmesh_client import ApiError, Client, GatewayUnreachable
from services.launcher import Suite, free_port
from tests.e2e.client_helpers import chat, memory_job, wait_for_job_run
from tests.e2e.conftest import token

pytestmark = pytest.mark.e2e


@pytest.fixture
def owner() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def am(suite: Suite, owner: str) -> Iterator[Client]:
    with Client(suite.gateway_url, token(owner)) as client:
        yield client


def test_a_run_streams_typed_events_and_is_stored(am: Client) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with am.start_run(thread, "Hello there", timezone="Europe/Berlin") as run:
        events = list(run)
    assert events[0].type == EventType.RUN_STARTED
    assert isinstance(events[-1], RunFinishedEvent) and run.terminal is events[-1]
    assert events[-1].usage and events[-1].usage[0].output_tokens > 0
    # The event union: only STEP_STARTED events, filtered here, have step_name.
    steps = [e.step_name for e in events if e.type == EventType.STEP_STARTED]  # type: ignore[attr-defined]
    assert steps == ["router", "worker"]
    text = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))
    assert isinstance(run.last_event_id, int) and run.last_event_id > 0
    history = am.history(thread).messages
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[0].text == "Hello there" and history[1].text == text
    assert history[1].metadata.executor == "worker" and history[1].run_id == run.run_id
    record = am.get_run(run.run_id)
    assert (record.state, record.thread_id, record.origin) == ("succeeded", thread, "chat")
    # The record's usage is the one RUN_FINISHED carried.
    [usage] = record.usage
    [finished] = events[-1].usage
    assert (usage.input_tokens, usage.output_tokens) == (
        finished.input_tokens,
        finished.output_tokens,
    )
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert record.profile is not None and record.profile.name == "chat_default"
    assert thread in [t.id for t in am.iter_threads()]
    # Resuming: from the start the same events; after the last one, nothing.
    with am.resume_run(run.run_id) as again:
        assert [e.type for e in again] == [e.type for e in events]
    assert list(am.resume_run(run.run_id, after=run.last_event_id)) == []


def test_a_tool_call_arrives_with_its_arguments_and_result(am: Client) -> None:
    with am.start_run(
        f"t-{uuid.uuid4().hex[:8]}", 'use the memory_search tool with {"query": "x"}'
    ) as run:
        events = list(run)
    # The event union: only TOOL_CALL_ARGS events, filtered here, have delta.
    args = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)  # type: ignore[attr-defined]
    assert args == '{"query": "x"}'
    [result] = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert result.content == "[]"


def test_a_refused_run_is_an_api_error_naming_the_field(am: Client) -> None:
    with pytest.raises(ApiError) as caught:
        am.start_run("bad id", "hi")
    err = caught.value
    assert (err.status, err.code, err.field) == (400, "INVALID_ARGUMENT", "threadId")
    assert err.request_id


def test_an_automation_thread_is_refused_with_its_reason(am: Client) -> None:
    with pytest.raises(ApiError) as caught:
        am.start_run("automation:x", "hi")
    assert (caught.value.status, caught.value.error.get("reason")) == (409, "AUTOMATION_THREAD")


def test_another_owners_run_is_not_found(suite: Suite, am: Client) -> None:
    with am.start_run(f"t-{uuid.uuid4().hex[:8]}", "mine") as run:
        list(run)
    with (
        Client(suite.gateway_url, token("someone-else")) as other,
        pytest.raises(ApiError) as caught,
    ):
        other.get_run(run.run_id)
    assert (caught.value.status, caught.value.code) == (404, "NOT_FOUND")


def test_cancelling_a_finished_run_says_how_it_ended(am: Client) -> None:
    with am.start_run(f"t-{uuid.uuid4().hex[:8]}", "done soon") as run:
        list(run)
    with pytest.raises(ApiError) as caught:
        am.cancel_run(run.run_id)
    assert (caught.value.status, caught.value.error.get("state")) == (409, "succeeded")


def test_a_bad_token_is_401(suite: Suite) -> None:
    with Client(suite.gateway_url, "nope") as bad, pytest.raises(ApiError) as caught:
        bad.threads()
    assert (caught.value.status, caught.value.code) == (401, "UNAUTHENTICATED")


def test_an_unreachable_gateway_is_its_own_error() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "t") as nowhere:
        with pytest.raises(GatewayUnreachable):
            nowhere.health()
        with pytest.raises(GatewayUnreachable):
            nowhere.start_run("t", "hi")


def test_health_and_readiness(am: Client) -> None:
    assert am.health() == {"status": "ok"}
    assert am.ready()["status"] == "ready"


def test_a_job_through_its_whole_life(am: Client) -> None:
    job = am.create_job(
        {"title": "Digest", "schedule": {"type": "daily", "localTime": "08:30"},
         "timezone": "Europe/London", "config": {"prompt": "Summarise", "tools": ["memory_write"]}},
        idempotency_key=f"k-{uuid.uuid4().hex}",
    )  # fmt: skip
    assert (job.status, job.version, job.schedule.local_time) == ("active", 1, "08:30")
    assert job.next_run_time is not None and job.config.tools == ["memory_write"]
    changed = am.update_job(job.id, {"title": "Morning digest"}, version=1)
    assert (changed.title, changed.version) == ("Morning digest", 2)
    with pytest.raises(ApiError) as stale:
        am.update_job(job.id, {"title": "x"}, version=1)
    assert (stale.value.status, stale.value.code) == (409, "ABORTED")
    paused = am.pause_job(job.id)
    assert paused.status == "paused" and paused.next_run_time is None
    assert am.resume_job(job.id).status == "active"
    weekly = {"type": "weekly", "weekday": 2, "localTime": "07:00"}
    replaced = am.replace_job(
        job.id,
        {"title": "Weekly", "schedule": weekly, "config": {"prompt": "Summarise"}},
        version=4,
    )
    assert (replaced.schedule.type, replaced.schedule.weekday) == ("weekly", 2)
    assert job.id in [j.id for j in am.jobs().jobs]
    triggered = am.trigger_job(job.id)
    assert (triggered.trigger, triggered.attempt) == ("manual", 1)
    done = wait_for_job_run(am, job.id)
    assert done.id == triggered.id and done.run_id
    assert am.get_run(done.run_id).thread_id == f"automation:{job.id}"
    am.delete_job(job.id)
    with pytest.raises(ApiError) as gone:
        am.get_job(job.id)
    assert gone.value.status == 404


def test_a_memory_with_its_provenance_is_listed_searched_and_forgotten(am: Client) -> None:
    run_id = chat(am, f"t-{uuid.uuid4().hex[:8]}", "I love green tea")
    job = am.create_job(memory_job("Extract facts"))
    am.trigger_job(job.id)
    job_run = wait_for_job_run(am, job.id)
    assert job_run.state == "succeeded", job_run
    [memory] = am.memories().memories
    assert "green tea" in memory.content
    assert memory.source_run_id == job_run.run_id
    assert memory.source_message_ids == [f"{run_id}-user"]
    assert [m.id for m in am.memories(query="tea").memories] == [memory.id]
    am.forget_memory(memory.id)
    assert am.memories().memories == []
    with pytest.raises(ApiError) as again:
        am.forget_memory(memory.id)
    assert again.value.status == 404


def test_a_memory_is_saved_edited_against_its_version_and_its_changes_listed(
    am: Client,
) -> None:
    saved = am.create_memory("User lives in Lyon", kind="place")
    assert (saved.content, saved.kind, saved.version) == ("User lives in Lyon", "place", 1)
    assert am.create_memory("user lives in lyon.").version == 2  # the same fact: rewritten
    edited = am.edit_memory(saved.id, content="User lives in Paris", version=2)
    assert (edited.content, edited.kind, edited.version) == ("User lives in Paris", "place", 3)
    assert am.get_memory(saved.id) == edited
    with pytest.raises(ApiError) as stale:
        am.edit_memory(saved.id, kind="fact", version=2)
    assert (stale.value.status, stale.value.code) == (409, "ABORTED")
    assert am.get_memory(saved.id).kind == "place"
    with pytest.raises(ApiError) as bad:
        am.edit_memory(saved.id, kind="colour")
    assert bad.value.status == 400 and "kind" in str(bad.value)
    changes = am.memory_changes().changes
    assert [(c.action, c.actor, c.memory_id) for c in changes] == [
        ("write", "api", saved.id),
        ("rewrite", "api", saved.id),
        ("update", "api", saved.id),
    ]
    assert (changes[2].previous_content, changes[2].content) == (
        "user lives in lyon.",
        "User lives in Paris",
    )
    one = am.memory_changes(page_size=1)
    assert len(one.changes) == 1 and one.next_page_token
    assert am.memory_changes(page_token=one.next_page_token).changes == changes[1:]


def test_the_audit_shows_hidden_messages_to_an_admin_only(
    suite: Suite, am: Client, owner: str
) -> None:
    job = am.create_job(memory_job("Look for facts"))
    am.trigger_job(job.id)
    wait_for_job_run(am, job.id)
    with pytest.raises(ApiError) as denied:
        am.audit(owner)
    assert denied.value.status == 403
    with Client(suite.gateway_url, token("auditor", admin=True)) as admin:
        page = admin.audit(owner, origin="automation", thread_id=f"automation:{job.id}")
    hidden = [m for m in page.messages if m.metadata.hidden_from_user]
    assert [m.text for m in hidden] == ["Look for facts"]
    assert hidden[0].visibility_mask == 0


def test_registering_creates_the_default_job(am: Client, owner: str) -> None:
    reg = am.register("Europe/Berlin")
    assert reg.owner_id == owner
    [job] = reg.jobs
    assert job.default_job and job.timezone == "Europe/Berlin"
    assert am.register().jobs[0].id == job.id
