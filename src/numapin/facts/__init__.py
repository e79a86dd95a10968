"""What the machine is, read through one root and frozen: the host's files, ``/proc`` and PCI readers,
the cgroup, the topology, accelerators, CPU kinds, NICs and interrupts, synthetic machines, and a
process's view of them (its visible GPUs). Nothing here changes the kernel's state."""
