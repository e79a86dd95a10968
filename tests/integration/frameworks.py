"""vLLM's and SGLang's real numa_utils.py, taken from their wheels, beside stubs of the modules they import.

The wheels pull CUDA, so they are not installed: ``.ci/run`` downloads them (``pip download --no-deps``)
into the folder named by ``NUMAPIN_FRAMEWORK_WHEELS``, and the files numapin works with are unpacked
from there. Everything else those files import is stubbed here, with only what they read.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

WHEELS = "NUMAPIN_FRAMEWORK_WHEELS"
VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}
#: The files taken from each wheel (the rest of each package is the stubs below).
TAKEN = {"vllm": ("vllm/utils/numa_utils.py", "vllm/utils/numa_wrapper.sh"),
         "sglang": ("sglang/srt/utils/numa_utils.py",)}
STUBS = {
    "vllm": {
        "vllm/__init__.py": "",
        "vllm/envs.py": "VLLM_WORKER_MULTIPROC_METHOD = 'spawn'\n",
        "vllm/utils/__init__.py": "",
    },
    "sglang": {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/environ.py": (
            "class _Flag:\n"
            "    def __init__(self, value): self.value = value\n"
            "    def get(self): return self.value\n"
            "class envs:\n"
            "    SGLANG_NUMA_BIND_V2 = _Flag(True)\n"
            "    SGLANG_AUTO_NUMA_BIND = _Flag(False)\n"
            "    SGLANG_CRASH_ON_NUMA_BIND_FAILURE = _Flag(False)\n"),
        "sglang/srt/server_args.py": "class ServerArgs:\n    numa_node = None\n",
        "sglang/srt/utils/__init__.py": (
            "def is_cuda(): return True\n"
            "def is_xpu(): return False\n"
            "def get_cpu_ids_by_node(): return {}\n"),
        # numa_utils reads torch.cuda for one helper (NVML's index of a device): CUDA's torch is not needed.
        "torch/__init__.py": "from . import cuda\n",
        "torch/cuda.py": "def _get_nvml_device_index(device): return device\n",
    },
}


def tree(project: str, into: Path) -> Path:
    """A folder for PYTHONPATH holding ``project``'s real NUMA file(s) and the stubs around them."""
    folder = os.environ.get(WHEELS)
    wheels = sorted(Path(folder).glob(f"{project}-{VERSIONS[project]}-*.whl")) if folder else []
    if not wheels:
        message = (f"{project} {VERSIONS[project]}'s wheel is not in ${WHEELS} (pip download --no-deps "
                   f"{project}=={VERSIONS[project]} -d DIR; export {WHEELS}=DIR)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in TAKEN[project]:
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(name))
            if name.endswith(".sh"):
                target.chmod(0o755)
    for name, text in STUBS[project].items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_text(text)
    return into
