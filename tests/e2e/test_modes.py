"""End to end: the feature flag — chained, shadow, off — from env, client and call."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import WireTap
from anchortrack.stores import MemoryStore

from ..helpers import sent


def _conversation(client: openai.OpenAI, turns: int = 3) -> list[list[Any]]:
    """Run a small conversation; return the history sent at each turn."""
    history: list[Any] = [{"role": "user", "content": "t0"}]
    sent_histories = []
    for turn in range(1, turns + 1):
        sent_histories.append(list(history))
        resp = client.responses.create(model="scripted", input=history, metadata={"turn": str(turn)})
        history = [*history, *resp.output, {"role": "user", "content": f"t{turn}"}]
    return sent_histories


def test_off_is_byte_for_byte_passthrough(
    raw_client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """I7: with mode off the body is exactly what the unwrapped client sends, nothing hashed or stored."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")
    store = MemoryStore()
    client = anchortrack.wrap(raw_client, store=store, mode="chained")
    histories = _conversation(client)
    wrapped_bodies = list(wire.bodies)
    wire.bodies.clear()

    for history, turn in zip(histories, range(1, 4), strict=True):
        raw_client.responses.create(model="scripted", input=history, metadata={"turn": str(turn)})

    assert wire.bodies == wrapped_bodies
    assert 0 == anchortrack.tracker(client).stats.recorded
    counted = anchortrack.tracker(client).stats.snapshot()["requests"]
    assert {("off", "mode_off")} == {(r["mode"], r["reason"]) for r in counted}
    assert len(store) == 0


def test_shadow_records_and_reports_but_sends_full_requests(raw_client: openai.OpenAI, wire: WireTap) -> None:
    """Shadow mode sends every history in full while counting what chaining would save."""
    client = anchortrack.wrap(raw_client, mode="shadow")
    histories = _conversation(client, turns=4)

    for history, body in zip(histories, wire.bodies, strict=True):
        assert "previous_response_id" not in json.loads(body)
        assert len(history) == len(json.loads(body)["input"])
    stats = anchortrack.tracker(client).stats
    assert 3 == stats.count("chained", mode="shadow")
    snap = stats.snapshot()
    assert snap["bytes_planned"] < snap["bytes_sent"] == snap["bytes_stateless"]


def test_env_wins_over_code_and_call(
    raw_client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANCHORTRACK_MODE overrides both the client's and the per-call mode."""
    client = anchortrack.wrap(raw_client, mode="chained")
    history: list[Any] = [{"role": "user", "content": "x"}]
    resp = client.responses.create(model="scripted", input=history)
    history = [*history, *resp.output, {"role": "user", "content": "y"}]

    monkeypatch.setenv("ANCHORTRACK_MODE", "shadow")
    with anchortrack.using("chained"):
        client.responses.create(model="scripted", input=history)
    assert "previous_response_id" not in sent(wire)

    monkeypatch.delenv("ANCHORTRACK_MODE")
    client.responses.create(model="scripted", input=history)
    assert resp.id == sent(wire)["previous_response_id"]


def test_per_call_mode(raw_client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch) -> None:
    """anchortrack.using() picks the mode for the calls in its block only."""
    monkeypatch.delenv("ANCHORTRACK_MODE", raising=False)
    client = anchortrack.wrap(raw_client)
    history: list[Any] = [{"role": "user", "content": "x"}]
    resp = client.responses.create(model="scripted", input=history)
    history = [*history, *resp.output, {"role": "user", "content": "y"}]

    with anchortrack.using("off"):
        client.responses.create(model="scripted", input=history)
    assert "previous_response_id" not in sent(wire)
    client.responses.create(model="scripted", input=history)
    assert resp.id == sent(wire)["previous_response_id"]


def test_invalid_env_value_means_off(
    raw_client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in ANCHORTRACK_MODE fails safe: passthrough."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "chianed")
    client = anchortrack.wrap(raw_client)
    _conversation(client, turns=2)

    assert all("previous_response_id" not in json.loads(b) for b in wire.bodies)


def test_bad_mode_in_code_is_a_clear_error(raw_client: openai.OpenAI) -> None:
    """An unknown mode passed in code raises at once, naming the valid ones."""
    with pytest.raises(ValueError, match="chained, shadow, off"):
        anchortrack.wrap(raw_client, mode="sometimes")
    with pytest.raises(ValueError, match="unknown anchortrack mode"), anchortrack.using("maybe"):
        pass


def test_wrap_refuses_other_objects() -> None:
    """wrap() takes only openai clients."""
    with pytest.raises(TypeError, match=r"openai\.OpenAI"):
        anchortrack.wrap(object())  # type: ignore[type-var]


def test_a_call_made_inside_another_calls_send_never_takes_its_recorder(
    raw_client: openai.OpenAI, wire: WireTap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrapped call (mode off) made while another call is on its way out is recorded as neither."""
    store = MemoryStore()
    client = anchortrack.wrap(raw_client, store=store, mode="chained")
    original = openai.resources.responses.Responses.create
    side: list[Any] = []

    def create(self: Any, **params: Any) -> Any:
        if not side:  # the first call's SDK send makes a side call first, as a tracer's hook might
            side.append(None)
            with anchortrack.using("off"):
                side[0] = client.responses.create(model="scripted", input="side")
        return original(self, **params)

    monkeypatch.setattr(openai.resources.responses.Responses, "create", create)
    history: list[Any] = [{"role": "user", "content": "t0"}]
    first = client.responses.create(model="scripted", input=history)
    client.responses.create(
        model="scripted", input=[*history, *first.output, {"role": "user", "content": "t1"}]
    )
    anchortrack.tracker(client).flush()
    bodies = [json.loads(body) for body in wire.bodies]
    assert [body.get("input") for body in bodies[:1]] == ["side"]
    assert (
        bodies[-1].get("previous_response_id") == first.id
    )  # chained from the outer call, not the side call
    assert side[0].id != first.id
