"""Configuration traits read once, when assigned: frozen copies of their values, and what they parse to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import traitlets

__all__ = ["Dict", "FrozenDict", "FrozenList", "List", "Union", "freeze", "thaw", "remember", "parsed"]


def _refuse(name: str) -> TypeError:
    return TypeError(
        f"c.GPUSpawner.{name} is read when it is assigned, so a change made in place would be lost: "
        f"assign a new value instead, e.g. spawner.{name} = new_value"
    )


class FrozenList(list):
    """A list setting as assigned; changing it in place raises a ``TypeError`` that says what to do."""

    __slots__ = ("_name",)

    def _no(self, *args: Any, **kwargs: Any) -> Any:
        raise _refuse(self._name)

    append = extend = insert = remove = pop = clear = sort = reverse = _no
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _no

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return thaw(self)  # traitlets' ``c.X.y.append(...)`` on the current value works on a plain copy

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (list, (thaw(self),))


class FrozenDict(dict):
    """A dict setting (or a dict inside one) as assigned; changing it in place raises a ``TypeError``."""

    __slots__ = ("_name",)

    def _no(self, *args: Any, **kwargs: Any) -> Any:
        raise _refuse(self._name)

    __setitem__ = __delitem__ = __ior__ = update = pop = popitem = clear = setdefault = _no

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return thaw(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (dict, (thaw(self),))


def freeze(value: Any, name: str) -> Any:
    """A deep copy of ``value`` whose lists and dicts refuse changes (naming the setting ``name``);
    a value frozen already is returned as it is."""
    if isinstance(value, (FrozenList, FrozenDict)):
        return value
    if isinstance(value, Mapping):
        out: Any = FrozenDict((k, freeze(v, name)) for k, v in value.items())
    elif isinstance(value, (list, tuple)) and not isinstance(value, str):
        out = FrozenList(freeze(v, name) for v in value)
        if isinstance(value, tuple):
            return tuple(out)
    else:
        return value
    out._name = name
    return out


def thaw(value: Any) -> Any:
    """A plain deep copy (dicts and lists) of a frozen value, for parsers and for KubeSpawner."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


class _Frozen:
    """A trait type whose value is kept frozen (:func:`freeze`): traitlets' own validation, which
    runs on every assignment (config loading included), would otherwise copy it into a plain list."""

    name: str

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, (FrozenList, FrozenDict)):
            return value  # validated when it was frozen
        return freeze(super().validate(obj, value), self.name)  # type: ignore[misc]


# named as traitlets' own, so the settings' documented types stay "list", "dict"
class List(_Frozen, traitlets.List):
    """traitlets' ``List``, its value frozen."""


class Dict(_Frozen, traitlets.Dict):
    """traitlets' ``Dict``, its value frozen."""


class Union(_Frozen, traitlets.Union):
    """traitlets' ``Union``, its value frozen where it is a list or dict."""


def _store(obj: Any) -> dict[str, tuple[tuple[Any, ...], Any]]:
    return obj.__dict__.setdefault("_gpu_parsed", {})


def remember(obj: Any, key: str, values: tuple[Any, ...], result: Any) -> None:
    """Record that ``values`` (the trait values it was read from, as assigned) parse to ``result``."""
    _store(obj)[key] = (values, result)


def parsed(obj: Any, key: str, names: tuple[str, ...], parse: Callable[..., Any]) -> Any:
    """What traits ``names`` of ``obj`` parse to: what a validator recorded for their values, else
    ``parse(*values)`` (a default value, which traitlets does not validate), recorded in turn."""
    values = tuple(getattr(obj, n) for n in names)
    memo = _store(obj).get(key)
    if memo is not None and len(memo[0]) == len(values) and all(a is b for a, b in zip(memo[0], values)):
        return memo[1]
    result = parse(*values)
    remember(obj, key, values, result)
    return result
