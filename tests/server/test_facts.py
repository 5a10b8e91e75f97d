"""`Facts`: a context's checks, usage count and digest from its parent's facts plus its own items."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from anchortrack.server._errors import APIError
from anchortrack.server._facts import Facts, canonical_json, check_context


Item = dict[str, Any]

_ids = st.sampled_from(["a", "b", "c"])
_items = st.one_of(
    st.builds(lambda i: {"id": f"msg_{i}", "type": "message", "role": "user", "content": "x"}, _ids),
    st.builds(lambda: {"type": "message", "role": "user", "content": "y"}),
    st.builds(lambda c: {"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"}, _ids),
    st.builds(lambda c: {"type": "function_call_output", "call_id": c, "output": "ok"}, _ids),
    st.builds(lambda c: {"type": "custom_tool_call", "call_id": c, "name": "g", "input": "x"}, _ids),
    st.builds(lambda c: {"type": "custom_tool_call_output", "call_id": c, "output": "y"}, _ids),
    st.builds(lambda i: {"id": f"mcpr_{i}", "type": "mcp_approval_request", "name": "t"}, _ids),
    st.builds(lambda i: {"type": "mcp_approval_response", "approval_request_id": f"mcpr_{i}"}, _ids),
    st.builds(lambda i: {"id": f"lsh_{i}", "type": "local_shell_call", "call_id": f"ls_{i}"}, _ids),
    st.builds(lambda i: {"id": f"lso_{i}", "type": "local_shell_call_output", "call_id": f"ls_{i}"}, _ids),
)


def _refusal(check: Any) -> str | None:
    try:
        check()
    except APIError as error:
        return f"{error.status} {error.param} {error.message}"
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_items, max_size=5), min_size=1, max_size=4))
def test_facts_extended_segment_by_segment_check_as_the_whole_context(segments: list[list[Item]]) -> None:
    """Extending facts response by response refuses exactly what the whole context's facts refuse, with the
    same error, and counts and digests the context as its canonical JSON."""
    facts = Facts()
    for segment in segments:
        facts = facts.extend(segment)
    context = [item for segment in segments for item in segment]

    assert _refusal(lambda: check_context(context)) == _refusal(facts.check)
    assert len(canonical_json(context)) == facts.json_length
    assert hashlib.sha256(canonical_json(context).encode()).hexdigest() == facts.digest()
