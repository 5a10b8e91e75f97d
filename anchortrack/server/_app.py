"""The HTTP shell: Starlette routes over `ServerState`.

``POST``, ``GET``, ``DELETE /v1/responses[/{id}]``, ``GET …/input_items``, ``POST …/cancel`` (always refused:
there are no background responses), the WebSocket mode, and with ``test_hooks=True`` the ``/_test`` hooks.  A
stored response belongs to the API key that created it: another key gets OpenAI's answer for an unknown one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from anchortrack.server import _errors
from anchortrack.server._errors import APIError
from anchortrack.server._events import (
    SSE_HEADERS,
    TERMINAL_EVENTS,
    encode_sse,
    in_progress_snapshot,
    stream_events,
)
from anchortrack.server._model import ModelReply
from anchortrack.server._records import SQLiteResponseStore, api_key, owner_digest, request_owner
from anchortrack.server._request import decode_json
from anchortrack.server._state import AsyncModel, PendingResponse, ServerState, Turn


logger = logging.getLogger("anchortrack.server")

Endpoint = Callable[[Request], Awaitable[Response]]


#: What a request cut off by the server's shutdown gets (HTTP 503, or an ``error`` event once streaming).
SHUTTING_DOWN = "The server is shutting down and cancelled this request; send it again."
_SEQUENCE = re.compile(rb'"sequence_number":(\d+)')


class _Gate:
    """Refuses unknown API keys under ``/v1`` (when keys are required); adds ``x-request-id``; answers a
    request cancelled by the server's shutdown (``--shutdown-timeout`` passed) in OpenAI's shape: 503
    ``server_error`` before the status line, an ``error`` event after it; one log line, no traceback."""

    def __init__(self, app: ASGIApp, owners: frozenset[str] | None) -> None:
        self.app, self.owners = app, owners

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gated = scope["type"] in ("http", "websocket") and scope["path"].startswith("/v1")
        if self.owners is not None and gated:
            key = api_key(Headers(scope=scope))
            if key is None or owner_digest(key) not in self.owners:
                error = _errors.missing_api_key() if key is None else _errors.invalid_api_key(key)
                await _refuse(scope, send, error)
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req_{secrets.token_hex(16)}".encode()
        started, last_sequence = False, -1

        async def tracking_send(message: Message) -> None:
            nonlocal started, last_sequence
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id)]
            elif message["type"] == "http.response.body" and (
                found := _SEQUENCE.findall(message.get("body", b""))
            ):
                last_sequence = int(found[-1])
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            logger.warning("anchortrack.server.request_cancelled_at_shutdown", extra={"streaming": started})
            error = _errors.server_error(SHUTTING_DOWN, 503, "server_shutting_down")
            if not started:
                await _refuse(scope, send, error)
                return
            event = {**_errors.error_event(error.code, error.message), "sequence_number": last_sequence + 1}
            await send({"type": "http.response.body", "body": encode_sse(event), "more_body": False})


async def _refuse(scope: Scope, send: Send, error: APIError) -> None:
    """Answer *error* before the app sees the request (a WebSocket handshake gets it as HTTP)."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    kind = scope["type"]
    if kind == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        kind = "websocket.http"
    await send({"type": f"{kind}.response.start", "status": error.status, "headers": headers})
    await send({"type": f"{kind}.response.body", "body": body})


def _sse_response(content: bytes | AsyncIterator[bytes]) -> Response:
    """A Server-Sent Events answer: whole, or streamed."""
    if isinstance(content, bytes):
        return Response(content, media_type="text/event-stream", headers=SSE_HEADERS)
    return StreamingResponse(content, media_type="text/event-stream", headers=SSE_HEADERS)


async def _error(request: Request, exc: Exception) -> Response:
    """Any failure in OpenAI's shape; a client gone (or cut off by a read timeout) before its body arrived
    gets a bare 400: nobody reads it."""
    if isinstance(exc, ClientDisconnect):
        return Response(status_code=400)
    if isinstance(exc, APIError):
        error = exc
    elif isinstance(exc, HTTPException):
        url = f"Invalid URL ({request.method} {request.url.path})"
        error = APIError(exc.status_code, url if exc.status_code in (404, 405) else str(exc.detail))
    else:
        logger.error("anchortrack.server.request_failed", exc_info=exc)
        error = _errors.server_error(f"The server had an error: {type(exc).__name__}.")
    return JSONResponse(error.body(), status_code=error.status)


def _target(request: Request) -> tuple[str, str]:
    return request.path_params["response_id"], request_owner(request.headers)


def _query_int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise _errors.invalid_type(name, "an integer", value) from None


def create_app(
    state: ServerState | None = None, *, test_hooks: bool = False, api_keys: Iterable[str] | None = None
) -> Starlette:
    """Build the ASGI app serving the Responses API over *state*.

    Args:
        state: The server state (a fresh memory-backed one by default); available afterwards as
            ``app.state.responses``.
        api_keys: Serve only requests with one of these bearer keys (401 otherwise); ``None`` serves any key,
            or none.  Either way a response is visible only to the key that created it.
        test_hooks: Also serve the ``/_test`` hooks for out-of-process tests (the server guide lists them).

    The WebSocket connections are ``app.state.websockets`` (a ``WebSocketHub``).
    """
    from anchortrack.server._websocket import WebSocketHub

    server_state = state if state is not None else ServerState()
    websockets = WebSocketHub(server_state)

    async def create_response(request: Request) -> Response:
        body = decode_json(await request.body())
        server_state.record_request(body)
        if server_state.ignore_previous_response_id and isinstance(body, dict):
            body.pop("previous_response_id", None)
        owner = request_owner(request.headers)
        if server_state.backend is not None:  # an upstream provider answers instead
            return await _backend_response(server_state, server_state.backend, body, owner)
        try:
            pending = server_state.prepare(body, owner=owner)
        except APIError as error:
            stale = server_state.stale_in_stream and error.code == "previous_response_not_found"
            if stale and isinstance(body, dict) and body.get("stream") is True:  # llama-stack's refusal
                message = f"Response '{body.get('previous_response_id')}' not found."
                message += " Use 'client.responses.list()' to list available Responses."
                event = {"error": {"message": message, "code": "404"}}  # one event, no "event:" line
                return _sse_response(f"data: {json.dumps(event)}\n\n".encode())
            raise
        if pending.request.stream:
            server_state.save_in_progress(pending)
            return _sse_response(_event_stream(server_state, pending))
        if pending.delay > 0:
            await asyncio.sleep(pending.delay)
        await _save(server_state, pending)
        return JSONResponse(pending.response)

    async def retrieve_response(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        response = server_state.get_response(*_target(request))
        if request.query_params.get("stream", "").lower() != "true":
            return JSONResponse(response)
        starting_after = _query_int(request, "starting_after", -1)
        try:
            events = stream_events(response)
        except ValueError:
            message = f"Response '{response_id}' is still in progress and cannot be replayed yet."
            raise APIError(400, message) from None
        chunks = [encode_sse(event) for event in events if event["sequence_number"] > starting_after]
        return _sse_response(b"".join(chunks))

    async def delete_response(request: Request) -> Response:
        return JSONResponse(server_state.delete_response(*_target(request)))

    async def cancel_response(request: Request) -> Response:
        server_state.get_response(*_target(request))
        raise APIError(400, "Only responses created with background=true can be cancelled.")

    async def list_input_items(request: Request) -> Response:
        after, order = request.query_params.get("after"), request.query_params.get("order", "desc")
        limit = _query_int(request, "limit", 20)
        page = server_state.input_items(*_target(request), after=after, limit=limit, order=order)
        return JSONResponse(page)

    routes: list[BaseRoute] = [
        Route("/v1/responses", create_response, methods=["POST"]),
        WebSocketRoute("/v1/responses", websockets.serve),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
        Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
    ]
    if test_hooks:
        routes.extend(_test_routes(server_state))
        routes.extend(websockets.test_routes())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await _close(server_state.backend)  # the upstream's pooled connections

    app = Starlette(
        lifespan=lifespan,
        routes=routes,
        exception_handlers=dict.fromkeys([APIError, HTTPException, ClientDisconnect, Exception], _error),
    )
    app.state.responses = server_state
    app.state.websockets = websockets
    owners = None if api_keys is None else frozenset(owner_digest(key) for key in api_keys if key)
    app.add_middleware(_Gate, owners=owners)
    return app


async def _backend_response(state: ServerState, backend: AsyncModel, body: object, owner: str) -> Response:
    """Answer *owner*'s create request through an asynchronous *backend*.  A stream starts the backend first,
    so a provider that is down or refuses gives an HTTP error, not a broken stream; a failure mid-stream, or a
    client that goes away, ends it with an ``error`` event and removes the ``in_progress`` record."""
    turn = state.resolve(body, owner=owner)
    if not turn.request.stream:
        pending = state.finish(turn, await backend.reply(turn))
        await _save(state, pending)
        return JSONResponse(pending.response)
    source = await backend.open_stream(turn)
    try:
        placeholder = state.finish(turn, ModelReply(status="in_progress"), record=False)
        state.save_in_progress(placeholder)
    except BaseException:
        await _close(source)
        raise
    return _sse_response(_relay(state, turn, placeholder.response, source))


async def _save(state: ServerState, pending: PendingResponse) -> None:
    """Save a finished response before answering; on SQLite in a worker thread (a write can wait)."""
    if isinstance(state.store, SQLiteResponseStore):
        await asyncio.to_thread(state.save_final, pending)
    else:
        state.save_final(pending)


async def _close(source: object) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


def _forget(state: ServerState, turn: Turn) -> None:
    if turn.request.store:
        try:
            state.store.delete(turn.response_id)
        except Exception as exc:
            logger.error("anchortrack.server.delete_failed", exc_info=exc)


async def _relay(
    state: ServerState,
    turn: Turn,
    placeholder: dict[str, Any],
    source: AsyncIterator[dict[str, Any] | ModelReply],
) -> AsyncIterator[bytes]:
    numbers = itertools.count()

    def sse(event: dict[str, Any]) -> bytes:
        return encode_sse({**event, "sequence_number": next(numbers)})

    snapshot = in_progress_snapshot(placeholder)
    finished = False
    try:
        yield sse({"type": "response.created", "response": snapshot})
        yield sse({"type": "response.in_progress", "response": snapshot})
        reply: ModelReply | None = None
        try:
            async for piece in source:
                if isinstance(piece, ModelReply):
                    reply = piece
                    break
                yield sse(piece)
            if reply is None:
                raise _errors.server_error("The model backend ended without a reply.", 502)
        except APIError as error:
            finished = True
            _forget(state, turn)
            yield sse(_errors.error_event(error.code, error.message, error.param))
            return
        pending = state.finish(turn, reply)
        finished = True
        if not state.save_final_or_log(pending):  # the status line is gone; report in-stream
            yield sse(_errors.error_event("server_error", _errors.SAVE_FAILED))
            return
        yield sse({"type": TERMINAL_EVENTS[pending.response["status"]], "response": pending.response})
    finally:
        if not finished:  # the client went away: there is no response to keep
            _forget(state, turn)
        await _close(source)


async def _event_stream(state: ServerState, pending: PendingResponse) -> AsyncIterator[bytes]:
    """Stream *pending*'s events as Server-Sent Events (see `ServerState.live_events`)."""
    async with aclosing(state.live_events(pending, pending)) as events:
        async for event in events:
            yield encode_sse(event)


def _test_routes(state: ServerState) -> list[Route]:
    def by_id(act: Callable[[str], object], answer: Callable[[str, object], dict[str, Any]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:  # 404 when *act* raises KeyError
            response_id = request.path_params["response_id"]
            try:
                return JSONResponse(answer(response_id, act(response_id)))
            except KeyError:
                raise _errors.response_not_found(response_id) from None

        return endpoint

    def switch(name: str) -> Endpoint:
        async def endpoint(request: Request) -> Response:  # GET, or POST {"enabled": bool}
            if request.method == "POST":
                body = decode_json(await request.body())
                enabled = body.get("enabled") if isinstance(body, dict) else None
                if not isinstance(enabled, bool):
                    raise _errors.invalid_type("enabled", "a boolean", enabled)
                setattr(state, name, enabled)
            return JSONResponse({"enabled": getattr(state, name)})

        return endpoint

    expire = by_id(state.expire, lambda response_id, _: {"id": response_id, "expired": True})
    drop = by_id(state.drop, lambda response_id, _: {"id": response_id, "dropped": True})
    context = by_id(state.resolved_context, lambda _, items: {"object": "list", "data": items})

    async def requests(request: Request) -> Response:
        if request.method == "DELETE":
            state.reset_requests()
        return JSONResponse({"object": "list", "data": state.requests})

    return [
        Route("/_test/responses/{response_id}/expire", expire, methods=["POST"]),
        Route("/_test/responses/{response_id}", drop, methods=["DELETE"]),
        Route("/_test/responses/{response_id}/context", context, methods=["GET"]),
        *(
            Route(f"/_test/{name}", switch(name), methods=["GET", "POST"])
            for name in ("zdr", "stale_in_stream", "ignore_previous_response_id")
        ),
        Route("/_test/requests", requests, methods=["GET", "DELETE"]),
    ]
