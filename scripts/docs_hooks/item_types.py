"""
mkdocs hook: the item table of docs/guide/anchors.md, generated from ``anchortrack._canonical.ITEM_TYPES``.

The page holds the marker `MARKER` where the table goes; a new row in the library's table is a new row
on the page, with nothing to copy by hand. ``tests/test_docs.py`` checks the marker and the rendering.
"""

from __future__ import annotations

from typing import Any

from anchortrack._canonical import ITEM_TYPES, ItemType


PAGE = "guide/anchors.md"
MARKER = "<!-- item-types -->"
_HEAD = (
    "| type | bookkeeping | model output | answers | verbatim JSON | why |",
    "|---|---|---|---|---|---|",
)


def _path(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".*", "[]")


def _line(name: str, row: ItemType) -> str:
    made = "yes" if row.model_output is True else f"{row.model_output} role" if row.model_output else ""
    cells = [
        f"`{name}`",
        ", ".join(f"`{key}`" for key in sorted(row.ignored)),
        made,
        "`{}` by `{}`".format(*row.answers) if row.answers else "",
        ", ".join(f"`{_path(path)}`" for path in row.free_form),
        row.why,
    ]
    return "| " + " | ".join(cells) + " |"


def item_table() -> str:
    """The table, one line per row of `ITEM_TYPES` in its order, then one for every other type."""
    lines = [*_HEAD, *(_line(name, row) for name, row in ITEM_TYPES.items())]
    lines.append("| any other type | | | | | unknown: compared by its full value, id included |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put the table where the page's marker is."""
    if page.file.src_path != PAGE:
        return markdown
    if markdown.count(MARKER) != 1:
        raise ValueError(f"{PAGE} must hold {MARKER} once")
    return markdown.replace(MARKER, item_table())
