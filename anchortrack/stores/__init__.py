"""Anchor stores: where anchortrack remembers which response holds which view.

* `MemoryStore`: the default; in-process, bounded, LRU and TTL.
* `SQLiteStore`: one file; survives restarts, shared by a host's processes.
* `RedisStore`: shared by many workers and hosts (``pip install 'anchortrack[redis]'``).

All implement `AnchorStore` (four sync methods; `RedisStore` adds native async twins).
`open_store` opens one from its command-line spelling (``memory``, ``sqlite:PATH``, ``redis://…``).
`RedisStore` (and so ``redis``) is loaded on first use; without the ``redis``
package it can still be imported, and says which extra it needs when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from ._base import DEFAULT_TTL, Anchor, AnchorStore
from ._open import open_store, redis_store_class
from .memory import MemoryStore
from .sqlite import SchemaVersionError, SQLiteStore


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
    if name != "RedisStore":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return redis_store_class()
    except ImportError as error:
        message = str(error)

    # ``from anchortrack.stores import MemoryStore, SQLiteStore, RedisStore`` works on a base
    # install; using this stand-in (never importing it) raises ImportError saying which extra it needs.
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise ImportError(message)

    namespace = {"__doc__": f"Unavailable: {message}", "__module__": __name__, "__new__": refuse}
    return type(name, (), {**namespace, "from_url": staticmethod(refuse)})
