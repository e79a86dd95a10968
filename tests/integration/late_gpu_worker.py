"""A worker that names its GPU after start, as vLLM's and SGLang's do: ``late_gpu_worker.py HOW``.

HOW is ``cuda`` (``torch.cuda.set_device(1)``, SGLang's path through ``torch.get_device_module``),
``accelerator`` (``torch.accelerator.set_device_index(torch.device("cuda:1"))``, vLLM's) or ``none``.
On a CPU build PyTorch's own call fails after numapin has placed the process: that failure is caught
and reported. Prints one JSON line (every thread's mask, torch's error, numapin's warnings so far), then
waits for its standard input to close, so the test can look at it from outside; at exit, every warning
(numapin's at exit included) as one line ``WARNINGS [...]`` on stderr.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading

import report

warnings = report.Warnings()
# Registered before numapin's own (at torch's import), so it runs after them: what numapin said at exit too.
atexit.register(lambda: print(f"WARNINGS {json.dumps(warnings.messages)}", file=sys.stderr))

import torch  # noqa: E402  (after the handler: torch's import-time warnings are not numapin's business)

torch.set_num_threads(2)
x = torch.randn(256, 256)
(x @ x).sum()  # torch's OpenMP threads exist before the GPU is named
stop = threading.Event()
own = threading.Thread(target=stop.wait)
own.start()
how = sys.argv[1]
error = None
try:
    if how == "cuda":
        torch.get_device_module("cuda").set_device(1)
    elif how == "accelerator":
        torch.accelerator.set_device_index(torch.device("cuda:1"))
except Exception as exc:  # a CPU build has no CUDA: PyTorch's own refusal, after numapin's placement
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"masks": report.masks(), "torch_error": error, "warnings": warnings.messages}), flush=True)
sys.stdin.read()
stop.set()
