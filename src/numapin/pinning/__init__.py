"""The stateful part: the decision, the process's pin state, the walk over every thread, memory,
leases, results, the request a pin carries out, and the per-process record other tools read and judge."""
