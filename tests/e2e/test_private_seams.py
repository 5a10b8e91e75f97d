"""
Every private name of the openai SDK anchortrack attaches through (`anchortrack._seams`), taken away one at a
time: the call still succeeds and goes out exactly as the unwrapped client sends it, and one
``RuntimeWarning`` names what could not attach. ``intact`` is the control: the same calls chain.
"""

from __future__ import annotations
import __future__

import importlib
import inspect
import json
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import anchortrack
from anchortrack.server import ResponsesServer, WireTap

from ..helpers import WEBSOCKET_UNTRACKED


_RESPONSES = "openai.resources.responses.responses"


@pytest.fixture(autouse=True)
def _warn_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process warning of a missing seam."""
    monkeypatch.setattr("anchortrack._seams._warned", set())


@pytest.fixture(name="caught")
def _caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _runtime(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# -- an SDK without WebSocket mode (openai < 2.22) ---------------------------------------------------

_WITHOUT_WEBSOCKET = """
import json, sys
import openai
import openai.resources.responses.responses as sdk
for owner, name in [(sdk.Responses, "connect"), (sdk.AsyncResponses, "connect"),
                    (openai.types.responses, "ResponsesClientEventParam"),
                    *((sdk, kind + "ResponsesConnection" + part) for kind in ("", "Async")
                      for part in ("", "Manager"))]:
    if hasattr(owner, name):  # the SDK's WebSocket mode, as before openai 2.22
        delattr(owner, name)

import anchortrack
from anchortrack.server import WireTap

tap = WireTap()
client = anchortrack.wrap(openai.OpenAI(base_url=sys.argv[1], api_key="t", http_client=tap.http_client()))
assert not hasattr(client.responses, "connect")
history = [{"role": "user", "content": "hi"}]
first = client.responses.create(model="scripted", input=history)
client.responses.create(model="scripted", input=[*history, *first.output, {"role": "user", "content": "on"}])
assert first.id == json.loads(tap.bodies[-1])["previous_response_id"]
"""


def test_an_sdk_without_websocket_mode_imports_wraps_and_chains(server: ResponsesServer) -> None:
    """``import anchortrack`` and ``wrap()`` import no name of WebSocket mode (issue 33: openai 2.0-2.21)."""
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", _WITHOUT_WEBSOCKET, server.base_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == run.returncode, run.stderr


# -- HTTP: create() and create(stream=True), sync and async -------------------------------------------


def _bypass_post(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK whose resources send through the base client's ``post``, not the client's own."""
    for resource, base in (
        (openai._resource.SyncAPIResource, openai._base_client.SyncAPIClient),
        (openai._resource.AsyncAPIResource, openai._base_client.AsyncAPIClient),
    ):
        init = resource.__init__

        def bypassing(self: Any, client: Any, init: Any = init, base: Any = base) -> None:
            init(self, client)
            self._post = lambda *args, **kwargs: base.post(client, *args, **kwargs)

        monkeypatch.setattr(resource, "__init__", bypassing)


class _RenamedOptions(openai.BaseModel):
    """The SDK's request options with ``post_parser`` under another name."""

    parse_after: Any = None


_BREAK = {
    "intact": (None, ""),
    "resource._post": (_bypass_post, "resources' _post is not the client's post"),
    "post_parser removed": (
        lambda mp: mp.delattr(openai._models, "FinalRequestOptions"),
        "openai._models.FinalRequestOptions.post_parser",
    ),
    "post_parser renamed": (
        lambda mp: mp.setattr(openai._models, "FinalRequestOptions", _RenamedOptions),
        "openai._models.FinalRequestOptions.post_parser",
    ),
}


def _turns(send: Any, wire: WireTap) -> list[bytes]:
    """Two turns through *send*, each body the wrapped client put on the wire, then the unwrapped one."""
    history: list[Any] = [{"role": "user", "content": "first"}]
    bodies: list[bytes] = []
    for turn in ("second", "third"):
        wrapped_output = send(True, history)
        bodies.append(wire.bodies[-1])
        send(False, history)
        bodies.append(wire.bodies[-1])
        history = [*history, *wrapped_output, {"role": "user", "content": turn}]
    return bodies


@pytest.mark.parametrize("seam", list(_BREAK))
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_an_http_call_without_a_seam_goes_out_as_unwrapped_with_one_warning(
    raw_client: openai.OpenAI,
    wire: WireTap,
    monkeypatch: pytest.MonkeyPatch,
    caught: list[warnings.WarningMessage],
    seam: str,
    stream: bool,
) -> None:
    brk, named = _BREAK[seam]
    if brk is not None:
        brk(monkeypatch)
    client = anchortrack.wrap(raw_client)

    def send(wrapped: bool, history: list[Any]) -> list[Any]:
        through = client if wrapped else raw_client
        if stream:
            events = list(through.responses.create(model="scripted", input=history, stream=True))
            assert "response.completed" == events[-1].type
            return list(events[-1].response.output)
        return list(through.responses.create(model="scripted", input=history).output)

    bodies = _turns(send, wire)

    last = json.loads(bodies[2])
    if brk is None:
        assert "previous_response_id" in last  # the control: the same calls chain
        assert [] == _runtime(caught)
        return
    assert "previous_response_id" not in last
    assert bodies[0] == bodies[1]  # as the unwrapped client sent them, byte for byte
    assert bodies[2] == bodies[3]
    messages = _runtime(caught)
    assert 1 == len(messages), messages
    assert named in messages[0]
    assert [__file__] == [w.filename for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("seam", list(_BREAK))
async def test_an_async_http_call_without_a_seam_goes_out_as_unwrapped_with_one_warning(
    raw_aclient: openai.AsyncOpenAI,
    wire: WireTap,
    monkeypatch: pytest.MonkeyPatch,
    caught: list[warnings.WarningMessage],
    seam: str,
) -> None:
    brk, named = _BREAK[seam]
    if brk is not None:
        brk(monkeypatch)
    client = anchortrack.wrap(raw_aclient)
    history: list[Any] = [{"role": "user", "content": "first"}]
    bodies: list[bytes] = []
    for turn in ("second", "third"):
        output = (await client.responses.create(model="scripted", input=history)).output
        bodies.append(wire.bodies[-1])
        await raw_aclient.responses.create(model="scripted", input=history)
        bodies.append(wire.bodies[-1])
        history = [*history, *output, {"role": "user", "content": turn}]

    if brk is None:
        assert "previous_response_id" in json.loads(bodies[2])
        assert [] == _runtime(caught)
        return
    assert bodies[0::2] == bodies[1::2]
    messages = _runtime(caught)
    assert 1 == len(messages), messages
    assert named in messages[0]


# -- WebSocket mode: responses.connect() ------------------------------------------------------------


def _rename_connect_ws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's own connection managers, their private ``_connect_ws`` renamed (as before openai 2.32)."""
    module = importlib.import_module(_RESPONSES)
    for name in ("ResponsesConnectionManager", "AsyncResponsesConnectionManager"):
        source = textwrap.dedent(inspect.getsource(getattr(module, name))).replace("_connect_ws", "_open_ws")
        namespace = dict(vars(module))
        flags = __future__.annotations.compiler_flag
        exec(compile(source, module.__file__ or name, "exec", flags=flags, dont_inherit=True), namespace)
        monkeypatch.setattr(module, name, namespace[name])


def _unimportable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK with ``connect()`` but without a name WebSocket tracking imports."""
    monkeypatch.delattr(openai.types.responses, "ResponsesClientEventParam")
    monkeypatch.delitem(sys.modules, "anchortrack._websocket", raising=False)


_BREAK_SOCKET = {
    "intact": (None, ""),
    "maybe_transform": (
        lambda mp: mp.delattr(openai._utils, "maybe_transform"),
        "openai._utils.maybe_transform",
    ),
    "_connect_ws": (_rename_connect_ws, "_connect_ws"),
    "an import": (_unimportable, "ResponsesClientEventParam"),
}


@pytest.mark.skipif(WEBSOCKET_UNTRACKED is not None, reason=str(WEBSOCKET_UNTRACKED))
@pytest.mark.parametrize("seam", list(_BREAK_SOCKET))
def test_a_socket_without_a_seam_goes_out_as_unwrapped_with_one_warning(
    server: ResponsesServer,
    monkeypatch: pytest.MonkeyPatch,
    caught: list[warnings.WarningMessage],
    seam: str,
) -> None:
    brk, named = _BREAK_SOCKET[seam]
    if brk is not None:
        brk(monkeypatch)
    ws_url = server.base_url.replace("http://", "ws://", 1)
    raw = openai.OpenAI(base_url=server.base_url, websocket_base_url=ws_url, api_key="test", max_retries=0)
    client = anchortrack.wrap(raw)
    hub = server.app.state.websockets

    def conversation(through: openai.OpenAI) -> list[dict[str, Any]]:
        """Two turns on one socket; the create frames the server received."""
        before = len(hub.received)
        history: list[Any] = [{"role": "user", "content": "first"}]
        with through.responses.connect() as conn:
            sdk_class = type(conn).__module__ == _RESPONSES
            for turn in ("second", "third"):
                conn.response.create(model="scripted", input=history)
                event = next(e for e in conn if e.type in ("response.completed", "response.failed", "error"))
                assert "response.completed" == event.type, event
                history = [*history, *event.response.output, {"role": "user", "content": turn}]
        frames = [f.event for f in hub.received[before:] if isinstance(f.event, dict)]
        assert sdk_class == (through is raw or brk is not None)  # untracked: the SDK's own connection
        return frames

    wrapped = conversation(client)
    if brk is None:
        assert "previous_response_id" in wrapped[1]
        assert [] == _runtime(caught)
        return
    unwrapped = conversation(raw)
    assert "previous_response_id" not in wrapped[1]
    assert len(wrapped) == len(unwrapped) == 2
    for ours, theirs in zip(wrapped, unwrapped, strict=True):  # as the unwrapped client sent them
        assert ours.keys() == theirs.keys()
        assert len(ours["input"]) == len(theirs["input"])
    messages = _runtime(caught)
    assert 1 == len(messages), messages
    assert named in messages[0]
    raw.close()


class _EagerOpenAI(openai.OpenAI):
    """A client built as openai < 1.9x built them: its resources made in the constructor."""

    responses = None  # type: ignore[assignment]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.responses = openai.resources.responses.Responses(self)  # type: ignore[assignment]


def test_a_client_with_eager_resources_goes_out_as_unwrapped_with_one_warning(
    server: ResponsesServer, wire: WireTap, caught: list[warnings.WarningMessage]
) -> None:
    raw = _EagerOpenAI(
        base_url=server.base_url, api_key="test", http_client=wire.http_client(), max_retries=0
    )
    client = anchortrack.wrap(raw)

    def send(wrapped: bool, history: list[Any]) -> list[Any]:
        return list((client if wrapped else raw).responses.create(model="scripted", input=history).output)

    bodies = _turns(send, wire)

    assert "previous_response_id" not in json.loads(bodies[2])
    assert bodies[0::2] == bodies[1::2]
    messages = _runtime(caught)
    assert 1 == len(messages), messages
    assert "_EagerOpenAI.responses is not a cached_property" in messages[0]
    raw.close()
