"""A torchrun worker: starts torch's own threads and two of its own, then reports (JSON to $REPORT_DIR)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import report

warnings = report.Warnings()

import torch  # noqa: E402  (after the handler: torch's import-time warnings are not numapin's business)

torch.set_num_threads(2)  # torchrun sets OMP_NUM_THREADS=1; two makes torch start an OpenMP thread
x = torch.randn(512, 512)
(x @ x).sum()
torch.jit.wait(torch.jit.fork(torch.mm, x, x))  # and an inter-op pool thread

stop = threading.Event()
own = [threading.Thread(target=stop.wait) for _ in range(2)]
for t in own:
    t.start()
born = report.masks()
again = report.pin_again()
stop.set()
rank = os.environ["LOCAL_RANK"]
Path(os.environ["REPORT_DIR"], f"rank{rank}.json").write_text(json.dumps(
    {"rank": int(rank), "masks": born, "again": again, "warnings": warnings.messages,
     "applied": os.environ.get("NUMAPIN_APPLIED")}))
