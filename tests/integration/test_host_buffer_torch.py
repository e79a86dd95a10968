"""A host buffer as a PyTorch tensor, with real PyTorch: no copy, the buffer's own pages."""

from __future__ import annotations

import subprocess
import sys

from tier import require

SCRIPT = """
import torch
import numapin
from numapin.compat.torch_tensor import tensor

node = min(numapin.machine().topology.allowed_mems)
buf = numapin.host_buffer(8 << 20, node=node)
t = tensor(buf, torch.float32)
t.fill_(1.5)
view = memoryview(buf).cast("f")
print(t.numel(), t.data_ptr() == buf.address, view[0], view[len(view) - 1])
"""


def test_a_tensor_over_a_host_buffer_shares_its_memory() -> None:
    require("torch")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str((8 << 20) // 4), "True", "1.5", "1.5"], done.stdout
