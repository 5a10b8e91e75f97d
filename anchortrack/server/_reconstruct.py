"""
Response reconstruction: a Chat Completions reply → Responses output (pure).

Finish reasons map to the response's status (`FINISH_REASONS`)::

    stop, tool_calls                          → completed
    length, model_context_window_exceeded     → incomplete (max_output_tokens)
    content_filter, sensitive                 → incomplete (content_filter)
    network_error                             → failed (server_error)
    missing                                   → failed ("provider returned no finish reason")
    anything else                             → failed ("unexpected finish reason")

Tool calls are restored to their requested type through the
`~anchortrack.server._translate.ToolIdentityMap` (``function_call``,
``custom_tool_call`` with its ``input``, ``shell_call``, ``local_shell_call``,
``apply_patch_call``), falling back to a plain ``function_call`` when the
arguments do not parse.  ``reasoning_content`` (or ``reasoning``) becomes a
reasoning item.  Output order: reasoning, tool calls, then the assistant
message (when there is text or no tool calls).

`StreamAssembler` turns streamed chunks into Responses events as they
arrive and, at the end, into the same reply `reconstruct` gives for the
equivalent non-streamed completion.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anchortrack.server._events import item_events
from anchortrack.server._items import CALL_OF_TOOL, ITEM_TYPES
from anchortrack.server._model import ModelReply, new_id
from anchortrack.server._translate import ChatPlan


Item = dict[str, Any]
Event = dict[str, Any]
IdFactory = Callable[[str], str]


#: What a secret is replaced with.
REDACTED = "[redacted]"


def redact(value: Any, secret: str | None) -> Any:
    """*value* (JSON data) with every occurrence of *secret* in its strings replaced."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, REDACTED)
    if isinstance(value, dict):
        return {key: redact(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secret) for item in value]
    return value


@dataclass
class _Lag:
    """Holds back the tail of a delta stream that could still grow into *secret*."""

    secret: str | None
    pending: str = ""

    def push(self, delta: str) -> str:
        if not self.secret:
            return delta
        text = (self.pending + delta).replace(self.secret, REDACTED)
        keep = len(self.secret) - 1
        self.pending = text[-keep:]
        return text[: max(0, len(text) - keep)]

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


class MalformedReply(ValueError):
    """The provider's reply is not a Chat Completion (or chunk)."""


@dataclass(frozen=True)
class Outcome:
    """The status a finish reason maps to."""

    status: str
    incomplete_reason: str | None = None
    error: str | None = None


#: Provider finish reason → outcome (``None``: no finish reason).
FINISH_REASONS: dict[str | None, Outcome] = {
    "stop": Outcome("completed"),
    "tool_calls": Outcome("completed"),
    "length": Outcome("incomplete", "max_output_tokens"),
    "model_context_window_exceeded": Outcome("incomplete", "max_output_tokens"),
    "content_filter": Outcome("incomplete", "content_filter"),
    "sensitive": Outcome("incomplete", "content_filter"),
    "network_error": Outcome("failed", error="The upstream provider reported a network error."),
    None: Outcome("failed", error="The upstream provider returned no finish reason."),
}


def map_finish_reason(reason: object) -> Outcome:
    """The outcome for a provider's ``finish_reason``."""
    if reason is None or isinstance(reason, str):
        known = FINISH_REASONS.get(reason)
        if known is not None:
            return known
    return Outcome("failed", error=f"The upstream provider returned an unexpected finish reason: {reason!r}.")


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _restored(kind: str, arguments: Any, call_id: str, item_id: str) -> Item | None:
    if not isinstance(arguments, dict):
        return None
    if kind == "custom":
        if not isinstance(arguments.get("input"), str):
            return None
        return {"id": item_id, "type": "custom_tool_call", "call_id": call_id, "input": arguments["input"]}
    if kind == "shell":
        if not _strings(arguments.get("commands")):
            return None
        action = {
            "commands": arguments["commands"],
            "timeout_ms": _int_or_none(arguments.get("timeout_ms")),
            "max_output_length": _int_or_none(arguments.get("max_output_length")),
        }
        return {
            "id": item_id,
            "type": "shell_call",
            "call_id": call_id,
            "action": action,
            "status": "completed",
            "environment": None,
        }
    if kind == "local_shell":
        env = arguments.get("env", {})
        if not _strings(arguments.get("command")) or not isinstance(env, dict):
            return None
        if not all(isinstance(v, str) for v in env.values()):
            return None
        action = {
            "type": "exec",
            "command": arguments["command"],
            "env": env,
            "timeout_ms": _int_or_none(arguments.get("timeout_ms")),
            "working_directory": arguments.get("working_directory")
            if isinstance(arguments.get("working_directory"), str)
            else None,
            "user": arguments.get("user") if isinstance(arguments.get("user"), str) else None,
        }
        return {
            "id": item_id,
            "type": "local_shell_call",
            "call_id": call_id,
            "action": action,
            "status": "completed",
        }
    if kind == "apply_patch":
        operation = arguments.get("operation")
        if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
            return None
        if operation.get("type") not in ("create_file", "update_file", "delete_file"):
            return None
        return {
            "id": item_id,
            "type": "apply_patch_call",
            "call_id": call_id,
            "operation": operation,
            "status": "completed",
        }
    return None


def restored_type(plan: ChatPlan, provider_name: str) -> str:
    """The item type a call to *provider_name* is restored to (if its arguments parse)."""
    identity = plan.tools.for_provider(provider_name)
    kind = identity.requested_type if identity is not None else "function"
    return CALL_OF_TOOL.get(kind, "function_call")


def restore_tool_call(
    plan: ChatPlan, call_id: str, provider_name: str, arguments: str, *, item_id: str | None = None
) -> Item:
    """
    One provider tool call as the Responses item of its requested type.

    Falls back to a ``function_call`` named as requested when the arguments
    do not fit the requested type.
    """
    identity = plan.tools.for_provider(provider_name)
    kind = identity.requested_type if identity is not None else "function"
    name = identity.requested_name if identity is not None else provider_name
    if kind != "function":
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        item_type = restored_type(plan, provider_name)
        item = _restored(kind, parsed, call_id, item_id or new_id(ITEM_TYPES[item_type].prefix))
        if item is not None:
            if kind == "custom":
                item["name"] = name
            return item
    return {
        "id": item_id if item_id and item_id.startswith("fc_") else new_id("fc"),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def map_usage(usage: object) -> dict[str, Any] | None:
    """Chat Completions ``usage`` in the Responses shape (``None`` when absent)."""
    if not isinstance(usage, dict):
        return None

    def number(mapping: object, key: str) -> int:
        value = mapping.get(key) if isinstance(mapping, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    input_tokens = number(usage, "prompt_tokens")
    output_tokens = number(usage, "completion_tokens")
    total = number(usage, "total_tokens") or input_tokens + output_tokens
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": number(usage.get("prompt_tokens_details"), "cached_tokens"),
            "cache_write_tokens": 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": number(usage.get("completion_tokens_details"), "reasoning_tokens")
        },
        "total_tokens": total,
    }


def _content_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    raise MalformedReply(f"{where} is {type(content).__name__}, not text")


def _reasoning_text(message: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def message_item(text: str, *, item_id: str, status: str) -> Item:
    """The assistant message item for *text*."""
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def reasoning_item(text: str, *, item_id: str) -> Item:
    """The reasoning item for a provider's ``reasoning_content``."""
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


@dataclass(frozen=True)
class Origin:
    """Who answered, for error messages: the upstream's name and the model."""

    provider: str
    model: str
    response_id: str


def reconstruct(
    completion: object,
    plan: ChatPlan,
    origin: Origin,
    *,
    ids: dict[str, str] | None = None,
) -> ModelReply:
    """
    The reply for a non-streamed Chat Completion.

    Args:
        completion: The decoded JSON body.
        plan: The request it answers.
        origin: The provider, model and response id (for error messages).
        ids: Item ids already announced in a stream: ``"reasoning"``,
            ``"message"`` and ``"call:<index>"``; fresh ones otherwise.

    Raises:
        MalformedReply: The body is not a Chat Completion.
    """
    known = ids or {}
    if not isinstance(completion, dict):
        raise MalformedReply("the body is not a JSON object")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedReply("it has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply("its first choice has no message")
    text = _content_text(message.get("content"), "the message content")
    reasoning = _reasoning_text(message)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise MalformedReply("tool_calls is not a list")

    outcome = map_finish_reason(choice.get("finish_reason"))
    output: list[Item] = []
    if reasoning:
        output.append(reasoning_item(reasoning, item_id=known.get("reasoning") or new_id("rs")))
    for index, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedReply(f"tool call {index} has no function name")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object
            arguments = json.dumps(arguments, separators=(",", ":"))
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else new_id("call")
        output.append(
            restore_tool_call(
                plan,
                call_id,
                function["name"],
                arguments if isinstance(arguments, str) else "",
                item_id=known.get(f"call:{index}"),
            )
        )
    has_message = bool(text) or not raw_calls
    if has_message:
        status = "completed" if outcome.status == "completed" else "incomplete"
        output.append(message_item(text, item_id=known.get("message") or new_id("msg"), status=status))

    if plan.requires_valid_json and outcome.status == "completed" and has_message:
        try:
            json.loads(text)
        except ValueError:
            outcome = Outcome(
                "failed",
                error=(
                    f"The upstream provider {origin.provider} (model {origin.model}) returned output "
                    f"that is not valid JSON for response {origin.response_id}; the requested json_schema "
                    "format was sent as json_object, so the output could not be held to the schema."
                ),
            )
    return ModelReply(
        status=outcome.status,
        output=output,
        error={"code": "server_error", "message": outcome.error} if outcome.error else None,
        incomplete_details={"reason": outcome.incomplete_reason} if outcome.incomplete_reason else None,
        usage=map_usage(completion.get("usage")),
        model=origin.model,
    )


@dataclass
class _Call:
    call_id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Live:
    """An item opened in the stream."""

    key: str
    kind: str
    index: int
    item_id: str
    lag: _Lag


@dataclass
class StreamAssembler:
    """
    Responses events from Chat Completions chunks, and the final reply.

    Reasoning and function-call arguments stream as they arrive; the
    assistant text streams as it arrives unless the request offered tools
    (then it follows the calls once the reply is complete, so every
    ``output_index`` is the item's final position).  Calls restored to other
    types are announced whole at the end.  `finish` gives the closing
    events and the reply, equal to `reconstruct` of the completion the
    chunks add up to.  Every occurrence of *secret* is replaced by
    ``[redacted]``, in the deltas too (a delta's last few characters wait
    for the next one when they could be the start of the secret).
    """

    plan: ChatPlan
    origin: Origin
    secret: str | None = None
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)
    _finish: object = None
    _usage: object = None
    _live: dict[str, _Live] = field(default_factory=dict)

    def _open(self, key: str, kind: str, prefix: str) -> tuple[_Live, list[Event]]:
        live = _Live(key, kind, len(self._live), new_id(prefix), _Lag(self.secret))
        self._live[key] = live
        if kind == "reasoning":
            added: Item = {"id": live.item_id, "type": "reasoning", "summary": [], "content": []}
            return live, [{"type": "response.output_item.added", "output_index": live.index, "item": added}]
        if kind == "message":
            added = {
                "id": live.item_id,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            where = {"item_id": live.item_id, "output_index": live.index, "content_index": 0}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            return live, [
                {"type": "response.output_item.added", "output_index": live.index, "item": added},
                {"type": "response.content_part.added", **where, "part": part},
            ]
        call = self._calls[int(key.partition(":")[2])]
        identity = self.plan.tools.for_provider(call.name)
        added = {
            "id": live.item_id,
            "type": "function_call",
            "call_id": call.call_id,
            "name": identity.requested_name if identity is not None else call.name,
            "arguments": "",
            "status": "in_progress",
        }
        return live, [{"type": "response.output_item.added", "output_index": live.index, "item": added}]

    def _text_delta(self, delta: str) -> list[Event]:
        self._text.append(delta)
        if self.plan.may_call_tools:
            return []
        events: list[Event] = []
        live = self._live.get("message")
        if live is None:
            live, events = self._open("message", "message", "msg")
        events += _delta_events(live, live.lag.push(delta))
        return events

    def _reasoning_delta(self, delta: str) -> list[Event]:
        self._reasoning.append(delta)
        events: list[Event] = []
        live = self._live.get("reasoning")
        if live is None:
            live, events = self._open("reasoning", "reasoning", "rs")
        events += _delta_events(live, live.lag.push(delta))
        return events

    def _call_delta(self, position: int, raw: object) -> list[Event]:
        if not isinstance(raw, dict):
            raise MalformedReply("a tool call delta is not an object")
        index = raw.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # No index (some servers send whole calls): a new call unless it continues this one.
            index = position
            known = self._calls.get(index)
            head = raw.get("function")
            named = isinstance(head, dict) and bool(head.get("name"))
            if known is not None and (
                (raw.get("id") and known.call_id and raw.get("id") != known.call_id) or (named and known.name)
            ):
                index = max(self._calls) + 1
        call = self._calls.setdefault(index, _Call())
        if isinstance(raw.get("id"), str) and raw["id"] and not call.call_id:
            call.call_id = raw["id"]
        function = raw.get("function")
        if function is not None and not isinstance(function, dict):
            raise MalformedReply("a tool call delta's function is not an object")
        function = function or {}
        if isinstance(function.get("name"), str) and function["name"] and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, separators=(",", ":"))
        delta = arguments if isinstance(arguments, str) else ""
        call.arguments += delta
        key = f"call:{index}"
        if not call.name or restored_type(self.plan, call.name) != "function_call":
            return []
        events: list[Event] = []
        live = self._live.get(key)
        if live is None:
            if not call.call_id:
                call.call_id = new_id("call")
            live, events = self._open(key, "function_call", "fc")
            delta = call.arguments  # everything so far
        events += _delta_events(live, live.lag.push(delta))
        return events

    def feed(self, chunk: object) -> list[Event]:
        """
        Take one decoded chunk; return the events it produces.

        Raises:
            MalformedReply: The chunk is not a Chat Completions chunk.
        """
        if not isinstance(chunk, dict):
            raise MalformedReply("a chunk is not a JSON object")
        if "error" in chunk and not chunk.get("choices"):
            raise MalformedReply("the stream carried an error")
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise MalformedReply("a chunk's choices is not a list")
        events: list[Event] = []
        for choice in choices[:1]:
            if not isinstance(choice, dict):
                raise MalformedReply("a chunk's choice is not an object")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise MalformedReply("a chunk's delta is not an object")
            reasoning = _reasoning_text(delta)
            if reasoning:
                events += self._reasoning_delta(reasoning)
            text = _content_text(delta.get("content"), "a chunk's content")
            if text:
                events += self._text_delta(text)
            calls = delta.get("tool_calls") or []
            if not isinstance(calls, list):
                raise MalformedReply("a chunk's tool_calls is not a list")
            for position, raw in enumerate(calls):
                events += self._call_delta(position, raw)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return events

    def completion(self) -> dict[str, Any]:
        """The non-streamed completion the chunks so far add up to."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id or new_id("call"),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for _, call in sorted(self._calls.items())
            ]
        return {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }

    def finish(self) -> tuple[list[Event], ModelReply]:
        """
        The closing events (in output order) and the final reply.

        Raises:
            MalformedReply: The chunks do not add up to a Chat Completion.
        """
        completion = redact(self.completion(), self.secret)
        positions = {f"call:{n}": key for n, key in enumerate(sorted(self._calls))}
        ids = {key: live.item_id for key, live in self._live.items() if not key.startswith("call:")}
        for position, index in positions.items():
            live = self._live.get(f"call:{index}")
            if live is not None:
                ids[position] = live.item_id
        reply = reconstruct(completion, self.plan, self.origin, ids=ids)
        by_id = {live.item_id: live for live in self._live.values()}
        events: list[Event] = []
        next_index = len(self._live)
        closing: list[tuple[int, list[Event]]] = []
        for item in reply.output:
            live = by_id.get(str(item.get("id")))
            if live is None:
                closing.append((next_index, _added_and_done(item, next_index)))
                next_index += 1
            else:
                closing.append((live.index, _delta_events(live, live.lag.flush()) + _closing(item, live)))
        for _, announced in sorted(closing, key=lambda pair: pair[0]):
            events.extend(announced)
        return events, reply


def _delta_events(live: _Live, delta: str) -> list[Event]:
    if not delta:
        return []
    where = {"item_id": live.item_id, "output_index": live.index}
    if live.kind == "message":
        return [
            {
                "type": "response.output_text.delta",
                **where,
                "content_index": 0,
                "delta": delta,
                "logprobs": [],
            }
        ]
    if live.kind == "reasoning":
        return [{"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": delta}]
    return [{"type": "response.function_call_arguments.delta", **where, "delta": delta}]


def _added_and_done(item: Item, index: int) -> list[Event]:
    events = item_events(item, index)
    if item.get("type") == "reasoning":
        text = "".join(part.get("text", "") for part in item.get("content") or [])
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        events[1:1] = [
            {"type": "response.reasoning_text.delta", **where, "delta": text},
            {"type": "response.reasoning_text.done", **where, "text": text},
        ]
    return events


def _closing(item: Item, live: _Live) -> list[Event]:
    where = {"item_id": live.item_id, "output_index": live.index}
    events: list[Event] = []
    if live.kind == "message":
        part = (item.get("content") or [{}])[0]
        text = str(part.get("text", ""))
        events.append(
            {"type": "response.output_text.done", **where, "content_index": 0, "text": text, "logprobs": []}
        )
        events.append({"type": "response.content_part.done", **where, "content_index": 0, "part": part})
    elif live.kind == "reasoning":
        text = "".join(part.get("text", "") for part in item.get("content") or [])
        events.append({"type": "response.reasoning_text.done", **where, "content_index": 0, "text": text})
    elif item.get("type") == "function_call":
        events.append(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": item.get("name"),
                "arguments": item.get("arguments", ""),
            }
        )
    events.append({"type": "response.output_item.done", "output_index": live.index, "item": item})
    return events
