"""Re-exports: the Redis store's Lua scripts live in `anchortrack.stores.redis`."""

from .redis import EVICT, FIND, GET, PUT


__all__ = ["EVICT", "FIND", "GET", "PUT"]
