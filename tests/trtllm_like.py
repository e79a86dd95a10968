"""A package laid out like TensorRT-LLM where its CPU affinity lives, with the original function's behaviour.

TensorRT-LLM's workers import ``configure_cpu_affinity`` by name from
``tensorrt_llm.llmapi.utils``. Its behaviour, reproduced here (from its
documentation and source, written anew): with ``TLLM_NUMA_AWARE_WORKER_AFFINITY``
unset, a process whose affinity differs from all CPUs is "constrained" and is
reset to all CPUs with a warning; otherwise the GPU's NUMA-node CPUs are set;
``"1"`` sets the node's CPUs regardless; any other value does nothing. It sets
the affinity of the calling thread only (the process id, as psutil does), so
other threads keep theirs, and a second call finds the first call's mask
"constrained" and undoes it: the flip-flop numapin's replacement removes.

Where NVML would say which CPUs are the GPU's, this stand-in reads them from
``TRTLLM_LIKE_GPU_CPUS`` (cpulists separated by ";", one per device id).
"""

from __future__ import annotations

from pathlib import Path

UTILS = '''
import logging
import os

logger = logging.getLogger("tensorrt_llm")
CALLS = []


def _cpus(text):
    found = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def configure_cpu_affinity(gpu_id):
    CALLS.append(gpu_id)
    setting = os.environ.get("TLLM_NUMA_AWARE_WORKER_AFFINITY")
    if setting is not None and setting != "1":
        return
    everything = set(range(os.cpu_count()))
    if setting is None and os.sched_getaffinity(os.getpid()) != everything:
        logger.warning("process %d has constrained CPU affinity; removing the constraint", os.getpid())
        os.sched_setaffinity(os.getpid(), everything)
        return
    node = _cpus(os.environ["TRTLLM_LIKE_GPU_CPUS"].split(";")[gpu_id])
    os.sched_setaffinity(os.getpid(), node)
'''

WORKER = '''
from tensorrt_llm.llmapi.utils import configure_cpu_affinity


def start(gpu_id):
    configure_cpu_affinity(gpu_id)
'''


BASE_WORKER = '''
from tensorrt_llm.llmapi.utils import configure_cpu_affinity


class BaseWorker:
    """A worker in the shape of TensorRT-LLM's: affinity configured at set-up, a shutdown to end it."""

    def __init__(self, device_id):
        self.shutdowns = 0
        configure_cpu_affinity(device_id)

    def shutdown(self):
        self.shutdowns += 1
'''


def write(dest: Path) -> Path:
    """Write the package under ``dest`` (put ``dest`` on sys.path to import it); returns ``dest``."""
    package = dest / "tensorrt_llm"
    (package / "llmapi").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "llmapi" / "__init__.py").write_text("")
    (package / "llmapi" / "utils.py").write_text(UTILS)
    (package / "worker.py").write_text(WORKER)
    (package / "executor").mkdir()
    (package / "executor" / "__init__.py").write_text("")
    (package / "executor" / "base_worker.py").write_text(BASE_WORKER)
    return dest


def gpu_cpus(*cpu_sets: set[int]) -> str:
    """The ``TRTLLM_LIKE_GPU_CPUS`` value for these per-GPU CPU sets."""
    return ";".join(",".join(map(str, sorted(s))) for s in cpu_sets)
