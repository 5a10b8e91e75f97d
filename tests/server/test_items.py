"""The server's item rows: every call has its Chat Completions form, and the docs' tables list the rows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from anchortrack.server._items import CALLS, ITEM_TYPES, bridged_call
from anchortrack.server._reconstruct import restore_tool_call
from anchortrack.server._translate import ChatPlan, build_messages, build_tools


SERVER_MD = (Path(__file__).parents[2] / "docs" / "server.md").read_text()

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


def _table_after(heading: str, first_column: str) -> str:
    """The markdown table under *heading* whose header starts with *first_column*."""
    section = SERVER_MD.split(heading, 1)[1]
    match = re.search(rf"^\| {re.escape(first_column)} \|.*?(?=\n\n)", section, re.M | re.S)
    assert match is not None, (heading, first_column)
    return match.group(0)


def test_the_docs_bridge_tables_list_every_bridged_call() -> None:
    """docs/server.md's request-building and reconstruction tables name every bridged call and tool."""
    building = _table_after("### Request building", "Responses")
    restoring = _table_after("### Response reconstruction", "Requested tool")
    for kind, spec in CALLS.items():
        if bridged_call(kind) is None:
            continue
        assert f"`{kind}`" in building, kind
        assert f"| `{spec.tool}` | `{kind}`" in restoring, kind


def test_the_docs_error_table_names_every_paired_call() -> None:
    """docs/server.md's error table names every call the context checks pair with its output."""
    errors = _table_after("## Errors", "Condition")
    for kind, spec in ITEM_TYPES.items():
        if spec.paired:
            assert f"`{kind}`" in errors, kind
            assert f"`{spec.output}`" in errors, kind
            assert spec.paired in errors, kind
