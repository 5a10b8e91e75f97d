"""Sync and async twins offer the same methods (as ``tests/stores/test_package.py`` checks for stores)."""

from __future__ import annotations

import inspect

import openai
import pytest
from openai.resources.responses import AsyncResponses, Responses

import anchortrack
from anchortrack._client import _AsyncTrackedResponses, _TrackedResponses
from anchortrack._stream import AsyncStreamCall, StreamCall, _Call


def _own(cls: type) -> dict[str, object]:
    """The methods *cls* itself defines (not inherited), by name."""
    return {name: value for name, value in vars(cls).items() if callable(value) and name != "__init__"}


@pytest.mark.parametrize(
    ("sync", "asynchronous", "bases"),
    [
        (_TrackedResponses, _AsyncTrackedResponses, (Responses, AsyncResponses)),
        (StreamCall, AsyncStreamCall, (_Call, _Call)),
    ],
)
def test_twins_override_the_same_methods(sync: type, asynchronous: type, bases: tuple[type, type]) -> None:
    """Each twin overrides the same methods of its SDK base; the async ones are coroutines."""
    assert issubclass(sync, bases[0])
    assert issubclass(asynchronous, bases[1])
    assert set(_own(sync)) == set(_own(asynchronous))
    assert _own(sync)
    for name, method in _own(asynchronous).items():
        if name.startswith("_") and name != "__stream__":
            continue
        sdk = getattr(bases[1], name)
        if not (inspect.iscoroutinefunction(sdk) or inspect.isasyncgenfunction(sdk)):
            assert not inspect.iscoroutinefunction(method), name  # sync in the SDK too: connect()
            continue
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name
        assert inspect.signature(method).parameters == inspect.signature(_own(sync)[name]).parameters, name


def test_wrapped_twins_expose_the_same_public_methods() -> None:
    """A wrapped OpenAI and AsyncOpenAI client have the same public methods on ``responses``."""
    sync = anchortrack.wrap(openai.OpenAI(api_key="k", base_url="http://127.0.0.1:1/v1"))
    asynchronous = anchortrack.wrap(openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:1/v1"))

    def public(obj: object) -> set[str]:
        return {n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n))}

    assert public(sync.responses) == public(asynchronous.responses)
    assert isinstance(sync.responses, _TrackedResponses)
    assert isinstance(asynchronous.responses, _AsyncTrackedResponses)
