"""The bookkeeping of one tracked WebSocket connection: lanes, local anchors, planned frames (pure)."""

from __future__ import annotations

import json
from typing import Any

import attrs

from anchortrack._flow import Ticket
from anchortrack._plan import Reason
from anchortrack._refusal import classify
from anchortrack._socket import FrameError, Pending, SocketBook, SocketPlan, Verdict
from anchortrack.stores._base import Anchor


TICKET = Ticket(scope="s", base=b"\0" * 32, count=1)


def _anchor(rid: str, view: bytes = b"v" * 32) -> Anchor:
    return Anchor(view=view, response_id=rid, count=2, created_at=0.0, expires_at=1e12)


def _plan(lane: str | None = None, previous: str | None = None, chained: Anchor | None = None) -> SocketPlan:
    body: dict[str, Any] = {"type": "response.create", "input": []}
    if lane is not None:
        body["stream_id"] = lane
    if previous is not None:
        body["previous_response_id"] = previous
    return SocketPlan(body, ticket=TICKET, anchor=chained)


def _frame(kind: str, lane: str | None = None, **response: Any) -> bytes:
    event: dict[str, Any] = {"type": kind, "response": response}
    if lane is not None:
        event["stream_id"] = lane
    return json.dumps(event).encode()


def _error(code: str, lane: str | None = None, param: str | None = "previous_response_id") -> bytes:
    event: dict[str, Any] = {
        "type": "error",
        "status": 400,
        "error": {"type": "invalid_request_error", "code": code, "message": "m", "param": param},
    }
    if lane is not None:
        event["stream_id"] = lane
    return json.dumps(event).encode()


def _sent(book: SocketBook, plan: SocketPlan) -> Pending:
    pending = book.pending(plan)
    book.commit(pending)
    return pending


def test_a_completed_response_is_recorded_and_becomes_its_lanes_local_anchor() -> None:
    book = SocketBook()
    pending = _sent(book, _plan())
    assert book.on_frame(_frame("response.created", id="r1")) is None
    assert book.on_frame(b'{"type":"response.output_text.delta","delta":"hi"}') is None
    verdict = book.on_frame(_frame("response.completed", id="r1", status="completed", output=[{"a": 1}]))
    assert verdict is not None
    assert verdict.response is not None
    assert verdict.ended == (pending,)
    assert verdict.output == [{"a": 1}]
    assert verdict.response.id == "r1"
    assert verdict.response.store is None
    anchor = _anchor("r1")
    book.settle(pending, anchor)
    assert book.usable(None) is anchor
    assert book.usable("other") is None  # never on another lane
    assert book.local("r1") is anchor  # the server resolves forks by id
    assert book.holds(anchor)


def test_output_items_are_taken_from_item_done_events_when_the_response_has_none() -> None:
    book = SocketBook()
    _sent(book, _plan(lane="a"))
    book.on_frame(_frame("response.created", lane="a", id="r1"))
    item = {"type": "response.output_item.done", "output_index": 0, "item": {"x": 1}, "stream_id": "a"}
    book.on_frame(json.dumps(item).encode())
    verdict = book.on_frame(_frame("response.completed", lane="a", id="r1", status="completed"))
    assert verdict is not None
    assert verdict.response is not None
    assert verdict.output == [{"x": 1}]


def test_a_lane_with_a_create_in_flight_offers_no_local_anchor() -> None:
    book = SocketBook()
    first = _sent(book, _plan())
    book.on_frame(_frame("response.created", id="r1"))
    book.on_frame(_frame("response.completed", id="r1", status="completed"))
    anchor = _anchor("r1")
    book.settle(first, anchor)
    _sent(book, _plan())
    assert book.usable(None) is None


def test_a_newer_response_of_the_lane_replaces_its_local_anchor() -> None:
    book = SocketBook()
    first = _sent(book, _plan())
    book.on_frame(_frame("response.created", id="r1"))
    book.on_frame(_frame("response.completed", id="r1", status="completed"))
    book.settle(first, _anchor("r1"))
    # A stored (or caller-managed, unrecorded) response on the lane: r1 is no longer the latest.
    second = _sent(book, SocketPlan({"type": "response.create"}))
    book.on_frame(_frame("response.created", id="r2"))
    assert book.on_frame(_frame("response.completed", id="r2", status="completed")) == Verdict((second,))
    assert book.local("r1") is None


def test_a_failed_response_evicts_the_local_anchor_it_referenced() -> None:
    book = SocketBook()
    first = _sent(book, _plan())
    book.on_frame(_frame("response.created", id="r1"))
    book.on_frame(_frame("response.completed", id="r1", status="completed"))
    book.settle(first, _anchor("r1"))
    _sent(book, _plan(previous="r1"))
    book.on_frame(_frame("response.created", id="r2", previous_response_id="r1"))
    verdict = book.on_frame(_frame("response.failed", id="r2", status="failed", previous_response_id="r1"))
    assert verdict is not None
    assert verdict.response is not None
    assert book.local("r1") is None


def test_a_stale_anchor_error_for_a_chained_create_is_refused_once() -> None:
    book = SocketBook()
    anchor = _anchor("r1")
    pending = _sent(book, _plan(lane="a", previous="r1", chained=anchor))
    verdict = book.on_frame(_error("previous_response_not_found", lane="a"))
    assert verdict is not None
    assert verdict.refusal is not None
    assert verdict.ended == (pending,)
    assert classify(verdict.refusal, "r1") is Reason.STALE_ANCHOR
    # The resend goes out in full: a second refusal reaches the caller.
    resent = _sent(book, attrs.evolve(pending.plan, anchor=None))
    assert book.on_frame(_error("previous_response_not_found", lane="a")) == Verdict((resent,))


def test_an_error_with_creates_queued_behind_passes_and_mirrors_the_eviction() -> None:
    book = SocketBook()
    first = _sent(book, _plan())
    book.on_frame(_frame("response.created", id="r1"))
    book.on_frame(_frame("response.completed", id="r1", status="completed"))
    book.settle(first, _anchor("r1"))
    chained = _sent(book, _plan(previous="r1", chained=_anchor("r1")))
    _sent(book, _plan())
    assert book.on_frame(_error("previous_response_not_found")) == Verdict((chained,))
    assert book.local("r1") is None


def test_connection_scoped_errors_and_other_lanes_frames_touch_nothing() -> None:
    book = SocketBook()
    pending = _sent(book, _plan())
    assert book.on_frame(_error("websocket_connection_limit_reached", param=None)) is None
    assert book.on_frame(_error("previous_response_not_found", lane="elsewhere")) is None
    book.on_frame(_frame("response.created", id="r1"))
    verdict = book.on_frame(_frame("response.completed", id="r1", status="completed"))
    assert verdict is not None
    assert verdict.response is not None
    assert verdict.ended == (pending,)


def test_a_response_naming_another_parent_is_not_paired_with_the_create() -> None:
    book = SocketBook()
    pending = _sent(book, _plan(previous="r1"))
    assert book.on_frame(_frame("response.created", id="rX", previous_response_id="r0")) == Verdict(
        (pending,)
    )
    assert book.on_frame(_frame("response.completed", id="rX", status="completed")) is None


def test_reset_drops_local_anchors_and_creates_in_flight() -> None:
    book = SocketBook()
    first = _sent(book, _plan())
    book.on_frame(_frame("response.created", id="r1"))
    book.on_frame(_frame("response.completed", id="r1", status="completed"))
    book.settle(first, _anchor("r1"))
    stale = book.pending(attrs.evolve(_plan(previous="r1", chained=_anchor("r1")), local=True))
    in_flight = _sent(book, _plan())
    assert book.attach() == ([], 0)  # the first socket
    assert book.reset() == ([in_flight], 1)
    assert book.attach() == ([], 0)  # already reset for this socket
    assert book.stale(stale)
    assert book.local("r1") is None
    # A completion of the old socket's create is nobody's now.
    assert book.on_frame(_frame("response.completed", id="r2", status="completed")) is None
    assert book.attach() == ([], 0)
    again = _sent(book, _plan())
    assert book.attach() == ([again], 0)  # a new socket without a reset in between


def test_frame_errors_read_like_api_errors() -> None:
    error = FrameError(json.loads(_error("previous_response_not_found")))
    assert (error.status_code, error.code, error.param) == (
        400,
        "previous_response_not_found",
        "previous_response_id",
    )
    assert classify(FrameError({"type": "error", "status": 400, "error": {"param": "model"}}), "r") is None
