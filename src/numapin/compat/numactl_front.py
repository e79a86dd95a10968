"""A ``numactl`` on PATH that is ``numapin numactl``, for frameworks that exec numactl where none is installed.

vLLM and SGLang bind their workers by exec-ing ``numactl`` in front of Python,
after probing ``numactl OPTIONS true``; slim and ROCm images have no numactl,
and then vLLM stops with an error and SGLang binds nothing. Where no numactl is
on PATH, this puts a folder in front of PATH (for this process and, through the
environment, every process it starts) holding a two-line ``numactl`` that hands
its arguments to ``numapin numactl`` under this interpreter. A numactl that is
installed is never shadowed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import MutableMapping

from ..base.files import Folder
from ..base.logger import log
from .patching import PatchReport

__all__ = ["NAME", "ensure_front", "front_folder", "front_report"]

NAME = "numactl"


def _candidates() -> list[str]:
    """Where the front may live, first choice first: the temporary folder, the user's runtime folder,
    the user's cache (hardened hosts mount /tmp, and sometimes /run, noexec: a script there cannot run)."""
    tag = f"numapin-front-{os.geteuid()}-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}"
    bases = [tempfile.gettempdir(), os.environ.get("XDG_RUNTIME_DIR", ""),
             os.path.join(os.path.expanduser("~"), ".cache")]
    return [os.path.join(base, tag) for base in dict.fromkeys(b for b in bases if b)]


def front_folder() -> str:
    """The folder of this interpreter's front (per user and interpreter): the first candidate whose file
    system lets a script run."""
    found = _candidates()
    for folder in found:
        try:
            parent = os.path.dirname(folder)
            if not os.statvfs(parent).f_flag & os.ST_NOEXEC:
                return folder
        except OSError:
            continue
    return found[0]


#: What the stand-in runs: numapin's numactl, with the working directory taken off ``sys.path`` before
#: anything is imported (``python -m`` would put it first: a framework probing numactl from a folder other
#: users can write would import their ``argparse.py`` or ``numapin/``). ``-P`` does this from Python 3.11 on.
_RUN = "import sys; del sys.path[0]; from numapin.cli import main; sys.exit(main(['numactl', *sys.argv[1:]]))"


def _write(folder: str) -> None:
    import shlex

    script = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(_RUN)} \"$@\"\n".encode()
    # Made if need be (~/.cache may not exist yet), then held as checked, not whatever its path names later.
    with Folder.open(folder, {os.geteuid()}, create=True) as checked:
        found = checked.read(NAME, len(script) + 1)
        if found is not None and found == (script, os.geteuid()):
            return
        checked.replace(NAME, script, 0o755)


def ensure_front(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Put the front first on PATH when no numactl is there; the folder added, or None (one is installed,
    or the folder cannot be written: one warning)."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    found = shutil.which(NAME, path=path)
    if found is not None:
        return os.path.dirname(found) if os.path.dirname(found) in _candidates() else None
    folder = front_folder()
    try:
        _write(folder)
    except OSError as exc:
        log.warning("no numactl on PATH, and numapin's stand-in could not be written in %s: %s", folder, exc)
        return None
    env["PATH"] = f"{folder}{os.pathsep}{path}" if path else folder
    return folder


def front_report(project: str) -> PatchReport:
    """What ``NUMAPIN_PATCH=project`` did about numactl, as a patch report. Never raises."""
    try:
        folder = ensure_front()
    except Exception as exc:  # a start-up hook never breaks the interpreter
        return PatchReport(f"{project}: numactl", refused=str(exc))
    if folder is None:
        return PatchReport(f"{project}: numactl", refused="a numactl is installed: left to it")
    return PatchReport(f"{project}: numactl", replaced=(f"PATH ({folder}/numactl is numapin numactl)",))
