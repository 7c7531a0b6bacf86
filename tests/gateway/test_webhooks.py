"""Webhook rules (services/gateway/webhooks.py) and the gateway's webhook tables on the
backend under test: endpoint validation, the deployment's endpoints, matching, the body,
the retry schedule, signatures a Standard Webhooks receiver accepts, the deliverer's lease,
the delivery log and replay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from services.gateway import webhooks
from services.gateway.owner_data import REGISTRY
from services.gateway.store import GatewayStore
from services.gateway.webhook_store import Endpoint, EndpointHealth, WebhookStore
from services.launcher import free_port
from shared import outbox, owner_data
from shared.settings import Settings
from tests.gateway.conftest import bearer
from tests.webhook_receiver import Receiver

ENDPOINTS = "/api/v1/webhooks/endpoints"


@pytest.mark.parametrize(
    "url",
    ["https://example.com/hook", "http://127.0.0.1:8080/x?y=1", "http://[::1]:9/h"],
)
def test_http_and_https_urls_with_a_host_are_endpoints(url: str) -> None:
    assert webhooks.url_problem(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com",
        "https://",
        "http:///path",
        "example.com/hook",
        "",
        "http://host:port/",
        "http://exa mple.com/",
        "javascript:alert(1)",
        "https://e.com/" + "a" * 2000,
        # Hosts no attempt could reach: the resolver's IDNA codec or the client refuses them.
        "http://a..b/",
        "http://.example.com/",
        "http://" + "a" * 64 + ".example.com/",
        "http://\u200b.example.com/",
        "http://xn--zz.example.com/",
        "http://[v1.x]/",
    ],
)
def test_other_urls_are_refused(url: str) -> None:
    assert webhooks.url_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://localhost:8080/",
        "http://api.localhost/",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest",
        "http://[::1]/",
        "http://[::ffff:192.168.0.1]/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
    ],
)
def test_local_and_private_addresses_are_refused_for_owners(url: str) -> None:
    assert webhooks.url_problem(url) is None
    assert webhooks.private_host_problem(url) is not None


@pytest.mark.parametrize(
    "url", ["https://example.com/h", "http://8.8.8.8/", "http://[2606:4700::1]/"]
)
def test_public_addresses_and_names_pass_the_creation_check(url: str) -> None:
    assert webhooks.private_host_problem(url) is None


def test_unknown_or_repeated_event_types_are_refused() -> None:
    assert webhooks.event_types_problem(["run.failed", "memory.changed"]) is None
    assert "run.exploded" in (webhooks.event_types_problem(["run.exploded"]) or "")
    assert webhooks.event_types_problem(["run.failed", "run.failed"]) is not None


def test_the_retry_schedule_doubles_up_to_its_cap() -> None:
    s = Settings(webhook_retry_initial_seconds=5, webhook_retry_max_seconds=60)
    assert [webhooks.retry_delay_ms(n, s) for n in range(1, 7)] == [
        5000,
        10000,
        20000,
        40000,
        60000,
        60000,
    ]


def test_a_delivery_fails_after_its_last_attempt() -> None:
    s = Settings(webhook_max_attempts=3, webhook_retry_initial_seconds=1)
    assert webhooks.after_attempt(1, False, 1000, s) == ("pending", 2000)
    assert webhooks.after_attempt(2, False, 1000, s) == ("pending", 3000)
    assert webhooks.after_attempt(3, False, 1000, s) == ("failed", None)
    assert webhooks.after_attempt(3, True, 1000, s) == ("succeeded", None)


def _event(owner: str = "alice", type_: str = "run.failed") -> outbox.Event:
    return outbox.new_event(owner, type_, {"runId": "r1"}, 1_750_000_000_123)


def test_an_event_goes_to_the_deployment_and_its_owner_only() -> None:
    deployment = Endpoint("ops", "", "https://ops", "whsec_x")
    mine = Endpoint("whe_1", "alice", "https://a", "whsec_x", event_types=("run.failed",))
    other = Endpoint("whe_2", "bob", "https://b", "whsec_x")
    picky = Endpoint("whe_3", "alice", "https://c", "whsec_x", event_types=("memory.changed",))
    made = webhooks.deliveries_for([_event()], [deployment, mine, other, picky], 5)
    assert [d.endpoint_id for d in made] == ["ops", "whe_1"]
    assert {d.event_id for d in made} == {made[0].event_id}  # one webhook-id per event


def test_the_body_is_type_timestamp_and_data_with_the_owner() -> None:
    event = _event()
    assert json.loads(webhooks.body(event)) == {
        "type": "run.failed",
        "timestamp": "2025-06-15T15:06:40.123000Z",
        "data": {"ownerId": "alice", "runId": "r1"},
    }


def test_a_signed_attempt_verifies_with_the_standardwebhooks_library() -> None:
    secret = webhooks.new_secret()
    payload = webhooks.body(_event())
    headers = webhooks.signed_headers(secret, "evt_1", payload, datetime.now(UTC))
    assert Webhook(secret).verify(payload, headers) == json.loads(payload)
    with pytest.raises(WebhookVerificationError):
        Webhook(webhooks.new_secret()).verify(payload, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(payload.replace("alice", "mallory"), headers)


def test_deployment_endpoints_come_from_the_setting_or_its_file(tmp_path: Path) -> None:
    secret = webhooks.new_secret()
    listed = [{"id": "ops", "url": "https://ops.example/h", "secret": secret}]
    [e] = webhooks.deployment_endpoints(Settings(webhook_endpoints=json.dumps(listed)))
    assert (e.id, e.owner_id, e.url, e.event_types) == ("ops", "", "https://ops.example/h", ())
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps([{**listed[0], "eventTypes": ["run.failed"]}]))
    [f] = webhooks.deployment_endpoints(Settings(webhook_endpoints_file=path))
    assert f.event_types == ("run.failed",)
    assert webhooks.deployment_endpoints(Settings()) == ()


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"id": "ops", "url": "ftp://x", "secret": "whsec_AAAA"}, "http or https"),
        ({"id": "ops", "url": "https://x", "secret": "whsec_!!"}, "secret"),
        ({"id": "whe_1", "url": "https://x", "secret": "whsec_AAAA"}, "id"),
        ({"id": "ops", "url": "https://x"}, "secret"),
        ({"id": "ops", "url": "https://x", "secret": "whsec_AAAA", "x": 1}, "x"),
        ({"id": "ops", "url": "https://x", "secret": "whsec_AAAA", "eventTypes": ["no"]}, "no"),
    ],
)
def test_a_bad_deployment_endpoint_stops_the_start_saying_why(
    entry: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        webhooks.deployment_endpoints(Settings(webhook_endpoints=json.dumps([entry])))


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[WebhookStore]:
    gateway = await GatewayStore.open(settings)
    try:
        yield WebhookStore(gateway.engine)
    finally:
        await gateway.close()


async def test_one_deliverer_holds_the_lease_until_it_expires(store: WebhookStore) -> None:
    assert await store.take_lease("d", "a", now_ms=1000, until_ms=2000)
    assert not await store.take_lease("d", "b", now_ms=1500, until_ms=2500)
    assert await store.take_lease("d", "a", now_ms=1500, until_ms=2500)  # renewed
    assert not await store.take_lease("d", "b", now_ms=2400, until_ms=3400)
    assert await store.take_lease("d", "b", now_ms=2600, until_ms=3600)  # a's expired
    assert not await store.take_lease("d", "a", now_ms=2700, until_ms=3700)


async def test_a_delivery_is_recorded_once_claimed_once_and_replayed(
    store: WebhookStore,
) -> None:
    endpoint = Endpoint("whe_1", "alice", "https://a", webhooks.new_secret())
    event = _event()
    [d] = webhooks.deliveries_for([event], [endpoint], 1000)
    await store.insert_deliveries([d])
    # The outbox listed the event again (its acknowledgement was lost): still one delivery.
    await store.insert_deliveries(webhooks.deliveries_for([event], [endpoint], 1001))
    [claimed] = await store.claim_due(now_ms=1000, until_ms=9000, limit=10)
    assert claimed.id == d.id
    assert await store.claim_due(now_ms=2000, until_ms=9000, limit=10) == []
    await store.record_attempt(
        d.id, state="failed", next_attempt_ms=None, at_ms=2000, status_code=500, error="HTTP 500"
    )
    replayed = await store.replay(d.id, now_ms=3000)
    assert replayed is not None
    assert (replayed.state, replayed.attempts, replayed.replays) == ("pending", 0, 1)
    assert replayed.event_id == event.id and replayed.payload == d.payload
    assert [x.id for x in await store.claim_due(now_ms=3000, until_ms=9000, limit=10)] == [d.id]
    assert await store.delivery(d.id, "bob") is None
    assert (await store.delivery(d.id, "alice")) is not None
    gone = await owner_data.delete_owner(store.engine, REGISTRY, "alice")
    assert (gone["webhookEndpoints"], gone["webhookDeliveries"]) == (0, 1)


async def test_finished_deliveries_leave_the_log_after_the_retention(store: WebhookStore) -> None:
    endpoint = Endpoint("whe_1", "alice", "https://a", webhooks.new_secret())
    done, waiting = webhooks.deliveries_for([_event(), _event()], [endpoint], 1000)
    await store.insert_deliveries([done, waiting])
    await store.record_attempt(
        done.id, state="succeeded", next_attempt_ms=None, at_ms=2000, status_code=200, error=""
    )
    await store.record_attempt(
        waiting.id, state="pending", next_attempt_ms=9000, at_ms=2000, status_code=500, error="x"
    )
    assert await store.prune_deliveries(before_ms=2000) == 0
    assert await store.prune_deliveries(before_ms=2001) == 1
    assert await store.delivery(done.id, None) is None
    assert await store.delivery(waiting.id, None) is not None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    r.start()
    yield r
    r.stop()


def _deliverer(store: WebhookStore, **settings: Any) -> webhooks.Deliverer:
    # send_due reads only the gateway's store: no service is called.
    return webhooks.Deliverer(
        None,  # type: ignore[arg-type]
        store,
        Settings(
            **{
                "webhook_retry_initial_seconds": 60,
                "webhook_allow_private_addresses": True,
                **settings,
            }
        ),
    )


async def _one_delivery(store: WebhookStore, endpoint: Endpoint) -> str:
    event = _event(endpoint.owner_id or "alice")
    [d] = webhooks.deliveries_for([event], [endpoint], outbox.now_ms() - 1)
    await store.insert_deliveries([d])
    return d.id


async def test_a_due_delivery_is_sent_signed_and_recorded(
    store: WebhookStore, receiver: Receiver
) -> None:
    endpoint = Endpoint("whe_1", "alice", receiver.url("/a"), webhooks.new_secret())
    receiver.secrets["/a"] = endpoint.secret
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(store)
    try:
        assert await deliverer.send_due() == 1
    finally:
        await deliverer.aclose()
    [got] = receiver.at("/a")
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None
    assert (sent.state, sent.attempts, sent.last_status_code) == ("succeeded", 1, 200)
    assert got.headers["webhook-id"] == sent.event_id
    assert not receiver.refused


async def test_a_slow_receiver_is_a_timed_out_attempt_retried_later(
    store: WebhookStore, receiver: Receiver
) -> None:
    endpoint = Endpoint("whe_1", "alice", receiver.url("/slow"), webhooks.new_secret())
    receiver.secrets["/slow"] = endpoint.secret
    receiver.delay = 1.0
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(store, webhook_timeout_seconds=0.2)
    try:
        await deliverer.send_due()
    finally:
        await deliverer.aclose()
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None and sent.state == "pending" and sent.attempts == 1
    assert "Timeout" in sent.last_error and sent.last_status_code is None
    assert sent.next_attempt_ms is not None
    assert sent.next_attempt_ms - (sent.last_attempt_ms or 0) == 60_000


class _Trickler:
    """A receiver that answers `status` at once, then its body one byte at a time, slower
    than nothing ever (each byte well within any read timeout), for as long as asked."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {self.status} OK\r\nContent-Length: 1000000\r\n\r\n".encode())
        try:
            for _ in range(1_000_000):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.mark.parametrize("status", [200, 500])
async def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_timeout(
    store: WebhookStore, status: int
) -> None:
    trickler = _Trickler(status)
    url = await trickler.start()
    endpoint = Endpoint("whe_1", "alice", url, webhooks.new_secret())
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(store, webhook_timeout_seconds=0.5)
    started = time.monotonic()
    try:
        # Without an overall deadline the pass would read the body for 14 hours.
        await asyncio.wait_for(deliverer.send_due(), 10)
    finally:
        await deliverer.aclose()
        trickler.stop()
    assert time.monotonic() - started < 3
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None and sent.attempts == 1
    if status == 200:
        # The 2xx came in time: the body is not the receiver's answer.
        assert (sent.state, sent.last_status_code, sent.last_error) == ("succeeded", 200, "")
    else:
        assert (sent.state, sent.last_status_code) == ("pending", 500)
        assert sent.last_error == "HTTP 500: (its body did not come within the timeout)"


async def test_a_delivery_to_a_deleted_endpoint_fails_saying_so(store: WebhookStore) -> None:
    endpoint = Endpoint("whe_gone", "alice", "http://127.0.0.1:9/", webhooks.new_secret())
    delivery_id = await _one_delivery(store, endpoint)  # the endpoint was never stored
    deliverer = _deliverer(store)
    try:
        await deliverer.send_due()
    finally:
        await deliverer.aclose()
    sent = await store.delivery(delivery_id, None)
    assert sent is not None and sent.state == "failed"
    assert sent.last_error == "the endpoint was deleted"


@pytest.mark.parametrize(
    ("url", "private_allowed"),
    # The resolver of the private-address check refuses the first, the client the second.
    [("http://a..b/", False), ("http://xn--zz.example.com/", True)],
)
async def test_an_endpoint_whose_host_cannot_be_called_is_a_recorded_attempt(
    store: WebhookStore, url: str, private_allowed: bool
) -> None:
    # Stored before url_problem refused such hosts: each attempt fails and says why (it
    # was a pass that failed whole, the delivery never recorded and claimed again forever).
    endpoint = Endpoint("whe_1", "alice", url, webhooks.new_secret())
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(store, webhook_allow_private_addresses=private_allowed)
    try:
        assert await deliverer.send_due() == 1
    finally:
        await deliverer.aclose()
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None and sent.state == "pending" and sent.attempts == 1
    assert sent.last_error and sent.last_status_code is None


async def test_an_owners_endpoint_on_a_local_address_is_not_called_unless_allowed(
    store: WebhookStore, receiver: Receiver
) -> None:
    # A name that resolves to 127.0.0.1: passes the creation check, refused when sending.
    endpoint = Endpoint("whe_1", "alice", f"http://localhost:{receiver.port}/a", "whsec_AAAA")
    receiver.secrets["/a"] = endpoint.secret
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(store, webhook_allow_private_addresses=False)
    try:
        await deliverer.send_due()
    finally:
        await deliverer.aclose()
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None and sent.state == "pending"
    assert "private or local address" in sent.last_error
    assert receiver.at("/a") == []


async def test_a_deployment_endpoint_may_be_local(store: WebhookStore, receiver: Receiver) -> None:
    secret = webhooks.new_secret()
    receiver.secrets["/ops"] = secret
    listed = [{"id": "ops", "url": receiver.url("/ops"), "secret": secret}]
    settings = Settings(webhook_endpoints=json.dumps(listed), webhook_allow_private_addresses=False)
    # No service is called by send_due: the clients are not needed.
    deliverer = webhooks.Deliverer(None, store, settings)  # type: ignore[arg-type]
    [d] = webhooks.deliveries_for(
        [_event()], webhooks.deployment_endpoints(settings), outbox.now_ms() - 1
    )
    await store.insert_deliveries([d])
    try:
        await deliverer.send_due()
    finally:
        await deliverer.aclose()
    assert len(receiver.at("/ops")) == 1


class _Hanging:
    """An HTTP server that takes every request and never answers it (a dead receiver
    whose connections stay open)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.requests = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _received(receiver: Receiver, path: str, count: int, within: float) -> float:
    """Seconds until `receiver` has `count` requests at `path` (fails after `within`)."""
    started = time.monotonic()
    while len(receiver.at(path)) < count:
        assert time.monotonic() - started < within, f"{path}: {len(receiver.at(path))} received"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_a_hanging_endpoint_does_not_delay_another_owners_deliveries(
    store: WebhookStore, receiver: Receiver
) -> None:
    """Issue 33: the deliverer's pass waited for every send it had claimed, so one endpoint
    that never answers held every other owner's deliveries for about the timeout (8 s),
    every pass."""
    hanging = _Hanging()
    dead = Endpoint("whe_dead", "mallory", await hanging.start(), webhooks.new_secret())
    alive = Endpoint("whe_alive", "alice", receiver.url("/alive"), webhooks.new_secret())
    receiver.secrets["/alive"] = alive.secret
    for e in (dead, alive):
        await store.insert_endpoint(e)
    for _ in range(6):
        await _one_delivery(store, dead)
    deliverer = webhooks.Deliverer(
        None,  # type: ignore[arg-type]
        store,
        Settings(
            webhook_allow_private_addresses=True,
            webhook_timeout_seconds=8,
            webhook_poll_seconds=0.05,
            # The dead endpoint's deliveries are due again at once: every pass meets them.
            webhook_retry_initial_seconds=0.1,
        ),
        sources=(),
    )
    delivering = asyncio.create_task(deliverer.run_forever())
    try:
        while hanging.requests == 0:
            await asyncio.sleep(0.02)
        latencies = []
        for n in range(1, 4):
            await _one_delivery(store, alive)
            latencies.append(await _received(receiver, "/alive", n, within=20))
    finally:
        delivering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivering
        await deliverer.aclose()
        await hanging.stop()
    assert max(latencies) < 2, latencies


async def test_a_hanging_endpoint_with_a_backlog_holds_only_its_share_of_the_sends(
    store: WebhookStore, receiver: Receiver
) -> None:
    """Issue 33 (per-endpoint concurrency): a hanging endpoint whose backlog is larger than
    the deliverer's whole concurrency holds at most AGENTMESH_WEBHOOK_ENDPOINT_CONCURRENCY
    sends, so another owner's delivery still has a free slot and goes at once."""
    hanging = _Hanging()
    dead = Endpoint("whe_dead", "mallory", await hanging.start(), webhooks.new_secret())
    alive = Endpoint("whe_alive", "alice", receiver.url("/alive"), webhooks.new_secret())
    receiver.secrets["/alive"] = alive.secret
    for e in (dead, alive):
        await store.insert_endpoint(e)
    for _ in range(12):
        await _one_delivery(store, dead)
    deliverer = webhooks.Deliverer(
        None,  # type: ignore[arg-type]
        store,
        Settings(
            webhook_allow_private_addresses=True,
            webhook_timeout_seconds=8,
            webhook_poll_seconds=0.05,
            webhook_concurrency=4,
            webhook_endpoint_concurrency=2,
        ),
        sources=(),
    )
    delivering = asyncio.create_task(deliverer.run_forever())
    try:
        while hanging.requests == 0:
            await asyncio.sleep(0.02)
        # The dead endpoint's sends are due first, yet only its share of the slots is taken.
        await _one_delivery(store, alive)
        took = await _received(receiver, "/alive", 1, within=20)
        await asyncio.sleep(0.5)  # more passes: none claims another of the dead endpoint's
        in_flight = hanging.requests
    finally:
        delivering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await delivering
        await deliverer.aclose()
        await hanging.stop()
    assert took < 2, took
    assert in_flight == 2


def _breaker(**settings: Any) -> Settings:
    return Settings(
        **{
            "webhook_breaker_failures": 3,
            "webhook_breaker_pause_seconds": 10,
            "webhook_breaker_max_pause_seconds": 35,
            **settings,
        }
    )


def test_an_endpoint_is_paused_after_failures_in_a_row_for_a_growing_interval() -> None:
    s = _breaker()
    health = EndpointHealth("whe_1")
    for now in (1000, 2000):
        health = webhooks.after_failure(health, "HTTP 500", now, s)
        assert webhooks.endpoint_state(health, now, s) == "active"
    health = webhooks.after_failure(health, "HTTP 503", 3000, s)
    assert (health.consecutive_failures, health.pauses, health.paused_until_ms) == (3, 1, 13_000)
    assert (health.last_error, health.last_failure_ms) == ("HTTP 503", 3000)
    assert webhooks.endpoint_state(health, 12_999, s) == "paused"
    # A send that was in flight fails while paused: the pause is not lengthened.
    health = webhooks.after_failure(health, "HTTP 500", 4000, s)
    assert (health.pauses, health.paused_until_ms) == (1, 13_000)
    # After the pause, one delivery probes; its failure pauses twice as long, then capped.
    assert webhooks.endpoint_state(health, 13_000, s) == "probing"
    health = webhooks.after_failure(health, "HTTP 500", 13_000, s)
    assert (health.pauses, health.paused_until_ms) == (2, 33_000)
    health = webhooks.after_failure(health, "HTTP 500", 33_000, s)
    assert (health.pauses, health.paused_until_ms) == (3, 68_000)
    assert webhooks.endpoint_state(None, 0, s) == "active"


async def test_a_dead_endpoint_is_paused_then_probed_with_one_delivery_then_resumed(
    store: WebhookStore,
) -> None:
    port = free_port()  # nothing listens yet: every attempt is refused at once
    endpoint = Endpoint("whe_1", "alice", f"http://127.0.0.1:{port}/a", webhooks.new_secret())
    await store.insert_endpoint(endpoint)
    for _ in range(6):
        await _one_delivery(store, endpoint)
    deliverer = _deliverer(
        store,
        webhook_endpoint_concurrency=4,
        webhook_retry_initial_seconds=0.01,
        webhook_breaker_failures=3,
        webhook_breaker_pause_seconds=1,
    )
    receiver = Receiver(port)
    try:
        # At most 4 at once to one endpoint; all fail: the third failure paused it.
        assert await deliverer.send_due() == 4
        [health] = (await store.health_of("alice", ["whe_1"])).values()
        assert (health.consecutive_failures, health.pauses) == (4, 1)
        assert "ConnectError" in health.last_error
        assert health.paused_until_ms is not None
        assert health.paused_until_ms > outbox.now_ms()
        # Paused: none of its six due deliveries is sent.
        assert await deliverer.send_due() == 0
        await asyncio.sleep(1)
        # The pause is over: one delivery probes, fails, and the next pause is longer.
        assert await deliverer.send_due() == 1
        [health] = (await store.health_of("alice", ["whe_1"])).values()
        assert (health.consecutive_failures, health.pauses) == (5, 2)
        assert await deliverer.send_due() == 0
        receiver.secrets["/a"] = endpoint.secret
        receiver.start()
        await asyncio.sleep(2)
        # The probe succeeds: the breaker closes and the others are sent.
        assert await deliverer.send_due() == 1
        assert await store.health_of("alice", ["whe_1"]) == {
            "whe_1": EndpointHealth("whe_1", 0, 0, None, health.last_error, health.last_failure_ms)
        }
        assert await deliverer.send_due() == 4
        assert await deliverer.send_due() == 1
        assert len(receiver.at("/a")) == 6
        assert len({r.headers["webhook-id"] for r in receiver.at("/a")}) == 6
    finally:
        await deliverer.aclose()
        receiver.stop()


async def test_an_endpoints_status_says_whether_it_is_paused(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    owner = f"o-{uuid.uuid4().hex[:8]}"
    auth = bearer(gw_settings, owner)
    made = await http.post(ENDPOINTS, json={"url": "https://example.com/h"}, headers=auth)
    assert made.status_code == 201, made.text
    assert (made.json()["state"], made.json()["consecutiveFailures"]) == ("active", 0)
    endpoint_id = made.json()["id"]
    gateway = await GatewayStore.open(gw_settings)
    try:
        store = WebhookStore(gateway.engine)
        for _ in range(gw_settings.webhook_breaker_failures):
            await store.record_failure(
                owner,
                endpoint_id,
                lambda h: webhooks.after_failure(h, "HTTP 502: bad", outbox.now_ms(), gw_settings),
            )
        got = (await http.get(f"{ENDPOINTS}/{endpoint_id}", headers=auth)).json()
        assert got["state"] == "paused"
        assert got["consecutiveFailures"] == gw_settings.webhook_breaker_failures
        assert got["lastError"] == "HTTP 502: bad" and "lastFailureTime" in got
        paused_until = datetime.fromisoformat(got["pausedUntil"].replace("Z", "+00:00"))
        assert 0 < (paused_until - datetime.now(UTC)).total_seconds() <= 30
        [listed] = (await http.get(ENDPOINTS, headers=auth)).json()["endpoints"]
        assert listed == got
        # Another owner sees nothing of it.
        other = bearer(gw_settings, f"o-{uuid.uuid4().hex[:8]}")
        assert (await http.get(f"{ENDPOINTS}/{endpoint_id}", headers=other)).status_code == 404
        await store.record_success(endpoint_id)
        got = (await http.get(f"{ENDPOINTS}/{endpoint_id}", headers=auth)).json()
        assert (got["state"], got["consecutiveFailures"]) == ("active", 0)
        assert "pausedUntil" not in got and got["lastError"] == "HTTP 502: bad"
        # Deleting the endpoint (or its owner) deletes its status.
        assert (await http.delete(f"{ENDPOINTS}/{endpoint_id}", headers=auth)).status_code == 204
        assert await store.health_of(owner, [endpoint_id]) == {}
    finally:
        await gateway.close()


# Issue 33: every spelling of a loopback, private, link-local or reserved address that the
# deliverer's connection would reach (inet_aton's IPv4 forms, IPv6 forms and zone ids,
# trailing dots) is refused when the endpoint is registered, not only when sending.
NOT_PUBLIC_SPELLINGS = [
    "http://2130706433:8080/",
    "http://127.1/",
    "http://127.0.1/",
    "http://0x7f000001/",
    "http://0x7F.1/",
    "http://017700000001/",
    "http://0/",
    "http://127.0.0.1./",
    "http://2130706433./",
    "http://0xa9fea9fe/latest/meta-data",
    "http://2852039166/",
    "http://167772161/",
    "http://user@127.0.0.1/",
    "http://localhost./",
    "http://LOCALHOST../",
    "http://api.localhost./",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::1%25lo]/",
    "http://[fe80::1%25eth0]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[::]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b:1::1]/",
    "http://[2002:a00:1::1]/",
    "http://[fc00::1]/",
    "http://[ff02::1]/",
    "http://100.64.0.1/",
    "http://240.0.0.1/",
]
PUBLIC_SPELLINGS = [
    "https://example.com/h",
    "https://example.com./h",
    "http://Bücher.example/",
    "http://8.8.8.8/",
    "http://134744072/",
    "http://8.8.8.8./",
    "http://[2606:4700::1]/",
    "http://[::ffff:8.8.8.8]/",
    "http://[64:ff9b::808:808]/",
]


@pytest.mark.parametrize("url", NOT_PUBLIC_SPELLINGS)
def test_every_spelling_of_a_local_or_private_address_is_refused_for_owners(url: str) -> None:
    assert webhooks.private_host_problem(url) is not None


@pytest.mark.parametrize("url", PUBLIC_SPELLINGS)
def test_public_addresses_in_any_spelling_pass_the_creation_check(url: str) -> None:
    assert webhooks.url_problem(url) is None
    assert webhooks.private_host_problem(url) is None


async def test_registration_refuses_every_local_spelling_and_stores_none(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    owner = f"o-{uuid.uuid4().hex[:8]}"
    auth = bearer(gw_settings, owner)
    refused = {}
    for url in NOT_PUBLIC_SPELLINGS:
        resp = await http.post(ENDPOINTS, json={"url": url}, headers=auth)
        if resp.status_code != 400 or resp.json()["error"]["details"][0]["field"] != "url":
            refused[url] = resp.status_code
    assert refused == {}
    assert (await http.get(ENDPOINTS, headers=auth)).json() == {"endpoints": []}
    for url in PUBLIC_SPELLINGS:
        resp = await http.post(ENDPOINTS, json={"url": url}, headers=auth)
        assert resp.status_code == 201, (url, resp.text)


@pytest.mark.parametrize("host", ["2130706433", "127.1", "0x7f000001", "017700000001", "0x7F.1"])
async def test_a_stored_endpoint_spelling_a_local_address_is_not_called(
    store: WebhookStore, receiver: Receiver, host: str
) -> None:
    """An endpoint stored before its spelling was refused at registration: the same check
    refuses each attempt (and the spelling does reach the receiver when allowed)."""
    endpoint = Endpoint("whe_1", "alice", f"http://{host}:{receiver.port}/a", "whsec_AAAA")
    receiver.secrets["/a"] = endpoint.secret
    await store.insert_endpoint(endpoint)
    refused_id = await _one_delivery(store, endpoint)
    for allowed in (False, True):
        deliverer = _deliverer(store, webhook_allow_private_addresses=allowed)
        try:
            await deliverer.send_due()
        finally:
            await deliverer.aclose()
        if not allowed:
            sent = await store.delivery(refused_id, "alice")
            assert sent is not None and sent.state == "pending"
            assert sent.last_error == "the endpoint's host is a private or local address"
            assert receiver.at("/a") == []
            await store.replay(refused_id, outbox.now_ms() - 1)
    assert len(receiver.at("/a")) == 1


async def test_an_endpoints_backlog_is_sent_as_fast_as_it_answers_not_one_batch_a_poll(
    store: WebhookStore, receiver: Receiver
) -> None:
    endpoint = Endpoint("whe_1", "alice", receiver.url("/busy"), webhooks.new_secret())
    receiver.secrets["/busy"] = endpoint.secret
    await store.insert_endpoint(endpoint)
    for _ in range(20):
        await _one_delivery(store, endpoint)
    deliverer = webhooks.Deliverer(
        None,  # type: ignore[arg-type]
        store,
        Settings(
            webhook_allow_private_addresses=True,
            webhook_poll_seconds=10,
            webhook_endpoint_concurrency=4,
        ),
        sources=(),
    )
    # One pass, then the wait before the next one (run_forever's loop, without cancelling it
    # mid-write: once, in a whole-suite run, cancelling it left the test waiting forever).
    try:
        assert await deliverer.pass_once()
        between = asyncio.create_task(deliverer._between_passes(6))
        # 20 at 4 at once: five batches, each claimed when the one before is answered
        # (it was one batch a poll: 40 s).
        took = await _received(receiver, "/busy", 20, within=15)
        await asyncio.wait_for(between, 15)
    finally:
        await deliverer.aclose()
    assert took < 5, took


async def test_a_resolver_that_does_not_answer_is_a_timed_out_attempt(
    store: WebhookStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The address check's lookup is inside the attempt's deadline (a resolver that hangs
    held the endpoint's sends for as long as it hung)."""

    async def no_answer(*_args: Any, **_kwargs: Any) -> Any:
        await asyncio.sleep(3600)

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_answer)
    endpoint = Endpoint("whe_1", "alice", "https://hooks.example/h", webhooks.new_secret())
    await store.insert_endpoint(endpoint)
    delivery_id = await _one_delivery(store, endpoint)
    deliverer = _deliverer(
        store, webhook_allow_private_addresses=False, webhook_timeout_seconds=0.3
    )
    try:
        await asyncio.wait_for(deliverer.send_due(), 5)
    finally:
        await deliverer.aclose()
    sent = await store.delivery(delivery_id, "alice")
    assert sent is not None and sent.state == "pending" and sent.attempts == 1
    assert sent.last_error.startswith("TimeoutError")
