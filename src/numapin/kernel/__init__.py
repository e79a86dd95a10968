"""The only code that changes the kernel's state: per-thread affinity and memory-policy syscalls,
where pages live, and the thread pools of loaded libraries."""
