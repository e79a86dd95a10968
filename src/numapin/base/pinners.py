"""The other pinners inside a GPU worker, a row per library: how its threads or its doing are recognised, where
they belong, and the variables that steer it.

A worker is a crowd: its framework narrows a thread to a slice of the placement (TensorRT-LLM's executor loop),
its runtime starts helpers on every core (ROCr), its communication libraries start proxies that take the mask of
the thread that starts them (NCCL, UCX) or pin them to a NIC's node (UCCL), OpenMP binds its team, and whole-
process binders (SGLang's, vLLM's ``--numa-bind``, torchrun's ``--numa-binding``) bind before numapin looks. This
table is the one place their variables and thread names are written (a test holds every mention in ``src/`` and
``docs/`` to it); the judge (``threads``, ``ps``, ``doctor --pid``), the keeper, ``numapin exec`` and the start-up
hook read it. Each row cites what was read for it, with the version.

Plain classes, not numapin's frozen records: the start-up hook reads the rows of a worker's vendor at every start.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["OFF", "PINNERS", "WHERE", "Pinner", "fighting", "named", "sets", "steps_aside", "unheeded"]

#: Where a library's threads belong, in words: the closed set of a row's ``belongs``.
WHERE = {
    "placement": "inside the GPU's placement",
    "nic": "on its NIC's node",
    "process": "the whole process, before numapin looks",
}


class Pinner:
    """One library of :data:`PINNERS`."""

    __slots__ = ("aside", "belongs", "fights", "inherit", "library", "read", "signs", "slices", "steer", "threads",
                 "vendor")

    def __init__(self, library: str, *, threads: "tuple[str, ...]" = (), signs: "tuple[str, ...]" = (),
                 belongs: str = "placement", steer: "dict[str, str] | None" = None,
                 inherit: "tuple[tuple[str, str], ...]" = (), vendor: "str | None" = None,
                 fights: "tuple[tuple[str, tuple[str, ...], str], ...]" = (),
                 aside: "tuple[tuple[str, str], ...]" = (), slices: bool = False, read: str = "") -> None:
        self.library = library
        """Its name as its users write it."""
        self.threads = threads
        """The names it gives its threads as the kernel keeps them (``comm``: the first 15 characters), as
        prefixes."""
        self.signs = signs
        """Prefixes of the variables whose presence in a process's environment shows it is in use there; a row
        with signs names a thread by its name only in such a process (UCX's ``async`` is a common name)."""
        self.belongs = belongs
        """Where its threads belong: a key of :data:`WHERE`."""
        self.steer = steer or {}
        """The variables that turn its pinning on, off or into inheritance, each with what it does."""
        self.inherit = inherit
        """What numapin sets (where unset) for a worker of ``vendor``'s GPU, so that its threads inherit the
        placement or can be named: ``(variable, value)``."""
        self.vendor = vendor
        """The accelerators (a row of ``facts.glance.ACCELERATORS``) whose workers it runs in; None: any."""
        self.fights = fights
        """``(variable, values, fix)``: where the worker's environment holds the variable at one of the values
        (``""``: unset, where the library is in the process: its vendor's GPU, or its signs; ``"*"``: any value
        but an off word), the library pins against numapin's placement, and ``fix`` says what to set."""
        self.slices = slices
        """Whether it narrows an unnamed thread to a slice of the placement where its signs are set to ``1``: such a
        narrowed thread of such a process is known as its."""
        self.aside = aside
        """What the start-up hook sets (where unset) in a process that will name its GPU later, so that this
        whole-process binder steps aside and numapin alone places the worker: ``(variable, value)``."""
        self.read = read
        """What was read for this row, with versions."""

    def shown(self, environ: "Mapping[str, str]") -> bool:
        """Whether a process's environment shows it in use: one of its signs is set there (none: never)."""
        return any(name.startswith(self.signs) for name in environ) if self.signs else False


#: The other pinners numapin knows. Thread names are the libraries' own (``pthread_setname_np``).
PINNERS = {
    "rocr": Pinner(
        "ROCr (ROCm's runtime) helper threads", vendor="amd",
        steer={"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "1, its default: helper threads spawn on every core, ignoring the "
               "process's mask; 0: they inherit it"},
        inherit=(("HSA_OVERRIDE_CPU_AFFINITY_DEBUG", "0"),),
        fights=(("HSA_OVERRIDE_CPU_AFFINITY_DEBUG", ("", "1"), "HSA_OVERRIDE_CPU_AFFINITY_DEBUG=0 (numapin exec and "
                 "the start-up hook set it where unset)"),),
        read="ROCm's environment-variable reference (HSA_OVERRIDE_CPU_AFFINITY_DEBUG: default 1); AMD's MI300X "
             "system-optimisation guide sets 0; ROCm/rocm-systems#4830. Its helpers are unnamed: they show the "
             "process's name, and are known by their mask of every CPU"),
    "nccl": Pinner(
        "NCCL (RCCL)", vendor="nvidia",
        threads=("NCCL Progress", "NCCL GIN Progre", "NCCL Service", "NCCL UDS Servic", "NCCL IbAsync",
                 "NCCL Sock", "NCCL RAS", "NCCL RMA Proxy", "NCCL BootstrapR", "NCCL IbResilien"),
        steer={"NCCL_SET_THREAD_NAME": "1 names its threads (default 0: they show the process's name)",
               "NCCL_IGNORE_CPU_AFFINITY": "1: its threads take its GPU's CPUs, ignoring the process's mask",
               "NCCL_IB_HCA": "the NICs it uses: numapin never sets it (its multi-rail collectives use every NIC, "
               "which naming one would take away)"},
        inherit=(("NCCL_SET_THREAD_NAME", "1"),),
        fights=(("NCCL_IGNORE_CPU_AFFINITY", ("1",), "unset NCCL_IGNORE_CPU_AFFINITY: NCCL then narrows its threads "
                 "to its GPU's CPUs within numapin's placement"),),
        read="NCCL 2.30.7 source: src/debug.cc (NCCL_SET_THREAD_NAME, default 0), src/graph/topo.cc "
             "(NCCL_IGNORE_CPU_AFFINITY), src/proxy.cc, src/gin/gin_host.cc, src/transport/net_socket.cc (thread "
             "names); NVIDIA/nccl#2182 (GIN threads take their creator's mask); torchcomms#2906"),
    "ucx": Pinner(
        "UCX", threads=("async",), signs=("UCX_",),
        steer={"UCX_NET_DEVICES": "the NIC it uses; unset, it scores NICs by the worker's cpuset, so placing "
               "before it starts chooses its NIC (openucx/ucx#11459)"},
        read="UCX 1.23.0 source: src/ucs/async/thread.c (its async thread, named async, takes its creator's mask)"),
    "uccl": Pinner(
        "UCCL", signs=("UCCL_",), belongs="nic",
        steer={"UCCL_EP_DISABLE_CPU_AFFINITY": "1: its proxy threads keep the mask they are given, instead of "
               "pinning themselves to the NIC's node"},
        fights=(("UCCL_EP_DISABLE_CPU_AFFINITY", ("", "0"), "UCCL_EP_DISABLE_CPU_AFFINITY=1, where the worker's "
                 "placement excludes its NIC's node (UCCL then fails to pin: ai-dynamo/nixl#1999)"),),
        read="uccl-project/uccl#1030 (UCCL_EP_DISABLE_CPU_AFFINITY); ai-dynamo/nixl#1999. Its threads' names "
             "were not read: known by the NIC's node"),
    "nixl": Pinner(
        "NIXL", signs=("NIXL_",), belongs="nic",
        read="ai-dynamo/nixl#1999 (its UCCL backend pins proxy threads to the NIC's node)"),
    "tensorrt_llm": Pinner(
        "TensorRT-LLM's executor loop", signs=("TLLM_EXECUTOR_LOOP_PIN",), slices=True,
        steer={"TLLM_EXECUTOR_LOOP_PIN": "1 pins its executor's event loop to a slice of the GPU's node's CPUs",
               "TLLM_EXECUTOR_LOOP_PIN_OFFSET": "where the slice starts (default 16; each further GPU on the node 2 "
               "further)", "TLLM_EXECUTOR_LOOP_PIN_NCORES": "how many CPUs (default 2)"},
        read="NVIDIA/TensorRT-LLM#18701 (its docs and get_executor_loop_cpus tests): a slice inside the placement"),
    "sglang": Pinner(
        "SGLang's own binding", signs=("SGLANG_",), belongs="process",
        steer={"SGLANG_AUTO_NUMA_BIND": "1 (0.5.23's default): each scheduler bound to its GPU's node; the start-up "
               "hook sets 0 where unset, and places the scheduler itself",
               "SGLANG_NUMA_BIND_V2": "1 (default): by numactl in front of the scheduler's interpreter; 0: in the "
               "process, one thread", "SGLANG_SET_CPU_AFFINITY": "1: its older per-GPU CPU affinity (default 0)",
               "SGLANG_CRASH_ON_NUMA_BIND_FAILURE": "1: a binding that fails stops the server (default 0)"},
        aside=(("SGLANG_AUTO_NUMA_BIND", "0"),),
        read="sglang 0.5.23 wheel: srt/environ.py (the defaults), srt/utils/numa_utils.py (configure_subprocess, "
             "numa_bind_to_node), srt/managers/scheduler.py"),
    "vllm": Pinner(
        "vLLM's --numa-bind", belongs="process",
        read="vllm 0.33.0 wheel: utils/numa_utils.py (numactl in front of each worker)"),
    "torchrun": Pinner(
        "torchrun's --numa-binding", belongs="process",
        read="PyTorch 2.13.0: torch/numa/binding.py (numactl for a script, one sched_setaffinity pass for a "
             "callable)"),
    "openmp": Pinner(
        "OpenMP runtimes", signs=("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"),
        steer={"OMP_PROC_BIND": "binds the team's threads to places", "OMP_PLACES": "the places",
               "GOMP_CPU_AFFINITY": "GNU's CPU list per thread", "KMP_AFFINITY": "LLVM's and Intel's binding",
               "KMP_HIDDEN_HELPER_AFFINITY": "LLVM's hidden helpers' binding"},
        fights=tuple((name, ("*",), "unset the OpenMP binding variables set (numapin's mask already holds every "
                      "thread), or OMP_PROC_BIND=false")
                     for name in ("KMP_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")),
        read="The OpenMP 5.2 specification (OMP_PROC_BIND, OMP_PLACES); GCC's libgomp manual (GOMP_CPU_AFFINITY); "
             "LLVM's OpenMP runtime documentation (KMP_AFFINITY, KMP_HIDDEN_HELPER_AFFINITY)"),
    "dataloader": Pinner(
        "PyTorch's DataLoader", threads=("pt_data_worker", "pt_data_pin"),
        read="PyTorch 2.13.0 wheel: torch/utils/data/_utils/worker.py (its worker processes name themselves "
             "pt_data_worker), pin_memory.py (the pinning thread pt_data_pin); both inherit the mask"),
}


def named(thread: "str | None", environ: "dict[str, str] | None" = None, *, narrowed: bool = False) -> "str | None":
    """The row (a key of :data:`PINNERS`) whose thread name ``thread`` is, in a process of this environment (a
    row with signs needs one of them there); or, for a thread ``narrowed`` to a slice of the placement, the row
    that slices unnamed threads where its signs are on. None where none is."""
    if narrowed and environ is not None:
        for key, row in PINNERS.items():
            if row.slices and any(environ.get(sign, "").strip() == "1" for sign in row.signs):
                return key
    if not thread:
        return None
    for key, row in PINNERS.items():
        if any(thread.startswith(prefix) for prefix in row.threads) and (
                not row.signs or (environ is not None and row.shown(environ))):
            return key
    return None


#: Values that turn a binding variable off (``"*"`` of :attr:`Pinner.fights` does not count them).
OFF = ("", "none", "disabled", "false", "0")


def fighting(key: str, environ: "dict[str, str]", vendor: "str | None") -> "list[tuple[str, str, str]]":
    """Row ``key``'s variables that, in this environment of a worker of ``vendor``'s GPU, make the library pin
    against numapin's placement: ``(variable, its value or unset, the fix)``."""
    row = PINNERS[key]
    # In the process: its vendor's GPU is the worker's, or its variables are set.
    present = (row.vendor is not None and row.vendor == vendor) or row.shown(environ)
    found = []
    for name, values, fix in row.fights:
        value = environ.get(name, "").strip()
        if (value.lower() in values and value) or (not value and "" in values and present) or \
                ("*" in values and value.lower() not in OFF):
            found.append((name, value or "unset", fix))
    return found


def unheeded(key: str, environ: "dict[str, str]") -> "list[tuple[str, str]]":
    """Row ``key``'s variables that would make its threads inherit the placement, where the environment holds
    another value: ``(variable, its value)``, an unset one as ``unset``."""
    return [(name, environ.get(name, "unset")) for name, value in PINNERS[key].inherit
            if environ.get(name, "").strip() != value]


def steps_aside(vendor: "str | None", environ: "dict[str, str]") -> "list[tuple[str, str]]":
    """What the start-up hook sets, where unset, in a process of ``vendor``'s host that will name its GPU later (a
    server that starts its workers): the crowd's inheritance (:func:`sets`) and the whole-process binders' step
    aside, before any runtime or framework reads them."""
    aside = [(k, v) for row in PINNERS.values() for k, v in row.aside if k not in environ]
    return sets(vendor, environ)[0] + aside


def sets(vendor: "str | None", environ: "dict[str, str]") -> "tuple[list[tuple[str, str]], list[tuple[str, str]]]":
    """What numapin sets for a worker of ``vendor``'s GPU so that the crowd's threads inherit its placement (or can
    be named), and what of it the environment already sets (kept: never over a user's value)."""
    wanted = [pair for row in PINNERS.values() if row.vendor == vendor for pair in row.inherit]
    return ([(k, v) for k, v in wanted if k not in environ], [(k, environ[k]) for k, _ in wanted if k in environ])
