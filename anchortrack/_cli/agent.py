"""The demo's agent: a travel assistant with five tools and a middleware chain. ``!call`` lines steer the
local scripted model (a real one gets the plain text); tool results are deterministic fake data of ~1 KB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs


Item = dict[str, Any]

SYSTEM = "You are a travel assistant. Use the tools to answer; keep replies short."

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": name, "description": description,
     "parameters": {"type": "object", "properties": {key: {"type": "string"} for key in keys},
                    "required": list(keys), "additionalProperties": False}, "strict": True}
    for name, description, keys in (
        ("get_weather", "Weather forecast for a city on a date.", ("city", "date")),
        ("search_flights", "Flights between two airports on a date.", ("origin", "destination", "date")),
        ("search_hotels", "Hotels in a neighbourhood under a nightly budget.", ("city", "area", "max_price")),
        ("book_hotel", "Book a hotel for a number of nights.", ("hotel_id", "nights")),
        ("send_email", "Send an email to the user.", ("to", "subject")),
    )
]  # fmt: skip


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def inject(history: Sequence[Item]) -> list[Item]:
    """Middleware: append retrieved context (a developer message)."""
    note = "retrieved: Ana is a gold member and prefers quiet rooms; loyalty id GM-2231."
    return [*history, {"role": "developer", "content": note}]


def redact(history: Sequence[Item]) -> list[Item]:
    """Middleware: mask e-mail addresses in user messages (returns new items)."""
    out = []
    for item in history:
        content = item.get("content")
        if item.get("role") == "user" and isinstance(content, str) and _EMAIL.search(content):
            item = {**item, "content": _EMAIL.sub("[email]", content)}
        out.append(item)
    return out


@attrs.frozen
class Turn:
    """One user turn: its text, the ``!…`` lines that steer the scripted model, the middleware before it."""

    text: str
    script: tuple[str, ...] = ()
    note: str = ""  # the middleware, as the demo notes it
    edit: Callable[[Sequence[Item]], list[Item]] | None = None  # the middleware's edit of the history
    forget: bool = False  # the middleware deletes the newest response on the server


TURNS: tuple[Turn, ...] = (
    Turn("Hi, I'm Ana (ana.silva@example.com). I fly Berlin to Lisbon on 2025-05-14: "
         "what's the weather there, and which flights are there?",
         ('!call get_weather {"city": "Lisbon", "date": "2025-05-14"}',
          '!call search_flights {"origin": "BER", "destination": "LIS", "date": "2025-05-14"}')),
    Turn("Find me a hotel in Alfama for three nights, under 180 EUR a night.",
         ('!call search_hotels {"city": "Lisbon", "area": "Alfama", "max_price": "180"}', "!rounds 2")),
    Turn("Book the second one, please.", ('!call book_hotel {"hotel_id": "H-2", "nights": "3"}',),
         note="middleware appended retrieved context", edit=inject),
    Turn("Send the booking confirmation to my e-mail.",
         ('!call send_email {"to": "[email]", "subject": "Your Lisbon booking"}',),
         note="middleware redacted an e-mail in item 1", edit=redact),
    Turn("What should I pack for the trip?", ('!call get_weather {"city": "Lisbon", "date": "2025-05-15"}',),
         note="the server lost the newest response", forget=True),
    Turn("Thanks, that's all!"),
)  # fmt: skip


def turn(index: int) -> Turn:
    """The user turn number *index* (0-based); past the script, a weather follow-up."""
    if index < len(TURNS):
        return TURNS[index]
    day = 16 + (index - len(TURNS)) % 10
    return Turn(
        f"And the forecast for 2025-05-{day}?",
        (f'!call get_weather {{"city": "Lisbon", "date": "2025-05-{day}"}}',),
    )


def user_message(t: Turn, *, scripted: bool) -> Item:
    """The user's message for *t* (with the script lines for the scripted model)."""
    text = "\n".join([t.text, *t.script]) if scripted else t.text
    return {"role": "user", "content": text}


def run_tool(name: str, arguments: str) -> str:
    """Run a (fake) tool: deterministic JSON of about 1 KB."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    args = args if isinstance(args, dict) else {}
    seed = sum(map(ord, name + arguments))
    if name == "get_weather":
        hours = [
            {"hour": h, "temp_c": 14 + (seed + h) % 11, "rain_pct": (seed * h) % 40, "wind_kmh": 5 + h % 17}
            for h in range(0, 24, 2)
        ]
        result: dict[str, Any] = {"city": args.get("city"), "date": args.get("date"), "hourly": hours}
    elif name == "search_flights":
        flights = [
            {"flight": f"TP{500 + (seed + i * 37) % 400}", "depart": f"{6 + i * 2:02d}:{(seed + i) % 6}0",
             "arrive": f"{10 + i * 2:02d}:{(seed + 3 * i) % 6}5", "price_eur": 89 + (seed * (i + 1)) % 180,
             "seats_left": (seed + i) % 9 + 1}
            for i in range(6)
        ]  # fmt: skip
        result = {"flights": flights}
    elif name == "search_hotels":
        hotels = [
            {"hotel_id": f"H-{i + 1}", "name": f"Casa {['Azul', 'do Fado', 'Alfama', 'Lisboa', 'Tejo'][i]}",
             "price_eur": 95 + (seed + 23 * i) % 85, "rating": round(3.9 + ((seed + i) % 10) / 10, 1),
             "quiet": (seed + i) % 2 == 0, "amenities": ["wifi", "breakfast", "air conditioning"][:1 + i % 3]}
            for i in range(5)
        ]  # fmt: skip
        result = {"hotels": hotels}
    else:
        result = {"ok": True, "reference": f"{name.upper()}-{seed:06d}", "request": args}
    result["terms"] = "Prices include taxes. Free cancellation until 48 hours before arrival. " * 3
    return json.dumps(result)
