"""Every kind of numapin error, raised for real, sent through pickle and through a process pool.

    python scripts/errors_travel.py

Writes a two-GPU synthetic machine to a temporary folder (nothing on this host
changes, no GPU needed), triggers a usage error (a malformed cpulist), a GPU
error (a GPU that is not visible) and a strict pin's NoGpuVisible (its result attached),
round-trips each through every pickle protocol and through a
``multiprocessing.Pool`` worker, and prints what arrived. Exits 1 when any
arrives different (type, message or fields).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numapin
from numapin.facts import synthetic as machines


def _caught(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except BaseException as exc:  # the error is what this script is about
        return exc
    raise SystemExit(f"{call} raised nothing")


def _usage() -> None:
    numapin.pin(cpus="zzz")


def _gpu() -> None:
    numapin.pin(99)


def _strict() -> None:
    numapin.pin(0, strict=True, environ={"CUDA_VISIBLE_DEVICES": ""})


def _shape(error: BaseException) -> tuple[str, str, dict[str, object]]:
    return type(error).__qualname__, str(error), dict(vars(error))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="numapin-errors-") as folder:  # removed however the run ends
        os.environ["NUMAPIN_FSROOT"] = str(machines.write("pair", Path(folder) / "root"))
        return _travel()


def _travel() -> int:
    differs = 0
    with multiprocessing.get_context("fork").Pool(1) as pool:
        for trigger in (_usage, _gpu, _strict):
            error = _caught(trigger)
            arrived = [pickle.loads(pickle.dumps(error, p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)]
            arrived.append(_caught(lambda t=trigger: pool.apply(t)))  # type: ignore[misc]
            same = all(_shape(a) == _shape(error) for a in arrived)
            differs += not same
            kind, message, fields = _shape(error)
            print(f"{kind}: {message}\n  fields {fields}\n  through pickle (protocols 0-{pickle.HIGHEST_PROTOCOL}) "
                  f"and a Pool worker: {'the same' if same else 'DIFFERENT'}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
