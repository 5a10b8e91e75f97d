"""The tracker's fail-open entry (`_call` / `_acall`), written once for sync and async, and its repr."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from anchortrack import Tracker
from anchortrack._flow import Evict

from .helpers import SCOPE, DictStore, assistant, response, turn, user


class SDK:
    """Stands in for the SDK's create: records each body sent, answers or raises as scripted."""

    def __init__(self, *answers: object) -> None:
        self.bodies: list[Mapping[str, Any]] = []
        self.answers = list(answers)

    def __call__(self, body: Mapping[str, Any]) -> Any:
        self.bodies.append(body)
        answer = self.answers.pop(0) if self.answers else response([assistant("ok")])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def asend(self, body: Mapping[str, Any]) -> Any:
        return self(body)


class Stale(Exception):
    """The server forgot the anchor."""

    status_code = 404
    code = "previous_response_not_found"
    param = "previous_response_id"
    message = "gone"


def _chainable() -> tuple[DictStore, list[Any]]:
    store = DictStore()
    u1, a1 = user("one"), assistant("ONE")
    turn(store, [u1], [a1])
    return store, [u1, a1, user("two")]


def _call(tracker: Tracker, params: dict[str, Any], sdk: SDK, *, is_async: bool) -> Any:
    if is_async:
        return asyncio.run(tracker._calls.acall(params, lambda: SCOPE, sdk.asend))
    return tracker._calls.call(params, lambda: SCOPE, sdk)


@pytest.mark.parametrize("is_async", [False, True])
def test_a_fault_while_planning_sends_the_call_unchanged(is_async: bool) -> None:
    """An input of no Responses shape faults in planning: the params go out as given, with a warning."""
    tracker = Tracker(DictStore())
    sdk = SDK()
    params = {"model": "m", "input": 42}

    with capture_logs() as logs:
        _call(tracker, params, sdk, is_async=is_async)

    assert [params] == sdk.bodies
    assert ["anchortrack.tracker_fault"] == [e["event"] for e in logs if e["log_level"] == "warning"]
    assert 1 == tracker.stats.count("passthrough", "internal_error")


@pytest.mark.parametrize("is_async", [False, True])
def test_what_the_sdk_raises_reaches_the_caller_unchanged(is_async: bool) -> None:
    """After sending, the SDK's own error is re-raised, not passed through again."""
    store, history = _chainable()
    tracker = Tracker(store)
    error = RuntimeError("rate limited")
    sdk = SDK(error)

    with pytest.raises(RuntimeError) as raised:
        _call(tracker, {"model": "m", "input": history}, sdk, is_async=is_async)

    assert raised.value is error
    assert 1 == len(sdk.bodies)


@pytest.mark.parametrize("is_async", [False, True])
def test_a_fault_after_a_refused_send_resends_the_call_as_given(
    is_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of anchortrack's own between a stale refusal and the resend still sends the caller's call."""
    store, history = _chainable()
    tracker = Tracker(store)
    failopen = tracker.failopen
    perform, aperform = failopen.perform, failopen.aperform

    def evict_fails(effect: object) -> Any:  # the eviction comes after the refusal, before the resend
        return _boom() if isinstance(effect, Evict) else perform(effect)

    async def aevict_fails(effect: object) -> Any:
        return _boom() if isinstance(effect, Evict) else await aperform(effect)

    monkeypatch.setattr(failopen, "perform", evict_fails)
    monkeypatch.setattr(failopen, "aperform", aevict_fails)
    sdk = SDK(Stale())
    params = {"model": "m", "input": history}

    result = _call(tracker, params, sdk, is_async=is_async)

    assert "previous_response_id" in sdk.bodies[0]
    assert params is sdk.bodies[1]
    assert "completed" == result.status


@pytest.mark.parametrize("is_async", [False, True])
def test_a_fault_after_an_answer_returns_that_answer_without_sending_again(
    is_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the SDK answered, a later fault never sends the call a second time."""
    tracker = Tracker(DictStore())
    flush = "aflush" if is_async else "flush"
    calls = [0]

    def failing_second(*_: object) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("bug")
        return asyncio.sleep(0) if is_async else None

    monkeypatch.setattr(tracker.failopen, flush, failing_second)  # the write after the answer fails
    answer = response([assistant("ok")])
    sdk = SDK(answer)

    assert answer is _call(tracker, {"model": "m", "input": [user("hi")]}, sdk, is_async=is_async)
    assert 2 == calls[0]
    assert 1 == len(sdk.bodies)


def test_reprs_read_well() -> None:
    """Tracker and Stats reprs give the mode, the store and the headline counters."""
    store, history = _chainable()
    tracker = Tracker(store, mode="shadow", namespace="team-a")
    tracker._calls.call({"model": "m", "input": history}, lambda: SCOPE, SDK())

    summary = (
        "requests 1 (shadow 1: would chain 1); input bytes ~247 sent of ~247 stateless (100%), saved ~0, "
        "chaining would send ~81 (33%); recorded 0"
    )
    assert repr(tracker) == f"<Tracker mode=shadow store=DictStore namespace='team-a' {summary}>"
    assert repr(tracker.stats) == f"<Stats {summary}>"
    assert str(tracker.stats) == summary


@pytest.mark.parametrize(
    ("setting", "value", "error", "message"),
    [
        ("store_timeout", 0, ValueError, "Tracker(store_timeout=0): must be more than 0 seconds"),
        ("store_timeout", float("inf"), ValueError, "Tracker(store_timeout=inf): must be a finite number"),
        ("store_timeout", float("nan"), ValueError, "Tracker(store_timeout=nan): must be more than 0"),
        ("store_timeout", "1", TypeError, "Tracker(store_timeout=...) takes seconds (a number), not str"),
        ("store_cooldown", -1, ValueError, "Tracker(store_cooldown=-1): must be 0 seconds or more"),
        ("store_cooldown", float("inf"), ValueError, "Tracker(store_cooldown=inf): must be a finite number"),
        ("store_cooldown", True, TypeError, "Tracker(store_cooldown=...) takes seconds (a number), not bool"),
    ],
)
def test_store_times_are_checked_at_construction_and_on_a_live_tracker(
    setting: str, value: object, error: type[Exception], message: str
) -> None:
    """A time the store calls could not wait (inf overflows a thread's wait) is refused, never stored."""
    with pytest.raises(error, match=re.escape(message)):
        Tracker(DictStore(), **{setting: value})  # type: ignore[arg-type]
    tracker = Tracker(DictStore())
    with pytest.raises(error, match=re.escape(message)):
        setattr(tracker, setting, value)
    assert 1.0 == getattr(tracker, setting)


def test_store_cooldown_is_a_knob() -> None:
    """store_cooldown is set at construction and on a live tracker."""
    tracker = Tracker(DictStore(), store_cooldown=2.0)
    assert 2.0 == tracker.store_cooldown
    tracker.store_cooldown = 0.0
    assert 0.0 == tracker.store_cooldown


def _boom(*_: object, **__: object) -> None:
    raise RuntimeError("bug")


def test_a_setting_left_out_is_none_and_takes_its_default() -> None:
    """None means "not given" for the store timeout and cooldown, as in wrap(): each is then 1 second."""
    default = Tracker(DictStore(), store_timeout=None, store_cooldown=None)
    given = Tracker(DictStore(), store_timeout=2.0, store_cooldown=0.0)

    assert (1.0, 1.0) == (default.store_timeout, default.store_cooldown)
    assert (2.0, 0.0) == (given.store_timeout, given.store_cooldown)
