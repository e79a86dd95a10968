"""A progress bar on a terminal, one line rewritten in place; nothing at all where the output is no terminal (a
log, a pipe, CI), whose reader wants the result, not a line per step."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["Bar"]

#: The bar's width in characters.
_WIDTH = 30


class Bar:
    """``label [#####     ]  42% note``, on ``out`` when it is a terminal; :meth:`close` clears the line."""

    def __init__(self, out: TextIO | None, label: str) -> None:
        self.out = out if out is not None and out.isatty() else None
        self.label = label
        self._drawn = 0

    @property
    def shown(self) -> bool:
        return self.out is not None

    def update(self, done: float, note: str = "") -> None:
        """Draw ``done`` (0..1) and ``note``."""
        if self.out is None:
            return
        share = min(1.0, max(0.0, done))
        line = f"{self.label} [{'#' * int(_WIDTH * share):<{_WIDTH}}] {100 * share:3.0f}% {note}".rstrip()
        self.out.write("\r" + line + " " * max(0, self._drawn - len(line)))
        self.out.flush()
        self._drawn = len(line)

    def close(self) -> None:
        if self.out is not None and self._drawn:
            self.out.write("\r" + " " * self._drawn + "\r")
            self.out.flush()
            self._drawn = 0
