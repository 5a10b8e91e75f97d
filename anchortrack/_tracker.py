"""The tracker: one wrapped client's settings and state (shared by its copies); see `Tracker`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import _settings
from ._calls import Calls, remember
from ._failopen import FailOpen
from ._fork import ForkSafeLock
from ._hashing import Memo, Scope, api_key_digest
from ._mode import Mode
from ._outcome import Outcome
from ._plan import RecentViews
from ._settings import STORE_COOLDOWN, STORE_TIMEOUT, describe
from ._stats import Stats
from .stores._base import AnchorStore
from .stores._open import coerce_store, default_store


class Tracker:
    """
    Plans requests and records responses for one wrapped client.

    A setting left out (None) is its environment variable's value, if it has one, else its default
    (its row in ``anchortrack._settings``; docs/operations.md, "Environment variables").

    Args:
        store: An `AnchorStore` or a store spec, as `anchortrack.wrap` takes; by default the process-wide
            default store.
        mode: ``chained`` (default), ``shadow`` or ``off``; ``ANCHORTRACK_MODE`` wins.
        namespace: Anchors recorded under one namespace are never used under another.
        record_incomplete: Also anchor on ``incomplete`` responses (OpenAI accepts them as
            ``previous_response_id``).
        store_timeout: Seconds a store operation may take before the call goes out stateless; also the
            most the write after a response may delay it (None: 1 second).
        store_cooldown: Seconds between two probes of a store that is down (one call tries it, the
            others go without it; None: 1 second); settable on a live tracker.
        scope_by_api_key: Keep anchors apart per API key (the default); False keeps them usable across a
            key rotation (then separate tenants with *namespace*).
        clock: Unix time source (tests).

    Raises:
        TypeError: *store* is not a store or a store spec; a time is not a number.
        ValueError: *store_timeout* is not a finite number above 0, or *store_cooldown* of 0 or more
            (also when set on a live tracker).

    Attributes:
        shared_default: Whether *store* is the process-wide default store.
        stats: What this tracker did (`Stats`).
        recent: The views this tracker recorded lately; hand them to ``anchortrack.explain(...,
            recent=...)`` to locate where a diverged history first differs.
        backlog: Anchor writes the store did not take in time, written when it answers again (with a
            store that may block, also the anchors written last, which planning reads too); ``limit``
            bounds it (10,000 by default).
    """

    def __init__(
        self,
        store: AnchorStore | str | None = None,
        *,
        mode: Mode | str | None = None,
        namespace: str | None = None,
        record_incomplete: bool | None = None,
        store_timeout: float | None = None,
        store_cooldown: float | None = None,
        scope_by_api_key: bool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shared_default = store is None
        self.store: AnchorStore = (
            default_store() if store is None else coerce_store(store, caller="Tracker()")
        )
        # The variable and `using` win per call.
        self.mode: Mode | None = _settings.MODE.given(mode, "Tracker")
        self.namespace = _settings.NAMESPACE.value(namespace)
        self.record_incomplete = _settings.RECORD_INCOMPLETE.value(record_incomplete)
        self.scope_by_api_key = _settings.SCOPE_BY_API_KEY.value(scope_by_api_key)
        self.clock = clock
        self.stats = Stats()
        self.recent = RecentViews()
        timeout, cooldown = STORE_TIMEOUT.value(store_timeout), STORE_COOLDOWN.value(store_cooldown)
        self.failopen = FailOpen(self.store, self.stats, timeout=timeout, cooldown=cooldown, clock=clock)
        self.backlog = self.failopen.backlog
        #: Write the anchors recorded, then some of the backlog, within one deadline (``aflush``: async).
        self.flush = self.failopen.flush
        self.aflush = self.failopen.aflush
        self._memo = Memo()
        self._scopes: dict[int, tuple[tuple[Any, ...], Scope]] = {}
        self._lock = ForkSafeLock()
        self._subscribers: tuple[Callable[[Outcome], object], ...] = ()
        self._calls = Calls(self)

    def __repr__(self) -> str:
        mode = describe(self.mode)
        store = type(self.store).__name__ + (" (shared default)" if self.shared_default else "")
        namespace = f" namespace={self.namespace!r}" if self.namespace is not None else ""
        return f"<Tracker mode={mode} store={store}{namespace} {self.stats}>"

    @property
    def store_cooldown(self) -> float:
        """Seconds the store is skipped after a failure before it is tried again."""
        return self.failopen.cooldown

    @store_cooldown.setter
    def store_cooldown(self, seconds: float) -> None:
        self.failopen.cooldown = STORE_COOLDOWN.check(seconds, "Tracker", "store_cooldown")

    @property
    def store_timeout(self) -> float:
        """Seconds a store operation may take before the call goes without it."""
        return self.failopen.timeout

    @store_timeout.setter
    def store_timeout(self, seconds: float) -> None:
        self.failopen.timeout = STORE_TIMEOUT.check(seconds, "Tracker", "store_timeout")

    def scope_for(self, client: Any) -> Scope:
        """
        The scope this tracker records *client*'s anchors under (for ``explain`` or ``plan_request``): its
        base URL, organization and project, this tracker's namespace and, with ``scope_by_api_key``, a keyed
        digest of its API key (not of a key from a provider, which rotates: use a namespace).
        """
        api_key = getattr(client, "api_key", None)
        provided = getattr(client, "_api_key_provider", None) is not None
        by_key = self.scope_by_api_key and isinstance(api_key, str) and api_key and not provided
        secret = self.store.secret_key
        # Asked on every call, so made once per client and settings; the key is named by its hash, never held.
        settings = (
            client.base_url,
            getattr(client, "organization", None),
            getattr(client, "project", None),
            self.namespace,
            (len(api_key), hash(api_key)) if by_key else None,  # type: ignore[arg-type]
            secret,
        )
        cached = self._scopes.get(id(client))
        if cached is not None and cached[0] == settings:
            return cached[1]
        digest = api_key_digest(api_key, secret) if by_key else None  # type: ignore[arg-type]
        scope = Scope(str(settings[0]), settings[1], settings[2], self.namespace, digest)
        remember(self._lock, self._scopes, id(client), (settings, scope))
        return scope

    def subscribe(self, callback: Callable[[Outcome], object]) -> Callable[[], None]:
        """
        Call *callback* with the `Outcome` of every call from now on; return the function that stops it.

        It runs on the caller's thread (or task) once the decision is final, before an HTTP call returns
        (the caller's tracing span is still current); what it raises is logged, never raised.
        """
        with self._lock:
            self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(c for c in self._subscribers if c is not callback)

        return unsubscribe
