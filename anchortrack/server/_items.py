"""What the server knows about each item type: one row per type in `ITEM_TYPES`.

Validation, the context checks, made-up ids and the upstream bridge read the rows: a new type is one row."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


Item = dict[str, Any]
Schema = dict[str, Any]

#: Content part types whose ``text`` is text.
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def to_json(value: object) -> str:
    """Compact JSON, as sent to a provider."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ItemType:
    """One item type: the id *prefix*, the string fields an item must have (a call requiring ``name`` calls a
    named tool), then a call's fields, then an output's.

    *paired*: how error messages name a call the context checks pair with its output (which must then carry
    ``output``); *bridged* ``False``: the bridge sends neither it nor its output; *arguments*: its
    provider-side arguments (JSON text); *restore*: its fields from the parsed arguments (``None``: they do
    not fit, it stays a ``function_call``); *schema* and *description*: of the function standing in for its
    tool (none: the tool's own); *restores*: docs/server.md's table; *content*: an output's ``tool`` message
    text; *call_keys*: an output's fields naming its call (first string wins)."""

    prefix: str = "item"
    required: tuple[str, ...] = ()
    output: str | None = None
    tool: str | None = None
    paired: str | None = None
    arguments: Callable[[Item], str] | None = None
    restore: Callable[[dict[str, Any]], Item | None] | None = None
    schema: Schema | None = None
    description: str = ""
    bridged: bool = True
    restores: str = ""
    content: Callable[[Item], str] | None = None
    call_keys: tuple[str, ...] = ("call_id",)

    def provider_name(self, item: Item) -> str:
        """The provider-side function name of a call *item* of this type."""
        return str(item.get("name", "")) if "name" in self.required else str(self.tool)


def _object(properties: Schema, *required: str, **extra: Any) -> Schema:
    return {"type": "object", "properties": properties, "required": list(required), **extra}


_STRING: Schema = {"type": "string"}
_INTEGER: Schema = {"type": "integer"}
_STRINGS: Schema = {"type": "array", "items": _STRING}
_OPERATIONS = ("create_file", "update_file", "delete_file")


def _action(item: Item, schema: Schema) -> str:
    action = item.get("action")
    action = action if isinstance(action, dict) else {}
    return to_json({key: action[key] for key in schema["properties"] if action.get(key) is not None})


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _shell(arguments: dict[str, Any]) -> Item | None:
    if not _strings(arguments.get("commands")):
        return None
    action = {"commands": arguments["commands"]}
    action |= {key: _int(arguments.get(key)) for key in ("timeout_ms", "max_output_length")}
    return {"action": action, "status": "completed", "environment": None}


def _local_shell(arguments: dict[str, Any]) -> Item | None:
    env = arguments.get("env", {})
    if not _strings(arguments.get("command")) or not isinstance(env, dict) or not _strings([*env.values()]):
        return None
    timeout = _int(arguments.get("timeout_ms"))
    action = {"type": "exec", "command": arguments["command"], "env": env, "timeout_ms": timeout}
    action |= {key: _str(arguments.get(key)) for key in ("working_directory", "user")}
    return {"action": action, "status": "completed"}


def _apply_patch(arguments: dict[str, Any]) -> Item | None:
    operation = arguments.get("operation")
    if not isinstance(operation, dict) or not isinstance(operation.get("path"), str):
        return None
    return {"operation": operation, "status": "completed"} if operation.get("type") in _OPERATIONS else None


def output_text(item: Item) -> str:
    """The text of a tool output *item*: its string, its text parts joined, else its JSON."""
    output = item.get("output")
    if isinstance(output, list):
        return "".join(
            part["text"]
            for part in output
            if isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str)
        )
    return _as_json(item)


def _as_json(item: Item) -> str:
    """A shell call output's text: a string output as it is, any other as JSON."""
    output = item.get("output")
    return output if isinstance(output, str) else "" if output is None else to_json(output)


_SHELL = _object(
    {
        "commands": {**_STRINGS, "description": "Commands to run."},
        "timeout_ms": _INTEGER,
        "max_output_length": _INTEGER,
    },
    "commands",
)
_LOCAL_SHELL = _object(
    {
        "command": {**_STRINGS, "description": "The argv to run."},
        "env": {"type": "object", "additionalProperties": _STRING},
        "timeout_ms": _INTEGER,
        "working_directory": _STRING,
        "user": _STRING,
    },
    "command",
)
_OPERATION = _object(
    {"type": {**_STRING, "enum": list(_OPERATIONS)}, "path": _STRING, "diff": _STRING}, "type", "path"
)

ITEM_TYPES: dict[str, ItemType] = {
    "message": ItemType("msg"),
    "reasoning": ItemType("rs"),
    "item_reference": ItemType(required=("id",)),
    "function_call": ItemType(
        "fc",
        ("call_id", "name", "arguments"),
        "function_call_output",
        "function",
        "function call",
        arguments=lambda item: str(item.get("arguments", "")),
    ),
    "function_call_output": ItemType("fco", ("call_id",)),
    "custom_tool_call": ItemType(
        "ctc",
        ("call_id", "name", "input"),
        "custom_tool_call_output",
        "custom",
        "custom tool call",
        arguments=lambda item: to_json({"input": item.get("input", "")}),
        restore=lambda parsed: {"input": parsed["input"]} if isinstance(parsed.get("input"), str) else None,
        restores="`input` restored verbatim",
        schema=_object(
            {"input": {**_STRING, "description": "The tool's input, verbatim."}},
            "input",
            additionalProperties=False,
        ),
    ),
    "custom_tool_call_output": ItemType(required=("call_id",)),
    "shell_call": ItemType(
        "sh",
        output="shell_call_output",
        tool="shell",
        arguments=lambda item: _action(item, _SHELL),
        restore=_shell,
        restores="`action.commands`",
        schema=_SHELL,
        description="Run shell commands.",
    ),
    "shell_call_output": ItemType(content=_as_json),
    "local_shell_call": ItemType(
        "lsh",
        output="local_shell_call_output",
        tool="local_shell",
        arguments=lambda item: _action(item, _LOCAL_SHELL),
        restore=_local_shell,
        restores="`action.command`, `env`",
        schema=_LOCAL_SHELL,
        description="Run a command on the local machine.",
    ),
    "local_shell_call_output": ItemType(call_keys=("call_id", "id")),
    "apply_patch_call": ItemType(
        "apc",
        output="apply_patch_call_output",
        tool="apply_patch",
        arguments=lambda item: to_json({"operation": item.get("operation")}),
        restore=_apply_patch,
        restores="`operation`",
        schema=_object({"operation": _OPERATION}, "operation"),
        description="Create, update or delete a file with a diff.",
    ),
    "apply_patch_call_output": ItemType(
        content=lambda item: str(item.get("status", "")) if item.get("output") is None else output_text(item)
    ),
}

#: Call type → what it is; only the calls a tool output answers.
CALLS = {kind: spec for kind, spec in ITEM_TYPES.items() if spec.output is not None}
#: Output type → the call type it answers.
OUTPUTS = {str(spec.output): kind for kind, spec in CALLS.items()}
#: Tool type → the call type a call of that tool is.
CALL_OF_TOOL = {spec.tool: kind for kind, spec in CALLS.items() if spec.tool is not None}


def item_type(kind: object) -> ItemType:
    return ITEM_TYPES.get(kind, _UNKNOWN) if isinstance(kind, str) else _UNKNOWN


def bridged_call(kind: object) -> ItemType | None:
    spec = CALLS.get(kind) if isinstance(kind, str) else None
    return spec if spec is not None and spec.bridged and spec.arguments is not None else None


_UNKNOWN = ItemType()
