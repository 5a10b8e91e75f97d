"""
I11 for streams: the one private seam a tracked stream attaches to is the SDK's ``Stream._iterator``
(``AsyncStream._iterator``), which a tracer's own stream class (logfire's) keeps. Where it is gone,
or a tracer's stream class iterates around it, the stream goes through exactly as unwrapped, the next
call is sent in full, and one ``RuntimeWarning`` names what could not attach.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai import AsyncStream, Stream

import anchortrack
from anchortrack import _stream
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import assert_server_saw
from .test_tracers import _aconverse, _chained, _close_clients, _converse, _raw


__all__ = ["_close_clients"]  # its clients closed in its own loop, like test_tracers' (autouse)


@pytest.fixture(autouse=True)
def _warn_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "_warned", set(), raising=False)


def _without_iterator(monkeypatch: pytest.MonkeyPatch, cls: type[Any]) -> None:
    """An SDK whose streams keep their event iterator under another name."""
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._events = self.__dict__.pop("_iterator")

    monkeypatch.setattr(cls, "__init__", __init__)
    if cls is Stream:

        def __iter__(self: Any) -> Iterator[Any]:
            yield from self._events

        monkeypatch.setattr(cls, "__iter__", __iter__)
        monkeypatch.setattr(cls, "__next__", lambda self: next(self._events))
    else:

        async def __aiter__(self: Any) -> AsyncIterator[Any]:
            async for event in self._events:
                yield event

        async def __anext__(self: Any) -> Any:
            return await anext(self._events)

        monkeypatch.setattr(cls, "__aiter__", __aiter__)
        monkeypatch.setattr(cls, "__anext__", __anext__)


def _one_warning(caught: list[warnings.WarningMessage], names: str) -> None:
    (warning,) = [w for w in caught if w.category is not ResourceWarning]  # others' unclosed sockets
    assert warning.category is RuntimeWarning
    assert names in str(warning.message)
    assert "not recorded" in str(warning.message)


@pytest.mark.parametrize("form", ["create_stream", "manager"])
def test_without_the_streams_iterator_the_call_goes_through_and_one_warning_names_it(
    monkeypatch: pytest.MonkeyPatch, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    _without_iterator(monkeypatch, Stream)
    wrapped = anchortrack.wrap(_raw(server, wire, is_async=False), store=MemoryStore())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history, final = _converse(wrapped, form, turns=2)

    _one_warning(caught, "openai.Stream")
    assert "Stream._iterator" in str(caught[0].message)
    assert _chained(wire, 2) == [False, False]  # as the unwrapped client sends them
    assert_server_saw(server, final.id, history)


@pytest.mark.parametrize("form", ["create_stream", "manager"])
async def test_without_the_streams_iterator_the_call_goes_through_and_one_warning_names_it_async(
    monkeypatch: pytest.MonkeyPatch, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    _without_iterator(monkeypatch, AsyncStream)
    wrapped = anchortrack.wrap(_raw(server, wire, is_async=True), store=MemoryStore())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history, final = await _aconverse(wrapped, form, turns=2)

    _one_warning(caught, "openai.AsyncStream")
    assert "AsyncStream._iterator" in str(caught[0].message)
    assert _chained(wire, 2) == [False, False]
    assert_server_saw(server, final.id, history)


def _hands_its_stream_class(client: openai.OpenAI) -> openai.OpenAI:
    """
    Replaces ``client.request`` to hand the SDK its own stream class, as logfire does, but one that
    iterates the SDK's events itself rather than through ``_iterator``.
    """
    original = client.request

    def request(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("stream"):

            class AroundIterator(kwargs["stream_cls"]):  # type: ignore[misc,name-defined]
                def __iter__(self) -> Iterator[Any]:
                    yield from self.__stream__()

            kwargs["stream_cls"] = AroundIterator
        return original(*args, **kwargs)

    client.request = request  # type: ignore[method-assign]
    return client


def test_a_tracers_stream_class_iterating_around_the_seam_is_named_once(
    server: ResponsesServer, wire: WireTap
) -> None:
    wrapped = _hands_its_stream_class(
        anchortrack.wrap(_raw(server, wire, is_async=False), store=MemoryStore())
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history, final = _converse(wrapped, "create_stream", turns=3)

    _one_warning(caught, f"{__name__}._hands_its_stream_class.<locals>.request.<locals>.AroundIterator")
    assert "Stream.__iter__" in str(caught[0].message)
    assert _chained(wire, 3) == [False, False, False]
    assert_server_saw(server, final.id, history)
