"""
I10: a tracer's patch is carried onto a copy of the client whole or not at all.

Tracers written in the ordinary patterns (the original ``create`` kept on an object, in a dict, in
``functools.partial`` keywords, or bound with ``types.MethodType`` in a function named ``create``; each
reading ``base_url`` at call time, as a span would) and the real per-client tracers are put on a client
of server A (key KA, organization and project A), in both orders. A ``with_options()`` or ``copy()``
of the wrapped client pointed at server B (key KB, organization and project B) sends every request to
B with B's credentials, server A receives none of them, the tracer sees them (and names B), and the
second call is chained. A patch that cannot be carried is left out with one warning naming it.
"""

from __future__ import annotations

import collections
import functools
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack import _patches
from anchortrack.server import ResponsesServer, http_client_classes
from anchortrack.stores import MemoryStore

from ..helpers import user
from .helpers import TRACERS, Tracer, wait_for


A = {"api_key": "KA", "organization": "org-A", "project": "proj-A"}
B = {"api_key": "KB", "organization": "org-B", "project": "proj-B"}
ORDERS = ["tracer_first", "wrap_first"]
HOWS = ["with_options", "copy"]


@pytest.fixture(scope="module", name="servers")
def _servers() -> Iterator[tuple[ResponsesServer, ResponsesServer]]:
    """Server A serves key KA only, server B key KB only."""
    with ResponsesServer(api_keys=["KA"]) as first, ResponsesServer(api_keys=["KB"]) as second:
        yield first, second


_opened: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _warn_afresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the once-per-patch warning afresh; its clients are closed after it."""
    monkeypatch.setattr(_patches, "_warned", set())
    yield
    while _opened:
        _opened.pop().close()


# -- tracers written in the ordinary patterns: each records the base URL it saw at call time ----------


class _Instrumentor:
    """Keeps the original ``create`` on itself (to uninstrument later); reads ``client.base_url``."""

    def __init__(self, spans: list[str]) -> None:
        self.spans = spans

    def instrument(self, client: Any) -> Any:
        self.original = client.responses.create

        def create(**params: Any) -> Any:
            self.spans.append(str(client.base_url))
            return self.original(**params)

        client.responses.create = create
        return client


def _on_object(client: Any, spans: list[str]) -> Any:
    return _Instrumentor(spans).instrument(client)


def _in_dict(client: Any, spans: list[str]) -> Any:
    originals = {"create": client.responses.create}

    def create(**params: Any) -> Any:
        spans.append(str(client.base_url))
        return originals["create"](**params)

    client.responses.create = create
    return client


def _traced_create(client: Any, *, original: Any, spans: list[str], **params: Any) -> Any:
    spans.append(str(client.base_url))
    return original(**params)


def _in_partial_keywords(client: Any, spans: list[str]) -> Any:
    client.responses.create = functools.partial(
        _traced_create, client, original=client.responses.create, spans=spans
    )
    return client


def _method_named_create(client: Any, spans: list[str]) -> Any:
    original = client.responses.create

    def create(self: Any, **params: Any) -> Any:
        spans.append(str(self._client.base_url))
        return original(**params)

    client.responses.create = types.MethodType(create, client.responses)
    return client


def _in_deque(client: Any, spans: list[str]) -> Any:
    """Holds the original where anchortrack cannot rebuild it (a C container's item)."""
    held = collections.deque([client.responses.create])

    def create(**params: Any) -> Any:
        spans.append(str(client.base_url))
        return held[0](**params)

    client.responses.create = create
    return client


PATTERNS: dict[str, Callable[[Any, list[str]], Any]] = {
    "object": _on_object,
    "dict": _in_dict,
    "partial_keywords": _in_partial_keywords,
    "method_named_create": _method_named_create,
}


def _client(server: ResponsesServer, sent: list[tuple[str, ...]]) -> openai.OpenAI:
    """A plain client of *server* with A's credentials; *sent* gets each request's destination."""

    def hook(request: Any) -> None:
        if request.method == "POST" and request.url.path.endswith("/responses"):
            headers = request.headers
            destination = (str(request.url), headers.get("authorization"), headers.get("openai-organization"))
            sent.append((*destination, headers.get("openai-project")))

    http_client = http_client_classes()[0](event_hooks={"request": [hook]})
    client = openai.OpenAI(base_url=server.base_url, http_client=http_client, max_retries=0, **A)
    _opened.append(client)
    return client


def _wrapped(apply: Callable[[Any], Any], order: str, raw: openai.OpenAI) -> Any:
    if order == "tracer_first":
        return anchortrack.wrap(apply(raw), store=MemoryStore())
    return apply(anchortrack.wrap(raw, store=MemoryStore()))


def _two_calls(client: Any) -> list[Any]:
    """Two turns of one conversation; the request bodies are read on the servers."""
    history: list[Any] = [user("first")]
    first = client.responses.create(model="scripted", input=history)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append(user("second"))
    return [first, client.responses.create(model="scripted", input=history)]


def _assert_sent_to_b(
    servers: tuple[ResponsesServer, ResponsesServer], derived: Any, sent: list[tuple[str, ...]]
) -> None:
    """Both calls through *derived* reach B, with B's credentials; A receives neither; the second chains."""
    first, second = servers
    seen_by = len(first.state.requests), len(second.state.requests)
    del sent[:]

    _two_calls(derived)

    assert sent == [(f"{second.base_url}/responses", "Bearer KB", "org-B", "proj-B")] * 2
    assert len(first.state.requests) == seen_by[0]
    bodies = second.state.requests[seen_by[1] :]
    assert ["previous_response_id" in body for body in bodies] == [False, True]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_a_patch_is_carried_whole_and_every_request_goes_where_its_client_points(
    pattern: str, order: str, how: str, servers: tuple[ResponsesServer, ResponsesServer]
) -> None:
    """The tracer sees every call through the copy and names B; nothing reaches A; no warning."""
    sent: list[tuple[str, ...]] = []
    spans: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped = _wrapped(lambda client: PATTERNS[pattern](client, spans), order, _client(servers[0], sent))
        derived = getattr(wrapped, how)(base_url=servers[1].base_url, **B)

    _assert_sent_to_b(servers, derived, sent)

    assert spans == [f"{servers[1].base_url}/"] * 2


@pytest.mark.parametrize("order", ORDERS)
def test_the_wrapped_client_itself_keeps_the_tracer_and_its_own_destination(
    order: str, servers: tuple[ResponsesServer, ResponsesServer]
) -> None:
    """Instrumented first and wrapped second, calls go through the wrapped client: tracked and traced."""
    sent: list[tuple[str, ...]] = []
    spans: list[str] = []
    wrapped = _wrapped(lambda client: _on_object(client, spans), order, _client(servers[0], sent))
    seen_by = len(servers[0].state.requests)

    _two_calls(wrapped)

    assert sent == [(f"{servers[0].base_url}/responses", "Bearer KA", "org-A", "proj-A")] * 2
    assert spans == [f"{servers[0].base_url}/"] * 2
    bodies = servers[0].state.requests[seen_by:]
    assert ["previous_response_id" in body for body in bodies] == [False, True]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("order", ORDERS)
def test_a_patch_that_cannot_be_carried_is_left_out_with_one_warning(
    order: str, how: str, servers: tuple[ResponsesServer, ResponsesServer]
) -> None:
    """Its original held in a deque: left out of the copy, named once; requests still go only to B."""
    sent: list[tuple[str, ...]] = []
    spans: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = _wrapped(lambda client: _in_deque(client, spans), order, _client(servers[0], sent))
        derived = getattr(wrapped, how)(base_url=servers[1].base_url, **B)
        getattr(wrapped, how)(base_url=servers[1].base_url, **B)  # the same patch: not named again

    (warning,) = caught
    assert warning.category is RuntimeWarning
    assert "client.responses.create" in str(warning.message)
    assert f"{__name__}._in_deque.<locals>.create" in str(warning.message)
    _assert_sent_to_b(servers, derived, sent)
    assert spans == []


@pytest.fixture(params=["langsmith", "braintrust", "logfire", "client.request"], name="tracer")
def _tracer(request: pytest.FixtureRequest) -> Iterator[Tracer]:
    with TRACERS[request.param]() as tracer:
        yield tracer


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("order", ORDERS)
def test_real_tracers_copies_go_where_they_point_and_stay_traced(
    tracer: Tracer, order: str, how: str, servers: tuple[ResponsesServer, ResponsesServer]
) -> None:
    """langsmith's, braintrust's, logfire's per-client patches: carried, traced, sent only to B."""
    assert tracer.apply is not None
    sent: list[tuple[str, ...]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped = _wrapped(tracer.apply, order, _client(servers[0], sent))
        derived = getattr(wrapped, how)(base_url=servers[1].base_url, **B)
    tracer.reset()

    _assert_sent_to_b(servers, derived, sent)

    wait_for(lambda: tracer.count() >= 2)
    assert tracer.count() == 2
