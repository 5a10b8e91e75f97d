"""Response reconstruction (pure): a Chat Completions reply → Responses output; its chunks → Responses events,
then the final reply (`StreamAssembler`).

Output order: reasoning, tool calls (restored to their tool's requested type when the arguments fit), then
the assistant message (when there is text or no tool calls)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from anchortrack.server._events import Event, item_events
from anchortrack.server._items import CALL_OF_TOOL, ITEM_TYPES, Item
from anchortrack.server._model import ModelReply, function_call_item, joined_text, message_item, new_id
from anchortrack.server._model import usage as response_usage
from anchortrack.server._translate import ChatPlan


_T = TypeVar("_T")
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


class MalformedReply(ValueError):
    """The provider's reply is not a Chat Completion (or chunk)."""


def _expect(kind: type[_T], value: object, message: str) -> _T:
    """*value*, a *kind*; MalformedReply(*message*) for anything else."""
    if not isinstance(value, kind):
        raise MalformedReply(message)
    return value


@dataclass(frozen=True)
class Outcome:
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


def arguments_text(arguments: object) -> str:
    """A provider call's ``arguments`` as text (some servers send an object; anything else is ``""``)."""
    if isinstance(arguments, dict):
        return json.dumps(arguments, separators=(",", ":"))
    return arguments if isinstance(arguments, str) else ""


def restored_type(plan: ChatPlan, provider_name: str) -> str:
    """The item type a call to *provider_name* is restored to (if its arguments parse)."""
    return CALL_OF_TOOL.get(plan.tools.get(provider_name, "function"), "function_call")


def restore_tool_call(
    plan: ChatPlan, call_id: str, provider_name: str, arguments: str, *, item_id: str | None = None
) -> Item:
    """One provider tool call as the item of its requested type, or a ``function_call`` if the arguments do
    not fit it."""
    kind = restored_type(plan, provider_name)
    spec = ITEM_TYPES[kind]
    if spec.restore is not None:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        fields = spec.restore(parsed) if isinstance(parsed, dict) else None
        if fields is not None:
            item = {"id": item_id or new_id(spec.prefix), "type": kind, "call_id": call_id, **fields}
            return item | ({"name": provider_name} if "name" in spec.required else {})
    item_id = item_id if item_id and item_id.startswith("fc_") else new_id("fc")
    return function_call_item(item_id, call_id, provider_name, arguments)


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
    cached = number(usage.get("prompt_tokens_details"), "cached_tokens")
    reasoning = number(usage.get("completion_tokens_details"), "reasoning_tokens")
    return response_usage(input_tokens, output_tokens, total, cached=cached, reasoning=reasoning)


def content_text(content: object, where: str) -> str:
    """The text of a chat message's (or delta's) ``content``: a string or text parts."""
    if content is not None and not isinstance(content, (str, list)):
        raise MalformedReply(f"{where} is {type(content).__name__}, not text")
    return joined_text(content)


def reasoning_text(message: dict[str, Any]) -> str:
    """A chat message's (or delta's) ``reasoning_content`` (or ``reasoning``), or ``""``."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(value := message.get(key), str) and value:
            return value
    return ""


def reasoning_item(text: str, *, item_id: str) -> Item:
    """The reasoning item for a provider's ``reasoning_content``."""
    content = [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content}


@dataclass(frozen=True)
class Origin:
    """Who answered, for error messages."""

    provider: str
    model: str
    response_id: str


def reconstruct(
    completion: object, plan: ChatPlan, origin: Origin, *, ids: dict[str, str] | None = None
) -> ModelReply:
    """The reply for a decoded Chat Completion answering *plan* (MalformedReply if it is none); *ids* are
    those a stream already announced (``"reasoning"``, ``"message"``, ``"call:<index>"``)."""
    known = ids or {}
    completion = _expect(dict, completion, "the body is not a JSON object")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedReply("it has no choices")
    choice = choices[0]
    message = _expect(dict, choice.get("message"), "its first choice has no message")
    text = content_text(message.get("content"), "the message content")
    reasoning = reasoning_text(message)
    raw_calls = _expect(list, message.get("tool_calls") or [], "tool_calls is not a list")
    reason = choice.get("finish_reason")
    outcome = FINISH_REASONS.get(reason) if reason is None or isinstance(reason, str) else None
    unexpected = f"The upstream provider returned an unexpected finish reason: {reason!r}."
    outcome = outcome or Outcome("failed", error=unexpected)
    output: list[Item] = []
    if reasoning:
        output.append(reasoning_item(reasoning, item_id=known.get("reasoning") or new_id("rs")))
    for index, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedReply(f"tool call {index} has no function name")
        arguments = arguments_text(function.get("arguments"))
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else new_id("call")
        item_id = known.get(f"call:{index}")
        output.append(restore_tool_call(plan, call_id, function["name"], arguments, item_id=item_id))
    has_message = bool(text) or not raw_calls
    if has_message:
        status = "completed" if outcome.status == "completed" else "incomplete"
        output.append(message_item(text, item_id=known.get("message") or new_id("msg"), status=status))
    if plan.requires_valid_json and outcome.status == "completed" and has_message:
        try:
            json.loads(text)
        except ValueError:
            invalid = f"The upstream provider {origin.provider} (model {origin.model}) returned output that "
            invalid += f"is not valid JSON for response {origin.response_id}; the requested json_schema "
            invalid += "format was sent as json_object, so the output could not be held to the schema."
            outcome = Outcome("failed", error=invalid)
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

    def chat(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.call_id or new_id("call"), "type": "function", "function": function}


@dataclass
class _Live:
    """An item opened in the stream; its deltas' tail is held back while it could still grow into *secret*."""

    kind: str
    index: int
    item_id: str
    secret: str | None
    pending: str = ""

    def push(self, delta: str) -> str:
        if not self.secret:
            return delta
        text = (self.pending + delta).replace(self.secret, REDACTED)
        cut = max(0, len(text) - len(self.secret) + 1)  # the tail that could still begin the secret
        self.pending = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


@dataclass
class StreamAssembler:
    """Responses events from Chat Completions chunks, and the final reply: what `reconstruct` gives for the
    equivalent non-streamed completion (the events' shapes are `item_events`'s; only deltas are built here).

    Reasoning, call arguments and text stream as they arrive (the text only after the calls when tools were
    offered, so every ``output_index`` is final); calls restored to other types are announced whole at the
    end.  *secret* is redacted, in the deltas too."""

    plan: ChatPlan
    origin: Origin
    secret: str | None = None
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)
    _finish: object = None
    _usage: object = None
    _live: dict[str, _Live] = field(default_factory=dict)

    def _open(self, key: str, kind: str) -> tuple[_Live, list[Event]]:
        live = _Live(kind, len(self._live), new_id(ITEM_TYPES[kind].prefix), self.secret)
        self._live[key] = live
        item: Item
        if kind == "reasoning":
            item = {**reasoning_item("", item_id=live.item_id), "content": []}
        elif kind == "message":
            item = message_item("", item_id=live.item_id, status="in_progress")
        else:
            call = self._calls[int(key.partition(":")[2])]
            item = {"id": live.item_id, "type": "function_call", "call_id": call.call_id, "name": call.name}
        return live, item_events(item, live.index)[: 2 if kind == "message" else 1]

    def _item_delta(self, key: str, kind: str, delta: str) -> list[Event]:
        events: list[Event] = []
        live = self._live.get(key)
        if live is None:
            live, events = self._open(key, kind)
        return events + _delta_events(live, live.push(delta))

    def _call_delta(self, position: int, raw: object) -> list[Event]:
        raw = _expect(dict, raw, "a tool call delta is not an object")
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
        delta = arguments_text(function.get("arguments"))
        call.arguments += delta
        key = f"call:{index}"
        if not call.name or restored_type(self.plan, call.name) != "function_call":
            return []
        if key not in self._live:
            call.call_id = call.call_id or new_id("call")
            delta = call.arguments  # everything so far
        return self._item_delta(key, "function_call", delta)

    def feed(self, chunk: object) -> list[Event]:
        """Take one decoded chunk; return the events it produces (MalformedReply for no chunk)."""
        chunk = _expect(dict, chunk, "a chunk is not a JSON object")
        if "error" in chunk and not chunk.get("choices"):
            raise MalformedReply("the stream carried an error")
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = _expect(list, chunk.get("choices") or [], "a chunk's choices is not a list")
        events: list[Event] = []
        for choice in choices[:1]:
            choice = _expect(dict, choice, "a chunk's choice is not an object")
            delta = _expect(dict, choice.get("delta") or {}, "a chunk's delta is not an object")
            reasoning = reasoning_text(delta)
            if reasoning:
                self._reasoning.append(reasoning)
                events += self._item_delta("reasoning", "reasoning", reasoning)
            text = content_text(delta.get("content"), "a chunk's content")
            if text:
                self._text.append(text)
                if not self.plan.may_call_tools:
                    events += self._item_delta("message", "message", text)
            calls = _expect(list, delta.get("tool_calls") or [], "a chunk's tool_calls is not a list")
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
            message["tool_calls"] = [call.chat() for _, call in sorted(self._calls.items())]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {"object": "chat.completion", "choices": [choice], "usage": self._usage}

    def finish(self) -> tuple[list[Event], ModelReply]:
        """The closing events (in output order) and the final reply (MalformedReply for no completion)."""
        completion = redact(self.completion(), self.secret)
        ids = {key: live.item_id for key, live in self._live.items() if not key.startswith("call:")}
        for position, index in enumerate(sorted(self._calls)):  # reconstruct numbers calls by position
            live = self._live.get(f"call:{index}")
            if live is not None:
                ids[f"call:{position}"] = live.item_id
        reply = reconstruct(completion, self.plan, self.origin, ids=ids)
        by_id = {live.item_id: live for live in self._live.values()}
        next_index = len(self._live)
        closing: list[tuple[int, list[Event]]] = []
        for item in reply.output:
            live = by_id.get(str(item.get("id")))
            if live is None:
                closing.append((next_index, _added_and_done(item, next_index)))
                next_index += 1
            else:
                announced = _added_and_done(item, live.index)
                done = [event for event in announced if event["type"].endswith(".done")]
                closing.append((live.index, _delta_events(live, live.flush()) + done))
        closing.sort(key=lambda pair: pair[0])
        return [event for _, announced in closing for event in announced], reply


_DELTAS: dict[str, tuple[str, Event]] = {
    "message": ("response.output_text.delta", {"content_index": 0, "logprobs": []}),
    "reasoning": ("response.reasoning_text.delta", {"content_index": 0}),
    "function_call": ("response.function_call_arguments.delta", {}),
}


def _delta_events(live: _Live, delta: str) -> list[Event]:
    if not delta:
        return []
    kind, extra = _DELTAS[live.kind]
    return [{"type": kind, "item_id": live.item_id, "output_index": live.index, **extra, "delta": delta}]


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
