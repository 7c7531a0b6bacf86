"""The one error family of agentmesh and its mapping to gRPC status (google.rpc.Status).

Services raise a DomainError subclass; the error interceptor turns it into a status with
ErrorInfo(reason, domain) and, for invalid arguments, BadRequest field violations. Clients
turn an RpcError back into the same class with `from_rpc_error`.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Mapping, Sequence

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "agentmesh"

# An error stays small wherever it goes. A status travels in the grpc-message and
# grpc-status-details-bin trailers, and gRPC refuses trailers past its metadata limit (8 KiB
# by default): a peer would see RESOURCE_EXHAUSTED "received metadata size exceeds hard
# limit" instead of the error. So a status keeps its first MAX_VIOLATIONS violations, and
# every text is cut to a bounded number of UTF-8 bytes (grpc-message percent-encodes
# non-ASCII bytes, three characters each): at worst about 6 KiB in all.
MAX_MESSAGE_BYTES = 400
MAX_FIELD_BYTES = 128
MAX_DESCRIPTION_BYTES = 200
MAX_VIOLATIONS = 5
MAX_METADATA_ENTRIES = 8
MAX_METADATA_KEY_BYTES = 64
MAX_METADATA_BYTES = 128
_ELLIPSIS = "\u2026"


def clip(text: str, max_bytes: int) -> str:
    """`text` in at most `max_bytes` bytes of UTF-8, ending with an ellipsis when it was cut;
    a character UTF-8 cannot carry (a lone surrogate) becomes "?"."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    return data[: max_bytes - len(_ELLIPSIS.encode())].decode("utf-8", "ignore") + _ELLIPSIS


def bounded_violations(violations: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The first MAX_VIOLATIONS (field, description) pairs, each text clipped."""
    return tuple(
        (clip(f, MAX_FIELD_BYTES), clip(d, MAX_DESCRIPTION_BYTES))
        for f, d in violations[:MAX_VIOLATIONS]
    )


class DomainError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    default_reason = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        violations: Sequence[tuple[str, str]] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        message = clip(message, MAX_MESSAGE_BYTES)
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.violations = bounded_violations(violations)
        self.metadata = {
            clip(k, MAX_METADATA_KEY_BYTES): clip(v, MAX_METADATA_BYTES)
            for k, v in list((metadata or {}).items())[:MAX_METADATA_ENTRIES]
        }

    def to_status(self) -> status_pb2.Status:
        details = []
        info = any_pb2.Any()
        info.Pack(
            error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN, metadata=self.metadata)
        )
        details.append(info)
        if self.violations:
            bad = any_pb2.Any()
            bad.Pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                        for f, d in self.violations
                    ]
                )
            )
            details.append(bad)
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=details)

    def to_grpc_status(self) -> grpc.Status:
        return rpc_status.to_status(self.to_status())


class InvalidArgument(DomainError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    default_reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, description: str, *, reason: str | None = None) -> None:
        super().__init__(
            f"{field}: {description}", reason=reason, violations=[(field, description)]
        )


class NotFound(DomainError):
    code = grpc.StatusCode.NOT_FOUND
    default_reason = "NOT_FOUND"


class AlreadyExists(DomainError):
    code = grpc.StatusCode.ALREADY_EXISTS
    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(DomainError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    default_reason = "FAILED_PRECONDITION"


class Aborted(DomainError):
    code = grpc.StatusCode.ABORTED
    default_reason = "ABORTED"


class PermissionDenied(DomainError):
    code = grpc.StatusCode.PERMISSION_DENIED
    default_reason = "PERMISSION_DENIED"


class Unauthenticated(DomainError):
    code = grpc.StatusCode.UNAUTHENTICATED
    default_reason = "UNAUTHENTICATED"


class ResourceExhausted(DomainError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_reason = "RESOURCE_EXHAUSTED"


class Unavailable(DomainError):
    code = grpc.StatusCode.UNAVAILABLE
    default_reason = "UNAVAILABLE"


class DeadlineExceeded(DomainError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    default_reason = "DEADLINE_EXCEEDED"


class Internal(DomainError):
    code = grpc.StatusCode.INTERNAL
    default_reason = "INTERNAL"


_BY_CODE: dict[grpc.StatusCode, type[DomainError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        PermissionDenied,
        Unauthenticated,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Internal,
    )
}

# Codes that mean "the peer is not there or too slow", not "the request was wrong".
UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


# A peer's CANCELLED: it stopped the call before answering. A server shutting down cancels
# the calls that reach it while it stops (RST_STREAM, seen as CANCELLED), and a caller never
# sees its own cancel as an error (the await raises asyncio.CancelledError instead).
PEER_STOPPED_MESSAGE = "the peer stopped before answering (it is shutting down); retry shortly"


def from_rpc_error(err: grpc.RpcError) -> DomainError:
    """Rebuild the DomainError a peer raised (reason and field violations included). A
    peer's CANCELLED is UNAVAILABLE: the peer went away, and the call may be made again."""
    code: grpc.StatusCode = err.code()
    if code is grpc.StatusCode.CANCELLED:
        return Unavailable(PEER_STOPPED_MESSAGE, metadata={"unreachable": "connection"})
    message: str = err.details() or code.name
    cls = _BY_CODE.get(code, Internal)
    reason = cls.default_reason
    violations: list[tuple[str, str]] = []
    metadata: dict[str, str] = {}
    status = None
    try:
        # An aio error has the Call methods from_call reads (code, details, trailing metadata).
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        status = None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason or reason
                metadata = dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations = [(v.field, v.description) for v in bad.field_violations]
    error = DomainError.__new__(cls)
    DomainError.__init__(error, message, reason=reason, violations=violations, metadata=metadata)
    return error


# ---- what an exception that is not a DomainError stands for ------------------------------

# OSErrors of the file system (a bug or a misconfiguration, not an outage).
_LOCAL_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    TimeoutError,
)
# SQLite's errors of a busy database: another writer holds it past the busy timeout.
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "database is busy")


def _lost_store(exc: BaseException) -> str | None:
    """What `exc` itself says cannot be reached: "database", "event_log", or "connection"
    (a network connection to a peer not named by the error)."""
    if isinstance(exc, OSError) and not isinstance(exc, _LOCAL_OS_ERRORS):
        # Refused, reset, unreachable, a name that does not resolve, or asyncio's
        # "Multiple exceptions: [Errno 111] Connect call failed ..." (a plain OSError, which
        # is what asyncpg raises when PostgreSQL is down): which peer is not known here.
        return "connection"
    if isinstance(exc, sqlite3.OperationalError) and str(exc) in _SQLITE_TRANSIENT:
        return "database"
    # Drivers are looked up only when loaded: an exception of a driver never imported
    # cannot be raised (and the embedded services never load asyncpg).
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None:
        pg = asyncpg.exceptions
        if isinstance(
            exc,
            (
                pg.PostgresConnectionError,  # class 08: connection exceptions
                pg.CannotConnectNowError,  # starting up, shutting down, in recovery
                pg.AdminShutdownError,
                pg.CrashShutdownError,
            ),
        ):
            return "database"
        if isinstance(exc, pg.InterfaceError) and "is closed" in str(exc):
            return "database"  # a statement on a connection the server dropped
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.DBAPIError):
        if exc.connection_invalidated:
            return "database"  # SQLAlchemy recognised a disconnect
    redis_exc = sys.modules.get("redis.exceptions")
    if redis_exc is not None and isinstance(
        exc,
        (
            redis_exc.ConnectionError,  # refused, reset, loading, no connection free
            redis_exc.TimeoutError,
            redis_exc.ReadOnlyError,  # a replica promoted mid-failover
            redis_exc.TryAgainError,
        ),
    ):
        return "event_log"
    return None


def unreachable_store(exc: BaseException) -> str | None:
    """What a failure says is unreachable ("database", "event_log", "connection"), or None
    when `exc` is not about reaching something. Looks through the exceptions it was raised from
    explicitly (`raise ... from`) and a SQLAlchemy error's DBAPI error (`.orig`), since
    drivers and SQLAlchemy wrap the connection's error."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        store = _lost_store(current)
        if store is not None:
            return store
        for inner in (getattr(current, "orig", None), current.__cause__):
            if isinstance(inner, BaseException):
                pending.append(inner)
    return None


_UNREACHABLE = {
    "database": "the database is unavailable; retry shortly",
    "event_log": "the run event log is unavailable; retry shortly",
    "connection": "a connection this service needs failed; retry shortly",
}


def as_domain_error(exc: BaseException, internal_message: str = "internal error") -> DomainError:
    """The one classification of an exception: a DomainError stays itself; a store that
    cannot be reached (a database or event log outage, a connection it dropped) is
    UNAVAILABLE, which a caller may retry shortly; anything else is INTERNAL (a bug), with
    `internal_message` (never the exception's text, which may name hosts or data)."""
    if isinstance(exc, DomainError):
        return exc
    store = unreachable_store(exc)
    if store is not None:
        return Unavailable(_UNREACHABLE[store], metadata={"unreachable": store})
    return Internal(internal_message)


assert code_pb2.OK == 0  # google.rpc.Code and grpc.StatusCode share their numbers
