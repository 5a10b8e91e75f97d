"""Re-exports: the Redis store's keys and values live in `anchortrack.stores.redis`."""

from .redis import KeySchema, decode_value, encode_value


__all__ = ["KeySchema", "decode_value", "encode_value"]
