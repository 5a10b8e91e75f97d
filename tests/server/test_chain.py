"""Chain resolution and context checks, without HTTP."""

from __future__ import annotations

import re
from typing import Any

import pytest

from anchortrack.server import APIError
from anchortrack.server._chain import chain_items, resolve_chain
from anchortrack.server._facts import check_context
from anchortrack.server._records import ChainLink


def record(response_id: str, parent: str | None, *, status: str = "completed") -> ChainLink:
    return ChainLink(
        id=response_id,
        previous_response_id=parent,
        status=status,
        input_items=[{"role": "user", "content": f"in {response_id}"}],
        output=[{"id": f"msg_{response_id}", "type": "message", "role": "assistant"}],
    )


def getter(*records: ChainLink) -> Any:
    table = {item.id: item for item in records}
    return table.get


def test_chain_is_oldest_first() -> None:
    """The context is every stored input and output item, oldest first."""
    get = getter(record("r1", None), record("r2", "r1"), record("r3", "r2"))

    chain = resolve_chain("r3", get)

    assert [item.id for item in chain] == ["r1", "r2", "r3"]
    assert chain_items(chain) == [
        {"role": "user", "content": "in r1"},
        {"id": "msg_r1", "type": "message", "role": "assistant"},
        {"role": "user", "content": "in r2"},
        {"id": "msg_r2", "type": "message", "role": "assistant"},
        {"role": "user", "content": "in r3"},
        {"id": "msg_r3", "type": "message", "role": "assistant"},
    ]


@pytest.mark.parametrize("status", ["failed", "in_progress", "cancelled", "queued"])
def test_unfinished_or_failed_ancestors_are_not_found(status: str) -> None:
    """Any ancestor that is not completed or incomplete makes the chain not found."""
    get = getter(record("r1", None, status=status), record("r2", "r1"))

    with pytest.raises(APIError) as caught:
        resolve_chain("r2", get)

    assert (
        caught.value.status,
        caught.value.code,
        caught.value.param,
    ) == (400, "previous_response_not_found", "previous_response_id")
    assert caught.value.message == "Previous response with id 'r1' not found."


def test_incomplete_ancestors_are_chainable() -> None:
    """OpenAI stores incomplete responses, so they chain."""
    get = getter(record("r1", None, status="incomplete"), record("r2", "r1"))

    assert [item.id for item in resolve_chain("r2", get)] == ["r1", "r2"]


def test_missing_ancestor_is_not_found() -> None:
    """A gap anywhere in the chain gives previous_response_not_found naming the gap."""
    with pytest.raises(APIError, match=re.escape("Previous response with id 'r1' not found.")):
        resolve_chain("r2", getter(record("r2", "r1")))


def test_depth_guard_counts_stored_responses() -> None:
    """A chain of exactly max_depth responses resolves; one more is refused."""
    records = [record("r0", None)] + [record(f"r{n}", f"r{n - 1}") for n in range(1, 5)]
    get = getter(*records)

    assert len(resolve_chain("r4", get, max_depth=5)) == 5
    with pytest.raises(APIError) as caught:
        resolve_chain("r4", get, max_depth=4)

    assert (
        caught.value.code,
        caught.value.param,
    ) == ("previous_response_chain_too_long", "previous_response_id")


def test_default_depth_allows_long_agent_loops() -> None:
    """The default guard is far above 64: a 2,000-turn chain resolves."""
    records = [record("r0", None)] + [record(f"r{n}", f"r{n - 1}") for n in range(1, 2000)]

    assert len(resolve_chain("r1999", getter(*records))) == 2000


def test_cycles_are_refused() -> None:
    """A cycle in parent pointers is an error, not a hang."""
    get = getter(record("a", "b"), record("b", "a"))

    with pytest.raises(APIError) as caught:
        resolve_chain("a", get)

    assert (
        caught.value.code,
        caught.value.param,
    ) == ("previous_response_chain_cycle", "previous_response_id")


def call(call_id: str, item_id: str | None = None) -> dict[str, Any]:
    item = {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}
    return item if item_id is None else {"id": item_id, **item}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_duplicate_item_ids_are_refused() -> None:
    """An id that occurs twice in the context gives OpenAI's duplicate-item error."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}

    with pytest.raises(APIError) as caught:
        check_context([message, {"role": "user", "content": "x"}, dict(message)])

    assert caught.value.param == "input"
    assert caught.value.message.startswith("Duplicate item found with id msg_1.")


def test_orphan_output_is_refused() -> None:
    """A function_call_output whose call is nowhere in the context is refused."""
    with pytest.raises(APIError) as caught:
        check_context([{"role": "user", "content": "x"}, output("call_9")])

    assert caught.value.message == "No tool call found for function call output with call_id call_9."
    assert caught.value.param == "input"


def test_call_without_output_is_refused() -> None:
    """A function_call left without its output is refused."""
    with pytest.raises(APIError) as caught:
        check_context([call("call_1"), output("call_1"), call("call_2"), {"role": "user", "content": "x"}])

    assert caught.value.message == "No tool output found for function call call_2."
    assert caught.value.param == "input"


def test_custom_tool_calls_are_paired_too() -> None:
    """Custom tool calls need their outputs, with their own wording."""
    custom = {"type": "custom_tool_call", "call_id": "c1", "name": "g", "input": "x"}

    with pytest.raises(APIError, match=re.escape("No tool output found for custom tool call c1.")):
        check_context([custom])
    check_context([custom, {"type": "custom_tool_call_output", "call_id": "c1", "output": "y"}])


def test_item_reference_stands_for_the_item_it_names() -> None:
    """A reference to a stored call pairs with the call's output and is no duplicate."""
    reference = {"type": "item_reference", "id": "fc_1"}

    check_context([call("call_1", "fc_1"), output("call_1"), reference])
    with pytest.raises(APIError):
        check_context([call("call_1", "fc_1"), reference, call("call_1", "fc_1"), output("call_1")])


def test_well_formed_context_passes() -> None:
    """Calls with their outputs, in any number, are accepted; one output fewer is not."""
    check_context([call("a", "fc_a"), call("b", "fc_b"), output("b"), output("a")])
    with pytest.raises(APIError, match="No tool output found"):
        check_context([call("a", "fc_a"), call("b", "fc_b"), output("b")])


def test_the_servers_item_types_agree_with_the_librarys_rules() -> None:
    """Every call the server pairs with an output is a type the client compares by rule (not as unknown,
    id included) and knows the model makes: adding a type to one table and not the other fails here."""
    from anchortrack._canonical import ITEM_TYPES as RULES
    from anchortrack.server._items import CALLS, ITEM_TYPES

    assert len(CALLS) >= 5
    for call, spec in CALLS.items():
        assert {call, str(spec.output)} <= set(RULES), call
        assert RULES[call].model_output is True, call
        assert RULES[str(spec.output)].answers in {(call, "call_id"), (call, "id")}, call
    assert set(ITEM_TYPES) <= set(RULES)
