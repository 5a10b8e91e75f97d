"""
Serving ``POST /v1/responses`` with an asynchronous backend (the upstream bridge).

Non-streamed: resolve → the backend's reply → save → return, so the response
is saved before its id reaches the client.  A backend failure before a
response exists is an OpenAI-shaped error and nothing is saved.

Streamed: the backend is started first (so a provider that is down or
refuses the request gives an HTTP error, not a broken stream); then the
response is saved ``in_progress``, ``response.created`` and
``response.in_progress`` are sent, the backend's item events are relayed as
they come, the final response is saved, and the terminal event ends the
stream.  A failure mid-stream ends it with an ``error`` event and removes
the ``in_progress`` record; so does a client that goes away.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.responses import JSONResponse, Response, StreamingResponse

from anchortrack.server._errors import SAVE_FAILED, APIError, server_error
from anchortrack.server._events import SSE_HEADERS, TERMINAL_EVENTS, encode_sse, in_progress_snapshot
from anchortrack.server._model import ModelReply
from anchortrack.server._state import AsyncModel, ServerState, Turn


logger = logging.getLogger("anchortrack.server")


async def respond_with_backend(state: ServerState, backend: AsyncModel, body: object, owner: str) -> Response:
    """Answer one create request of *owner* (an API key digest) through *backend*."""
    turn = state.resolve(body, owner=owner)
    if not turn.request.stream:
        reply = await backend.reply(turn)
        pending = state.finish(turn, reply)
        state.save_final(pending)
        return JSONResponse(pending.response)
    source = await backend.open_stream(turn)
    try:
        placeholder = state.finish(turn, ModelReply(status="in_progress"), record=False)
        state.save_in_progress(placeholder)
    except BaseException:
        await _close(source)
        raise
    return StreamingResponse(
        _relay(state, turn, placeholder.response, source),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _close(source: AsyncIterator[Any]) -> None:
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
    sequence = 0

    def sse(event: dict[str, Any]) -> bytes:
        nonlocal sequence
        data = encode_sse({**event, "sequence_number": sequence})
        sequence += 1
        return data

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
                raise server_error("The model backend ended without a reply.", 502)
        except APIError as error:
            finished = True
            _forget(state, turn)
            yield sse({"type": "error", "code": error.code, "message": error.message, "param": error.param})
            return
        pending = state.finish(turn, reply)
        finished = True
        if not state.save_final_or_log(pending):  # the status line is gone; report in-stream
            yield sse({"type": "error", "code": "server_error", "message": SAVE_FAILED, "param": None})
            return
        yield sse({"type": TERMINAL_EVENTS[pending.response["status"]], "response": pending.response})
    finally:
        if not finished:  # the client went away: there is no response to keep
            _forget(state, turn)
        await _close(source)
