"""The environment variables numapin reads and sets, each named once.

Pure names, no reading: the modules that read a variable take an ``environ``
mapping, so tests and ``numapin exec`` can hand them any environment. (No ``from __future__`` import:
the start-up hook of every Python process reads these names, and that module's import is a cost of its own.)
"""

__all__ = [
    "ACCELERATOR",
    "APPLIED",
    "AUTOPIN",
    "AUTOPIN_OPTIONS",
    "CUDA_DEVICE_ORDER",
    "CUDA_VISIBLE_DEVICES",
    "FSROOT",
    "GPU_VISIBILITY",
    "HABANA_VISIBLE_MODULES",
    "HIP_VISIBLE_DEVICES",
    "HLS_MODULE_ID",
    "KEEP",
    "LAUNCHER_BINDING",
    "LOCAL_RANK_VARIABLES",
    "NIC_VARIABLES",
    "OWNED",
    "PATCH",
    "PRIORITY_CORES",
    "RANK_MAP",
    "RESERVED",
    "ROCR_VISIBLE_DEVICES",
    "RUNTIME_DIR",
    "THREAD_POOLS",
    "TLLM_AFFINITY",
]

#: A folder standing in for ``/`` when reading ``sys/`` and ``proc/`` facts.
FSROOT = "NUMAPIN_FSROOT"
#: Set by ``numapin exec``: the mask it applied (numapin's own while the live mask equals it).
APPLIED = "NUMAPIN_APPLIED"
#: Set by ``numapin exec --reserve K``: the CPUs kept for the latency-critical thread.
RESERVED = "NUMAPIN_RESERVED"
#: ``r0,r1,...``: local rank i drives logical GPU r_i.
RANK_MAP = "NUMAPIN_RANK_MAP"
#: ``pct``: CPU kinds also from the published Priority Core Turbo layouts (numapin.facts.kinds.PCT_SKUS).
PRIORITY_CORES = "NUMAPIN_PRIORITY_CORES"
#: ``nvidia``, ``amd`` or ``gaudi``: whose GPUs a process of a host with both drives (otherwise the vendor with more).
ACCELERATOR = "NUMAPIN_ACCELERATOR"
#: The folder of the host's pin records (numapin.pinning.record), before the runtime folders it would choose.
RUNTIME_DIR = "NUMAPIN_RUNTIME_DIR"

#: Read at interpreter start (the start-up file): ``tensorrt_llm`` (comma-separated) patches those projects.
PATCH = "NUMAPIN_PATCH"
#: Read at interpreter start: ``1`` pins a worker process as ``numapin exec`` would, before any user code.
AUTOPIN = "NUMAPIN_AUTOPIN"
#: Read at interpreter start: ``1`` (or a period in seconds) keeps the placement numapin applied to the process
#: (the start-up hook's, or ``numapin exec``'s) while it runs (numapin.pinning.keeper).
KEEP = "NUMAPIN_KEEP"
#: The words AUTOPIN takes, in any case (the start-up file's one line knows those that mean off). Values, not
#: variables: left out of __all__, which names the variables (docs/environment.md lists each).
AUTOPIN_ON = ("1", "true", "yes", "on")
AUTOPIN_OFF = ("", "0", "false", "no", "off")
#: ``numapin exec``'s options, for NUMAPIN_AUTOPIN: option name -> variable.
AUTOPIN_OPTIONS = {
    "mode": "NUMAPIN_MODE",
    "memory": "NUMAPIN_MEMORY",
    "policy": "NUMAPIN_POLICY",
    "reserve": "NUMAPIN_RESERVE",
    "threads": "NUMAPIN_THREADS",
    "cores": "NUMAPIN_CORES",
    "nics": "NUMAPIN_NICS",
}

#: The variables numapin itself owns.
OWNED = (FSROOT, APPLIED, RESERVED, RANK_MAP, PRIORITY_CORES, ACCELERATOR, RUNTIME_DIR, PATCH, AUTOPIN, KEEP,
         *AUTOPIN_OPTIONS.values())

#: Launchers' local-rank variables, in the order they are consulted (first set wins).
LOCAL_RANK_VARIABLES: tuple[str, ...] = (
    "LOCAL_RANK",  # torchrun / torch.distributed, DeepSpeed
    "SLURM_LOCALID",  # Slurm srun
    "OMPI_COMM_WORLD_LOCAL_RANK",  # Open MPI mpirun
    "MPI_LOCALRANKID",  # MPICH / Intel MPI (Hydra)
    "PMI_LOCAL_RANK",  # MPICH (PMI)
    "MV2_COMM_WORLD_LOCAL_RANK",  # MVAPICH2
    "PALS_LOCAL_RANKID",  # HPE Cray PALS
)

#: Read as CUDA reads them.
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER = "CUDA_DEVICE_ORDER"
#: Read as ROCm reads them: ROCr's list first, then HIP's over what ROCr left (HIP_VISIBLE_DEVICES when
#: non-empty, else CUDA_VISIBLE_DEVICES).
ROCR_VISIBLE_DEVICES = "ROCR_VISIBLE_DEVICES"
HIP_VISIBLE_DEVICES = "HIP_VISIBLE_DEVICES"
#: Read as Intel Gaudi's runtime reads them: the module ids local ranks take in turn, or the one module a
#: process acquires.
HABANA_VISIBLE_MODULES = "HABANA_VISIBLE_MODULES"
HLS_MODULE_ID = "HLS_MODULE_ID"
#: Every variable that changes which GPUs a process sees, or in which order (a view of the machine is keyed by
#: their values).
GPU_VISIBILITY = (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
                  HABANA_VISIBLE_MODULES, HLS_MODULE_ID, ACCELERATOR)

#: Thread-pool sizes: OpenMP's, and the two BLAS libraries' own (each falls back to OpenMP's when unset).
THREAD_POOLS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

#: The NIC choice of the libraries that take one per process (``numapin exec --nics auto``): UCX (and NIXL
#: over it), NVSHMEM (DeepEP). NCCL is left alone: it picks each GPU's NICs itself, and its multi-rail
#: collectives use every NIC; naming one in NCCL_IB_HCA would take the others away.
NIC_VARIABLES = ("UCX_NET_DEVICES", "NVSHMEM_HCA_LIST")

#: Launchers' CPU binding of their tasks (read by numapin doctor).
LAUNCHER_BINDING = ("SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "OMPI_MCA_hwloc_base_binding_policy")

#: TensorRT-LLM's switch for its worker affinity, honoured by the compatibility function.
TLLM_AFFINITY = "TLLM_NUMA_AWARE_WORKER_AFFINITY"
