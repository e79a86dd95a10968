"""``numapin doctor``: what in the job would undo or waste the pin, and the fix."""

from __future__ import annotations

import argparse

from ..base.errors import UsageError
from .common import add_pod_resources, add_root, add_target, bytes_arg, count_arg, machine_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..facts.dra import DraDevice

HELP = "what in the job would undo or waste the pin, and the fix"


def run(args: argparse.Namespace) -> int:
    from ..tools.doctor import diagnose

    if args.buffer is None and (args.hugepages or args.lock):
        raise UsageError("--hugepages and --lock say what a --buffer SIZE asks for: give --buffer too",
                         value=args.hugepages or "--lock")
    slices: tuple[DraDevice, ...] = ()
    if args.resource_slices is not None:
        from ..facts.dra import read_slices

        try:
            with open(args.resource_slices, "rb") as file:
                slices = read_slices(file.read((16 << 20) + 1))
        except OSError as exc:
            raise UsageError(f"--resource-slices {args.resource_slices}: {exc.strerror}",
                             value=args.resource_slices) from None
    with machine_root(args) as root:
        found = diagnose(gpu=args.gpu, rank=args.local_rank, mode=args.mode, reserve=args.reserve, root=root,
                         pid=args.pid, pod_resources=args.pod_resources or None, buffer=args.buffer,
                         hugepages=args.hugepages, lock=args.lock, resource_slices=slices)
    if args.json:
        import json

        print(json.dumps(found.as_dict(), indent=2))
    else:
        print(found.text())
    return found.exit_code


def arguments(doc: argparse.ArgumentParser) -> None:
    doc.description = ("Check the environment (this process's, or PID's) and the machine against the placement "
                       "numapin would make: launcher bindings, OpenMP binding, thread-pool sizes, NUMA balancing, "
                       "a cgroup that cuts the GPU's node, GPUs sharing a node, mixed GPU models. Each finding has "
                       "a stable id, a severity, what is seen, why it matters and the fix. Exit 0: no warning or "
                       "error; 1: findings; 2: bad input.")
    add_target(doc, mode_default=None)
    doc.add_argument("--pid", type=count_arg, metavar="PID",
                     help="check that process: its record of numapin's (a pin made inside it too), else its "
                          "environment's launcher rank and CUDA_VISIBLE_DEVICES; its mask and thread count")
    doc.add_argument("--reserve", type=count_arg, default=0, metavar="K",
                     help="judge the placement with K cores set aside for one latency-critical thread, as "
                          "numapin exec --reserve K makes it (interrupts on them are then found)")
    doc.add_argument("--buffer", type=bytes_arg, metavar="SIZE",
                     help="check a host buffer of SIZE (K, M, G, T) planned for the GPU: its node's free huge "
                          "pages or the kernel's THP settings (--hugepages) and the locked-memory limit (--lock)")
    doc.add_argument("--hugepages", choices=("2M", "1G", "thp"), help="with --buffer: huge pages of this size asked "
                     "for, or thp: transparent huge pages (the kernel's settings checked: enabled, defrag)")
    doc.add_argument("--lock", action="store_true", help="with --buffer: the buffer is to be locked (mlock)")
    doc.add_argument("--resource-slices", metavar="FILE",
                     help="Kubernetes' ResourceSlices as kubectl get resourceslices -o json writes them: each GPU's "
                          "NUMA node its DRA driver publishes (resource.kubernetes.io/numaNode, or the driver's "
                          "numaNode) checked against the kernel's")
    doc.add_argument("--json", action="store_true", help="one JSON object: placement and findings")
    add_pod_resources(doc)
    add_root(doc)
    doc.set_defaults(func=run)
