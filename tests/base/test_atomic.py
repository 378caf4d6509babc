"""Atomic writes (``novelfind.base.atomic``): the old file or the new one, never half of one, no temp left."""

from __future__ import annotations

import os
import stat

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


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize("planted", [0o666, 0o640, 0o6777, 0o000])
def test_the_mode_is_novelfind_s_never_the_replaced_file_s(tmp_path, umask_022, planted):
    """A file planted under an output's name (0666, setuid) lends the new file nothing: it is private."""
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(planted)
    write_atomic(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "new"
    write_atomic(target, "shared", mode=atomic.output_mode(shared=True))
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_new_files_are_private_and_outputs_shared_only_when_asked(tmp_path, umask_022):
    write_atomic(tmp_path / "state.json", "x")
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    assert atomic.output_mode() == 0o600 and atomic.output_mode(shared=True) == 0o644
    os.umask(0o077)
    assert atomic.output_mode(shared=True) == 0o600  # the umask is still the user's say
    with atomic.replacing(tmp_path / "model.onnx") as tmp:
        tmp.write_bytes(b"m")
    assert stat.S_IMODE((tmp_path / "model.onnx").stat().st_mode) == 0o600


def test_write_atomic_never_follows_a_symlink(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    real.chmod(0o600)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with pytest.raises(OutputError) as refused:
        write_atomic(link, "new")
    assert (
        str(refused.value)
        == f"cannot write {link}: it is a symbolic link novelfind did not create (not followed)"
    )
    assert link.is_symlink() and real.read_text() == "old" and stat.S_IMODE(real.stat().st_mode) == 0o600


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
