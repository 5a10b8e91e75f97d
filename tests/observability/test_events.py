"""The structlog event catalogue: names, levels and keys, asserted as whole dicts."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

import anchortrack
from anchortrack._failopen import FailOpen
from anchortrack._log import short
from anchortrack._stats import Stats
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore

from ..helpers import BreakableStore, ask, scope_of, user


ROOT = Path(__file__).parents[2]
SECRET = "my card is 4111 1111 1111 1111"


@pytest.fixture(name="zdr")
def _zdr(server: ResponsesServer) -> Iterator[None]:
    server.state.zdr = True
    yield
    server.state.zdr = False


def _events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == f"anchortrack.{name}"]


def _saved(client: openai.OpenAI, store: MemoryStore, history: list[Any]) -> int:
    plan = anchortrack.plan_request(history, scope=scope_of(client), store=store)
    return plan.bytes_stateless - plan.bytes_planned


def _bytes(client: openai.OpenAI, store: MemoryStore, history: list[Any]) -> tuple[int, int]:
    """The estimated input bytes of *history* in full, and of the plan for it now."""
    plan = anchortrack.plan_request(history, scope=scope_of(client), store=store)
    return plan.bytes_stateless, plan.bytes_planned


def _reported(event: str, level: str = "debug", **keys: Any) -> dict[str, Any]:
    """A call's outcome as its event logs it: the `Outcome` fields with a value (defaults, *keys*)."""
    counts = ("items_total", "items_sent", "items_planned", "bytes_stateless", "bytes_sent", "bytes_planned")
    defaults = {"mode": "chained", **dict.fromkeys(counts, 0), "anchors_rejected": 0}
    return {"event": f"anchortrack.{event}", "log_level": level, **defaults, **keys}


def _timed(event: Mapping[str, Any]) -> dict[str, Any]:
    """*event* without its plan time (a float: it was planned), to compare it whole."""
    assert isinstance(event["plan_seconds"], float)
    return {key: value for key, value in event.items() if key != "plan_seconds"}


def test_first_turn_is_stateless_no_history_then_recorded(client: openai.OpenAI, store: MemoryStore) -> None:
    """A first turn logs request_stateless (no_history), then response_recorded with the view's prefix."""
    full, _ = _bytes(client, store, [user("hello")])
    with capture_logs() as logs:
        _, resp = ask(client, [], "hello")

    recorded = _events(logs, "response_recorded")[0]
    anchor = store.get(scope_of(client).key, resp.id)
    assert [
        {
            "event": "anchortrack.response_recorded",
            "log_level": "debug",
            "response_id": resp.id,
            "view": recorded["view"],
            "items": 2,
            "outputs": 1,
        },
        _reported(
            "request_stateless",
            decision="stateless",
            reason="no_history",
            items_total=1,
            items_sent=1,
            items_planned=1,
            bytes_stateless=full,
            bytes_sent=full,
            bytes_planned=full,
            response_id=resp.id,
        ),
    ] == [logs[0], _timed(logs[1])]
    assert anchor is not None
    assert short(anchor.view) == recorded["view"]


def test_a_history_with_nothing_new_is_stateless_nothing_new(client: openai.OpenAI) -> None:
    """A first turn's history and output sent again: stateless, nothing_new, no item named as diverged."""
    history, _ = ask(client, [], "hello")

    with capture_logs() as logs:
        client.responses.create(model="scripted", input=history)

    assert {"reason": "nothing_new", "items_sent": 2, "diverged_at": None} == {
        key: _events(logs, "request_stateless")[0].get(key) for key in ("reason", "items_sent", "diverged_at")
    }
    assert 1 == anchortrack.tracker(client).stats.count("stateless", "nothing_new")


def test_a_history_after_an_anchor_the_store_lost_names_no_diverged_item(
    client: openai.OpenAI, store: MemoryStore
) -> None:
    """The next turn after an evicted anchor is prefix_diverged, but no item left the view: no diverged_at."""
    history, first = ask(client, [], "one")
    store.evict(scope_of(client).key, first.id)

    with capture_logs() as logs:
        ask(client, history, "two")

    assert {"reason": "prefix_diverged", "items_sent": 3, "diverged_at": None} == {
        key: _events(logs, "request_stateless")[0].get(key) for key in ("reason", "items_sent", "diverged_at")
    }


def test_chained_request_logs_anchor_items_and_bytes_saved(client: openai.OpenAI, store: MemoryStore) -> None:
    """request_chained carries the anchor id, the items and bytes sent of the history's."""
    history, first = ask(client, [], "one")
    full, planned = _bytes(client, store, [*history, user("two")])

    with capture_logs() as logs:
        _, second = ask(client, history, "two")

    assert _reported(
        "request_chained",
        decision="chained",
        reason="chained",
        anchor_id=first.id,
        items_total=3,
        items_sent=1,
        items_planned=1,
        bytes_stateless=full,
        bytes_sent=planned,
        bytes_planned=planned,
        response_id=second.id,
    ) == _timed(_events(logs, "request_chained")[0])
    assert full > planned > 0


def test_prefix_diverged_reports_where_the_history_first_differs(client: openai.OpenAI) -> None:
    """Redacting item 1 logs request_stateless with reason prefix_diverged and diverged_at=1."""
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    history, _ = ask(client, history, SECRET)
    history, _ = ask(client, history, "and then?")
    redacted = [history[0], user("my card is [card]"), *history[2:]]

    with capture_logs() as logs:
        client.responses.create(model="scripted", input=[*redacted, user("next")])

    assert {"reason": "prefix_diverged", "items_sent": len(redacted) + 1, "diverged_at": 1} == {
        key: _events(logs, "request_stateless")[0].get(key) for key in ("reason", "items_sent", "diverged_at")
    }


def test_stale_anchor_is_evicted_and_resent_with_a_warning(
    server: ResponsesServer, client: openai.OpenAI
) -> None:
    """A forgotten anchor logs anchor_evicted (warning), then the resent call is recorded."""
    history, first = ask(client, [], "one")
    server.state.drop(first.id)

    with capture_logs() as logs:
        _, resp = ask(client, history, "two")

    assert ["anchor_evicted", "response_recorded", "request_resent"] == [
        e["event"].removeprefix("anchortrack.") for e in logs
    ]
    assert {
        "event": "anchortrack.anchor_evicted",
        "log_level": "warning",
        "reason": "stale_anchor",
        "anchor_id": first.id,
    } == logs[0]
    assert resp.id == logs[1]["response_id"] == logs[2]["response_id"]
    assert ("resent", "stale_anchor", first.id, 3, 4) == tuple(
        logs[2][key] for key in ("decision", "reason", "anchor_id", "items_total", "items_sent")
    )


@pytest.mark.usefixtures("zdr")
def test_zdr_refusal_disables_the_scope_with_a_warning(client: openai.OpenAI) -> None:
    """A ZDR refusal logs scope_disabled once; later calls are stateless with reason zdr."""
    history, first = ask(client, [], "one")

    with capture_logs() as logs:
        history, _ = ask(client, history, "two")
        ask(client, history, "three")

    assert {
        "event": "anchortrack.scope_disabled",
        "log_level": "warning",
        "reason": "zdr",
        "anchor_id": first.id,
        "scope": scope_of(client).key,
    } == _events(logs, "scope_disabled")[0]
    assert 1 == len(_events(logs, "scope_disabled"))
    assert ["zdr"] == [e["reason"] for e in _events(logs, "request_stateless")]


def test_shadow_mode_logs_what_chaining_would_have_saved(raw_client: openai.OpenAI) -> None:
    """shadow_planned (info) reports the would-be anchor, items and bytes per call."""
    store = MemoryStore()
    client = anchortrack.wrap(raw_client, store=store, mode="shadow")
    history, first = ask(client, [], "one")
    would_save = _saved(client, store, [*history, user("two")])

    full, planned = _bytes(client, store, [*history, user("two")])

    with capture_logs() as logs:
        _, second = ask(client, history, "two")

    assert _reported(
        "shadow_planned",
        "info",
        mode="shadow",
        decision="chained",
        reason="chained",
        anchor_id=first.id,
        items_total=3,
        items_sent=3,
        items_planned=1,
        bytes_stateless=full,
        bytes_sent=full,
        bytes_planned=planned,
        response_id=second.id,
    ) == _timed(_events(logs, "shadow_planned")[0])
    assert full - planned == would_save > 0


def test_mode_off_logs_a_passthrough_and_records_nothing(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill switch logs request_passed_through (mode_off) and nothing else."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")

    with capture_logs() as logs:
        ask(client, [], "one")

    assert [
        _reported("request_passed_through", mode="off", decision="passthrough", reason="mode_off")
    ] == logs


def test_caller_managed_state_is_a_passthrough(client: openai.OpenAI) -> None:
    """A caller's own previous_response_id logs request_passed_through (caller_managed)."""
    _, first = ask(client, [], "one")

    with capture_logs() as logs:
        client.responses.create(model="scripted", input=[user("two")], previous_response_id=first.id)

    event = _events(logs, "request_passed_through")[0]
    assert ("passthrough", "caller_managed", 1, 1) == tuple(
        event[key] for key in ("decision", "reason", "items_total", "items_sent")
    )


@pytest.mark.parametrize(
    ("params", "text", "reason", "status"),
    [({"store": False}, "x", "store_false", "completed"), ({}, "x\n!fail", "not_completed", "failed")],
)
def test_response_not_recorded_says_why(
    client: openai.OpenAI, params: dict[str, Any], text: str, reason: str, status: str
) -> None:
    """response_not_recorded carries the response id, its status and the reason."""
    with capture_logs() as logs:
        _, resp = ask(client, [], text, **params)

    assert {
        "event": "anchortrack.response_not_recorded",
        "log_level": "debug",
        "response_id": resp.id,
        "status": status,
        "reason": reason,
    } == _events(logs, "response_not_recorded")[0]


def test_store_outage_logs_degraded_once_and_recovered(raw_client: openai.OpenAI) -> None:
    """A store outage logs store_degraded once and store_recovered when it answers again."""
    store = BreakableStore()
    client = anchortrack.wrap(raw_client, store=store)
    anchortrack.tracker(client).store_cooldown = 0.0
    history, _ = ask(client, [], "one")
    store.broken = True

    with capture_logs() as logs:
        history, _ = ask(client, history, "two")
        history, _ = ask(client, history, "three")
        store.broken = False
        ask(client, history, "four")

    outage = [e for e in logs if e["event"] in ("anchortrack.store_degraded", "anchortrack.store_recovered")]
    assert [
        {
            "event": "anchortrack.store_degraded",
            "log_level": "warning",
            "store": "memory",
            "operation": "find",
            "error": "ConnectionError",
            "retry_in": 0.0,
        },
        {"event": "anchortrack.store_recovered", "log_level": "warning"},
    ] == [{k: v for k, v in e.items() if k != "outage_seconds"} for e in outage]
    assert outage[1]["outage_seconds"] >= 0.0
    # "two" had only the store to find its anchor in; "three" and "four" chain from "two" and
    # "three", which waited in the backlog, and the backlog is written once the store answers.
    assert ["store_unavailable"] == [e["reason"] for e in _events(logs, "request_stateless")]
    assert 2 == len(_events(logs, "request_chained"))
    assert [{"event": "anchortrack.backlog_flushed", "log_level": "info", "written": 2, "dropped": 0}] == [
        e for e in logs if e["event"].startswith("anchortrack.backlog_")
    ]


def test_the_guard_measures_an_outage_on_its_clock() -> None:
    """store_recovered reports the outage's length, from the first failure to the first success."""
    now = [100.0]
    guard = FailOpen(MemoryStore(), Stats(), cooldown=0.0, monotonic=lambda: now[0])

    def broken() -> None:
        raise ConnectionError

    with capture_logs() as logs:
        guard.call("find", broken)
        now[0] = 101.0
        guard.call("find", broken)
        now[0] = 102.5
        guard.call("find", dict)

    assert [
        {
            "event": "anchortrack.store_suspect",
            "log_level": "debug",
            "operation": "find",
            "error": "ConnectionError",
        },
        {
            "event": "anchortrack.store_degraded",
            "log_level": "warning",
            "store": "memory",
            "operation": "find",
            "error": "ConnectionError",
            "retry_in": 0.0,
        },
        {"event": "anchortrack.store_recovered", "log_level": "warning", "outage_seconds": 2.5},
    ] == logs


def test_invalid_mode_variable_warns_once_and_turns_tracking_off(
    client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown ANCHORTRACK_MODE logs mode_invalid (warning) once and behaves as off."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "chaind-typo")

    with capture_logs() as logs:
        ask(client, [], "one")
        ask(client, [], "two")

    assert [
        {
            "event": "anchortrack.mode_invalid",
            "log_level": "warning",
            "variable": "ANCHORTRACK_MODE",
            "value": "chaind-typo",
            "expected": "chained, shadow, off",
            "using": "off",
        }
    ] == _events(logs, "mode_invalid")
    assert ["mode_off", "mode_off"] == [e["reason"] for e in _events(logs, "request_passed_through")]


def test_events_never_carry_item_content(server: ResponsesServer, client: openai.OpenAI) -> None:
    """No event value holds any text of the conversation; digests appear as 12-hex prefixes only."""
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    with capture_logs() as logs:
        history, _ = ask(client, history, SECRET)
        history, second = ask(client, history, 'second question\n!call lookup {"card": "4111"}')
        outputs = [
            {"type": "function_call_output", "call_id": item.call_id, "output": "card 4111 has 300 EUR"}
            for item in second.output
        ]
        server.state.drop(second.id)
        history, _ = ask(client, [*history, *outputs], "third")

    values = [str(v) for event in logs for k, v in event.items() if k != "event"]
    # A response id is random hex, and "4111" is hex too: ids are taken out before the texts are looked for.
    values = [re.sub(r"resp_[0-9a-f]+", "resp_…", v) for v in values]
    assert logs
    assert not [v for v in values if "4111" in v or "question" in v or "brief" in v]
    digests = [event["view"] for event in _events(logs, "response_recorded")]
    assert all(re.fullmatch(r"[0-9a-f]{12}", d) for d in digests)
    assert len(short(b"\x00" * 16)) == 12


def test_unconfigured_library_is_quiet_below_warnings(
    server: ResponsesServer, client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """Without logging configuration only warnings reach the stdlib logger; debug events are dropped."""
    history, first = ask(client, [], "one")
    server.state.drop(first.id)

    ask(client, history, "two")

    records = [r for r in caplog.records if r.name == "anchortrack"]
    assert [f"anchortrack.anchor_evicted reason='stale_anchor' anchor_id='{first.id}'"] == [
        r.getMessage() for r in records
    ]
    assert [logging.WARNING] == [r.levelno for r in records]
    assert first.id == getattr(records[0], "anchor_id", None)  # key/values also arrive as ``extra``
    assert "anchortrack.anchor_evicted" == getattr(records[0], "event", None)


def test_every_emitted_event_is_documented() -> None:
    """docs/events.md lists exactly the events the library emits (by literal name in the code)."""
    emitted = {
        name
        for path in (ROOT / "anchortrack").rglob("*.py")
        if "server" not in path.relative_to(ROOT).parts
        for name in re.findall(r"\"(anchortrack\.[a-z_]+)\"", path.read_text(encoding="utf-8"))
        if not name.startswith(("anchortrack.server", "anchortrack._"))
        and name.removeprefix("anchortrack.") not in anchortrack.__all__  # `anchortrack.wrap` in a message
    }
    documented = set(re.findall(r"^\| `(anchortrack\.[a-z_]+)`", (ROOT / "docs/events.md").read_text(), re.M))
    assert emitted == documented
