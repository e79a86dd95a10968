"""numapin's one logger, ``logging.getLogger("numapin")``, with :mod:`logging` imported only when it speaks.

Importing :mod:`logging` costs a pin more than its syscalls (it pulls in
threading, traceback, string, weakref...). In a process where nothing has
imported it, nothing can have configured it either: no handler, no level, so
INFO and DEBUG records would be dropped, and only WARNING and above reach
anyone (through logging's last-resort handler, to stderr). So below WARNING
this proxy checks ``sys.modules`` and returns; otherwise it hands the record
to the real logger, exactly as a direct call would.

Messages carry no "numapin:" of their own: a formatter with ``%(name)s`` adds
it. Where nobody configured logging (no handler anywhere up the tree), logging's
last-resort handler would print the bare message, so there the proxy puts the
name in front itself: a warning on stderr always says whose it is, once.
"""

from __future__ import annotations

import sys

__all__ = ["NAME", "log"]

NAME = "numapin"

_WARNING = 30  # logging.WARNING, without importing logging to read it


class _Log:
    """The methods of :class:`logging.Logger` numapin uses, forwarded to ``logging.getLogger(NAME)``."""

    __slots__ = ()

    def _log(self, level: int, message: str, args: tuple[object, ...]) -> None:
        if level < _WARNING and "logging" not in sys.modules:
            return
        import logging

        logger = logging.getLogger(NAME)
        if not logger.hasHandlers():  # logging's last resort prints "%(message)s" alone
            message = f"{NAME}: {message}"
        # stacklevel 3: the record names numapin's caller of log.info(), not this proxy.
        logger.log(level, message, *args, stacklevel=3)

    def debug(self, message: str, *args: object) -> None:
        self._log(10, message, args)

    def info(self, message: str, *args: object) -> None:
        self._log(20, message, args)

    def warning(self, message: str, *args: object) -> None:
        self._log(_WARNING, message, args)


log = _Log()
