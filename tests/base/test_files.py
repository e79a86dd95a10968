"""only_theirs: whether anyone but the given users can make or replace what a path names, judged on real
folders of this host (a sticky /tmp, a private folder of the session, links between them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from numapin.base.files import Folder, only_theirs

MINE = {0, os.geteuid()}


def test_the_root_folder_and_a_private_one_are_only_theirs(private_tmp: Path) -> None:
    assert only_theirs("/", MINE)
    assert only_theirs(str(private_tmp), MINE)
    assert only_theirs(str(private_tmp / "not" / "made" / "yet"), MINE), "what is missing, only they can make"


def test_a_folder_others_may_write_is_not_nor_anything_below_it(private_tmp: Path, tmp_path: Path) -> None:
    shared = private_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp is: sticky, and everyone's to write
    assert not only_theirs(str(shared), MINE) and not only_theirs(str(shared / "mine"), MINE)
    shared.chmod(0o775)
    assert not only_theirs(str(shared / "mine"), MINE), "its group may write it"
    assert os.stat("/tmp").st_mode & stat.S_IWOTH and not only_theirs("/tmp/numapin-anything", MINE)
    assert not only_theirs(str(tmp_path), MINE), "the tests' own temporary folders sit in a shared one"


def test_a_link_is_judged_by_where_it_leads(private_tmp: Path, tmp_path: Path) -> None:
    inward = tmp_path / "inward"
    inward.symlink_to(private_tmp)
    assert only_theirs(str(inward / "x"), MINE), "the path used is the real one, in a private folder"
    outward = private_tmp / "outward"
    outward.symlink_to(tmp_path)
    assert not only_theirs(str(outward / "x"), MINE)
    (private_tmp / "file").write_text("")
    assert not only_theirs(str(private_tmp / "file" / "x"), MINE), "a file is no folder"



def test_a_folder_too_deep_or_too_long_under_a_root_is_refused_before_any_name_is_opened(tmp_path: Path) -> None:
    from numapin.base.files import MAX_DEPTH, MAX_PATH

    deep = "/" + "/".join(["d"] * (MAX_DEPTH + 1))
    long = "/" + "x" * MAX_PATH
    root = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        for path in (deep, long):
            with pytest.raises(PermissionError, match="not looked into"):
                Folder.inside(root, path, {os.geteuid()})
        (tmp_path / "a" / "b").mkdir(parents=True)
        with Folder.inside(root, "/a/b", {os.geteuid()}) as folder:  # a plain one still opens
            assert folder.names() == []
    finally:
        os.close(root)
