"""A tracked copy of a client, and a tracer's patches carried onto it (langsmith's, braintrust's
``wrap_openai``, logfire's ``instrument_openai`` patch a client in place, holding the original's bound
methods).

A patch is carried whole or not at all (DESIGN I10): every reference in it that reaches the source client or
one of its resources (closures, ``__wrapped__``, defaults, bound methods, wrapt's wrappers, ``partial``s,
containers, attributes; `_DEPTH` deep) is pointed at the copy's; a patch holding one anywhere else is left out
with one `RuntimeWarning`, so no call through the copy reaches the source client's address or key."""

from __future__ import annotations

import copy as copying
import functools
import gc
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
    """A shallow copy of *client* as a *cls* tracked by *tracker*, without its cached resources (bound to
    *client*). No constructor runs; top-level dicts and lists are copied (headers stay apart)."""
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
#: `_rebind`'s answer for a value that reaches the source's objects but cannot be pointed at the copy's.
_FAIL = object()
#: How deep `_rebind` follows references from a patch: a tracer's own objects are a few levels deep,
#: and deeper lie its exporters and SDKs (following them made ``with_options()`` several times slower).
_DEPTH = 4
#: Values that never lead to a client: followed no further.
_LEAVES = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, str, bytes, int, float, bool)


def carry_patches(source: Any, target: Any) -> None:
    """Carry the instance patches on *source* and its resources to *target*, rebound to *target*'s. A patch
    that would still reach *source* is left out (removed where `clone` had copied it) and `wrap` warns once
    per patch."""
    pairs: _Pairs = {id(source): (source, target, "client")}
    _pair(source, target, "client", pairs, 0)
    memo: dict[int, Any] = {}
    for original, copy, path in list(pairs.values()):
        for name, value in list(vars(original).items()):
            if name == TRACKER_ATTR or is_cached(type(original), name):
                continue
            if original is source and not callable(value):
                continue  # the client's own settings, as `clone` or the SDK's ``copy`` made them
            present = copy.__dict__.get(name, _MISSING)
            if present is not _MISSING and present is not value and _same_kind(value, present, pairs):
                continue
            carried = _rebind(value, pairs, 0, memo)
            if carried is _FAIL:
                if present is value:  # `clone` copied it: it would reach the source
                    del copy.__dict__[name]
                _warn_uncarried(f"{path}.{name}", value)
            elif present is _MISSING or carried is not value:
                copy.__dict__[name] = carried


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
        return value.__func__ is present.__func__ and pair is not None and pair[1] is present.__self__
    if type(value) is types.FunctionType and type(present) is types.FunctionType:
        return value.__code__ is present.__code__
    return type(value) is type(present) and not hasattr(value, "__wrapped__")


def _rebind(value: Any, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """*value* with every reference it holds to the source's objects pointed at the copy's (what holds one
    copied): *value* itself if it holds none, `_FAIL` if one cannot be pointed at the copy."""
    pair = pairs.get(id(value))
    if pair is not None:
        return pair[1]
    if depth > _DEPTH or value is None or isinstance(value, _LEAVES):
        return value
    if id(value) not in memo:
        memo[id(value)] = value  # a cycle through *value* refers to nothing new
        memo[id(value)] = _rebound(value, pairs, depth + 1, memo)
    return memo[id(value)]


def _rebound(value: Any, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind is types.MethodType:  # not isinstance: wrapt's proxies pass for what they wrap
        return _rebind_method(value, pairs, depth, memo)
    if kind is functools.partial:
        parts = _rebind_all([value.func, *value.args, value.keywords], pairs, depth, memo)
        if parts is None or parts is _FAIL:
            return value if parts is None else _FAIL
        *call, keywords = parts
        return functools.partial(*call, **keywords)
    if kind in (dict, list, tuple):
        items = list(value.items()) if kind is dict else list(value)
        rebound = _rebind_all([item[1] for item in items] if kind is dict else items, pairs, depth, memo)
        if rebound is None or rebound is _FAIL:
            return value if rebound is None else _FAIL
        if kind is dict:
            return dict(zip((item[0] for item in items), rebound, strict=True))
        return kind(rebound)
    if hasattr(value, "_self_wrapper") and hasattr(value, "__wrapped__"):  # a wrapt wrapper
        parts = _rebind_all([value.__wrapped__, value._self_wrapper], pairs, depth, memo)
        if parts is None or parts is _FAIL:
            return value if parts is None else _FAIL
        if getattr(value, "_self_instance", None) is not None or kind.__name__ != "FunctionWrapper":
            return _FAIL  # a bound wrapper: not rebuilt
        return kind(*parts)
    if kind is types.FunctionType:
        return _rebind_function(value, pairs, depth, memo)
    return _rebind_object(value, pairs, depth, memo)


def _rebind_all(values: list[Any], pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """*values* rebound; None if none changed, `_FAIL` if one failed."""
    rebound = [_rebind(item, pairs, depth, memo) for item in values]
    if any(item is _FAIL for item in rebound):
        return _FAIL
    if all(new is old for new, old in zip(rebound, values, strict=True)):
        return None
    return rebound


def _rebind_method(method: types.MethodType, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """*method* bound to the copy's object: a class's own method as the copy's class has it (its tracked
    override), any other function (a tracer's, bound with ``types.MethodType``) as it is."""
    owner, func = method.__self__, method.__func__
    new_owner = _rebind(owner, pairs, depth, memo)
    if new_owner is owner or new_owner is _FAIL:
        new_func = _rebind(func, pairs, depth, memo)
        if new_owner is _FAIL or new_func is _FAIL:
            return _FAIL
        return method if new_func is func else types.MethodType(new_func, owner)
    name = getattr(func, "__name__", None)
    if isinstance(name, str) and inspect.getattr_static(type(owner), name, None) is func:
        own = inspect.getattr_static(type(new_owner), name, None)
        if callable(own):
            return types.MethodType(own, new_owner)
    new_func = _rebind(func, pairs, depth, memo)
    return _FAIL if new_func is _FAIL else types.MethodType(new_func, new_owner)


def _rebind_function(func: types.FunctionType, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """A copy of *func* whose closure, defaults and attributes (``__wrapped__``…) refer to the copy's."""
    cells = func.__closure__ or ()
    contents = [_cell_contents(cell) for cell in cells]
    parts = [*contents, func.__defaults__, func.__kwdefaults__, func.__dict__]
    rebound = _rebind_all(parts, pairs, depth, memo)
    if rebound is None or rebound is _FAIL:
        return func if rebound is None else _FAIL
    *new_contents, defaults, kwdefaults, attributes = rebound
    closure = tuple(
        cell if new is old else types.CellType(new)
        for cell, new, old in zip(cells, new_contents, contents, strict=True)
    )
    new = types.FunctionType(func.__code__, func.__globals__, func.__name__, defaults, closure)
    new.__kwdefaults__ = kwdefaults
    new.__dict__.update(attributes)
    new.__qualname__, new.__module__, new.__doc__ = func.__qualname__, func.__module__, func.__doc__
    new.__annotations__ = func.__annotations__
    return new


def _cell_contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: holds nothing
        return None


def _rebind_object(value: Any, pairs: _Pairs, depth: int, memo: dict[int, Any]) -> Any:
    """A shallow copy of *value* whose attributes (``__dict__`` and slots) refer to the copy's objects;
    `_FAIL` if it reaches the source's objects only through what it holds otherwise (a container's items)."""
    own = getattr(value, "__dict__", None)
    own = own if type(own) is dict else {}
    names = [*own, *(name for name in _slots(type(value)) if name not in own and hasattr(value, name))]
    attributes = [own[name] if name in own else getattr(value, name) for name in names]
    rebound = _rebind_all(attributes, pairs, depth, memo)
    if rebound is _FAIL:
        return _FAIL
    held = {id(item) for item in attributes} | {id(own)}
    others = [item for item in gc.get_referents(value) if id(item) not in held]
    if _rebind_all(others, pairs, depth, memo) is not None:
        return _FAIL  # reached through something other than attributes: not rebuilt
    if rebound is None:
        return value
    try:
        new = copying.copy(value)
        for name, item in zip(names, rebound, strict=True):
            object.__setattr__(new, name, item)
    except Exception:  # noqa: BLE001 - an object that will not be copied: the patch is left out
        return _FAIL
    return new


def _slots(cls: type[Any]) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    return [name for name in names if name not in ("__dict__", "__weakref__")]


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
