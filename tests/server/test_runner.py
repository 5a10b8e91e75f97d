"""Running the server: lifecycle, persistence across restarts, retention, guards."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import openai
import pytest

from anchortrack.server import ResponsesServer, ServerState, create_app
from anchortrack.server._records import MemoryResponseStore, StoredResponse, owner_digest

from ..helpers import FakeClock, user_message
from .helpers import API_KEY, as_items, make_client


def server_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("anchortrack-server-")]


class TestLifecycle:
    def test_start_serves_and_stop_leaves_no_thread(self) -> None:
        """start() returns a serving server on a free port; stop() ends its thread."""
        before = set(server_threads())
        srv = ResponsesServer()
        srv.start()
        try:
            assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
            assert srv.port > 0
            client = make_client(srv)
            assert client.responses.create(model="scripted", input="hi").status == "completed"
            client.close()
        finally:
            srv.stop()

        assert before == set(server_threads())
        srv.stop()  # idempotent

    def test_a_server_starts_only_once(self) -> None:
        """Starting twice, or after stop, is an error; the port is unknown before start."""
        srv = ResponsesServer()
        with pytest.raises(RuntimeError):
            _ = srv.port
        with srv, pytest.raises(RuntimeError, match="once"):
            srv.start()
        with pytest.raises(RuntimeError, match="once"):
            srv.start()

    def test_stop_finishes_an_open_stream(self) -> None:
        """Stopping while a client holds a finished stream's connection does not hang."""
        before = set(server_threads())
        srv = ResponsesServer().start()
        client = make_client(srv)
        try:
            stream = client.responses.create(model="scripted", input="hi", stream=True)
            next(iter(stream))
        finally:
            srv.stop()
            client.close()

        assert before == set(server_threads())

    def test_given_state_is_shared_and_left_open(self) -> None:
        """A ServerState passed in is the one the app uses; its store is not closed on stop."""
        store = MemoryResponseStore()
        state = ServerState(store)
        with ResponsesServer(state=state) as srv:
            client = make_client(srv)
            created = client.responses.create(model="scripted", input="hi")
            client.close()

        assert srv.state is state
        assert store.get(created.id) is not None

    def test_create_app_exposes_its_state(self) -> None:
        """create_app builds a fresh state when none is given, reachable from the app."""
        app = create_app()

        assert isinstance(app.state.responses, ServerState)


class TestPersistence:
    def test_sqlite_chain_survives_a_restart(self, tmp_path: Path) -> None:
        """Stop a SQLite-backed server, start a new one on the file: the chain continues."""
        spec = f"sqlite:{tmp_path / 'db' / 'responses.db'}"
        with ResponsesServer(store=spec) as first_server:
            client = make_client(first_server)
            one = client.responses.create(model="scripted", input="one")
            two = client.responses.create(model="scripted", input="two", previous_response_id=one.id)
            client.close()

        with ResponsesServer(store=spec) as second_server:
            client = make_client(second_server)
            three = client.responses.create(model="scripted", input="three", previous_response_id=two.id)
            retrieved = client.responses.retrieve(one.id)
            client.close()
            context = second_server.state.resolved_context(three.id)

        assert [
            user_message("one"),
            *as_items(one.output),
            user_message("two"),
            *as_items(two.output),
            user_message("three"),
        ] == context
        assert one.to_dict() == retrieved.to_dict()

    def test_sqlite_items_resolve_by_id_after_a_restart(self, tmp_path: Path) -> None:
        """Items of responses stored before a restart resolve by id, for their key only, while stored."""
        spec = f"sqlite:{tmp_path / 'responses.db'}"
        with ResponsesServer(store=spec) as first_server:
            client = make_client(first_server)
            one = client.responses.create(model="scripted", input="one")
            client.close()
        message = as_items(one.output)[0]
        reference = [{"type": "item_reference", "id": message["id"]}, user_message("two")]

        with ResponsesServer(store=spec) as second_server:
            client = make_client(second_server)
            two = client.responses.create(model="scripted", input=reference, store=False)
            other = openai.OpenAI(base_url=second_server.base_url, api_key="sk-other", max_retries=0)
            with other, pytest.raises(openai.NotFoundError):
                other.responses.create(model="scripted", input=reference)
            client.responses.delete(one.id)
            with pytest.raises(openai.NotFoundError, match=f"Item with id '{message['id']}' not found"):
                client.responses.create(model="scripted", input=reference)
            client.close()
            context = second_server.state.resolved_context(two.id)

        assert [message, user_message("two")] == context

    def test_memory_store_forgets_on_restart(self) -> None:
        """A memory-backed server starts empty."""
        with ResponsesServer() as srv:
            client = make_client(srv)
            first = client.responses.create(model="scripted", input="one")
            client.close()
        with ResponsesServer() as srv:
            client = make_client(srv)
            with pytest.raises(openai.BadRequestError):
                client.responses.create(model="scripted", input="two", previous_response_id=first.id)
            client.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_retention_expires_responses(tmp_path: Path, backend: str) -> None:
    """With retention=60 on an injected clock, a response chains at 59 s and is gone at 61 s."""
    clock = FakeClock()
    store = "memory" if backend == "memory" else f"sqlite:{tmp_path / 'r.db'}"
    with ResponsesServer(store=store, retention=60, clock=clock) as srv:
        client = make_client(srv)
        first = client.responses.create(model="scripted", input="one")
        clock.advance(59)
        client.responses.create(model="scripted", input="two", previous_response_id=first.id)

        clock.advance(2)

        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", input="three", previous_response_id=first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
        client.close()
    assert caught.value.code == "previous_response_not_found"


def test_depth_guard() -> None:
    """With max_depth=3 a request may have three ancestors; a fourth is refused."""
    with ResponsesServer(max_depth=3) as srv:
        client = make_client(srv)
        previous = client.responses.create(model="scripted", input="t0").id
        for turn in range(1, 4):
            previous = client.responses.create(
                model="scripted", input=f"t{turn}", previous_response_id=previous
            ).id
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", input="too deep", previous_response_id=previous)
        client.close()

    assert (
        caught.value.code,
        caught.value.param,
    ) == ("previous_response_chain_too_long", "previous_response_id")


def test_cycles_built_through_the_store_are_refused(
    fake_server: ResponsesServer, plain_client: openai.OpenAI
) -> None:
    """Records pointing at each other (possible only via the store API) give a 400, not a hang."""
    for this, parent in (("resp_cycle_a", "resp_cycle_b"), ("resp_cycle_b", "resp_cycle_a")):
        fake_server.state.store.save(
            StoredResponse(
                id=this,
                previous_response_id=parent,
                status="completed",
                input_items=[],
                response={"output": []},
                owner=owner_digest(API_KEY),
            )
        )

    with pytest.raises(openai.BadRequestError) as caught:
        plain_client.responses.create(model="scripted", input="x", previous_response_id="resp_cycle_a")

    assert (
        caught.value.code,
        caught.value.param,
    ) == ("previous_response_chain_cycle", "previous_response_id")


class _FinalSaveFails(MemoryResponseStore):
    """Takes the in-progress record of a stream, refuses the final one."""

    def save(self, record: StoredResponse, **options: Any) -> StoredResponse:
        if options.get("overwrite"):
            raise OSError("disk full")
        return super().save(record, **options)


def test_a_stream_whose_final_save_fails_ends_with_an_error_event() -> None:
    """After the status line, a failed save is an in-stream error event (and a WebSocket error frame)."""
    with ResponsesServer(store=_FinalSaveFails()) as srv, make_client(srv) as client:
        events = list(client.responses.create(model="scripted", input="hi", stream=True))
        with client.responses.connect() as socket:
            socket.response.create(model="scripted", input="hi")
            frames = []
            for frame in socket:
                frames.append(frame)
                if frame.type in ("error", "response.completed"):
                    break

    assert ("error", "The server could not save the response.") == (events[-1].type, events[-1].message)
    assert "response.completed" not in [event.type for event in events]
    assert "error" == frames[-1].type
    assert "The server could not save the response." == frames[-1].error.message
    assert events[-1].code == frames[-1].error.code == "server_error"  # one code on both transports
