"""
The documentation's tables made from the code's rows (an mkdocs hook, listed in mkdocs.yml).

A line ``<!-- rows: NAME -->`` in a page is replaced, when the site is built, by the Markdown rows of
the table NAME (`TABLES`): the settings' environment variables, the `Stats.snapshot()` keys and the
Prometheus series, the library's item types, and the local server's bridged calls and paired checks.
tests/test_docs.py renders the pages the same way and checks them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from anchortrack._canonical import ITEM_TYPES
from anchortrack._settings import ANY_TEXT, SETTINGS
from anchortrack._stats import METRICS
from anchortrack.server._items import CALLS, bridged_call


MARKER = re.compile(r"^<!-- rows: (?P<name>[\w-]+) -->$", re.MULTILINE)


def environment() -> Iterator[str]:
    """| variable | what it sets | against code | read | a bad value |"""
    for s in SETTINGS:
        if s.env is None:
            continue
        against = "—" if not s.taken_by else f"wins over `{s.name}=`" if s.env_wins else f"`{s.name}=` wins"
        bad = "none: any text is valid" if s.valid == ANY_TEXT else f"uses `{s.using}`, logs `{s.event}` once"
        yield f"| `{s.env}` | {s.sets} | {against} | {s.read} | {bad} |"


def snapshot_keys() -> Iterator[str]:
    """| key | meaning |"""
    for m in METRICS:
        key = m.key if m.group is None else f"{m.group}.{m.key.removeprefix(m.group + '_')}"
        yield f"| `{key}` | {'histogram: ' if m.bounds else ''}{m.doc} |"


def metric_families() -> Iterator[str]:
    """| metric | type | labels |"""
    families: dict[str, list[Any]] = {}
    for m in METRICS:
        if m.metric is not None:
            families.setdefault(m.metric, []).append(m)
    for name, rows in families.items():
        first = rows[0]
        if first.bounds:
            kind, labels = "histogram", f"buckets {first.bounds[0]:g} … {first.bounds[-1]:g}"
        elif first.gauge:
            kind, labels = "gauge", ""
        else:
            kind, name = "counter", name + "_total"
            labels = ""
        if first.kind is not None:
            labels = "`kind` = " + ", ".join(f"`{row.kind}`" for row in rows)
        elif first.label is not None:
            values = f" ({', '.join(f'`{v}`' for v in first.labels)})" if first.labels else ""
            labels = f"`{first.label}`{values}"
        yield f"| `{name}` | {kind} | {labels} |"


def item_types() -> Iterator[str]:
    """| type | bookkeeping | model output | answers | verbatim JSON | why |"""
    for name, row in ITEM_TYPES.items():
        made = "yes" if row.model_output is True else f"{row.model_output} role" if row.model_output else ""
        answers = "`{}` by `{}`".format(*row.answers) if row.answers else ""
        paths = ", ".join("`{}`".format(".".join(path).replace(".*", "[]")) for path in row.free_form)
        ignored = ", ".join(f"`{key}`" for key in sorted(row.ignored))
        yield f"| `{name}` | {ignored} | {made} | {answers} | {paths} | {row.why} |"
    yield "| any other type | | | | | unknown: compared by its full value, id included |"


def bridged_calls() -> Iterator[str]:
    """| Requested tool | Provider call becomes | When the arguments do not fit |"""
    for kind, row in CALLS.items():
        if bridged_call(kind) is None:
            continue
        if row.restore is None:
            yield f"| `{row.tool}` | `{kind}` (`arguments` verbatim) | — |"
        else:
            named = " named as requested" if "name" in row.required else ""
            yield f"| `{row.tool}` | `{kind}` with {row.restores} | `function_call`{named} |"


def paired_checks() -> Iterator[str]:
    """The error table's rows for the paired calls besides ``function_call`` (whose rows are written)."""
    for kind, row in CALLS.items():
        if row.paired and kind != "function_call":
            checks = f"Same two checks for `{kind}` / `{row.output}`"
            yield f"| {checks} | 400 | `null` | `input` | `… {row.paired} …` |"


TABLES: dict[str, Callable[[], Iterator[str]]] = {
    "item-types": item_types,
    "bridged-calls": bridged_calls,
    "paired-checks": paired_checks,
    "environment": environment,
    "snapshot-keys": snapshot_keys,
    "metric-families": metric_families,
}


def render(markdown: str) -> str:
    """*markdown* with each ``<!-- rows: NAME -->`` line replaced by the rows of the table NAME."""
    return MARKER.sub(lambda match: "\n".join(TABLES[match["name"]]()), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The mkdocs hook: render every page."""
    return render(markdown)
