"""`Upstream`: a model backend that forwards to a Chat Completions provider.

Each request's resolved context goes to ``{base_url}/chat/completions`` as chat ``messages``
(`anchortrack.server._translate`) and the reply comes back as Responses output
(`anchortrack.server._reconstruct`), through one pool of keep-alive connections per server
(`anchortrack.server._http`), closed at shutdown.  A connection error, a 408, 409, 429 or 5xx is retried as
the openai SDK retries it (`_backoff`), always before any byte of the reply reached the caller.

Failures become OpenAI-shaped errors naming the upstream: unreachable → 502 ``upstream_unreachable``; no
answer within the timeout → 504 ``upstream_timeout``; an HTTP error status → the provider's status (a 5xx as
502) with its message, ``upstream_error``; a reply that is not a Chat Completion → 502
``upstream_bad_response``.  The API key only ever goes into the ``Authorization`` header to the provider: it
is replaced by ``[redacted]`` in everything read back from the provider, and never logged."""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import logging
import math
import os
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import openai

from anchortrack.server._errors import APIError, server_error
from anchortrack.server._http import Pool, Response, TransportError
from anchortrack.server._model import ModelReply
from anchortrack.server._reconstruct import MalformedReply, Origin, StreamAssembler, reconstruct, redact
from anchortrack.server._translate import ChatPlan, build_chat_request


if TYPE_CHECKING:
    from anchortrack.server._state import Turn


logger = logging.getLogger("anchortrack.server.upstream")

#: The environment variable the API key is read from.
API_KEY_ENV = "ANCHORTRACK_UPSTREAM_API_KEY"
#: Default seconds to wait for the provider (to connect, and between bytes).
DEFAULT_TIMEOUT = 120.0
_ERROR_TEXT_LIMIT = 500
#: Times a failed upstream call is tried again (the openai SDK's default).
RETRIES = 2
_RETRY_STATUSES = frozenset({408, 409, 429})
_INITIAL_RETRY_DELAY, _MAX_RETRY_DELAY, _MAX_RETRY_AFTER = 0.5, 8.0, 120.0
_SCHEMA_REFUSAL_WORDS = ("json_schema", "response_format", "schema")


def upstream_name(base_url: str) -> str:
    """*base_url* without credentials, query or fragment: how errors name the upstream."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class Upstream:
    """The upstream provider backend (an `~anchortrack.server._state.AsyncModel`).

    Args:
        base_url: The provider's Chat Completions base URL, e.g. ``http://localhost:11434/v1``
            (``/chat/completions`` is appended).
        model: Send this model name instead of the request's ``model``.
        api_key: Bearer token for the provider; default: the environment variable
            ``ANCHORTRACK_UPSTREAM_API_KEY`` (none if unset).
        timeout: Seconds to wait to connect and for each read.
        json_schema: ``"auto"`` sends ``json_schema`` formats and degrades to ``json_object`` (then validates
            the output is JSON) once the provider refuses one; ``"degrade"`` always degrades; ``"native"``
            never does.
        max_tokens_field: Where ``max_output_tokens`` goes: ``max_tokens`` (widely supported) or
            ``max_completion_tokens``.
        headers: Extra request headers for the provider.
        retries: Times a connection error or a 408, 409, 429 or 5xx answer is tried again.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        json_schema: Literal["auto", "degrade", "native"] = "auto",
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        headers: Mapping[str, str] | None = None,
        retries: int = RETRIES,
    ) -> None:
        parts, self.name = urlsplit(base_url), upstream_name(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream base URL must be http(s)://HOST[:PORT][/PATH], got {self.name!r}")
        if not timeout > 0:
            raise ValueError("upstream timeout must be positive")
        self.base_url = base_url.rstrip("/")
        self.model, self.timeout, self.retries = model, float(timeout), retries
        self.json_schema, self.max_tokens_field = json_schema, max_tokens_field
        self._degrade = json_schema == "degrade"
        self._ssl_context: ssl.SSLContext | None = None
        self._pool: tuple[asyncio.AbstractEventLoop, Pool] | None = None
        self._api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self._headers = {"accept": "application/json", **(headers or {})}
        if self._api_key:
            self._headers["authorization"] = f"Bearer {self._api_key}"
        Pool(self.base_url, self.timeout, None, self._headers)  # refuses headers it could not send

    def __repr__(self) -> str:
        return f"<Upstream {self.name} model={self.model!r}>"

    # -- pure helpers ---------------------------------------------------------------

    @property
    def _secret(self) -> str | None:
        # A key shorter than 4 characters would redact ordinary text.
        return self._api_key if self._api_key and len(self._api_key) >= 4 else None

    def redact(self, text: str) -> str:
        """*text* with the API key replaced by ``[redacted]``."""
        return str(redact(text, self._secret))

    def plan(self, turn: Turn) -> ChatPlan:
        """The Chat Completions request for *turn* (APIError 400 for tools the provider cannot take)."""
        return build_chat_request(
            turn.request,
            turn.context,
            model=self.model or turn.request.model,
            degrade_json_schema=self._degrade,
            max_tokens_field=self.max_tokens_field,
        )

    def _origin(self, plan: ChatPlan, turn: Turn) -> Origin:
        return Origin(self.name, str(plan.body["model"]), turn.response_id)

    def _status_error(self, status: int, raw: bytes) -> APIError:
        text = self.redact(raw.decode("utf-8", "replace"))
        message, kind, code, param = _provider_error(text)
        logger.warning("anchortrack.server.upstream_refused", extra={"upstream": self.name, "status": status})
        return APIError(
            status if 400 <= status < 500 else 502,
            f"The upstream provider {self.name} answered HTTP {status}: {message}",
            type=kind or ("invalid_request_error" if status < 500 else "server_error"),
            param=param,
            code=code or "upstream_error",
        )

    def _failed(self, event: str, what: str, status: int, code: str, **extra: str) -> APIError:
        """Log *event*; return the 5xx error saying that the provider *what*."""
        logger.warning(event, extra={"upstream": self.name, **extra})
        return server_error(f"The upstream provider {self.name} {what}", status, code)

    def _stream_error(self, data: str) -> APIError:
        message, _, code, _ = _provider_error(self.redact(data))
        what = f"reported an error mid-stream: {message}"
        return self._failed("anchortrack.server.upstream_stream_error", what, 502, code or "upstream_error")

    def _malformed(self, reason: str) -> APIError:
        what = f"sent a reply that is not a Chat Completion: {reason}."
        return self._failed("anchortrack.server.upstream_malformed", what, 502, "upstream_bad_response")

    def _transport_error(self, error: TransportError) -> APIError:
        if error.kind.endswith("Timeout"):
            what = f"did not answer within {self.timeout:g} seconds."
            return self._failed("anchortrack.server.upstream_timeout", what, 504, "upstream_timeout")
        name = error.kind
        event = "anchortrack.server.upstream_unreachable"
        return self._failed(event, f"could not be reached ({name}).", 502, "upstream_unreachable", error=name)

    def _refuses_json_schema(self, plan: ChatPlan, error: APIError) -> bool:
        return (
            self.json_schema == "auto"
            and plan.json_schema
            and error.status in (400, 422, 501)
            and any(word in error.message.lower() for word in _SCHEMA_REFUSAL_WORDS)
        )

    # -- I/O --------------------------------------------------------------------------

    def _client(self) -> Pool:
        """The connection pool of the running event loop (a connection belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool[0] is not loop or self._pool[1].closed:
            if self._ssl_context is None and self.base_url.startswith("https:"):
                # The openai client's trust store (its HTTP library's); one costs far more than a request.
                name = "httpx2" if int(openai.__version__.split(".")[0]) >= 3 else "httpx"
                self._ssl_context = importlib.import_module(name).create_ssl_context()
            self._pool = (loop, Pool(self.base_url, self.timeout, self._ssl_context, self._headers))
        return self._pool[1]

    async def aclose(self) -> None:
        """Close the pooled connections (the server's shutdown calls it; the next call opens new ones)."""
        pool, self._pool = self._pool, None
        if pool is not None and pool[0] is asyncio.get_running_loop():
            await pool[1].aclose()

    async def _post(self, plan: ChatPlan) -> Response:
        """POST *plan*, retrying a connection error or a retryable status; the open response (or APIError)."""
        client = self._client()
        body = json.dumps(plan.body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        for attempt in range(self.retries + 1):
            retry_after: float | None = None
            try:
                response = await client.post("/chat/completions", body)
            except TransportError as failure:
                if attempt == self.retries or failure.kind == "ReadTimeout":
                    raise self._transport_error(failure) from None
                reason = failure.kind
            else:
                retry_after = _retry_after(response.headers)
                if attempt == self.retries or not _retryable(response, retry_after):
                    return response
                await response.aclose()
                reason = f"HTTP {response.status_code}"
            wait = _backoff(attempt, retry_after)
            extra = {"upstream": self.name, "attempt": attempt + 1, "reason": reason, "wait": wait}
            logger.info("anchortrack.server.upstream_retry", extra=extra)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, plan: ChatPlan) -> tuple[ChatPlan, Response]:
        """POST *plan* (degrading ``json_schema`` once if refused); return the open response."""
        while True:
            response = await self._post(plan)
            if response.status_code < 400:
                return plan, response
            try:
                raw = await response.read()
            except TransportError as failure:
                raise self._transport_error(failure) from None
            refusal = self._status_error(response.status_code, raw)
            if not self._refuses_json_schema(plan, refusal):
                raise refusal
            logger.warning("anchortrack.server.upstream_json_schema_degraded", extra={"upstream": self.name})
            self._degrade = True
            plan = plan.degraded()

    async def reply(self, turn: Turn) -> ModelReply:
        """Answer *turn* with one non-streamed Chat Completions call."""
        plan, response = await self._send(self.plan(turn))
        try:
            raw = await response.read()
            completion = redact(json.loads(raw.decode("utf-8", "replace")), self._secret)
            return reconstruct(completion, plan, self._origin(plan, turn))
        except TransportError as error:
            raise self._transport_error(error) from None
        except MalformedReply as error:
            raise self._malformed(str(error)) from None
        except ValueError:
            raise self._malformed("the body is not JSON") from None

    async def open_stream(self, turn: Turn) -> AsyncIterator[dict[str, Any] | ModelReply]:
        """Start a streamed Chat Completions call; return its Responses events and final reply."""
        plan, response = await self._send(self.plan(turn))
        return self._events(response, plan, turn)

    async def _events(
        self, response: Response, plan: ChatPlan, turn: Turn
    ) -> AsyncIterator[dict[str, Any] | ModelReply]:
        assembler = StreamAssembler(plan, self._origin(plan, turn), secret=self._secret)
        done = False
        try:
            async for line in response.lines():
                if not line.startswith("data:"):
                    continue  # blank lines, comments, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise MalformedReply("a stream chunk is not JSON") from None
                if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
                    raise self._stream_error(data)
                for event in assembler.feed(chunk):
                    yield event
            if not done and assembler.completion()["choices"][0]["finish_reason"] is None:
                raise MalformedReply("the stream ended before the reply was complete")
            events, reply = assembler.finish()
        except TransportError as error:
            raise self._transport_error(error) from None
        except MalformedReply as error:
            raise self._malformed(str(error)) from None
        else:
            for event in events:
                yield event
            yield reply
        finally:
            await response.aclose()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the provider asks to wait (``retry-after-ms``, ``retry-after`` seconds or date), or None."""
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            seconds = float(headers.get(header, "")) / divisor
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else None
    date = email.utils.parsedate_tz(headers.get("retry-after", ""))
    return None if date is None else float(email.utils.mktime_tz(date) - time.time())


def _retryable(response: Response, retry_after: float | None) -> bool:
    """Whether the openai SDK would retry this answer."""
    if retry_after is not None and retry_after > _MAX_RETRY_AFTER:
        return False
    said = response.headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return response.status_code in _RETRY_STATUSES or response.status_code >= 500


def _backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds before retry *attempt* + 1: the provider's ``Retry-After``, else exponential with jitter."""
    if retry_after is not None and 0 < retry_after <= _MAX_RETRY_AFTER:
        return retry_after
    delay = min(_INITIAL_RETRY_DELAY * 2.0**attempt, _MAX_RETRY_DELAY)
    return delay * (1 - 0.25 * random.random())


def _provider_error(text: str) -> tuple[str, str | None, str | None, str | None]:
    """``(message, type, code, param)`` from a provider's error body (any common shape)."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    message: object = None
    kind = code = param = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, str):
            message = error
        elif isinstance(error, dict):
            message = error.get("message") or error.get("detail") or error.get("msg")
            kind = error.get("type") if isinstance(error.get("type"), str) else None
            code = error.get("code") if isinstance(error.get("code"), str) else None
            param = error.get("param") if isinstance(error.get("param"), str) else None
        if message is None and isinstance(body.get("detail"), (str, list)):
            message = body["detail"]
    if message is None:
        message = text.strip() or "(empty body)"
    rendered = message if isinstance(message, str) else json.dumps(message)
    if len(rendered) > _ERROR_TEXT_LIMIT:
        rendered = rendered[:_ERROR_TEXT_LIMIT] + "…"
    return rendered, kind, code, param
