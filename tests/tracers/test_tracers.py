"""
I9: anchortrack beside the tracers users run: every call traced, chained, recovered, in both orders.

For each tracer pattern (see `helpers`), each order (the tracer applied before ``wrap()`` or
after it), sync and async, streamed (``create(stream=True)``, ``responses.stream()``) or not:

* the tracer records as many model calls through the wrapped client as through a plain one;
* the second and third calls of a conversation go out chained;
* a stale anchor refused inside the stream (HTTP 200, then an error event, as llama-stack
  does) is resent in full without the caller seeing it, whatever object the tracer returns
  around the stream;
* ``with_options()`` and ``copy()`` keep both the tracer and the chaining.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore

from ..helpers import assert_server_saw, sent, user
from .helpers import TRACERS, Tracer, wait_for


ORDERS = ["tracer_first", "wrap_first"]
FORMS = ["create", "create_stream", "manager"]


@pytest.fixture(params=list(TRACERS), name="tracer")
def _tracer(request: pytest.FixtureRequest) -> Iterator[Tracer]:
    with TRACERS[request.param]() as tracer:
        yield tracer


_opened: list[Any] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    """Close every client a test opened (the async ones in the test's own event loop)."""
    yield
    while _opened:
        client = _opened.pop()
        if isinstance(client, openai.AsyncOpenAI):
            await client.close()
        else:
            client.close()


def _raw(server: ResponsesServer, wire: WireTap, *, is_async: bool) -> Any:
    client: Any
    if is_async:
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="test", http_client=wire.async_http_client(), max_retries=0
        )
    else:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="test", http_client=wire.http_client(), max_retries=0
        )
    _opened.append(client)
    return client


def _clients(
    tracer: Tracer, order: str, server: ResponsesServer, wire: WireTap, *, is_async: bool
) -> tuple[Any, Any]:
    """(a plain client the tracer sees, the wrapped client built in *order*)."""
    store = MemoryStore()
    if tracer.apply is None:
        assert tracer.install is not None
        if order == "tracer_first":
            tracer.install()
            wrapped = anchortrack.wrap(_raw(server, wire, is_async=is_async), store=store)
        else:
            wrapped = anchortrack.wrap(_raw(server, wire, is_async=is_async), store=store)
            tracer.install()
        return _raw(server, wire, is_async=is_async), wrapped
    plain = tracer.apply(_raw(server, wire, is_async=is_async))
    raw = _raw(server, wire, is_async=is_async)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every pattern is carried over: no warning
        if order == "tracer_first":
            wrapped = anchortrack.wrap(tracer.apply(raw), store=store)
        else:
            wrapped = tracer.apply(anchortrack.wrap(raw, store=store))
    return plain, wrapped


def _call(client: Any, history: list[Any], form: str) -> Any:
    if form == "create":
        return client.responses.create(model="scripted", input=history)
    if form == "create_stream":
        events = list(client.responses.create(model="scripted", input=history, stream=True))
        return events[-1].response
    with client.responses.stream(model="scripted", input=history) as stream:
        return stream.get_final_response()


async def _acall(client: Any, history: list[Any], form: str) -> Any:
    if form == "create":
        return await client.responses.create(model="scripted", input=history)
    if form == "create_stream":
        events = [
            event
            async for event in await client.responses.create(model="scripted", input=history, stream=True)
        ]
        return events[-1].response
    async with client.responses.stream(model="scripted", input=history) as stream:
        return await stream.get_final_response()


def _converse(client: Any, form: str, turns: int = 3) -> tuple[list[Any], Any]:
    history: list[Any] = []
    final = None
    for turn in range(turns):
        history.append(user(f"turn {turn}"))
        final = _call(client, history, form)
        if turn < turns - 1:
            history.extend(item.model_dump(exclude_none=True) for item in final.output)
    return history, final


async def _aconverse(client: Any, form: str, turns: int = 3) -> tuple[list[Any], Any]:
    history: list[Any] = []
    final = None
    for turn in range(turns):
        history.append(user(f"turn {turn}"))
        final = await _acall(client, history, form)
        if turn < turns - 1:
            history.extend(item.model_dump(exclude_none=True) for item in final.output)
    return history, final


def _chained(wire: WireTap, count: int) -> list[bool]:
    return ["previous_response_id" in sent(wire, index) for index in range(-count, 0)]


def _expected(tracer: Tracer, calls: int) -> int:
    """How many of *calls* the tracer records on a plain client (none: it does not trace Responses)."""
    return calls if tracer.extra.get("responses_traced", True) else 0


def _traced(tracer: Tracer, at_least: int) -> int:
    wait_for(lambda: tracer.count() >= at_least)
    return tracer.count()


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("order", ORDERS)
def test_every_call_traced_and_chained(
    tracer: Tracer, order: str, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    """The tracer records as many calls as on a plain client; calls 2 and 3 are chained."""
    plain, wrapped = _clients(tracer, order, server, wire, is_async=False)
    tracer.reset()
    _converse(plain, form)
    on_plain = _traced(tracer, _expected(tracer, 3))
    tracer.reset()
    wire.bodies.clear()

    history, final = _converse(wrapped, form)

    assert on_plain == _expected(tracer, 3)
    assert _traced(tracer, on_plain) == on_plain
    assert _chained(wire, 3) == [False, True, True]
    assert_server_saw(server, final.id, history)


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("order", ORDERS)
async def test_every_call_traced_and_chained_async(
    tracer: Tracer, order: str, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    """The async twin."""
    plain, wrapped = _clients(tracer, order, server, wire, is_async=True)
    tracer.reset()
    await _aconverse(plain, form)
    on_plain = _traced(tracer, _expected(tracer, 3))
    tracer.reset()
    wire.bodies.clear()

    history, final = await _aconverse(wrapped, form)

    assert on_plain == _expected(tracer, 3)
    assert _traced(tracer, on_plain) == on_plain
    assert _chained(wire, 3) == [False, True, True]
    assert_server_saw(server, final.id, history)


@pytest.fixture(name="stale_in_stream")
def _stale_in_stream(server: ResponsesServer) -> Iterator[None]:
    server.state.stale_in_stream = True
    yield
    server.state.stale_in_stream = False


def _assert_recovered(
    wrapped: Any, wire: WireTap, server: ResponsesServer, history: list[Any], final: Any
) -> None:
    assert _chained(wire, 2) == [True, False]  # refused in the stream, then resent in full
    assert_server_saw(server, final.id, history)
    assert anchortrack.tracker(wrapped).stats.snapshot()["resends"] == {"stale_anchor": 1}


@pytest.mark.slow
@pytest.mark.usefixtures("stale_in_stream")
@pytest.mark.parametrize("form", ["create_stream", "manager"])
@pytest.mark.parametrize("order", ORDERS)
def test_a_stale_anchor_refused_inside_the_stream_is_recovered(
    tracer: Tracer, order: str, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    """Whatever the tracer returns around the stream, the refusal is peeked and the call resent."""
    _, wrapped = _clients(tracer, order, server, wire, is_async=False)
    history, first = _converse(wrapped, "create", turns=2)
    history.extend(item.model_dump(exclude_none=True) for item in first.output)
    server.state.drop(first.id)
    history.append(user("after the server forgot"))
    tracer.reset()

    final = _call(wrapped, history, form)

    _assert_recovered(wrapped, wire, server, history, final)
    assert _traced(tracer, _expected(tracer, 1)) >= _expected(tracer, 1)


@pytest.mark.slow
@pytest.mark.usefixtures("stale_in_stream")
@pytest.mark.parametrize("form", ["create_stream", "manager"])
@pytest.mark.parametrize("order", ORDERS)
async def test_a_stale_anchor_refused_inside_the_stream_is_recovered_async(
    tracer: Tracer, order: str, form: str, server: ResponsesServer, wire: WireTap
) -> None:
    """The async twin."""
    _, wrapped = _clients(tracer, order, server, wire, is_async=True)
    history, first = await _aconverse(wrapped, "create", turns=2)
    history.extend(item.model_dump(exclude_none=True) for item in first.output)
    server.state.drop(first.id)
    history.append(user("after the server forgot"))
    tracer.reset()

    final = await _acall(wrapped, history, form)

    _assert_recovered(wrapped, wire, server, history, final)
    assert _traced(tracer, _expected(tracer, 1)) >= _expected(tracer, 1)


@pytest.mark.parametrize("how", ["with_options", "copy"])
@pytest.mark.parametrize("order", ORDERS)
def test_with_options_and_copy_keep_the_tracer_and_the_chaining(
    tracer: Tracer, order: str, how: str, server: ResponsesServer, wire: WireTap
) -> None:
    """A client made from the wrapped one is traced and chains, whichever order built it."""
    _, wrapped = _clients(tracer, order, server, wire, is_async=False)
    derived = getattr(wrapped, how)(timeout=30)
    tracer.reset()
    wire.bodies.clear()

    _converse(derived, "create")

    assert _traced(tracer, _expected(tracer, 3)) == _expected(tracer, 3)
    assert _chained(wire, 3) == [False, True, True]


class _OpaqueTracer:
    """A patch anchortrack cannot rebuild: the original method is held in a C container (a deque)."""

    def __init__(self, inner: Any) -> None:
        self.inner = collections.deque([inner])
        self.calls = 0

    def __call__(self, **params: Any) -> Any:
        self.calls += 1
        return self.inner[0](**params)


def test_a_patch_that_cannot_be_carried_over_is_named_once_and_chaining_holds(
    server: ResponsesServer, wire: WireTap
) -> None:
    """wrap() warns once, naming the patch and the order that works; the wrapped client still chains."""
    raws = [_raw(server, wire, is_async=False) for _ in range(2)]
    for raw in raws:
        raw.responses.create = _OpaqueTracer(raw.responses.create)  # type: ignore[method-assign]

    with pytest.warns(RuntimeWarning) as caught:
        wrapped = anchortrack.wrap(raws[0], store=MemoryStore())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        anchortrack.wrap(raws[1], store=MemoryStore())  # the same patch: not named again

    (warning,) = caught
    message = str(warning.message)
    assert "client.responses.create" in message
    assert f"{__name__}._OpaqueTracer" in message
    assert "tracer(anchortrack.wrap(client))" in message
    _converse(wrapped, "create")
    assert _chained(wire, 3) == [False, True, True]


@pytest.mark.parametrize(
    ("name", "resources"),
    [("langsmith", ["chat.completions"]), ("braintrust", ["chat.completions", "embeddings"])],
)
@pytest.mark.parametrize("order", ORDERS)
def test_patches_on_chat_completions_and_embeddings_survive(
    name: str, resources: list[str], order: str, server: ResponsesServer, wire: WireTap
) -> None:
    """A tracer's patches on other resources stay on the wrapped client, bound to its own resources."""
    params = {
        "chat.completions": {"model": "scripted", "messages": [user("hi")]},
        "embeddings": {"model": "scripted", "input": "hi"},
    }
    with TRACERS[name]() as tracer:
        _, wrapped = _clients(tracer, order, server, wire, is_async=False)
        tracer.reset()
        for path in resources:
            resource = functools.reduce(getattr, path.split("."), wrapped)
            patch = vars(resource)["create"]  # the tracer's, on the wrapped client's own resource
            assert patch.__wrapped__.__self__ is resource
            with pytest.raises(openai.APIStatusError):  # the local server serves the Responses API only
                resource.create(**params[path])
        if name == "langsmith":  # braintrust traces these only when they succeed
            assert _traced(tracer, 1) == 1


@pytest.mark.parametrize("order", ORDERS)
def test_otel_openai_v2_traces_chat_completions_of_the_wrapped_client(
    order: str, server: ResponsesServer, wire: WireTap
) -> None:
    """opentelemetry-instrumentation-openai-v2 traces chat completions only: it sees them when wrapped."""
    with TRACERS["otel-openai-v2"]() as tracer:
        _, wrapped = _clients(tracer, order, server, wire, is_async=False)
        tracer.reset()
        with pytest.raises(openai.APIStatusError):  # the local server serves the Responses API only
            wrapped.chat.completions.create(model="scripted", messages=[user("hi")])
        assert _traced(tracer, 1) == 1
