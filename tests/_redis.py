"""A real ``redis-server`` on a loopback port (shared with the benchmarks: ``benchmarks/_support.py``)."""

from benchmarks._support import RedisServer, free_port


__all__ = ["RedisServer", "free_port"]
