"""A request to stop, made by a signal or by another thread, that a long-running loop waits on.

A Python signal handler runs in the main thread between any two of its bytecodes: inside a lock's
critical section, or inside a weakref callback, where an exception it raises is printed and dropped.
Raising ``KeyboardInterrupt`` from a SIGTERM handler therefore failed, now and then, to end the
exporter (a thread's object collected at that moment swallowed it; the loop slept on in ``select``),
and ``Event.set()`` from a handler can wait forever on a lock its own thread holds. So the handler
here raises nothing and takes no lock: it sets a flag and writes one byte to a pipe, whose reading
end wakes whatever ``select`` the loop is in (:meth:`Stop.fileno`) or its :meth:`Stop.wait`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["STOPPING", "Stop"]

#: The signals that end a long-running command (exporter, keep) cleanly, exit 0: a service manager's SIGTERM, ^C.
STOPPING = ("SIGTERM", "SIGINT")


class Stop:
    """Set once, from a signal handler or any thread; :meth:`is_set` and :meth:`wait` for the loop that stops
    (``threading.Event``'s two questions, so a loop that asks only those takes either), :meth:`fileno` for a
    loop that sleeps in a ``select`` of its own."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._set = False
        self._closed = False
        #: The signal that asked, if one did.
        self.signal: int | None = None

    def set(self) -> None:
        self._set = True
        if self._closed:  # its descriptors' numbers may belong to another file by now
            return
        try:
            os.write(self._write, b"\0")
        except OSError:  # the pipe is full (set many times): the flag is set either way
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, seconds: float | None = None) -> bool:
        """Wait up to ``seconds`` (None: until set) for the stop; whether it was asked. Once closed, it waits no
        more (its descriptor's number may belong to another file)."""
        if not self._set and not self._closed:
            try:
                select.select([self._read], [], [], seconds)
            except (OSError, ValueError):  # closed meanwhile, by another thread
                pass
        return self._set

    def fileno(self) -> int:
        """A descriptor that becomes readable when the stop is asked (for a loop's own ``select``)."""
        return self._read

    def close(self) -> None:
        self._closed = True
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)

    @classmethod
    @contextlib.contextmanager
    def on(cls, *names: str) -> Iterator[Stop]:
        """A stop that the signals named (``"SIGTERM"``, ``"SIGINT"``) ask for while the block runs; their
        handlers are put back after it. A signal whose disposition is to be ignored (a shell's background job
        inherits SIGINT ignored; ``nohup``'s SIGHUP) stays ignored."""
        stop = cls()
        numbers = [getattr(signal, name) for name in names]
        previous = {number: signal.getsignal(number) for number in numbers}

        def asked(number: int, _frame: object) -> None:
            stop.signal = number
            stop.set()

        try:
            for number in numbers:
                if previous[number] not in (signal.SIG_IGN, None):
                    signal.signal(number, asked)
            yield stop
        finally:
            for number, handler in previous.items():
                if handler is not None:  # None: a handler set outside Python, which this one never replaced
                    signal.signal(number, handler)
            stop.close()
