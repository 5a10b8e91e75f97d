"""
``anchortrack.wrap`` refuses mistakes at wrap time, accepts store specs, and wraps once.

A mistake that used to pass silently (and then sent every call in full as ``internal_error``)
must fail loudly here, with a message that names what was given and what is accepted.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.stores import MemoryStore, SQLiteStore

from .helpers import ask, user


ACCEPTED = "store= takes an AnchorStore instance (MemoryStore(), SQLiteStore(path), RedisStore.from_url(url))"


@pytest.mark.parametrize(
    ("store", "given"),
    [
        (
            "anchors.db",
            "store='anchors.db' is not a store spec (did you mean store='sqlite:anchors.db'?)",
        ),
        ("memroy", "store='memroy' is not a store spec"),
        ("postgres://db/anchors", "store='postgres://db/anchors' is not a store spec;"),
        (
            MemoryStore,
            "store=MemoryStore is the class, not a store; pass an instance such as MemoryStore(...)",
        ),
        ({}, "store={} is a dict, not an anchor store"),
        (42, "store=42 is a int, not an anchor store"),
    ],
)
def test_a_store_that_is_not_one_fails_at_wrap_time(
    raw_client: openai.OpenAI, store: object, given: str
) -> None:
    """Wrong store values raise TypeError naming the value and what store= accepts."""
    with pytest.raises(TypeError) as error:
        anchortrack.wrap(raw_client, store=store)  # type: ignore[arg-type]

    message = str(error.value)
    assert message.startswith("anchortrack.wrap(): " + given)
    assert ACCEPTED in message
    assert "or a store spec string ('memory', 'sqlite:PATH', 'redis://HOST[:PORT][/DB]')" in message


def test_store_specs_open_the_store(raw_client: openai.OpenAI, tmp_path: Path) -> None:
    """The command line's spellings work: 'memory' is a new private store, 'sqlite:PATH' a file."""
    memory = anchortrack.wrap(raw_client, store="memory")
    db = tmp_path / "anchors.db"
    client = anchortrack.wrap(raw_client, store=f"sqlite:{db}")

    history, _ = ask(client, [], "one")
    ask(client, history, "two")

    store = anchortrack.tracker(client).store
    assert isinstance(anchortrack.tracker(memory).store, MemoryStore)
    assert anchortrack.tracker(memory).store is not anchortrack.tracker(anchortrack.wrap(raw_client)).store
    assert isinstance(store, SQLiteStore)
    assert db.exists()
    assert 1 == anchortrack.tracker(client).stats.count("chained")
    store.close()


def test_tracker_validates_its_store_too() -> None:
    """anchortrack.Tracker, the public class under wrap(), gives the same error."""
    with pytest.raises(TypeError, match=r"^Tracker\(\): store=set\(\) is a set, not an anchor store"):
        anchortrack.Tracker(set())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"mode": "chain"},
            ValueError,
            "unknown anchortrack mode 'chain'; expected one of: chained, shadow, off",
        ),
        ({"namespace": 7}, TypeError, "anchortrack.wrap(namespace=...) takes a string or None, not int"),
        (
            {"store_timeout": "1"},
            TypeError,
            "anchortrack.wrap(store_timeout=...) takes seconds (a number), not str",
        ),
        ({"store_timeout": 0}, ValueError, "anchortrack.wrap(store_timeout=0): must be more than 0 seconds"),
        (
            {"store_timeout": float("inf")},
            ValueError,
            "anchortrack.wrap(store_timeout=inf): must be a finite number of seconds",
        ),
    ],
)
def test_other_arguments_are_checked(
    raw_client: openai.OpenAI, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    """mode, namespace and store_timeout are checked at wrap time too."""
    with pytest.raises(error) as raised:
        anchortrack.wrap(raw_client, **kwargs)  # type: ignore[arg-type]

    assert message == str(raised.value)


def test_wrapping_a_wrapped_client_returns_it(raw_client: openai.OpenAI) -> None:
    """wrap(wrap(client)) is the same client with the same tracker: the inner tracker keeps counting."""
    client = anchortrack.wrap(raw_client, mode="shadow", namespace="n")

    again = anchortrack.wrap(client)
    same = anchortrack.wrap(client, mode="shadow", namespace="n")
    ask(again, [], "one")

    assert again is client
    assert same is client
    assert 1 == anchortrack.tracker(client).stats.count()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"mode": "chained"}, "mode"),
        ({"namespace": "other"}, "namespace"),
        ({"store": "memory"}, "store"),
        ({"record_incomplete": True, "store_timeout": 3.0}, "record_incomplete, store_timeout"),
        ({"scope_by_api_key": False}, "scope_by_api_key"),
    ],
)
def test_rewrapping_with_other_settings_raises(
    raw_client: openai.OpenAI, kwargs: dict[str, object], named: str
) -> None:
    """Asking a wrapped client for other settings is refused, naming them."""
    client = anchortrack.wrap(raw_client, mode="shadow", namespace="n")

    with pytest.raises(ValueError, match=f"already wrapped by anchortrack with other settings \\({named}\\)"):
        anchortrack.wrap(client, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ({"store_timeout": 2.0}, {"store_timeout": 1.0}),
        ({"record_incomplete": True}, {"record_incomplete": False}),
        ({"scope_by_api_key": False}, {"scope_by_api_key": True}),
    ],
)
def test_rewrapping_with_a_default_value_asks_for_it(
    raw_client: openai.OpenAI, first: dict[str, object], again: dict[str, object]
) -> None:
    """A setting given its default value is asked for (only None is "not given"): a wrapped client with
    another value refuses it, naming it, and the same client wrapped without it is returned as it is."""
    client = anchortrack.wrap(raw_client, **first)  # type: ignore[arg-type]
    (name,) = again

    with pytest.raises(ValueError, match=f"other settings \\({name}\\)"):
        anchortrack.wrap(client, **again)  # type: ignore[arg-type]
    assert anchortrack.wrap(client) is client
    assert anchortrack.wrap(client, **first) is client  # type: ignore[arg-type]
    assert getattr(anchortrack.tracker(client), name) == first[name]


# -- tracebacks: the caller's code and the SDK's, not anchortrack's internals -----------------

_PACKAGE = str(Path(anchortrack.__file__).parent)


def _ours(error: BaseException) -> int:
    """How many frames of *error*'s traceback are inside the anchortrack package."""
    return sum(
        1 for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith(_PACKAGE)
    )


def _same_error(raw: openai.APIStatusError, wrapped: openai.APIStatusError) -> None:
    assert type(raw) is type(wrapped)
    assert (raw.message, raw.body, raw.status_code) == (wrapped.message, wrapped.body, wrapped.status_code)
    assert type(raw.__cause__) is type(wrapped.__cause__)
    assert raw.__suppress_context__ == wrapped.__suppress_context__


_BAD = {"model": "scripted", "max_output_tokens": 1}  # the local server's 400, no anchor involved


def _fail(client: openai.OpenAI, form: str, history: list[Any]) -> openai.APIStatusError:
    def call() -> None:
        if form == "manager":
            with client.responses.stream(input=history, **_BAD) as stream:
                stream.get_final_response()
        else:
            client.responses.create(input=history, stream=form == "stream", **_BAD)

    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


async def _afail(client: openai.AsyncOpenAI, form: str, history: list[Any]) -> openai.APIStatusError:
    async def call() -> None:
        if form == "manager":
            async with client.responses.stream(input=history, **_BAD) as stream:
                await stream.get_final_response()
        else:
            await client.responses.create(input=history, stream=form == "stream", **_BAD)

    with pytest.raises(openai.APIStatusError) as caught:
        await call()
    return caught.value


@pytest.mark.parametrize("form", ["create", "stream", "manager"])
def test_an_api_error_shows_at_most_two_anchortrack_frames(
    raw_client: openai.OpenAI, client: openai.OpenAI, form: str
) -> None:
    """A 400 through a wrapped client (stateless and chained) is the SDK's error, with the SDK's frames."""
    history, _ = ask(client, [], "one")
    for attempt in ([user("alone")], [*history, user("two")]):  # stateless, then chained
        wrapped = _fail(client, form, attempt)
        raw = _fail(raw_client, form, attempt)

        assert _ours(wrapped) <= 2, traceback.format_tb(wrapped.__traceback__)
        _same_error(raw, wrapped)


@pytest.mark.parametrize("form", ["create", "stream", "manager"])
async def test_an_api_error_shows_at_most_two_anchortrack_frames_async(
    raw_aclient: openai.AsyncOpenAI, aclient: openai.AsyncOpenAI, form: str
) -> None:
    """The async twin."""
    first = await aclient.responses.create(model="scripted", input=[user("one")])
    history = [user("one"), *first.output]
    for attempt in ([user("alone")], [*history, user("two")]):
        wrapped = await _afail(aclient, form, attempt)
        raw = await _afail(raw_aclient, form, attempt)

        assert _ours(wrapped) <= 2, traceback.format_tb(wrapped.__traceback__)
        _same_error(raw, wrapped)
