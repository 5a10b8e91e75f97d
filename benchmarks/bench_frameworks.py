"""
anchortrack against a framework's own chaining option, on the same tool loop.

The loop (CALLS model calls, a ~1.5 KB tool output after each, against the local Responses
server started here in-process) runs through: the unwrapped client (stateless), a hand-written
chained loop, anchortrack, and three frameworks, each with its own chaining option and with a
wrapped client instead: pydantic-ai (``openai_previous_response_id='auto'``), openai-agents
(``auto_previous_response_id=True``) and langchain-openai (``use_previous_response_id=True``).

Per loop and size:

* requests chained, and request bytes on the wire as a share of the unwrapped client's;
* client CPU (the calling thread's CPU time: the server's threads are not counted) against the
  hand-written loop, medians of interleaved repeats in one run;
* ``edit``: middleware redacts the first user message from call CALLS/2 on — does the context
  the server resolved for the last response still hold the original text?
* ``forget``: the server forgets the latest response before call CALLS/2 — does the loop
  finish, with the server's context for the last response holding the whole conversation?
* ``anchortrack's share``: for each loop over a wrapped client, one more run under ``cProfile``:
  the time in anchortrack's own functions, and in what they call outside the SDK and httpx (the
  hashing, the JSON, the store), as a share of the loop's whole profiled time. The rest is the
  framework's, the SDK's and the network's.

    python benchmarks/bench_frameworks.py [CALLS ...]      # default: 25 100
"""

from __future__ import annotations

import asyncio
import cProfile
import importlib.metadata
import json
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai
from bench_overhead import OUTPUT, ask, tool_outputs

import anchortrack
from anchortrack.server import ResponsesServer, ServerState, WireTap


SECRET = "card 4111 1111 1111 1111"
REDACTED = "[redacted]"
FCO = "function_call_output"


class LoggingState(ServerState):
    """The server state, also keeping the id of every response it answered, in order."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.answered: list[str] = []
        self._answered_lock = threading.Lock()

    def prepare(self, body: object, **options: Any) -> Any:
        pending = super().prepare(body, **options)
        with self._answered_lock:
            self.answered.append(pending.response["id"])
        return pending


@dataclass
class Setup:
    """One run of a loop: its size, and what happens before call ``calls // 2``."""

    state: LoggingState
    calls: int
    edit: bool = False
    forget: bool = False

    def first_text(self) -> str:
        return f"{SECRET}\n{ask(self.calls)}"

    def before(self, index: int) -> None:
        """Called before model call *index*: the server forgets the latest response, if asked."""
        if self.forget and index == self.calls // 2 and self.state.answered:
            self.state.drop(self.state.answered[-1])

    def redacting(self, index: int) -> bool:
        return self.edit and index >= self.calls // 2


# -- the plain loops ---------------------------------------------------------------------


def full_loop(client: Any, aclient: Any, setup: Setup) -> None:
    """The caller keeps the whole history and sends it every call."""
    history: list[Any] = [{"role": "user", "content": setup.first_text()}]
    for index in range(setup.calls):
        setup.before(index)
        if setup.redacting(index):
            history[0] = {"role": "user", "content": history[0]["content"].replace(SECRET, REDACTED)}
        resp = client.responses.create(model="scripted", input=history)
        history += [item.to_dict(mode="json") for item in resp.output]
        history += tool_outputs(resp.output)


def hand_loop(client: Any, aclient: Any, setup: Setup) -> None:
    """Tracks ``previous_response_id`` by hand and sends only the new items (an edit is never sent)."""
    new: list[Any] = [{"role": "user", "content": setup.first_text()}]
    previous: str | None = None
    for index in range(setup.calls):
        setup.before(index)
        params: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        resp = client.responses.create(model="scripted", input=new, **params)
        previous = resp.id
        new = tool_outputs(resp.output)


# -- pydantic-ai ---------------------------------------------------------------------------


def pydantic_ai_loop(auto: bool) -> Callable[[Any, Any, Setup], None]:
    def loop(client: Any, aclient: Any, setup: Setup) -> None:
        import dataclasses

        from pydantic_ai import Agent, UsageLimits
        from pydantic_ai.capabilities import ProcessHistory
        from pydantic_ai.messages import UserPromptPart
        from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
        from pydantic_ai.providers.openai import OpenAIProvider

        calls = iter(range(setup.calls))

        def middleware(messages: list[Any]) -> list[Any]:  # annotations pydantic-ai can resolve
            index = next(calls)
            setup.before(index)
            if not setup.redacting(index):
                return messages
            first = messages[0]
            parts = [
                dataclasses.replace(part, content=part.content.replace(SECRET, REDACTED))
                if isinstance(part, UserPromptPart) and isinstance(part.content, str)
                else part
                for part in first.parts
            ]
            return [dataclasses.replace(first, parts=parts), *messages[1:]]

        settings = OpenAIResponsesModelSettings(openai_previous_response_id="auto") if auto else None
        model = OpenAIResponsesModel("scripted", provider=OpenAIProvider(openai_client=aclient))
        agent: Agent[None, str] = Agent(
            model, capabilities=[ProcessHistory(middleware)], model_settings=settings
        )

        @agent.tool_plain(name="fetch")
        def fetch(page: int) -> str:
            return OUTPUT

        asyncio.run(agent.run(setup.first_text(), usage_limits=UsageLimits(request_limit=None)))

    return loop


# -- openai-agents -----------------------------------------------------------------------


def agents_loop(auto: bool) -> Callable[[Any, Any, Setup], None]:
    def loop(client: Any, aclient: Any, setup: Setup) -> None:
        from agents import Agent, RunConfig, Runner, function_tool
        from agents.models.openai_responses import OpenAIResponsesModel
        from agents.run_config import ModelInputData

        calls = iter(range(setup.calls))

        def middleware(data: Any) -> ModelInputData:
            index = next(calls)
            setup.before(index)
            items = list(data.model_data.input)
            if setup.redacting(index):
                items = [json.loads(json.dumps(item).replace(SECRET, REDACTED)) for item in items]
            return ModelInputData(input=items, instructions=data.model_data.instructions)

        def fetch(page: int) -> str:
            """One page of records."""
            return OUTPUT

        agent: Agent[Any] = Agent(
            name="collector",
            model=OpenAIResponsesModel(model="scripted", openai_client=aclient),
            tools=[function_tool(fetch, name_override="fetch")],
        )
        config = RunConfig(tracing_disabled=True, call_model_input_filter=middleware)
        asyncio.run(
            Runner.run(
                agent,
                setup.first_text(),
                run_config=config,
                max_turns=setup.calls + 5,
                auto_previous_response_id=auto,
            )
        )

    return loop


# -- langchain-openai --------------------------------------------------------------------


def langchain_loop(auto: bool) -> Callable[[Any, Any, Setup], None]:
    def loop(client: Any, aclient: Any, setup: Setup) -> None:
        from langchain_core.messages import BaseMessage, HumanMessage
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI

        @tool("fetch")
        def fetch(page: int) -> str:
            """One page of records."""
            return OUTPUT

        llm = ChatOpenAI(
            model="scripted",
            use_responses_api=True,
            api_key="local",  # type: ignore[arg-type]
            base_url=str(client.base_url),
            root_client=client,
            client=client.chat.completions,
            root_async_client=aclient,
            async_client=aclient.chat.completions,
            use_previous_response_id=auto,
        ).bind_tools([fetch])
        messages: list[BaseMessage] = [HumanMessage(setup.first_text())]
        for index in range(setup.calls):
            setup.before(index)
            if setup.redacting(index):
                messages[0] = HumanMessage(str(messages[0].content).replace(SECRET, REDACTED))
            reply = llm.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                break
            messages.extend(fetch.invoke(call) for call in reply.tool_calls)

    return loop


#: name -> (loop, wrapped)
LOOPS: dict[str, tuple[Callable[[Any, Any, Setup], None], bool]] = {
    "unwrapped client (stateless)": (full_loop, False),
    "hand-written chained loop": (hand_loop, False),
    "anchortrack": (full_loop, True),
    "pydantic-ai, openai_previous_response_id='auto'": (pydantic_ai_loop(auto=True), False),
    "pydantic-ai, wrapped client": (pydantic_ai_loop(auto=False), True),
    "openai-agents, auto_previous_response_id=True": (agents_loop(auto=True), False),
    "openai-agents, wrapped client": (agents_loop(auto=False), True),
    "langchain-openai, use_previous_response_id=True": (langchain_loop(auto=True), False),
    "langchain-openai, wrapped client": (langchain_loop(auto=False), True),
}
if sys.version_info < (3, 11):  # pydantic-ai-slim 2.68 needs Python >= 3.11 (the dev group skips it)
    LOOPS = {name: loop for name, loop in LOOPS.items() if not name.startswith("pydantic-ai")}


def _run(
    server: ResponsesServer,
    state: LoggingState,
    name: str,
    setup: Setup,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    """
    One run of loop *name*: bytes, chained requests, CPU, the error it ended with, its last response;
    under *profile* if given.
    """
    loop, wrapped = LOOPS[name]
    tap = WireTap()
    client = openai.OpenAI(
        base_url=server.base_url, api_key="local", http_client=tap.http_client(), max_retries=0
    )
    aclient = openai.AsyncOpenAI(
        base_url=server.base_url, api_key="local", http_client=tap.async_http_client(), max_retries=0
    )
    if wrapped:
        store = anchortrack.stores.MemoryStore()
        client, aclient = anchortrack.wrap(client, store=store), anchortrack.wrap(aclient, store=store)
    start = len(state.answered)
    error = None
    started = time.thread_time()
    if profile is not None:
        profile.enable()
    try:
        loop(client, aclient, setup)
    except Exception as caught:  # what the loop does when the server forgot
        error = getattr(caught, "status_code", None) or type(caught).__name__
    finally:
        if profile is not None:
            profile.disable()
    cpu = time.thread_time() - started
    client.close()
    resends = 0
    if wrapped:
        for each in (client, aclient):
            resends += sum(anchortrack.tracker(each).stats.snapshot()["resends"].values())
    answered = state.answered[start:]
    return {
        "bytes": sum(len(body) for body in tap.bodies),
        "requests": len(tap.bodies),
        "chained": sum(1 for body in tap.bodies if b'"previous_response_id"' in body),
        "cpu": cpu,
        "error": error,
        "last": answered[-1] if answered else None,
        "resends": resends,
    }


def measure(
    server: ResponsesServer, state: LoggingState, calls: int, repeats: int = 3
) -> list[dict[str, Any]]:
    """One row per loop: chaining, bytes, CPU against the hand loop, the edit and forget outcomes."""
    rows: dict[str, dict[str, Any]] = {name: {"loop": name, "calls": calls, "cpu": []} for name in LOOPS}
    for _ in range(repeats):  # interleaved, so that load on the machine hits every loop alike
        for name in LOOPS:
            result = _run(server, state, name, Setup(state, calls))
            rows[name]["cpu"].append(result.pop("cpu"))
            rows[name].update(result)
    stateless = rows["unwrapped client (stateless)"]["bytes"]
    hand = statistics.median(rows["hand-written chained loop"]["cpu"])
    for name, row in rows.items():
        row["bytes_share"] = row["bytes"] / stateless
        row["cpu_vs_hand"] = statistics.median(row["cpu"]) / hand
        row["edit"] = _edit_outcome(server, state, name, calls)
        row["forget"] = _forget_outcome(server, state, name, calls)
        row["share"] = own_share(server, state, name, calls) if LOOPS[name][1] else None
    return list(rows.values())


#: Code outside anchortrack that its functions call to send the request: the SDK's and httpx's share.
SENDING = ("/openai/", "/httpx/", "/httpx2/", "/httpcore/", "/h11/")


def own_share(server: ResponsesServer, state: LoggingState, name: str, calls: int) -> float:
    """
    anchortrack's share of loop *name*'s profiled time: its own functions' time, plus what they call
    outside the SDK and httpx (hashing, JSON, the store), over the whole loop's. Profiled on the thread
    that runs it (an async framework's event loop runs on that thread too).
    """
    profile = cProfile.Profile(time.thread_time)
    _run(server, state, name, Setup(state, calls), profile)
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    ours = total = 0.0
    for (filename, _, _), (_, _, own, _, callers) in stats.items():
        total += own
        if "/anchortrack/" in filename:
            ours += own
        elif not any(part in filename for part in SENDING):
            ours += sum(timing[3] for caller, timing in callers.items() if "/anchortrack/" in caller[0])
    return ours / total


def _edit_outcome(server: ResponsesServer, state: LoggingState, name: str, calls: int) -> str:
    result = _run(server, state, name, Setup(state, calls, edit=True))
    if result["error"] is not None:
        return f"fails ({result['error']})"
    context = state.resolved_context(result["last"])
    kept = any(SECRET in json.dumps(item) for item in context)
    return (
        "**keeps the redacted text** in the server's context"
        if kept
        else "sends the edit (server context redacted)"
    )


def _forget_outcome(server: ResponsesServer, state: LoggingState, name: str, calls: int) -> str:
    result = _run(server, state, name, Setup(state, calls, forget=True))
    if result["error"] is not None:
        return (
            f"**aborts** (HTTP {result['error']})"
            if isinstance(result["error"], int)
            else f"**aborts** ({result['error']})"
        )
    context = state.resolved_context(result["last"])
    whole = sum(1 for item in context if item.get("type") == FCO) == calls - 1 and SECRET in json.dumps(
        context[0]
    )
    done = "finishes" + (f", {result['resends']} resend" if result["resends"] else "")
    return done if whole else done + ", **context incomplete**"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| loop | calls | requests chained | bytes vs stateless | client CPU vs hand loop "
        "| of which anchortrack's | middleware edits an early message | server forgets a response |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        share = "" if row["share"] is None else f"{row['share']:.0%}"
        lines.append(
            f"| {row['loop']} | {row['calls']} | {row['chained']} of {row['requests']} "
            f"| {row['bytes_share']:.1%} | {row['cpu_vs_hand']:.2f}x | {share}"
            f" | {row['edit']} | {row['forget']} |"
        )
    return "\n".join(lines)


def versions() -> str:
    names = ["openai", "openai-agents", "langchain-openai"]
    if any(name.startswith("pydantic-ai") for name in LOOPS):
        names.insert(1, "pydantic-ai-slim")
    return (
        ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
        + f", Python {sys.version.split()[0]}"
    )


def main(argv: list[str]) -> int:
    sizes = [int(arg) for arg in argv] or [25, 100]
    state = LoggingState()
    rows: list[dict[str, Any]] = []
    with ResponsesServer(state=state) as server:
        for calls in sizes:
            rows += measure(server, state, calls)
    print(versions())
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
