"""
A real tool-calling loop, written the way you already write it — only the client is wrapped.

Runs against the local Responses server by default, and against OpenAI when
OPENAI_API_KEY is set:

    python examples/tool_loop.py
"""

from __future__ import annotations

import json
from typing import Any

from _common import endpoint

import anchortrack


TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]


def get_weather(city: str) -> str:
    """A stand-in tool."""
    return json.dumps({"city": city, "sky": "clear", "celsius": 21})


def main() -> None:
    with endpoint() as (raw, model):
        client = anchortrack.wrap(raw)
        # The scripted local model calls tools when asked with `!call`; a real model decides itself.
        question = "What's the weather in Paris and in Oslo?"
        if model == "scripted":
            question += '\n!call get_weather {"city": "Paris"}\n!call get_weather {"city": "Oslo"}'
        history: list[Any] = [{"role": "user", "content": question}]

        for step in range(8):
            response = client.responses.create(
                model=model, input=history, tools=TOOLS, instructions="Use the tools. Be brief."
            )
            history += response.output
            calls = [item for item in response.output if item.type == "function_call"]
            print(f"step {step}: {len(calls)} tool call(s), response {response.id}")
            if not calls:
                print("answer:", response.output_text)
                break
            for call in calls:
                args = json.loads(call.arguments)
                history.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": get_weather(**args)}
                )

        stats = anchortrack.tracker(client).stats.snapshot()
        print(
            f"sent {stats['items_sent']} of {stats['items_total']} items "
            f"(~{stats['bytes_sent']} of {stats['bytes_stateless']} bytes)"
        )


if __name__ == "__main__":
    main()
