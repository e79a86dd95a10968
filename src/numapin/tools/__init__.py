"""What the command line runs: exec, numactl, doctor, the threads report, ps and Prometheus, snapshot, pictures."""
