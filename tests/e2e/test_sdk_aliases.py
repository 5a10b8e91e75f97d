"""
Output fields the SDK renames (``async`` is ``async_`` on its models): equivalence means what the
unwrapped client would make the server see, the SDK's own serialization included. The SDK sends a
model in ``input`` by its Python names (``"async_": true``) while a chain replays what the server
returned (``"async": true``), so a history holding such a model must not chain from the response that
returned it; a history of the server's own JSON (``to_dict()``) still chains. Every aliased field the
SDK's output item models have is found from the models and tested, over an in-process transport and
once over loopback HTTP.
"""

from __future__ import annotations

import itertools
import json
import threading
import types
import typing
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseFunctionToolCall

import anchortrack
from anchortrack.stores import MemoryStore

from ..helpers import user


# -- the aliased fields, found from the SDK's models -------------------------------------------------

#: One step of a path into an output item: the key on the wire and the model found there.
Step = tuple[str, type[pydantic.BaseModel]]


def _models(annotation: Any) -> list[Any]:
    """The types an annotation may hold (unions, lists and ``Annotated`` opened)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        return [t for arg in typing.get_args(annotation) for t in _models(arg)]
    return [annotation]


def _aliased(model: type[pydantic.BaseModel], seen: tuple[type, ...] = ()) -> list[list[Step]]:
    """Every path from *model* to a field whose wire name differs from its Python name."""
    paths: list[list[Step]] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key != name:
            paths.append([(key, model)])
        for inner in _models(field.annotation):
            if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel) and inner not in seen:
                paths.extend([(key, inner), *rest] for rest in _aliased(inner, (*seen, model)))
    return paths


def _minimal(annotation: Any) -> Any:
    """A small wire value of *annotation*: an object with its required fields only."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    if origin in (typing.Annotated, typing.Union, types.UnionType):
        return _minimal(next(a for a in typing.get_args(annotation) if a is not type(None)))
    if origin is list:
        return []
    if origin is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        fields = annotation.model_fields.items()
        return {f.alias or name: _minimal(f.annotation) for name, f in fields if f.is_required()}
    return {str: "x", bool: False, int: 0, float: 0.0}.get(annotation)


def _python_name(model: type[pydantic.BaseModel], key: str) -> str:
    return next(name for name, field in model.model_fields.items() if (field.alias or name) == key)


def _kind(path: list[Step]) -> str:
    return "/".join(f"{key}:{model.__name__}" for key, model in path)


#: Every output item model of a response, with each path to an aliased field inside it.
ALIASED = [
    (model, path) for model in _models(Response.model_fields["output"].annotation) for path in _aliased(model)
]


def _sample(model: type[pydantic.BaseModel], path: list[Step]) -> dict[str, Any]:
    """An output item of *model* with the aliased field at the end of *path* set to a non-default value."""
    item: dict[str, Any] = _minimal(model)
    cursor, owner = item, model
    for key, inner in path[:-1]:
        value = _minimal(inner)
        annotation = owner.model_fields[_python_name(owner, key)].annotation
        listed = any(typing.get_origin(a) is list for a in (annotation, *typing.get_args(annotation)))
        cursor[key] = [value] if listed else value
        cursor, owner = value, inner
    key, inner = path[-1]
    assert _minimal(inner.model_fields[_python_name(inner, key)].annotation) in (None, False), key
    cursor[key] = True
    return item


#: Whether this openai has the renamed field at all (``async_`` arrived in openai 3.x; 2.x keeps a
#: server's ``async`` as an extra field, sent back as received).
SDK_RENAMES_ASYNC = "async_" in ResponseFunctionToolCall.model_fields


def test_the_sdk_has_aliased_output_fields() -> None:
    """The walk finds the renamed fields (``async`` on calls and tools): the cases below are not empty."""
    if not SDK_RENAMES_ASYNC:
        assert ALIASED == []  # nothing renamed: nothing to find
        return
    assert {"function_call", "custom_tool_call"} <= {_minimal(model)["type"] for model, _ in ALIASED}
    assert all(path[-1][0] == "async" for _, path in ALIASED)


# -- a Responses server that resolves previous_response_id from what it returned -----------------------


class Responses:
    """Stores each response's context and output as sent; a chain replays them, as OpenAI does."""

    def __init__(self, output: list[dict[str, Any]]) -> None:
        self.output = output
        self.held: dict[str, list[Any]] = {}
        self.resolved: dict[str, list[Any]] = {}
        self.bodies: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        parent = body.get("previous_response_id")
        context = [*(self.held[parent] if parent else []), *body["input"]]
        response_id = f"resp_{next(self._ids)}"
        self.resolved[response_id] = context
        self.held[response_id] = [*context, *self.output]
        return {
            "id": response_id,
            "previous_response_id": parent,  # echoed, as real servers do (else the chain reads as dropped)
            "object": "response",
            "created_at": 0,
            "model": "m",
            "status": "completed",
            "output": self.output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }


def _in_process(server: Responses) -> openai.OpenAI:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=server.answer(json.loads(request.content)))

    transport = httpx.MockTransport(handle)
    return openai.OpenAI(
        api_key="k", base_url="http://responses.test/v1", http_client=httpx.Client(transport=transport)
    )


def _equivalent(raw: openai.OpenAI, server: Responses) -> None:
    """A history holding the output as the SDK's models resolves as the unwrapped client's; as the
    server's JSON (``to_dict``) it also resolves alike, and chains."""
    client = anchortrack.wrap(raw, store=MemoryStore())
    first = client.responses.create(model="m", input=[user("q")])
    assert first.output[0].model_dump(by_alias=True, exclude_unset=True) == server.output[0]

    as_models = [user("q"), *first.output, user("next")]
    wrapped = client.responses.create(model="m", input=as_models)
    unwrapped = raw.responses.create(model="m", input=as_models)
    assert server.resolved[unwrapped.id] == server.resolved[wrapped.id]

    as_json = [user("q"), *(item.to_dict() for item in first.output), user("again")]
    before = len(server.bodies)
    wrapped = client.responses.create(model="m", input=as_json)
    chained = server.bodies[before].get("previous_response_id")
    unwrapped = raw.responses.create(model="m", input=as_json)
    assert server.resolved[unwrapped.id] == server.resolved[wrapped.id]
    assert first.id == chained  # the server's own JSON is what the chain replays: it still chains


@pytest.mark.parametrize(("model", "path"), ALIASED, ids=[f"{m.__name__}:{_kind(p)}" for m, p in ALIASED])
def test_an_aliased_output_field_resolves_as_the_unwrapped_client_sends_it(
    model: type[pydantic.BaseModel], path: list[Step]
) -> None:
    """For every aliased field of every output item: the history the caller passes back resolves as
    the unwrapped client's, models (the SDK sends ``async_``) and wire JSON (``async``) alike."""
    server = Responses([_sample(model, path)])
    _equivalent(_in_process(server), server)


@pytest.mark.parametrize(("model", "path"), ALIASED, ids=[f"{m.__name__}:{_kind(p)}" for m, p in ALIASED])
def test_record_response_records_the_output_as_the_server_sent_it(
    model: type[pydantic.BaseModel], path: list[Step]
) -> None:
    """A hand-written loop (`record_response`, `plan_request`): the models go back as the SDK writes
    them, so they do not chain from the response; the server's JSON does."""
    server = Responses([_sample(model, path)])
    response = _in_process(server).responses.create(model="m", input=[user("q")])
    store, scope = MemoryStore(), anchortrack.Scope("http://responses.test/v1")
    anchortrack.record_response([user("q")], response, scope=scope, store=store)

    as_models = anchortrack.plan_request([user("q"), *response.output, user("n")], scope=scope, store=store)
    as_json = [user("q"), *(item.to_dict() for item in response.output), user("n")]
    plan = anchortrack.plan_request(as_json, scope=scope, store=store)

    assert as_models.anchor is None
    assert plan.anchor is not None
    assert response.id == plan.anchor.response_id


@pytest.fixture(name="loopback")
def _loopback() -> Iterator[tuple[str, Responses]]:
    """The same server over loopback HTTP, returning a function call with ``"async": true``."""
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}
    server = Responses([{**call, "status": "completed", "async": True}])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(server.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # quiet
            del args

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}/v1", server
    http.shutdown()
    http.server_close()


def test_a_server_returning_async_true_over_loopback(loopback: tuple[str, Responses]) -> None:
    """Over real HTTP: the function call the server returned with ``"async": true`` goes back as the
    SDK writes it (``"async_": true``, in full), never replayed by a chain as the server's."""
    base_url, server = loopback
    raw = openai.OpenAI(api_key="k", base_url=base_url, max_retries=0)
    _equivalent(raw, server)
    held = [
        body
        for body in server.bodies
        if any("async_" in item for item in body["input"] if isinstance(item, dict))
    ]
    assert bool(held) is SDK_RENAMES_ASYNC
    assert all("previous_response_id" not in body for body in held)
    raw.close()
