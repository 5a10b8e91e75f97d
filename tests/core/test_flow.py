"""Tests for the call flow, stepped by hand from a `CallContext`: no tracker, no I/O, every effect seen."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchortrack import Mode, Reason
from anchortrack._flow import (
    UNAVAILABLE,
    CallContext,
    Evict,
    FellBack,
    Find,
    Get,
    Log,
    Planned,
    Send,
    call_flow,
)
from anchortrack._request import read_request

from ..helpers import SCOPE, DictStore, assistant, turn, user


class APIError(Exception):
    """Looks like an openai.APIStatusError to the classifier."""

    def __init__(self, status: int, code: str | None, param: str | None = None, message: str = "") -> None:
        super().__init__(message or f"{status} {code}")
        self.status_code = status
        self.code = code
        self.param = param
        self.message = str(self)


BOOKKEEPING = (Planned, FellBack, Log)


class Stepper:
    """Steps a flow by hand; bookkeeping effects are answered with None and kept in `notes`."""

    def __init__(self, context: CallContext, body: dict[str, Any]) -> None:
        self.flow = call_flow(context, read_request(body))
        self.notes: list[Any] = []

    def _skip(self, effect: Any) -> Any:
        while isinstance(effect, BOOKKEEPING):
            self.notes.append(effect)
            effect = self.flow.send(None)
        return effect

    def start(self) -> Any:
        return self._skip(next(self.flow))

    def send(self, value: Any) -> Any:
        return self._skip(self.flow.send(value))

    def throw(self, error: BaseException) -> Any:
        return self._skip(self.flow.throw(error))

    def plan(self) -> Any:
        [planned] = [n for n in self.notes if isinstance(n, Planned)]
        return planned.plan

    def events(self) -> list[str]:
        return [n.event for n in self.notes if isinstance(n, Log)]


def _context(store: DictStore, **changes: Any) -> CallContext:
    return CallContext(scope_key=SCOPE.key, root=SCOPE.root(store.secret_key), **changes)


def _setup() -> tuple[DictStore, list[Any]]:
    store = DictStore()
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    return store, [u1, a1, user("two")]


def _answer_find(step: Stepper, store: DictStore) -> Any:
    effect = step.start()
    assert isinstance(effect, Find)
    return step.send(store.find(effect.scope, effect.views))


def test_chained_send_then_stale_anchor_evicts_and_resends_in_full() -> None:
    """previous_response_not_found → Evict the anchor, report it, resend the caller's exact body once."""
    store, history = _setup()
    body = {"model": "m", "input": history, "instructions": "be brief"}
    step = Stepper(_context(store), body)

    send = _answer_find(step, store)
    assert isinstance(send, Send)
    assert [history[2]] == send.body["input"]
    assert send.body["instructions"] == "be brief"
    anchor_id = send.body["previous_response_id"]

    evict = step.throw(APIError(400, "previous_response_not_found", "previous_response_id"))
    assert Evict(SCOPE.key, anchor_id) == evict
    resend = step.send(None)
    assert body is resend.body

    with pytest.raises(StopIteration) as done:
        step.send("the response")
    assert done.value.value == "the response"
    [fell_back] = [n for n in step.notes if isinstance(n, FellBack)]
    assert (Reason.STALE_ANCHOR, anchor_id) == (fell_back.reason, fell_back.anchor.response_id)
    assert ["anchortrack.anchor_evicted"] == step.events()


def test_zdr_refusal_falls_back_and_resends() -> None:
    """unsupported_parameter on previous_response_id: the flow decides to stop chaining in that scope."""
    store, history = _setup()
    step = Stepper(_context(store), {"model": "m", "input": history})
    _answer_find(step, store)

    resend = step.throw(APIError(400, "unsupported_parameter", "previous_response_id"))

    assert "previous_response_id" not in resend.body
    assert [Reason.ZDR] == [n.reason for n in step.notes if isinstance(n, FellBack)]
    assert "anchortrack.scope_disabled" in step.events()


def test_a_duplicate_item_refusal_keeps_the_anchor_and_resends_in_full() -> None:
    """400 Duplicate item: the anchor is not evicted (the server has it); the caller's body goes once."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store), body)
    send = _answer_find(step, store)
    anchor_id = send.body["previous_response_id"]

    resend = step.throw(APIError(400, None, "input", message="Duplicate item found with id msg_1."))

    assert body is resend.body
    [fell_back] = [n for n in step.notes if isinstance(n, FellBack)]
    assert (Reason.DUPLICATE_ITEM, anchor_id) == (fell_back.reason, fell_back.anchor.response_id)
    assert ["anchortrack.anchor_refused"] == step.events()  # the call's own event is its outcome's


def test_a_disabled_scope_neither_looks_up_nor_chains() -> None:
    """With zdr_disabled in the context the flow sends the full body at once, reason zdr."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store, zdr_disabled=True), body)

    send = step.start()

    assert isinstance(send, Send)
    assert body is send.body
    assert Reason.ZDR == step.plan().reason


@pytest.mark.parametrize(
    "error",
    [
        APIError(401, "invalid_api_key"),
        APIError(413, None),
        APIError(429, "rate_limit_exceeded"),
        APIError(500, None),
        ValueError("boom"),
    ],
)
def test_other_errors_reach_the_caller_without_retry(error: Exception) -> None:
    """Neither recognised nor a resendable client error: re-raised unchanged, with no second send."""
    store, history = _setup()
    step = Stepper(_context(store), {"model": "m", "input": history})
    _answer_find(step, store)

    with pytest.raises(type(error)) as raised:
        step.throw(error)

    assert raised.value is error
    assert not any(isinstance(n, FellBack) for n in step.notes)


UNRECOGNISED = [
    APIError(400, "invalid_value", "model"),
    APIError(400, None, "input"),
    APIError(400, "400", None, "litellm.BadRequestError: the upstream said no"),
    APIError(404, "not_found"),
    APIError(409, None),
    APIError(422, None),
]


@pytest.mark.parametrize("error", UNRECOGNISED)
def test_an_unrecognised_client_error_is_resent_and_the_callers_error_is_the_full_requests(
    error: Exception,
) -> None:
    """A genuine 4xx: one full resend; its own error reaches the caller unchanged, the anchor is kept."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store), body)
    _answer_find(step, store)

    resend = step.throw(error)
    assert isinstance(resend, Send)
    assert body is resend.body

    again = APIError(error.status_code, "full", None, "the full request's own error")  # type: ignore[attr-defined]
    with pytest.raises(APIError) as raised:
        step.throw(again)
    assert raised.value is again
    assert not any(isinstance(n, (FellBack, Evict)) for n in step.notes)


@pytest.mark.parametrize("error", UNRECOGNISED)
def test_an_unrecognised_client_error_the_full_request_does_not_meet_evicts_the_anchor(
    error: Exception,
) -> None:
    """The full request succeeds: the chain was the trouble, the anchor goes; the caller gets the response."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store), body)
    anchor_id = _answer_find(step, store).body["previous_response_id"]

    step.throw(error)
    evict = step.send("the response")
    assert Evict(SCOPE.key, anchor_id) == evict
    with pytest.raises(StopIteration) as done:
        step.send(None)
    assert "the response" == done.value.value
    assert [Reason.CHAIN_REFUSED] == [n.reason for n in step.notes if isinstance(n, FellBack)]
    assert "anchortrack.anchor_evicted" == step.events()[-1]


def test_a_scope_whose_server_dropped_a_chain_goes_in_full() -> None:
    """With chain_dropped in the context the flow sends the full body at once, reason chain_dropped."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store, chain_dropped=True), body)

    send = step.start()

    assert body is send.body
    assert Reason.CHAIN_DROPPED == step.plan().reason


def test_stateless_request_errors_are_never_retried() -> None:
    """A stale-looking error on a request that did not chain is the caller's."""
    step = Stepper(_context(DictStore()), {"model": "m", "input": [user("hi")]})
    send = step.start()
    assert isinstance(send, Send)

    with pytest.raises(APIError):
        step.throw(APIError(400, "previous_response_not_found", "previous_response_id"))


def test_caller_managed_state_is_sent_exactly_as_given() -> None:
    """previous_response_id from the caller: look the parent up, send the body untouched."""
    store, _ = _setup()
    parent = next(iter(store.ids.values()))
    body = {"model": "m", "input": [user("two")], "previous_response_id": parent.response_id}
    step = Stepper(_context(store), body)

    get = step.start()
    assert Get(SCOPE.key, parent.response_id) == get
    send = step.send(parent)

    assert body is send.body
    assert send.ticket is not None
    assert parent.count + 1 == send.ticket.count
    assert parent.expires_at == send.ticket.expires_at
    assert Reason.CALLER_MANAGED == step.plan().reason


def test_conversation_is_sent_as_given_and_not_recorded() -> None:
    """conversation=… is passed through; no parent is looked up, nothing recorded."""
    store, history = _setup()
    body = {"model": "m", "input": history, "conversation": "conv_1"}
    step = Stepper(_context(store), body)

    send = step.start()

    assert body is send.body
    assert send.ticket is None
    assert "anchortrack.parent_unknown" in step.events()


def test_store_unavailable_goes_stateless() -> None:
    """When the store cannot answer, the request goes out in full with that reason."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store), body)
    step.start()

    send = step.send(UNAVAILABLE)

    assert body is send.body
    assert step.plan().reason == Reason.STORE_UNAVAILABLE


def test_shadow_mode_plans_but_sends_the_full_body() -> None:
    """Shadow mode finds the anchor, reports what it would save, and sends the caller's body."""
    store, history = _setup()
    body = {"model": "m", "input": history}
    step = Stepper(_context(store, mode=Mode.SHADOW), body)

    send = _answer_find(step, store)

    assert body is send.body
    plan = step.plan()
    assert plan.chained
    assert plan.bytes_stateless > plan.bytes_planned
    assert [] == step.events()  # the call's event is its outcome's, published by the tracker


def test_unsupported_item_degrades_to_stateless_with_a_warning() -> None:
    """An item of no known shape sends the body as given, reason internal_error, with a warning."""
    body = {"model": "m", "input": [user("hi"), 42]}
    step = Stepper(_context(DictStore()), body)

    send = step.start()

    assert body is send.body
    assert send.ticket is None
    assert step.plan().reason == Reason.INTERNAL_ERROR
    [warning] = [n for n in step.notes if isinstance(n, Log) and n.level == "warning"]
    assert "anchortrack.item_unsupported" == warning.event


def test_extra_body_input_is_caller_managed() -> None:
    """extra_body overriding input or previous_response_id is sent as given."""
    store, history = _setup()
    body = {"model": "m", "input": history, "extra_body": {"input": [user("x")]}}
    step = Stepper(_context(store), body)

    send = step.start()

    assert body is send.body


def test_store_false_is_planned_but_marked_unrecordable() -> None:
    """store=false may chain from a stored anchor, but its response is never recorded."""
    store, history = _setup()
    step = Stepper(_context(store), {"model": "m", "input": history, "store": False})

    send = _answer_find(step, store)

    assert "previous_response_id" in send.body
    assert send.ticket.skip_reason == Reason.STORE_FALSE


def test_a_chained_send_carries_its_chain_expiry() -> None:
    """The ticket of a chained send expires no later than the anchor it chains from."""
    store, history = _setup()
    anchor = next(iter(store.ids.values()))
    step = Stepper(_context(store), {"model": "m", "input": history})

    send = _answer_find(step, store)

    assert anchor.expires_at == send.ticket.expires_at
    assert 3 == send.ticket.count


def test_the_context_clock_decides_expiry() -> None:
    """An anchor is chosen or not by the context's `now`, not by the wall clock."""
    store, history = _setup()
    anchor = next(iter(store.ids.values()))
    later = Stepper(_context(store, now=anchor.expires_at + 1), {"model": "m", "input": history})

    send = _answer_find(later, store)

    assert "previous_response_id" not in send.body
    assert Reason.PREFIX_DIVERGED == later.plan().reason


# -- a store in this process: a history that extends the last one looks up its tail first ------------


def _plan_with(
    store: DictStore, memo: Any, history: list[Any], *, local_store: bool
) -> tuple[Any, list[int]]:
    """Plan *history* as a tracker would; return the plan and how many views each Find asked for."""
    context = _context(store, memo=memo, local_store=local_store)
    step = Stepper(context, {"model": "m", "input": history})
    effect, asked = step.start(), []
    while isinstance(effect, Find):
        asked.append(len(effect.views))
        effect = step.send(store.find(effect.scope, effect.views))
    assert isinstance(effect, Send)
    return step.plan(), asked


def test_a_loop_looks_up_the_views_after_its_last_history_only() -> None:
    """The next call of a loop asks the store for a handful of views, however long its history."""
    from anchortrack._hashing import Memo

    store, memo = DictStore(), Memo()
    history: list[Any] = [user("go")]
    for i in range(30):
        plan, asked = _plan_with(store, memo, history, local_store=True)
        if i >= 2:
            assert plan.chained
            assert asked == [2]  # the last response's view and the one after it, not 2 * i
        outputs = [assistant(f"turn {i}")]
        turn(store, history, outputs)
        history = [*history, *outputs, user(f"more {i}")]


def test_when_the_tail_holds_no_usable_anchor_every_view_is_looked_up() -> None:
    """The anchor after the last history was evicted: the second lookup finds the older one."""
    from anchortrack._hashing import Memo

    store, memo = DictStore(), Memo()
    first = [user("one")]
    turn(store, first, [assistant("ONE")])
    second = [*first, assistant("ONE"), user("two")]
    second_id = turn(store, second, [assistant("TWO")])
    _plan_with(store, memo, second, local_store=True)  # the memo's last history
    store.evict(SCOPE.key, second_id)
    third = [*second, assistant("TWO"), user("three")]

    plan, asked = _plan_with(store, memo, third, local_store=True)
    assert plan.chained
    assert plan.skip == 2
    assert asked == [2, 5]  # then h(5) down to h(1): every view, and the whole history's


@st.composite
def _stores_and_histories(draw: st.DrawFn) -> tuple[DictStore, list[Any], list[Any]]:
    """Anchors at random prefixes of a history (some with other properties, expired or evicted)."""
    length = draw(st.integers(2, 12))
    history: list[Any] = [user("u0")]
    for i in range(1, length):
        history.append(assistant(f"a{i}") if draw(st.booleans()) else user(f"u{i}"))
    store = DictStore()
    for end in sorted(draw(st.sets(st.integers(1, length - 1), max_size=5))):
        outputs = [history[end]] if end < len(history) else []
        resp_id = turn(store, history[:end], outputs)
        fate = draw(st.sampled_from(["kept", "evicted", "other properties"]))
        if fate == "evicted":
            store.evict(SCOPE.key, resp_id)
        elif fate == "other properties":
            anchor = store.ids[SCOPE.key, resp_id]
            store.put(SCOPE.key, attrs.evolve(anchor, properties=b"p" * 16))
    last = history[: draw(st.integers(0, length))]
    return store, last, history


@settings(max_examples=300, deadline=None)
@given(case=_stores_and_histories())
def test_the_two_step_lookup_plans_what_one_lookup_of_every_view_plans(
    case: tuple[DictStore, list[Any], list[Any]],
) -> None:
    """Whatever the store holds and wherever the last history ended, the plan is the same."""
    from anchortrack._hashing import Memo

    store, last, history = case
    plans, lookups = [], []
    for local_store in (True, False):
        memo = Memo()
        if last:
            _plan_with(store, memo, last, local_store=local_store)
        plan, asked = _plan_with(store, memo, history, local_store=local_store)
        plans.append(plan)
        lookups.append(len(asked))
    assert plans[0] == plans[1]
    if 1 < len(last) < len(history) and plans[0].chained and plans[0].skip >= len(last):
        assert lookups[0] == 1  # the anchor was among the views after the last history
