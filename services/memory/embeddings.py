"""The vector half of memory search: an OpenAI-compatible /v1/embeddings client, and the
background embedder that keeps every memory's embedding current.

Embeddings are computed off the request path: WriteMemory only wakes the embedder, which
embeds new and changed memories in batches (store.stale_embeddings: no embedding by the
configured model, or one for an older version of the memory). Until it has, the lexical
half finds the memory. While the endpoint fails, the embedder backs off and retries.

A search's query is embedded on the request path, within its own deadline
(AGENTMESH_EMBEDDING_QUERY_TIMEOUT_SECONDS): when it is not (late, refused, or the model's
last health probe failed), that search is answered by the lexical half alone, never an
error, and says so (QueryVector.lexical_reason: the response's mode_reason and the
agentmesh_memory_search_total metric).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from services.memory import store
from shared import metrics
from shared.settings import Settings

log = logging.getLogger(__name__)

_MAX_BACKOFF_SECONDS = 60.0
# Query vectors kept (about 1.6 KB each at 384 dimensions).
_RECENT_QUERIES = 256


class EmbeddingUnavailable(Exception):
    """The endpoint could not be reached or gave an unusable answer; the message says why."""


# Why a search ran lexical only (SearchMemoriesResponse.mode_reason, the metric's label);
# each is about that one search.
NO_EMBEDDING_MODEL = "no_embedding_model"
# The model's last health probe failed: searches do not wait for it until one succeeds.
EMBEDDING_MODEL_DOWN = "embedding_model_down"
EMBEDDING_TIMEOUT = "embedding_timeout"
EMBEDDING_FAILED = "embedding_failed"


@dataclass(frozen=True)
class QueryVector:
    """A search query's vector by `model`, or None and why not (the search is lexical)."""

    vector: list[float] | None
    model: str
    lexical_reason: str = ""


@dataclass(frozen=True)
class EmbeddingConfig:
    base_url: str
    model: str
    dimensions: int
    api_key: str
    timeout_seconds: float
    query_input_type: str
    document_input_type: str
    batch_size: int
    poll_seconds: float
    query_timeout_seconds: float = 1.0

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddingConfig | None:
        """None when no endpoint is configured (search is lexical only)."""
        if not settings.embedding_base_url:
            return None
        return cls(
            base_url=settings.embedding_base_url.rstrip("/"),
            model=settings.embedding_model,
            dimensions=settings.embedding_dimensions,
            api_key=settings.embedding_api_key,
            timeout_seconds=settings.embedding_timeout_seconds,
            query_input_type=settings.embedding_query_input_type,
            document_input_type=settings.embedding_document_input_type,
            batch_size=settings.embedding_batch_size,
            poll_seconds=settings.embedding_poll_seconds,
            query_timeout_seconds=settings.embedding_query_timeout_seconds,
        )


class EmbeddingClient:
    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        # httpx is imported here, with an embeddings endpoint configured: a memory service
        # without one never loads it (issue 24).
        import httpx

        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._http = httpx.AsyncClient(
            base_url=config.base_url, headers=headers, timeout=config.timeout_seconds
        )
        # The last health probe (check) failed: queries are not sent until one succeeds (a
        # hung model would otherwise cost every search its query deadline).
        self.down = False
        # The vectors of the latest queries, newest last: a question asked again (a
        # greeting, a run tried again) costs no model call. A vector depends on the text
        # and the model alone.
        self._recent: OrderedDict[str, list[float]] = OrderedDict()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def check(self) -> None:
        """EmbeddingUnavailable unless the endpoint answers its model list (GET /models): the
        health entry of the model (shared.server.EMBEDDING_MODEL), probed every few seconds."""
        import httpx

        answered = False
        try:
            response = await self._http.get("/models")
            answered = response.status_code == 200
        except httpx.HTTPError as err:
            raise EmbeddingUnavailable(f"embeddings endpoint unreachable: {err!r}") from err
        finally:
            # Also when the probe's deadline (the server's wait_for) cancelled it.
            self.down = not answered
        if not answered:
            raise EmbeddingUnavailable(f"embeddings endpoint answered {response.status_code}")

    async def embed_query(self, text: str) -> QueryVector:
        """`text`'s vector within the query deadline; else None and why (the search is then
        lexical, that search only: the next one asks the model again)."""
        known = self._recent.get(text)
        if known is not None:
            self._recent.move_to_end(text)
            return QueryVector(known, self.config.model)
        if self.down:
            return QueryVector(None, "", EMBEDDING_MODEL_DOWN)
        import httpx

        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.query_timeout_seconds):
                [vector] = await self.embed([text], query=True)
        except TimeoutError:
            reason = EMBEDDING_TIMEOUT
        except EmbeddingUnavailable as err:
            timed_out = isinstance(err.__cause__, httpx.TimeoutException)
            reason = EMBEDDING_TIMEOUT if timed_out else EMBEDDING_FAILED
            log.warning("memory search without vectors (this search): %s", err)
        else:
            metrics.query_embedded(time.perf_counter() - started)
            self._recent[text] = vector
            if len(self._recent) > _RECENT_QUERIES:
                self._recent.popitem(last=False)
            return QueryVector(vector, self.config.model)
        metrics.query_embedded(time.perf_counter() - started)
        if reason == EMBEDDING_TIMEOUT:
            log.warning(
                "memory search without vectors (this search): the query was not embedded "
                "within %.2f s",
                self.config.query_timeout_seconds,
            )
        return QueryVector(None, "", reason)

    async def embed(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """Unit-length vectors of `texts`, in order; EmbeddingUnavailable on any failure."""
        import httpx

        config = self.config
        body: dict[str, Any] = {"model": config.model, "input": list(texts)}
        input_type = config.query_input_type if query else config.document_input_type
        if input_type:
            body["input_type"] = input_type
        try:
            response = await self._http.post("/embeddings", json=body)
        except httpx.HTTPError as err:
            raise EmbeddingUnavailable(f"embeddings endpoint unreachable: {err!r}") from err
        if response.status_code != 200:
            raise EmbeddingUnavailable(
                f"embeddings endpoint answered {response.status_code}: {response.text[:200]}"
            )
        try:
            data = response.json()["data"]
            by_index = {int(item["index"]): item["embedding"] for item in data}
            vectors = [_vector(by_index[i], config.dimensions) for i in range(len(texts))]
        except (ValueError, KeyError, TypeError) as err:
            raise EmbeddingUnavailable(f"unusable embeddings answer: {err!r}") from err
        return vectors


def _vector(raw: object, dimensions: int) -> list[float]:
    if not isinstance(raw, list) or len(raw) != dimensions:
        size = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ValueError(f"expected {dimensions} numbers, got {size}")
    vector = [float(x) for x in raw]
    if not all(math.isfinite(x) for x in vector):
        raise ValueError("the vector has a non-finite number")
    return store.unit(vector)


class Embedder:
    """The background task: embeds stale memories until none is left, then waits for a
    write (wake) or the poll interval."""

    def __init__(self, engine: AsyncEngine, client: EmbeddingClient) -> None:
        self.engine = engine
        self.client = client
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        config = self.client.config
        indexed = False
        backoff = 0.0
        while True:
            try:
                if not indexed:
                    async with self.engine.begin() as conn:
                        await store.ensure_vector_index(conn, config.dimensions)
                    indexed = True
                done = await self.embed_batch()
                backoff = 0.0
            except EmbeddingUnavailable as err:
                backoff = min(_MAX_BACKOFF_SECONDS, max(1.0, backoff * 2))
                log.warning("memory embedder: %s; retrying in %.0f s", err, backoff)
                await asyncio.sleep(backoff)
                continue
            except Exception:
                # A database outage: the same backoff; the task must outlive it.
                backoff = min(_MAX_BACKOFF_SECONDS, max(1.0, backoff * 2))
                log.exception("memory embedder failed; retrying in %.0f s", backoff)
                await asyncio.sleep(backoff)
                continue
            if done == 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), config.poll_seconds)
                except TimeoutError:
                    pass

    async def embed_batch(self) -> int:
        """Embeds one batch of stale memories; how many it looked at (0: none stale)."""
        config = self.client.config
        async with self.engine.connect() as conn:
            tasks = await store.stale_embeddings(
                conn, config.model, config.dimensions, config.batch_size
            )
        if not tasks:
            return 0
        # A memory whose content is what was embedded (only its version moved) keeps its
        # vector; the rest are embedded in one request.
        changed = [t for t in tasks if t.embedded_digest != store.digest(t.content)]
        vectors = (
            await self.client.embed([t.content for t in changed], query=False) if changed else []
        )
        fresh = {t.memory_id: v for t, v in zip(changed, vectors, strict=True)}
        now = store.utc_now()
        async with self.engine.begin() as conn:
            for task in tasks:
                await store.put_embedding(
                    conn, task.owner_id, task, config.model, fresh.get(task.memory_id), now
                )
        return len(tasks)
