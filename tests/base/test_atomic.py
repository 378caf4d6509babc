"""Atomic writes (``novelfind.base.atomic``): the old file or the new one, never half of one, no temp left."""

from __future__ import annotations

import os

import pytest

from novelfind.base import atomic
from novelfind.base.atomic import write_atomic
from novelfind.errors import OutputError

# --- write_atomic ------------------------------------------------------------------------------


def test_write_atomic_writes_and_replaces(tmp_path):
    target = tmp_path / "out.tsv"
    write_atomic(target, "first\n")
    write_atomic(target, b"second\n")
    assert target.read_bytes() == b"second\n"
    assert os.listdir(tmp_path) == ["out.tsv"]


def test_write_atomic_keeps_mode_of_existing_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.stat().st_mode & 0o777 == 0o640


def test_write_atomic_new_file_is_not_private(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644


def test_write_atomic_follows_symlink_only_when_asked(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with pytest.raises(OutputError, match=r"link\.txt: it is a symbolic link novelfind did not create"):
        write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "old"
    write_atomic(link, "new", follow_link=True)
    assert link.is_symlink() and real.read_text() == "new"


def test_write_atomic_missing_folder_is_one_line_output_error(tmp_path):
    target = tmp_path / "nope" / "out.txt"
    with pytest.raises(OutputError) as err:
        write_atomic(target, "x")
    assert str(err.value) == f"cannot write {target}: no such folder {target.parent}"


def test_write_atomic_to_a_folder_fails(tmp_path):
    with pytest.raises(OutputError, match="it is a folder"):
        write_atomic(tmp_path, "x")


def test_write_atomic_failure_leaves_no_temp_and_keeps_old(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def broken_rename(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "rename", broken_rename)
    with pytest.raises(OutputError, match="No space left on device"):
        write_atomic(target, "new")
    assert os.listdir(tmp_path) == ["out.txt"] and target.read_text() == "old"


def test_write_atomic_interrupted_leaves_no_temp(tmp_path, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "out.txt", "x")
    assert os.listdir(tmp_path) == []
