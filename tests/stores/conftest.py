"""
Fixtures for the store tests: a real redis-server, clocks, and one store
factory parametrized over every backend.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from anchortrack.stores import AnchorStore, MemoryStore, RedisStore, SQLiteStore
from tests._redis import RedisServer

from ..helpers import FakeClock
from .helpers import Api, StoreFactory


BACKENDS = ["memory", "sqlite", "redis"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free loopback port, for the whole session."""
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.close()


@pytest.fixture
def clock() -> FakeClock:
    """A manual clock for stores built by `make_store`."""
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    return str(request.param)


@pytest.fixture
async def make_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, clock: FakeClock
) -> AsyncIterator[StoreFactory]:
    """
    Build stores of *backend* (all sharing the test's clock by default).

    SQLite stores share one file per test; Redis stores share one key
    prefix per test, so two stores of one test see the same anchors.
    """
    made: list[AnchorStore] = []
    prefix = f"t{uuid.uuid4().hex[:12]}"

    def make(**kwargs: object) -> AnchorStore:
        kwargs.setdefault("clock", clock)
        store: AnchorStore
        if backend == "memory":
            store = MemoryStore(**kwargs)  # type: ignore[arg-type]
        elif backend == "sqlite":
            store = SQLiteStore(tmp_path / "anchors.db", **kwargs)  # type: ignore[arg-type]
        else:
            server: RedisServer = request.getfixturevalue("redis_server")
            store = RedisStore.from_url(server.url, prefix=prefix, **kwargs)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()  # type: ignore[attr-defined]


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    """Which half of the protocol a contract test drives."""
    return str(request.param)


@pytest.fixture
def api(make_store: StoreFactory, mode: str) -> Api:
    """The default store of the backend under test, driven in *mode*."""
    return Api(make_store(), mode)
