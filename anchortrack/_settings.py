"""Every setting of a tracked client, one row each (`SETTINGS`): keyword (None there: use the setting),
variable, check, default, and the fallback a bad variable gets (with one warning). docs/operations.md is made
from them."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from ._mode import EXPECTED, Mode, _call_mode, coerce


T = TypeVar("T")


@attrs.frozen(eq=False)  # hashed by identity: `from_env` caches by row on every call
class Setting(Generic[T]):
    """One setting; *check* turns a value given in code into the setting's (`TypeError`/`ValueError`)."""

    name: str
    default: T
    check: Callable[[Any, str, str], T]  # (value, caller, name)
    valid: str  # the valid values, as the warning about a bad one names them
    sets: str  # what it sets, for docs/operations.md (markdown)
    env: str | None = None  # its environment variable, if it has one
    parse: Callable[[str], object] = str  # the variable's text as a value to check
    env_wins: bool = False  # the variable wins over the value given in code (else the code's wins)
    taken_by: str | None = "tracker"  # what takes it as *name*= in code: ``tracker`` (and `wrap`), ``store``
    read: str = "when a tracker is created"
    event: str = "anchortrack.setting_invalid"
    fallback: T = attrs.field(default=attrs.Factory(lambda self: self.default, takes_self=True))

    def given(self, value: object, caller: str) -> T | None:
        """*value* as given to *caller* in code, checked; None when not given."""
        return None if value is None else self.check(value, caller, self.name)

    def from_env(self) -> T | None:
        """The variable's value (None: no variable, unset or empty); a bad value is the fallback."""
        text = os.environ.get(self.env) if self.env is not None else None
        return _parsed(self, text) if text else None

    def value(self, given: object = None, caller: str = "Tracker") -> T:
        """The value in force, given *given* in code."""
        env = self.from_env()
        if env is not None and self.env_wins:
            return env
        checked = self.given(given, caller)
        if checked is not None:
            return checked
        return self.default if env is None else env

    @property
    def using(self) -> object:
        """The fallback as a warning names it."""
        return self.fallback.value if isinstance(self.fallback, Mode) else self.fallback


@functools.cache  # a process sees few values of a variable
def _parsed(setting: Setting[T], text: str) -> T:
    try:
        return setting.check(setting.parse(text), setting.env or "", "")
    except (TypeError, ValueError, KeyError):  # KeyError: a flag's text names no flag
        from ._log import get_logger  # late: the command line's --help imports stores, not structlog

        log = get_logger()
        log.warning(
            setting.event, variable=setting.env, value=text, expected=setting.valid, using=setting.using
        )
        return setting.fallback


def _string(value: object, caller: str, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{caller}({name}=...) takes a string or None, not {type(value).__name__}")
    return value


def _flag(value: object, _caller: str, _name: str) -> bool:
    return bool(value)


_FLAGS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)


def _flag_text(text: str) -> bool:
    return _FLAGS[text.strip().lower()]


def checked_seconds(value: object, caller: str, name: str, *, zero: bool = False) -> float:
    """*value*, the seconds *caller* takes as *name*: a finite number above 0 (or 0, with *zero*); else
    `TypeError` or `ValueError` naming the setting."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{caller}({name}=...) takes seconds (a number), not {type(value).__name__}")
    if not (value >= 0 if zero else value > 0):
        least = "0 seconds or more" if zero else "more than 0 seconds"
        raise ValueError(f"{caller}({name}={value!r}): must be {least}")
    if not math.isfinite(value):
        raise ValueError(f"{caller}({name}={value!r}): must be a finite number of seconds")
    return float(value)


ANY_TEXT = "any text"
FLAG = "true or false (1, yes, on / 0, no, off)"

# fmt: off
MODE: Setting[Mode] = Setting(
    "mode", Mode.CHAINED, lambda value, _caller, _name: coerce(value), EXPECTED, env="ANCHORTRACK_MODE",
    parse=str.strip, env_wins=True, read="on every call", event="anchortrack.mode_invalid", fallback=Mode.OFF,
    sets="`chained`, `shadow` or `off` ([rolling out](#rolling-out)); also wins over `anchortrack.using()`")
NAMESPACE: Setting[str | None] = Setting(
    "namespace", None, _string, ANY_TEXT,
    sets="a partition of the scope: anchors recorded under one are never used under another")
RECORD_INCOMPLETE: Setting[bool] = Setting(
    "record_incomplete", False, _flag, FLAG, parse=_flag_text, sets="anchor on `incomplete` responses too")
STORE_TIMEOUT: Setting[float] = Setting(
    "store_timeout", 1.0, checked_seconds, "a number of seconds above 0", parse=float,
    sets="seconds a store call may take before the call goes without it "
    "([when the store fails](#when-the-store-fails))")
STORE_COOLDOWN: Setting[float] = Setting(
    "store_cooldown", 1.0, functools.partial(checked_seconds, zero=True), "a number of seconds, 0 or more",
    parse=float, sets="seconds between two probes of a store that is down")
SCOPE_BY_API_KEY: Setting[bool] = Setting(
    "scope_by_api_key", True, _flag, FLAG, parse=_flag_text,
    sets="keep anchors apart per API key (a keyed digest of it is part of the scope)")
SECRET_KEY: Setting[bytes | None] = Setting(
    "secret_key", None, lambda value, _c, _n: (value.encode() if isinstance(value, str) else value) or None,
    ANY_TEXT, env="ANCHORTRACK_SECRET_KEY", taken_by="store", read="when a store is created",
    sets="the key of keyed view digests and anchor MACs ([stores](guide/stores.md)), of a store made "
    "without `secret_key=`; empty means none")
PER_REQUEST_PROPERTIES: Setting[tuple[str, ...]] = Setting(
    "per_request_properties", (),
    lambda text, _c, _n: tuple(u.rstrip("/") for u in text.replace(",", " ").split()),
    ANY_TEXT, env="ANCHORTRACK_PER_REQUEST_PROPERTIES", taken_by=None,
    read="on every call", sets="base URLs (separated by spaces or commas) of servers that apply request "
    "properties per request ([compatibility](compatibility.md))")
# fmt: on

#: Every setting: the rows above, in order (docs/operations.md lists them so).
SETTINGS: tuple[Setting[Any], ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))
#: The settings `anchortrack.wrap` and `Tracker` take, by keyword.
TRACKER_SETTINGS = {row.name: row for row in SETTINGS if row.taken_by == "tracker"}


def checked(caller: str, given: dict[str, Any]) -> dict[str, Any]:
    """The settings *given* to *caller* (None: not given, left out), each checked by its row."""
    return {name: TRACKER_SETTINGS[name].given(v, caller) for name, v in given.items() if v is not None}


# -- the mode: the variable, then a `using` block, then the client's, then ``chained`` -----------


def resolve(client_mode: Mode | None) -> Mode:
    """Return the mode in force for one call."""
    return MODE.from_env() or _call_mode.get() or client_mode or MODE.default


def describe(client_mode: Mode | None) -> str:
    """The mode in force and where it comes from, for people: ``shadow (ANCHORTRACK_MODE=shadow)``."""
    mode = resolve(client_mode).value
    env = os.environ.get(MODE.env or "")
    if not env:
        return mode
    if env.strip().lower() == mode:
        return f"{mode} ({MODE.env}={env})"
    return f"{mode} ({MODE.env}={env!r} is unknown; expected one of: {EXPECTED})"
