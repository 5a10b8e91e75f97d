"""Fixtures for the store-fault tests: a redis-server of each module's own, to pause, kill and restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._redis import RedisServer


@pytest.fixture(scope="module", name="redis_server")
def _redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.close()


@pytest.fixture(name="healthy_redis")
def _healthy_redis(redis_server: RedisServer) -> Iterator[RedisServer]:
    """The module's redis-server, running (restarted if a test left it stopped) and resumed after the test."""
    redis_server.start()
    yield redis_server
    if redis_server.running:
        redis_server.resume()
