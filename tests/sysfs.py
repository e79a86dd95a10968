"""PCI functions added to a machine root the way the kernel shows them, for tests that put a device of their own
beside a synthetic machine's: the function's folder and files, its link in ``sys/bus/pci/devices`` and, where the
root says which driver holds each function (as the live sysfs and the synthetic machines do), the driver's links
both ways."""

from __future__ import annotations

import os
from pathlib import Path


def add_function(root: Path, bdf: str, files: dict[str, str], driver: str | None,
                 parent: str = "sys/devices/pci0000:f0/0000:f0:01.0") -> Path:
    """The function ``bdf`` under ``parent`` with ``files``, held by ``driver`` (None: by no driver)."""
    device = root / parent / bdf
    device.mkdir(parents=True)
    for name, text in files.items():
        (device / name).write_text(text + "\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    (root / "sys/bus/pci/devices" / bdf).symlink_to(os.path.relpath(device, root / "sys/bus/pci/devices"))
    drivers = root / "sys/bus/pci/drivers"
    if driver is not None:
        (drivers / driver).mkdir(parents=True, exist_ok=True)
        (drivers / driver / bdf).symlink_to(os.path.relpath(device, drivers / driver))
        (device / "driver").symlink_to(os.path.relpath(drivers / driver, device))
    return device
