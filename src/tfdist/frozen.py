"""``@frozen``: an immutable, typed dataclass whose methods are shared instead of generated for each class.

``@dataclass(frozen=True)`` writes the source of six methods for every class (``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``) and compiles each with ``exec`` when the module is
imported: about 0.8 ms a class. ``tfdist doctor`` defines some 25 such classes before it probes anything; made
``@frozen`` they took its CPU time from 152 to 127 ms (median of 20 alternating runs, load 5; issue 25's goal: 40x
faster than importing TensorFlow).

``@frozen`` lets :mod:`dataclasses` collect the fields, so ``fields``, ``asdict``, ``replace``, ``field(...)``
defaults and type checkers (through ``dataclass_transform``) work as for any dataclass, and then installs one
shared implementation of each method that reads the class's fields when called. Instances behave as the frozen
dataclass's would: the same constructor (positional or keyword arguments, defaults, default factories,
``__post_init__``), repr, equality and hash over the compared fields, and ``FrozenInstanceError`` on assignment.
A method the class writes itself is kept, as dataclasses keeps it. Creating an instance costs a few microseconds
more than with the generated ``__init__``; the doctor creates a few hundred at most.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable, NamedTuple, TypeVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10: type checkers use typing_extensions' marker; at run time it only marks
    def dataclass_transform(**_marks: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return lambda decorator: decorator

_T = TypeVar("_T", bound=type)
_MISSING = dataclasses.MISSING
_INITVAR = getattr(dataclasses, "_FIELD_INITVAR", None)
_set = object.__setattr__


class _Spec(NamedTuple):
    """What the shared methods need to know about one class, worked out once when it is decorated."""

    owner: type
    positional: tuple[str, ...]  # init fields that may be passed by position, in order
    required: int  # how many of those have no default
    accepted: frozenset[str]  # every init field (keyword-only ones too)
    fields: tuple[tuple[str, bool, Any, Any], ...]  # (name, init, default, default_factory) for every field
    field_names: frozenset[str]
    shown: tuple[str, ...]  # in the repr
    compared: tuple[str, ...]  # by ==
    hashed: tuple[str, ...]


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    spec: _Spec = type(self).__frozen_spec__
    name = spec.owner.__qualname__
    if len(args) > len(spec.positional):
        most, least = len(spec.positional) + 1, spec.required + 1
        takes = (f"{most} positional argument{'s' if most > 1 else ''}" if most == least
                 else f"from {least} to {most} positional arguments")
        raise TypeError(f"{name}.__init__() takes {takes} but {len(args) + 1} were given")
    given = dict(zip(spec.positional, args))
    for key, value in kwargs.items():
        if key not in spec.accepted:
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{key}'")
        if key in given:
            raise TypeError(f"{name}.__init__() got multiple values for argument '{key}'")
        given[key] = value
    for field_name, init, default, factory in spec.fields:
        if init and field_name in given:
            value = given[field_name]
        elif default is not _MISSING:
            value = default
        elif factory is not _MISSING:
            value = factory()
        elif init:
            kind = "positional" if field_name in spec.positional else "keyword-only"
            raise TypeError(f"{name}.__init__() missing 1 required {kind} argument: '{field_name}'")
        else:
            continue  # init=False without a default: dataclasses leaves it unset too
        _set(self, field_name, value)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _values(self: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple([getattr(self, n) for n in names])


def _repr(self: Any) -> str:
    spec: _Spec = type(self).__frozen_spec__
    shown = ", ".join([f"{n}={getattr(self, n)!r}" for n in spec.shown])
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> Any:  # bool, or NotImplemented for another class
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = type(self).__frozen_spec__.compared
    return _values(self, compared) == _values(other, compared)


def _hash(self: Any) -> int:
    return hash(_values(self, type(self).__frozen_spec__.hashed))


def _setattr(self: Any, name: str, value: Any) -> None:
    spec: _Spec = type(self).__frozen_spec__
    if type(self) is spec.owner or name in spec.field_names:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    super(spec.owner, self).__setattr__(name, value)


def _delattr(self: Any, name: str) -> None:
    spec: _Spec = type(self).__frozen_spec__
    if type(self) is spec.owner or name in spec.field_names:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    super(spec.owner, self).__delattr__(name)


def _parameter(f: dataclasses.Field[Any]) -> str:
    annotation = repr(f.type) if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
    default = (f" = {f.default!r}" if f.default is not _MISSING
               else "" if f.default_factory is _MISSING else " = <factory>")
    return f"{f.name}: {annotation}{default}"


_SHARED = {"__init__": _init, "__repr__": _repr, "__eq__": _eq}


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: _T) -> _T:
    """Make ``cls`` a frozen dataclass with shared methods (see the module's docstring)."""
    own = {name for name in (*_SHARED, "__setattr__", "__delattr__") if name in cls.__dict__}
    documented = bool(cls.__dict__.get("__doc__"))
    explicit_hash = cls.__dict__.get("__hash__", _MISSING) not in (_MISSING, None)
    if own & {"__setattr__", "__delattr__"}:
        raise TypeError(f"cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
    # Fields only: with these flags dataclasses generates no code.
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    if any(getattr(f, "_field_type", None) is _INITVAR for f in cls.__dataclass_fields__.values()):
        raise TypeError(f"{cls.__name__}: @frozen takes no InitVar fields; use @dataclass(frozen=True)")
    every = dataclasses.fields(cls)
    if not documented:  # what dataclasses would write: the constructor's signature
        cls.__doc__ = f"{cls.__name__}({', '.join(_parameter(f) for f in every if f.init)})"
    init = [f for f in every if f.init]
    spec = _Spec(
        owner=cls,
        positional=tuple(f.name for f in init if not f.kw_only),
        required=sum(1 for f in init if not f.kw_only and f.default is _MISSING and f.default_factory is _MISSING),
        accepted=frozenset(f.name for f in init),
        fields=tuple((f.name, f.init, f.default, f.default_factory) for f in every),
        field_names=frozenset(f.name for f in every),
        shown=tuple(f.name for f in every if f.repr),
        compared=tuple(f.name for f in every if f.compare),
        hashed=tuple(f.name for f in every if (f.compare if f.hash is None else f.hash)),
    )
    type.__setattr__(cls, "__frozen_spec__", spec)
    for name, method in (*_SHARED.items(), ("__setattr__", _setattr), ("__delattr__", _delattr)):
        if name not in own:
            type.__setattr__(cls, name, method)
    if not explicit_hash:
        type.__setattr__(cls, "__hash__", _hash)
    return cls
