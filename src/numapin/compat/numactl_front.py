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

from ..base.files import Folder, only_theirs
from ..base.logger import log
from .patching import PatchReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import MutableMapping

__all__ = ["NAME", "USERS", "ensure_front", "front_folder", "front_report"]

NAME = "numactl"


def _places() -> list[str]:
    """Every place the front may be named, first choice first: in the user's runtime folder, the user's cache,
    the temporary folder (real paths)."""
    tag = f"front-{os.geteuid()}-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    bases = [os.environ.get("XDG_RUNTIME_DIR", ""), cache, tempfile.gettempdir()]
    return [os.path.realpath(os.path.join(base, "numapin", tag)) for base in dict.fromkeys(bases)
            if os.path.isabs(base)]


def _candidates() -> list[str]:
    """The places the front may live now: those where no other user can make or replace anything on the way
    (see :func:`only_theirs`). The front stays first on PATH for the whole job, and a world-writable /tmp that
    a cleaner empties would let anyone put their own ``numactl`` there for root's next worker to run."""
    mine = {0, os.geteuid()}
    return [place for place in _places() if only_theirs(place, mine)]


def _runs_scripts(folder: str) -> bool:
    """Whether a script may run from ``folder`` (hardened hosts mount /tmp, and sometimes /run, noexec),
    judged by the nearest folder of its path that exists (~/.cache may not exist yet)."""
    while True:
        try:
            return not os.statvfs(folder).f_flag & os.ST_NOEXEC
        except FileNotFoundError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return False
            folder = parent
        except OSError:
            return False


def front_folder() -> str | None:
    """The folder of this interpreter's front (per user and interpreter): the first candidate only this user
    and root may change, whose file system lets a script run; None when there is none."""
    return next((folder for folder in _candidates() if _runs_scripts(folder)), None)


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
    or no folder fit for it could be written: one warning).

    A front already first on PATH (an earlier interpreter of the job put it there) is checked again and
    rewritten if it changed. A candidate that cannot be written (a folder of that name that is not this
    user's alone) gives way to the next."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    found = shutil.which(NAME, path=path)
    candidates = [c for c in _candidates() if _runs_scripts(c)]
    if found is not None:
        ours = os.path.dirname(found)
        if ours not in _places():
            return None  # a numactl that is not numapin's: never shadowed
        # Numapin's own, put there by an earlier interpreter of the job: taken off PATH, then put back first if
        # it is still a place only this user and root can change (checked, rewritten if it changed); if not,
        # the next place is used, and it is never run unchecked.
        if ours in candidates:
            candidates.remove(ours)
            candidates.insert(0, ours)
        path = os.pathsep.join(entry for entry in path.split(os.pathsep) if entry != ours)
    tried = []
    for folder in candidates:
        try:
            _write(folder)
        except OSError as exc:
            tried.append(f"{folder}: {exc}")
            continue
        env["PATH"] = f"{folder}{os.pathsep}{path}" if path else folder
        return folder
    if found is not None:
        env["PATH"] = path  # numapin's own, no longer fit: off PATH rather than run unchecked
    why = "; ".join(tried) or ("no runtime folder, cache or temporary folder that only this user and root may "
                               "write, and that lets a script run (set XDG_RUNTIME_DIR to one, or install numactl)")
    log.warning("no numactl on PATH, and numapin's stand-in could not be written: %s", why)
    return None


def front_report(project: str) -> PatchReport:
    """What ``NUMAPIN_PATCH=project`` did about numactl, as a patch report. Never raises. Every process that puts
    the front on PATH or finds it there holds it in use (a shared lock on :data:`USERS` in its folder, until it
    exits); at its exit, the front is removed where no process holds it any longer and none still has it on PATH."""
    try:
        folder = ensure_front()
    except Exception as exc:  # a start-up hook never breaks the interpreter
        return PatchReport(f"{project}: numactl", refused=str(exc))
    if folder is None:
        return PatchReport(f"{project}: numactl", refused="a numactl is installed: left to it")
    if _claim(folder):
        import atexit

        atexit.register(_leave, folder)
    return PatchReport(f"{project}: numactl", replaced=(f"PATH ({folder}/numactl is numapin numactl)",))


#: The file in the front's folder whose shared locks say who uses the front now: each process of a job that put
#: it on PATH or found it there holds one until it exits (the kernel drops it with the process, however it ends).
USERS = "numactl.users"
#: The locks this process holds on fronts, by folder (descriptors kept open until exit).
_HELD: dict[str, int] = {}


def _claim(folder: str) -> bool:
    """Hold the front in ``folder`` in use: a shared lock on its :data:`USERS` file, on the file its name holds now
    (one a leaving process removed meanwhile is taken again, with the front, as :func:`ensure_front` writes it).
    Whether it is held. Never raises: one debug line."""
    import fcntl

    if folder in _HELD:
        return True
    for _ in range(3):
        try:
            with Folder.open(folder, {os.geteuid()}) as checked:
                fd = os.open(USERS, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=checked.fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    if os.fstat(fd).st_ino == os.stat(USERS, dir_fd=checked.fd, follow_symlinks=False).st_ino \
                            and os.path.exists(os.path.join(folder, NAME)):
                        _HELD[folder] = fd
                        return True
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)  # removed by a process leaving meanwhile: the front is written again, and taken
            _write(folder)
        except OSError as exc:
            log.debug("numactl stand-in in %s not held: %s", folder, exc)
            return False
    return False


def _leave(folder: str) -> None:
    """Let go of the front in ``folder``; remove it (and the folder) where no other process holds it in use nor
    has it on PATH (a process of the job that started after it was put there: a worker that may yet run numactl).
    The removal holds the front's lock exclusively: a process that takes the front meanwhile waits, then finds
    it gone and writes it again. Never raises: one debug line."""
    import fcntl

    from ..facts import procfs

    held = _HELD.pop(folder, None)
    if held is not None:
        os.close(held)
    me, uid = os.getpid(), os.geteuid()
    try:
        with Folder.open(folder, {uid}) as checked:
            fd = os.open(USERS, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=checked.fd)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    log.debug("numactl stand-in kept in %s: another process holds it in use", folder)
                    return
                for pid in procfs.pids():
                    if pid == me:
                        continue
                    try:
                        if procfs.owner(pid) == uid and folder in procfs.environ(pid).get("PATH", "").split(
                                os.pathsep):
                            log.debug("numactl stand-in kept in %s: process %d has it on PATH", folder, pid)
                            return
                    except Exception:  # gone, or not ours to read: it holds nothing of ours
                        continue
                checked.remove(NAME)
                checked.remove(USERS)
                os.rmdir(folder)
            finally:
                os.close(fd)
    except OSError as exc:
        log.debug("numactl stand-in in %s not removed: %s", folder, exc)
