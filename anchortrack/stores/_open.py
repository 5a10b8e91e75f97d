"""
`open_store`: a store from its one-word spelling, as the command line takes it; and
`redis_store_class`, which loads `RedisStore` (and so ``redis``) only when it is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .memory import MemoryStore
from .sqlite import SQLiteStore


if TYPE_CHECKING:
    from .redis import RedisStore


#: URL schemes `open_store` hands to `RedisStore.from_url`.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def open_store(spec: str) -> MemoryStore | SQLiteStore | RedisStore:
    """
    Open the anchor store spelled *spec*, with its default settings.

    Args:
        spec: ``memory``; ``sqlite:PATH`` (``~`` is expanded and missing
            parent directories are created); or a Redis URL (``redis://…``,
            ``rediss://…``, ``unix://…``), which needs the ``redis`` extra.

    Returns:
        A new store; the caller closes it (``close`` or ``aclose``).

    Raises:
        ValueError: *spec* names no store.
        ImportError: A Redis URL without the ``redis`` package.
    """
    if spec == "memory":
        return MemoryStore()
    if spec.startswith("sqlite:"):
        name = spec.removeprefix("sqlite:")
        if not name:
            raise ValueError("sqlite: needs a path, e.g. sqlite:/tmp/anchors.db")
        path = Path(name).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(path)
    if spec.startswith(REDIS_SCHEMES):
        return redis_store_class().from_url(spec)
    raise ValueError(f"unknown store {spec!r}: expected memory, sqlite:PATH or redis://HOST[:PORT][/DB]")


def redis_store_class() -> type[RedisStore]:
    """
    Import `RedisStore`.

    Raises:
        ImportError: The ``redis`` package is missing (the message says how to install it).
    """
    try:
        from .redis import RedisStore
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "redis":
            raise
        raise ImportError("RedisStore needs the redis package: pip install 'anchortrack[redis]'") from error
    return RedisStore
