"""A second, unprivileged user of this host, for the trust-boundary tests: what it plants is its own doing.

Made by the tests when root runs them (``useradd --system``, no home, no login shell) and removed at the
end of the session that made it; a user of that name that was there before is used and left as it was.
Where the system has no ``useradd`` (the QEMU guests), a user id no account has stands in: the kernel needs
no account to run a process as a user or to give it a file.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from dataclasses import dataclass

#: The user's name: of this test process (each run of the suite, each of its workers, makes its own, so that two runs
#: side by side never remove the user the other uses). A name of 32 characters at most, as useradd takes.
NAME = f"numapin-test-{os.getpid()}"


@dataclass(frozen=True)
class Other:
    uid: int
    gid: int
    made: bool
    """Whether this session made the user (and so removes it)."""

    def __iter__(self):  # type: ignore[no-untyped-def]  # (uid, gid), as the tests unpack it
        return iter((self.uid, self.gid))

    def __getitem__(self, index: int) -> int:
        return (self.uid, self.gid)[index]

    def sh(self, script: str, *args: str) -> None:
        """Run the shell ``script`` (``args`` as $1...) as this user. (Shell, not Python: the tests'
        interpreter may live where this user may not read.)"""
        subprocess.run(["/bin/sh", "-c", script, "sh", *args], user=self.uid, group=self.gid, check=True,
                       timeout=60, cwd="/")


    def start(self, script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start the shell ``script`` as this user (in ``env``, default this one's), its input and output piped;
        the caller ends it."""
        return subprocess.Popen(["/bin/sh", "-c", script, "sh", *args], user=self.uid, group=self.gid, cwd="/",
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)


#: Where no ``useradd`` is (the QEMU guests' busybox system): a user id no account, process or file has, taken
#: as it is. The kernel needs no account to run a process as a user or to give it a file.
BARE_ID = 59_999


def make() -> Other:
    try:
        entry = pwd.getpwnam(NAME)
        return Other(entry.pw_uid, entry.pw_gid, False)
    except KeyError:
        pass
    try:
        for attempt in range(20):  # another run's useradd may hold /etc/passwd's lock a moment (exit 10)
            done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
                                  capture_output=True, text=True)
            if done.returncode != 10:
                break
            time.sleep(0.1 * (attempt + 1))
        assert done.returncode == 0, done.stderr
    except FileNotFoundError:
        taken = {entry.pw_uid for entry in pwd.getpwall()}
        assert BARE_ID not in taken, f"user id {BARE_ID} is an account's here"
        return Other(BARE_ID, BARE_ID, False)
    entry = pwd.getpwnam(NAME)
    assert entry.pw_uid != 0
    return Other(entry.pw_uid, entry.pw_gid, True)


def remove(other: Other) -> None:
    if other.made:
        for attempt in range(20):  # as for useradd: another run may hold the lock a moment
            if subprocess.run(["userdel", NAME], check=False, capture_output=True).returncode != 10:
                break
            time.sleep(0.1 * (attempt + 1))
