"""
The pure core imports neither the SDK nor the metrics module, directly or through another module.

Read from the sources (AST): importing any ``anchortrack.x`` runs the package's
``__init__`` first, which imports everything, so a subprocess could not tell.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parents[2] / "anchortrack"
PURE = ("_canonical", "_hashing", "_request", "_plan", "_flow", "_refusal", "_properties", "_seal", "_socket")
FORBIDDEN = ("openai.", "anchortrack._stats", "anchortrack.metrics")


def _imports(module: str) -> set[str]:
    """The absolute names *module* (``anchortrack.x`` or ``anchortrack.x.y``) imports, from its source."""
    parts = module.split(".")
    path = PACKAGE.joinpath(*parts[1:]).with_suffix(".py")
    if not path.exists():
        path = PACKAGE.joinpath(*parts[1:], "__init__.py")
    package = parts[:-1] if path.name != "__init__.py" else parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _closure(module: str) -> set[str]:
    """Every name *module* imports, following anchortrack's own modules (not their packages' inits)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for name in _imports(current):
            if name in seen:
                continue
            seen.add(name)
            if name.startswith("anchortrack.") and _exists(name):
                todo.append(name)
    return seen


def _exists(name: str) -> bool:
    parts = name.split(".")[1:]
    return PACKAGE.joinpath(*parts).with_suffix(".py").exists()


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_sdk_and_no_metrics(module: str) -> None:
    """Neither ``openai`` nor ``_stats`` / ``metrics`` is reachable from a pure module's imports."""
    reached = _closure(f"anchortrack.{module}")

    assert [] == [name for name in reached if name == "openai" or name.startswith(FORBIDDEN)]


def test_the_checker_sees_a_forbidden_import() -> None:
    """The check would fail: the shells do reach the SDK and the metrics module."""
    assert "openai" in _closure("anchortrack._client")
    assert any(n.startswith("anchortrack._stats") for n in _closure("anchortrack._tracker"))
