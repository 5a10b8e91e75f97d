"""
Real tracers, pointed at sinks on this machine, and how many model calls each recorded.

Each `Tracer` is one patching pattern a tracer uses on an openai client:

* ``instance``: the client's resource methods are replaced in place
  (``client.responses.create = traced``): langsmith's and braintrust's ``wrap_openai``;
* ``client.request``: the client's ``request`` is replaced (logfire's per-client
  ``instrument_openai(client)``, which also hands the SDK its own ``Stream`` subclass; and a
  minimal tracer doing the same without the stream class);
* ``class``: the SDK's classes are patched for every client (braintrust's ``patch_openai``,
  langfuse's ``langfuse.openai``, openllmetry and opentelemetry-instrumentation-openai-v2 patch
  ``Responses.create`` or ``Completions.create``; openinference and logfire's global
  ``instrument_openai()`` patch ``OpenAI.request``; langfuse also replaces ``Stream.__iter__``).

Nothing leaves loopback: langsmith posts its runs to a local HTTP sink, braintrust logs to
its in-memory logger (its API address points at a closed loopback port), logfire
(``send_to_logfire=False``), langfuse, openllmetry, opentelemetry-instrumentation-openai-v2 and
openinference export to the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import http.server
import inspect
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


#: A closed port on loopback: where every tracer's own service address points.
_CLOSED = "http://127.0.0.1:9"


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

    provider, exporter = _memory_provider()
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


def _memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@functools.cache
def _process_provider(name: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider (and its exporter) kept for the whole process, one per *name*."""
    return _memory_provider()


def _spans(exporter: InMemorySpanExporter, chosen: Callable[[ReadableSpan], bool]) -> Callable[[], int]:
    return lambda: sum(1 for span in exporter.get_finished_spans() if chosen(span))


def _logfire_exporter() -> InMemorySpanExporter:
    import logfire

    exporter = InMemorySpanExporter()
    logfire.configure(
        send_to_logfire=False,
        console=False,
        metrics=False,
        inspect_arguments=False,
        additional_span_processors=[SimpleSpanProcessor(exporter)],
    )
    return exporter


def _logfire_request(span: ReadableSpan) -> bool:
    """logfire's span of one ``POST /responses`` (not its log of a stream's end)."""
    return str((span.attributes or {}).get("logfire.msg_template", "")).startswith("Responses API")


@contextlib.contextmanager
def logfire_tracer() -> Iterator[Tracer]:
    """logfire's per-client ``instrument_openai(client)``: its ``request`` and stream class replaced."""
    import logfire

    exporter = _logfire_exporter()

    def instrument(client: Any) -> Any:
        logfire.instrument_openai(client)
        return client

    yield Tracer("logfire", "client.request", instrument, _spans(exporter, _logfire_request), exporter.clear)


@contextlib.contextmanager
def logfire_global_tracer() -> Iterator[Tracer]:
    """logfire's global ``instrument_openai()``: ``OpenAI.request`` / ``AsyncOpenAI.request`` patched."""
    import logfire

    exporter = _logfire_exporter()
    with openai_classes_restored():
        yield Tracer(
            "logfire.global",
            "class",
            None,
            _spans(exporter, _logfire_request),
            exporter.clear,
            install=lambda: logfire.instrument_openai(),
        )


@functools.cache
def _langfuse() -> tuple[Any, InMemorySpanExporter]:
    """The process's one langfuse client (langfuse keeps one per public key) and its exporter."""
    from langfuse import Langfuse

    exporter = InMemorySpanExporter()
    client = Langfuse(
        public_key="pk-test",
        secret_key="sk-test",
        base_url=_CLOSED,
        span_exporter=exporter,
        tracer_provider=TracerProvider(),  # its own: logfire.configure() replaces the global one's
        flush_at=1,
        flush_interval=0.05,
    )
    return client, exporter


@contextlib.contextmanager
def langfuse_tracer() -> Iterator[Tracer]:
    """langfuse's ``langfuse.openai`` (``Responses.create`` and ``Stream.__iter__`` patched on import)."""
    client, exporter = _langfuse()

    def install() -> None:
        module = sys.modules.get("langfuse.openai")
        if module is None:
            import langfuse.openai  # noqa: F401 - patches the SDK on import

            return
        module._openai_stream_iter_hook_installed = False  # type: ignore[attr-defined]
        module.register_tracing()
        module._install_openai_stream_iteration_hooks()

    def generations() -> int:
        client.flush()
        return sum(
            1
            for span in exporter.get_finished_spans()
            if (span.attributes or {}).get("langfuse.observation.type") == "generation"
        )

    exporter.clear()
    with openai_classes_restored():
        yield Tracer("langfuse", "class", None, generations, exporter.clear, install=install)


@contextlib.contextmanager
def openllmetry_tracer() -> Iterator[Tracer]:
    """openllmetry's ``opentelemetry-instrumentation-openai`` (``Responses.create`` wrapped with wrapt)."""
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    # One provider for the process: instrumented again, it keeps ending stream spans on its first one.
    provider, exporter = _process_provider("openllmetry")
    gc.collect()
    exporter.clear()
    instrumentor = OpenAIInstrumentor()
    restored = openai_classes_restored()  # its uninstrument leaves its Responses wrappers in place
    restored.__enter__()

    def install() -> None:
        with warnings.catch_warnings():  # its own pydantic models' deprecation, on first import
            warnings.simplefilter("ignore", DeprecationWarning)
            instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)

    try:
        yield Tracer(
            "openllmetry",
            "class",
            None,
            _spans(exporter, lambda span: span.name.startswith("openai.response")),
            lambda: (gc.collect(), exporter.clear()),  # a stream's span ends when it is collected
            install=install,
        )
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        restored.__exit__(None, None, None)


@contextlib.contextmanager
def otel_v2_tracer() -> Iterator[Tracer]:
    """
    ``opentelemetry-instrumentation-openai-v2`` (``Completions.create`` / ``Embeddings.create`` wrapped
    with wrapt): it does not trace the Responses API, so it records none of these calls, wrapped or not.
    """
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    provider, exporter = _memory_provider()
    instrumentor = OpenAIInstrumentor()
    try:
        yield Tracer(
            "otel-openai-v2",
            "class",
            None,
            _spans(exporter, lambda span: True),
            exporter.clear,
            install=lambda: instrumentor.instrument(tracer_provider=provider, skip_dep_check=True),
            extra={"responses_traced": False},
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
    "logfire": logfire_tracer,
    "logfire.global": logfire_global_tracer,
    "langfuse": langfuse_tracer,
    "openllmetry": openllmetry_tracer,
    "otel-openai-v2": otel_v2_tracer,
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
