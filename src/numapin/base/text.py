"""Plain-text rendering shared by results and the command line."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Written", "counted", "decimal", "format_size", "json_text", "json_value", "markup", "plural", "printable",
           "table"]


_DIGITS = frozenset("0123456789")


def decimal(text: str | None) -> int | None:
    """``text`` as an integer, written as the kernel and launchers write one (ASCII digits, an optional
    minus sign, at most twenty digits: what a 64-bit number takes), or None: the one integer parser of numapin.

    ``int()`` alone would take superscripts and other scripts' digits, and
    refuse or crawl through thousands of digits.
    """
    if text is None:
        return None
    text = text.strip()
    digits = text[1:] if text.startswith("-") else text
    return int(text) if 0 < len(digits) <= 20 and _DIGITS.issuperset(digits) else None


def json_value(data: str | bytes) -> object:
    """The value a JSON document holds, or None when it holds none: damaged, or nested deep enough to exhaust
    the parser (RecursionError, which is no ValueError). The one reader of JSON from files others write."""
    import json  # imported here: its decoder imports re, which a worker pinned at start-up would pay for

    try:
        found: object = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return found


def plural(count: int, word: str, words: str | None = None) -> str:
    """``word`` for one, ``words`` (or ``word`` + "s") for any other count: "node 1", "nodes 0-1"."""
    return word if count == 1 else (words or f"{word}s")


def counted(count: int, word: str, words: str | None = None) -> str:
    """The count and its noun: "1 thread", "2 threads", "0 CPUs"."""
    return f"{count} {plural(count, word, words)}"


def format_size(value: int | None) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 GiB``; "unknown" for None."""
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - the loop always returns


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on, or that cannot be written out, escaped:
    a process name holding a line feed, an escape sequence or a lone surrogate stays one cell."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def markup(text: str) -> str:
    """``text`` for an SVG or HTML page: escaped for markup (``&``, ``<``, ``>``, quotes), and every character
    XML 1.0 forbids (C0 controls but tab and line feed, lone surrogates, U+FFFE and U+FFFF), like every other
    one a terminal would act on, written out as :func:`printable` writes it; tab and line feed stay (a table in
    a ``pre``). A process named ``\\x1b[31m`` stays one visible label, and the page stays well-formed: a
    browser draws nothing after one bad character."""
    from html import escape

    if not text.isprintable():
        text = "".join(c if c.isprintable() or c in "\t\n" else repr(c)[1:-1] for c in text)
    return escape(text)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks; every cell printable."""
    cells = [[printable(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _json_string(text: str) -> str:
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = []
    for c in text:
        if c in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[c])
        elif " " <= c <= "~":
            out.append(c)
        elif (n := ord(c)) > 0xFFFF:  # outside the basic plane: a surrogate pair, as JSON writes it
            n -= 0x10000
            out.append(f"\\u{0xD800 | n >> 10:04x}\\u{0xDC00 | n & 0x3FF:04x}")
        else:
            out.append(f"\\u{n:04x}")
    return '"' + "".join(out) + '"'


class Written(str):
    """JSON text already written (by :func:`json_text`): put in as it is where it is a value of another document,
    so that a document of many parts that do not change (a process's declared buffers) re-serialises none."""

    __slots__ = ()


def json_text(value: object) -> str:
    """``value`` (dicts with string keys, lists, tuples, strings, integers, finite floats, booleans, None) as
    ``json.dumps(value, sort_keys=True)`` writes it, without importing json: its decoder imports ``re``, and
    a worker pinned at start-up would pay both to write its record. TypeError for anything else."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, Written):
        return str.__str__(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError(f"{value!r} has no JSON spelling numapin writes")
        return float.__repr__(value)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("JSON object keys must be strings")
        return "{" + ", ".join(f"{_json_string(k)}: {json_text(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} is not JSON")
