"""
Anchor stores: where anchortrack remembers which response holds which view.

* `MemoryStore`: the default; in-process, bounded, LRU and TTL.
* `SQLiteStore`: one file; survives restarts, shared by a host's processes.
* `RedisStore`: shared by many workers and hosts (``pip install 'anchortrack[redis]'``).

All implement `AnchorStore`, with sync and async methods on one object.
`open_store` opens one from its command-line spelling (``memory``,
``sqlite:PATH``, ``redis://…``).
This module does not import ``redis``: `RedisStore` is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import DEFAULT_TTL, Anchor, AnchorStore
from ._open import open_store, redis_store_class
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
    "open_store",
]


def __getattr__(name: str) -> object:
    if name == "RedisStore":
        return redis_store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
