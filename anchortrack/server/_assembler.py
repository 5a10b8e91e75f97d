"""Streamed replies: Chat Completions chunks → Responses events, then the final reply (pure).

The final reply is what `reconstruct` gives for the equivalent non-streamed completion; the events' shapes
are `item_events`'s (only the deltas are built here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anchortrack.server import _reconstruct
from anchortrack.server._events import Event, item_events
from anchortrack.server._items import ITEM_TYPES, Item
from anchortrack.server._model import ModelReply, message_item, new_id
from anchortrack.server._reconstruct import MalformedReply, Origin
from anchortrack.server._translate import ChatPlan


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
        text = (self.pending + delta).replace(self.secret, _reconstruct.REDACTED)
        cut = max(0, len(text) - len(self.secret) + 1)  # the tail that could still begin the secret
        self.pending = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


@dataclass
class StreamAssembler:
    """Responses events from Chat Completions chunks, and the final reply.

    Reasoning, call arguments and text stream as they arrive (the text only after the calls when tools were
    offered, so every ``output_index`` is final); calls restored to other types are announced whole at the
    end.  *secret* is redacted, in the deltas too.
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

    def _open(self, key: str, kind: str) -> tuple[_Live, list[Event]]:
        live = _Live(kind, len(self._live), new_id(ITEM_TYPES[kind].prefix), self.secret)
        self._live[key] = live
        item: Item
        if kind == "reasoning":
            item = {**_reconstruct.reasoning_item("", item_id=live.item_id), "content": []}
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
        delta = _reconstruct.arguments_text(function.get("arguments"))
        call.arguments += delta
        key = f"call:{index}"
        if not call.name or _reconstruct.restored_type(self.plan, call.name) != "function_call":
            return []
        if key not in self._live:
            call.call_id = call.call_id or new_id("call")
            delta = call.arguments  # everything so far
        return self._item_delta(key, "function_call", delta)

    def feed(self, chunk: object) -> list[Event]:
        """Take one decoded chunk; return the events it produces (MalformedReply for no chunk)."""
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
            reasoning = _reconstruct.reasoning_text(delta)
            if reasoning:
                self._reasoning.append(reasoning)
                events += self._item_delta("reasoning", "reasoning", reasoning)
            text = _reconstruct.content_text(delta.get("content"), "a chunk's content")
            if text:
                self._text.append(text)
                if not self.plan.may_call_tools:
                    events += self._item_delta("message", "message", text)
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
            message["tool_calls"] = [call.chat() for _, call in sorted(self._calls.items())]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {"object": "chat.completion", "choices": [choice], "usage": self._usage}

    def finish(self) -> tuple[list[Event], ModelReply]:
        """The closing events (in output order) and the final reply (MalformedReply for no completion)."""
        completion = _reconstruct.redact(self.completion(), self.secret)
        ids = {key: live.item_id for key, live in self._live.items() if not key.startswith("call:")}
        for position, index in enumerate(sorted(self._calls)):  # reconstruct numbers calls by position
            live = self._live.get(f"call:{index}")
            if live is not None:
                ids[f"call:{position}"] = live.item_id
        reply = _reconstruct.reconstruct(completion, self.plan, self.origin, ids=ids)
        by_id = {live.item_id: live for live in self._live.values()}
        next_index = len(self._live)
        closing: list[tuple[int, list[Event]]] = []
        for item in reply.output:
            live = by_id.get(str(item.get("id")))
            if live is None:
                closing.append((next_index, _added_and_done(item, next_index)))
                next_index += 1
            else:
                done = [
                    event for event in _added_and_done(item, live.index) if event["type"].endswith(".done")
                ]
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
