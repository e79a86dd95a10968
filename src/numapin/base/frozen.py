"""Frozen records: what ``@dataclass(frozen=True)`` gives numapin's facts and results, without its start-up cost.

``dataclasses`` costs more to import than all of a pin's work (it pulls in
``inspect``), and it generates each class's methods as source text compiled
at import: about 0.5 ms per class, 25 classes on the path of ``numapin exec``.
:func:`frozen` builds the same kind of class from shared, precompiled methods:
``__init__`` (positional or keyword, defaults, ``field(default_factory=...)``),
``__repr__``, ``__eq__`` and ``__hash__`` over the fields compared, and
assignment refused. Type checkers see a frozen dataclass (PEP 681).

Fields are the class's annotations, in order, after those of a record base.
A method the class defines itself (``__repr__``, ``__eq__``...) is kept.
A fact that costs a reading most questions never ask for is a :class:`Later`
field: read on first use, and compared, hashed and pickled by its value.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from functools import cached_property as once
    from typing import Any, Generic, TypeVar

    from typing_extensions import dataclass_transform

    T = TypeVar("T")

    class Later(Generic[T]):
        def __init__(self, read: Callable[[], T]) -> None: ...
        def get(self) -> T: ...
else:
    def dataclass_transform(**_: object) -> object:
        return lambda function: function

    class once:
        """A property computed on first use and kept in the instance (``functools.cached_property``, whose
        module and its imports a worker pinned at start-up would otherwise pay for; a record stores it in its
        ``__dict__``, which its refusal of assignment does not guard)."""

        def __init__(self, method):
            self.method = method
            self.name = method.__name__
            self.__doc__ = method.__doc__

        def __set_name__(self, owner, name):
            self.name = name

        def __get__(self, instance, owner=None):
            if instance is None:
                return self
            value = instance.__dict__[self.name] = self.method(instance)
            return value

    class Later:
        """A record's value read on first use and kept (``get()``); compared, hashed, shown and pickled by that
        value, which asking for reads. Views of one record (``replace``) share it, so it is read once.
        (``typing.Generic`` would cost a start-up its import: type checkers see a generic class.)"""

        __slots__ = ("_known", "_read", "_value")

        def __init__(self, read):
            self._read = read
            self._value = None
            self._known = False

        def get(self):
            # Two threads asking at once may both read: the same value; no lock (one held by another thread
            # at fork would stop a forked child that asks).
            if not self._known:
                self._value = self._read()
                self._known = True
            return self._value

        def __eq__(self, other):
            return isinstance(other, Later) and self.get() == other.get()

        def __hash__(self):
            return hash(self.get())

        def __repr__(self):
            return repr(self.get())

        def __reduce__(self):
            # A pickle (a copy) carries the value: the reading closure holds a reader, not a fact.
            return _given, (self.get(),)

    def _given(value):
        return Later(lambda: value)

__all__ = ["Later", "field", "fields", "frozen", "once", "replace"]

_MISSING = object()


class _Field:
    __slots__ = ("compare", "default", "factory", "name")

    def __init__(self, default: object, factory: object, compare: bool) -> None:
        self.default = default
        self.factory = factory
        self.compare = compare
        self.name = ""


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | Any = _MISSING,
          compare: bool = True) -> Any:
    """A field with a default, a default factory, or left out of comparison and hashing."""
    return _Field(default, default_factory, compare)


def fields(obj: object) -> tuple[str, ...]:
    """The field names of a record class or instance, in order."""
    found: tuple[str, ...] = tuple(f.name for f in getattr(obj, "__record_fields__", ()))
    return found


def replace(obj: T, **changes: Any) -> T:
    """A copy of the record ``obj`` with ``changes`` applied (as :func:`dataclasses.replace`)."""
    values = {f.name: getattr(obj, f.name) for f in obj.__record_fields__}  # type: ignore[attr-defined]
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)


# -- the shared methods -------------------------------------------------------


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    names = self.__record_names__
    if not kwargs and len(args) == len(names):
        # Every field given in order: the common case (a topology read makes one
        # per core), filled in one call; __setattr__ refuses, the dict does not.
        self.__dict__.update(zip(names, args, strict=True))
        return
    if len(args) > len(names):
        raise TypeError(f"{type(self).__name__}() takes {len(names)} arguments, {len(args)} given")
    # Dictionary operations rather than a loop over the fields: a pin builds a
    # handful of records with keywords and defaults, each on its hot path.
    values = dict(self.__record_defaults__)
    values.update(zip(names, args, strict=False))  # fewer args than fields: the rest below
    if kwargs:
        unknown = kwargs.keys() - self.__record_nameset__
        twice = kwargs.keys() & set(names[: len(args)]) if args else ()
        values.update(kwargs)
    if len(values) < len(names):
        for spec in self.__record_fields__:
            if spec.name in values:
                continue
            if spec.factory is _MISSING:
                raise TypeError(f"{type(self).__name__}() missing argument {spec.name!r}")
            values[spec.name] = spec.factory()
    if kwargs and (unknown or twice):
        what = "got multiple values for" if twice else "got an unexpected keyword argument"
        raise TypeError(f"{type(self).__name__}() {what} {sorted(twice or unknown)[0]!r}")
    self.__dict__.update(values)


def _key(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in self.__record_fields__ if f.compare)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]
    return _key(self) == _key(other)


def _hash(self: Any) -> int:
    return hash(_key(self))


def _repr(self: Any) -> str:
    inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__record_fields__)
    return f"{type(self).__qualname__}({inner})"


def _setattr(self: Any, name: str, value: object) -> None:
    raise AttributeError(f"{type(self).__name__} is frozen: cannot assign to {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record of its annotated fields."""
    specs: list[_Field] = [f for base in reversed(cls.__mro__[1:]) for f in getattr(base, "__record_fields__", ())]
    known = {f.name for f in specs}
    # The class's own annotations (inspect.get_annotations would import inspect, the cost avoided here).
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if "ClassVar" in str(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, _Field) else _Field(value, _MISSING, True)
        spec.name = name
        if isinstance(value, _Field):
            # The class attribute was the field() marker: the default (if any) stands in its place.
            if spec.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        if name in known:
            specs = [spec if f.name == name else f for f in specs]
        else:
            specs.append(spec)
            known.add(name)
    seen_default = ""
    for spec in specs:
        has_default = spec.default is not _MISSING or spec.factory is not _MISSING
        if seen_default and not has_default:
            raise TypeError(f"{cls.__name__}: field {spec.name!r} without a default follows {seen_default!r}")
        seen_default = seen_default or (spec.name if has_default else "")
    cls.__record_fields__ = tuple(specs)  # type: ignore[attr-defined]
    cls.__record_names__ = tuple(f.name for f in specs)  # type: ignore[attr-defined]
    cls.__record_nameset__ = frozenset(cls.__record_names__)  # type: ignore[attr-defined]
    # Plain defaults, in field order (factories run per instance, in _init).
    cls.__record_defaults__ = {f.name: f.default for f in specs if f.default is not _MISSING}  # type: ignore[attr-defined]
    own = cls.__dict__
    methods = {"__init__": _init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash,
               "__setattr__": _setattr, "__delattr__": _delattr}
    for name, method in methods.items():
        if name not in own or (name == "__hash__" and own[name] is None):
            setattr(cls, name, method)
    return cls
