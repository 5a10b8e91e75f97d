"""
benchmarks/bench_frameworks.py still runs against today's code and frameworks, at toy size.

It asserts what the comparison table claims about correctness (who chains, who sends a
middleware's edit, who survives a forgotten response), never a timing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from anchortrack.server import ResponsesServer


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", name="bench")
def _bench() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_frameworks

        yield bench_frameworks
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_comparison_table_at_toy_size(bench: ModuleType) -> None:
    """Four calls through every loop: the outcomes the docs page shows."""
    state = bench.LoggingState()
    with ResponsesServer(state=state) as server:
        rows = {row["loop"]: row for row in bench.measure(server, state, calls=4, repeats=1)}

    assert set(rows) == set(bench.LOOPS)
    kept = "**keeps the redacted text** in the server's context"
    redacted = "sends the edit (server context redacted)"
    for name, row in rows.items():
        assert row["requests"] == 4, name
        chains = name != "unwrapped client (stateless)"
        assert row["chained"] == (3 if chains else 0), name
        assert (row["bytes_share"] < 1) is chains, name
        if name.endswith(", wrapped client") or name == "anchortrack":
            assert row["edit"] == redacted, name
            assert row["forget"] == "finishes, 1 resend", name
    assert rows["unwrapped client (stateless)"]["forget"] == "finishes"
    for own in ("hand-written chained loop", "openai-agents, auto_previous_response_id=True",
                "langchain-openai, use_previous_response_id=True"):  # fmt: skip
        assert rows[own]["edit"] == kept, own
        assert rows[own]["forget"] == "**aborts** (HTTP 400)", own
    if sys.version_info >= (3, 11):  # pydantic-ai needs it (the benchmark leaves it out below)
        assert rows["pydantic-ai, openai_previous_response_id='auto'"]["forget"] == "**aborts** (HTTP 400)"
    assert "| anchortrack | 4 | 3 of 4 |" in bench.table(list(rows.values()))
