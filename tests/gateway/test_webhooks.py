"""Webhook rules (services/gateway/webhooks.py) and the gateway's webhook tables on the
backend under test: endpoint validation, the deployment's endpoints, matching, the body,
the retry schedule, signatures a Standard Webhooks receiver accepts, the deliverer's lease,
the delivery log and replay."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from services.gateway import webhooks
from services.gateway.store import GatewayStore
from services.gateway.webhook_store import Endpoint, WebhookStore
from services.launcher import free_port
from shared import outbox
from shared.settings import Settings
from tests.webhook_receiver import Receiver


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
    assert await store.delete_owner("alice") == {"webhookEndpoints": 0, "webhookDeliveries": 1}


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
    [d] = webhooks.deliveries_for([_event()], [endpoint], outbox.now_ms() - 1)
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
