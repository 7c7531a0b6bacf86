"""API keys of server-to-server callers: created by an admin for an owner (or with admin
scope), shown once, stored hashed, listed without the key, last-used time kept, revocable."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from services.gateway.store import GatewayStore
from shared.identity import OWNER_KEY
from shared.settings import Settings
from tests.gateway.conftest import Peers, bearer

KEYS = "/api/v1/admin/api-keys"


def _admin(settings: Settings) -> dict[str, str]:
    return bearer(settings, "root", admin=True)


def _key_auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _create(
    http: httpx.AsyncClient, settings: Settings, owner: str, **extra: Any
) -> dict[str, Any]:
    resp = await http.post(
        KEYS, json={"ownerId": owner, "name": "billing sync", **extra}, headers=_admin(settings)
    )
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _owner() -> str:
    return f"svc-{uuid.uuid4().hex[:8]}"


async def test_an_api_key_authenticates_as_its_owner(
    http: httpx.AsyncClient, gw_settings: Settings, peers: Peers
) -> None:
    owner = _owner()
    created = await _create(http, gw_settings, owner)
    assert created["key"].startswith("amk_")
    assert (created["ownerId"], created["admin"], created["revoked"]) == (owner, False, False)
    resp = await http.get("/api/v1/agent/threads", headers=_key_auth(created["key"]))
    assert resp.status_code == 200, resp.text
    assert peers.history.calls[-1].metadata[OWNER_KEY] == owner
    # A user key is not an admin key.
    denied = await http.get(KEYS, headers=_key_auth(created["key"]))
    assert denied.status_code == 403


async def test_an_admin_api_key_opens_the_admin_endpoints(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    created = await _create(http, gw_settings, "ops-robot", admin=True)
    resp = await http.get(KEYS, params={"owner_id": "ops-robot"}, headers=_key_auth(created["key"]))
    assert resp.status_code == 200, resp.text


async def test_the_key_is_shown_once_and_stored_only_as_a_hash(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    owner = _owner()
    created = await _create(http, gw_settings, owner)
    listed = await http.get(KEYS, params={"owner_id": owner}, headers=_admin(gw_settings))
    assert listed.status_code == 200
    [entry] = listed.json()["apiKeys"]
    assert entry["id"] == created["id"] and "key" not in entry
    # amk_<id>_<secret>: the id has no "_", the secret (URL-safe base64) may have some.
    secret = created["key"].removeprefix("amk_").split("_", 1)[1]
    store = await GatewayStore.open(gw_settings)
    try:
        async with store.engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT * FROM api_keys WHERE id = :id"), {"id": entry["id"]}
                )
            ).first()
    finally:
        await store.close()
    assert row is not None
    assert all(secret not in str(value) for value in row)


async def test_the_last_used_time_is_kept(http: httpx.AsyncClient, gw_settings: Settings) -> None:
    owner = _owner()
    created = await _create(http, gw_settings, owner)
    assert "lastUsedTime" not in created
    assert (await http.get("/api/v1/agent/threads", headers=_key_auth(created["key"]))).is_success
    listed = await http.get(KEYS, params={"owner_id": owner}, headers=_admin(gw_settings))
    used = listed.json()["apiKeys"][0]["lastUsedTime"]
    assert used.endswith("Z") and used >= created["createTime"]


async def test_a_revoked_key_is_401_and_revoking_again_is_harmless(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    created = await _create(http, gw_settings, _owner())
    revoked = await http.delete(f"{KEYS}/{created['id']}", headers=_admin(gw_settings))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked"] is True
    resp = await http.get("/api/v1/agent/threads", headers=_key_auth(created["key"]))
    assert resp.status_code == 401
    assert resp.json()["error"]["message"] == "the API key was revoked"
    again = await http.delete(f"{KEYS}/{created['id']}", headers=_admin(gw_settings))
    assert again.status_code == 200
    assert again.json()["revokeTime"] == revoked.json()["revokeTime"]


async def test_revoking_an_unknown_key_is_404(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    resp = await http.delete(f"{KEYS}/0123456789abcdef", headers=_admin(gw_settings))
    assert resp.status_code == 404


async def test_listing_is_per_owner_when_asked(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    a, b = _owner(), _owner()
    await _create(http, gw_settings, a)
    await _create(http, gw_settings, b)
    listed = await http.get(KEYS, params={"owner_id": a}, headers=_admin(gw_settings))
    assert {k["ownerId"] for k in listed.json()["apiKeys"]} == {a}


@pytest.mark.parametrize(
    "credential",
    [
        "amk_",
        "amk_0123456789abcdef_wrong-secret",
        "amk_zzzz_secret",
        "amk_" + "0" * 16,
        "amk_0123456789abcdef_" + "x" * 5000,
        "amk_%00_\u202e",
    ],
)
async def test_a_wrong_or_malformed_key_is_401(
    http: httpx.AsyncClient, gw_settings: Settings, credential: str
) -> None:
    headers = {"Authorization": f"Bearer {credential}".encode()}
    resp = await http.get("/api/v1/agent/threads", headers=headers)
    assert resp.status_code == 401, resp.text


async def test_the_secret_of_one_key_does_not_open_another(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    first = await _create(http, gw_settings, _owner())
    second = await _create(http, gw_settings, _owner())
    forged = f"amk_{second['id']}_{first['key'].rsplit('_', 1)[1]}"
    assert (await http.get("/api/v1/agent/threads", headers=_key_auth(forged))).status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x"}, "ownerId"),
        ({"ownerId": "bad owner", "name": "x"}, "ownerId"),
        ({"ownerId": "ok"}, "name"),
        ({"ownerId": "ok", "name": ""}, "name"),
        ({"ownerId": "ok", "name": "a\u0000b"}, "name"),
        ({"ownerId": "ok", "name": "x" * 201}, "name"),
        ({"ownerId": "ok", "name": "x", "admin": "yes"}, "admin"),
        ({"ownerId": "ok", "name": "x", "scope": "admin"}, "scope"),
        ({"ownerId": 7, "name": "x"}, "ownerId"),
    ],
)
async def test_a_bad_key_request_is_400_naming_the_field(
    http: httpx.AsyncClient, gw_settings: Settings, body: dict[str, Any], field: str
) -> None:
    resp = await http.post(KEYS, json=body, headers=_admin(gw_settings))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["details"][0]["field"] == field


async def test_key_endpoints_need_the_admin_scope(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    user = bearer(gw_settings, "alice")
    assert (
        await http.post(KEYS, json={"ownerId": "alice", "name": "x"}, headers=user)
    ).status_code == 403
    assert (await http.get(KEYS, headers=user)).status_code == 403
    assert (await http.delete(f"{KEYS}/0123456789abcdef", headers=user)).status_code == 403
    assert (await http.get(KEYS)).status_code == 401


async def test_keys_made_at_once_are_all_distinct_and_all_work(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    owner = _owner()
    made = await asyncio.gather(*(_create(http, gw_settings, owner) for _ in range(5)))
    assert len({m["key"] for m in made}) == 5
    for m in made:
        resp = await http.get("/api/v1/agent/threads", headers=_key_auth(m["key"]))
        assert resp.status_code == 200


async def test_the_last_used_time_is_written_at_most_once_a_minute(
    http: httpx.AsyncClient, gw_settings: Settings
) -> None:
    owner = _owner()
    created = await _create(http, gw_settings, owner)

    async def used() -> str:
        assert (
            await http.get("/api/v1/agent/threads", headers=_key_auth(created["key"]))
        ).is_success
        listed = await http.get(KEYS, params={"owner_id": owner}, headers=_admin(gw_settings))
        return str(listed.json()["apiKeys"][0]["lastUsedTime"])

    first = await used()
    await asyncio.sleep(0.01)
    assert await used() == first
