"""Where a store comes from: its spelling (`open_store`), ``store=`` (`coerce_store`), the process-wide
default (`default_store`); `RedisStore` (and so ``redis``) loaded only when needed."""

from __future__ import annotations

import difflib
import reprlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._fork import ForkSafeLock
from ._base import AnchorStore
from .memory import MemoryStore
from .sqlite import SQLiteStore


if TYPE_CHECKING:
    from .redis import RedisStore


def open_store(spec: str) -> MemoryStore | SQLiteStore | RedisStore:
    """Open a new store spelled *spec*, with its default settings; the caller closes it.

    *spec* is ``memory``; ``sqlite:PATH`` (``~`` is expanded; the file is created if missing, its
    directory must exist); or a Redis URL (``redis://…``, ``rediss://…``, ``unix://…``; needs the ``redis``
    extra). A near miss (``Memory``, ``sqlite://anchors.db``) is refused, naming the spelling meant.

    Raises:
        ValueError: *spec* names no store.
        FileNotFoundError: The directory of a SQLite file does not exist.
        IsADirectoryError: A SQLite path names a directory.
        ImportError: A Redis URL without the ``redis`` package.
    """
    if spec == "memory":
        return MemoryStore()
    if spec.startswith("sqlite:") and not spec.startswith("sqlite://") and spec == spec.strip():
        name = spec.removeprefix("sqlite:")
        if not name:
            raise ValueError("sqlite: needs a path, e.g. sqlite:/tmp/anchors.db")
        path = Path(name).expanduser()
        if path.is_dir():
            raise IsADirectoryError(f"store {spec!r}: {path} is a directory; name a file in it")
        if not path.parent.is_dir():
            raise FileNotFoundError(
                f"store {spec!r}: no directory {path.parent} (the store creates its file, not directories)"
            )
        return SQLiteStore(path)
    if spec.startswith(("redis://", "rediss://", "unix://")) and spec == spec.strip():
        return redis_store_class().from_url(spec)
    close = closest_spec(spec)
    hint = f"; did you mean {close!r}?" if close is not None else ""
    raise ValueError(
        f"unknown store {spec!r}: expected memory, sqlite:PATH or redis://HOST[:PORT][/DB]{hint}"
    )


def store_label(store: object) -> str:
    """How messages name *store*: its spelling (``memory``, ``sqlite:PATH``, a Redis URL without user or
    password), else its class name."""
    if isinstance(store, MemoryStore):
        return "memory"
    if isinstance(store, SQLiteStore):
        return f"sqlite:{store.path}"
    redis_module = sys.modules.get(f"{__package__}.redis")  # loaded if *store* is a RedisStore
    if redis_module is not None and isinstance(store, redis_module.RedisStore):
        pool = getattr(store.client or store.async_client, "connection_pool", None)
        options = getattr(pool, "connection_kwargs", {})
        if "path" in options:
            return f"unix://{options['path']}"
        ssl = "SSL" in getattr(getattr(pool, "connection_class", None), "__name__", "")
        host, port, db = options.get("host", "localhost"), options.get("port", 6379), options.get("db", 0)
        return f"{'rediss' if ssl else 'redis'}://{host}:{port}/{db}"
    return type(store).__name__


def closest_spec(spec: str) -> str | None:
    """The spelling a refused *spec* most likely meant (``Memory``, ``sqlite://x``, ``x.db``), or None."""
    text = spec.strip()
    if not text:
        return None
    if text.lower() == ":memory:" or _near(text.lower(), ["memory"]):
        return "memory"
    scheme, colon, rest = text.partition(":")
    if not colon:
        return f"sqlite:{text}"  # a bare name: a file
    meant = _near(scheme.lower(), ["sqlite", "redis", "rediss", "unix"]) or (
        "sqlite" if scheme.lower().startswith("sqlite") else None
    )
    if meant is None:
        return None
    if meant == "sqlite":
        path = rest.removeprefix("//")
        return f"sqlite:{path}" if path else None
    if meant == "unix":
        return "unix:///" + rest.lstrip("/")
    return f"{meant}://{rest.lstrip('/')}"


def _near(word: str, words: list[str]) -> str | None:
    close = difflib.get_close_matches(word, words, n=1, cutoff=0.75)
    return close[0] if close else None


def redis_store_class() -> type[RedisStore]:
    """Import `RedisStore`; an `ImportError` without the ``redis`` package says how to install it."""
    try:
        from .redis import RedisStore
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "redis":
            raise
        raise ImportError("RedisStore needs the redis package: pip install 'anchortrack[redis]'") from error
    return RedisStore


#: The process-wide default store (see `default_store`).
_default: AnchorStore | None = None
_default_lock = ForkSafeLock()
#: How many anchors the default store keeps (least recently used dropped first).
DEFAULT_STORE_ANCHORS = 100_000
#: How `store=` may be spelled: the message of the error for anything else.
STORE_ACCEPTED = (
    "an AnchorStore instance (MemoryStore(), SQLiteStore(path), RedisStore.from_url(url)) "
    "or a store spec string ('memory', 'sqlite:PATH', 'redis://HOST[:PORT][/DB]')"
)


def default_store() -> AnchorStore:
    """The bounded `MemoryStore` shared by every tracker made without ``store=``, so a sync and an async
    client, or two wraps of one client, continue each other's conversations (scopes keep them apart)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MemoryStore(DEFAULT_STORE_ANCHORS)
        return _default


def coerce_store(store: object, *, caller: str = "anchortrack.wrap()") -> AnchorStore:
    """Return the store *store* names: an `AnchorStore` as is, a spec string opened (may raise `ImportError`
    or `OSError`); anything else raises `TypeError` naming what was given and what is accepted."""
    if isinstance(store, str):
        try:
            return open_store(store)
        except ValueError:
            close = closest_spec(store)
            hint = f" (did you mean store={close!r}?)" if close is not None else ""
            raise TypeError(
                f"{caller}: store={store!r} is not a store spec{hint}; store= takes {STORE_ACCEPTED}"
            ) from None
    if isinstance(store, type):
        raise TypeError(
            f"{caller}: store={store.__name__} is the class, not a store; "
            f"pass an instance such as {store.__name__}(...). store= takes {STORE_ACCEPTED}"
        )
    if not isinstance(store, AnchorStore):
        raise TypeError(
            f"{caller}: store={reprlib.repr(store)} is a {type(store).__name__}, not an anchor store; "
            f"store= takes {STORE_ACCEPTED}"
        )
    return store
