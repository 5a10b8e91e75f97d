"""
A tracked copy of a client, and a tracer's patches carried onto it: tracers (langsmith's, braintrust's
``wrap_openai``) patch a client's resources in place, holding the original resource's bound method;
`carry_patches` points those references at the copy's objects, so the tracer sees every call made
through the wrapped client, before anchortrack plans it.
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from functools import cached_property
from typing import Any


#: The attribute a tracked client keeps its tracker under (never copied).
TRACKER_ATTR = "_anchortrack_tracker"

#: The original client's objects by id: (the original, its counterpart in the copy, its path for warnings).
_Pairs = dict[int, tuple[Any, Any, str]]


def clone(client: Any, cls: type[Any], tracker: object) -> Any:
    """
    A shallow copy of *client* as a *cls* tracked by *tracker*, without its cached resources (bound to
    *client*). No constructor runs; top-level dicts and lists are copied (headers stay apart).
    """
    new = object.__new__(cls)
    for name, value in vars(client).items():
        if name != TRACKER_ATTR and not is_cached(type(client), name):
            new.__dict__[name] = value.copy() if type(value) in (dict, list) else value
    return adopt(client, new, tracker)


def adopt(source: Any, new: Any, tracker: object) -> Any:
    """Give *new*, a copy of *source*, *tracker* and the tracer's patches on *source*; return it."""
    setattr(new, TRACKER_ATTR, tracker)
    carry_patches(source, new)
    return new


def is_cached(cls: type[Any], name: str) -> bool:
    """Whether *name* on instances of *cls* is a cached property's value."""
    names = _cached_names.get(cls)
    if names is None:
        keys = {key for klass in cls.__mro__ for key in vars(klass)}
        cached = (key for key in keys if isinstance(inspect.getattr_static(cls, key), cached_property))
        names = _cached_names[cls] = frozenset(cached)
    return name in names


_cached_names: dict[type[Any], frozenset[str]] = {}
_warned: set[tuple[str, str]] = set()
_MISSING = object()


def carry_patches(source: Any, target: Any) -> None:
    """
    Carry the instance patches on *source*'s resources (and on *source*) to *target*. A patch whose
    references to *source*'s objects cannot be found is left out, and `wrap` warns once per patch.
    """
    pairs: _Pairs = {id(source): (source, target, "client")}
    _pair(source, target, "client", pairs, 0)
    for original, copy, path in list(pairs.values()):
        for name, value in list(vars(original).items()):
            if name == TRACKER_ATTR or is_cached(type(original), name):
                continue
            present = copy.__dict__.get(name, _MISSING)
            if not callable(value):
                if present is _MISSING and original is not source:
                    copy.__dict__[name] = value  # a tracer's "already patched" marker
                continue
            if present is not _MISSING and present is not value and _same_kind(value, present, pairs):
                continue
            carried = _rebind(value, pairs, 0, {})
            if carried is not None:
                copy.__dict__[name] = carried
            elif original is not source:  # the client's own (`clone` copied them) keep working as they are
                _warn_uncarried(f"{path}.{name}", value)


def _pair(original: Any, copy: Any, path: str, pairs: _Pairs, depth: int) -> None:
    """Pair each resource *original* has built with the same resource of *copy*, recursively."""
    if depth > 3:
        return
    for name, value in list(vars(original).items()):
        if not is_cached(type(original), name) or not hasattr(value, "__dict__"):
            continue
        counterpart = getattr(copy, name)
        if id(value) in pairs or not hasattr(counterpart, "__dict__"):
            continue
        pairs[id(value)] = (value, counterpart, f"{path}.{name}")
        _pair(value, counterpart, f"{path}.{name}", pairs, depth + 1)


def _same_kind(value: Any, present: Any, pairs: _Pairs) -> bool:
    """Whether *value* (the original's) is what the SDK itself put where the copy has *present*."""
    if type(value) is types.MethodType and type(present) is types.MethodType:
        pair = pairs.get(id(value.__self__))
        return value.__name__ == present.__name__ and pair is not None and pair[1] is present.__self__
    if type(value) is types.FunctionType and type(present) is types.FunctionType:
        return value.__code__ is present.__code__
    return type(value) is type(present) and not hasattr(value, "__wrapped__")


def _rebind(value: Any, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """
    *value* with its references to the original client's objects pointed at the copy's (through bound
    methods, closures, ``__wrapped__``, wrapt's wrappers and ``functools.partial``), or None if none.
    """
    if depth > 8:
        return None
    if id(value) not in memo:
        memo[id(value)] = None  # a cycle through *value* refers to nothing new
        memo[id(value)] = _rebound(value, pairs, depth, memo)
    return memo[id(value)]


def _rebound(value: Any, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """`_rebind`, uncached."""
    pair = pairs.get(id(value))
    if pair is not None:
        return pair[1]
    if type(value) is types.MethodType:  # not isinstance: wrapt's proxies pass for what they wrap
        owner = pairs.get(id(value.__self__))
        if owner is None:
            return None
        copy = owner[1]
        method = inspect.getattr_static(type(copy), value.__name__, None)
        return None if method is None else method.__get__(copy, type(copy))
    if type(value) is functools.partial:
        parts = [value.func, *value.args]
        rebound = [_rebind(part, pairs, depth + 1, memo) for part in parts]
        if all(part is None for part in rebound):
            return None
        func, *args = (new if new is not None else old for new, old in zip(rebound, parts, strict=True))
        return functools.partial(func, *args, **value.keywords)
    if hasattr(value, "_self_wrapper") and hasattr(value, "__wrapped__"):  # a wrapt FunctionWrapper
        inner = _rebind(value.__wrapped__, pairs, depth + 1, memo)
        return None if inner is None else type(value)(inner, value._self_wrapper)
    if type(value) is types.FunctionType:
        return _rebind_function(value, pairs, depth, memo)
    return None


def _rebind_function(
    func: types.FunctionType, pairs: _Pairs, depth: int, memo: dict[int, Any]
) -> types.FunctionType | None:
    """A copy of *func* whose closure and ``__wrapped__`` refer to the copy's objects, or None."""
    cells = func.__closure__ or ()
    closure: list[types.CellType] = []
    for cell in cells:
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            closure.append(cell)
            continue
        rebound = _rebind(content, pairs, depth + 1, memo)
        closure.append(cell if rebound is None else types.CellType(rebound))
    wrapped = func.__dict__.get("__wrapped__")
    new_wrapped = _rebind(wrapped, pairs, depth + 1, memo) if wrapped is not None else None
    if all(new is old for new, old in zip(closure, cells, strict=True)):
        return None
    new = types.FunctionType(
        func.__code__, func.__globals__, func.__name__, func.__defaults__, tuple(closure)
    )
    new.__kwdefaults__ = func.__kwdefaults__
    new.__dict__.update(func.__dict__)
    if new_wrapped is not None:
        new.__dict__["__wrapped__"] = new_wrapped
    new.__qualname__, new.__module__, new.__doc__ = func.__qualname__, func.__module__, func.__doc__
    new.__annotations__ = func.__annotations__
    return new


def _warn_uncarried(path: str, patch: Any) -> None:
    """Warn, once per patch, that a tracer's patch on the original client is not on the wrapped one."""
    origin = getattr(patch, "__module__", None) or type(patch).__module__
    name = getattr(patch, "__qualname__", None) or type(patch).__qualname__
    key = (path, f"{origin}.{name}")
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"anchortrack.wrap(): {path} was replaced on this client by {origin}.{name}, which anchortrack "
        "cannot carry over to the wrapped client: calls through the wrapped client are chained but "
        "that patch does not see them. Apply it to the wrapped client instead: "
        "tracer(anchortrack.wrap(client)).",
        RuntimeWarning,
        stacklevel=4,
    )
