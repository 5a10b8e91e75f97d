"""Each API key sees only its own responses; with keys required, unknown keys are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from anchortrack.server import ResponsesServer

from .helpers import post_json, raw_request


ALICE, BOB = "sk-alice-0000000000000001", "sk-bob-00000000000000002"


def not_found(response_id: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"Response with id '{response_id}' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def previous_not_found(response_id: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"Previous response with id '{response_id}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


@pytest.fixture(name="alice")
def _alice(any_server: ResponsesServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=any_server.base_url, api_key=ALICE, max_retries=0) as client:
        yield client


def test_another_key_cannot_read_delete_list_or_chain(
    any_server: ResponsesServer, alice: openai.OpenAI
) -> None:
    """Bob gets OpenAI's answers for an unknown response on every route; Alice's response is untouched."""
    secret = alice.responses.create(model="scripted", input="my diagnosis is X")
    path = f"/v1/responses/{secret.id}"

    for method, route in (
        ("GET", path),
        ("GET", f"{path}?stream=true"),
        ("DELETE", path),
        ("GET", f"{path}/input_items"),
        ("POST", f"{path}/cancel"),
    ):
        status, body, _ = raw_request(any_server, method, route, api_key=BOB)
        assert (404, not_found(secret.id)) == (status, body), (method, route)
    chained = {"model": "scripted", "input": "what did I say?", "previous_response_id": secret.id}
    assert (400, previous_not_found(secret.id)) == post_json(any_server, chained, api_key=BOB)
    assert (400, previous_not_found(secret.id)) == post_json(any_server, chained, api_key=None)

    assert secret.id == alice.responses.retrieve(secret.id).id
    assert 200 == post_json(any_server, chained, api_key=ALICE)[0]


def test_another_key_cannot_resolve_items_by_id(any_server: ResponsesServer, alice: openai.OpenAI) -> None:
    """Alice's items do not resolve for Bob: neither an item reference nor a reasoning item sent by id."""
    secret = alice.responses.create(model="scripted", input="think about X\n!reason")
    reasoning, message = (item.to_dict() for item in secret.output)

    for item in (
        {"type": "item_reference", "id": message["id"]},
        {"id": message["id"]},
        {"type": "reasoning", "id": reasoning["id"], "summary": []},
    ):
        status, body = post_json(any_server, {"model": "scripted", "input": [item]}, api_key=BOB)
        assert 404 == status, item
        assert f"Item with id '{item['id']}' not found." in body["error"]["message"]
    status, _ = post_json(any_server, {"model": "scripted", "input": [{"id": message["id"]}]}, api_key=ALICE)
    assert 200 == status


def test_another_key_cannot_chain_over_the_websocket(
    any_server: ResponsesServer, alice: openai.OpenAI
) -> None:
    """The WebSocket mode shares the store: Bob's socket cannot chain from Alice's stored response."""
    secret = alice.responses.create(model="scripted", input="my diagnosis is X")
    url = f"ws://127.0.0.1:{any_server.port}/v1/responses"
    event = {"type": "response.create", "model": "scripted", "input": "?", "previous_response_id": secret.id}

    frames = {}
    for key in (BOB, ALICE):
        with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as socket:
            socket.send(json.dumps(event))
            frames[key] = json.loads(socket.recv(timeout=30))

    assert {"type": "error", "status": 400, **previous_not_found(secret.id)} == frames[BOB]
    assert "response.created" == frames[ALICE]["type"]


@pytest.fixture(name="guarded", scope="module")
def _guarded() -> Iterator[ResponsesServer]:
    with ResponsesServer(api_keys=[ALICE, BOB]) as srv:
        yield srv


class TestRequiredKeys:
    def test_unknown_or_missing_keys_get_401(self, guarded: ResponsesServer) -> None:
        """Only the listed keys are served; the others get OpenAI's 401 body, and nothing is stored."""
        body = {"model": "scripted", "input": "hi"}

        status, unknown = post_json(guarded, body, api_key="sk-mallory-000000000003")
        assert 401 == status
        assert {"type": "invalid_request_error", "param": None, "code": "invalid_api_key"} == {
            key: value for key, value in unknown["error"].items() if key != "message"
        }
        assert "sk-mallory" not in unknown["error"]["message"]
        status, missing = post_json(guarded, body, api_key=None)
        assert (401, None) == (status, missing["error"]["code"])
        assert "You didn't provide an API key" in missing["error"]["message"]
        assert 0 == guarded.state.store.count()
        assert 200 == post_json(guarded, body, api_key=BOB)[0]
        with (
            openai.OpenAI(base_url=guarded.base_url, api_key="wrong", max_retries=0) as client,
            pytest.raises(openai.AuthenticationError),
        ):
            client.responses.create(model="scripted", input="hi")

    def test_unknown_keys_cannot_open_a_socket(self, guarded: ResponsesServer) -> None:
        """The WebSocket handshake of an unknown key is refused with the same 401."""
        url = f"ws://127.0.0.1:{guarded.port}/v1/responses"

        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers={"Authorization": "Bearer wrong"})
        with connect(url, additional_headers={"Authorization": f"Bearer {ALICE}"}):
            pass

        assert 401 == refused.value.response.status_code
        assert b"invalid_api_key" in refused.value.response.body


def test_one_keys_item_ids_do_not_shadow_anothers(any_server: ResponsesServer, alice: openai.OpenAI) -> None:
    """Bob storing an item under an id first does not stop Alice from referencing her own item with it."""
    squatted = {"id": "msg_chosen_by_the_client", "type": "message", "role": "user", "content": "bob's"}
    mine = {**squatted, "content": "alice's"}
    assert 200 == post_json(any_server, {"model": "scripted", "input": [squatted]}, api_key=BOB)[0]
    alice.responses.create(model="scripted", input=[mine])  # type: ignore[list-item]

    later = alice.responses.create(model="scripted", input=[{"type": "item_reference", "id": mine["id"]}])

    assert "alice's" in later.output_text
