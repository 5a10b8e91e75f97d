"""What ``anchortrack`` exports: pinned, like httpx's ``tests/test_exported_members.py``."""

from __future__ import annotations

import importlib.metadata
import inspect

import anchortrack


def test_all_is_exactly_the_public_names() -> None:
    """Every public attribute is in ``__all__`` and nothing else is, in ruff's order (classes first)."""
    public = {  # through getattr: the public names are imported on first use
        name
        for name in dir(anchortrack)
        if not name.startswith("_") and not inspect.ismodule(getattr(anchortrack, name))
    }
    public -= {"annotations", "Any"}  # the module's own ``from __future__`` / typing imports

    assert public == set(anchortrack.__all__)
    assert sorted(anchortrack.__all__) == anchortrack.__all__


def test_the_pinned_surface() -> None:
    """The fifteen names users write; changing this list is an API change (CHANGELOG)."""
    assert [
        "Anchor",
        "AnchorStore",
        "Explanation",
        "Mode",
        "Plan",
        "Reason",
        "Scope",
        "Stats",
        "Tracker",
        "explain",
        "plan_request",
        "record_response",
        "tracker",
        "using",
        "wrap",
    ] == anchortrack.__all__


def test_public_names_say_where_users_import_them_from() -> None:
    """Names defined in private modules report ``anchortrack`` as their module (stores' stay in stores)."""
    for name in anchortrack.__all__:
        module = getattr(anchortrack, name).__module__
        assert module in ("anchortrack", "anchortrack.stores._base"), (name, module)
    assert "anchortrack" == anchortrack.Plan.__module__ == anchortrack.wrap.__module__
    assert "<class 'anchortrack.Tracker'>" == repr(anchortrack.Tracker)


def test_version_is_the_installed_metadata() -> None:
    """``anchortrack.__version__`` is the version of the installed distribution."""
    assert importlib.metadata.version("anchortrack") == anchortrack.__version__
