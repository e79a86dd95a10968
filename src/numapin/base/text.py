"""Plain-text rendering shared by results and the command line."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["counted", "decimal", "format_size", "plural", "table"]


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


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks; every cell printable."""
    cells = [[printable(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
