"""The room a process's memory cgroups leave (v1 and v2, every cgroup above it too), from a folder standing in for
``/``: the limit less what the cgroup holds that the kernel cannot reclaim at once. (A real v1 memory cgroup refusing a
buffer: tests/pinning/test_host_buffer.py.)"""

from __future__ import annotations

from pathlib import Path

from numapin.facts.cgroup import memory_room
from numapin.facts.host import Host

MIB = 1 << 20


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v2(root: Path, groups: dict[str, tuple[str, int, int]]) -> None:
    """A v2 hierarchy at /sys/fs/cgroup, this process in /a/b; ``groups``: folder -> (memory.max, current, inactive
    file)."""
    _put(root, "proc/self/cgroup", "0::/a/b\n")
    _put(root, "proc/self/mountinfo", "30 20 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n")
    for folder, (limit, current, inactive) in groups.items():
        _put(root, f"sys/fs/cgroup{folder}/memory.max", f"{limit}\n")
        _put(root, f"sys/fs/cgroup{folder}/memory.current", f"{current}\n")
        _put(root, f"sys/fs/cgroup{folder}/memory.stat", f"anon 1\ninactive_file {inactive}\nactive_file 7\n")


def test_v2_the_tightest_limit_above_the_process_and_its_reclaimable_cache_counted_out(tmp_path: Path) -> None:
    _v2(tmp_path, {"": ("max", 900 * MIB, 0), "/a": (str(1024 * MIB), 600 * MIB, 100 * MIB),
                   "/a/b": ("max", 300 * MIB, 50 * MIB)})
    room = memory_room(Host.at(tmp_path))
    assert room is not None and room.room == 1024 * MIB - 500 * MIB  # /a's: 600 held, 100 of it reclaimable
    assert room.path.endswith("/a/memory.max") and "1.0 GiB" in str(room)


def test_no_limit_anywhere_is_no_room_to_say(tmp_path: Path) -> None:
    _v2(tmp_path, {"/a": ("max", MIB, 0), "/a/b": ("max", MIB, 0)})
    assert memory_room(Host.at(tmp_path)) is None


def test_v1_its_memory_hierarchy_and_the_unlimited_mark(tmp_path: Path) -> None:
    _put(tmp_path, "proc/self/cgroup", "4:memory:/pod/c\n3:cpuset:/\n0::/\n")
    _put(tmp_path, "proc/self/mountinfo",
         "31 20 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    base = "sys/fs/cgroup/memory"
    for folder, limit, used, cache in (("", 9223372036854771712, 5000 * MIB, 0), ("/pod", 256 * MIB, 200 * MIB,
                                                                                   40 * MIB),
                                       ("/pod/c", 9223372036854771712, 190 * MIB, 0)):
        _put(tmp_path, f"{base}{folder}/memory.limit_in_bytes", f"{limit}\n")
        _put(tmp_path, f"{base}{folder}/memory.usage_in_bytes", f"{used}\n")
        _put(tmp_path, f"{base}{folder}/memory.stat", f"cache 1\ntotal_inactive_file {cache}\n")
    room = memory_room(Host.at(tmp_path))
    assert room is not None and room.room == 256 * MIB - 160 * MIB and room.limit == 256 * MIB, room
