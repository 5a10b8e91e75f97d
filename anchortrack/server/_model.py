"""The scripted model: a deterministic stand-in for an LLM (pure).

Its reply depends only on the resolved context and the instructions, so a chained request and the equivalent
stateless one get the same answer.  `build_response` turns any model's `ModelReply` into a response object."""

from __future__ import annotations

import base64
import hashlib
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from anchortrack.server._facts import canonical_json, context_facts
from anchortrack.server._request import CreateRequest


Item = dict[str, Any]

#: Longest ``!sleep`` honoured, in milliseconds.
MAX_SLEEP_MS = 60_000.0


def context_digest(context: Sequence[Item]) -> str:
    """First 12 hex digits of the SHA-256 of the canonical JSON of *context* (a list)."""
    return context_facts(context).digest()[:12]


def new_id(prefix: str) -> str:
    """A fresh random id such as ``msg_3f…`` (48 hex digits, like OpenAI's)."""
    return f"{prefix}_{secrets.token_hex(24)}"


@dataclass(frozen=True)
class Script:
    text: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    rounds: int = 1
    reason: bool = False
    fail: bool = False
    incomplete: bool = False
    sleep_ms: float = 0.0


def parse_script(message: str) -> Script:
    """Split a user message into its text and its ``!`` commands."""
    text_lines: list[str] = []
    calls: list[tuple[str, str]] = []
    flags: dict[str, bool] = {"reason": False, "fail": False, "incomplete": False}
    rounds, sleep_ms = 1, 0.0
    for line in message.splitlines():
        stripped = line.strip()
        if not stripped.startswith("!"):
            text_lines.append(line)
            continue
        command, _, rest = stripped.partition(" ")
        rest = rest.strip()
        if command == "!call" and rest:
            name, _, arguments = rest.partition(" ")
            calls.append((name, arguments.strip() or "{}"))
        elif command == "!rounds":
            rounds = _int(rest, rounds, minimum=1)
        elif command == "!sleep":
            sleep_ms = min(float(_int(rest, 0, minimum=0)), MAX_SLEEP_MS)
        elif command[1:] in flags:
            flags[command[1:]] = True
    text = "\n".join(text_lines).strip()
    return Script(text=text, calls=tuple(calls), rounds=rounds, sleep_ms=sleep_ms, **flags)


def _int(text: str, default: int, *, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        return default
    return value if value >= minimum else default


def _is_user_message(item: Item) -> bool:
    return item.get("role") == "user" and item.get("type", "message") in ("message", None)


def joined_text(value: object, separator: str = "", otherwise: str = "") -> str:
    """*value* as text: a string as it is, its parts' ``text`` joined by *separator*, else *otherwise*."""
    if not isinstance(value, list):
        return value if isinstance(value, str) else otherwise
    return separator.join(
        part["text"] for part in value if isinstance(part, dict) and isinstance(part.get("text"), str)
    )


def message_item(text: str, *, item_id: str, status: str) -> Item:
    """The assistant message item for *text* (every model backend answers with these shapes)."""
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str) -> Item:
    item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
    return {**item, "status": "completed"}


def usage(input_tokens: int, output_tokens: int, total: int, *, cached: int = 0, reasoning: int = 0) -> Item:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }


@dataclass(frozen=True)
class ModelReply:
    """What the model produced for one turn (OpenAI-shaped output).

    Attributes:
        error: ``{"code", "message"}`` of a ``failed`` reply (``incomplete_details``: of an incomplete one).
        delay: Seconds to wait before answering.
        usage: The response's ``usage``, when the backend measured it (else the server estimates it).
        model: The model that answered, when it differs from the request's.
    """

    status: str
    output: list[Item] = field(default_factory=list)
    error: dict[str, str] | None = None
    incomplete_details: dict[str, str] | None = None
    delay: float = 0.0
    usage: dict[str, Any] | None = None
    model: str | None = None


class ScriptedModel:
    """The deterministic default backend of the local server.

    It echoes the last user message as ``echo: <text> [ctx:<digest>] [items:<n>]`` (plus ``[instr:<digest>]``
    with instructions).  That message's lines starting with ``!`` are commands, spelled out in the server
    guide: ``!call NAME JSON_ARGS`` (one line per parallel call), ``!rounds K``, ``!reason``, ``!fail``,
    ``!incomplete``, ``!sleep MS``; unknown ones are ignored.  Ids come from *id_factory* (random by default);
    everything else is a function of the context and the instructions.
    """

    def __init__(self, *, id_factory: Callable[[str], str] = new_id) -> None:
        self._new_id = id_factory

    def respond(
        self, context: Sequence[Item], *, instructions: str | Sequence[Any] | None = None
    ) -> ModelReply:
        """Answer the resolved *context* (oldest item first)."""
        users = (index for index in reversed(range(len(context))) if _is_user_message(context[index]))
        user_index = next(users, -1)  # the last user message
        last = context[user_index] if user_index >= 0 else None
        script = Script() if last is None else parse_script(joined_text(last.get("content"), "\n"))
        after = context[user_index + 1 :]
        tags = f"[ctx:{context_digest(context)}] [items:{len(context)}]"
        if instructions:
            text = instructions if isinstance(instructions, str) else canonical_json(list(instructions))
            tags += f" [instr:{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}]"
        delay = script.sleep_ms / 1000.0
        if script.fail:
            error = {"code": "server_error", "message": "The scripted model failed as asked (!fail)."}
            return ModelReply(status="failed", error=error, delay=delay)
        output: list[Item] = [self._reasoning(tags)] if script.reason else []
        echo = f"echo: {script.text} {tags}" if script.text else f"echo: {tags}"
        if script.incomplete:
            output.append(self._message(echo[: max(1, len(echo) // 2)], status="incomplete"))
            details = {"reason": "max_output_tokens"}
            return ModelReply(status="incomplete", output=output, incomplete_details=details, delay=delay)
        if script.calls:
            calls_made = sum(1 for item in after if item.get("type") == "function_call")
            rounds_done = -(-calls_made // len(script.calls))
            if rounds_done < script.rounds:
                output.extend(self._call(name, arguments) for name, arguments in script.calls)
            else:
                outputs = [item.get("output") for item in after if item.get("type") == "function_call_output"]
                results = " | ".join(joined_text(value, "", canonical_json(value)) for value in outputs)
                output.append(self._message(f"tool results: {results} {tags}"))
        else:
            output.append(self._message(echo))
        return ModelReply(status="completed", output=output, delay=delay)

    def _message(self, text: str, *, status: str = "completed") -> Item:
        return message_item(text, item_id=self._new_id("msg"), status=status)

    def _call(self, name: str, arguments: str) -> Item:
        return function_call_item(self._new_id("fc"), self._new_id("call"), name, arguments)

    def _reasoning(self, tags: str) -> Item:
        secret = f"anchortrack-scripted-reasoning {tags}".encode()
        return {
            "id": self._new_id("rs"),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": f"scripted reasoning {tags}"}],
            "encrypted_content": base64.b64encode(secret).decode("ascii"),
        }


def _tokens(value: object) -> int:
    return math.ceil(len(canonical_json(value)) / 4)


def build_response(
    request: CreateRequest,
    reply: ModelReply,
    *,
    response_id: str,
    created_at: float,
    context: Sequence[Item],
    announce: bool = True,
) -> dict[str, Any]:
    """The response object for *reply*, with every field the spec requires.

    *announce* says that request properties (``tools``, ``text``…) apply per request, never over a chain, so
    clients that read it (``anchortrack._properties.announced``) keep chaining when those change."""
    body = request.body
    input_tokens = math.ceil(context_facts(context).json_length / 4)  # as _tokens(list(context))
    input_tokens += _tokens(request.instructions) if request.instructions else 0
    output_tokens = _tokens(reply.output) if reply.output else 0
    total = input_tokens + output_tokens
    reasoning_tokens = sum(_tokens(item) for item in reply.output if item.get("type") == "reasoning")
    created = int(created_at)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": reply.status,
        "background": False,
        "completed_at": created if reply.status == "completed" else None,
        "error": reply.error,
        "incomplete_details": reply.incomplete_details,
        "instructions": request.instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": reply.model or request.model,
        "output": reply.output,
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier") or "default",
        "store": request.store,
        "temperature": 1.0 if body.get("temperature") is None else body["temperature"],
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs") or 0,
        "top_p": 1.0 if body.get("top_p") is None else body["top_p"],
        "truncation": body.get("truncation") or "disabled",
        "usage": reply.usage or usage(input_tokens, output_tokens, total, reasoning=reasoning_tokens),
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    } | ({"anchortrack": {"properties": "per_request"}} if announce else {})
