"""
The default store: one bounded in-process store shared by every client wrapped without ``store=``.

A sync and an async client (as langchain-openai builds them), or two wraps of one client,
continue each other's conversations; endpoints, projects and API keys stay apart.
"""

from __future__ import annotations

from typing import Any

import openai
from structlog.testing import capture_logs

import anchortrack
from anchortrack.server import ResponsesServer, WireTap
from anchortrack.stores import MemoryStore
from anchortrack.stores._open import DEFAULT_STORE_ANCHORS

from ..helpers import ask, assert_server_saw, sent, user


async def test_a_sync_and_an_async_client_continue_one_conversation(
    server: ResponsesServer, raw_client: openai.OpenAI, raw_aclient: openai.AsyncOpenAI, wire: WireTap
) -> None:
    """Turns alternate between a wrapped OpenAI and a wrapped AsyncOpenAI, and every later turn chains."""
    sync, async_ = anchortrack.wrap(raw_client), anchortrack.wrap(raw_aclient)
    history: list[Any] = []
    responses = []
    for n in range(4):
        history = [*history, user(f"turn {n}")]
        if n % 2:
            response = await async_.responses.create(model="scripted", input=history)
        else:
            response = sync.responses.create(model="scripted", input=history)
        assert_server_saw(server, response.id, history)
        responses.append(response)
        if n:
            assert responses[n - 1].id == sent(wire)["previous_response_id"]
            assert [user(f"turn {n}")] == sent(wire)["input"]
        history = [*history, *response.output]

    store = anchortrack.tracker(sync).store
    assert store is anchortrack.tracker(async_).store
    assert isinstance(store, MemoryStore)
    assert DEFAULT_STORE_ANCHORS == store.max_anchors
    assert (1, 2) == (
        anchortrack.tracker(sync).stats.count("chained"),
        anchortrack.tracker(async_).stats.count("chained"),
    )


def test_two_wraps_of_one_client_share_the_default(raw_client: openai.OpenAI) -> None:
    """An app that wraps the same client twice still chains across the two wrappers."""
    first, second = anchortrack.wrap(raw_client), anchortrack.wrap(raw_client)

    history, _ = ask(first, [], "one")
    ask(second, history, "two")

    assert 1 == anchortrack.tracker(second).stats.count("chained")


def test_api_keys_are_kept_apart(raw_client: openai.OpenAI) -> None:
    """Another API key on the same endpoint never chains from this key's responses."""
    mine = anchortrack.wrap(raw_client)
    theirs = anchortrack.wrap(raw_client.with_options(api_key="another-key"))
    same_key = anchortrack.wrap(raw_client.with_options(api_key="test"))

    history, _ = ask(mine, [], "one")
    ask(theirs, history, "two")
    ask(same_key, history, "two")

    assert 1 == anchortrack.tracker(theirs).stats.count("stateless", "unknown_history")
    assert 1 == anchortrack.tracker(same_key).stats.count("chained")
    assert anchortrack.tracker(mine).scope_for(mine) != anchortrack.tracker(theirs).scope_for(theirs)


def test_projects_and_endpoints_are_kept_apart(raw_client: openai.OpenAI) -> None:
    """Another project (or base URL) is another scope in the shared store."""
    mine = anchortrack.wrap(raw_client)
    other_project = anchortrack.wrap(
        openai.OpenAI(base_url=str(raw_client.base_url), api_key="test", project="proj_other", max_retries=0)
    )

    history, _ = ask(mine, [], "one")
    ask(other_project, history, "two")

    assert 1 == anchortrack.tracker(other_project).stats.count("stateless", "unknown_history")


def test_an_explicit_store_still_overrides(raw_client: openai.OpenAI) -> None:
    """store= keeps a client out of the shared default; its scope is the one the default would use."""
    own = MemoryStore()
    private = anchortrack.wrap(raw_client, store=own)
    shared = anchortrack.wrap(raw_client)

    history, _ = ask(shared, [], "one")
    ask(private, history, "two")

    tracker = anchortrack.tracker(private)
    assert tracker.store is own
    assert not tracker.shared_default
    assert anchortrack.tracker(shared).shared_default
    assert 1 == tracker.stats.count("stateless", "unknown_history")
    assert tracker.scope_for(private) == anchortrack.tracker(shared).scope_for(shared)


def test_the_scope_to_explain_a_default_store_client(raw_client: openai.OpenAI) -> None:
    """tracker.scope_for(client) is what explain() needs for a client on the shared default store."""
    client = anchortrack.wrap(raw_client)
    tracker = anchortrack.tracker(client)
    history, _ = ask(client, [], "one")

    why = anchortrack.explain([*history, user("two")], store=tracker.store, scope=tracker.scope_for(client))

    assert why.plan.chained
    assert "default" in repr(tracker)


def test_a_restart_is_not_called_an_edit(raw_client: openai.OpenAI) -> None:
    """
    A restarted process's memory store (a new one) knows no anchor of a history it is handed:
    ``unknown_history``, not the edit reason; an edit after a prefix the new process recorded is
    still ``prefix_diverged``, at the item that differs.
    """
    system = {"role": "system", "content": "be brief"}
    before = anchortrack.wrap(raw_client, store=MemoryStore())
    history, _ = ask(before, [system], "one")
    history, _ = ask(before, history, "two")
    restarted = anchortrack.wrap(raw_client, store=MemoryStore())  # the process restarted

    with capture_logs() as logs:
        history, _ = ask(restarted, history, "three")
        edited = [system, user("ONE"), *history[2:]]  # an edit after the first item, which it recorded
        ask(restarted, edited, "four")

    stateless = [
        (e["reason"], e["items_sent"], e.get("diverged_at"))
        for e in logs
        if e["event"] == "anchortrack.request_stateless"
    ]
    assert [("unknown_history", 6, None), ("prefix_diverged", 8, 1)] == stateless
