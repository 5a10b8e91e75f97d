"""Tests for `anchortrack._request`: reading ``create()`` arguments and rewriting them for a chained call."""

from __future__ import annotations

from typing import Any

import pytest
from openai import NOT_GIVEN

from anchortrack._request import chained_body, read_request

from ..helpers import user


def test_a_string_input_is_one_item_and_the_body_is_the_callers() -> None:
    """input="hi" is one item; the stateless body is the caller's mapping itself."""
    params = {"model": "m", "input": "hi"}

    request = read_request(params)

    assert ["hi"] == request.items
    assert params is request.body
    assert (None, False, True, False) == (
        request.previous_response_id,
        request.conversation,
        request.store,
        request.caller_managed,
    )


def test_an_iterable_input_is_listed_once_for_the_body_too() -> None:
    """A generator input is read once; the body sends the same list."""
    items = [user("a"), user("b")]

    request = read_request({"model": "m", "input": iter(items)})

    assert items == request.items
    assert request.items is request.body["input"]


@pytest.mark.parametrize("absent", [None, NOT_GIVEN])
def test_absent_input_has_no_items(absent: object) -> None:
    """None and the SDK's not-given sentinel both mean no input."""
    assert [] == read_request({"model": "m", "input": absent}).items


@pytest.mark.parametrize("bad", [42, {"role": "user"}, b"bytes"])
def test_an_input_of_no_responses_shape_is_refused(bad: object) -> None:
    """A number, a mapping or bytes is no Responses input."""
    with pytest.raises(TypeError, match="input must be a string or a list of items"):
        read_request({"model": "m", "input": bad})


def test_caller_state_is_read() -> None:
    """previous_response_id, conversation and store=false are what the caller set."""
    chained = read_request({"model": "m", "input": [], "previous_response_id": "resp_1", "store": False})
    conversation = read_request({"model": "m", "input": [], "conversation": "conv_1"})

    assert ("resp_1", False, True) == (chained.previous_response_id, chained.store, chained.caller_managed)
    assert (True, True) == (conversation.conversation, conversation.caller_managed)


def test_extra_body_wins_and_an_override_is_caller_managed() -> None:
    """extra_body keys win over the arguments; overriding input or previous_response_id is sent as given."""
    extra: dict[str, Any] = {"store": False, "input": [user("x")]}

    request = read_request({"model": "m", "input": [user("a")], "extra_body": extra})

    assert [user("x")] == request.items
    assert not request.store
    assert request.overridden
    assert request.caller_managed


def test_chained_body_sends_the_delta_after_the_anchor_and_keeps_the_rest() -> None:
    """The rewrite replaces input with input[skip:], adds previous_response_id, keeps other arguments."""
    items = [user("a"), user("b"), user("c")]
    params = {"model": "m", "input": items, "instructions": "be brief"}
    request = read_request(params)

    body = chained_body(request, 2, "resp_1")

    assert {
        "model": "m",
        "input": [items[2]],
        "instructions": "be brief",
        "previous_response_id": "resp_1",
    } == body
    assert items == params["input"]
    assert 3 == len(items)
