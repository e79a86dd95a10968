"""The doctor's findings about the machine itself: NUMA balancing, the GPUs' nodes and order, the cgroup,
interrupts."""

from __future__ import annotations

from ...base.environment import CUDA_DEVICE_ORDER, RESERVED
from ...base.text import counted, decimal
from ...cpuset import CpuSet
from ...facts.gpu import Vendor
from ...facts.interrupts import Irq, device_irqs, running
from ...facts.network import assign
from ...placement.modes import Placement, PlacementMode, rank_share
from .case import Case, mode_of
from .finding import Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["interrupt_findings", "link_findings", "machine_findings", "node_findings", "reserved_cpus"]


def machine_findings(case: Case) -> list[Finding]:
    """What of the machine works against any placement on it: NUMA balancing, a cut GPU list, GPUs of no known
    node, GPU models CUDA would number out of PCI order."""
    facts, env = case.facts, case.env
    found = []
    balancing = decimal(case.host.read("proc/sys/kernel/numa_balancing"))
    if balancing:
        found.append(Finding(
            "numa-balancing", "warning", f"automatic NUMA balancing is on (kernel.numa_balancing={balancing})",
            "the kernel moves pages and tasks between nodes behind numapin's memory policy and pins, and its "
            "page-fault scanning stalls the threads it samples (16-31 ms stalls on a GPU dispatch path were "
            "measured with it on, deepseek-ai/DeepEP#624)",
            "sysctl kernel.numa_balancing=0 on hosts that place their workers (or bind memory: --memory bind)"))
    gpus = [v.gpu for v in facts.visible]
    if facts.cut and gpus:  # with none visible, no-placement says it
        runtime = "CUDA" if facts.vendor is Vendor.NVIDIA else "ROCm"
        found.append(Finding(
            "cuda-visible-devices", "warning", facts.cut,
            f"{runtime} shows this process {counted(len(gpus), 'GPU')} of the {len(facts.inventory.gpus)} found: "
            f"the entries after it are ignored, by {runtime} as by numapin",
            f"correct or remove that entry of {facts.cut.split()[0]}"))
    # The firmware's answer itself: numapin infers a node from the local CPUs when it says -1.
    unknown = [g for g in gpus if g.node is None or (g.firmware_node or 0) < 0]
    if unknown:
        guessed = ", ".join(f"{g.pci} (taken as node {g.node}, from its local CPUs)" if g.node is not None
                            else f"{g.pci} (no node)" for g in unknown)
        found.append(Finding(
            "gpu-node-unknown", "warning", f"the firmware reports NUMA node -1 for GPU(s) {guessed}",
            "numapin can only go by the GPU's local CPU list, which may span nodes or be the whole machine",
            "update the BIOS/firmware (ACPI _PXM of the PCIe root port), or pin with --cpus"))
    models = {g.model for g in gpus if g.model}
    order = env.get(CUDA_DEVICE_ORDER, "")
    if len(models) > 1 and order != "PCI_BUS_ID" and facts.vendor is Vendor.NVIDIA:
        found.append(Finding(
            "mixed-gpu-models", "warning", f"GPUs of {len(models)} models ({', '.join(sorted(models))}) and "
            f"{CUDA_DEVICE_ORDER}={order or 'unset'}",
            "CUDA then numbers the fastest GPU first, not in PCI order: cuda:N may not be the GPU numapin places",
            f"export {CUDA_DEVICE_ORDER}=PCI_BUS_ID"))
    return found


def node_findings(case: Case) -> list[Finding]:
    """What of the GPU's node the placement cannot have: CPUs or memory the cgroup leaves out, a node shared by
    several GPUs' ranks."""
    facts, placement, t = case.facts, case.placement, case.facts.topology
    if placement is None or placement.node is None:
        return []
    found = []
    gpus = [v.gpu for v in facts.visible]
    node = next((n for n in t.nodes if n.id == placement.node), None)
    if node is not None and node.cpus - t.allowed:
        severity = "error" if not node.cpus & t.allowed else "warning"
        found.append(Finding(
            "cgroup-cuts-node", severity, f"the cgroup cpuset {t.cgroup.cpus} holds {len(node.cpus & t.allowed)} "
            f"of the {len(node.cpus)} CPUs of GPU {placement.gpu}'s node {node.id}",
            "the worker gets only part of its node (or none of it)",
            "give the container the whole node (docker --cpuset-cpus, Kubernetes CPU manager static policy)"))
    gpu_mems = next((g.memory_nodes for g in gpus if g.pci == placement.pci), CpuSet())
    if gpu_mems and not gpu_mems <= t.allowed_mems and t.cgroup.mems is not None:
        found.append(Finding(
            "cgroup-excludes-memory", "error", f"the cgroup allows memory on node(s) {t.cgroup.mems}, not "
            f"GPU {placement.gpu}'s {gpu_mems}",
            "the worker's memory cannot live on its GPU's node: every host-to-device copy crosses the interconnect",
            "allow the node in the container's cpuset.mems"))
    sharing = [g.pci for g in gpus if g.node == placement.node]
    if str(mode_of(case)) == PlacementMode.NODE.value and len(sharing) > 1:
        # Information, not a warning: node is the default, as PyTorch's own binding recommends it ("if in doubt")
        # and as TensorRT-LLM's, NeMo's and vLLM's binders place (each GPU's whole node); exclusive is a choice to
        # measure, not a fix of a mistake.
        _, share = rank_share(facts, placement)
        found.append(Finding(
            "shared-node", "info", f"{len(sharing)} visible GPUs on node {placement.node} share its "
            f"{len(placement.workers)} CPUs (mode node, the default): each rank's share is {share}",
            "each rank's threads may run on all of them: numapin exec sizes each one's thread pools to its share, "
            "and the scheduler moves threads among the node's CPUs as load comes and goes",
            "where the ranks' CPU work contends (busy data loaders, CPU-side preprocessing), try --mode exclusive "
            "(each rank its own share of the node's cores) and measure both: numapin ab -- COMMAND"))
    return found


def link_findings(case: Case) -> list[Finding]:
    """``pcie-link-degraded``: a visible GPU's PCIe link (or a bridge's above it) trained below its most: fewer
    lanes is a warning; a lower speed alone is information, since a GPU at idle lowers its speed to save power."""
    from ...facts.link import links_above

    found = []
    for index, seen in enumerate(case.facts.visible):
        links = links_above(case.host, seen.gpu.pci)
        narrow = [link for link in links if link.narrow]
        slow = [link for link in links if link.slow]
        if not narrow and not slow:
            continue
        said = "; ".join(link.words() for link in narrow or slow)
        found.append(Finding(
            "pcie-link-degraded", "warning" if narrow else "info",
            f"GPU {index} ({seen.gpu.pci})'s PCIe link trained below its most: {said}",
            "host-to-device copies move at most what the narrowest link carries: half the lanes halve them, "
            "whatever numapin places" if narrow else
            "a lower speed halves copies where it lasts; a GPU at idle lowers its link's speed itself",
            "reseat the card or its riser, check the slot's lanes in the BIOS (bifurcation), then read "
            "current_link_width again" if narrow else
            "read it again while a copy runs (nvidia-smi -q -d PCIE: Link, Current); still low under load: the "
            "slot's generation in the BIOS, the riser, the card's seating"))
    return found


def reserved_cpus(env: Mapping[str, str], placement: Placement) -> CpuSet:
    """The hot thread's cores: the placement's, else those numapin exec --reserve exported to the process."""
    if placement.reserved:
        return placement.reserved
    return CpuSet.parse_or_none(env.get(RESERVED, "")) or CpuSet()


def interrupt_findings(case: Case) -> list[Finding]:
    """The GPU's and its NIC's interrupts: on another node, on the reserved cores; irqbalance moving them."""
    facts, host, placement = case.facts, case.host, case.placement
    if placement is None:
        return []
    reserved = reserved_cpus(case.env, placement)
    t = facts.topology
    gpu = next((v.gpu for v in facts.visible if v.gpu.is_at(placement.pci, placement.partition)), None)
    if gpu is None:
        return []
    devices = [(f"GPU {placement.gpu}", gpu.pci, gpu.node)]
    nic = assign(facts.network(), [(placement.rank, placement.pci)])[0]
    if nic is not None:
        devices.append((f"{nic.nic.name}, the NIC of GPU {placement.gpu}", nic.nic.pci, nic.nic.node))
    balancer = running(host, "irqbalance")
    again = (f"; irqbalance (PID {balancer}) would move them back: ban them "
             f"(its --banirq=N for each) or stop it") if balancer else ""
    found = []
    irqs_of = device_irqs(host, [pci for _, pci, _ in devices])
    for what, pci, node in devices:
        irqs = [i for i in irqs_of[pci] if i.delivered]
        if node is None or not irqs:
            continue
        home = t.node(node).cpus
        away = [i for i in irqs if not i.delivered & home]  # type: ignore[operator]
        if away:
            where = CpuSet.union(i.delivered for i in away if i.delivered)
            which = ("its one interrupt" if len(irqs) == 1 else f"all {len(irqs)} interrupts" if len(away) == len(irqs)
                     else f"{len(away)} of the {len(irqs)} interrupts")
            # Onto the node's CPUs but the reserved cores: the fix must not be what irq-on-reserved undoes.
            target = (home - reserved) or home
            found.append(Finding(
                "irq-other-node", "warning",
                f"{which} of {what} ({pci}) {'goes' if len(away) == 1 else 'go'} to CPUs {where}, off its node "
                f"{node} (IRQ {_numbers(away)})",
                "each completion then wakes a CPU of another node and its data crosses the interconnect, "
                "away from the worker's threads and memory",
                f"for N in {_numbers(away, ' ')}; do echo {target} > /proc/irq/$N/smp_affinity_list; done{again}"))
        hot = [i for i in irqs if reserved and i.delivered & reserved]  # type: ignore[operator]
        if hot:
            found.append(Finding(
                "irq-on-reserved", "warning",
                f"{counted(len(hot), 'interrupt')} of {what} ({pci}) go to the reserved cores {reserved} "
                f"(IRQ {_numbers(hot)})",
                "the latency-critical thread on those cores is interrupted by every one of them",
                f"move them to the worker's other CPUs: for N in {_numbers(hot, ' ')}; "
                f"do echo {placement.workers - reserved} > /proc/irq/$N/smp_affinity_list; done{again}"))
    if balancer:
        found.append(Finding(
            "irqbalance", "warning" if found or reserved else "info",
            f"irqbalance is running (PID {balancer})",
            "it moves interrupts between CPUs every few seconds, under the worker's feet: onto its reserved cores, "
            "or its GPU's and NIC's onto another node",
            "ban the GPU's and NIC's interrupts and the reserved cores (IRQBALANCE_BANNED_CPULIST, --banirq), "
            "or stop it where interrupt affinities are set by hand"))
    return found


def _numbers(irqs: list[Irq], sep: str = ",") -> str:
    shown = [str(i.number) for i in irqs[:16]]
    return sep.join(shown) + (f"{sep}..." if len(irqs) > 16 else "")


#: Slurm's --cpu-bind types that name CPUs or nodes per task, and those that let Slurm choose.
