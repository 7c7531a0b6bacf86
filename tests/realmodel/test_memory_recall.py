"""Memory that reaches chat with the real local model: a memory of the owner's is in the
context of a new thread's run, as the model really received it (the endpoint's own token
count grows by the block), and in the run's audit, never in its history."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from services.launcher import Suite
from tests.e2e.conftest import token
from tests.realmodel.conftest import assert_well_formed, auth, chat, history, new_id

pytestmark = pytest.mark.realmodel

QUESTION = "Green tea?"


def finished_usage(events: list[dict[str, Any]]) -> dict[str, Any]:
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"] == {"type": "success"}, (
        finished
    )
    [usage] = finished["usage"]
    return dict(usage)


def audit(suite: Suite, owner: str, thread: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{suite.gateway_url}/api/v1/admin/audit",
        params={"owner_id": owner, "thread_id": thread},
        headers={"Authorization": f"Bearer {token('root', admin=True)}"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["messages"])


def test_a_memory_is_in_the_real_models_context_in_a_new_thread(suite: Suite) -> None:
    owner, stranger = new_id("tea"), new_id("none")
    # What the memory job writes of "I love green tea." (SmolLM2-135M cannot call the
    # memory tools yet: its memory runs end with MEMORY_OUTPUT_UNUSABLE, see README).
    saved = httpx.post(
        f"{suite.gateway_url}/api/v1/memories",
        json={"content": "User likes green tea", "kind": "preference"},
        headers=auth(owner),
        timeout=30,
    )
    assert saved.status_code == 201, saved.text

    thread = new_id("t")
    events = chat(suite, owner, thread, QUESTION)
    assert_well_formed(events)
    with_memory = finished_usage(events)
    without_memory = finished_usage(chat(suite, stranger, new_id("t"), QUESTION))
    # The endpoint counted the block (real tokenizer when it reports usage, else the estimate).
    assert with_memory["inputTokens"] > without_memory["inputTokens"]

    [recalled] = [m for m in audit(suite, owner, thread) if m.get("kind") == "memory_recall"]
    assert "User likes green tea" in recalled["content"]
    assert [r["id"] for r in recalled["metadata"]["memoryRecall"]] == [saved.json()["id"]]
    assert all(m.get("kind") != "memory_recall" for m in history(suite, owner, thread))
