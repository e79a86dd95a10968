"""The PCIe link of a device and of each bridge above it: the speed and width it trained at against the most it
can (``current_link_speed``/``width`` against ``max_link_speed``/``width`` in each function's sysfs folder).

A GPU whose link trained at x8 instead of x16, or at 16 GT/s where it can do 32, moves half the bytes any
placement can bring near it: numapin's work is then worth half. The kernel writes a speed as ``32.0 GT/s PCIe``
(``Unknown`` where the link is down); a width as a number.
"""

from __future__ import annotations

from ..base.frozen import frozen
from ..base.text import decimal
from .host import Host
from .network import pci_path

__all__ = ["Link", "links_above", "parse_speed"]


@frozen
class Link:
    """One PCI function's link as it trained (``speed`` in GT/s, ``width`` in lanes) and at most."""

    pci: str
    speed: float | None
    max_speed: float | None
    width: int | None
    max_width: int | None

    @property
    def narrow(self) -> bool:
        """Trained at fewer lanes than both ends allow."""
        return self.width is not None and self.max_width is not None and 0 < self.width < self.max_width

    @property
    def slow(self) -> bool:
        """Trained below its most speed (a GPU idling lowers its speed to save power: read it under load)."""
        return self.speed is not None and self.max_speed is not None and 0 < self.speed < self.max_speed

    def words(self) -> str:
        return (f"{self.pci}: x{self.width if self.width is not None else '?'} of "
                f"x{self.max_width if self.max_width is not None else '?'}, {_speed(self.speed)} of "
                f"{_speed(self.max_speed)}")


def _speed(value: float | None) -> str:
    return "? GT/s" if value is None else f"{value:g} GT/s"


def parse_speed(text: str | None) -> float | None:
    """GT/s from the kernel's ``32.0 GT/s PCIe`` (older kernels: ``8 GT/s``, ``2.5 GT/s``); None for anything else
    (``Unknown``, an absent file)."""
    if text is None:
        return None
    number, _, unit = text.strip().partition(" ")
    if not unit.startswith("GT/s") or not number or len(number) > 8:
        return None
    whole, dot, part = number.partition(".")
    if not whole.isascii() or not whole.isdigit() or (dot and not (part.isascii() and part.isdigit())):
        return None
    value = float(number)
    return value if 0 < value < 1024 else None


def links_above(host: Host, pci: str) -> tuple[Link, ...]:
    """The links from the device at ``pci`` up to its root port, the device's first, each once: a link is read at
    its lower end (the device, a switch's upstream port), whose port above shows the same link again. Functions
    without link files are passed over (a host bridge, a virtual machine's devices)."""
    path = pci_path(host, f"sys/bus/pci/devices/{pci}")
    if path is None:
        return ()
    found = []
    depth = len(path) - 1
    while depth >= 1:
        folder = "sys/devices/" + "/".join(path[:depth + 1])
        width = decimal((host.read(f"{folder}/current_link_width") or "").strip())
        most = decimal((host.read(f"{folder}/max_link_width") or "").strip())
        speed = parse_speed(host.read(f"{folder}/current_link_speed"))
        top = parse_speed(host.read(f"{folder}/max_link_speed"))
        if (width, most, speed, top) == (None, None, None, None):
            depth -= 1
            continue
        found.append(Link(path[depth], speed, top, width, most))
        depth -= 2  # the port above shows this same link
    return tuple(found)
