"""The server resolves ids as OpenAI does: references, reasoning without encrypted content, answers."""

from __future__ import annotations

from typing import Any

import pytest

from anchortrack.server import APIError, ResponsesServer
from anchortrack.server._chain import is_reference, resolve_context

from ..helpers import user
from .helpers import post_json, raw_request


STORED: dict[str, dict[str, Any]] = {
    "msg_1": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a"}],
    },
    "rs_1": {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "E1"},
}


def test_references_with_or_without_type_become_the_item() -> None:
    """``{"type": "item_reference", "id"}`` and a bare ``{"id"}`` both stand for the stored item."""
    context = [user("q"), {"type": "item_reference", "id": "msg_1"}, {"id": "msg_1"}]

    assert [user("q"), STORED["msg_1"], STORED["msg_1"]] == resolve_context(context, STORED.get)
    assert is_reference({"id": "x"})
    assert not is_reference({"id": "x", "role": "user", "content": "c"})
    assert not is_reference({"id": "x", "note": "?"})


def test_reasoning_without_encrypted_content_is_the_stored_reasoning() -> None:
    """The caller's summary is not what the model sees: the item stored under the id is."""
    mine = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "edited"}]}
    encrypted = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "MINE"}

    assert [STORED["rs_1"]] == resolve_context([mine], STORED.get)
    assert [encrypted] == resolve_context([encrypted], STORED.get)


def test_earlier_items_of_the_context_resolve_first() -> None:
    """An id defined earlier in the context resolves to that item."""
    earlier = {"id": "msg_1", "type": "message", "role": "user", "content": "earlier"}

    assert [earlier, earlier] == resolve_context([earlier, {"id": "msg_1"}], STORED.get)


@pytest.mark.parametrize(
    "item",
    [
        {"id": "msg_404"},
        {"type": "item_reference", "id": "msg_404"},
        {"id": "rs_404", "type": "reasoning", "summary": []},
        {"id": "msg_1", "type": "reasoning", "summary": []},
    ],
)
def test_unknown_ids_are_not_found(item: dict[str, Any]) -> None:
    """An id that names nothing (or not a reasoning item, for reasoning) is a 404 on ``input``."""
    with pytest.raises(APIError) as error:
        resolve_context([item], STORED.get)

    assert 404 == error.value.status
    assert "not found" in str(error.value)


def test_answers_must_name_their_request_or_call() -> None:
    """An MCP approval response names a request of the context; a local shell output names a call."""
    request = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
    }
    approve = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    call = {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_1",
        "action": {},
        "status": "completed",
    }
    output = {"type": "local_shell_call_output", "id": "call_1", "output": "{}"}

    assert [request, approve, call, output] == resolve_context([request, approve, call, output], STORED.get)
    for context in (
        [approve],
        [{**request, "id": "mcpr_2"}, approve],
        [output],
        [{**call, "call_id": "x", "id": "y"}, output],
    ):
        with pytest.raises(APIError) as error:
            resolve_context(context, STORED.get)
        assert 400 == error.value.status


def test_the_server_resolves_stored_items_over_http(fake_server: ResponsesServer) -> None:
    """Over HTTP: a stored reasoning item and message are found by id, in a stateless request too."""
    status, first = post_json(fake_server, {"model": "scripted", "input": "think\n!reason"})
    assert 200 == status
    reasoning, message = first["output"]
    stripped = {"id": reasoning["id"], "type": "reasoning", "summary": []}
    history = [user("think\n!reason"), stripped, {"id": message["id"]}, user("next")]

    status, second = post_json(fake_server, {"model": "scripted", "input": history})

    assert 200 == status
    seen = fake_server.state.resolved_context(second["id"])
    assert [user("think\n!reason"), reasoning, message, user("next")] == seen
    assert seen == fake_server.state.resolve_input(history)
    status, _ = post_json(fake_server, {"model": "scripted", "input": [{"id": "msg_nope"}]})
    assert 404 == status


def test_items_of_unstored_or_deleted_responses_do_not_resolve(fake_server: ResponsesServer) -> None:
    """Items are only found while their response is stored."""
    status, unstored = post_json(fake_server, {"model": "scripted", "input": "hi", "store": False})
    assert 200 == status
    status, stored = post_json(fake_server, {"model": "scripted", "input": "hi"})
    assert 200 == status
    unstored_id, stored_id = unstored["output"][0]["id"], stored["output"][0]["id"]

    assert 404 == post_json(fake_server, {"model": "scripted", "input": [{"id": unstored_id}]})[0]
    reference = {"model": "scripted", "input": [{"id": stored_id}], "store": False}  # holds no copy
    assert 200 == post_json(fake_server, reference)[0]
    fake_server.state.drop(stored["id"])
    assert 404 == post_json(fake_server, {"model": "scripted", "input": [{"id": stored_id}]})[0]


@pytest.mark.parametrize("form", ["item_reference", "bare_reference", "reasoning_by_id"])
def test_a_chain_resolves_as_the_same_history_sent_in_full(any_server: ResponsesServer, form: str) -> None:
    """A response whose input held an id-resolved item chains to the context the full history gives.

    Compared through what the scripted model saw (the context digest in its answer), not through
    the test hooks: the chained request against the same history sent statelessly.
    """
    status, first = post_json(any_server, {"model": "scripted", "input": "think\n!reason"})
    assert 200 == status
    reasoning, message = first["output"]
    pointer = {
        "item_reference": {"type": "item_reference", "id": message["id"]},
        "bare_reference": {"id": message["id"]},
        "reasoning_by_id": {"type": "reasoning", "id": reasoning["id"], "summary": []},
    }[form]
    history = [user("think\n!reason"), pointer, user("next")]
    status, second = post_json(any_server, {"model": "scripted", "input": history})
    assert 200 == status

    chained = {"model": "scripted", "input": [user("more")], "previous_response_id": second["id"]}
    full = {"model": "scripted", "input": [*history, *second["output"], user("more")], "store": False}
    status_chained, by_chain = post_json(any_server, chained)
    status_full, by_full = post_json(any_server, full)

    assert (200, 200) == (status_chained, status_full)
    seen_chained = by_chain["output"][-1]["content"][0]["text"]
    seen_full = by_full["output"][-1]["content"][0]["text"]
    assert "ctx:" in seen_full
    assert seen_full == seen_chained


def item_not_found(item_id: str) -> dict[str, Any]:
    message = (
        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input."
    )
    return {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


@pytest.mark.parametrize("form", ["item_reference", "reasoning_by_id"])
@pytest.mark.parametrize("gone_first", ["older", "newer"])
def test_an_id_resolves_while_any_stored_response_holding_it_lives(
    any_server: ResponsesServer, form: str, gone_first: str
) -> None:
    """Two stored responses of one key hold an item: it resolves until both are gone, then 404s as
    an unknown id does.  Another key holding the same item does not keep it alive."""
    status, older = post_json(any_server, {"model": "scripted", "input": "think\n!reason"})
    assert 200 == status
    reasoning, message = older["output"]
    held = [user("think\n!reason"), reasoning, message, user("again")]
    status, newer = post_json(any_server, {"model": "scripted", "input": held})
    assert 200 == status
    assert 200 == post_json(any_server, {"model": "scripted", "input": held}, api_key="sk-other")[0]
    target = message if form == "item_reference" else reasoning
    pointer = {"type": "item_reference", "id": message["id"]}
    if form == "reasoning_by_id":
        pointer = {"type": "reasoning", "id": reasoning["id"], "summary": []}
    body = {"model": "scripted", "input": [user("think\n!reason"), pointer, user("next")]}
    first, second = (older, newer) if gone_first == "older" else (newer, older)

    assert 200 == raw_request(any_server, "DELETE", f"/v1/responses/{first['id']}")[0]
    status, answer = post_json(any_server, body)
    assert 200 == status
    seen = any_server.state.resolved_context(answer["id"])
    assert [user("think\n!reason"), target, user("next")] == seen
    any_server.state.drop(answer["id"])  # it holds the item too
    any_server.state.expire(second["id"])
    assert (404, item_not_found(target["id"])) == post_json(any_server, body)


def test_the_item_index_holds_ids_only_and_is_bounded(
    any_server: ResponsesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running server does not keep every item it stored in memory: the index names holders by
    response id, keeps at most ITEM_INDEX_LIMIT ids, and an id it dropped still resolves from the store."""
    from anchortrack.server import _state

    monkeypatch.setattr(_state, "ITEM_INDEX_LIMIT", 2)
    answers = [post_json(any_server, {"model": "scripted", "input": f"turn {n}"})[1] for n in range(4)]
    index = any_server.state._items
    assert 2 == len(index)
    assert all(isinstance(holder, str) for by_owner in index.values() for holder in by_owner.values())
    oldest = answers[0]["output"][0]
    assert oldest["id"] not in index

    status, answer = post_json(
        any_server, {"model": "scripted", "input": [{"id": oldest["id"]}, user("next")]}
    )
    assert 200 == status
    assert [oldest, user("next")] == any_server.state.resolved_context(answer["id"])
