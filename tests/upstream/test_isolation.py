"""The gateway (``serve --upstream``) keeps each API key's conversations apart, as the attacker sees it."""

from __future__ import annotations

import openai
import pytest

from anchortrack.server import ResponsesServer

from .provider import FakeProvider, Reply


def test_another_key_cannot_read_delete_list_or_chain_through_the_gateway(
    provider: FakeProvider, bridge: ResponsesServer
) -> None:
    """Bob, sharing the gateway with Alice, gets 404/400 for her response and the provider never sees it."""
    provider.script(Reply(content="noted: X"), Reply(content="you said X"))
    with (
        openai.OpenAI(base_url=bridge.base_url, api_key="sk-alice-1", max_retries=0) as alice,
        openai.OpenAI(base_url=bridge.base_url, api_key="sk-bob-2", max_retries=0) as bob,
    ):
        secret = alice.responses.create(model="m1", input="my diagnosis is X")

        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(secret.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.input_items.list(secret.id)
        with pytest.raises(openai.NotFoundError):
            bob.responses.delete(secret.id)
        with pytest.raises(openai.BadRequestError) as refused:
            bob.responses.create(model="m1", input="what did I say?", previous_response_id=secret.id)
        later = alice.responses.create(model="m1", input="what did I say?", previous_response_id=secret.id)

    assert "previous_response_not_found" == refused.value.code
    assert "you said X" == later.output_text
    assert 2 == len(provider.bodies)
    assert "my diagnosis is X" in str(provider.messages[-1])
