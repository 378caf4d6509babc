"""Hostile stores (docs/security.md, "Stores: the caches and the model"): a feature cache or thumbnail
cache planted or trapped by someone who can write the folders beside the library (uid 1000, while root
runs the scan from cron), and hostile rows in a cache of the user's. Each attack is refused by name with
one line, or read as a missing row; none hangs a run (the ones that could are run in a child process
under a time limit), floods the memory or the disk, or ends in an internal error."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import ROOT, make_photo

from novelfind.cache import FeatureCache, guard
from novelfind.cli.group import cli
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile
from novelfind.outputs import thumbnails
from novelfind.outputs.thumbnails import THUMBNAIL_CACHE_NAME, ThumbnailCache

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
ATTACKER = 1000  # the uid that can write the folders beside the library
JPEG = b"\xff\xd8" + b"\x00" * 30  # what a kept thumbnail looks like to the checks


def nf(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def bounded(code: str, *args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, killed after ``timeout`` s: a store that blocks SQLite (a
    FIFO beside it) fails the test instead of holding the suite."""
    try:
        return subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run hung (killed after {timeout} s)")


def planted_by_attacker(path: Path) -> None:
    """Make ``path`` the attacker's, as it would be had uid 1000 made it (as root: really theirs)."""
    if os.geteuid() == 0:
        os.chown(path, ATTACKER, ATTACKER)


def plant(cache: Path, *statements: str, params: tuple = ()) -> None:
    """Edit a store as someone who can write it would, with SQLite itself."""
    conn = sqlite3.connect(cache)
    try:
        for sql in statements:
            conn.execute(sql, params if "?" in sql else ())
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
def library(tmp_path) -> Path:
    root = tmp_path / "lib"
    for i in range(6):
        make_photo(root / f"IMG_{i:04d}.jpg", (40 + 30 * i, 90, 200 - 25 * i), seed=i, size=(64, 48))
    return root


@pytest.fixture
def shared(tmp_path) -> Path:
    """A cache folder uid 1000 can write (mode 0777), as a shared ``~/.cache`` or cache folder is."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


@pytest.fixture
def mine(tmp_path) -> Path:
    """A cache folder of the user's alone."""
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    return folder


# --------------------------------------------------------------------------- where a store lies, whose it is


def test_new_stores_and_their_side_files_are_the_users_alone(tmp_path):
    old = os.umask(0o022)  # the usual umask: files 0644 unless novelfind says otherwise
    try:
        folder = tmp_path / "new" / "cache"
        path = folder / "features.sqlite"
        with FeatureCache(path, "m") as cache:
            cache.put_many([(ImageFile(Path("/lib/a.jpg"), 1, 2), "d", np.ones(8, np.float32))])
            made = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
        assert made == {"features.sqlite": 0o600, "features.sqlite-wal": 0o600, "features.sqlite-shm": 0o600}
        assert folder.stat().st_mode & 0o777 == 0o700  # the folder novelfind made
        with ThumbnailCache(folder / THUMBNAIL_CACHE_NAME) as kept:
            kept.put({(path, 96, None): JPEG}, {})
        assert (folder / THUMBNAIL_CACHE_NAME).stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_a_feature_cache_in_a_folder_others_can_write_is_refused_and_nothing_is_made(shared):
    with pytest.raises(guard.StoreRefused) as refused:
        FeatureCache(shared / "features.sqlite", "m")
    assert str(refused.value) == (
        f"the feature cache {shared / 'features.sqlite'} is in a folder others can write ({shared} can be "
        "written by everyone); not used: keep it in a folder only you can write"
    )
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("command", ["info", "prune", "clear"])
def test_the_cache_commands_refuse_a_cache_in_a_shared_folder_and_leave_it(mine, shared, command):
    FeatureCache(mine / "features.sqlite", "m").close()
    moved = shared / "features.sqlite"
    os.rename(mine / "features.sqlite", moved)
    before = moved.read_bytes()
    result = nf("cache", command, "--cache", moved)
    assert result.exit_code == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "in a folder others can write" in result.stderr
    assert moved.read_bytes() == before and sorted(p.name for p in shared.iterdir()) == ["features.sqlite"]


def test_a_planted_thumbnail_cache_receives_nothing(shared, library):
    """An empty 644 file planted by uid 1000 at ``thumbnails.sqlite`` used to receive the thumbnails of
    everyone's photos."""
    planted = shared / THUMBNAIL_CACHE_NAME
    planted.touch(mode=0o644)
    planted_by_attacker(planted)
    warned: list[str] = []
    with ThumbnailCache(planted, on_warning=warned.append) as cache:
        cache.put({(library / "IMG_0000.jpg", 96, None): JPEG}, {})
        assert cache.get([(library / "IMG_0000.jpg", 96, None)]) == ({}, {})
    assert len(warned) == 1 and str(planted) in warned[0] and "not used" in warned[0]
    assert planted.stat().st_size == 0 and sorted(p.name for p in shared.iterdir()) == [THUMBNAIL_CACHE_NAME]


def test_a_scan_with_its_caches_in_a_shared_folder_warns_once_for_each_and_keeps_nothing_there(
    fake_extractor, library, shared, tmp_path
):
    planted = shared / THUMBNAIL_CACHE_NAME
    planted.touch(mode=0o644)
    planted_by_attacker(planted)
    report = tmp_path / "report.html"
    result = nf("scan", library, "--k", 2, "--cache", shared / "features.sqlite", "--report", report)
    assert result.exit_code == 0, result.stderr
    warned = warnings_of(result.stderr)
    assert len(warned) == 2, warned
    assert "the feature cache" in warned[0] and "running without the cache" in warned[0]
    assert f"the thumbnail cache {planted}" in warned[1] and "others can write" in warned[1]
    assert planted.stat().st_size == 0 and sorted(p.name for p in shared.iterdir()) == [THUMBNAIL_CACHE_NAME]
    assert report.read_text(encoding="utf-8").count('<img src="data:image/jpeg;base64,') >= 2


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user is made by chown, as root")
@pytest.mark.parametrize("suffix", ["", "-journal", "-wal"])
def test_a_store_or_side_file_of_another_user_is_refused(mine, suffix):
    path = mine / "features.sqlite"
    FeatureCache(path, "m").close()
    other = path.with_name(path.name + suffix)
    other.touch()
    os.chown(other, ATTACKER, ATTACKER)
    with pytest.raises(guard.StoreRefused, match=r"belongs to another user \(uid 1000\); not used"):
        FeatureCache(path, "m")
    result = nf("cache", "clear", "--cache", path)
    assert result.exit_code == 1 and "belongs to another user" in result.stderr
    assert other.exists() and path.stat().st_size > 0  # left as it is


def test_a_link_beside_the_store_is_refused_and_never_written_through(mine, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's file\n")
    path = mine / "features.sqlite"
    FeatureCache(path, "m").close()
    path.with_name(path.name + "-journal").symlink_to(victim)
    with pytest.raises(guard.StoreRefused, match="is a symbolic link novelfind did not create"):
        FeatureCache(path, "m")
    assert victim.read_bytes() == b"root's file\n"
    link = mine / THUMBNAIL_CACHE_NAME
    link.symlink_to(victim)  # a link at the thumbnail cache itself: never followed
    warned: list[str] = []
    ThumbnailCache(link, on_warning=warned.append).close()
    assert len(warned) == 1 and "symbolic link" in warned[0]
    assert victim.read_bytes() == b"root's file\n"


_OPEN_AND_WRITE = """
import sys
from pathlib import Path
import numpy as np
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile
from novelfind.outputs.thumbnails import ThumbnailCache
from novelfind.cache import FeatureCache
store, path = sys.argv[1], Path(sys.argv[2])
if store == "features":
    try:
        with FeatureCache(path, "m") as cache:
            cache.put_many([(ImageFile(Path("/lib/a.jpg"), 1, 2), "d", np.ones(8, np.float32))])
    except CacheError as err:
        print("refused:", err)
else:
    with ThumbnailCache(path, on_warning=lambda line: print("refused:", line)) as cache:
        cache.put({(Path("/lib/a.jpg"), 96, None): b"\\xff\\xd8jpeg"}, {})
print("done")
"""


@pytest.mark.parametrize("store", ["features", "thumbnails"])
@pytest.mark.parametrize("suffix", ["", "-journal", "-wal", "-shm"])
def test_a_fifo_at_the_store_or_beside_it_is_refused_without_blocking(mine, store, suffix):
    """A FIFO at ``-journal`` held a scan for ever: SQLite opens it to look for a hot journal."""
    path = mine / ("features.sqlite" if store == "features" else THUMBNAIL_CACHE_NAME)
    if suffix:
        made = bounded(_OPEN_AND_WRITE, store, path)  # a store of the user's, written once
        assert made.stdout == "done\n", made.stderr
    os.mkfifo(path.with_name(path.name + suffix))
    result = bounded(_OPEN_AND_WRITE, store, path)
    assert result.returncode == 0, result.stderr
    refused, done = result.stdout.splitlines()
    assert "is not a regular file (a FIFO); not used" in refused and done == "done"
    assert str(path.with_name(path.name + suffix)) in refused


# --------------------------------------------------------------------------- what a thumbnail cache holds


@pytest.fixture
def kept(mine, library) -> tuple[Path, Path]:
    """(a thumbnail cache of the user's holding one good thumbnail, that photo)."""
    photo = library / "IMG_0000.jpg"
    with ThumbnailCache(mine / THUMBNAIL_CACHE_NAME) as cache:
        cache.put({(photo, 96, None): JPEG}, {})
    return mine / THUMBNAIL_CACHE_NAME, photo


@pytest.mark.parametrize(
    "planted",
    [
        f"CREATE TRIGGER hang AFTER INSERT ON thumbs BEGIN {ENDLESS}; END",
        f"CREATE VIEW everything AS {ENDLESS}",
        "CREATE TABLE notes (text TEXT)",
    ],
)
def test_a_thumbnail_cache_with_a_schema_novelfind_did_not_make_is_passed_over(kept, planted, monkeypatch):
    monkeypatch.setattr(thumbnails, "THUMBNAIL_QUERY_TIMEOUT_S", 5.0)  # a regression stops, never hangs
    path, photo = kept
    plant(path, planted)
    before = path.read_bytes()
    warned: list[str] = []
    with ThumbnailCache(path, on_warning=warned.append) as cache:
        assert cache.conn is None
        cache.put({(photo, 160, None): JPEG}, {})  # nothing written, no trigger fired
    assert len(warned) == 1 and "that novelfind did not create; not used" in warned[0]
    assert path.read_bytes() == before


def test_a_trigger_added_while_the_thumbnail_cache_is_open_never_fires(kept):
    path, photo = kept
    with ThumbnailCache(path) as cache:
        plant(path, "CREATE TRIGGER fire AFTER INSERT ON thumbs BEGIN SELECT raise(FAIL, 'it ran'); END")
        cache.put({(photo, 160, None): JPEG}, {})
        assert cache.get([(photo, 160, None)]) == ({}, {})  # refused under the write lock: not kept


def test_every_thumbnail_statement_runs_under_a_clock(kept):
    path, _ = kept
    with ThumbnailCache(path) as cache:
        assert cache.conn.query_timeout == thumbnails.THUMBNAIL_QUERY_TIMEOUT_S
        cache.conn.query_timeout = 0.2
        with pytest.raises(sqlite3.OperationalError, match="ran longer than 0.2 s"):
            cache.conn.execute(ENDLESS).fetchone()
        assert cache.conn.execute("PRAGMA trusted_schema").fetchone() == (0,)


def test_a_thumbnail_cache_of_another_program_is_passed_over(mine):
    path = mine / THUMBNAIL_CACHE_NAME
    plant(path, "PRAGMA application_id = 1234", "CREATE TABLE thumbs (x)")
    warned: list[str] = []
    ThumbnailCache(path, on_warning=warned.append).close()
    assert len(warned) == 1 and "not one this novelfind made" in warned[0]


def test_a_thumbnail_cache_an_earlier_version_made_is_used(mine, library):
    path = mine / THUMBNAIL_CACHE_NAME
    photo = library / "IMG_0001.jpg"
    st = photo.stat()
    plant(path, thumbnails._THUMBS)  # as the earlier version made it: no mark
    plant(
        path,
        "INSERT INTO thumbs VALUES (?, 96, -1.0, ?, ?, NULL, NULL, ?, 1)",
        params=(os.fsencode(photo), st.st_size, st.st_mtime_ns, JPEG),
    )
    with ThumbnailCache(path) as cache:
        assert cache.get([(photo, 96, None)]) == ({(photo, 96, None): JPEG}, {})
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (thumbnails.THUMBNAIL_APPLICATION_ID,)


HOSTILE_THUMBNAILS = {
    "an integer": "400000000",  # bytes(400000000): 400 MB of zeros, and a 533 MB report
    "text": "'not a picture'",
    "an oversize blob": f"zeroblob({thumbnails.MAX_THUMBNAIL_BYTES * 30})",  # a 30 MiB stand-in for 200 MB
    "a blob that is no JPEG": "x'89504e47'",
}


@pytest.mark.parametrize("jpeg", list(HOSTILE_THUMBNAILS.values()), ids=list(HOSTILE_THUMBNAILS))
def test_a_hostile_thumbnail_row_is_never_fetched_and_is_dropped(kept, library, jpeg, tmp_path):
    path, photo = kept
    st = photo.stat()
    plant(
        path,
        f"INSERT INTO thumbs VALUES (?, 256, -1.0, ?, ?, NULL, NULL, {jpeg}, 1)",
        params=(os.fsencode(photo), st.st_size, st.st_mtime_ns),
    )
    plant(path, "INSERT INTO thumbs VALUES (x'00', 1, 1.0, 'big', 'text', 'w', 'h', x'ffd8', 'when')")
    with ThumbnailCache(path) as cache:
        tracemalloc.start()
        try:
            found, frames = cache.get([(photo, 256, None), (photo, 96, None)])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert found == {(photo, 96, None): JPEG} and frames == {}  # the good row alone
        assert peak < 1 << 20  # the hostile value was never loaded
        cache.put({}, {})  # any write drops what is not of novelfind's shape
        assert cache.conn.execute("SELECT count(*) FROM thumbs").fetchone() == (1,)


def test_a_report_over_a_hostile_thumbnail_cache_makes_its_own_thumbnails(kept, library, tmp_path):
    from novelfind.outputs.report import THUMB_SIZE, write_html_report
    from novelfind.picks import Pick

    path, photo = kept
    st = photo.stat()
    plant(
        path,
        f"INSERT OR REPLACE INTO thumbs VALUES (?, {THUMB_SIZE}, -1.0, ?, ?, NULL, NULL, 400000000, 1)",
        params=(os.fsencode(photo), st.st_size, st.st_mtime_ns),
    )
    out = tmp_path / "r.html"
    write_html_report(out, [Pick(1, 1.0, photo, st.st_size, st.st_mtime_ns)], run={}, thumbnail_cache=path)
    assert out.stat().st_size < 1 << 20  # a page, not 533 MB
    assert out.read_text(encoding="utf-8").count('<img src="data:image/jpeg;base64,') == 1


# --------------------------------------------------------------------------- dates and failures read back


@pytest.fixture
def scanned(fake_extractor, library, mine) -> tuple[Path, Path]:
    cache = mine / "features.sqlite"
    result = nf("scan", library, "--k", 2, "--cache", cache)
    assert result.exit_code == 0, result.stderr
    return library, cache


HOSTILE_DATES = [
    "'yesterday', NULL, 'exif'",  # text where a number belongs
    "1e300, 0, 'exif'",
    "1.6e9, 1000000000000, 'exif'",  # an offset of 1e12 s
    "1e18, NULL, 'exif-local'",  # a local date --since converts through the time zone
    f"1.6e9, NULL, zeroblob({30 << 20})",  # a 30 MiB stand-in for a 200 MB blob
    "zeroblob(1000), NULL, 'exif'",
]


def test_hostile_date_rows_are_no_date_and_are_read_again(scanned):
    library, cache = scanned
    with sqlite3.connect(cache) as conn:
        digests = [row[0] for row in conn.execute("SELECT digest FROM files ORDER BY path")]
    assert len(digests) == len(HOSTILE_DATES)
    for digest, values in zip(digests, HOSTILE_DATES, strict=True):
        plant(cache, f"INSERT OR REPLACE INTO dates VALUES (?, {values})", params=(digest,))
    files = [ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(library.iterdir())]
    with FeatureCache(cache, "m") as opened:
        tracemalloc.start()
        try:
            dates = opened.dates_by_stat(files)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert [hit for _, hit in dates] == [None] * len(files)  # each a missing date: its header is read again
    assert peak < 1 << 20
    result = nf("scan", library, "--k", 2, "--cache", cache, "--since", "7d")
    assert result.exit_code == 0, result.stderr
    assert warnings_of(result.stderr) == [] and len(result.stderr) < 1000
    with sqlite3.connect(cache) as conn:  # the rows replaced with what the photos say
        shapes = conn.execute("SELECT typeof(taken), typeof(utc_offset), source FROM dates").fetchall()
    assert len(shapes) == len(HOSTILE_DATES)
    assert all(taken in ("real", "null") and offset in ("integer", "null") for taken, offset, _ in shapes)
    assert {source for _, _, source in shapes} <= {"exif", "exif-local", "raw", "clip", "invalid", "none"}


def test_failures_never_print_a_field_raw(scanned):
    library, cache = scanned
    forged = "\x1b]0;owned\x07\x1b[2J\nerror: forged\t"
    plant(
        cache,
        "INSERT INTO failures VALUES (?, 1, 2, 'truncated', ?)",
        params=(b"/lib/a.jpg", forged + "2026-01-01T00:00:00+00:00"),
    )
    plant(
        cache,
        "INSERT INTO failures VALUES (?, 3, 4, ?, '2026-01-02T00:00:00+00:00')",
        params=(b"/lib/b\x1b[31m.jpg", "bad\x1b[2J\nerror: forged"),
    )
    result = nf("failures", "--cache", cache)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert result.stdout == "2026-01-02T00:00:00+00:00\t/lib/b\\x1b[31m.jpg\tbad\\x1b[2J\\nerror: forged\n"
    with FeatureCache(cache, "m") as opened:  # the forged time is no failure: tried again, then replaced
        opened.record_failures([(b"/lib/a.jpg", 1, 2, "truncated")])
        assert opened.known_failures()[b"/lib/a.jpg"].first_seen[:2] == "20"


def test_a_failure_row_of_another_shape_is_not_fetched(scanned):
    _, cache = scanned
    plant(
        cache,
        f"INSERT INTO failures VALUES (?, 1, 2, zeroblob({30 << 20}), '2026-01-01T00:00:00+00:00')",
        params=(b"/lib/a.jpg",),
    )
    plant(
        cache, "INSERT INTO failures VALUES (?, 'big', 2, 'r', '2026-01-01T00:00:00+00:00')", params=(b"/b",)
    )
    with FeatureCache(cache, "m") as opened:
        tracemalloc.start()
        try:
            known = opened.known_failures()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert known == {} and peak < 1 << 20


def test_a_refused_cache_is_a_cache_error_with_one_line(shared):
    refused = guard.refusal(shared / "features.sqlite", "the feature cache")
    assert refused is not None and "\n" not in refused
    assert issubclass(guard.StoreRefused, CacheError)
