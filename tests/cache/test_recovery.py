"""What keeps a cache usable when something goes wrong, on its own: SQLite's error codes read, a damaged
file recognised, moved aside or deleted, and statements retried while another run holds the lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from novelfind.cache import FeatureCache, recovery
from novelfind.cache.recovery import (
    SQLITE_BUSY,
    SQLITE_CORRUPT,
    SQLITE_FULL,
    SQLITE_NOTADB,
    CacheWriteError,
    damage,
    errorcode,
    file_identity,
    is_damage,
    move_aside,
    open_error,
    remove_damaged,
    retry_busy,
)
from novelfind.errors import CacheError


def coded(message: str, code: int | None = None, kind: type = sqlite3.OperationalError) -> sqlite3.Error:
    err = kind(message)
    if code is not None:
        err.sqlite_errorcode = code
    return err


def test_the_primary_code_is_read_from_the_error_or_else_from_its_words():
    assert errorcode(coded("whatever", SQLITE_BUSY | (1 << 8))) == SQLITE_BUSY  # SQLITE_BUSY_RECOVERY
    assert errorcode(coded("whatever", SQLITE_CORRUPT)) == SQLITE_CORRUPT
    assert errorcode(coded("database or disk is full")) == SQLITE_FULL
    assert errorcode(coded("Database is LOCKED")) == SQLITE_BUSY
    assert errorcode(coded("file is not a database")) == SQLITE_NOTADB
    assert errorcode(coded("no such table: x")) is None
    assert is_damage(coded("database disk image is malformed"))
    assert is_damage(coded("file is not a database"))
    assert not is_damage(coded("database is locked"))


def test_damage_is_read_only_and_says_why(tmp_path):
    missing = tmp_path / "missing.sqlite"
    assert damage(missing) is None and not missing.exists()  # nothing created
    sound = tmp_path / "sound.sqlite"
    FeatureCache(sound, "m1").close()
    assert damage(sound) is None
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is no database" * 100)
    assert damage(garbage) == "file is not a database"
    assert garbage.read_bytes() == b"this is no database" * 100  # untouched
    assert damage(tmp_path) is None  # a folder is no damaged file


def test_a_damaged_file_is_moved_aside_with_its_wal_and_its_index_dropped(tmp_path):
    path = tmp_path / "features.sqlite"
    for suffix, data in (("", b"main"), ("-wal", b"wal"), ("-shm", b"shm")):
        Path(f"{path}{suffix}").write_bytes(data)
    target = move_aside(path, file_identity(path))
    assert target is not None and target.parent == tmp_path
    assert target.name.startswith("features.sqlite.corrupt-") and target.name.endswith("Z")
    assert target.read_bytes() == b"main"
    assert Path(f"{target}-wal").read_bytes() == b"wal"
    assert not path.exists() and not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    assert not Path(f"{target}-shm").exists()


def test_a_file_replaced_or_gone_meanwhile_is_left_to_whoever_replaced_it(tmp_path):
    path = tmp_path / "features.sqlite"
    path.write_bytes(b"old")
    identity = file_identity(path)
    replacement = tmp_path / "new"
    replacement.write_bytes(b"new")
    replacement.replace(path)  # another run recovered it first: another inode
    assert file_identity(path) != identity
    assert move_aside(path, identity) is None
    assert path.read_bytes() == b"new"
    assert move_aside(path, None) is None and path.exists()
    assert file_identity(tmp_path / "none") is None


def test_remove_damaged_deletes_the_file_and_whatever_of_its_companions_exist(tmp_path):
    path = tmp_path / "features.sqlite"
    for suffix in ("", "-wal", "-journal"):
        Path(f"{path}{suffix}").write_bytes(b"x")
    keep = tmp_path / "features.sqlite-other"
    keep.write_bytes(b"x")
    remove_damaged(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [keep.name]
    remove_damaged(path)  # nothing left: nothing to do


def test_open_errors_say_what_is_wrong(tmp_path):
    path = tmp_path / "features.sqlite"
    full = open_error(path, coded("database or disk is full"))
    assert str(full) == f"the disk holding the feature cache {path} is full"
    readonly = open_error(path, coded("attempt to write a readonly database"))
    assert str(readonly) == f"cannot write the feature cache {path}: attempt to write a readonly database"
    other = open_error(path, coded("disk I/O error"))
    assert str(other) == f"cannot open the feature cache {path}: disk I/O error"
    assert all(type(e) is CacheError for e in (full, readonly, other))
    assert CacheWriteError("x").disk_full is False and CacheWriteError("x", disk_full=True).disk_full


def test_busy_statements_are_retried_and_other_errors_are_not(monkeypatch):
    monkeypatch.setattr(recovery.time, "sleep", lambda s: None)
    tries: list[int] = []

    def busy_twice() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise coded("database is locked")
        return "done"

    assert retry_busy(busy_twice, timeout=60) == "done" and len(tries) == 3

    def broken() -> None:
        tries.append(1)
        raise coded("no such table: x")

    tries.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_busy(broken, timeout=60)
    assert len(tries) == 1


def test_a_lock_held_past_the_timeout_is_passed_on(monkeypatch):
    clock = iter(range(0, 1000, 10))  # each look at the clock, ten seconds later
    monkeypatch.setattr(recovery.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(recovery.time, "sleep", lambda s: None)
    tries: list[int] = []

    def always_busy() -> None:
        tries.append(1)
        raise coded("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_busy(always_busy, timeout=25)
    assert len(tries) == 3  # at 10, 20 and 30 s of a 25 s limit that began at 0
