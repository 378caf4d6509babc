"""Runs as cron makes them: the same line night after night, week after week, and a re-run by hand.

A broken file is reported once (then counted as known, exit 0) and `ignore` silences it; a re-run of the
Sunday line in the same week keeps its tags and its list; `--min-score` keeps a quiet week quiet; a list
that a run empties says so even with -q.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from click.testing import CliRunner
from common import make_photo, missing_prerequisite
from PIL import Image
from sidecars import read_sidecar

import novelfind
from novelfind.cli.console import human_size
from novelfind.cli.group import cli
from novelfind.media.sidecars import sidecar_for
from novelfind.outputs import xmp


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def truncated_jpeg(path: Path) -> Path:
    """A JPEG cut off in the middle, as a copy interrupted by a full disk leaves it."""
    whole = make_photo(path.with_name("whole_" + path.name), (90, 90, 90), seed=5)
    path.write_bytes(whole.read_bytes()[:300])
    whole.unlink()
    return path


def nightly(root: Path, out: Path, *extra):
    """The README's nightly line (the week's new photos, ranked, as JSON), with the fake model."""
    return run(
        "scan",
        root,
        "-k",
        50,
        "--since",
        "2000-01-01",
        "--include-ignored",
        "-q",
        "--format",
        "json",
        "-o",
        out,
        "--no-wait",
        *extra,
    )


def test_a_broken_file_is_reported_once_then_counted_as_known(library, fake_extractor, tmp_path):
    root = library["root"]
    bad = truncated_jpeg(root / "trip0" / "broken.jpg")
    out = tmp_path / "week.json"
    first = nightly(root, out)
    assert first.exit_code == 3
    assert first.stderr.count(f"warning: cannot read {bad}") == 1
    assert first.stdout == ""
    second = nightly(root, out)
    assert (second.exit_code, second.stdout, second.stderr) == (0, "", "")
    loud = run("scan", root, "-k", 3)
    assert loud.exit_code == 0
    assert "cannot read" not in loud.stderr
    assert ", 0 failed, 1 known unreadable (novelfind failures)" in loud.stderr
    # the JSON list still names it, a file that is still unreadable
    assert '"failures"' in out.read_text() and str(bad) in out.read_text()
    listed = run("failures")
    assert listed.exit_code == 0
    (row,) = [line.split("\t") for line in listed.stdout.splitlines()]
    assert row[1] == str(bad) and row[2]
    # a changed file is tried again, and reported again while it still fails
    os.utime(bad, (1_700_000_000, 1_700_000_000))
    changed = nightly(root, out)
    assert changed.exit_code == 3
    assert changed.stderr.count(f"warning: cannot read {bad}") == 1
    assert nightly(root, out).exit_code == 0
    # --forget: the next scan reports it again
    forgot = run("failures", "--forget")
    assert (forgot.exit_code, forgot.stdout) == (0, "forgotten\t1\n")
    assert run("failures").stdout == ""
    again = nightly(root, out)
    assert again.exit_code == 3 and f"cannot read {bad}" in again.stderr


def test_a_new_broken_file_is_reported_beside_a_known_one(library, fake_extractor):
    root = library["root"]
    truncated_jpeg(root / "old.jpg")
    assert run("scan", root, "-q").exit_code == 3
    assert run("scan", root, "-q").exit_code == 0
    new = truncated_jpeg(root / "trip1" / "new.jpg")
    result = run("scan", root, "-k", 3)
    assert result.exit_code == 3
    assert result.stderr.count("warning: cannot read") == 1 and f"cannot read {new}" in result.stderr
    assert ", 1 failed, 1 known unreadable" in result.stderr


def test_a_repaired_file_is_forgotten(library, fake_extractor):
    root = library["root"]
    bad = truncated_jpeg(root / "broken.jpg")
    assert run("scan", root, "-q").exit_code == 3
    make_photo(bad, (10, 200, 10), seed=9)  # copied over again, whole
    assert run("scan", root, "-q").exit_code == 0
    assert run("failures").stdout == ""
    bad.write_bytes(bad.read_bytes()[:200])  # and broken again: a new failure
    result = run("scan", root, "-q")
    assert result.exit_code == 3 and f"cannot read {bad}" in result.stderr


def test_ignore_silences_a_broken_file(library, fake_extractor):
    root = library["root"]
    bad = truncated_jpeg(root / "trip2" / "broken.jpg")
    added = run("ignore", bad)
    assert (added.exit_code, added.stdout) == (0, "added\t1\n")
    for cache in ("--no-cache", None):  # also without the cache's memory
        result = run("scan", root, "-k", 3, *([cache] if cache else []))
        assert result.exit_code == 0, result.stderr
        assert "cannot read" not in result.stderr and str(bad) not in result.stdout
        assert ", 0 failed, 1 ignored" in result.stderr
    assert run("failures").stdout == ""
    removed = run("ignore", "--remove", bad)
    assert removed.stdout == "removed\t1\n"
    assert run("scan", root, "-q").exit_code == 3


def test_the_nightly_line_with_a_broken_file_then_ignore(library, fake_extractor, tmp_path):
    """The cron simulation: night 1 reports the broken file (cron mails once), night 2 is silent, and
    `ignore` takes it out of the summary's count too."""
    root = library["root"]
    bad = truncated_jpeg(root / "trip1" / "IMG_9999.jpg")
    out = tmp_path / "novel" / "week.json"
    out.parent.mkdir()
    night1 = nightly(root, out)
    assert night1.exit_code == 3
    (line,) = night1.stderr.splitlines()  # one line for cron to mail: the broken file
    assert line.startswith(f"warning: cannot read {bad}: ")
    night2 = nightly(root, out)
    assert (night2.exit_code, night2.stdout, night2.stderr) == (0, "", "")
    assert run("ignore", bad).exit_code == 0
    night3 = nightly(root, out)
    assert (night3.exit_code, night3.stdout, night3.stderr) == (0, "", "")
    assert str(bad) not in out.read_text()


def test_a_cache_without_the_failures_table_is_upgraded(library, fake_extractor, tmp_path):
    root = library["root"]
    cache = tmp_path / "old.sqlite"
    assert run("scan", root, "-q", "--cache", cache).exit_code == 0
    with sqlite3.connect(cache) as conn:  # as an earlier version wrote it
        conn.execute("DROP TABLE failures")
    bad = truncated_jpeg(root / "broken.jpg")
    assert run("scan", root, "-q", "--cache", cache).exit_code == 3
    assert run("scan", root, "-q", "--cache", cache).exit_code == 0
    assert str(bad) in run("failures", "--cache", cache).stdout


def test_failures_takes_paths_only_to_forget(library, fake_extractor):
    result = run("failures", library["root"])
    assert result.exit_code == 2 and result.stderr.startswith("error: PATHS are for --forget")
    root = library["root"]
    one, two = truncated_jpeg(root / "a" / "one.jpg"), truncated_jpeg(root / "b" / "two.jpg")
    run("scan", root, "-q")
    assert run("failures", "--forget", root / "a").stdout == "forgotten\t1\n"
    assert [line.split("\t")[1] for line in run("failures").stdout.splitlines()] == [str(two)]
    assert str(one) not in run("failures").stdout


# --------------------------------------------------------------------------- the Sunday line


def keywords(photo: Path) -> list[str]:
    sidecar = sidecar_for(photo)
    return read_sidecar(sidecar).get(xmp.SUBJECT, []) if sidecar.exists() else []


def sunday(root: Path, out: Path, since: str, *extra):
    return run("scan", root, "-k", 2, "--since", since, "--xmp", "--ignore-picks", "-q", "-o", out, *extra)


def taken_on(path: Path, colour: tuple[int, int, int], when: str, seed: int) -> Path:
    """A photo whose Exif says it was taken ``when`` (``YYYY:MM:DD HH:MM:SS``), its file time old."""
    made = make_photo(path.with_suffix(".png"), colour, seed=seed)
    img = Image.open(made)
    img.load()
    made.unlink()
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = when  # DateTimeOriginal
    img.save(path, exif=exif.tobytes())
    os.utime(path, (OLD, OLD))  # only the capture date says it is new
    return path


OLD = 1_500_000_000  # 2017: the file time of every photo; the week's are new by their capture date


def state(out: Path, photos: list[Path], ignore_list: Path) -> tuple:
    """What a run of the line may change: the list (its bytes and its file), the tags, the ignore list."""
    return (
        out.read_bytes(),
        out.stat().st_mtime_ns,
        {p.name: keywords(p) for p in photos},
        ignore_list.read_bytes(),
    )


def test_the_sunday_line_run_again_with_nothing_new_leaves_everything_as_it_was(
    library, fake_extractor, tmp_path, isolated_user_dirs
):
    """The README's Sunday line, four times in one week (by cron, then by hand: ``--since`` moves with the
    day), then with new photos, then the next week."""
    if not xmp.available():
        missing_prerequisite("XMP tests need python-exiv2 (pip install '.[test]')")
    root = library["root"]
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (OLD, OLD))
    colours = [(250, 250, 250), (250, 5, 5), (5, 250, 5), (250, 250, 5), (5, 5, 5), (250, 5, 250)]
    week = [
        taken_on(root / "2024" / f"IMG_{i}.jpg", colour, f"2024:11:{24 + i % 3} 10:00:00", seed=70 + i)
        for i, colour in enumerate(colours)
    ]
    out = tmp_path / "tagged.tsv"
    ignore_list = isolated_user_dirs / "data" / "novelfind" / "ignored.json"
    first = sunday(root, out, "2024-11-22")
    assert (first.exit_code, first.stdout, first.stderr) == (0, "", "")
    picked = {Path(line.split("\t")[2]) for line in out.read_text().splitlines()}
    assert len(picked) == 2 and picked <= set(week)
    assert {p for p in week if keywords(p) == ["novel"]} == picked
    after_first = state(out, week, ignore_list)
    # the same week, nothing new: three more runs, each a day later, leave the list, the tags and the
    # ignore list as they were (before, each tagged the next photos down the ranking)
    for since in ("2024-11-23", "2024-11-23", "2024-11-24"):
        again = sunday(root, out, since)
        assert (again.exit_code, again.stdout, again.stderr) == (0, "", "")
        assert state(out, week, ignore_list) == after_first
    # by hand, without -q, it says why, naming the capture dates
    by_hand = run("scan", root, "-k", 2, "--since", "2024-11-22", "--xmp", "--ignore-picks", "-o", out)
    assert by_hand.exit_code == 0
    assert (
        "note: nothing new: the 6 photos taken since 2024-11-22 00:00:00 were all ranked by an earlier run "
        f"of this line or put on the ignore list; left as they were: {out}, the XMP tags"
    ) in by_hand.stderr
    assert state(out, week, ignore_list) == after_first
    # new photos in the same week: those are ranked (against the whole library) and picked; the photos
    # the line already ranked are not picked again, and this week's earlier picks keep their tags
    new = [
        taken_on(root / "2024" / f"IMG_new{i}.jpg", colour, "2024:11:27 09:00:00", seed=90 + i)
        for i, colour in enumerate([(5, 250, 250), (128, 64, 0), (0, 64, 128)])
    ]
    with_new = sunday(root, out, "2024-11-22")
    assert (with_new.exit_code, with_new.stdout, with_new.stderr) == (0, "", "")
    newly = {Path(line.split("\t")[2]) for line in out.read_text().splitlines()}
    assert len(newly) == 2 and newly <= set(new)
    assert {p for p in week + new if keywords(p) == ["novel"]} == picked | newly
    settled = state(out, week + new, ignore_list)
    assert sunday(root, out, "2024-11-23").stderr == "" and state(out, week + new, ignore_list) == settled
    # the next week: its photos are picked, last week's picks lose their tags
    next_week = [
        taken_on(root / "2024" / f"IMG_dec{i}.jpg", colour, "2024:12:02 12:00:00", seed=110 + i)
        for i, colour in enumerate([(90, 20, 160), (160, 90, 20)])
    ]
    following = sunday(root, out, "2024-11-30")
    assert (following.exit_code, following.stderr) == (0, "")
    assert {Path(line.split("\t")[2]) for line in out.read_text().splitlines()} == set(next_week)
    assert all(keywords(p) == ["novel"] for p in next_week)
    assert all(keywords(p) == [] for p in week + new)


def test_a_line_is_its_folders_and_options_but_since(library, fake_extractor, tmp_path):
    """Another line over the same photos (another -k, another list) ranks them afresh; the Sunday line
    and a by-hand run of it with another --since are one line."""
    root = library["root"]
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (OLD, OLD))
    week = [
        taken_on(root / "2024" / f"IMG_{i}.jpg", colour, "2024:11:25 10:00:00", seed=70 + i)
        for i, colour in enumerate([(250, 250, 250), (250, 5, 5), (5, 250, 5)])
    ]
    out = tmp_path / "a.tsv"
    line = ["scan", root, "--since", "2024-11-22", "--ignore-picks", "-q", "-o", out]
    assert run(*line, "-k", 1).exit_code == 0
    (first,) = [Path(x.split("\t")[2]) for x in out.read_text().splitlines()]
    listed = out.read_bytes()
    assert run(*line[:-1], tmp_path / "b.tsv", "-k", 1).exit_code == 0  # another output: another line
    (second,) = [Path(x.split("\t")[2]) for x in (tmp_path / "b.tsv").read_text().splitlines()]
    assert second != first and {first, second} <= set(week)
    assert run(*line, "-k", 1, "--since", "2024-11-24").exit_code == 0  # the same line, a day later
    assert out.read_bytes() == listed


def test_a_run_that_empties_a_list_says_so_even_quiet(library, fake_extractor, tmp_path):
    out = tmp_path / "week.tsv"
    root = library["root"]
    assert run("scan", root, "-k", 3, "-q", "-o", out).exit_code == 0
    assert len(out.read_text().splitlines()) == 3
    empty = run("scan", root, "-k", 3, "-q", "-o", out, "--since", "2100-01-01")
    assert empty.exit_code == 0
    assert empty.stderr == (
        f"note: {out} now lists no picks (it listed 3 picks): no photo taken since "
        "2100-01-01 00:00:00 to rank\n"
    )
    assert out.read_text() == ""
    # the next empty week has nothing to empty: silent
    again = run("scan", root, "-k", 3, "-q", "-o", out, "--since", "2100-01-01")
    assert (again.exit_code, again.stderr) == (0, "")


# --------------------------------------------------------------------------- --min-score


def test_min_score_keeps_only_picks_that_reach_it(library, fake_extractor):
    root = library["root"]
    every = novelfind.scan(root, k=10, cache=False)
    scores = [p.score for p in every.picks]
    cut = (scores[2] + scores[3]) / 2  # between the third and the fourth
    result = run("scan", root, "-k", 10, "--min-score", cut)
    assert result.exit_code == 0
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [1, 2, 3]
    assert all(float(r[1]) >= cut for r in rows)
    api = novelfind.scan(root, k=10, cache=False, min_score=cut)
    assert [p.path for p in api.picks] == [p.path for p in every.picks[:3]]


def test_a_week_with_no_odd_photo_prints_nothing(library, fake_extractor):
    result = run("scan", library["root"], "-q", "--min-score", 2)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_min_score_must_be_a_number(library, fake_extractor):
    result = run("scan", library["root"], "--min-score", "nan")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--min-score" in result.stderr and result.stderr.startswith("error: ")


def test_cache_info_says_what_it_counts(library, fake_extractor, tmp_path):
    cache = tmp_path / "features.sqlite"
    root = library["root"]
    truncated_jpeg(root / "broken.jpg")
    (root / "copy").mkdir()
    (root / "copy" / "IMG_0000.jpg").write_bytes(library["ordinary"][0].read_bytes())  # same content
    assert run("scan", root, "-q", "--cache", cache).exit_code == 3
    info = run("cache", "info", "--cache", cache)
    assert info.exit_code == 0
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in info.stdout.splitlines()}
    assert lines["vectors"][0] == "33" and "one per distinct photo content" in lines["vectors"][1]
    assert lines["files"][0] == "34" and "copies of a photo share a vector" in lines["files"][1]
    assert lines["unreadable"][0] == "1"
    size, raw = lines["size"]
    count, words = raw.split(" ", 1)
    assert words == "bytes on disk" and int(count) > 10_000
    number, unit = size.split(" ")
    assert unit in ("KB", "MB") and abs(float(number) * {"KB": 1e3, "MB": 1e6}[unit] - int(count)) <= 51e3
    assert size == human_size(int(count))


def test_human_size():
    assert [human_size(n) for n in (0, 999, 1000, 1_234_567, 5_000_000_000, 3 * 10**13)] == [
        "0 B",
        "999 B",
        "1.0 KB",
        "1.2 MB",
        "5.0 GB",
        "30.0 TB",
    ]


def test_ignore_silences_a_file_whose_bytes_cannot_be_read(library, fake_extractor, monkeypatch):
    """A file the scan may not open (permission denied; faked here, since tests may run as root) is put
    on the list by its path, size and time, with a note, and the scan skips it without a word."""
    import novelfind.media.ignore

    root = library["root"]
    locked = truncated_jpeg(root / "trip0" / "locked.jpg")
    real = novelfind.media.ignore.digest_file

    def digest_file(path):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(novelfind.media.ignore, "digest_file", digest_file)
    added = run("ignore", locked)
    assert (added.exit_code, added.stdout) == (0, "added\t1\n")
    assert added.stderr == (
        f"note: {locked} cannot be read (Permission denied): ignored by its path, size "
        "and time, until it changes or moves\n"
    )
    result = run("scan", root, "-k", 3, "--no-cache")
    assert result.exit_code == 0 and "cannot read" not in result.stderr
    os.utime(locked, (1_700_000_000, 1_700_000_000))  # changed: no longer the file that was ignored
    assert run("scan", root, "-q", "--no-cache").exit_code == 3
    assert run("ignore", "--remove", locked).stdout == "removed\t1\n"
