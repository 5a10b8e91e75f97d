"""
Real tracers, pointed at sinks on this machine, and how many model calls each recorded.

Each `Tracer` is one patching pattern a tracer uses on an openai client:

* ``instance``: the client's resource methods are replaced in place
  (``client.responses.create = traced``): langsmith's and braintrust's ``wrap_openai``;
* ``client.request``: the client's ``request`` is replaced (logfire's per-client
  instrumentation; logfire itself is not installed, so a minimal tracer does what it does);
* ``class``: the SDK's classes are patched for every client (braintrust's
  ``patch_openai`` patches ``Responses.create``; openinference patches ``OpenAI.request``).

Nothing leaves loopback: langsmith posts its runs to a local HTTP sink, braintrust logs to
its in-memory logger (its API address points at a closed loopback port), openinference
exports to the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import contextlib
import http.server
import inspect
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tracer:
    """One tracer: how it is put on a client (or on the SDK) and what it recorded."""

    name: str
    pattern: str
    #: Put the tracer on one client (instance patterns); None for class patches.
    apply: Callable[[Any], Any] | None
    #: Model calls recorded since the last `reset`.
    count: Callable[[], int]
    reset: Callable[[], None]
    #: Patch the SDK's classes (class patterns).
    install: Callable[[], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Sink(http.server.BaseHTTPRequestHandler):
    """Accepts every request with ``{}``; keeps the bodies posted to ``/runs``."""

    runs: list[dict[str, Any]]
    lock = threading.Lock()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.command == "POST" and self.path.rstrip("/").endswith("/runs"):
            with self.lock:
                self.runs.append(json.loads(body or b"{}"))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def langsmith_tracer() -> Iterator[Tracer]:
    """langsmith's ``wrap_openai``, its runs posted at once to a local HTTP sink."""
    import langsmith
    import langsmith.wrappers

    runs: list[dict[str, Any]] = []
    handler = type("Sink", (_Sink,), {"runs": runs})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client = langsmith.Client(
        api_url=f"http://127.0.0.1:{httpd.server_port}", api_key="test", auto_batch_tracing=False
    )

    def llm_runs() -> int:
        return sum(1 for run in list(runs) if run.get("run_type") == "llm")

    try:
        with langsmith.tracing_context(enabled=True, client=client):
            yield Tracer(
                "langsmith",
                "instance",
                lambda c: langsmith.wrappers.wrap_openai(c, tracing_extra={"client": client}),
                llm_runs,
                runs.clear,
            )
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def _braintrust_memory() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    from braintrust import logger
    from braintrust.test_helpers import init_test_logger

    logged: list[dict[str, Any]] = []
    with logger._internal_with_memory_background_logger() as memory:
        init_test_logger("anchortrack-tests")

        def rows() -> list[dict[str, Any]]:
            logger.flush()
            logged.extend(memory.pop())
            return logged

        yield rows
    logger._state.reset_parent_state()


def _llm_spans(rows: list[dict[str, Any]]) -> int:
    return len({row["span_id"] for row in rows if (row.get("span_attributes") or {}).get("type") == "llm"})


@contextlib.contextmanager
def braintrust_tracer() -> Iterator[Tracer]:
    """braintrust's ``wrap_openai``, logging to its in-memory logger."""
    import braintrust

    with _braintrust_memory() as rows:
        yield Tracer(
            "braintrust",
            "instance",
            braintrust.wrap_openai,
            lambda: _llm_spans(rows()),
            lambda: rows().clear(),
        )


@contextlib.contextmanager
def braintrust_patch_tracer() -> Iterator[Tracer]:
    """braintrust's ``patch_openai()``: the SDK's resource classes patched, for every client."""
    from braintrust.oai import patch_openai

    with _braintrust_memory() as rows, openai_classes_restored():
        yield Tracer(
            "braintrust.patch_openai",
            "class",
            None,
            lambda: _llm_spans(rows()),
            lambda: rows().clear(),
            install=patch_openai,
        )


@contextlib.contextmanager
def openinference_tracer() -> Iterator[Tracer]:
    """openinference's ``OpenAIInstrumentor`` (``OpenAI.request`` patched), to an in-memory exporter."""
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()

    def llm_spans() -> int:
        return sum(
            1
            for span in exporter.get_finished_spans()
            if (span.attributes or {}).get("openinference.span.kind") == "LLM"
        )

    try:
        yield Tracer(
            "openinference",
            "class",
            None,
            llm_spans,
            exporter.clear,
            install=lambda: instrumentor.instrument(tracer_provider=provider),
            extra={"exporter": exporter},
        )
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


@contextlib.contextmanager
def request_tracer() -> Iterator[Tracer]:
    """Replaces one client's ``request``, as logfire's per-client instrumentation does."""
    calls: list[str] = []

    def instrument(client: Any) -> Any:
        original = client.request

        if inspect.iscoroutinefunction(original):

            async def arequest(cast_to: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
                calls.append(options.url)
                return await original(cast_to, options, *args, **kwargs)

            client.request = arequest
        else:

            def request(cast_to: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
                calls.append(options.url)
                return original(cast_to, options, *args, **kwargs)

            client.request = request
        return client

    yield Tracer(
        "client.request",
        "client.request",
        instrument,
        lambda: sum(1 for url in calls if url == "/responses"),
        calls.clear,
    )


TRACERS: dict[str, Callable[[], contextlib.AbstractContextManager[Tracer]]] = {
    "langsmith": langsmith_tracer,
    "braintrust": braintrust_tracer,
    "client.request": request_tracer,
    "braintrust.patch_openai": braintrust_patch_tracer,
    "openinference": openinference_tracer,
}


@contextlib.contextmanager
def openai_classes_restored() -> Iterator[None]:
    """Put back every attribute of the openai SDK's classes as it was (a tracer's class patches)."""
    classes = [
        value
        for name, module in list(sys.modules.items())
        if name == "openai" or name.startswith("openai.")
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__.startswith("openai")
    ]
    saved = {cls: dict(vars(cls)) for cls in classes}
    # Markers set through a wrapper land on the function it wraps.
    functions = {
        value: dict(vars(value))
        for attributes in saved.values()
        for value in attributes.values()
        if inspect.isfunction(value)
    }
    try:
        yield
    finally:
        for function, marks in functions.items():
            vars(function).clear()
            vars(function).update(marks)
        for cls, attributes in saved.items():
            for name in [name for name in vars(cls) if name not in attributes]:
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(cls, name)
            for name, value in attributes.items():
                if vars(cls).get(name) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(cls, name, value)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait until a tracer's background work shows *condition* (it exports off the call's path)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
