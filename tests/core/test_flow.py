"""Tests for the call flow, stepped by hand: no I/O, every effect inspected."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from anchortrack import Mode, Reason, Tracker
from anchortrack._flow import Evict, Find, Get, Send, call_flow
from anchortrack._guard import UNAVAILABLE

from ..helpers import SCOPE, DictStore, assistant, turn, user


class APIError(Exception):
    """Looks like an openai.APIStatusError to the classifier."""

    def __init__(self, status: int, code: str | None, param: str | None = None) -> None:
        super().__init__(f"{status} {code}")
        self.status_code = status
        self.code = code
        self.param = param
        self.message = str(self)


def _setup(mode: Mode | None = None) -> tuple[Tracker, DictStore, list[Any]]:
    store = DictStore()
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    return Tracker(store, mode=mode), store, [u1, a1, user("two")]


def _start(tracker: Tracker, body: dict[str, Any]) -> Any:
    _, call = tracker.begin(body, SCOPE)
    assert call is not None
    flow = call_flow(call, call.request, UNAVAILABLE)
    return call, flow


def _answer_find(flow: Any, store: DictStore) -> Any:
    effect = next(flow)
    assert isinstance(effect, Find)
    return flow.send(store.find(effect.scope, effect.views))


def test_chained_send_then_stale_anchor_evicts_and_resends_in_full() -> None:
    """previous_response_not_found → Evict the anchor, resend the caller's exact body once."""
    tracker, store, history = _setup()
    body = {"model": "m", "input": history, "instructions": "be brief"}
    _, flow = _start(tracker, body)

    send = _answer_find(flow, store)
    assert isinstance(send, Send)
    assert [history[2]] == send.body["input"]
    assert send.body["instructions"] == "be brief"
    anchor_id = send.body["previous_response_id"]

    evict = flow.throw(APIError(400, "previous_response_not_found", "previous_response_id"))
    assert Evict(SCOPE.key, anchor_id) == evict
    resend = flow.send(None)
    assert body is resend.body

    with pytest.raises(StopIteration) as done:
        flow.send("the response")
    assert done.value.value == "the response"
    assert tracker.stats.snapshot()["fallbacks"] == {"stale_anchor": 1}


def test_zdr_refusal_disables_the_scope_and_resends() -> None:
    """unsupported_parameter on previous_response_id stops chaining in that scope."""
    tracker, store, history = _setup()
    _, flow = _start(tracker, {"model": "m", "input": history})
    _answer_find(flow, store)

    resend = flow.throw(APIError(400, "unsupported_parameter", "previous_response_id"))

    assert "previous_response_id" not in resend.body
    _, later = tracker.begin({"model": "m", "input": history}, SCOPE)
    assert later is not None
    assert later.zdr_disabled
    assert isinstance(next(call_flow(later, later.request, UNAVAILABLE)), Send)


@pytest.mark.parametrize(
    "error",
    [
        APIError(400, "invalid_value", "model"),
        APIError(429, "rate_limit_exceeded"),
        APIError(500, None),
        APIError(400, None, "input"),
        ValueError("boom"),
    ],
)
def test_other_errors_reach_the_caller_without_retry(error: Exception) -> None:
    """Any error but a stale anchor or ZDR is re-raised unchanged, with no second send."""
    tracker, store, history = _setup()
    _, flow = _start(tracker, {"model": "m", "input": history})
    _answer_find(flow, store)

    with pytest.raises(type(error)) as raised:
        flow.throw(error)

    assert raised.value is error


def test_stateless_request_errors_are_never_retried() -> None:
    """A stale-looking error on a request that did not chain is the caller's."""
    tracker = Tracker(DictStore())
    _, flow = _start(tracker, {"model": "m", "input": [user("hi")]})
    send = next(flow)
    assert isinstance(send, Send)

    with pytest.raises(APIError):
        flow.throw(APIError(400, "previous_response_not_found", "previous_response_id"))


def test_caller_managed_state_is_sent_exactly_as_given() -> None:
    """previous_response_id from the caller: look the parent up, send the body untouched."""
    tracker, store, _ = _setup()
    parent = next(iter(store.ids.values()))
    body = {"model": "m", "input": [user("two")], "previous_response_id": parent.response_id}
    _, flow = _start(tracker, body)

    get = next(flow)
    assert Get(SCOPE.key, parent.response_id) == get
    send = flow.send(parent)

    assert body is send.body
    assert send.ticket is not None
    assert parent.count + 1 == send.ticket.count


def test_conversation_is_sent_as_given_and_not_recorded() -> None:
    """conversation=… is passed through; no parent is looked up, nothing recorded."""
    tracker, _, history = _setup()
    body = {"model": "m", "input": history, "conversation": "conv_1"}
    _, flow = _start(tracker, body)

    send = next(flow)

    assert body is send.body
    assert send.ticket is None


def test_store_unavailable_goes_stateless() -> None:
    """When the store cannot answer, the request goes out in full with that reason."""
    tracker, _, history = _setup()
    body = {"model": "m", "input": history}
    call, flow = _start(tracker, body)
    next(flow)

    send = flow.send(UNAVAILABLE)

    assert body is send.body
    assert call.plan.reason == Reason.STORE_UNAVAILABLE


def test_shadow_mode_plans_but_sends_the_full_body() -> None:
    """Shadow mode finds the anchor, counts the saving, and sends the caller's body."""
    tracker, store, history = _setup(Mode.SHADOW)
    body = {"model": "m", "input": history}
    call, flow = _start(tracker, body)

    send = _answer_find(flow, store)

    assert body is send.body
    assert call.plan.chained
    assert tracker.stats.count("chained", mode="shadow") == 1
    snap = tracker.stats.snapshot()
    assert snap["bytes_sent"] == snap["bytes_stateless"] > snap["bytes_planned"]


def test_off_mode_is_not_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mode off yields no call context at all: nothing is read or hashed."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")
    tracker = Tracker(DictStore(), mode="chained")

    mode, call = tracker.begin({"model": "m", "input": [object()]}, SCOPE)

    assert mode == Mode.OFF
    assert call is None


def test_unsupported_item_degrades_to_stateless_with_a_warning() -> None:
    """An item of no known shape sends the body as given, reason internal_error."""
    tracker = Tracker(DictStore())
    body = {"model": "m", "input": [user("hi"), 42]}
    call, flow = _start(tracker, body)

    send = next(flow)

    assert body is send.body
    assert send.ticket is None
    assert call.plan.reason == Reason.INTERNAL_ERROR


def test_extra_body_input_is_caller_managed() -> None:
    """extra_body overriding input or previous_response_id is sent as given."""
    tracker, _, history = _setup()
    body = {"model": "m", "input": history, "extra_body": {"input": [user("x")]}}
    _, flow = _start(tracker, body)

    send = next(flow)

    assert body is send.body


def test_store_false_is_planned_but_marked_unrecordable() -> None:
    """store=false may chain from a stored anchor, but its response is never recorded."""
    tracker, store, history = _setup()
    _, flow = _start(tracker, {"model": "m", "input": history, "store": False})

    send = _answer_find(flow, store)

    assert "previous_response_id" in send.body
    assert send.ticket.skip_reason == Reason.STORE_FALSE


def test_a_chained_response_expires_with_its_chain() -> None:
    """A response chained from an anchor is recorded to expire no later than that anchor."""
    store = DictStore(ttl=1000.0)
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    first = next(iter(store.ids.values()))
    tracker = Tracker(store, clock=lambda: first.created_at + 500.0)
    history = [u1, a1, user("two")]
    _, flow = _start(tracker, {"model": "m", "input": history})
    send = _answer_find(flow, store)

    tracker.observe(
        send.ticket, SimpleNamespace(id="resp_child", status="completed", output=[assistant("TWO")])
    )

    child = store.ids[SCOPE.key, "resp_child"]
    assert first.expires_at == child.expires_at
    assert child.created_at + 1000.0 > child.expires_at
