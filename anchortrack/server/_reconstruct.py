"""Response reconstruction: a Chat Completions reply → Responses output (pure).

Output order: reasoning, tool calls (restored to their tool's requested type when the arguments fit), then
the assistant message (when there is text or no tool calls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from anchortrack.server._items import CALL_OF_TOOL, ITEM_TYPES, Item
from anchortrack.server._model import ModelReply, function_call_item, joined_text, message_item, new_id
from anchortrack.server._model import usage as response_usage
from anchortrack.server._translate import ChatPlan


REDACTED = "[redacted]"


def redact(value: Any, secret: str | None) -> Any:
    """*value* (JSON data) with every occurrence of *secret* in its strings replaced."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, REDACTED)
    if isinstance(value, dict):
        return {key: redact(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, secret) for item in value]
    return value


class MalformedReply(ValueError):
    """The provider's reply is not a Chat Completion (or chunk)."""


@dataclass(frozen=True)
class Outcome:
    status: str
    incomplete_reason: str | None = None
    error: str | None = None


#: Provider finish reason → outcome (``None``: no finish reason).
FINISH_REASONS: dict[str | None, Outcome] = {
    "stop": Outcome("completed"),
    "tool_calls": Outcome("completed"),
    "length": Outcome("incomplete", "max_output_tokens"),
    "model_context_window_exceeded": Outcome("incomplete", "max_output_tokens"),
    "content_filter": Outcome("incomplete", "content_filter"),
    "sensitive": Outcome("incomplete", "content_filter"),
    "network_error": Outcome("failed", error="The upstream provider reported a network error."),
    None: Outcome("failed", error="The upstream provider returned no finish reason."),
}


def arguments_text(arguments: object) -> str:
    """A provider call's ``arguments`` as text (some servers send an object; anything else is ``""``)."""
    if isinstance(arguments, dict):
        return json.dumps(arguments, separators=(",", ":"))
    return arguments if isinstance(arguments, str) else ""


def restored_type(plan: ChatPlan, provider_name: str) -> str:
    """The item type a call to *provider_name* is restored to (if its arguments parse)."""
    return CALL_OF_TOOL.get(plan.tools.get(provider_name, "function"), "function_call")


def restore_tool_call(
    plan: ChatPlan, call_id: str, provider_name: str, arguments: str, *, item_id: str | None = None
) -> Item:
    """One provider tool call as the item of its requested type, or a ``function_call`` if the arguments do
    not fit it."""
    kind = restored_type(plan, provider_name)
    spec = ITEM_TYPES[kind]
    if spec.restore is not None:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        fields = spec.restore(parsed) if isinstance(parsed, dict) else None
        if fields is not None:
            item = {"id": item_id or new_id(spec.prefix), "type": kind, "call_id": call_id, **fields}
            return item | ({"name": provider_name} if "name" in spec.required else {})
    item_id = item_id if item_id and item_id.startswith("fc_") else new_id("fc")
    return function_call_item(item_id, call_id, provider_name, arguments)


def map_usage(usage: object) -> dict[str, Any] | None:
    """Chat Completions ``usage`` in the Responses shape (``None`` when absent)."""
    if not isinstance(usage, dict):
        return None

    def number(mapping: object, key: str) -> int:
        value = mapping.get(key) if isinstance(mapping, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    input_tokens = number(usage, "prompt_tokens")
    output_tokens = number(usage, "completion_tokens")
    total = number(usage, "total_tokens") or input_tokens + output_tokens
    cached = number(usage.get("prompt_tokens_details"), "cached_tokens")
    reasoning = number(usage.get("completion_tokens_details"), "reasoning_tokens")
    return response_usage(input_tokens, output_tokens, total, cached=cached, reasoning=reasoning)


def content_text(content: object, where: str) -> str:
    """The text of a chat message's (or delta's) ``content``: a string or text parts."""
    if content is not None and not isinstance(content, (str, list)):
        raise MalformedReply(f"{where} is {type(content).__name__}, not text")
    return joined_text(content)


def reasoning_text(message: dict[str, Any]) -> str:
    """A chat message's (or delta's) ``reasoning_content`` (or ``reasoning``), or ``""``."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(value := message.get(key), str) and value:
            return value
    return ""


def reasoning_item(text: str, *, item_id: str) -> Item:
    """The reasoning item for a provider's ``reasoning_content``."""
    content = [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content}


@dataclass(frozen=True)
class Origin:
    """Who answered, for error messages."""

    provider: str
    model: str
    response_id: str


def reconstruct(
    completion: object, plan: ChatPlan, origin: Origin, *, ids: dict[str, str] | None = None
) -> ModelReply:
    """The reply for a decoded Chat Completion answering *plan* (MalformedReply if it is none); *ids* are
    those a stream already announced (``"reasoning"``, ``"message"``, ``"call:<index>"``)."""
    known = ids or {}
    if not isinstance(completion, dict):
        raise MalformedReply("the body is not a JSON object")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedReply("it has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply("its first choice has no message")
    text = content_text(message.get("content"), "the message content")
    reasoning = reasoning_text(message)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise MalformedReply("tool_calls is not a list")
    reason = choice.get("finish_reason")
    outcome = FINISH_REASONS.get(reason) if reason is None or isinstance(reason, str) else None
    unexpected = f"The upstream provider returned an unexpected finish reason: {reason!r}."
    outcome = outcome or Outcome("failed", error=unexpected)
    output: list[Item] = []
    if reasoning:
        output.append(reasoning_item(reasoning, item_id=known.get("reasoning") or new_id("rs")))
    for index, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedReply(f"tool call {index} has no function name")
        arguments = arguments_text(function.get("arguments"))
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else new_id("call")
        item_id = known.get(f"call:{index}")
        output.append(restore_tool_call(plan, call_id, function["name"], arguments, item_id=item_id))
    has_message = bool(text) or not raw_calls
    if has_message:
        status = "completed" if outcome.status == "completed" else "incomplete"
        output.append(message_item(text, item_id=known.get("message") or new_id("msg"), status=status))
    if plan.requires_valid_json and outcome.status == "completed" and has_message:
        try:
            json.loads(text)
        except ValueError:
            invalid = (
                f"The upstream provider {origin.provider} (model {origin.model}) returned output "
                f"that is not valid JSON for response {origin.response_id}; the requested json_schema "
                "format was sent as json_object, so the output could not be held to the schema."
            )
            outcome = Outcome("failed", error=invalid)
    return ModelReply(
        status=outcome.status,
        output=output,
        error={"code": "server_error", "message": outcome.error} if outcome.error else None,
        incomplete_details={"reason": outcome.incomplete_reason} if outcome.incomplete_reason else None,
        usage=map_usage(completion.get("usage")),
        model=origin.model,
    )
