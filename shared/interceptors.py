"""Server interceptor of every service: request id, access log, DomainError -> status.

One place turns exceptions into gRPC statuses: a DomainError becomes its status with
google.rpc details; anything else becomes INTERNAL with a generic message (the trace is
logged, never sent).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from shared import identity
from shared.errors import DomainError, Internal
from shared.logs import request_id_var

log = logging.getLogger("agentmesh.rpc")

_QUIET_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


async def _fail(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, DomainError):
        await context.abort_with_status(exc.to_grpc_status())
    log.exception("unhandled error in %s", method)
    rid = request_id_var.get()
    await context.abort_with_status(
        Internal(f"internal error (request id {rid})").to_grpc_status()
    )


class ServerInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        quiet = method.startswith(_QUIET_PREFIXES)

        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                token = request_id_var.set(identity.request_id(context))
                start = time.perf_counter()
                code = "OK"
                try:
                    return await inner_uu(request, context)
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    code = "ABORTED_OR_CANCELLED"
                    raise
                except Exception as exc:
                    code = exc.code.name if isinstance(exc, DomainError) else "INTERNAL"
                    await _fail(context, exc, method)
                finally:
                    if not quiet:
                        _access(method, code, start)
                    request_id_var.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                token = request_id_var.set(identity.request_id(context))
                start = time.perf_counter()
                code = "OK"
                try:
                    async for item in inner_us(request, context):
                        yield item
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    code = "ABORTED_OR_CANCELLED"
                    raise
                except Exception as exc:
                    code = exc.code.name if isinstance(exc, DomainError) else "INTERNAL"
                    await _fail(context, exc, method)
                finally:
                    if not quiet:
                        _access(method, code, start)
                    request_id_var.reset(token)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _access(method: str, code: str, start: float) -> None:
    if log.isEnabledFor(logging.DEBUG) or code not in ("OK",):
        log.log(
            logging.INFO if code != "INTERNAL" else logging.ERROR,
            "rpc",
            extra={"fields": {"method": method, "code": code, "ms": round((time.perf_counter() - start) * 1000, 2)}},
        )
