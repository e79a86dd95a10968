"""Closed sets: every choice numapin offers is a :class:`Choice`, and taken as text by one parser."""

from __future__ import annotations

import enum

from .errors import UsageError, quoted

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import TypeVar

    E = TypeVar("E", bound=enum.Enum)

__all__ = ["Choice", "parse_choice"]


class Choice(str, enum.Enum):
    """A member of a closed set that reads, prints and compares as its text value (``"node"``)."""

    def __str__(self) -> str:
        return str(self.value)


def parse_choice(kind: type[E], value: object, what: str, *, among: tuple[E, ...] | None = None) -> E:
    """The member of the enum ``kind`` whose value is ``value`` (a member passes as itself).

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
