"""Closed sets: every choice numapin offers is a :class:`Choice`, and taken as text by one parser.

A :class:`Choice` member reads, prints, compares and hashes as its text value (``"node"``); a
:class:`Numbered` one (the kernel's ``MPOL_*`` modes) as its number. Each does what numapin asks of an
enum member: its class lists the members in the order written, ``Kind(value)`` and ``Kind[name]`` find
one, each has ``name`` and ``value``, and stays itself under ``is``, copy and pickle. They are not made
with :mod:`enum`: importing it, and making a class with it, cost a worker pinned at start-up about 3 ms of
its share of a process start (``benchmarks/startup.py``), more than the pin itself. Type checkers see
:class:`enum.Enum` classes, whose rules these keep (one value per member, no member added later).
"""

from __future__ import annotations

from .errors import UsageError, quoted

TYPE_CHECKING = False
if TYPE_CHECKING:
    import enum
    from typing import TypeVar

    E = TypeVar("E", bound=enum.Enum)

    class Choice(str, enum.Enum):
        """A member of a closed set that reads, prints and compares as its text value (``"node"``)."""

        def __str__(self) -> str: ...

    class Numbered(enum.IntEnum):
        """A member of a closed set of numbers (the kernel's)."""

else:

    class _Closed(type):
        """The class of a closed set: the public constants of its body, of the set's own type, are its members,
        each an instance of it."""

        def __new__(mcs, name, bases, body):
            kind = body.get("_kind_") or next(base._kind_ for base in bases if hasattr(base, "_kind_"))
            found = {k: v for k, v in body.items() if not k.startswith("_") and type(v) is kind}
            cls = super().__new__(mcs, name, bases, {k: v for k, v in body.items() if k not in found})
            by_value, by_name = {}, {}
            for key, value in found.items():
                if value in by_value:
                    raise TypeError(f"{name}: {key} repeats the value of {by_value[value]._name_}")
                member = kind.__new__(cls, value)
                member._name_, member._value_ = key, value
                type.__setattr__(cls, key, member)
                by_value[value] = by_name[key] = member
            type.__setattr__(cls, "_by_value_", by_value)
            type.__setattr__(cls, "_by_name_", by_name)
            return cls

        def __call__(cls, value):
            if type(value) is cls:
                return value
            try:
                return cls._by_value_[value]
            except (KeyError, TypeError):
                raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

        def __getitem__(cls, name):
            return cls._by_name_[name]

        def __iter__(cls):
            return iter(cls._by_value_.values())

        def __len__(cls):
            return len(cls._by_value_)

        def __contains__(cls, item):
            return type(item) is cls or item in cls._by_value_

        def __setattr__(cls, name, value):
            if name in cls.__dict__.get("_by_name_", ()):
                raise AttributeError(f"cannot reassign member {name!r} of {cls.__name__}")
            super().__setattr__(name, value)

    class _Member:
        """What every member has: its name and value, one identity for good."""

        @property
        def name(self):
            return self._name_

        @property
        def value(self):
            return self._value_

        def __repr__(self):
            return f"<{type(self).__name__}.{self._name_}: {self._value_!r}>"

        def __reduce_ex__(self, protocol):
            return type(self), (self._value_,)

        def __copy__(self):
            return self

        def __deepcopy__(self, memo):
            return self

    class Choice(_Member, str, metaclass=_Closed):
        """A member of a closed set that reads, prints and compares as its text value (``"node"``)."""

        _kind_ = str

        def __str__(self):
            return self._value_

        def __format__(self, spec):
            return format(self._value_, spec)

    class Numbered(_Member, int, metaclass=_Closed):
        """A member of a closed set of numbers (the kernel's)."""

        _kind_ = int

        def __str__(self):
            return str(self._value_)

        def __format__(self, spec):
            return format(self._value_, spec)


__all__ = ["Choice", "Numbered", "parse_choice"]


def parse_choice(kind: type[E], value: object, what: str, *, among: tuple[E, ...] | None = None) -> E:
    """The member of the closed set ``kind`` whose value is ``value`` (a member passes as itself).

    ``among`` narrows the accepted members. Anything else is a :class:`UsageError`
    naming ``what`` was asked and the accepted values: the one parser of every
    closed set numapin takes as text (modes, policies, memory modes).
    """
    accepted = tuple(kind) if among is None else among
    try:
        member = kind(value)
    except ValueError:
        member = None
    if member is None or member not in accepted:
        known = ", ".join(str(m.value) for m in accepted)
        raise UsageError(f"unknown {what} {quoted(value)} (expected one of: {known})", value=value)
    return member
