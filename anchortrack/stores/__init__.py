"""
Anchor stores: where anchortrack remembers which response holds which view.

* `MemoryStore`: the default; in-process, bounded, LRU and TTL.
* `SQLiteStore`: one file; survives restarts, shared by a host's processes.
* `RedisStore`: shared by many workers and hosts (``pip install 'anchortrack[redis]'``).

All implement `AnchorStore`, with sync and async methods on one object.
This module does not import ``redis``: `RedisStore` is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import DEFAULT_TTL, Anchor, AnchorStore
from ._sqlite_schema import SchemaVersionError
from .memory import MemoryStore
from .sqlite import SQLiteStore


if TYPE_CHECKING:
    from .redis import RedisStore


__all__ = [
    "DEFAULT_TTL",
    "Anchor",
    "AnchorStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SchemaVersionError",
]


def __getattr__(name: str) -> object:
    if name == "RedisStore":
        try:
            from .redis import RedisStore
        except ModuleNotFoundError as error:
            if error.name is None or error.name.split(".")[0] != "redis":
                raise
            raise ImportError(
                "RedisStore needs the redis package: pip install 'anchortrack[redis]'"
            ) from error
        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
