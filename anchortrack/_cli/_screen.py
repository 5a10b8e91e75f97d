"""
Writing to the terminal: width-aware lines, colours, a status line, ASCII fallback.

What the demo prints streams one row per model call into terminals, pipes and
CI logs alike, so this is a small line printer rather than a full-screen
renderer:

* the width is the terminal's (``COLUMNS`` wins; 80 when piped); every line
  written through `Screen.para` or `Screen.table_row` fits it;
* colours only on a terminal, never with ``NO_COLOR`` set or ``TERM=dumb``;
* the overwritable status line (``… waiting for the model``) only on a terminal;
* a stream whose encoding cannot carry ``─ · … ↳`` (``PYTHONIOENCODING=cp1252``,
  old consoles) gets ASCII.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Sequence
from typing import TextIO


#: The non-ASCII characters the commands print, and their ASCII stand-ins.
_ASCII = str.maketrans({"─": "-", "·": "-", "…": "...", "↳": "->", "—": "-", "→": "->", "≈": "~"})
_STYLES = {"green": "32", "yellow": "33", "red": "31", "cyan": "36", "dim": "2", "bold": "1"}


def _can_encode(stream: TextIO, text: str) -> bool:
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class Screen:
    """
    One output stream and what it can show.

    Args:
        stream: Where to write (``sys.stdout``).
        width: Columns (default: the terminal's, ``COLUMNS`` first, else 80).
    """

    def __init__(self, stream: TextIO, width: int | None = None) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.width = max(40, width or shutil.get_terminal_size((80, 24)).columns)
        self.color = self.tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        self.ascii = not _can_encode(stream, "─·…↳—→≈")
        #: How to mark a cut: "…", or "..." on an ASCII stream.
        self.ellipsis = "..." if self.ascii else "…"
        self._status = False

    def text(self, line: str) -> str:
        """*line* as this stream can carry it."""
        if not self.ascii:
            return line
        encoding = getattr(self.stream, "encoding", None) or "ascii"
        return line.translate(_ASCII).encode(encoding, "replace").decode(encoding)

    def paint(self, text: str, style: str | None) -> str:
        """*text* in *style* (a colour name) when colours are on."""
        if not self.color or not style:
            return text
        return f"\033[{_STYLES[style]}m{text}\033[0m"

    def write(self, text: str) -> None:
        """Write *text* (already laid out) and flush, replacing the status line if shown."""
        self.clear_status()
        self.stream.write(self.text(text))
        self.stream.flush()

    def para(self, text: str, *, indent: str = "", hang: str = "  ") -> None:
        """Write *text* as lines of at most `width` columns (continuations indented by *hang*)."""
        lines = textwrap.wrap(
            self.text(text),
            self.width,
            initial_indent=self.text(indent),
            subsequent_indent=self.text(indent + hang),
            break_on_hyphens=False,
        )
        self.write("\n".join(lines or [""]) + "\n")

    def status(self, text: str) -> None:
        """Show *text* on an overwritable status line (terminals only)."""
        if not self.tty:
            return
        self.stream.write("\r\033[K" + self.text(text[: self.width - 1]))
        self.stream.flush()
        self._status = True

    def clear_status(self) -> None:
        """Remove the status line, if shown."""
        if self._status:
            self.stream.write("\r\033[K")
            self._status = False


class Table:
    """
    Rows of fixed columns plus a free-text last column, laid out for a width.

    The fixed columns take at most 80 columns; the free text goes beside them
    when at least *min_text* columns are left, else on indented lines below
    the row. Either way it is wrapped to the width.
    """

    def __init__(
        self,
        screen: Screen,
        columns: Sequence[tuple[str, int, str]],
        text_title: str,
        *,
        min_text: int = 24,
    ) -> None:
        self.screen = screen
        self.columns = columns
        self.text_title = text_title
        fixed = sum(width for _, width, _ in columns) + 2 * (len(columns) - 1)
        self.text_at = fixed + 2
        self.inline = screen.width - self.text_at >= min_text

    def _cells(self, cells: Sequence[str], styles: Sequence[str | None] | None = None) -> str:
        out = []
        for i, (cell, (_, width, align)) in enumerate(zip(cells, self.columns, strict=True)):
            padded = f"{self.screen.text(cell)[:width]:{align}{width}}"
            out.append(self.screen.paint(padded, styles[i] if styles else None))
        return "  ".join(out)

    def header(self) -> None:
        """Write the column titles and a rule."""
        titles = [title for title, _, _ in self.columns]
        rule = ["─" * width for _, width, _ in self.columns]
        if self.inline:
            self.screen.write(self._cells(titles) + "  " + self.text_title + "\n")
            width = min(len(self.text_title) + 8, self.screen.width - self.text_at)
            self.screen.write(self._cells(rule) + "  " + "─" * width + "\n")
        else:
            self.screen.write(self._cells(titles).rstrip() + "\n")
            self.screen.write(self._cells(rule) + "\n")
            self.screen.write(self.screen.text(f"      ↳ {self.text_title}") + "\n")

    def row(self, cells: Sequence[str], text: str, styles: Sequence[str | None] | None = None) -> None:
        """Write one row and its free text."""
        line = self._cells(cells, styles)
        text = self.screen.text(text)
        if not text:
            self.screen.write(line.rstrip() + "\n")
            return
        if self.inline:
            room = self.screen.width - self.text_at
            parts = textwrap.wrap(text, room, break_on_hyphens=False)
            lines = [line + "  " + parts[0]] + [" " * self.text_at + part for part in parts[1:]]
        else:
            mark = self.screen.text("      ↳ ")
            room = self.screen.width - len(mark)
            parts = textwrap.wrap(text, room, break_on_hyphens=False)
            lines = [line.rstrip(), mark + parts[0]] + [" " * len(mark) + part for part in parts[1:]]
        self.screen.write("\n".join(lines) + "\n")
