"""PCI addresses, as the kernel, NVML and ``CUDA_VISIBLE_DEVICES`` write them: the one reader of them.

No regular expressions: ``re`` costs every interpreter of a job its import at start-up.
"""

from __future__ import annotations

from ..cpuset import hex_word

__all__ = ["is_function", "is_host_bridge", "normalize", "split"]

_HEX = frozenset("0123456789abcdef")


def _hex(text: str, low: int, high: int) -> bool:
    return low <= len(text) <= high and _HEX.issuperset(text)


def split(bus_id: str) -> tuple[str, str, str, str] | None:
    """``[domain:]bus:device.function`` in any spelling (NVML's 8-digit domain, upper case, no domain), split
    into its hex parts; None when it is not one."""
    parts = bus_id.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    device, dot, function = rest.partition(".")
    if not (dot and hex_word(domain) and hex_word(bus, 2) and hex_word(device, 2)
            and len(function) == 1 and function in "01234567"):
        return None
    return domain, bus, device, function


def normalize(bus_id: str) -> str:
    """``0000:18:00.0`` (lower case, 4-digit domain) for any spelling of a PCI bus id; ValueError otherwise."""
    parts = split(bus_id.strip())
    if parts is None:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, dev, fn = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def is_function(name: str) -> bool:
    """``0000:05:00.0``: a PCI function's folder as sysfs names it (domain, bus, device, function)."""
    domain, _, rest = name.partition(":")
    bus, _, rest = rest.partition(":")
    device, dot, function = rest.partition(".")
    return (_hex(domain, 4, 8) and _hex(bus, 2, 2) and _hex(device, 2, 2) and dot == "."
            and len(function) == 1 and function in "01234567")


def is_host_bridge(name: str) -> bool:
    """``pci0000:00``: a host bridge's folder under ``sys/devices``."""
    domain, colon, bus = name[3:].partition(":")
    return name.startswith("pci") and colon == ":" and _hex(domain, 4, 8) and _hex(bus, 2, 2)
