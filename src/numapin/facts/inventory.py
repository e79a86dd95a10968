"""GPU inventory and locality, and the GPU runtime's view of which GPUs a process sees.

One model of a GPU for every vendor (:mod:`numapin.facts.gpu`), and one module per vendor behind one table
(:data:`numapin.facts.glance.ACCELERATORS`: each vendor's PCI id, classes, driver and module). Here, what
every vendor shares: the PCI functions sysfs shows, sorted by vendor once; the vendor a process drives; and
the dispatch to the vendor's module (:mod:`numapin.facts.nvidia`, :mod:`numapin.facts.rocm` for AMD's,
:mod:`numapin.facts.gaudi` for Intel Gaudis), imported only where the machine shows its devices. Each such
module has the same three functions:

- ``read(topology, host, functions, warnings, *, nvml, scan)``: its devices of the PCI functions sysfs shows
  (``scan`` reads every function, where it must look further), as a :data:`numapin.facts.gpu.Reading`;
- ``visible(gpus, environ, notes, nvml)``: which of them its runtime shows a process, in its order, and why
  its variables show fewer than they list;
- ``in_view(gpus, root)``: those a process whose root is ``root`` (a container's) may not use, and why.

Adding a vendor is its row in the table and its module.

A host with GPUs of two vendors: a process drives one vendor's (its runtime's),
``NUMAPIN_ACCELERATOR`` names which; unset, the vendor with more GPUs (an
accelerator host with a small display card of another make), and where both
have as many, no GPU is taken for the process: the choice would be a guess.
"""

from __future__ import annotations

import os

from ..base.environment import (
    ACCELERATOR,
)
from ..base.errors import UsageError, quoted
from ..base.frozen import Later, field, frozen, replace
from ..base.logger import log
from ..base.text import counted, plural
from . import pci as pci_address
from .glance import (
    ACCELERATORS,
    accelerator,
    shows_drivers,
)
from .gpu import (
    Gpu,
    HiddenGpu,
    NoGpuVisible,
    NvmlError,
    UnknownGpu,
    Vendor,
    VisibleGpu,
)
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = [
    "Gpu",
    "Inventory",
    "NoGpuVisible",
    "NvmlError",
    "UnknownGpu",
    "Vendor",
    "VisibleGpu",
    "in_view",
    "read_gpus",
    "visible_gpus",
]



@frozen
class Inventory:
    """Every GPU of the machine that the reading process may use: NVIDIA's in PCI order, AMD's in ROCm's order,
    Gaudis by module id; and those it may not (``hidden``: a container given some of the host's GPUs)."""

    gpus: tuple[Gpu, ...]
    nvml: str = "not used"
    warnings: tuple[str, ...] = ()
    _hidden: Later[tuple[HiddenGpu, ...]] = field(default_factory=lambda: Later(tuple))

    @property
    def hidden(self) -> tuple[HiddenGpu, ...]:
        """The GPUs of the machine the process may not use, and why. Where another driver holds one (vfio-pci,
        for a virtual machine), finding it means reading every PCI function: done on this first question,
        which a pin never asks."""
        return self._hidden.get()

    def by_pci(self, bus_id: str, partition: int | None = None) -> Gpu | None:
        wanted = pci_address.normalize(bus_id)
        return next((g for g in self.gpus if g.is_at(wanted, partition)), None)

    def of(self, vendor: Vendor) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor is vendor)

    @property
    def vendors(self) -> tuple[Vendor, ...]:
        return tuple(v for v in Vendor.every() if any(g.vendor is v for g in self.gpus))


# -- reading every vendor's devices ----------------------------------------


def _hex(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


_DEVICES = "sys/bus/pci/devices"


def _functions(host: Host, *, held: bool) -> dict[str, list[str]]:
    """The PCI functions (sysfs names) of each vendor's accelerators (:data:`numapin.facts.glance.ACCELERATORS`),
    and under ``""`` those of no ``vendor`` file (a capture may omit it: a vendor's reader may tell its own by
    other signs). ``held``: sysfs names each function's driver, and the accelerator drivers' own lists are all
    there is to read (the runtimes use no other function); else every function's vendor is read (a capture
    must be read so: it names no driver), on a GPU host hundreds, opened inside the folder held open, the class
    read only of an accelerator vendor's function."""
    found: dict[str, list[str]] = {name: [] for name in (*ACCELERATORS, "")}
    with host.folder(_DEVICES) as devices:
        if held:
            names = sorted({n for row in ACCELERATORS.values()
                            for n in host.listdir(f"sys/bus/pci/drivers/{row.driver}")})
        else:
            names = sorted(host.listdir(_DEVICES))
        for name in names:
            if not pci_address.split(name):
                continue
            vendor = _hex(host.read_in(devices, f"{name}/vendor"))
            which = "" if vendor is None and not held else accelerator(
                vendor, lambda: _hex(host.read_in(devices, f"{name}/class")))  # noqa: B023
            if which is not None:
                found[which].append(name)
    return found


def _reader(vendor: str) -> Any:
    """The module that reads ``vendor``'s devices (its row of the table names it), imported where it has some."""
    return __import__(ACCELERATORS[vendor].module, fromlist=["read"])


def read_gpus(topology: Topology, *, nvml: Any = None, journal: list[str] | None = None) -> Inventory:
    """The GPUs of the machine that ``topology`` was read from.

    ``nvml``: None = NVML, on the live machine when installed, only to fill what sysfs left untold
    (:func:`numapin.facts.nvidia.sysfs_gaps`): a pin where sysfs told everything never loads it (its import
    alone costs three interpreter starts, and the driver's initialisation more); True = NVML there, to check
    sysfs's answer too (``numapin show``); False = never; an object = that module (or a stand-in implementing
    the calls used), always.
    """
    host = Host(topology.root, journal)
    warnings: list[str] = []
    held = shows_drivers(host.root)
    found = _functions(host, held=held)
    scanned: list[dict[str, list[str]]] = [] if held else [found]

    def scan() -> dict[str, list[str]]:
        """Every PCI function by vendor, whatever driver holds it: read once, when a reader asks."""
        if not scanned:
            scanned.append(_functions(host, held=False))
        return scanned[0]

    gpus: list[Gpu] = []
    hidden: list[Callable[[], list[HiddenGpu]]] = []
    status = "not needed: sysfs told everything" if nvml is None else "not installed"
    for vendor in ACCELERATORS:
        # A vendor's reader is asked where sysfs shows its functions, or its driver shows itself loaded without
        # them (the table's folders: the NVIDIA driver's entries, which also claim functions a capture names no
        # vendor of; AMD's KFD topology); NVIDIA's also where the caller hands NVML, which is NVIDIA's own. Most
        # hosts import one reader, or none.
        if not (found[vendor] or any(host.listdir(folder) for folder in ACCELERATORS[vendor].signs)
                or (vendor == Vendor.NVIDIA.value and nvml is not None and nvml is not False)):
            continue
        usable, later, said = _reader(vendor).read(topology, host, found[vendor], warnings, nvml=nvml, scan=scan)
        gpus += usable
        hidden.append(later)
        status = said or status
    inventory = Inventory(tuple(gpus), status, tuple(warnings),
                          Later(lambda: tuple(h for later in hidden for h in later())))
    if journal is not None:
        inventory._hidden.get()  # now, while the journal is kept: a capture holds every file a question reads
    return inventory


def in_view(inventory: Inventory, root: str) -> Inventory:
    """``inventory`` as a process whose root is ``root`` sees it (another process's: ``/proc/PID/root``, a
    container's): the GPUs its device files and driver entries leave out move to ``hidden``, by the rules the
    machine's own reading applies (sysfs, the drivers' links among it, is the host's in every view). The
    other root is only listed and asked what exists, with the minors this reading found: its owner chose
    what is in it, and a file of it opened could be any device of the host (/proc/PID/root follows links)."""
    left = [h for vendor in inventory.vendors for h in _reader(vendor.value).in_view(inventory.of(vendor), root)]
    if not left:
        return inventory
    gone = {h.gpu for h in left}
    return replace(inventory, gpus=tuple(g for g in inventory.gpus if g not in gone),
                   _hidden=Later(lambda: (*inventory.hidden, *left)))


# -- which GPUs a process sees: its vendor's, by its vendor's rules ---------


@frozen
class _Resolution:
    visible: tuple[VisibleGpu, ...]
    notes: tuple[str, ...] = field(default=())
    cut: str | None = None
    """Why the visibility variables show fewer GPUs than they list (or none): the entry that ended one, or emptiness."""
    vendor: Vendor | None = None
    """Whose GPUs the process drives (None where a host of two vendors leaves it open)."""


def choose_vendor(inventory: Inventory, environ: Mapping[str, str]) -> tuple[Vendor | None, str | None]:
    """Whose GPUs a process with ``environ`` drives; ``(None, why)`` where that cannot be told."""
    named = environ.get(ACCELERATOR, "").strip().lower()
    if named:
        if named not in ACCELERATORS:
            raise UsageError(f"{ACCELERATOR}={quoted(named)}: name whose GPUs the process drives, one of "
                             + ", ".join(ACCELERATORS), value=named)
        return Vendor(named), None
    vendors = inventory.vendors
    if len(vendors) <= 1:
        return (vendors[0] if vendors else Vendor.NVIDIA), None
    # Variables only one vendor's runtime reads (its row's): set, they say the process drives that vendor's devices.
    hinted = [v for v in vendors if any(environ.get(name) is not None for name in ACCELERATORS[v].only)]
    if len(hinted) == 1:
        return hinted[0], None
    counts = {v: len(inventory.of(v)) for v in vendors}
    top = [v for v in vendors if counts[v] == max(counts.values())]
    if len(top) == 1:
        return top[0], None
    held = " and ".join(counted(counts[v], v.devices) for v in vendors)
    return None, (f"this host has {held}, as many of each: set {ACCELERATOR}=" + " or ".join(map(str, vendors))
                  + " to say whose this process drives")


def resolve_visible(
    inventory: Inventory, environ: Mapping[str, str], *, nvml: Any | None = None
) -> _Resolution:
    notes: list[str] = []
    vendor, undecided = choose_vendor(inventory, environ)
    if vendor is None:
        notes.append(str(undecided))
        return _Resolution((), tuple(notes), undecided)
    # Each vendor's rules live with its reader, imported where it has GPUs (NVIDIA's also where it has none: its
    # rules then say why CUDA_VISIBLE_DEVICES names none).
    shown, cut = _reader(vendor.value).visible(inventory.of(vendor), environ, notes, nvml)
    return _Resolution(tuple(VisibleGpu(i, g) for i, g in enumerate(shown)), tuple(notes), cut, vendor)


def visible_gpus(
    inventory: Inventory, environ: Mapping[str, str] | None = None, *, nvml: Any | None = None
) -> tuple[VisibleGpu, ...]:
    """The GPUs the GPU runtime shows this process, in its order (index = ``cuda:N``, or HIP's device N).

    Notes about the resolution (an entry that ends the list, an ambiguous
    device order) are logged once at warning level.
    """
    resolution = resolve_visible(inventory, os.environ if environ is None else environ, nvml=nvml)
    for note in resolution.notes:
        log.warning("%s", note)
    return resolution.visible


def select_gpu(visible: Sequence[VisibleGpu], index: int, *, found: int | None = None,
               cut: str | None = None) -> VisibleGpu:
    """The visible GPU ``index``; an UnknownGpu listing the visible GPUs otherwise.

    ``found`` (the GPUs of the machine) and ``cut`` (why CUDA_VISIBLE_DEVICES
    shows fewer) let the error name the exact cause rather than a general one.
    """
    if isinstance(index, bool) or not isinstance(index, int):  # "0" or True: the caller's mistake, whatever is visible
        raise UnknownGpu(f"a GPU is named by its index, an int (CUDA's logical index), not {quoted(index)}",
                         value=index)
    if not visible:
        if cut:
            raise NoGpuVisible(f"no GPU is visible to this process: {cut}")
        if found == 0:
            raise NoGpuVisible("no GPU is visible to this process: none found on this machine (numapin looks for "
                               "NVIDIA and AMD GPUs and Intel Gaudis on the PCI bus, under sys/bus/pci, and in "
                               "AMD's KFD topology)")
        raise NoGpuVisible("no GPU is visible to this process (none found, or its visibility variables hide them all)")
    if not 0 <= index < len(visible):
        listing = ", ".join(f"{v.index}: {v.gpu.where}" for v in visible)
        raise UnknownGpu(f"GPU {index!r} is not visible; visible {plural(len(visible), 'GPU is', 'GPUs are')} "
                         f"{listing}" + (f" ({cut})" if cut else ""), value=index)
    return visible[index]
