"""`PUT`, importable from here too: the Redis store's Lua scripts live in `anchortrack.stores.redis`."""

from .redis import PUT as PUT
