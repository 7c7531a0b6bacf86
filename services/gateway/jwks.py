"""The identity provider's signing keys (settings.jwks_url), kept through an outage.

PyJWT's PyJWKClient fetches and parses the key set (JWKS); this module decides when to
fetch it, and what a key id is answered with when the set cannot be fetched:

- A fetched set is fresh for settings.jwks_cache_seconds: a key id it holds is answered
  from it, without waiting for anything.
- A set past that age is fetched again. A key id the fresh set lacks fetches it again too
  (the IdP rotated its keys: no restart needed), at most once per
  settings.jwks_refresh_cooldown_seconds; a fetch that failed is not tried again within
  that cooldown either, so neither unknown key ids nor an IdP that is down turn every
  request into a fetch.
- Stale if error: while the set cannot be fetched (the IdP is unreachable, answers an
  error, or answers something that is no key set), the last set fetched keeps answering
  for the key ids it holds, until settings.jwks_max_stale_seconds after it was fetched.
  Requests that come while another one is fetching are answered from it as well.
- `KeysUnavailable` (the gateway answers 503 with Retry-After): the key cannot be told
  now: no set was ever fetched, the last one is older than the maximum stale age, or the
  key id is not in it while the set cannot be fetched again (the IdP is down, or the last
  fetch is within the cooldown: the IdP may publish that key already). Never a 401: a
  client told 401 logs its user out.
- `UnknownKey` (401): the key id is not in a set fetched just now.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import jwt

log = logging.getLogger("agentmesh.gateway")


class KeysUnavailable(Exception):
    """The IdP's keys cannot tell this key id now; ask again after `retry_after` seconds."""

    def __init__(self, why: str, retry_after: int) -> None:
        super().__init__(why)
        self.retry_after = retry_after


class UnknownKey(Exception):
    """The key id is not among the IdP's keys, fetched just now."""


@dataclass(frozen=True)
class _KeySet:
    keys: dict[str, jwt.PyJWK]
    # When it was fetched (the clock's seconds).
    fetched_at: float


class IdpKeys:
    def __init__(
        self,
        url: str,
        *,
        cache_seconds: float,
        cooldown_seconds: float,
        max_stale_seconds: float,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Fetches and parses only: the set is kept here (PyJWKClient's own cache drops a
        # set once it expires, and keeps nothing through a failed fetch).
        self._client = jwt.PyJWKClient(url, cache_jwk_set=False, timeout=timeout)
        self._cache_seconds = cache_seconds
        self._cooldown = cooldown_seconds
        self._max_stale = max_stale_seconds
        self._timeout = timeout
        self._clock = clock
        self._set: _KeySet | None = None
        # When a fetch was last tried (it succeeded or not), and whether it failed.
        self._tried_at: float | None = None
        self._failed = False
        # One fetch at a time.
        self._fetching = threading.Lock()

    def key(self, kid: str) -> jwt.PyJWK:
        """The IdP's key `kid`. Blocking (it may fetch the set): called off the event loop."""
        known = self._set
        if known is not None and kid in known.keys:
            age = self._clock() - known.fetched_at
            if age < self._cache_seconds:
                return known.keys[kid]
            if self._fetching.locked() and age <= self._max_stale:
                # Another request is fetching the set again: not held up by it.
                return known.keys[kid]
        if not self._fetching.acquire(timeout=self._timeout):
            return self._without_fetch(kid)
        try:
            return self._key_fetching(kid)
        finally:
            self._fetching.release()

    def _key_fetching(self, kid: str) -> jwt.PyJWK:
        known = self._set
        fresh = known is not None and self._clock() - known.fetched_at < self._cache_seconds
        if known is not None and fresh and kid in known.keys:
            return known.keys[kid]  # fetched by another request meanwhile
        if self._may_fetch(fresh):
            fetched = self._fetch()
            if fetched is not None:
                found = fetched.keys.get(kid)
                if found is None:
                    raise UnknownKey(kid)
                return found
        return self._without_fetch(kid)

    def _may_fetch(self, fresh: bool) -> bool:
        if self._tried_at is None or self._clock() - self._tried_at >= self._cooldown:
            return True
        # Within the cooldown: only a set that expired after a fetch that worked (its age,
        # not an unknown key id, asks for it).
        return not fresh and not self._failed

    def _fetch(self) -> _KeySet | None:
        try:
            keys = self._client.get_signing_keys()
        except Exception as exc:
            # Unreachable, an HTTP error, no JSON, no usable key: the IdP's fault, and the
            # set fetched before stays in use (bounded by its maximum stale age).
            self._tried_at, self._failed = self._clock(), True
            log.warning("JWKS fetch failed: %s", exc)
            return None
        now = self._clock()
        self._tried_at, self._failed = now, False
        self._set = _KeySet({k.key_id: k for k in keys if k.key_id}, now)
        return self._set

    def _without_fetch(self, kid: str) -> jwt.PyJWK:
        """The key from the set at hand, within its maximum stale age; KeysUnavailable when
        that set cannot tell."""
        now = self._clock()
        retry = 1
        if self._tried_at is not None:
            retry = max(1, math.ceil(self._tried_at + self._cooldown - now))
        known = self._set
        if known is None:
            raise KeysUnavailable("the identity provider's keys could not be fetched", retry)
        if now - known.fetched_at > self._max_stale:
            raise KeysUnavailable(
                "the identity provider's keys could not be fetched again and the last ones "
                "fetched are past their maximum age",
                retry,
            )
        found = known.keys.get(kid)
        if found is None:
            raise KeysUnavailable(
                "the token's key id is not among the identity provider's keys fetched last, "
                "which cannot be fetched again now",
                retry,
            )
        return found
