"""
Tests for the carried-over properties digest (`anchortrack._properties`) and for chaining only
from anchors made with the same properties (``properties_changed``).
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from openai import NOT_GIVEN
from openai.types.responses import FunctionTool

from anchortrack import Reason, record_response
from anchortrack._flow import CallContext, Find, Get, Log, Planned, Send, call_flow
from anchortrack._plan import REASON_TEXT, choose
from anchortrack._properties import CARRIED_PROPERTIES, properties_digest
from anchortrack._request import read_request

from ..helpers import SCOPE, DictStore, assistant, response, user


WEATHER = {
    "type": "function",
    "name": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK = {"type": "function", "name": "clock", "parameters": {"type": "object", "properties": {}}}


class Answer(pydantic.BaseModel):
    city: str


class OtherAnswer(pydantic.BaseModel):
    city: int


def test_no_carried_properties_digest_to_nothing() -> None:
    """Absent, None and the SDK's NOT_GIVEN are all absent; per-request properties never count."""
    assert b"" == properties_digest({})
    assert b"" == properties_digest({"tools": None, "tool_choice": NOT_GIVEN, "text": None})
    assert b"" == properties_digest(
        {
            "model": "gpt-5",
            "instructions": "be brief",
            "prompt": {"id": "pmpt_1"},
            "temperature": 0.2,
            "metadata": {"a": "b"},
            "store": True,
            "include": ["reasoning.encrypted_content"],
            "max_output_tokens": 100,
        }
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tools", [WEATHER]),
        ("tool_choice", "required"),
        ("parallel_tool_calls", False),
        ("max_tool_calls", 3),
        ("text", {"format": {"type": "json_object"}}),
        ("reasoning", {"effort": "low"}),
        ("truncation", "auto"),
        ("context_management", [{"type": "compaction", "compact_threshold": 1000}]),
    ],
)
def test_each_carried_property_counts(name: str, value: Any) -> None:
    """Every property a server could carry over changes the digest, and so does its value."""
    assert name in CARRIED_PROPERTIES
    digest = properties_digest({name: value})

    assert 16 == len(digest)
    assert digest != properties_digest({})
    assert digest == properties_digest({name: value, "instructions": "anything else"})


def test_values_compare_as_the_json_sent() -> None:
    """Key order is free, list order and every value are not; absent differs from an explicit default."""
    reordered = {"parameters": WEATHER["parameters"], "name": "weather", "type": "function"}

    assert properties_digest({"tools": [WEATHER]}) == properties_digest({"tools": [reordered]})
    assert properties_digest({"tools": [WEATHER, CLOCK]}) != properties_digest({"tools": [CLOCK, WEATHER]})
    assert properties_digest({"tools": [WEATHER]}) != properties_digest({"tools": [{**WEATHER, "name": "w"}]})
    assert properties_digest({"tool_choice": "auto"}) != properties_digest({})
    assert properties_digest({"tools": []}) != properties_digest({})
    assert properties_digest({"tools": (WEATHER,)}) == properties_digest({"tools": [WEATHER]})
    assert properties_digest({"tools": [WEATHER]}) != properties_digest({"tool_choice": [WEATHER]})


def test_sdk_models_compare_as_the_sdk_sends_them() -> None:
    """A tool given as an SDK model digests like the dict the SDK would send for it."""
    model = FunctionTool(type="function", name="weather", parameters=WEATHER["parameters"], strict=True)
    sent = {**WEATHER, "strict": True}

    assert properties_digest({"tools": [model]}) == properties_digest({"tools": [sent]})


def test_parse_text_format_counts_by_its_schema() -> None:
    """parse()'s text_format becomes text.format: the same model digests alike, another one not."""
    assert properties_digest({"text_format": Answer}) == properties_digest({"text_format": Answer})
    assert properties_digest({"text_format": Answer}) != properties_digest({"text_format": OtherAnswer})
    assert properties_digest({"text_format": Answer}) != properties_digest({})


def test_a_value_without_json_form_is_refused() -> None:
    """An unreadable property raises TypeError, which the tracker turns into a passthrough."""
    with pytest.raises(TypeError):
        properties_digest({"tools": [object()]})
    with pytest.raises(TypeError):
        properties_digest({"tools": {"a", "b"}})


def test_read_request_digests_the_effective_properties() -> None:
    """extra_body wins, as on the wire; an iterable of tools is read once and sent as that list."""
    plain = read_request({"model": "m", "input": "hi", "tools": [WEATHER]})
    overridden = read_request(
        {"model": "m", "input": "hi", "tools": [WEATHER], "extra_body": {"tools": [CLOCK]}}
    )
    generated = read_request({"model": "m", "input": "hi", "tools": (t for t in [WEATHER])})

    assert properties_digest({"tools": [WEATHER]}) == plain.properties
    assert properties_digest({"tools": [CLOCK]}) == overridden.properties
    assert plain.properties == generated.properties
    assert [WEATHER] == generated.body["tools"]
    assert b"" == read_request({"model": "m", "input": "hi"}).properties


# -- choosing -------------------------------------------------------------------------------------


def _history_and_store(properties: dict[str, Any]) -> tuple[DictStore, list[Any]]:
    """Two recorded turns made with *properties*, and the history of the third call."""
    store = DictStore()
    u1, a1, u2, a2 = user("one"), assistant("ONE"), user("two"), assistant("TWO")
    for history, out in (([u1], [a1]), ([u1, a1, u2], [a2])):
        record_response(history, response(out), scope=SCOPE, store=store, params=properties)
    return store, [u1, a1, u2, a2, user("three")]


def _plan(store: DictStore, history: list[Any], **params: Any) -> tuple[Send, Any, list[Any]]:
    context = CallContext(scope_key=SCOPE.key, root=SCOPE.root(None))
    flow = call_flow(context, read_request({"model": "m", "input": history, **params}))
    notes: list[Any] = []
    effect = next(flow)
    while not isinstance(effect, Send):
        if isinstance(effect, Find):
            answer: Any = store.find(effect.scope, effect.views)
        elif isinstance(effect, Get):
            answer = store.get(effect.scope, effect.response_id)
        else:
            notes.append(effect)
            answer = None
        effect = flow.send(answer)
    [planned] = [n for n in notes if isinstance(n, Planned)]
    return effect, planned.plan, notes


def test_the_same_properties_keep_chaining() -> None:
    """A loop that sends the same tools every call chains, and its ticket records them."""
    store, history = _history_and_store({"tools": [WEATHER]})

    send, plan, _ = _plan(store, history, tools=[WEATHER], instructions="new instructions every turn")

    assert (Reason.CHAINED, [history[-1]]) == (plan.reason, send.body["input"])
    assert properties_digest({"tools": [WEATHER]}) == send.ticket.properties


@pytest.mark.parametrize(
    "params",
    [{}, {"tools": [CLOCK]}, {"tools": [WEATHER], "tool_choice": "required"}, {"tools": [WEATHER, CLOCK]}],
)
def test_other_properties_go_out_in_full(params: dict[str, Any]) -> None:
    """Dropping, changing or adding a carried property: no anchor is usable, reason properties_changed."""
    store, history = _history_and_store({"tools": [WEATHER]})
    body = {"model": "m", "input": history, **params}

    send, plan, notes = _plan(store, history, **params)

    assert "previous_response_id" not in send.body
    assert Reason.PROPERTIES_CHANGED == plan.reason
    assert [Reason.PROPERTIES_CHANGED] == [n.plan.reason for n in notes if isinstance(n, Planned)]
    assert [] == [n for n in notes if isinstance(n, Log)]  # its event is the outcome's, from the tracker
    assert body["input"] == send.body["input"]
    assert properties_digest(params) == send.ticket.properties  # recorded with its own properties
    assert REASON_TEXT[Reason.PROPERTIES_CHANGED].startswith("the recorded responses")


def test_a_shorter_anchor_with_the_same_properties_is_chosen() -> None:
    """The longest view was made with other tools; an older one with these tools still serves."""
    store = DictStore()
    u1, a1, u2, a2 = user("one"), assistant("ONE"), user("two"), assistant("TWO")
    record_response([u1], response([a1]), scope=SCOPE, store=store, params={"tools": [WEATHER]})
    record_response([u1, a1, u2], response([a2]), scope=SCOPE, store=store, params={"tools": [CLOCK]})
    history = [u1, a1, u2, a2, user("three")]

    send, plan, _ = _plan(store, history, tools=[WEATHER])

    assert (Reason.CHAINED, 2) == (plan.reason, plan.skip)
    assert history[2:] == send.body["input"]


def test_properties_changed_needs_a_view_that_is_a_prefix() -> None:
    """properties_changed is reported only when some view is a prefix: else the usual reasons."""
    assert Reason.NO_HISTORY == choose([b"a", b"b"], {}, 0.0, has_model_items=False, properties=b"x").reason


def test_a_caller_managed_child_with_other_properties_is_not_recorded() -> None:
    """The server may have carried the parent's tools over to the child: its view is not what was sent."""
    store, _ = _history_and_store({"tools": [WEATHER]})
    parent = max(store.ids.values(), key=lambda a: a.count)
    body = {"input": [user("three")], "previous_response_id": parent.response_id}

    same, _, _ = _plan(store, [], **body, tools=[WEATHER])
    dropped, _, _ = _plan(store, [], **body)

    assert same.ticket is not None
    assert None is same.ticket.skip_reason
    assert dropped.ticket is not None
    assert Reason.PROPERTIES_CHANGED == dropped.ticket.skip_reason
