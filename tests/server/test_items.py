"""The server's item rows: every call has its Chat Completions form (docs/server.md's tables follow)."""

from __future__ import annotations

from typing import Any

import pytest

from anchortrack.server._items import CALLS, bridged_call
from anchortrack.server._reconstruct import restore_tool_call
from anchortrack.server._translate import ChatPlan, build_messages, build_tools


#: One call of each bridged type, as the model makes it: a new call type needs its row here.
SAMPLES: dict[str, dict[str, Any]] = {
    "function_call": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    "custom_tool_call": {"name": "run_sql", "input": "select 1"},
    "shell_call": {
        "action": {"commands": ["ls"], "timeout_ms": 5, "max_output_length": None},
        "environment": None,
    },
    "local_shell_call": {
        "action": {
            "type": "exec",
            "command": ["ls", "-l"],
            "env": {"A": "b"},
            "timeout_ms": None,
            "working_directory": "/tmp",
            "user": None,
        }
    },
    "apply_patch_call": {"operation": {"type": "create_file", "path": "a.txt", "diff": "+x"}},
}


def test_every_call_row_has_its_chat_completions_form_or_says_it_is_not_bridged() -> None:
    """A call row without its form (and without ``bridged=False``) fails here, not at request time."""
    for kind, spec in CALLS.items():
        assert spec.tool is not None, kind
        if not spec.bridged:
            continue
        assert spec.arguments is not None, f"{kind}: no Chat Completions form (or bridged=False)"
        assert (spec.restore is None) == (spec.schema is None), f"{kind}: restore and schema go together"
        assert spec.restore is None or spec.restores, (
            f"{kind}: say what its restored call carries (restores=)"
        )
        assert kind in SAMPLES, f"{kind}: add a sample call to SAMPLES"


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_a_bridged_call_goes_to_the_provider_and_comes_back_as_itself(kind: str) -> None:
    """Each row's form round-trips: the call sent as a tool call and restored from the provider's reply
    is the same item (a tool requested by type, answered by the provider under the name it was sent)."""
    spec = bridged_call(kind)
    assert spec is not None
    call = {"id": f"{spec.prefix}_1", "type": kind, "call_id": "c1", **SAMPLES[kind]}
    tool = {"type": spec.tool, **({"name": call["name"]} if "name" in spec.required else {})}
    chat_tools, types = build_tools([tool])
    output = {"type": str(spec.output), "call_id": "c1", "output": "done"}

    assistant, answer = build_messages([call, output], None)
    (sent,) = assistant["tool_calls"]
    restored = restore_tool_call(
        ChatPlan({}, types), "c1", sent["function"]["name"], sent["function"]["arguments"], item_id=call["id"]
    )

    assert [sent["function"]["name"]] == [t["function"]["name"] for t in chat_tools]
    assert {"role": "tool", "tool_call_id": "c1", "content": "done"} == answer
    assert call == {key: value for key, value in restored.items() if key != "status"}
