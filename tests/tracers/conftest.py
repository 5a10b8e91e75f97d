"""Keep every tracer on loopback: their service addresses point at a closed local port."""

from __future__ import annotations

import pytest


_CLOSED = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def _tracers_stay_local(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "BRAINTRUST_API_URL",
        "BRAINTRUST_APP_URL",
        "LANGSMITH_ENDPOINT",
        "LANGCHAIN_ENDPOINT",
        "LANGFUSE_BASE_URL",
        "LANGFUSE_HOST",
    ):
        monkeypatch.setenv(name, _CLOSED)
    monkeypatch.setenv("BRAINTRUST_API_KEY", "test")
    monkeypatch.setenv("LOGFIRE_SEND_TO_LOGFIRE", "false")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "LOGFIRE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
