"""The exporter's HTTP server: GET and HEAD of a few paths, for any client that connects, hostile ones too.

The exporter runs as root on every node and answers whoever reaches its port, so no client may make it
spend more than a bounded share of anything:

- A connection that has not sent its whole request costs one descriptor and no thread: requests are
  read by one loop (``selectors``), each within :data:`REQUEST_SECONDS` of its arrival, and at most
  :data:`MAX_WAITING` wait at once; a new connection past that closes the one that waited longest (a
  scraper sends its request at once, so idle connections cannot crowd it out).
- A request is answered in a thread of its own, at most :data:`MAX_ANSWERING` at once and at most
  :data:`PER_CLIENT` for one client address: a client that keeps many requests in flight never holds every
  slot. Requests past that wait their turn in arrival order (a scraper's is answered after those before it,
  each round sharing one scan: :class:`numapin.tools.exporter.Exporter`), up to :data:`MAX_WAITING` of them and
  :data:`QUEUE_SECONDS` each; then ``503``. A client that does not take its answer within
  :data:`ANSWER_SECONDS` is dropped.
- A client that closes its side once its request is sent (``shutdown(SHUT_WR)``: ``nc -N``, some proxies) is
  still answered: only a reset says it is gone.
- When the process runs out of descriptors, ``accept`` fails (EMFILE): the connection that waited longest
  is closed, or the loop pauses, never spinning on a listening socket it cannot empty.
- A client that goes away mid-answer (a scraper's own timeout) is one debug line, never a traceback.

HTTP/1.0 semantics: one request per connection, then closed.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections import deque

from ..base.logger import log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..base.stop import Stop

__all__ = ["ANSWER_SECONDS", "MAX_ANSWERING", "MAX_REQUEST", "MAX_WAITING", "PER_CLIENT", "QUEUE_SECONDS",
           "REQUEST_SECONDS", "Answer", "serve"]

#: Connections held at once while their requests are read.
MAX_WAITING = 64
#: Requests answered at once (the exporter's scans run one at a time anyway, shared by those that wait on one).
MAX_ANSWERING = 8
#: Requests of one client address answered at once: the other slots stay for other clients (the scraper).
PER_CLIENT = MAX_ANSWERING // 2
#: Seconds a whole request may wait for a slot before it is answered ``503``.
QUEUE_SECONDS = 10.0
#: Seconds a client has, from connecting, to send its request line and headers.
REQUEST_SECONDS = 5.0
#: Seconds a client has to take its answer.
ANSWER_SECONDS = 30.0
#: The longest request line, and the most bytes of request line and headers together.
MAX_LINE = 8 * 1024
MAX_REQUEST = 32 * 1024
#: How long the loop pauses when the process has no descriptor left for a new connection.
_OUT_OF_FILES_PAUSE = 0.1
#: Descriptors kept free of waiting connections, for the scans (a folder and a file or two at a time) and the
#: answers under way: connections waiting never take the last of the process's descriptors.
_RESERVED_FILES = 16 + MAX_ANSWERING

#: What the selector holds for the stop's descriptor.
_STOP = object()

#: An answer: status code, content type, body; and whether to send its body (None for HEAD).
Answer = tuple[int, str, bytes]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 414: "URI Too Long",
            431: "Request Header Fields Too Large", 501: "Not Implemented", 503: "Service Unavailable"}
_TEXT = "text/plain; charset=utf-8"


class _Waiting:
    """A connection whose request is being read, or, read whole (``request``), waits for its turn."""

    __slots__ = ("address", "buffer", "client", "deadline", "request", "sock")

    def __init__(self, sock: socket.socket, address: object) -> None:
        self.sock = sock
        self.address = _shown(address)
        self.client = str(address[0]) if isinstance(address, tuple) and address else self.address
        self.buffer = bytearray()
        self.deadline = time.monotonic() + REQUEST_SECONDS
        self.request: tuple[str, str, dict[str, str]] | None = None


def serve(listener: socket.socket, answer: Callable[[str, Mapping[str, str]], Answer],
          stopped: Stop | None = None) -> None:
    """Accept and answer on ``listener`` until ``stopped`` is set (or forever); ``answer(path, headers)`` gives
    a GET's answer (headers by lower-case name). The loop sleeps in ``select`` with the stop's descriptor among
    its sockets: a stop asked ends it at once, and nothing wakes it otherwise."""
    loop = _Loop(listener, answer, stopped)
    try:
        while stopped is None or not stopped.is_set():
            loop.once()
    finally:
        loop.close()


class _Loop:
    def __init__(self, listener: socket.socket, answer: Callable[[str, Mapping[str, str]], Answer],
                 stopped: Stop | None = None) -> None:
        listener.setblocking(False)
        self.listener = listener
        self.answer = answer
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.waiting: dict[socket.socket, _Waiting] = {}  # in order of arrival: the longest waiting first
        self.queue: deque[_Waiting] = deque()  # whole requests waiting for a slot, in order of arrival
        self.answering: dict[str, int] = {}  # answers under way, by client address
        self.lock = threading.Lock()
        # An answer's end wakes the loop, which starts the next queued one: a byte on this pair of sockets.
        self.wake, self.woken = socket.socketpair()
        self.woken.setblocking(False)
        self.selector.register(self.woken, selectors.EVENT_READ, self.woken)
        if stopped is not None:  # readable once asked: select() returns, and serve() looks at the flag
            self.selector.register(stopped.fileno(), selectors.EVENT_READ, _STOP)
        self.most_waiting = min(MAX_WAITING, max(1, _free_files() - _RESERVED_FILES))

    def once(self) -> None:
        """Wait for something to do (a connection, a request's bytes, an answer's end, a deadline, the stop) and
        do it."""
        now = time.monotonic()
        held = [*self.waiting.values(), *self.queue]
        timeout = max(0.0, min(w.deadline for w in held) - now) if held else None
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                self._accept()
            elif key.data is _STOP:
                return
            elif key.data is self.woken:
                try:
                    self.woken.recv(4096)
                except BlockingIOError:
                    pass
            else:
                self._read(key.data)
        now = time.monotonic()
        for late in [w for w in self.waiting.values() if w.deadline <= now]:
            log.debug("exporter: %s sent no whole request within %.0f s: closed", late.address, REQUEST_SECONDS)
            self._drop(late)
        while self.queue and self.queue[0].deadline <= now:  # in arrival order: the first is the oldest
            late = self.queue.popleft()
            log.debug("exporter: %s waited %.0f s for a slot: 503", late.address, QUEUE_SECONDS)
            _send_quickly(late.sock, 503, "busy: try again\n", "Retry-After: 1\r\n")
        self._dispatch()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # No descriptor for it: free the longest-waiting one, or pause; the kernel keeps the rest
                    # in its backlog. Never a loop on a listening socket that stays readable.
                    log.debug("exporter: accept: %s", exc.strerror)
                    if self.waiting:
                        self._drop(next(iter(self.waiting.values())))
                    else:
                        time.sleep(_OUT_OF_FILES_PAUSE)
                    return
                log.debug("exporter: accept: %s", exc)  # a connection reset before it was taken
                return
            if len(self.waiting) >= self.most_waiting:
                self._drop(next(iter(self.waiting.values())))
            sock.setblocking(False)
            waiting = _Waiting(sock, address)
            self.waiting[sock] = waiting
            self.selector.register(sock, selectors.EVENT_READ, waiting)

    def _read(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError as exc:
            log.debug("exporter: %s: %s", waiting.address, exc)
            self._drop(waiting)
            return
        if not data:
            self._drop(waiting)
            return
        waiting.buffer += data
        end = _end_of_head(waiting.buffer)
        if end < 0:
            line_end = waiting.buffer.find(b"\n")
            if (line_end < 0 and len(waiting.buffer) > MAX_LINE) or line_end > MAX_LINE:
                self._refuse(waiting, 414, "request line too long\n")
            elif len(waiting.buffer) > MAX_REQUEST:
                self._refuse(waiting, 431, "request headers too large\n")
            return
        self._forget(waiting)
        waiting.request = _parse(bytes(waiting.buffer[:end]))
        if waiting.request is None:
            _send_quickly(waiting.sock, 400, "bad request\n")
            return
        if len(self.queue) >= self.most_waiting:
            log.debug("exporter: %s: %d requests wait already: 503", waiting.address, len(self.queue))
            _send_quickly(waiting.sock, 503, "busy: try again\n", "Retry-After: 1\r\n")
            return
        waiting.deadline = time.monotonic() + QUEUE_SECONDS
        self.queue.append(waiting)

    def _dispatch(self) -> None:
        """Start the queued requests that have a slot: in order of arrival, each client's within its share."""
        with self.lock:
            busy = sum(self.answering.values())
            for waiting in list(self.queue):
                if busy >= MAX_ANSWERING:
                    return
                if waiting.request is None or self.answering.get(waiting.client, 0) >= PER_CLIENT:
                    continue  # this client has its share under way: the next client's turn
                self.queue.remove(waiting)
                self.answering[waiting.client] = self.answering.get(waiting.client, 0) + 1
                busy += 1
                threading.Thread(target=self._answer, args=(waiting, *waiting.request),
                                 name="numapin-exporter-answer", daemon=True).start()

    def _answer(self, waiting: _Waiting, method: str, target: str, headers: dict[str, str]) -> None:
        sock = waiting.sock
        try:
            if _gone(sock):  # a scraper past its own timeout reset the connection: no scan for nobody
                log.debug("exporter: %s went away before its answer", waiting.address)
                return
            if method not in ("GET", "HEAD"):
                code, kind, body = 501, _TEXT, b"only GET and HEAD\n"
            else:
                code, kind, body = self.answer(target.partition("?")[0], headers)
            zipped = code == 200 and "gzip" in headers.get("accept-encoding", "") and len(body) > 1024
            if zipped:
                import gzip

                body = gzip.compress(body, compresslevel=1)  # Prometheus asks for it; level 1 is cheap and ample
            head = (f"HTTP/1.0 {code} {_REASONS.get(code, '')}\r\nServer: numapin-exporter\r\n"
                    f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                    + ("Content-Encoding: gzip\r\n" if zipped else "") + "Connection: close\r\n\r\n")
            sock.setblocking(True)
            sock.settimeout(ANSWER_SECONDS)
            sock.sendall(head.encode() + (b"" if method == "HEAD" else body))
            log.debug("exporter: %s %s %s: %d", waiting.address, method, target[:80], code)
        except OSError as exc:  # the client went away (a scraper's timeout), or took too long to read
            log.debug("exporter: %s: answer not delivered: %s", waiting.address, exc)
        except Exception as exc:  # a fault of numapin's: one line, the connection closed, the exporter serving on
            log.warning("exporter: %s: %s %s failed: %r", waiting.address, method, target[:80], exc)
        finally:
            _close(sock)
            with self.lock:
                left = self.answering.pop(waiting.client, 1) - 1
                if left:
                    self.answering[waiting.client] = left
            try:
                self.wake.send(b"x")  # the loop starts the next queued request
            except OSError:
                pass

    def close(self) -> None:
        """Close every connection still waiting or queued, and the loop's own sockets (answers under way end by
        themselves)."""
        for waiting in [*self.waiting.values(), *self.queue]:
            self._drop(waiting)
        self.queue.clear()
        self.selector.close()
        self.wake.close()
        self.woken.close()

    def _refuse(self, waiting: _Waiting, code: int, text: str) -> None:
        self._forget(waiting)
        _send_quickly(waiting.sock, code, text)

    def _forget(self, waiting: _Waiting) -> None:
        self.waiting.pop(waiting.sock, None)
        try:
            self.selector.unregister(waiting.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, waiting: _Waiting) -> None:
        self._forget(waiting)
        _close(waiting.sock)


def _free_files() -> int:
    """Descriptors this process may still open (its soft limit less those open now)."""
    import os
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 0
    return (1 << 20 if soft == resource.RLIM_INFINITY else soft) - used


def _gone(sock: socket.socket) -> bool:
    """Whether the client reset the connection (what it sent past its request is left unread). A client that
    closed its side (an end of file here) may still be reading: ``shutdown(SHUT_WR)`` after a request is how
    ``nc -N`` and some proxies say they have sent it all, and they are answered."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


def _end_of_head(buffer: bytearray) -> int:
    """Where the request's line and headers end (the blank line included), or -1 while they have not."""
    for blank in (b"\r\n\r\n", b"\n\n"):
        at = buffer.find(blank)
        if at >= 0:
            return at + len(blank)
    return -1


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | None:
    """``(method, target, headers)`` of a request's head, or None when it is none."""
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    words = lines[0].split(" ")
    if len(words) != 3 or not words[2].startswith("HTTP/") or not words[0].isalpha() or not words[1]:
        return None
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip():
            headers[name.strip().lower()] = value.strip()
    return words[0], words[1], headers


def _send_quickly(sock: socket.socket, code: int, text: str, extra: str = "") -> None:
    """A short answer written without waiting (what does not fit the socket's buffer is lost), then closed."""
    body = text.encode()
    try:
        sock.send((f"HTTP/1.0 {code} {_REASONS[code]}\r\nContent-Type: {_TEXT}\r\nContent-Length: {len(body)}\r\n"
                   f"{extra}Connection: close\r\n\r\n").encode() + body)
    except OSError:
        pass
    _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _shown(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address)
