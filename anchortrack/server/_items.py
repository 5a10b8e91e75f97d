"""
What the server knows about each item type, in one table.

Request validation, the context checks, the upstream bridge and the ids the
server makes up all read `ITEM_TYPES`: adding an item type is one row here (and,
for a call the bridge sends on, its form in `_translate.call_arguments`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ItemType:
    """
    One item type.

    Attributes:
        prefix: Prefix of the ids the server makes up for items of this type.
        required: String fields a request's item of this type must have.
        output: For a call: the type of the item that answers it.
        tool: For a call: the type of the tool it calls.
        paired: For a call the context checks pair with its output (and the
            output with its call): how error messages name the call.
    """

    prefix: str = "item"
    required: tuple[str, ...] = ()
    output: str | None = None
    tool: str | None = None
    paired: str | None = None


ITEM_TYPES: dict[str, ItemType] = {
    "message": ItemType("msg"),
    "reasoning": ItemType("rs"),
    "item_reference": ItemType(required=("id",)),
    "function_call": ItemType(
        "fc", ("call_id", "name", "arguments"), "function_call_output", "function", "function call"
    ),
    "function_call_output": ItemType("fco", ("call_id",)),
    "custom_tool_call": ItemType(
        "ctc", ("call_id", "name", "input"), "custom_tool_call_output", "custom", "custom tool call"
    ),
    "custom_tool_call_output": ItemType(required=("call_id",)),
    "shell_call": ItemType("sh", output="shell_call_output", tool="shell"),
    "shell_call_output": ItemType(),
    "local_shell_call": ItemType("lsh", output="local_shell_call_output", tool="local_shell"),
    "local_shell_call_output": ItemType(),
    "apply_patch_call": ItemType("apc", output="apply_patch_call_output", tool="apply_patch"),
    "apply_patch_call_output": ItemType(),
}

#: Call type → what it is; only the calls a tool output answers.
CALLS = {kind: spec for kind, spec in ITEM_TYPES.items() if spec.output is not None}
#: Output type → the call type it answers.
OUTPUTS = {str(spec.output): kind for kind, spec in CALLS.items()}
#: Tool type → the call type a call of that tool is.
CALL_OF_TOOL = {spec.tool: kind for kind, spec in CALLS.items() if spec.tool is not None}


def item_type(kind: object) -> ItemType:
    """What the server knows of item type *kind* (nothing special for a type it does not know)."""
    return ITEM_TYPES.get(kind, _UNKNOWN) if isinstance(kind, str) else _UNKNOWN


_UNKNOWN = ItemType()
