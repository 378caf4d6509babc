"""The run lock, held by real processes: refuse, wait, time out, and free on a crash."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import novelfind.base.lock as lock_mod
from novelfind.base.lock import RunLock, holder_pid
from novelfind.errors import ExitCode, LockedError, NovelfindError

REPO = Path(lock_mod.__file__).resolve().parents[2]

_HOLDER_SCRIPT = """
import sys
from novelfind.base.lock import RunLock
with RunLock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()  # hold until told (or killed)
print("released", flush=True)
"""


class Holder:
    """Another process holding the lock until ``release()`` or ``kill()``."""

    def __init__(self, path: Path):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER_SCRIPT, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout.readline().strip() == "held"
        self.pid = self.proc.pid

    def release(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def holder(tmp_path):
    h = Holder(tmp_path / "cache.sqlite.lock")
    yield h
    h.close()


def test_lock_writes_the_pid_and_clears_it_on_release(tmp_path):
    path = tmp_path / "x.lock"
    with RunLock(path) as lock:
        assert lock.path == path
        assert holder_pid(path) == os.getpid()
    assert path.exists()  # left in place on purpose
    assert holder_pid(path) is None
    with RunLock(path):  # and it can be taken again
        pass


def release_later(holder: Holder, seconds: float = 60) -> threading.Timer:
    """Let the holder go after ``seconds``: a lock call that wrongly waits then gets the lock and the
    test fails, instead of hanging."""
    timer = threading.Timer(seconds, lambda: holder.proc.poll() is None and holder.release())
    timer.start()
    return timer


def test_held_elsewhere_fails_at_once_naming_the_holder(tmp_path, holder):
    guard = release_later(holder)
    try:
        with pytest.raises(LockedError) as info:
            with RunLock(tmp_path / "cache.sqlite.lock", wait=False, label="/data/cache.sqlite"):
                pytest.fail("got a lock another process holds")
    finally:
        guard.cancel()
    assert holder.proc.poll() is None  # refused while the holder still held it
    assert str(info.value) == (
        f"another novelfind run is using /data/cache.sqlite (pid {holder.pid}); use --wait to queue"
    )
    assert info.value.exit_code == ExitCode.BUSY


def test_message_names_the_lock_file_without_a_label(tmp_path, holder):
    with pytest.raises(LockedError, match=rf"using {tmp_path}/cache.sqlite.lock \(pid {holder.pid}\)"):
        RunLock(tmp_path / "cache.sqlite.lock").acquire()


def test_waiting_with_a_timeout_gives_up_naming_who_holds_it(tmp_path, holder):
    guard = release_later(holder)
    started = time.monotonic()
    try:
        with pytest.raises(LockedError) as info:
            RunLock(tmp_path / "cache.sqlite.lock", wait=True, timeout=0.3, label="the list").acquire()
    finally:
        guard.cancel()
    assert time.monotonic() - started >= 0.3  # it did wait
    assert holder.proc.poll() is None
    me = pwd.getpwuid(os.getuid()).pw_name
    assert str(info.value) == (
        f"gave up waiting for the list after 0.3 s: its lock is held by pid {holder.pid} (lock file owned "
        f"by {me}, uid {os.getuid()}); nothing was written to it"
    )


def test_a_shared_file_s_lock_is_waited_for_a_bounded_time(tmp_path, monkeypatch):
    """The ignore list's lock, held by another account's process, makes a run give up after
    ``SHARED_WAIT_S`` (here 0.5 s) instead of waiting for ever: one line, exit code 4."""
    holder = Holder(tmp_path / "list.json.lock")
    guard = release_later(holder)  # without the bound the wait would get the lock then: the test fails
    monkeypatch.setattr(lock_mod, "SHARED_WAIT_S", 0.5)
    try:
        with pytest.raises(LockedError) as info:
            with lock_mod.waiting_lock(tmp_path / "list.json.lock", "the ignore list /x/list.json"):
                pytest.fail("got a lock another process holds")
    finally:
        guard.cancel()
        holder.close()
    assert info.value.exit_code == ExitCode.BUSY and "\n" not in str(info.value)
    assert str(info.value).startswith(
        f"gave up waiting for the ignore list /x/list.json after 0.5 s: its lock is held by pid {holder.pid} "
    )


def test_the_holder_s_pid_is_read_without_following_a_link_or_blocking(tmp_path):
    (tmp_path / "real").write_text("4242\n")
    (tmp_path / "link.lock").symlink_to(tmp_path / "real")
    assert holder_pid(tmp_path / "real") == 4242
    assert holder_pid(tmp_path / "link.lock") is None
    os.mkfifo(tmp_path / "fifo.lock")
    assert holder_pid(tmp_path / "fifo.lock") is None  # an open() of it would wait for a writer


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_waiting_gets_the_lock_when_the_holder_finishes(tmp_path, holder, timeout):
    got = threading.Event()

    def wait_for_it():
        with RunLock(tmp_path / "cache.sqlite.lock", wait=True, timeout=timeout):
            got.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert not got.wait(0.5)  # still queued behind the holder
    holder.release()
    waiter.join(timeout=30)
    assert got.is_set()


def test_a_killed_holder_frees_the_lock(tmp_path, holder):
    holder.kill()
    with RunLock(tmp_path / "cache.sqlite.lock", wait=False) as lock:
        assert holder_pid(lock.path) == os.getpid()


def test_nesting_in_one_process_does_not_deadlock(tmp_path, holder):
    path = tmp_path / "other.lock"
    with RunLock(path):
        with RunLock(path, wait=True):  # would wait for itself forever with plain flock
            pass
        assert holder_pid(path) == os.getpid()  # still held by the outer one
        probe = subprocess.run(
            [sys.executable, "-c", _HOLDER_SCRIPT, str(path)],
            input="\n",
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            timeout=120,  # a hang guard: the probe exits as soon as it has started
            check=False,
        )
        assert "LockedError" in probe.stderr
    assert holder_pid(path) is None


def test_bad_timeout_is_refused(tmp_path):
    with pytest.raises(ValueError, match="timeout must be >= 0 seconds, got -1"):
        RunLock(tmp_path / "x.lock", wait=True, timeout=-1)


def test_uncreatable_lock_file_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        NovelfindError, match=r"^cannot create the lock file .*/file/x.lock: Not a directory$"
    ):
        RunLock(tmp_path / "file" / "x.lock").acquire()


# --- pid_alive ---------------------------------------------------------------------------------


def _kill_raising(error: type[OSError]):
    def kill(pid: int, sig: int) -> None:
        assert sig == 0, "pid_alive must only probe, never signal"
        raise error(pid, "from the test")

    return kill


def test_pid_alive_for_this_process_and_a_reaped_child():
    assert lock_mod.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not lock_mod.pid_alive(child.pid)


def test_another_users_process_is_alive(monkeypatch):
    # os.kill(pid, 0) on a process of another user is refused: the process exists.
    monkeypatch.setattr(lock_mod.os, "kill", _kill_raising(PermissionError))
    assert lock_mod.pid_alive(12345)
    monkeypatch.setattr(lock_mod.os, "kill", _kill_raising(ProcessLookupError))
    assert not lock_mod.pid_alive(12345)
