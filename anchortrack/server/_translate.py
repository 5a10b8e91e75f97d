"""Request building for an upstream provider: Responses → Chat Completions (pure).

Only what Chat Completions accepts is sent: no reasoning items, no call without its output; other tools than
``function`` become function tools whose type `ChatPlan.tools` keeps for restoring the reply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from anchortrack.server._errors import missing_parameter, unsupported
from anchortrack.server._facts import is_reference
from anchortrack.server._items import CALL_OF_TOOL, ITEM_TYPES, OUTPUTS, TEXT_PARTS, bridged_call, output_text
from anchortrack.server._request import CreateRequest


Item = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True)
class ChatPlan:
    """One Chat Completions request and what the reply is restored with: each tool's requested type by name;
    whether it sends ``json_schema`` (degradable), or was degraded to ``json_object`` (the output must parse).
    """

    body: dict[str, Any]
    tools: dict[str, str]
    requires_valid_json: bool = False
    json_schema: bool = False

    @property
    def may_call_tools(self) -> bool:
        return bool(self.body.get("tools")) and self.body.get("tool_choice") != "none"

    def degraded(self) -> ChatPlan:
        """The same request with ``json_schema`` replaced by ``json_object``."""
        if not self.json_schema:
            return self
        body = dict(self.body, response_format={"type": "json_object"})
        return replace(self, body=body, requires_valid_json=True, json_schema=False)


#: Content part type → its field holding text.
_TEXT_FIELDS: dict[object, str] = {"refusal": "refusal", **dict.fromkeys(TEXT_PARTS, "text")}


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    parts = [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []
    texts = [part.get(field) for part in parts if (field := _TEXT_FIELDS.get(part.get("type")))]
    return "\n".join(text for text in texts if isinstance(text, str))


def _chat_part(part: Item) -> Item | None:
    if part.get("type") == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            return None
        image: Item = {"url": url}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    text = _text_of([part])
    return {"type": "text", "text": text} if text else None


def _message(item: Item) -> Message:
    role = item.get("role")
    chat_role = "system" if role == "developer" else str(role)
    content = item.get("content")
    if chat_role == "user" and isinstance(content, list):
        parts = [_chat_part(part) for part in content if isinstance(part, dict)]
        if any(part is not None and part["type"] == "image_url" for part in parts):
            return {"role": chat_role, "content": [part for part in parts if part is not None]}
    return {"role": chat_role, "content": _text_of(content)}


def call_arguments(item: Item) -> tuple[str, str]:
    """The provider-side ``(name, arguments)`` of a call item, from its row in `ITEM_TYPES`."""
    spec = bridged_call(item.get("type"))
    if spec is None or spec.arguments is None:
        raise ValueError(f"the upstream bridge has no provider form for a {item.get('type')} item")
    return spec.provider_name(item), spec.arguments(item)


def _tool_call(call: Item) -> Item:
    name, arguments = call_arguments(call)
    return {"id": call["call_id"], "type": "function", "function": {"name": name, "arguments": arguments}}


def build_messages(context: Sequence[Item], instructions: str | list[Any] | None) -> list[Message]:
    """The chat ``messages`` for *instructions* and the resolved *context*."""
    messages: list[Message] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    elif isinstance(instructions, list):
        messages.extend(
            _message(item)
            for item in instructions
            if isinstance(item, dict) and item.get("type", "message") == "message"
        )

    by_id: dict[str, Item] = {}  # a reference names the first item with its id, as `Facts` pairs it
    for item in context:
        if isinstance(item.get("id"), str) and not is_reference(item):
            by_id.setdefault(item["id"], item)
    items = [by_id.get(item["id"], {}) if is_reference(item) else item for item in context]
    outputs: dict[str, Item] = {}
    for item in items:
        if bridged_call(OUTPUTS.get(str(item.get("type")))) is not None:
            keys = ITEM_TYPES[item["type"]].call_keys  # naming the call it answers
            call_id = next((item[key] for key in keys if isinstance(item.get(key), str)), None)
            if call_id is not None:
                outputs.setdefault(call_id, item)
    texts: list[str] = []
    calls: list[Item] = []
    answered: set[str] = set()

    def flush() -> None:
        paired = [call for call in calls if call["call_id"] in outputs and call["call_id"] not in answered]
        if paired:
            content = "\n".join(texts) if texts else None
            tool_calls = [_tool_call(call) for call in paired]
            messages.append({"role": "assistant", "content": content, "tool_calls": tool_calls})
            for call in paired:
                answered.add(call["call_id"])
                answer = outputs[call["call_id"]]
                output = (ITEM_TYPES[answer["type"]].content or output_text)(answer)
                messages.append({"role": "tool", "tool_call_id": call["call_id"], "content": output})
        else:
            messages.extend({"role": "assistant", "content": text} for text in texts)
        texts.clear()
        calls.clear()

    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "assistant":
            texts.append(_text_of(item.get("content")))
        elif bridged_call(kind) is not None and isinstance(item.get("call_id"), str):
            calls.append(item)
        elif kind == "message":
            flush()
            messages.append(_message(item))
        elif kind in OUTPUTS:
            flush()
        # reasoning items, and calls and outputs the bridge has no form for, are not sent
    flush()
    return messages


def build_tools(tools: Sequence[Item]) -> tuple[list[Item], dict[str, str]]:
    """The chat ``tools`` for the request's *tools* (an unnamed one named after its type), and each tool's
    requested type by name; APIError 400 for a tool no provider can run, or two sharing one name."""
    types: dict[str, str] = {}
    chat_tools: list[Item] = []
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        spec = bridged_call(CALL_OF_TOOL.get(str(kind)))
        named = spec is not None and "name" in spec.required
        name = tool.get("name") if named else str(kind)
        if not isinstance(name, str) or (named and not name):
            raise missing_parameter(f"tools[{index}].name")
        if spec is None:
            message = f"Tools of type '{kind}' are not supported by the upstream provider"
            raise unsupported(f"tools[{index}]", f"{message} (it only runs function tools).")
        function: Item = {"name": name}
        if spec.schema is None:  # a function tool: as it is
            if isinstance(tool.get("description"), str):
                function["description"] = tool["description"]
            function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
            if tool.get("strict") is True:
                function["strict"] = True
        else:  # a wrapper: the row's description, else the tool's (and its grammar)
            description = spec.description or tool.get("description")
            description = description if isinstance(description, str) else ""
            fmt = tool.get("format")
            if not spec.description and isinstance(fmt, dict) and fmt.get("type") == "grammar":
                description = (
                    f"{description}\nThe input must follow this {fmt.get('syntax', '')} grammar:\n"
                    f"{fmt.get('definition', '')}"
                ).strip()
            if description:
                function["description"] = description
            function["parameters"] = spec.schema
        if name in types:
            message = f"Tools '{name}' ({types[name]}) and '{name}' ({kind}) would both be called '{name}'"
            raise unsupported(f"tools[{index}]", f"{message} by the upstream provider.")
        types[name] = str(kind)
        chat_tools.append({"type": "function", "function": function})
    return chat_tools, types


def _tool_choice(choice: object) -> object:
    if isinstance(choice, str):
        return choice
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    spec = bridged_call(CALL_OF_TOOL.get(str(kind)))
    if spec is not None:
        name = choice.get("name") if "name" in spec.required else kind
        return {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":
        return "required" if choice.get("mode") == "required" else "auto"
    message = f"tool_choice of type '{kind}' is not supported by the upstream provider."
    raise unsupported("tool_choice", message)


def build_chat_request(
    request: CreateRequest,
    context: Sequence[Item],
    *,
    model: str,
    degrade_json_schema: bool = False,
    max_tokens_field: str = "max_tokens",
) -> ChatPlan:
    """The Chat Completions request for *request* over its resolved *context* (APIError 400 for tools or a
    ``tool_choice`` the provider cannot take)."""
    body = request.body
    chat: dict[str, Any] = {"model": model, "messages": build_messages(context, request.instructions)}
    tools, types = build_tools(body.get("tools") or [])
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    sent = {"max_output_tokens": max_tokens_field, "temperature": "temperature", "top_p": "top_p"}
    chat |= {key: body[name] for name, key in sent.items() if body.get(name) is not None}
    if request.stream:
        chat |= {"stream": True, "stream_options": {"include_usage": True}}
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    plan = ChatPlan(body=chat, tools=types)
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name") or "response", "schema": fmt.get("schema") or {}}
        optional = (("description", str), ("strict", bool))
        schema |= {key: fmt[key] for key, kind in optional if isinstance(fmt.get(key), kind)}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
        plan = replace(plan, json_schema=True)
        if degrade_json_schema:
            plan = plan.degraded()
    return plan
