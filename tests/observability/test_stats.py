"""In-process counters and histograms after scripted conversations: every reason code counted."""

from __future__ import annotations

import gc
import re
import typing
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest

import anchortrack
from anchortrack import Stats
from anchortrack._outcome import Decision, Outcome
from anchortrack._plan import Reason
from anchortrack._stats import METRICS, Counted, Metric, merge_snapshots, value_of
from anchortrack.server import ResponsesServer
from anchortrack.stores import MemoryStore

from ..helpers import BreakableStore, ask, scope_of, user


@pytest.fixture(name="zdr")
def _zdr(server: ResponsesServer) -> Iterator[None]:
    server.state.zdr = True
    yield
    server.state.zdr = False


def _row(mode: str, decision: str, reason: str, count: int, transport: str = "http") -> dict[str, Any]:
    return {"mode": mode, "decision": decision, "reason": reason, "transport": transport, "count": count}


def test_a_scripted_conversation_counts_each_reason(
    server: ResponsesServer, raw_client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No history, chained, diverged, stale, caller-managed, store=false, failed, store down, mode off."""
    store = BreakableStore()
    client = anchortrack.wrap(raw_client, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_cooldown = 0.0

    history, first = ask(client, [], "one")  # stateless / no_history
    history, second = ask(client, history, "two")  # chained
    ask(client, [user("ONE"), *history[1:]], "edited")  # stateless / unknown_history: the first item changed
    server.state.drop(second.id)
    ask(client, history, "three")  # chained, then resent: fallback stale_anchor
    client.responses.create(model="scripted", input=[user("four")], previous_response_id=first.id)
    ask(client, [], "five", store=False)  # stateless / no_history, not recorded: store_false
    ask(client, [], "six\n!fail")  # stateless / no_history, not recorded: not_completed
    store.broken = True
    ask(client, history, "seven")  # stateless / store_unavailable; find fails, the write waits
    store.broken = False
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")
    ask(client, history, "eight")  # passthrough / mode_off

    snap = tracker.stats.snapshot()
    assert [
        _row("chained", "chained", "chained", 1),
        _row("chained", "passthrough", "caller_managed", 1),
        _row("chained", "resent", "stale_anchor", 1),
        _row("chained", "stateless", "no_history", 3),
        _row("chained", "stateless", "store_unavailable", 1),
        _row("chained", "stateless", "unknown_history", 1),
        _row("off", "passthrough", "mode_off", 1),
    ] == snap["requests"]
    assert {"stale_anchor": 1} == snap["resends"]
    # seven's anchor waits in the backlog (the store is suspect, so the write is not tried)
    assert {"not_completed": 1, "store_false": 1} == snap["not_recorded"]
    assert {"find": 1} == snap["store_errors"]
    assert 1 == snap["backlog"]["queued"]
    # one, two, edited, three (resent), four (parent known): the anchors written
    assert 5 == snap["recorded"]
    assert 1 == tracker.stats.count("chained")
    assert 1 == tracker.stats.count("resent")
    assert 3 == tracker.stats.count(reason="no_history")


@pytest.mark.usefixtures("zdr")
def test_zdr_is_counted_as_a_fallback_then_as_stateless(client: openai.OpenAI) -> None:
    """The refused chained call counts as resent / zdr (and a zdr fallback); later ones as stateless / zdr."""
    history, _ = ask(client, [], "one")
    history, _ = ask(client, history, "two")
    ask(client, history, "three")

    snap = anchortrack.tracker(client).stats.snapshot()
    assert [
        _row("chained", "resent", "zdr", 1),
        _row("chained", "stateless", "no_history", 1),
        _row("chained", "stateless", "zdr", 1),
    ] == snap["requests"]
    assert {"zdr": 1} == snap["resends"]


def test_internal_error_is_counted_when_an_item_has_no_shape(client: openai.OpenAI) -> None:
    """An item anchortrack cannot fingerprint is counted as stateless / internal_error."""
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="scripted", input=[user("one"), 42])  # type: ignore[list-item]

    assert 1 == anchortrack.tracker(client).stats.count("stateless", "internal_error")


def test_items_and_bytes_add_up_for_chained_calls(client: openai.OpenAI, store: MemoryStore) -> None:
    """Chained mode: sent == planned < stateless; the delta histogram sees each chained call."""
    history, _ = ask(client, [], "one")
    nxt = [*history, user("two")]
    plan = anchortrack.plan_request(nxt, scope=scope_of(client), store=store)
    first = anchortrack.plan_request([user("one")], scope=scope_of(client), store=store)

    client.responses.create(model="scripted", input=nxt)

    snap = anchortrack.tracker(client).stats.snapshot()
    assert (1 + 1, 1 + 3) == (snap["items_sent"], snap["items_total"])
    assert first.bytes_stateless + plan.bytes_planned == snap["bytes_sent"] == snap["bytes_planned"]
    assert first.bytes_stateless + plan.bytes_stateless == snap["bytes_stateless"]
    assert snap["bytes_stateless"] - snap["bytes_sent"] == snap["bytes_saved"] == snap["bytes_would_save"]
    assert {"count": 1, "sum": 1.0} == {k: snap["delta_items"][k] for k in ("count", "sum")}
    assert 1 == snap["delta_items"]["buckets"]["1"]
    assert 2 == snap["plan_seconds"]["count"] == snap["plan_seconds"]["buckets"]["+Inf"]


def test_a_stale_anchor_resend_counts_its_bytes_as_sent(
    server: ResponsesServer, client: openai.OpenAI, store: MemoryStore
) -> None:
    """The resend after a stale anchor adds the full history to items and bytes sent."""
    history, first = ask(client, [], "one")
    nxt = [*history, user("two")]
    plan = anchortrack.plan_request(nxt, scope=scope_of(client), store=store)
    server.state.drop(first.id)
    before = anchortrack.tracker(client).stats.snapshot()

    client.responses.create(model="scripted", input=nxt)

    after = anchortrack.tracker(client).stats.snapshot()
    assert plan.bytes_planned + plan.bytes_stateless == after["bytes_sent"] - before["bytes_sent"]
    assert plan.sent + plan.total == after["items_sent"] - before["items_sent"]
    assert plan.bytes_planned == after["bytes_planned"] - before["bytes_planned"]


def test_shadow_mode_aggregates_what_chaining_would_have_saved(raw_client: openai.OpenAI) -> None:
    """Shadow mode sends everything, and bytes_would_save / items_planned show the saving."""
    store = MemoryStore()
    client = anchortrack.wrap(raw_client, store=store, mode="shadow")
    history: list[Any] = []
    for text in ("one", "two", "three"):
        history, _ = ask(client, history, text)

    snap = anchortrack.tracker(client).stats.snapshot()
    assert [_row("shadow", "chained", "chained", 2), _row("shadow", "stateless", "no_history", 1)] == snap[
        "requests"
    ]
    assert 0 == snap["bytes_saved"]
    assert snap["bytes_would_save"] == snap["bytes_stateless"] - snap["bytes_planned"] > 0
    assert (1 + 3 + 5, 1 + 1 + 1) == (snap["items_sent"], snap["items_planned"])


def test_mode_off_counts_requests_without_reading_or_storing(
    client: openai.OpenAI, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill switch is countable, and still hashes and stores nothing."""
    monkeypatch.setenv("ANCHORTRACK_MODE", "off")
    history, _ = ask(client, [], "one")
    ask(client, history, "two")

    snap = anchortrack.tracker(client).stats.snapshot()
    assert [_row("off", "passthrough", "mode_off", 2)] == snap["requests"]
    assert (0, 0, 0) == (snap["items_total"], snap["bytes_stateless"], snap["recorded"])
    assert 0 == len(store)


def test_merged_snapshots_add_up_counters_and_histograms(raw_client: openai.OpenAI) -> None:
    """merge_snapshots sums two trackers' counters, label by label, and their histogram buckets."""
    a = anchortrack.wrap(raw_client)
    b = anchortrack.wrap(raw_client, mode="shadow")
    history, _ = ask(a, [], "one")
    ask(a, history, "two")
    ask(b, [], "x", store=False)

    sa, sb = (anchortrack.tracker(c).stats.snapshot() for c in (a, b))
    merged = merge_snapshots([sa, sb])

    assert [
        _row("chained", "chained", "chained", 1),
        _row("chained", "stateless", "no_history", 1),
        _row("shadow", "stateless", "no_history", 1),
    ] == merged["requests"]
    assert sa["bytes_sent"] + sb["bytes_sent"] == merged["bytes_sent"]
    assert {"store_false": 1} == merged["not_recorded"]
    assert 3 == merged["plan_seconds"]["count"] == merged["plan_seconds"]["buckets"]["+Inf"]
    assert list(sa["plan_seconds"]["buckets"]) == list(merged["plan_seconds"]["buckets"])
    assert merge_snapshots([]) == anchortrack.Stats().snapshot()


class _PutFails(MemoryStore):
    """Finds work; every write fails while ``failing`` (at once: it never blocks, so it runs inline)."""

    never_blocks = True
    failing = True

    def put(self, scope: str, anchor: anchortrack.Anchor) -> None:
        if self.failing:
            raise ConnectionError("read-only replica")
        super().put(scope, anchor)


def test_recorded_counts_only_anchors_written(raw_client: openai.OpenAI) -> None:
    """A write that fails waits in the backlog: recorded once written, not recorded if dropped."""
    store = _PutFails()
    client = anchortrack.wrap(raw_client, store=store)
    tracker = anchortrack.tracker(client)
    tracker.store_cooldown = 0.0
    tracker.backlog.limit = 1

    history, _ = ask(client, [], "one")  # the write fails: it waits in the backlog
    history, _ = ask(client, history, "two")  # its write fails too, and pushes one's out

    snap = tracker.stats.snapshot()
    assert 0 == snap["recorded"]
    assert {"store_unavailable": 1} == snap["not_recorded"]  # dropped from the backlog: never written
    assert {"put": 2} == snap["store_errors"]
    assert {"queued": 2, "written": 0, "dropped": {"overflow": 1, "expired": 0}, "size": 1} == snap["backlog"]
    assert str(tracker.stats).endswith("; recorded 0; not recorded 1; store errors 2")

    store.failing = False
    ask(client, history, "three")  # three's write, then two's from the backlog

    snap = tracker.stats.snapshot()
    assert 2 == snap["recorded"]
    assert {"queued": 2, "written": 1, "dropped": {"overflow": 1, "expired": 0}, "size": 0} == snap["backlog"]


def test_print_stats_reads_like_the_demo_summary(server: ResponsesServer, client: openai.OpenAI) -> None:
    """print(stats) gives the decisions (a resend as resent), the bytes and the anchors written."""
    history, _ = ask(client, [], "one")
    history, second = ask(client, history, "two")
    server.state.drop(second.id)
    ask(client, history, "three")  # chained, refused, resent
    ask(client, [], "four", store=False)

    stats = anchortrack.tracker(client).stats
    snap = stats.snapshot()
    assert re.fullmatch(
        r"requests 4 \(chained 1, resent 1, stateless 2\); input bytes ~([\d,]+) sent of ~([\d,]+) stateless "
        r"\(\d+%\), saved ~-?[\d,]+; recorded 3; not recorded 1",
        str(stats),
    )
    assert f"~{snap['bytes_sent']:,} sent of ~{snap['bytes_stateless']:,}" in str(stats)
    assert (1, 1, 1) == (stats.count("chained"), stats.count("resent"), sum(snap["resends"].values()))
    assert repr(stats) == f"<Stats {stats}>"


@pytest.mark.parametrize("how", ["close", "with", "stream manager"])
def test_an_abandoned_stream_is_counted_when_closed_not_when_collected(
    client: openai.OpenAI, how: str
) -> None:
    """close(), a with block's exit or the stream manager's exit counts it, not garbage collection."""
    stats = anchortrack.tracker(client).stats
    history = [user("stream me")]
    gc.disable()
    try:
        if how == "close":
            stream = client.responses.create(model="scripted", input=history, stream=True)
            next(iter(stream))
            stream.close()
        elif how == "with":
            with client.responses.create(model="scripted", input=history, stream=True) as stream:
                next(iter(stream))
        else:
            with client.responses.stream(model="scripted", input=history) as manager:
                next(iter(manager))
        counted = dict(stats.not_recorded)
    finally:
        gc.enable()

    assert {"stream_abandoned": 1} == counted
    gc.collect()
    assert {"stream_abandoned": 1} == dict(stats.not_recorded)  # counted once
    assert 0 == stats.recorded


async def test_an_abandoned_async_stream_is_counted_at_close(aclient: openai.AsyncOpenAI) -> None:
    """The async twin: `async with` exit counts the abandoned stream at once."""
    stats = anchortrack.tracker(aclient).stats
    async with await aclient.responses.create(model="scripted", input=[user("hi")], stream=True) as stream:
        async for _ in stream:
            break

    assert {"stream_abandoned": 1} == dict(stats.not_recorded)


def test_a_stream_read_to_the_end_is_not_abandoned(client: openai.OpenAI) -> None:
    """Reading every event then closing records the response and counts nothing as abandoned."""
    with client.responses.create(model="scripted", input=[user("hi")], stream=True) as stream:
        list(stream)

    stats = anchortrack.tracker(client).stats
    assert (1, {}) == (stats.recorded, dict(stats.not_recorded))


# -- the table of counters and histograms (`METRICS`) ----------------------------------------------

#: The snapshot keys and Prometheus families users read: none goes or moves, whatever the table's shape
#: (a new row adds its own).
SNAPSHOT_KEYS = [
    "requests", "resends", "stateless", "recorded", "recorded_local", "not_recorded", "store_errors",
    "anchors_rejected", "chains_dropped", "store_stalls", "backlog", "items_sent", "items_total",
    "items_planned", "bytes_sent", "bytes_stateless", "bytes_planned", "bytes_saved", "bytes_would_save",
    "plan_seconds", "delta_items",
]  # fmt: skip
FAMILIES = {
    "anchortrack_requests", "anchortrack_resends", "anchortrack_responses_recorded",
    "anchortrack_responses_recorded_local", "anchortrack_responses_not_recorded", "anchortrack_store_errors",
    "anchortrack_anchors_rejected", "anchortrack_chains_dropped", "anchortrack_store_stalls",
    "anchortrack_backlog_queued", "anchortrack_backlog_written", "anchortrack_backlog_dropped",
    "anchortrack_backlog_anchors", "anchortrack_request_items", "anchortrack_request_bytes",
    "anchortrack_plan_seconds", "anchortrack_delta_items",
}  # fmt: skip


def test_the_snapshot_keys_and_families_are_kept() -> None:
    """The table makes the snapshot keys (in their order; the backlog's) and Prometheus families users
    read, and more only as rows are added."""
    snap = Stats().snapshot()

    assert SNAPSHOT_KEYS == [key for key in snap if key in SNAPSHOT_KEYS]
    assert {"queued": 0, "written": 0, "dropped": {"overflow": 0, "expired": 0}, "size": 0} == snap["backlog"]
    assert FAMILIES <= {m.metric for m in METRICS if m.metric} | {"anchortrack_requests"}


@pytest.mark.parametrize("metric", [m for m in METRICS if m.field], ids=lambda m: m.key)
def test_a_row_counted_from_outcomes_names_an_outcome_field(metric: Metric) -> None:
    """A row's field is an `Outcome` field (so `observe` has data for it): a numeric one, or a label's; or
    a histogram's ``"a - b"`` of two numeric ones."""
    fields = attrs.fields_dict(Outcome)

    names = metric.field.split(" - ")
    assert set(names) <= set(fields), f"{metric.key}: Outcome has no field {metric.field!r}"
    assert len(names) == 1 or (metric.bounds and all(fields[name].type == "int" for name in names))
    assert metric.gauge is False
    assert metric.difference is None


def test_every_histogram_observes_an_outcome_field() -> None:
    """A histogram row without a field would be exported with no data: there is none."""
    assert [] == [m.key for m in METRICS if m.bounds and m.field is None]


def test_the_names_stats_add_takes_are_the_rows_without_a_field() -> None:
    """`Counted` (the names `Stats.add` takes) lists exactly the counted rows no `Outcome` feeds."""
    added = {m.key for m in METRICS if m.field is None and m.difference is None and not m.gauge}

    assert set(typing.get_args(Counted)) == added


def test_every_row_is_described_and_every_family_helped() -> None:
    """Each row says what it counts (docs/operations.md); a Prometheus family's first row gives its help."""
    first: dict[str, Metric] = {}
    for m in METRICS:
        assert m.doc, m.key
        if m.metric is not None:
            first.setdefault(m.metric, m)
    assert [] == [name for name, m in first.items() if not m.help]
    assert len({m.key for m in METRICS}) == len(METRICS)


def test_observe_counts_every_row_from_outcomes_that_have_its_data() -> None:
    """Outcomes that set every field (chained, resent, stateless) move every row an `Outcome` feeds."""
    stats = Stats()
    numbers = {name: 3 for name, f in attrs.fields_dict(Outcome).items() if f.type in ("int", "int | None")}
    for decision, reason in [
        (Decision.CHAINED, Reason.CHAINED),
        (Decision.RESENT, Reason.STALE_ANCHOR),
        (Decision.STATELESS, Reason.NO_HISTORY),
    ]:
        stats.observe(Outcome(mode="chained", transport="http", decision=decision, reason=reason,
                              plan_seconds=0.001, **numbers))  # fmt: skip
    snap = stats.snapshot()

    for m in METRICS:
        if m.field is not None:
            value = value_of(m, snap)
            moved = value["count"] if m.bounds else sum(value.values()) if m.label else value
            assert moved > 0, m.key
    assert 3 * 3 == snap["items_sent"]
    assert {"count": 1, "sum": 3} == {k: snap["delta_items"][k] for k in ("count", "sum")}
    assert {"stale_anchor": 1} == snap["resends"]
    assert {"no_history": 1} == snap["stateless"]
