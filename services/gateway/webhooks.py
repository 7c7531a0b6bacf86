"""Webhooks, signed per the Standard Webhooks spec (standardwebhooks): the rules (endpoint
validation, which endpoints an event goes to, the body, the retry schedule) and the
deliverer, the gateway's background task that moves events from the services' outboxes
(shared/outbox.py) to the endpoints.

One deliverer per deployment is active: it holds a lease row in the gateway's store,
renewed every poll, so any number of gateway replicas deliver each event once per endpoint
(at least once: a delivery whose answer was lost is sent again, with the same webhook-id).
A pass: for each service (every peer serves the outbox), list its unacknowledged events,
record one delivery per matching endpoint (unique per endpoint and event), acknowledge the
events; then start sending the deliveries that are due and record each attempt. The pass
does not wait for its sends: each endpoint has its own sends in flight (at most
AGENTMESH_WEBHOOK_ENDPOINT_CONCURRENCY, and none claimed for it while any is), so an endpoint
that hangs delays only its own deliveries. Each endpoint has a circuit breaker in the store
(EndpointHealth, shared by the replicas): after AGENTMESH_WEBHOOK_BREAKER_FAILURES failed
attempts in a row it is paused for a growing interval, then one delivery probes it.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import logging
import secrets
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from agentmesh.platform.v1 import platform_service_pb2 as platform_pb
from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel
from standardwebhooks import Webhook

from services.gateway import convert
from services.gateway.clients import PEERS, Clients, unary
from services.gateway.errors import ApiError
from services.gateway.webhook_store import (
    FAILED,
    PENDING,
    SUCCEEDED,
    Delivery,
    Endpoint,
    EndpointHealth,
    WebhookStore,
    new_delivery_id,
)
from shared import outbox
from shared.ids import is_identifier
from shared.settings import Settings

if TYPE_CHECKING:
    # httpx is imported where a delivery is sent (Deliverer._http, _send): a gateway whose
    # owners have no webhooks never loads it or its client's modules (issue 24).
    import httpx

log = logging.getLogger(__name__)

# The identity the deliverer calls the services with (admin scope): no owner's data.
DELIVERER = "webhook-deliverer"
LEASE = "webhook-deliverer"
# Every peer serves the outbox of the platform contract (one without an outbox lists none).
SOURCES = PEERS
MAX_URL_CHARS = 2000
MAX_ERROR_CHARS = 500
# How much of a failed attempt's answer is read, for its lastError.
ERROR_BODY_BYTES = 200
SECRET_PREFIX = "whsec_"
# Events taken from a service per page, and the most pages per pass.
COLLECT_PAGE = 100
COLLECT_PAGES = 10
# How long the deliverer waits, after a send finished, for others before claiming more.
WAKE_BATCH_SECONDS = 0.01
# How often the deliverer prunes the delivery log (AGENTMESH_WEBHOOK_DELIVERY_RETENTION_SECONDS).
PRUNE_EVERY_MS = 60_000


def url_problem(url: str) -> str | None:
    """Why `url` cannot be an endpoint: it must be http(s) with a host."""
    if len(url) > MAX_URL_CHARS:
        return f"must be at most {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port that is not a number
    except ValueError:
        return "must be an http or https URL with a host"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http or https URL with a host"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "must not contain spaces or control characters"
    import httpx

    try:
        # The deliverer's client must take the URL, and the resolver its host name (the
        # IDNA codec: no empty label, none over 63 characters), or no attempt could be made.
        httpx.URL(url).host.encode("idna")
    except (httpx.InvalidURL, ValueError):  # UnicodeError and idna's errors are ValueErrors
        return "must have a valid host name or IP address"
    return None


Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 prefixes whose last 32 bits are an IPv4 address a connection ends up at: NAT64's
# well-known prefix and the deprecated IPv4-compatible addresses (:: and ::1 among them).
_EMBEDDING = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("::/96"))
# NAT64 prefixes for local use (RFC 8215): what they reach is the deployment's business.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def canonical_host(url: str) -> Address | str:
    """The host of `url` as the deliverer's connection reads it: an IP address however it
    is spelled (IPv4 in every form the resolver takes as a number: 2130706433, 127.1,
    0x7f000001, 017700000001; IPv6 in any form, without its zone id), or a host name in
    lower case and IDNA A-labels. Trailing dots are dropped: `localhost.` and `127.0.0.1.`
    are the hosts without them. ValueError when the URL or its host is not one."""
    import httpx

    try:
        # httpx's parser, the deliverer's: its host in lower case and A-labels.
        host = httpx.URL(url).raw_host.decode("ascii")
    except httpx.InvalidURL as err:
        raise ValueError(str(err)) from None
    if ":" in host:  # an IPv6 literal; a zone id is written %25 in a URL (RFC 6874)
        return ipaddress.IPv6Address(unquote(host).split("%", 1)[0])
    name = host.rstrip(".")
    if not name:
        raise ValueError("no host")
    try:
        # The resolver's own reading of a numeric host (no lookup is made): the address
        # a connection to `name` would reach.
        infos = socket.getaddrinfo(name, None, family=socket.AF_INET, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        return name
    return ipaddress.IPv4Address(infos[0][4][0])


def is_public(address: Address) -> bool:
    """Whether `address` is a public unicast address: not loopback, private, link-local,
    shared, reserved, unspecified or multicast, and for an IPv6 address that carries an IPv4
    one (mapped, compatible, NAT64, 6to4), that IPv4 address is public too."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in _LOCAL_NAT64:
            return False
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and any(address in net for net in _EMBEDDING):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not address.is_multicast


def _local_name(name: str) -> bool:
    return name == "localhost" or name.endswith(".localhost")


def private_host_problem(url: str) -> str | None:
    """Why an owner may not use `url` when private addresses are not allowed: its host is
    an address that is not public (canonical_host, is_public) or a localhost name. Other
    names are resolved, and every answer checked, at each attempt (private_address_problem)."""
    try:
        host = canonical_host(url)
    except ValueError:
        return "must have a valid host name or IP address"
    if isinstance(host, str):
        return "must not be a local address" if _local_name(host) else None
    return None if is_public(host) else "must not be a private or local address"


async def private_address_problem(url: str) -> str | None:
    """Why an attempt to `url` is not made when private addresses are not allowed: the
    registration's check (private_host_problem), then every address the host resolves to
    now, asked of the resolver exactly as the connection asks (`8.8.8.8.` is a name to
    it). OSError when it does not resolve."""
    if private_host_problem(url) is not None:
        return "the endpoint's host is a private or local address"
    import httpx

    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    infos = await asyncio.get_running_loop().getaddrinfo(
        parsed.raw_host.decode("ascii"), port, type=socket.SOCK_STREAM
    )
    answers = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not all(is_public(a) for a in answers):
        return "the endpoint's host resolves to a private or local address"
    return None


def event_types_problem(types: Sequence[str]) -> str | None:
    unknown = [t for t in types if t not in outbox.EVENT_TYPES]
    if unknown:
        return f"unknown event type {unknown[0]!r} (known: {', '.join(outbox.EVENT_TYPES)})"
    if len(set(types)) != len(types):
        return "must not repeat a type"
    return None


def new_secret() -> str:
    """A signing secret: whsec_ and 24 random bytes in base64 (Standard Webhooks)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


class _DeploymentEndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)

    id: StrictStr = Field(min_length=1, max_length=64)
    url: StrictStr
    secret: StrictStr = Field(min_length=len(SECRET_PREFIX) + 1)
    event_types: list[StrictStr] = Field(default_factory=list)


_DEPLOYMENT_LIST = TypeAdapter(list[_DeploymentEndpointIn])


def deployment_endpoints(settings: Settings) -> tuple[Endpoint, ...]:
    """The deployment's endpoints (AGENTMESH_WEBHOOK_ENDPOINTS or _FILE); ValueError saying
    what is wrong, at start-up."""
    if settings.webhook_endpoints_file is not None:
        raw = settings.webhook_endpoints_file.read_text(encoding="utf-8")
        where = str(settings.webhook_endpoints_file)
    else:
        raw, where = settings.webhook_endpoints, "AGENTMESH_WEBHOOK_ENDPOINTS"
    if not raw.strip():
        return ()
    try:
        parsed = _DEPLOYMENT_LIST.validate_json(raw)
    except ValidationError as err:
        raise ValueError(f"{where}: {err}") from None
    out: list[Endpoint] = []
    for i, e in enumerate(parsed):
        problem = (
            None
            if is_identifier(e.id) and not e.id.startswith("whe_")
            else "id must be an identifier not starting with whe_"
        )
        problem = problem or url_problem(e.url) or event_types_problem(e.event_types)
        if problem is None:
            try:
                Webhook(e.secret)
            except Exception:  # the library raises several kinds (binascii, its own)
                problem = "secret must be whsec_ and base64"
        if problem is not None:
            raise ValueError(f"{where}: endpoint {i} ({e.id}): {problem}")
        out.append(Endpoint(e.id, "", e.url, e.secret, event_types=tuple(e.event_types)))
    if len({e.id for e in out}) != len(out):
        raise ValueError(f"{where}: endpoint ids must be unique")
    return tuple(out)


def matches(endpoint: Endpoint, event: outbox.Event) -> bool:
    """An event goes to the deployment's endpoints and to its owner's."""
    if endpoint.owner_id not in ("", event.owner_id):
        return False
    return not endpoint.event_types or event.type in endpoint.event_types


def body(event: outbox.Event) -> str:
    """The request body (Standard Webhooks' type / timestamp / data), the same bytes on
    every attempt of every endpoint."""
    data = {"ownerId": event.owner_id, **event.data}
    return json.dumps(
        {"type": event.type, "timestamp": convert.millis_time(event.create_time_ms), "data": data},
        separators=(",", ":"),
    )


def deliveries_for(
    events: Iterable[outbox.Event], endpoints: Sequence[Endpoint], now_ms: int
) -> list[Delivery]:
    out = []
    for event in events:
        payload = body(event)
        for endpoint in endpoints:
            if matches(endpoint, event):
                out.append(
                    Delivery(
                        id=new_delivery_id(),
                        endpoint_id=endpoint.id,
                        endpoint_owner_id=endpoint.owner_id,
                        owner_id=event.owner_id,
                        event_id=event.id,
                        event_type=event.type,
                        payload=payload,
                        url=endpoint.url,
                        state=PENDING,
                        attempts=0,
                        replays=0,
                        next_attempt_ms=now_ms,
                        last_attempt_ms=None,
                        last_status_code=None,
                        last_error="",
                        create_time_ms=now_ms,
                    )
                )
    return out


def retry_delay_ms(attempts: int, settings: Settings) -> int:
    """The wait after the `attempts`-th failed attempt: initial * 2**(attempts-1), capped."""
    delay = settings.webhook_retry_initial_seconds * 2 ** max(attempts - 1, 0)
    return int(min(delay, settings.webhook_retry_max_seconds) * 1000)


def after_attempt(
    attempts: int, ok: bool, now_ms: int, settings: Settings
) -> tuple[str, int | None]:
    """(state, next attempt time) after the `attempts`-th attempt (of this round)."""
    if ok:
        return SUCCEEDED, None
    if attempts >= settings.webhook_max_attempts:
        return FAILED, None
    return PENDING, now_ms + retry_delay_ms(attempts, settings)


def pause_ms(pauses: int, settings: Settings) -> int:
    """How long an endpoint's breaker pauses it after `pauses` pauses in a row: the first
    pause, doubled each time, capped."""
    pause = settings.webhook_breaker_pause_seconds * 2 ** min(pauses, 32)
    return int(min(pause, settings.webhook_breaker_max_pause_seconds) * 1000)


def after_failure(
    health: EndpointHealth, error: str, now_ms: int, settings: Settings
) -> EndpointHealth:
    """An endpoint's health after a failed attempt. The failure that makes
    AGENTMESH_WEBHOOK_BREAKER_FAILURES in a row pauses it, as does a failed probe (the first
    attempt after a pause); failures of sends that were in flight when it paused do not
    lengthen the pause."""
    failures = health.consecutive_failures + 1
    failed = replace(
        health, consecutive_failures=failures, last_error=error, last_failure_ms=now_ms
    )
    paused = health.paused_until_ms is not None and health.paused_until_ms > now_ms
    if paused or failures < settings.webhook_breaker_failures:
        return failed
    return replace(
        failed,
        pauses=health.pauses + 1,
        paused_until_ms=now_ms + pause_ms(health.pauses, settings),
    )


ACTIVE, PAUSED, PROBING = "active", "paused", "probing"


def endpoint_state(health: EndpointHealth | None, now_ms: int, settings: Settings) -> str:
    """`paused` (nothing is sent to it until paused_until_ms), `probing` (the pause is over:
    one delivery is tried before the others) or `active`."""
    if health is None:
        return ACTIVE
    if health.paused_until_ms is not None and health.paused_until_ms > now_ms:
        return PAUSED
    if health.consecutive_failures >= settings.webhook_breaker_failures:
        return PROBING
    return ACTIVE


def signed_headers(secret: str, event_id: str, payload: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (its timestamp is the attempt's)."""
    return {
        "content-type": "application/json",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(event_id, at, payload),
        "user-agent": "agentmesh-webhooks",
    }


async def _start_of(reply: httpx.Response, limit: int) -> str:
    """The first `limit` bytes of an answer's body, as text (the rest is not read)."""
    data = b""
    async for chunk in reply.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return data[:limit].decode(errors="replace")


class _Refused(Exception):
    """An attempt not made (and counted as failed)."""


class Deliverer:
    def __init__(
        self,
        clients: Clients,
        store: WebhookStore,
        settings: Settings,
        *,
        http: httpx.AsyncClient | None = None,
        sources: Sequence[str] = SOURCES,
    ) -> None:
        self._clients = clients
        # The services whose outboxes are collected (a test of sending alone has none).
        self._sources = tuple(sources)
        self._store = store
        self._settings = settings
        self._deployment = {e.id: e for e in deployment_endpoints(settings)}
        # Made at the first delivery: a client's TLS context (the CA bundle loaded) and
        # httpcore's modules are ~3 MB that a gateway with no webhooks would hold.
        self._client = http
        self._own_http = http is None
        self.holder = uuid.uuid4().hex
        self._pruned_ms = 0
        # The sends in flight, by endpoint id; set when one finishes.
        self._sending: dict[str, set[asyncio.Task[None]]] = {}
        self._finished = asyncio.Event()
        # Whether the last pass held the lease (sends are started between passes too).
        self._holding = False

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                timeout=self._settings.webhook_timeout_seconds, follow_redirects=False
            )
        return self._client

    async def aclose(self) -> None:
        """Stop the sends in flight (their deliveries are claimed again once their claim
        expires), then close the HTTP client."""
        sends = [t for tasks in self._sending.values() for t in tasks]
        for task in sends:
            task.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
        if self._own_http and self._client is not None:
            await self._client.aclose()

    async def run_forever(self) -> None:
        while True:
            try:
                await self.pass_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook delivery pass failed")
            await self._between_passes(self._settings.webhook_poll_seconds)

    async def _between_passes(self, seconds: float) -> None:
        """Until the next pass: each time sends finish, start the deliveries due (an
        endpoint's next ones go as soon as it answered, not one batch per poll)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                await asyncio.wait_for(self._finished.wait(), left)
            except TimeoutError:
                return
            await asyncio.sleep(WAKE_BATCH_SECONDS)  # sends finishing together: one claim
            # Cleared before the claim: a send that finishes meanwhile wakes the next one.
            self._finished.clear()
            if self._holding:
                try:
                    await self.start_due()
                except Exception:
                    log.exception("webhook deliveries not started")

    async def pass_once(self) -> bool:
        """One pass if this replica holds (or takes) the lease; whether it did."""
        now = outbox.now_ms()
        until = now + int(self._settings.webhook_lease_seconds * 1000)
        self._holding = await self._store.take_lease(LEASE, self.holder, now, until)
        if not self._holding:
            return False
        for service in self._sources:
            try:
                for _ in range(COLLECT_PAGES):
                    if await self.collect(service) < COLLECT_PAGE:
                        break
            except ApiError as err:  # the service is away: its events wait in its outbox
                log.warning("webhook events of %s not collected: %s", service, err.code)
        await self.start_due()
        retention_ms = self._settings.webhook_delivery_retention_seconds * 1000
        if retention_ms and now - self._pruned_ms >= PRUNE_EVERY_MS:
            self._pruned_ms = now
            await self._store.prune_deliveries(now - retention_ms)
        return True

    async def collect(self, service: str) -> int:
        """Record the deliveries of one page of `service`'s events, then acknowledge them;
        how many events the page had."""
        timeout = self._settings.rpc_timeout_seconds
        stub = self._clients.platform(service)
        listed = await unary(
            stub.ListWebhookEvents,
            platform_pb.ListWebhookEventsRequest(page_size=COLLECT_PAGE),
            owner=DELIVERER,
            service=service,
            timeout=timeout,
            admin=True,
        )
        events = [outbox.from_pb(e) for e in listed.events]
        if not events:
            return 0
        owners = sorted({e.owner_id for e in events})
        endpoints = [*self._deployment.values(), *await self._store.endpoints_of(owners)]
        await self._store.insert_deliveries(deliveries_for(events, endpoints, outbox.now_ms()))
        await unary(
            stub.AcknowledgeWebhookEvents,
            platform_pb.AcknowledgeWebhookEventsRequest(event_ids=[e.id for e in events]),
            owner=DELIVERER,
            service=service,
            timeout=timeout,
            admin=True,
        )
        return len(events)

    async def start_due(self) -> list[asyncio.Task[None]]:
        """Start sending the deliveries due now, as many as there are free slots (without
        waiting for them): none of an endpoint that has sends in flight or is paused, at
        most AGENTMESH_WEBHOOK_ENDPOINT_CONCURRENCY of one endpoint, one of an endpoint
        being probed. The sends started."""
        s = self._settings
        free = s.webhook_concurrency - sum(len(tasks) for tasks in self._sending.values())
        if free <= 0:
            return []
        now = outbox.now_ms()
        # Claimed for longer than a send can take, so no other deliverer sends it meanwhile
        # (each is sent at once: only free slots are claimed).
        until = now + int((s.webhook_timeout_seconds * 2 + s.webhook_lease_seconds) * 1000)
        due = await self._store.claim_due(
            now,
            until,
            free,
            per_endpoint=s.webhook_endpoint_concurrency,
            probe_after=s.webhook_breaker_failures,
            busy=sorted(self._sending),
        )
        started = []
        for d in due:
            task = asyncio.create_task(self._send(d))
            self._sending.setdefault(d.endpoint_id, set()).add(task)
            task.add_done_callback(partial(self._sent, d))
            started.append(task)
        return started

    def _sent(self, d: Delivery, task: asyncio.Task[None]) -> None:
        tasks = self._sending.get(d.endpoint_id, set())
        tasks.discard(task)
        if not tasks:
            self._sending.pop(d.endpoint_id, None)
        self._finished.set()
        if not task.cancelled() and (err := task.exception()) is not None:
            # The store failed: the delivery is sent again once its claim expires.
            log.error("webhook delivery %s not recorded", d.id, exc_info=err)

    async def send_due(self) -> int:
        """Send the deliveries due now and wait for those sends (start_due, then wait: a
        pass does not wait); how many."""
        started = await self.start_due()
        await asyncio.gather(*started)
        return len(started)

    async def _endpoint(self, d: Delivery) -> Endpoint | None:
        if not d.endpoint_owner_id:
            return self._deployment.get(d.endpoint_id)
        return await self._store.endpoint(d.endpoint_owner_id, d.endpoint_id)

    async def _send(self, d: Delivery) -> None:
        import httpx

        endpoint = await self._endpoint(d)
        at = datetime.now(UTC)
        if endpoint is None:
            await self._store.record_attempt(
                d.id,
                state=FAILED,
                next_attempt_ms=None,
                at_ms=outbox.now_ms(),
                status_code=None,
                error="the endpoint was deleted",
            )
            return
        code: int | None = None
        error = ""
        try:
            # One deadline for the whole attempt, the resolver's answer of the address check
            # included: httpx's timeout is per read, so a receiver trickling its answer byte
            # by byte would hold its sends forever. Of the answer only the status counts,
            # and of a failure the body's start.
            async with asyncio.timeout(self._settings.webhook_timeout_seconds):
                if endpoint.owner_id and not self._settings.webhook_allow_private_addresses:
                    refused = await private_address_problem(endpoint.url)
                    if refused is not None:
                        raise _Refused(refused)
                async with self._http.stream(
                    "POST",
                    endpoint.url,
                    content=d.payload.encode(),
                    headers=signed_headers(endpoint.secret, d.event_id, d.payload, at),
                ) as reply:
                    code = reply.status_code
                    if not 200 <= code < 300:
                        error = f"HTTP {code}: {await _start_of(reply, ERROR_BODY_BYTES)}"
        except TimeoutError:
            error = (
                f"TimeoutError: no answer within {self._settings.webhook_timeout_seconds:g} s"
                if code is None
                else f"HTTP {code}: (its body did not come within the timeout)"
            )
        except _Refused as err:
            error = str(err)
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as err:
            # OSError: the name did not resolve; InvalidURL, ValueError (UnicodeError): a URL
            # stored before url_problem refused its host. An attempt is recorded either way.
            error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        now = outbox.now_ms()
        state, next_ms = after_attempt(d.attempts + 1, not error, now, self._settings)
        error = error[:MAX_ERROR_CHARS]
        await self._store.record_attempt(
            d.id,
            state=state,
            next_attempt_ms=next_ms,
            at_ms=now,
            status_code=code,
            error=error,
        )
        if error:
            paused: list[EndpointHealth] = []

            def change(before: EndpointHealth) -> EndpointHealth:
                after = after_failure(before, error, now, self._settings)
                if after.pauses > before.pauses:
                    paused.append(after)
                return after

            await self._store.record_failure(endpoint.owner_id, endpoint.id, change)
            for health in paused:
                log.warning(
                    "webhook endpoint paused",
                    extra={
                        "fields": {
                            "endpoint_id": endpoint.id,
                            "failures": health.consecutive_failures,
                            "paused_until_ms": health.paused_until_ms,
                        }
                    },
                )
        else:
            await self._store.record_success(endpoint.id)
        log.info(
            "webhook attempt",
            extra={
                "fields": {
                    "delivery_id": d.id,
                    "webhook_id": d.event_id,
                    "attempt": d.attempts + 1,
                    "status": code,
                    "state": state,
                }
            },
        )
