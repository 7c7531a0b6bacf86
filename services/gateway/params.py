"""Query parameters shared by the list endpoints."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from services.gateway.auth import Caller, caller
from services.gateway.errors import invalid
from services.gateway.strict import check_params
from shared.ids import MAX_ID_CHARS, id_problem
from shared.pagination import MAX_PAGE_SIZE


def _identifier(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        # A custom error's message is the description as is (no "Value error, " prefix).
        raise PydanticCustomError("identifier", problem)
    return value


# Checks a parameter against the id rule (shared.ids): a 400 naming it otherwise.
IDENTIFIER = AfterValidator(_identifier)
# A path parameter holding an id.
IdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS), IDENTIFIER]

PageSize = Annotated[
    int,
    Query(ge=0, le=MAX_PAGE_SIZE, description=f"0 = the service default; at most {MAX_PAGE_SIZE}"),
]
PageToken = Annotated[
    str, Query(max_length=2048, description="nextPageToken of the previous page; empty = first")
]


def only_params(*names: str) -> Callable[[Request], Coroutine[Any, Any, None]]:
    """A dependency refusing query parameters the endpoint does not know (a typo in a filter
    must not silently widen a listing), and parameters that are not UTF-8 text without NUL
    (strict.check_params)."""
    allowed = frozenset(names)

    # Depends on the caller so that authentication is checked (401) before parameters (400).
    async def check(request: Request, _who: Caller = Depends(caller)) -> None:
        for key in request.query_params:
            if key not in allowed:
                raise invalid(key, f"unknown query parameter (known: {', '.join(sorted(allowed))})")
        check_params(request)

    return check
