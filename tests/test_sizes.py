"""
The package's sizes are a ratchet, not a target: the library proper, the local server and the CLI each
stay at or under their line count here, and no module passes 600 lines. A change that needs more raises
the number in the same commit and says why in its message; a change that frees lines lowers it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parents[1] / "anchortrack"
#: Raw lines (as ``wc -l`` counts them) of each part of the package, at most.
LIMITS = {"library": 7_560, "server": 4_800, "cli": 1_200}
MODULE_LIMIT = 600


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def _part(path: Path) -> str:
    top = path.relative_to(PACKAGE).parts[0]
    return {"server": "server", "_cli": "cli"}.get(top, "library")


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("part", sorted(LIMITS))
def test_each_part_stays_within_its_lines(part: str) -> None:
    lines = sum(_lines(path) for path in MODULES if _part(path) == part)
    assert 0 < lines <= LIMITS[part], f"{part}: {lines} lines, the ratchet is {LIMITS[part]}"


def test_no_module_passes_600_lines() -> None:
    long = {str(path.relative_to(PACKAGE)): _lines(path) for path in MODULES if _lines(path) > MODULE_LIMIT}
    assert not long, long
