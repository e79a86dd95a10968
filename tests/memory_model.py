"""An in-memory model of the kernel's NUMA memory calls, for refusals a one-node machine cannot make.

It implements numapin's MemoryKernel interface. The real-syscall tests (and the
guest tier, on real nodes) stay the reference; the model adds refusals on
demand: a policy the kernel rejects (EINVAL, EPERM), a read-back that differs.
"""

from __future__ import annotations

import errno

from numapin.cpuset import CpuSet
from numapin.kernel.mempolicy import KernelMemoryPolicy


class ModelMemory:
    def __init__(self, nodes: CpuSet) -> None:
        self.nodes = nodes
        self.policy: tuple[KernelMemoryPolicy, CpuSet] = (KernelMemoryPolicy.DEFAULT, CpuSet())
        self.refuse: dict[KernelMemoryPolicy, int] = {}  # policy -> errno for set_mempolicy
        self.report: tuple[KernelMemoryPolicy, CpuSet] | None = None  # what get_mempolicy says instead of the truth
        self.unmovable = 0  # pages migrate_pages cannot move
        self.calls: list[str] = []

    def get_mempolicy(self) -> tuple[KernelMemoryPolicy, CpuSet]:
        return self.report or self.policy

    def set_mempolicy(self, policy: KernelMemoryPolicy, nodes: CpuSet) -> None:
        self.calls.append(f"set {policy.name} {nodes}")
        if policy in self.refuse:
            raise OSError(self.refuse[policy], "refused by the model")
        if not nodes <= self.nodes:
            raise OSError(errno.EINVAL, "no such node")
        self.policy = (policy, nodes if policy is not KernelMemoryPolicy.PREFERRED else CpuSet([nodes.first()]))

    def migrate_pages(self, pid: int, from_nodes: CpuSet, to_nodes: CpuSet) -> int:
        self.calls.append(f"migrate {from_nodes} -> {to_nodes}")
        if not to_nodes <= self.nodes:
            raise OSError(errno.EINVAL, "no such node")
        return self.unmovable
