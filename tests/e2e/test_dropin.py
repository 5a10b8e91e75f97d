"""
A wrapped client is a drop-in for the one it wraps: every option, the SDK's
signatures and docstrings, and ``client.beta.responses`` tracked too.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

import openai
import pytest
import typing_extensions

import anchortrack
from anchortrack.server import ResponsesServer, WireTap, http_client_classes

from ..helpers import assert_server_saw, sent


HAS_BETA_RESPONSES = hasattr(openai.resources.beta.Beta, "responses")
ASK = 'weather please\n!call weather {"city": "Paris"}\n!call weather {"city": "Oslo"}\n!rounds 2'
TOOLS = [
    {
        "type": "function",
        "name": "weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]


def _mock_http(handler: Callable[[Any], Any], *, is_async: bool = False) -> Any:
    """The SDK's own HTTP client class on an in-process transport."""
    sync, asyn = http_client_classes()
    # httpx2 under openai 3.x, httpx under 2.x (as `http_client_classes`).
    http = importlib.import_module("httpx2" if int(openai.__version__.split(".")[0]) >= 3 else "httpx")
    transport = http.MockTransport(handler)
    return (asyn if is_async else sync)(transport=transport)


def _state(client: Any) -> dict[str, Any]:
    """A client's attributes, without anchortrack's and without cached resources."""
    cls = anchortrack._client._untracked_class(type(client))
    return {
        name: value
        for name, value in vars(client).items()
        if name != "_anchortrack_tracker" and not anchortrack._patches.is_cached(cls, name)
    }


# -- defect 1: every constructor option is carried over --------------------------------------------


def test_every_option_of_the_original_is_carried_over(server: ResponsesServer) -> None:
    """Private options, public ones and attributes the SDK may add later all reach the wrapped client."""
    original = openai.OpenAI(
        base_url=server.base_url,
        api_key="k",
        organization="org",
        project="proj",
        max_retries=7,
        timeout=12.5,
        default_headers={"x-h": "1"},
        default_query={"q": "1"},
        _strict_response_validation=True,
    )
    original.future_option = object()  # an option a later SDK might add
    original.responses  # a cached resource, bound to the original  # noqa: B018
    before = dict(vars(original))

    wrapped = anchortrack.wrap(original)

    assert _state(original) == _state(wrapped)
    assert wrapped.future_option is original.future_option
    assert wrapped._strict_response_validation is True
    assert wrapped._client is original._client  # one connection pool
    assert wrapped.responses._client is wrapped  # resources are the wrapped client's own
    # The original is untouched, and the two do not share mutable option containers.
    assert before == vars(original)
    assert type(original.responses) is openai.resources.responses.Responses
    wrapped._custom_headers["x-only-wrapped"] = "1"
    assert "x-only-wrapped" not in original._custom_headers


@pytest.mark.parametrize("strict", [True, False])
def test_strict_response_validation_is_kept(strict: bool) -> None:
    """Issue 11 reproduction: a response that fails validation unwrapped must fail wrapped."""

    def reply(request: Any) -> Any:
        module = sys.modules[type(request).__module__.split(".")[0]]
        return module.Response(200, json={"id": "resp_1", "object": "response", "output": "not a list"})

    original = openai.OpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        http_client=_mock_http(reply),
        max_retries=0,
        _strict_response_validation=strict,
    )
    wrapped = anchortrack.wrap(original)
    for client in (original, wrapped):
        if strict:
            with pytest.raises(openai.APIResponseValidationError):
                client.responses.create(model="m", input="hi")
        else:
            assert "resp_1" == client.responses.create(model="m", input="hi").id


@pytest.mark.skipif(
    "_enforce_credentials" not in inspect.signature(openai.OpenAI).parameters,
    reason="the SDK's client has no _enforce_credentials",
)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_enforce_credentials_false_is_kept(
    server: ResponsesServer, monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    """Issue 11 reproduction: wrapping a valid client built without credentials must not raise."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    original = cls(base_url=server.base_url, api_key=None, _enforce_credentials=False)
    with pytest.raises(openai.OpenAIError, match=r"credentials|api_key"):
        original.copy()  # what wrap() used to do

    wrapped = anchortrack.wrap(original)

    assert isinstance(wrapped, cls)
    assert _state(original) == _state(wrapped)


@pytest.mark.parametrize("method", ["copy", "with_options"])
def test_copy_and_with_options_match_the_sdk_and_keep_the_tracker(
    server: ResponsesServer, method: str
) -> None:
    """copy()/with_options() on a wrapped client give what the SDK's give, tracked by the same tracker."""
    original = openai.OpenAI(base_url=server.base_url, api_key="k", _strict_response_validation=True)
    wrapped = anchortrack.wrap(original)

    plain = getattr(original, method)(max_retries=4)
    tracked = getattr(wrapped, method)(max_retries=4)

    assert type(tracked) is type(wrapped)
    assert anchortrack.tracker(tracked) is anchortrack.tracker(wrapped)
    assert _state(plain).keys() == _state(tracked).keys()
    for name in ("max_retries", "_strict_response_validation", "api_key", "_base_url", "timeout"):
        assert getattr(plain, name) == getattr(tracked, name)
    assert type(tracked.responses) is type(wrapped.responses)


# -- defect 2: the SDK's signatures and docstrings -----------------------------------------------

_METHODS = ["responses.create", "responses.parse", "copy", "with_options"]
if hasattr(openai.resources.responses.Responses, "connect"):  # WebSocket mode (openai >= 2.22)
    _METHODS.append("responses.connect")
if HAS_BETA_RESPONSES:
    _METHODS.append("beta.responses.create")


def _attr(obj: Any, dotted: str) -> Any:
    return functools.reduce(getattr, dotted.split("."), obj)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("dotted", _METHODS)
def test_signatures_and_docstrings_are_the_sdks(is_async: bool, dotted: str) -> None:
    """inspect.signature, __doc__, overloads and coroutine-ness equal the installed SDK's."""
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    original = cls(api_key="k")
    wrapped = anchortrack.wrap(original)
    sdk, ours = _attr(original, dotted), _attr(wrapped, dotted)

    assert ours.__func__ is not sdk.__func__  # really overridden
    assert inspect.signature(sdk) == inspect.signature(ours)
    assert str(inspect.signature(sdk)) == str(inspect.signature(ours))
    assert sdk.__doc__ == ours.__doc__
    assert sdk.__name__ == ours.__name__
    assert inspect.iscoroutinefunction(sdk) == inspect.iscoroutinefunction(ours)
    overloads = typing_extensions.get_overloads(ours)
    assert typing_extensions.get_overloads(sdk) == overloads
    if dotted.endswith("create") and sys.version_info >= (3, 11):
        # create()'s documentation lives on its overloads, as in the SDK.
        assert overloads
        assert all(o.__doc__ for o in overloads)
    if dotted in ("copy", "with_options"):
        assert ours.__doc__  # (parse() has one in openai 3.x, none in 2.x: equal to the SDK's either way)


def test_signature_is_not_the_generic_one() -> None:
    """The issue's symptom — (**params) and (*args, **kwargs) — is gone."""
    wrapped = anchortrack.wrap(openai.OpenAI(api_key="k"))
    assert "model" in inspect.signature(wrapped.responses.create).parameters
    assert "params" not in inspect.signature(wrapped.responses.create).parameters
    assert "max_retries" in inspect.signature(wrapped.with_options).parameters
    assert "args" not in inspect.signature(wrapped.copy).parameters


def test_resource_properties_keep_their_docs() -> None:
    wrapped = anchortrack.wrap(openai.OpenAI(api_key="k"))
    for name in ("responses", "beta"):
        sdk = inspect.getattr_static(openai.OpenAI, name)
        ours = inspect.getattr_static(type(wrapped), name)
        assert sdk.__doc__ == ours.__doc__


# -- defect 3: client.beta.responses is tracked -----------------------------------------------------

beta_only = pytest.mark.skipif(not HAS_BETA_RESPONSES, reason="this openai version has no beta Responses")


@beta_only
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_beta_connect_is_the_sdks_own(is_async: bool) -> None:
    """Only the beta resource's ``create`` is tracked: its ``connect()`` sockets go out as the SDK makes
    them (tracking them broke the SDK's Azure key policy across a reconnect: its own tests)."""
    client = (openai.AsyncOpenAI if is_async else openai.OpenAI)(api_key="k")
    wrapped = anchortrack.wrap(client)
    beta = type(wrapped.beta.responses)
    sdk = type(client.beta.responses)
    assert beta is not sdk
    assert beta.create is not sdk.create
    if hasattr(sdk, "connect"):
        assert beta.connect is sdk.connect
    stable = type(client.responses)
    if hasattr(stable, "connect"):  # WebSocket mode (openai >= 2.22): tracked on the stable resource
        assert type(wrapped.responses).connect is not stable.connect


@beta_only
def test_beta_tool_loop_chains_end_to_end(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """A tool loop on client.beta.responses sends previous_response_id + exactly the tool outputs."""
    history: list[Any] = [{"role": "user", "content": ASK}]
    previous: str | None = None
    expected: list[Any] | None = None
    rounds = 0
    for _ in range(6):
        resp = client.beta.responses.create(model="scripted", input=history, tools=TOOLS)
        assert type(resp).__name__ == "BetaResponse"
        body = sent(wire)
        if previous is not None:
            assert previous == body["previous_response_id"]
            assert expected == body["input"]
        else:
            assert "previous_response_id" not in body
        assert_server_saw(server, resp.id, history)
        history += resp.output
        calls = [item for item in resp.output if item.type == "function_call"]
        if not calls:
            break
        rounds += 1
        expected = [
            {
                "type": "function_call_output",
                "call_id": c.call_id,
                "output": f"sunny in {json.loads(c.arguments)['city']}",
            }
            for c in calls
        ]
        history += expected
        previous = resp.id

    assert 2 == rounds
    texts = [part.text for item in resp.output if item.type == "message" for part in item.content]
    assert texts[0].startswith("tool results: sunny in Paris | sunny in Oslo")
    stats = anchortrack.tracker(client).stats.snapshot()
    assert 3 == stats["recorded"]


@beta_only
async def test_async_beta_stream_chains_and_records(
    server: ResponsesServer, aclient: openai.AsyncOpenAI, wire: WireTap
) -> None:
    """Async beta streams yield the SDK's beta event types and record at completion."""
    history: list[Any] = [{"role": "user", "content": ASK}]
    stream = await aclient.beta.responses.create(model="scripted", input=history, tools=TOOLS, stream=True)
    events = [event async for event in stream]
    assert all(type(e).__module__.startswith("openai.types.beta") for e in events)
    first = events[-1].response
    history += [*first.output]
    history += [
        {"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in first.output
    ]

    second = await aclient.beta.responses.create(model="scripted", input=history, tools=TOOLS)

    assert first.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, second.id, history)


@beta_only
def test_beta_raw_response_and_stream_are_tracked(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    history: list[Any] = [{"role": "user", "content": "one"}]
    with client.beta.responses.create(model="scripted", input=history, stream=True) as stream:
        events = list(stream)
    first = events[-1].response
    history += [*first.output, {"role": "user", "content": "two"}]

    raw = client.beta.responses.with_raw_response.create(model="scripted", input=history)

    assert first.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, raw.parse().id, history)


@beta_only
def test_beta_stale_anchor_is_recovered(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """Recovery is the same: a forgotten anchor is evicted and the call resent in full."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.beta.responses.create(model="scripted", input=history)
    history += [*first.output, {"role": "user", "content": "two"}]
    server.state.drop(first.id)
    before = len(wire.bodies)

    second = client.beta.responses.create(model="scripted", input=history)

    assert 2 == len(wire.bodies) - before
    assert first.id == sent(wire, -2)["previous_response_id"]
    assert "previous_response_id" not in sent(wire)
    assert_server_saw(server, second.id, history)
    assert {"stale_anchor": 1} == anchortrack.tracker(client).stats.snapshot()["resends"]


@beta_only
def test_beta_and_stable_resources_share_one_tracker(
    server: ResponsesServer, client: openai.OpenAI, wire: WireTap
) -> None:
    """A conversation started on client.responses continues chained on client.beta.responses."""
    history: list[Any] = [{"role": "user", "content": "one"}]
    first = client.responses.create(model="scripted", input=history)
    history += [*first.output, {"role": "user", "content": "two"}]

    second = client.beta.responses.create(model="scripted", input=history)

    assert first.id == sent(wire)["previous_response_id"]
    assert_server_saw(server, second.id, history)


def test_other_beta_resources_pass_through() -> None:
    wrapped = anchortrack.wrap(openai.OpenAI(api_key="k"))
    original = openai.OpenAI(api_key="k")
    assert type(wrapped.beta.assistants) is type(original.beta.assistants)
    assert isinstance(wrapped.beta, type(original.beta))
