"""numapin.base.stop: a stop asked by a real signal, wherever in the main thread it lands, ends the wait at once;
handlers are put back, an ignored signal stays ignored. Each test in a forked child: handlers never leak."""

from __future__ import annotations

import gc
import os
import signal
import threading
import weakref

from child import in_child
from numapin.base.stop import Stop


def _landing_in_a_weakref_callback() -> dict[str, object]:
    # Where a signal handler's exception is printed and dropped: the exporter's old KeyboardInterrupt was lost
    # there (a thread's object collected as SIGTERM came), and its loop slept on.
    class Thing:
        pass

    with Stop.on("SIGTERM") as stop:
        thing = Thing()
        ref = weakref.ref(thing, lambda _: os.kill(os.getpid(), signal.SIGTERM))
        del thing
        gc.collect()
        asked = stop.wait(30)  # a loop's sleep after it: the byte written by the handler wakes it
        return {"gone": ref() is None, "asked": asked, "signal": stop.signal}


def test_a_sigterm_landing_where_exceptions_are_dropped_still_ends_the_wait() -> None:
    got = in_child(_landing_in_a_weakref_callback)
    assert got == {"gone": True, "asked": True, "signal": signal.SIGTERM}, got


def _asked_from_another_thread() -> dict[str, object]:
    before = signal.getsignal(signal.SIGTERM)
    with Stop.on("SIGTERM") as stop:
        during = signal.getsignal(signal.SIGTERM)
        quiet = stop.wait(0.05)  # nothing asked: the wait ends at its time, unasked
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()
        asked = stop.wait(30)
    return {"quiet": quiet, "asked": asked, "set": stop.is_set(), "replaced": during is not before,
            "restored": signal.getsignal(signal.SIGTERM) is before}


def test_a_signal_sent_by_another_thread_wakes_the_waiting_loop_and_the_handler_is_put_back() -> None:
    got = in_child(_asked_from_another_thread)
    assert got == {"quiet": False, "asked": True, "set": True, "replaced": True, "restored": True}, got


def _ignored() -> dict[str, object]:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell's background job
    with Stop.on("SIGINT") as stop:
        during = signal.getsignal(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        asked = stop.wait(0.1)
    after = signal.getsignal(signal.SIGINT)
    return {"during": during == signal.SIG_IGN, "asked": asked, "after": after == signal.SIG_IGN}


def test_an_ignored_signal_stays_ignored() -> None:
    got = in_child(_ignored)
    assert got == {"during": True, "asked": False, "after": True}, got


def _set_after_close() -> dict[str, object]:
    stop = Stop()
    number = stop.fileno()
    stop.close()
    # The closed pipe's numbers are taken by the next files opened: a late set() must not write into them.
    read, write = os.pipe()
    os.set_blocking(read, False)
    stop.set()
    try:
        leaked = os.read(read, 16)
    except BlockingIOError:
        leaked = b""
    reused = number in (read, write)
    os.close(read)
    os.close(write)
    return {"reused": reused, "leaked": leaked, "set": stop.is_set(), "waits": stop.wait(30)}


def test_a_closed_stop_writes_into_no_file_that_took_its_descriptors() -> None:
    got = in_child(_set_after_close)
    assert got == {"reused": True, "leaked": b"", "set": True, "waits": True}, got
