"""The pure parts of the WebSocket endpoint: event validation, error frames, the connection cache."""

from __future__ import annotations

import pytest

from anchortrack.server import APIError
from anchortrack.server._errors import previous_response_not_found
from anchortrack.server._websocket import (
    ConnectionCache,
    CreateEvent,
    error_frame,
    event_stream_id,
    parse_client_event,
)


def test_a_create_event_loses_only_its_envelope() -> None:
    event = {
        "type": "response.create",
        "stream_id": "a.b-c_1",
        "generate": False,
        "model": "m",
        "store": False,
    }
    assert parse_client_event(event) == CreateEvent(
        stream_id="a.b-c_1", generate=False, body={"model": "m", "store": False}
    )
    assert parse_client_event({"type": "response.create", "model": "m"}) == CreateEvent(
        stream_id=None, generate=True, body={"model": "m"}
    )


@pytest.mark.parametrize(
    ("event", "param", "code"),
    [
        ([], "event", "invalid_type"),
        ({"model": "m"}, "type", "missing_required_parameter"),
        ({"type": 3}, "type", "invalid_type"),
        ({"type": "response.steer"}, "type", "invalid_value"),
        ({"type": "response.create", "stream_id": ""}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "stream_id": "x" * 257}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "stream_id": "a b"}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "stream_id": 7}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "generate": "no"}, "generate", "invalid_type"),
    ],
)
def test_malformed_events_are_refused(event: object, param: str, code: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_client_event(event)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_error_frames_echo_only_a_valid_lane() -> None:
    error = previous_response_not_found("resp_1")
    assert error_frame(error, event_stream_id({"stream_id": "bad id"})) == {
        "type": "error",
        "status": 400,
        "error": {
            "message": "Previous response with id 'resp_1' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        },
    }
    assert error_frame(error, event_stream_id({"stream_id": "lane"}), 7)["stream_id"] == "lane"
    assert error_frame(error, None, 7)["sequence_number"] == 7


def test_the_cache_keeps_the_latest_response_of_each_lane_flattened() -> None:
    cache = ConnectionCache()
    context = [{"role": "user", "content": "a"}]
    output = [{"type": "message", "role": "assistant", "content": "b"}]
    cache.remember(None, "resp_1", "completed", context, output)
    cache.remember("x", "resp_2", "incomplete", context, output)
    link = cache.lookup("resp_1")
    assert link is not None
    assert (link.previous_response_id, link.input_items, link.output) == (None, context, output)
    cache.remember(None, "resp_3", "completed", context, output)
    assert cache.lookup("resp_1") is None
    assert cache.snapshot() == {None: "resp_3", "x": "resp_2"}


def test_eviction_touches_only_the_referencing_lanes_own_latest() -> None:
    cache = ConnectionCache()
    cache.remember("source", "resp_1", "completed", [], [])
    assert not cache.evict_referenced("fork", "resp_1")
    assert cache.lookup("resp_1") is not None
    assert cache.evict_referenced("source", "resp_1")
    assert cache.lookup("resp_1") is None
    cache.remember("a", "resp_2", "completed", [], [])
    assert cache.forget("resp_2")
    assert not cache.forget("resp_2")
    cache.remember("a", "resp_3", "completed", [], [])
    cache.clear()
    assert cache.snapshot() == {}
