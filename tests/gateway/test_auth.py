"""Bearer authentication and the admin scope."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

from services.gateway.auth import verify_token
from shared.settings import Settings
from tests.gateway.conftest import Peers, bearer, run_body

PROTECTED = [
    ("POST", "/api/v1/agent/runs"),
    ("GET", "/api/v1/agent/threads"),
    ("GET", "/api/v1/agent/threads/t-1/history"),
    ("GET", "/api/v1/agent/runs/r-1"),
    ("GET", "/api/v1/memories"),
    ("DELETE", "/api/v1/memories/m-1"),
    ("GET", "/api/v1/admin/audit?owner_id=alice"),
]


def _token(
    settings: Settings,
    claims: dict[str, object],
    secret: str | None = None,
) -> dict[str, str]:
    return {
        "Authorization": "Bearer "
        + jwt.encode(claims, secret or settings.jwt_secret, algorithm="HS256")
    }


def _assert_401(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"] == "Bearer"
    assert resp.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_request_without_token_is_401(
    method: str,
    path: str,
    http: httpx.AsyncClient,
) -> None:
    _assert_401(await http.request(method, path, json=run_body() if method == "POST" else None))


async def test_malformed_token_is_401(http: httpx.AsyncClient) -> None:
    _assert_401(
        await http.get("/api/v1/agent/threads", headers={"Authorization": "Bearer not.a.jwt"})
    )


async def test_non_bearer_scheme_is_401(http: httpx.AsyncClient) -> None:
    _assert_401(await http.get("/api/v1/agent/threads", headers={"Authorization": "Basic YTpi"}))


async def test_token_signed_with_another_secret_is_401(
    http: httpx.AsyncClient,
    gw_settings: Settings,
) -> None:
    claims = {"sub": "alice", "exp": int(time.time()) + 60}
    _assert_401(
        await http.get(
            "/api/v1/agent/threads",
            headers=_token(gw_settings, claims, "another-secret-that-is-long-enough-for-hs256"),
        )
    )


async def test_expired_token_is_401(http: httpx.AsyncClient, gw_settings: Settings) -> None:
    claims = {"sub": "alice", "exp": int(time.time()) - 10}
    resp = await http.get("/api/v1/agent/threads", headers=_token(gw_settings, claims))
    _assert_401(resp)
    assert "expired" in resp.json()["error"]["message"]


async def test_token_without_expiry_is_401(http: httpx.AsyncClient, gw_settings: Settings) -> None:
    _assert_401(
        await http.get("/api/v1/agent/threads", headers=_token(gw_settings, {"sub": "alice"}))
    )


async def test_token_with_an_invalid_subject_is_401(
    http: httpx.AsyncClient,
    gw_settings: Settings,
) -> None:
    claims = {"sub": "alice bob/../", "exp": int(time.time()) + 60}
    _assert_401(await http.get("/api/v1/agent/threads", headers=_token(gw_settings, claims)))


@pytest.mark.parametrize("sub", ["alice\n", "alice\r\n", "x" * 129, "", "ålice"])
@pytest.mark.parametrize("path", ["/api/v1/agent/threads", "/api/v1/admin/audit?owner_id=alice"])
async def test_a_signed_token_whose_subject_breaks_the_owner_rule_is_401(
    sub: str,
    path: str,
    http: httpx.AsyncClient,
    gw_settings: Settings,
) -> None:
    claims = {"sub": sub, "exp": int(time.time()) + 60, "scope": "admin"}
    _assert_401(await http.get(path, headers=_token(gw_settings, claims)))


async def test_token_with_another_algorithm_is_401(
    http: httpx.AsyncClient,
    gw_settings: Settings,
) -> None:
    claims = {"sub": "alice", "exp": int(time.time()) + 60}
    token = jwt.encode(claims, gw_settings.jwt_secret * 2, algorithm="HS512")
    _assert_401(
        await http.get("/api/v1/agent/threads", headers={"Authorization": f"Bearer {token}"})
    )


async def test_non_admin_token_on_audit_is_403(
    http: httpx.AsyncClient,
    gw_settings: Settings,
    peers: Peers,
) -> None:
    before = len(peers.history.calls)
    resp = await http.get(
        "/api/v1/admin/audit?owner_id=alice", headers=bearer(gw_settings, "alice")
    )
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "PERMISSION_DENIED"
    assert len(peers.history.calls) == before


async def test_scope_list_with_admin_reaches_audit(
    http: httpx.AsyncClient,
    gw_settings: Settings,
) -> None:
    claims = {"sub": "root", "exp": int(time.time()) + 60, "scope": ["read", "admin"]}
    resp = await http.get("/api/v1/admin/audit?owner_id=alice", headers=_token(gw_settings, claims))
    assert resp.status_code == 200


async def test_token_command_prints_a_token_the_gateway_accepts(gw_settings: Settings) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "AGENTMESH_JWT_SECRET": gw_settings.jwt_secret,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "protos")]),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.gateway",
            "token",
            "--sub",
            "bob",
            "--admin",
            "--ttl",
            "60",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=30,
    ).stdout.strip()
    who = await verify_token(gw_settings, out)
    assert (who.owner, who.admin) == ("bob", True)
    assert jwt.decode(out, options={"verify_signature": False})["exp"] <= time.time() + 61


def test_token_command_refuses_an_invalid_owner_id(capsys: pytest.CaptureFixture[str]) -> None:
    from services.gateway.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["token", "--sub", "bad owner"])
    assert exc.value.code != 0
    assert "not a valid owner id" in capsys.readouterr().err


async def test_a_token_that_verified_is_refused_once_it_expires() -> None:
    # Verified tokens are remembered; not past their expiry.
    settings = Settings(jwt_secret="a-secret-that-is-long-enough-for-hs256-tokens")
    exp = int(time.time()) + 1
    token = jwt.encode({"sub": "alice", "exp": exp}, settings.jwt_secret, algorithm="HS256")
    assert (await verify_token(settings, token)).owner == "alice"
    assert (await verify_token(settings, token)).owner == "alice"
    time.sleep(max(0.0, exp - time.time()) + 0.05)
    with pytest.raises(Exception, match="expired"):
        await verify_token(settings, token)


async def test_a_token_that_verified_is_refused_under_another_secret_or_audience() -> None:
    settings = Settings(jwt_secret="a-secret-that-is-long-enough-for-hs256-tokens")
    claims = {"sub": "alice", "exp": int(time.time()) + 60}
    token = jwt.encode(claims, settings.jwt_secret, algorithm="HS256")
    assert (await verify_token(settings, token)).owner == "alice"
    rotated = Settings(jwt_secret="another-secret-that-is-long-enough-for-hs256")
    with pytest.raises(Exception, match="not valid"):
        await verify_token(rotated, token)
    # The token names no audience; one is now required.
    with pytest.raises(Exception, match="not valid"):
        await verify_token(settings.model_copy(update={"jwt_audience": "api"}), token)


async def test_a_signed_token_expiring_past_any_float_is_accepted_and_remembered() -> None:
    # exp = 10**400: an integer JSON allows and PyJWT accepts (it was a 500 remembering it).
    settings = Settings(jwt_secret="a-secret-that-is-long-enough-for-hs256-tokens")
    token = jwt.encode({"sub": "alice", "exp": 10**400}, settings.jwt_secret, algorithm="HS256")
    assert (await verify_token(settings, token)).owner == "alice"
    assert (await verify_token(settings, token)).owner == "alice"
