"""Errors as `application/problem+json` (RFC 9457): type, title, status, detail, and for
validation errors an `errors` list with the path of each bad field. Never a traceback."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.domain import DomainError, IllegalTransition, ValidationError
from gpupool.store.db import StoreError
from gpupool.store.errors import Conflict, NotFound

log = logging.getLogger(__name__)
MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://gpupool.dev/problems/"


class PermissionDenied(DomainError):
    """The caller's role does not allow this. The message says which role would."""


class NotAuthenticated(DomainError):
    """No valid credentials were given."""


class TooManyRequests(DomainError):
    """Refused for now (429): the caller may retry after `retry_after_s` seconds. The message
    says why and when."""

    def __init__(self, message: str, retry_after_s: float, retry_at: float | None = None):
        super().__init__(message)
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        self.retry_at = retry_at


def problem(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    phrase = HTTPStatus(status).phrase
    body: dict[str, Any] = {
        "type": TYPE_BASE + phrase.lower().replace(" ", "-").replace("'", ""),
        "title": title or phrase,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    if extra:
        body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc)


def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for e in exc.errors():
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            return problem(
                400,
                f"the request body is not valid JSON ({ctx.get('error', 'parse error')}); "
                "send a JSON object",
                title="Malformed JSON",
            )
        loc = list(e.get("loc", ()))
        msg = e.get("msg", "invalid")
        if e.get("type") == "extra_forbidden":
            msg = "unknown field; remove it (see /api/v1/openapi.json for the fields allowed)"
        errors.append({"field": _field_path(loc), "message": msg})
    detail = "; ".join(f"{x['field']}: {x['message']}" for x in errors[:5])
    return problem(422, f"invalid request: {detail}", title="Invalid request", errors=errors)


def _domain(_: Request, exc: Exception) -> JSONResponse:
    msg = str(exc)
    if isinstance(exc, NotAuthenticated):
        return problem(401, msg, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(exc, PermissionDenied):
        return problem(403, msg)
    if isinstance(exc, TooManyRequests):
        extra: dict[str, Any] = {"retry_after_s": exc.retry_after_s}
        if exc.retry_at is not None:
            extra["retry_at"] = exc.retry_at
        return problem(429, msg, headers={"Retry-After": str(exc.retry_after_s)}, extra=extra)
    if isinstance(exc, NotFound):
        return problem(404, msg)
    if isinstance(exc, Conflict | IllegalTransition):
        return problem(409, msg)
    if isinstance(exc, ValidationError):
        errors = [{"field": exc.field, "message": msg}] if exc.field else []
        return problem(422, msg, title="Invalid request", errors=errors)
    return problem(400, msg)


def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = "no such endpoint; see /api/v1/openapi.json for the API"
    elif exc.status_code == 405:
        detail = "this endpoint does not accept that method; see /api/v1/openapi.json"
    return problem(exc.status_code, detail, headers=getattr(exc, "headers", None))


def _store(_: Request, exc: Exception) -> JSONResponse:
    return problem(503, str(exc), title="Database busy", headers={"Retry-After": "5"})


def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=exc)
    return problem(500, "the server hit an unexpected error; it was logged for the admin")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(StoreError, _store)
    app.add_exception_handler(Exception, _unexpected)


class BodyLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` with 413 (checks the
    Content-Length header and counts streamed bodies)."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        sent_response = False

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal sent_response
            if msg["type"] == "http.response.start":
                sent_response = True
            await send(msg)

        try:
            await self.app(scope, counted, tracking_send)
        except _TooLarge:
            if not sent_response:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        resp = problem(
            413,
            f"the request body is larger than {self.max_bytes} bytes; send less",
            title="Request body too large",
        )
        await resp(scope, receive, send)


class RefuseNul:
    """ASGI middleware: a NUL byte (`%00`) in the path or the query string is a 422 before
    any route sees it (no program or database can take one; bodies are checked by
    `schemas.base.In`)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = None
            if "\x00" in scope.get("path", "") or b"%00" in (scope.get("raw_path") or b""):
                where = "path"
            elif b"%00" in (scope.get("query_string") or b""):
                where = "query"
            if where is not None:
                resp = problem(
                    422,
                    f"invalid request: the {where} contains a NUL byte (%00); remove it",
                    title="Invalid request",
                    errors=[{"field": where, "message": "contains a NUL byte (%00)"}],
                )
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised while reading an oversized streamed body; handled as a 413 problem."""

    def __init__(self) -> None:
        super().__init__(413, "the request body is too large; send less")


Handler = Callable[[Request, Exception], Awaitable[JSONResponse]]
