"""The Server-Sent Events rendering, validated against the openai SDK's own models."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from anchortrack.server import ServerState
from anchortrack.server._events import encode_sse, stream_events, text_chunks


EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def respond(text: str) -> dict[str, Any]:
    state = ServerState()
    return state.prepare({"model": "scripted", "input": text, "store": False}).response


@pytest.mark.parametrize(
    ("text", "terminal"),
    [
        ("hello world", "response.completed"),
        ('go\n!call lookup {"q": "a long argument string"}\n!call other {}', "response.completed"),
        ("think\n!reason", "response.completed"),
        ("long\n!incomplete\n!reason", "response.incomplete"),
        ("x\n!fail", "response.failed"),
    ],
)
def test_every_event_validates_and_numbers_run_from_zero(text: str, terminal: str) -> None:
    """Each event is a valid SDK stream event; sequence numbers are 0, 1, 2, …; one terminal event."""
    response = respond(text)

    events = stream_events(response)

    for event in events:
        EVENTS.validate_python(event)
    assert list(range(len(events))) == [event["sequence_number"] for event in events]
    assert [event["type"] for event in events[:2]] == ["response.created", "response.in_progress"]
    assert terminal == events[-1]["type"]
    assert response == events[-1]["response"]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []


def test_message_events_spell_out_the_text() -> None:
    """Text deltas concatenate to the message text, bracketed by part and item events."""
    response = respond("hello there world")
    events = stream_events(response)
    kinds = [event["type"] for event in events]

    deltas = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")

    assert response["output"][0]["content"][0]["text"] == deltas
    assert kinds.index("response.output_item.added") < kinds.index("response.content_part.added")
    assert kinds.index("response.output_text.done") < kinds.index("response.content_part.done")
    assert kinds.index("response.content_part.done") < kinds.index("response.output_item.done")
    added = events[kinds.index("response.output_item.added")]["item"]
    assert (added["status"], added["content"]) == ("in_progress", [])


def test_function_call_arguments_stream_in_pieces() -> None:
    """Argument deltas concatenate to the arguments; done carries them whole."""
    response = respond('go\n!call lookup {"query": "something fairly long"}')
    events = stream_events(response)

    deltas = [event["delta"] for event in events if event["type"] == "response.function_call_arguments.delta"]
    (done,) = [event for event in events if event["type"] == "response.function_call_arguments.done"]

    assert len(deltas) > 1
    assert '{"query": "something fairly long"}' == "".join(deltas) == done["arguments"]
    added = next(event["item"] for event in events if event["type"] == "response.output_item.added")
    assert added["arguments"] == ""


def test_response_objects_validate_strictly() -> None:
    """Every status of the response object passes the SDK model's validation."""
    statuses = [
        Response.model_validate(respond(text)).status
        for text in ("hi", "x\n!fail", "x\n!incomplete", "x\n!reason\n!call f {}")
    ]

    assert ["completed", "failed", "incomplete", "completed"] == statuses


def test_sse_framing() -> None:
    """An event is framed as `event:` and `data:` lines and a blank line."""
    event = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}

    frame = encode_sse(event).decode()

    assert frame.startswith("event: response.created\ndata: ")
    assert frame.endswith("\n\n")
    assert event == json.loads(frame.split("data: ", 1)[1])


def test_text_chunks_keep_every_character() -> None:
    """Chunking never loses whitespace; empty text still has one (empty) delta."""
    assert "".join(text_chunks("  a  b\nc ")) == "  a  b\nc "
    assert text_chunks("") == [""]


def test_unfinished_responses_cannot_be_streamed() -> None:
    """A response still in progress has no terminal event to render."""
    with pytest.raises(ValueError, match="in_progress"):
        stream_events({"status": "in_progress", "output": []})
