"""Importable from here too: the Redis store's keys and values live in `anchortrack.stores.redis`."""

from .redis import decode_value as decode_value
from .redis import encode_value as encode_value
