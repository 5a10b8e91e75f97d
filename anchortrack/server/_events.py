"""Server-Sent Events for a response (pure)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any


Item = dict[str, Any]
Event = dict[str, Any]

#: Response status → the event that ends its stream.
TERMINAL_EVENTS = {status: f"response.{status}" for status in ("completed", "incomplete", "failed")}
_WORDS = re.compile(r"\S+\s*|\s+")
_ARGUMENT_CHUNK = 8


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def text_chunks(text: str) -> list[str]:
    """Split *text* into the deltas streamed for it (words with their spaces)."""
    return _WORDS.findall(text) or [""]


def in_progress_snapshot(response: dict[str, Any]) -> dict[str, Any]:
    """The response as ``response.created``/``in_progress`` show it."""
    unknown_yet = dict.fromkeys(("usage", "error", "incomplete_details", "completed_at"))
    return {**copy.deepcopy(response), "status": "in_progress", "output": [], **unknown_yet}


def _added_form(item: Item) -> Item:
    kind = item.get("type")
    if kind == "message":
        return {**item, "status": "in_progress", "content": []}
    if kind == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    if kind == "reasoning":
        return {key: value for key, value in item.items() if key != "encrypted_content"} | {"summary": []}
    return copy.deepcopy(item)


def _deltas(kind: str, where: Event, chunks: list[str], **extra: Any) -> list[Event]:
    return [{"type": f"response.{kind}.delta", **where, "delta": chunk, **extra} for chunk in chunks]


def item_events(item: Item, index: int) -> list[Event]:
    """The events announcing *item* at *index*: added, its content or arguments, done."""
    item_id, kind = item.get("id", ""), item.get("type")
    added = {"type": "response.output_item.added", "output_index": index, "item": _added_form(item)}
    events: list[Event] = [added]
    if kind == "message":
        for part_index, part in enumerate(item.get("content") or []):
            where = {"item_id": item_id, "output_index": index, "content_index": part_index}
            text = part.get("text", "") if part.get("type") == "output_text" else None
            empty = {**part, "text": ""} if text is not None else part
            events.append({"type": "response.content_part.added", **where, "part": empty})
            if text is not None:
                events += _deltas("output_text", where, text_chunks(text), logprobs=[])
                events.append({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            events.append({"type": "response.content_part.done", **where, "part": part})
    elif kind == "function_call":
        where = {"item_id": item_id, "output_index": index}
        arguments = str(item.get("arguments", ""))
        starts = range(0, len(arguments), _ARGUMENT_CHUNK)
        chunks = [arguments[start : start + _ARGUMENT_CHUNK] for start in starts] or [""]
        events += _deltas("function_call_arguments", where, chunks)
        done = {"type": "response.function_call_arguments.done", **where, "name": item.get("name")}
        events.append({**done, "arguments": arguments})
    elif kind == "reasoning":
        for summary_index, part in enumerate(item.get("summary") or []):
            where = {"item_id": item_id, "output_index": index, "summary_index": summary_index}
            text = str(part.get("text", ""))
            added = {"type": "response.reasoning_summary_part.added", **where, "part": {**part, "text": ""}}
            events.append(added)
            events += _deltas("reasoning_summary_text", where, text_chunks(text))
            events.append({"type": "response.reasoning_summary_text.done", **where, "text": text})
            events.append({"type": "response.reasoning_summary_part.done", **where, "part": part})
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def stream_events(response: dict[str, Any]) -> list[Event]:
    """The event sequence OpenAI streams for a finished *response*, numbered from 0: created, in progress,
    each output item's (`item_events`), the terminal one (ValueError for a status that has none)."""
    status = response.get("status")
    terminal = TERMINAL_EVENTS.get(str(status))
    if terminal is None:
        raise ValueError(f"cannot stream a response with status {status!r}")
    snapshot = in_progress_snapshot(response)
    events: list[Event] = [
        {"type": "response.created", "response": snapshot},
        {"type": "response.in_progress", "response": snapshot},
    ]
    for index, item in enumerate(response.get("output") or []):
        events.extend(item_events(item, index))
    events.append({"type": terminal, "response": response})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def encode_sse(event: Event) -> bytes:
    """One event as Server-Sent Events bytes."""
    data = json.dumps(event, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
