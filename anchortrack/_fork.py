"""Locks a forked child can take (prefork servers fork while threads hold locks): fresh and unheld in the
child."""

from __future__ import annotations

import os
import threading
import weakref


_locks: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


class ForkSafeLock:
    """A `threading.Lock` (taken with ``with``) that is replaced by a fresh, unheld one in a forked child."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _locks.add(self)

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _reset_in_child() -> None:
    for lock in list(_locks):
        lock._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_reset_in_child)
