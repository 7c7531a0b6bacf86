"""RS256 / ES256 bearer tokens verified against a JWKS URL (a real local HTTP server
started here, keys made with `cryptography`): keys cached and rotated, issuer and audience
checked, crafted tokens refused with 401, never a 500; known keys kept through an outage of
the IdP (bounded), and a key that cannot be told is 503 with Retry-After, never 401."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from services.gateway.auth import issue_token
from shared.identity import OWNER_KEY
from shared.settings import Settings
from tests.gateway.conftest import Peers, app_client, gateway_settings

ISSUER = "https://idp.example.test/"
AUDIENCE = "agentmesh-api"
CACHE_SECONDS = 0.5


class Jwks:
    """A JWKS endpoint on 127.0.0.1:<free port>, serving `keys` as they are now."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        # Served instead of the keys when set: an IdP (or a proxy before it) that answers
        # something other than a JWKS.
        self.raw: bytes | None = None
        # Seconds to wait before answering (an IdP that hangs).
        self.delay = 0.0
        # The HTTP status answered (an IdP, or a proxy before it, that fails).
        self.status = 200
        self.fetches = 0
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches += 1
                time.sleep(jwks.delay)
                body = (
                    jwks.raw if jwks.raw is not None else json.dumps({"keys": jwks.keys}).encode()
                )
                self.send_response(jwks.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _ec() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        out: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        out["alg"] = "RS256"
    else:
        out = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
        out["alg"] = "ES256"
    return out | {"kid": kid, "use": "sig"}


def _claims(sub: str = "idp-user", **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300} | extra


def _sign(key: Any, kid: str, alg: str = "RS256", **claims: Any) -> str:
    return jwt.encode(_claims(**claims), key, algorithm=alg, headers={"kid": kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _raw(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    """A token built by hand, as an attacker would (PyJWT refuses to make these)."""
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing}.{_b64(signature)}"


@pytest.fixture(scope="module")
def idp() -> Iterator[tuple[Jwks, dict[str, Any]]]:
    server = Jwks()
    keys: dict[str, Any] = {"rsa-1": _rsa(), "ec-1": _ec()}
    server.keys = [_jwk(k, kid) for kid, k in keys.items()]
    yield server, keys
    server.stop()


@pytest.fixture(scope="module")
def j_settings(base_settings: Settings, peers: Peers, idp: tuple[Jwks, dict[str, Any]]) -> Settings:
    return gateway_settings(
        base_settings,
        peers.addrs,
        jwks_url=idp[0].url,
        jwks_cache_seconds=CACHE_SECONDS,
        jwks_refresh_cooldown_seconds=0,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
    )


@pytest.fixture(scope="module")
async def j_http(j_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(j_settings) as http:
        yield http


async def _threads(http: httpx.AsyncClient, token: str) -> httpx.Response:
    return await http.get("/api/v1/agent/threads", headers={"Authorization": f"Bearer {token}"})


def _assert_401(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.json()["error"]["code"] == "UNAUTHENTICATED"
    assert resp.headers["www-authenticate"] == "Bearer"


async def test_an_rs256_token_from_the_jwks_is_accepted_as_its_subject(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]], peers: Peers
) -> None:
    _, keys = idp
    resp = await _threads(j_http, _sign(keys["rsa-1"], "rsa-1", sub="rs-user"))
    assert resp.status_code == 200, resp.text
    assert peers.history.calls[-1].metadata[OWNER_KEY] == "rs-user"


async def test_an_es256_token_from_the_jwks_is_accepted(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]]
) -> None:
    _, keys = idp
    assert (await _threads(j_http, _sign(keys["ec-1"], "ec-1", "ES256"))).status_code == 200


async def test_the_admin_scope_of_a_jwks_token_opens_the_admin_endpoints(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]]
) -> None:
    _, keys = idp
    token = _sign(keys["rsa-1"], "rsa-1", sub="ops", scope="openid admin")
    resp = await j_http.get(
        "/api/v1/admin/owners/alice/quotas", headers={"Authorization": f"Bearer {token}"}
    )
    assert resp.status_code == 200, resp.text


async def test_hs256_tokens_are_still_accepted_beside_the_jwks(
    j_http: httpx.AsyncClient, j_settings: Settings
) -> None:
    assert (await _threads(j_http, issue_token(j_settings, "hs-user"))).status_code == 200


async def test_keys_are_fetched_once_and_cached(base_settings: Settings, peers: Peers) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = gateway_settings(
        base_settings, peers.addrs, jwks_url=server.url, jwt_issuer=ISSUER, jwt_audience=AUDIENCE
    )
    try:
        async with app_client(settings) as http:
            for _ in range(10):
                assert (await _threads(http, _sign(key, "k"))).status_code == 200
            # An unknown key id fetches again only after the cooldown (default 10 s): until
            # then it cannot be told (the IdP may publish it already), retryable.
            resp = await _threads(http, _sign(key, "unknown"))
            assert resp.status_code == 503, resp.text
            assert 1 <= int(resp.headers["retry-after"]) <= 10
    finally:
        server.stop()
    assert server.fetches == 1


async def test_a_rotated_key_is_fetched_and_a_retired_key_stops_working(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]]
) -> None:
    server, keys = idp
    old = _sign(keys["rsa-1"], "rsa-1")
    assert (await _threads(j_http, old)).status_code == 200
    # The IdP publishes a new key and signs with it: no restart needed.
    new_key = _rsa()
    server.keys = [*server.keys, _jwk(new_key, "rsa-2")]
    assert (await _threads(j_http, _sign(new_key, "rsa-2"))).status_code == 200
    # It retires the old one: once the cache ends, tokens signed with it are refused.
    server.keys = [k for k in server.keys if k["kid"] != "rsa-1"]
    await asyncio.sleep(CACHE_SECONDS + 0.2)
    _assert_401(await _threads(j_http, old))
    server.keys = [*server.keys, _jwk(keys["rsa-1"], "rsa-1")]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"iss": "https://evil.example.test/"}, "issuer"),
        ({"aud": "another-api"}, "audience"),
        ({"exp": int(time.time()) - 10}, "expired"),
        ({"sub": "bad owner"}, "subject"),
    ],
)
async def test_a_token_with_a_wrong_claim_is_401(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]], change: dict[str, Any], why: str
) -> None:
    _, keys = idp
    resp = await _threads(j_http, _sign(keys["rsa-1"], "rsa-1", **change))
    _assert_401(resp)
    assert why in resp.json()["error"]["message"]


@pytest.mark.parametrize("missing", ["iss", "aud", "exp", "sub"])
async def test_a_token_without_a_required_claim_is_401(
    j_http: httpx.AsyncClient, idp: tuple[Jwks, dict[str, Any]], missing: str
) -> None:
    _, keys = idp
    claims = {k: v for k, v in _claims().items() if k != missing}
    token = jwt.encode(claims, keys["rsa-1"], algorithm="RS256", headers={"kid": "rsa-1"})
    _assert_401(await _threads(j_http, token))


def _public_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _hmac_token(header: dict[str, Any], claims: dict[str, Any], key: bytes, digest: str) -> str:
    signing = _raw(header, claims).rsplit(".", 1)[0]
    mac = hmac.new(key, signing.encode(), getattr(hashlib, digest)).digest()
    return f"{signing}.{_b64(mac)}"


def _crafted(keys: dict[str, Any], settings: Settings) -> dict[str, str]:
    claims = _claims()
    pem = _public_pem(keys["rsa-1"])
    confused_header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}
    confused = _hmac_token(confused_header, claims, pem, "sha256")
    other = _rsa()
    return {
        "alg none": _raw({"alg": "none", "typ": "JWT"}, claims),
        "alg None with kid": _raw({"alg": "None", "kid": "rsa-1"}, claims),
        "HS256 signed with the public key": confused,
        "RS256 signed by another key under a known kid": _sign(other, "rsa-1"),
        "ES256 header on an RSA key": _raw({"alg": "ES256", "kid": "rsa-1"}, claims, b"x" * 64),
        "RS256 header on an EC key": _sign(keys["rsa-1"], "ec-1"),
        "HS512": _hmac_token({"alg": "HS512"}, claims, settings.jwt_secret.encode(), "sha512"),
        "PS256": _raw({"alg": "PS256", "kid": "rsa-1"}, claims, b"x" * 256),
        "kid path traversal": _sign(keys["rsa-1"], "../../../../etc/passwd"),
        "kid SQL": _sign(keys["rsa-1"], "' OR '1'='1"),
        "kid URL": _sign(keys["rsa-1"], "http://169.254.169.254/latest/meta-data"),
        "kid huge": _sign(keys["rsa-1"], "k" * 5000),
        "kid a number": _raw({"alg": "RS256", "kid": 7}, claims, b"x"),
        "kid null": _raw({"alg": "RS256", "kid": None}, claims, b"x"),
        "no kid": jwt.encode(claims, keys["rsa-1"], algorithm="RS256"),
        "jku injection": _raw(
            {"alg": "RS256", "kid": "rsa-1", "jku": "http://127.0.0.1:1/jwks"}, claims, b"x"
        ),
        "header not JSON": f"{_b64(b'{not json')}.{_b64(b'{}')}.{_b64(b'x')}",
        "header a list": f"{_b64(b'[1,2]')}.{_b64(json.dumps(claims).encode())}.{_b64(b'x')}",
        "huge header": _raw({"alg": "RS256", "kid": "rsa-1", "x": "a" * 20_000}, claims, b"x"),
        "deep header": _b64(b'{"a":' * 5000 + b"1" + b"}" * 5000) + ".e30.eA",
        "two parts": "eyJhbGciOiJIUzI1NiJ9.e30",
        "empty signature": _raw({"alg": "RS256", "kid": "rsa-1"}, claims),
        # Deliberately not an object: the token under test.
        "claims not an object": _raw({"alg": "none"}, [1]),  # type: ignore[arg-type]
    }


CRAFTED = [
    "alg none",
    "alg None with kid",
    "HS256 signed with the public key",
    "RS256 signed by another key under a known kid",
    "ES256 header on an RSA key",
    "RS256 header on an EC key",
    "HS512",
    "PS256",
    "kid path traversal",
    "kid SQL",
    "kid URL",
    "kid huge",
    "kid a number",
    "kid null",
    "no kid",
    "jku injection",
    "header not JSON",
    "header a list",
    "huge header",
    "deep header",
    "two parts",
    "empty signature",
    "claims not an object",
]


@pytest.mark.parametrize("name", CRAFTED)
async def test_a_crafted_token_is_401_never_a_500(
    j_http: httpx.AsyncClient,
    idp: tuple[Jwks, dict[str, Any]],
    j_settings: Settings,
    name: str,
) -> None:
    token = _crafted(idp[1], j_settings)[name]
    resp = await _threads(j_http, token)
    if name == "huge header" and resp.status_code == 431:
        return  # refused by the HTTP server before the gateway: fine, not a 500
    _assert_401(resp)


async def test_an_unreachable_jwks_is_503_and_hs256_tokens_still_work(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = gateway_settings(
        base_settings,
        peers.addrs,
        jwks_url=server.url,
        jwks_cache_seconds=CACHE_SECONDS,
        jwks_refresh_cooldown_seconds=0,
        rpc_timeout_seconds=1.0,
    )
    server.stop()
    async with app_client(settings) as http:
        token = jwt.encode(
            {"sub": "u", "exp": int(time.time()) + 60}, key, "RS256", headers={"kid": "k"}
        )
        resp = await _threads(http, token)
        assert resp.status_code == 503, resp.text
        assert resp.headers["retry-after"] == "1"
        assert (await _threads(http, issue_token(settings, "hs"))).status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"<html>Service temporarily unavailable</html>",
        b'{"keys": []}',
        b'{"keys": [{"kty": "RSA", "kid": "k"}]}',
        b"[]",
    ],
    ids=["html", "no-keys", "unusable-key", "not-an-object"],
)
async def test_a_jwks_answer_that_is_not_a_key_set_is_503_never_a_500(
    base_settings: Settings, peers: Peers, raw: bytes
) -> None:
    server = Jwks()
    server.raw = raw
    settings = gateway_settings(
        base_settings,
        peers.addrs,
        jwks_url=server.url,
        jwks_cache_seconds=CACHE_SECONDS,
        jwks_refresh_cooldown_seconds=0,
    )
    try:
        async with app_client(settings) as http:
            token = _sign(_rsa(), "k")
            resp = await _threads(http, token)
            assert resp.status_code == 503, resp.text
            assert resp.headers["retry-after"] == "1"
            assert (await _threads(http, issue_token(settings, "hs"))).status_code == 200
    finally:
        server.stop()


async def test_a_known_key_is_not_held_up_by_a_fetch_for_an_unknown_one(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = gateway_settings(
        base_settings,
        peers.addrs,
        jwks_url=server.url,
        jwks_refresh_cooldown_seconds=0,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        rpc_timeout_seconds=3.0,
    )
    try:
        async with app_client(settings) as http:
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            server.delay = 5.0  # the IdP hangs from now on
            unknown = asyncio.create_task(_threads(http, _sign(_rsa(), "other")))
            await asyncio.sleep(0.3)  # its fetch is under way
            started = time.monotonic()
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            assert time.monotonic() - started < 1.0
            assert (await unknown).status_code == 503
    finally:
        server.stop()


async def test_an_empty_jwt_secret_turns_hs256_off(base_settings: Settings, peers: Peers) -> None:
    settings = gateway_settings(base_settings, peers.addrs, jwt_secret="")
    async with app_client(settings) as http:
        claims = {"sub": "u", "exp": int(time.time()) + 60}
        token = _hmac_token({"alg": "HS256"}, claims, b"", "sha256")
        _assert_401(await _threads(http, token))


def _outage_settings(
    base_settings: Settings, peers: Peers, server: Jwks, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "jwks_url": server.url,
        "jwks_cache_seconds": CACHE_SECONDS,
        "jwks_refresh_cooldown_seconds": 0,
        "jwt_issuer": ISSUER,
        "jwt_audience": AUDIENCE,
        "rpc_timeout_seconds": 1.0,
    }
    return gateway_settings(base_settings, peers.addrs, **(values | overrides))


@pytest.mark.parametrize("outage", ["down", "error status", "not a key set"])
async def test_known_keys_keep_verifying_while_the_idp_is_unreachable(
    base_settings: Settings, peers: Peers, outage: str
) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = _outage_settings(base_settings, peers, server)
    try:
        async with app_client(settings) as http:
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            if outage == "down":
                server.stop()
            elif outage == "error status":
                server.status = 503
            else:
                server.raw = b"<html>maintenance</html>"
            await asyncio.sleep(CACHE_SECONDS + 0.3)  # the cached keys expired
            for _ in range(3):
                assert (await _threads(http, _sign(key, "k"))).status_code == 200
            # A key id the gateway never saw cannot be told while the keys cannot be
            # fetched: retryable, never a 401 (a client would log its user out).
            resp = await _threads(http, _sign(_rsa(), "rotated"))
            assert resp.status_code == 503, resp.text
            assert resp.headers["retry-after"] == "1"
    finally:
        if outage != "down":
            server.stop()


async def test_known_keys_stop_verifying_past_the_maximum_stale_age(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = _outage_settings(base_settings, peers, server, jwks_max_stale_seconds=3.0)
    async with app_client(settings) as http:
        # The set is fetched during the first request: after `asked`, by `answered` (on a
        # loaded machine the two are more than the margins below apart).
        asked = time.monotonic()
        assert (await _threads(http, _sign(key, "k"))).status_code == 200
        answered = time.monotonic()
        server.stop()
        await asyncio.sleep(asked + CACHE_SECONDS + 0.3 - time.monotonic())
        assert (await _threads(http, _sign(key, "k"))).status_code == 200
        await asyncio.sleep(answered + 3.3 - time.monotonic())
        resp = await _threads(http, _sign(key, "k"))
        assert resp.status_code == 503, resp.text
        assert resp.headers["retry-after"] == "1"


async def test_the_keys_are_fetched_again_once_the_idp_is_back(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    old, new = _rsa(), _rsa()
    server.keys = [_jwk(old, "old")]
    settings = _outage_settings(base_settings, peers, server)
    try:
        async with app_client(settings) as http:
            assert (await _threads(http, _sign(old, "old"))).status_code == 200
            server.status = 500
            await asyncio.sleep(CACHE_SECONDS + 0.2)
            assert (await _threads(http, _sign(old, "old"))).status_code == 200
            # Back, with the old key retired and a new one: the stale keys are gone.
            server.status = 200
            server.keys = [_jwk(new, "new")]
            assert (await _threads(http, _sign(new, "new"))).status_code == 200
            _assert_401(await _threads(http, _sign(old, "old")))
    finally:
        server.stop()


async def test_a_new_key_id_within_the_refresh_cooldown_is_503_then_fetched(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    key, rotated = _rsa(), _rsa()
    server.keys = [_jwk(key, "k")]
    settings = _outage_settings(
        base_settings, peers, server, jwks_cache_seconds=300, jwks_refresh_cooldown_seconds=1.5
    )
    try:
        async with app_client(settings) as http:
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            server.keys = [*server.keys, _jwk(rotated, "k2")]  # the IdP rotates
            resp = await _threads(http, _sign(rotated, "k2"))
            assert resp.status_code == 503, resp.text
            assert resp.headers["retry-after"] in ("1", "2")
            await asyncio.sleep(1.6)
            assert (await _threads(http, _sign(rotated, "k2"))).status_code == 200
            # A key id the IdP does not have, with keys fetched just now, is refused.
            await asyncio.sleep(1.6)
            _assert_401(await _threads(http, _sign(_rsa(), "forged")))
    finally:
        server.stop()
    assert server.fetches == 3


async def test_a_known_key_is_not_held_up_by_a_fetch_of_expired_keys(
    base_settings: Settings, peers: Peers
) -> None:
    server = Jwks()
    key = _rsa()
    server.keys = [_jwk(key, "k")]
    settings = _outage_settings(base_settings, peers, server, rpc_timeout_seconds=2.0)
    try:
        async with app_client(settings) as http:
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            await asyncio.sleep(CACHE_SECONDS + 0.2)
            server.delay = 4.0  # the IdP hangs: the next request's fetch times out
            fetching = asyncio.create_task(_threads(http, _sign(key, "k")))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            assert (await _threads(http, _sign(key, "k"))).status_code == 200
            assert time.monotonic() - started < 1.0
            assert (await fetching).status_code == 200  # the stale key, once it gave up
    finally:
        server.stop()
