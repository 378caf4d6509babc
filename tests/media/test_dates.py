"""When each photo was taken (``novelfind.media.dates``): EXIF with and without its offset and sub-seconds, no
EXIF, a reset clock, RAW files, clips, XMP sidecars, a copied library whose file times are not trusted,
the dates kept in the cache, ``--since`` by capture date and in relative forms, and the outputs that say
where each date came from."""

from __future__ import annotations

import calendar
import csv
import io
import json
import os
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo
from PIL import Image

import novelfind
from novelfind import params
from novelfind.base import since
from novelfind.base.since import parse_since
from novelfind.cache import FeatureCache
from novelfind.cli.group import cli
from novelfind.errors import InputError
from novelfind.extract import dating, header_dates
from novelfind.media import dates

DAY = 86400


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0, 0, 0)[:6]))


def exif_photo(
    path: Path,
    when: str | None,
    *,
    subsec: str | None = None,
    offset: str | None = None,
    colour=(90, 90, 90),
    seed: int = 0,
    fmt: str | None = None,
) -> Path:
    """A small photo whose Exif says it was taken ``when`` (``YYYY:MM:DD HH:MM:SS``), as cameras write."""
    source = make_photo(path if fmt is None else path.with_name(path.name + ".png"), colour, seed=seed)
    if when is None:
        return path
    img = Image.open(source)
    img.load()
    if source != path:
        source.unlink()
    exif = Image.Exif()
    ifd = exif.get_ifd(0x8769)
    ifd[0x9003] = when
    if subsec is not None:
        ifd[0x9291] = subsec
    if offset is not None:
        ifd[0x9011] = offset
    img.save(path, fmt, exif=exif.tobytes())
    return path


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


# --------------------------------------------------------------------------------- one file's date


def test_exif_with_offset_and_subseconds_is_the_true_instant(tmp_path):
    path = exif_photo(tmp_path / "a.jpg", "2025:03:02 22:31:07", subsec="400", offset="+01:00")
    taken = dating.embedded_date(path)
    assert taken.source == "exif"
    assert taken.seconds == pytest.approx(utc(2025, 3, 2, 21, 31, 7) + 0.4)
    assert dates.iso(taken.seconds, taken.offset) == "2025-03-02T22:31:07.400+01:00"


def test_exif_without_offset_is_local_wall_clock(tmp_path):
    path = exif_photo(tmp_path / "a.jpg", "2025:03:02 22:31:07")
    taken = dating.embedded_date(path)
    assert (taken.source, taken.offset) == ("exif-local", None)
    assert taken.seconds == utc(2025, 3, 2, 22, 31, 7)  # the wall clock, read as UTC
    assert dates.iso(taken.seconds, taken.offset) == "2025-03-02T22:31:07"


def test_falls_back_to_date_time_digitized_and_ifd0(tmp_path):
    path = make_photo(tmp_path / "d.jpg", (80, 80, 80), seed=1)
    img = Image.open(path)
    img.load()
    exif = Image.Exif()
    exif[0x0132] = "2021:06:01 08:00:00"  # IFD0 DateTime only
    img.save(path, exif=exif.tobytes())
    assert dating.embedded_date(path).seconds == utc(2021, 6, 1, 8, 0, 0)
    exif.get_ifd(0x8769)[0x9004] = "2022:06:01 08:00:00"  # DateTimeDigitized wins over IFD0
    img.save(path, exif=exif.tobytes())
    assert dating.embedded_date(path).seconds == utc(2022, 6, 1, 8, 0, 0)


def test_no_exif_is_no_date(tmp_path):
    screenshot = make_photo(tmp_path / "Screenshot.png", (250, 250, 250), seed=2)
    plain = make_photo(tmp_path / "download.jpg", (20, 30, 40), seed=3)
    assert dating.embedded_date(screenshot) == dates.NONE
    assert dating.embedded_date(plain) == dates.NONE
    assert dating.embedded_date(tmp_path / "missing.jpg") == dates.NONE  # never raises


@pytest.mark.parametrize(
    "when", ["2000:01:01 00:02:13", "1970:01:01 00:00:00", "0000:00:00 00:00:00", "2999:01:01 10:00:00"]
)
def test_a_reset_or_future_clock_is_invalid(tmp_path, when):
    taken = dating.embedded_date(exif_photo(tmp_path / "r.jpg", when))
    assert taken.source == "invalid" and not taken.known


def test_raw_file_date_from_its_tiff_structure(tmp_path):
    # a TIFF-based RAW (DNG, NEF, CR2, ARW ...): the Exif IFD of IFD0, read from the file's head
    path = exif_photo(tmp_path / "IMG_1.DNG", "2024:07:14 05:06:07", offset="-04:00", fmt="TIFF")
    taken = dating.embedded_date(path)
    assert taken.source == "raw"
    assert taken.seconds == utc(2024, 7, 14, 9, 6, 7)


def test_raw_with_nonstandard_magic_and_embedded_exif(tmp_path):
    tiff = exif_photo(tmp_path / "t.tif", "2023:01:02 03:04:05", fmt="TIFF").read_bytes()
    orf = tmp_path / "P1.ORF"  # Olympus: "IIRO" where TIFF has "II*\0"
    orf.write_bytes(b"IIRO" + tiff[4:])
    assert dating.embedded_date(orf).seconds == utc(2023, 1, 2, 3, 4, 5)
    raf = tmp_path / "F1.RAF"  # Fujifilm: a header, then a JPEG with its Exif block
    jpeg = exif_photo(tmp_path / "j.jpg", "2023:05:06 07:08:09").read_bytes()
    raf.write_bytes(b"FUJIFILMCCD-RAW 0201" + bytes(80) + jpeg)
    assert dating.embedded_date(raf).seconds == utc(2023, 5, 6, 7, 8, 9)


def test_clip_creation_time(tmp_path):
    av = pytest.importorskip("av")
    from clips import flat

    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as container:
        container.metadata["creation_time"] = "2024-12-31T23:59:58.000000Z"
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        for _ in range(5):
            frame = av.VideoFrame.from_ndarray(flat((100, 50, 20)), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    taken = dating.embedded_date(path)
    assert taken.source == "clip"
    assert taken.seconds == utc(2024, 12, 31, 23, 59, 58)
    assert dates.iso(taken.seconds, taken.offset) == "2024-12-31T23:59:58+00:00"


@pytest.mark.parametrize(
    "packet, expected, offset",
    [
        ('<d photoshop:DateCreated="2019-08-01T12:00:00+02:00"/>', utc(2019, 8, 1, 10, 0, 0), 7200),
        (
            "<exif:DateTimeOriginal>2019-08-01T12:00:00.5</exif:DateTimeOriginal>",
            utc(2019, 8, 1, 12, 0, 0) + 0.5,
            None,
        ),
        ('<x photoshop:DateCreated="2019-08-01"/>', utc(2019, 8, 1, 0, 0, 0), None),
    ],
)
def test_xmp_sidecar_date(tmp_path, packet, expected, offset):
    photo = make_photo(tmp_path / "scan.jpg", (200, 190, 180), seed=4)
    (tmp_path / "scan.xmp").write_text(f"<x:xmpmeta><rdf:RDF>{packet}</rdf:RDF></x:xmpmeta>")
    found = dating.library_dates([str(photo)], np.array([photo.stat().st_mtime_ns]))
    assert found.sources == ["xmp"]
    assert found.taken[0] == pytest.approx(expected)
    assert (None if np.isnan(found.offsets[0]) else found.offsets[0]) == offset


def test_xmp_date_replaces_a_reset_clock_but_not_a_real_one(tmp_path):
    reset = exif_photo(tmp_path / "reset.jpg", "2000:01:01 00:00:10")
    real = exif_photo(tmp_path / "real.jpg", "2018:02:03 04:05:06")
    for photo in (reset, real):
        photo.with_name(photo.name + ".xmp").write_text('<d photoshop:DateCreated="2015-05-05T05:05:05Z"/>')
    found = dating.library_dates([str(reset), str(real)], np.array([0, 0]))
    assert found.sources == ["xmp", "exif-local"]
    assert found.taken.tolist() == [utc(2015, 5, 5, 5, 5, 5), utc(2018, 2, 3, 4, 5, 6)]


# ------------------------------------------------------------------------------- numbers from files

MAY_1 = utc(2024, 5, 1, 10, 0, 0)


def test_long_numbers_are_refused_before_they_are_converted():
    # a fraction of a second of at most nine digits (nanoseconds); more is no date, never an int() of it
    assert dates.parse_iso_date("2024-05-01T10:00:00.123456789Z") == (pytest.approx(MAY_1 + 0.123456789), 0)
    assert dates.parse_iso_date("2024-05-01T10:00:00." + "1" * 10 + "Z") is None
    assert dates.parse_iso_date("2024-05-01T10:00:00." + "1" * 5000 + "Z") is None  # int() would raise
    assert dates.parse_iso_date("2024-05-01" + " " * 60 + "Z") is None  # longer than any date's text
    # Exif sub-seconds: at most nine ASCII digits, else the date without them
    for subsec in ("1" * 5000, "²", "１２", "12a"):  # a tag read as Latin-1: "²" is a digit to isdigit()
        assert dates.parse_exif_date("2024:05:01 10:00:00", subsec) == (MAY_1, None), subsec
    assert dates.parse_exif_date("2024:05:01 10:00:00", "5", "+02:00") == (MAY_1 + 0.5 - 7200, 7200)
    assert dates.parse_offset("+02:00" + "0" * 100) is None and dates.parse_offset("+" + "1" * 5000) is None


def test_a_clip_date_with_a_5000_digit_fraction_is_no_date_and_no_error(tmp_path):
    pytest.importorskip("av")
    from clips import flat, write_two_stream_clip

    frame = av_png(flat((10, 10, 10), size=(64, 64)))
    long = "2023-01-01T00:00:00." + "9" * 5000 + "Z"  # the container's; its streams keep 2023-01-01T00:00:00
    clip = write_two_stream_clip(tmp_path / "c.mov", frame, creation_time=long)
    assert dating.embedded_date(clip) == dates.Taken(utc(2023, 1, 1, 0, 0, 0), "clip", 0)


def av_png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


# ------------------------------------------------------------------------------------ file times


def test_file_times_of_undated_photos_in_a_library_with_original_times(tmp_path):
    paths, mtimes = [], []
    start = utc(2022, 1, 1, 12, 0, 0)
    for i in range(12):  # dated photos whose file times agree with their dates (a camera's card)
        when = datetime.fromtimestamp(start + i * 3 * DAY, timezone.utc)
        paths.append(str(exif_photo(tmp_path / f"d{i}.jpg", when.strftime("%Y:%m:%d %H:%M:%S"), seed=i)))
        mtimes.append(start + i * 3 * DAY + 60)
    shot = make_photo(tmp_path / "screenshot.png", (1, 2, 3), seed=40)
    paths.append(str(shot))
    mtimes.append(start + 5 * DAY)
    found = dating.library_dates(paths, (np.array(mtimes) * 1e9).astype(np.int64))
    assert found.file_times_trusted
    assert found.sources[-1] == "file" and found.taken[-1] == start + 5 * DAY
    assert found.sources[:12] == ["exif-local"] * 12  # never the file time for a photo with its own date


def test_a_copied_library_does_not_trust_its_file_times(tmp_path):
    copy_day = utc(2026, 11, 1, 9, 0, 0)
    paths = [str(exif_photo(tmp_path / f"d{i}.jpg", f"20{10 + i}:05:05 10:00:00", seed=i)) for i in range(10)]
    paths += [str(make_photo(tmp_path / f"u{i}.png", (i, i, i), seed=50 + i)) for i in range(10)]
    mtimes = (copy_day + np.arange(20) * 37.0) * 1e9  # every file written within minutes of each other
    found = dating.library_dates(paths, mtimes.astype(np.int64))
    assert not found.file_times_trusted
    assert found.sources[10:] == ["none"] * 10
    assert np.isnan(found.taken[10:]).all()
    assert np.isfinite(found.taken[:10]).all()


def test_undated_library_copied_in_one_day_versus_spread_over_time():
    sources = ["none"] * 30
    taken = np.full(30, np.nan)
    one_day = utc(2026, 1, 1, 0, 0, 0) + np.arange(30) * 600.0
    spread = utc(2020, 1, 1, 0, 0, 0) + np.arange(30) * 9 * DAY
    assert not dates.file_times_trusted(taken, sources, one_day)
    assert dates.file_times_trusted(taken, sources, spread)
    # a few undated files are too few to judge: trusted
    assert dates.file_times_trusted(taken[:5], sources[:5], one_day[:5])


def test_dated_photos_decide_whether_file_times_are_trusted():
    taken = utc(2015, 1, 1, 0, 0, 0) + np.arange(20) * 30 * DAY
    sources = ["exif"] * 20
    assert dates.file_times_trusted(taken, sources, taken + 3600)  # written when taken
    assert not dates.file_times_trusted(taken, sources, np.full(20, utc(2026, 1, 1, 0, 0, 0)))  # copied


# ------------------------------------------------------------------------------------- the cache


class CountingReader:
    def __init__(self):
        self.paths: list[str] = []

    def __call__(self, path: str) -> dates.Taken:
        self.paths.append(path)
        return dating.embedded_date(path)


def test_dates_are_read_once_and_kept_beside_the_vectors(tmp_path, fake_extractor):
    lib = tmp_path / "lib"
    exif_photo(lib / "a.jpg", "2025:03:02 22:31:07", offset="+01:00", seed=1)
    exif_photo(lib / "b.jpg", "2025:03:03 10:00:00", seed=2)
    make_photo(lib / "c.png", (5, 200, 5), seed=3)
    cache = tmp_path / "c.sqlite"
    first = novelfind.scan(lib, k=3, cache=cache)
    by_name = {
        Path(p).name: (t, s)
        for p, t, s in zip(first.files.paths, first.taken, first.taken_source, strict=True)
    }
    assert by_name["a.jpg"] == (utc(2025, 3, 2, 21, 31, 7), "exif")
    assert by_name["b.jpg"] == (utc(2025, 3, 3, 10, 0, 0), "exif-local")
    assert by_name["c.png"][1] in ("file", "none")
    with sqlite3.connect(cache) as conn:
        joined = "SELECT f.path, d.source FROM files f JOIN dates d ON d.digest = f.digest"
        stored = dict(conn.execute(joined))
    assert sorted(stored.values()) == ["exif", "exif-local", "none"]
    # the next scan reads no header
    reader = CountingReader()
    with FeatureCache(cache, fake_extractor.model_key) as store:
        again = header_dates.scan_dates(first.files, store, read=reader)
    assert reader.paths == []
    assert np.array_equal(again.taken, first.taken, equal_nan=True)
    assert again.sources == first.taken_source


def test_an_older_cache_gets_its_dates_on_the_next_scan(tmp_path, fake_extractor):
    lib = tmp_path / "lib"
    for i in range(3):
        exif_photo(lib / f"p{i}.jpg", f"2019:0{i + 1}:01 12:00:00", seed=i, colour=(40 * i, 90, 90))
    cache = tmp_path / "c.sqlite"
    novelfind.scan(lib, k=2, cache=cache)
    with sqlite3.connect(cache) as conn:  # as a cache written before the dates table
        conn.execute("DROP TABLE dates")
    result = novelfind.scan(lib, k=2, cache=cache)
    assert result.counts.extracted == 0  # the vectors came from the cache ...
    assert result.taken_source == ["exif-local"] * 3  # ... the dates from the headers, once
    with sqlite3.connect(cache) as conn:
        assert conn.execute("SELECT count(*) FROM dates WHERE source = 'exif-local'").fetchone()[0] == 3


def test_without_a_cache_dates_are_still_read(tmp_path, fake_extractor):
    lib = tmp_path / "lib"
    exif_photo(lib / "a.jpg", "2020:02:02 02:02:02", offset="Z", seed=1)
    make_photo(lib / "b.jpg", (200, 10, 10), seed=2)
    result = novelfind.scan(lib, k=2, cache=False)
    assert result.taken.dtype == np.float64 and len(result.taken) == len(result.files)
    assert utc(2020, 2, 2, 2, 2, 2) in result.taken.tolist()


# --------------------------------------------------------------------------------------- --since

FIXED = datetime(2026, 3, 10, 15, 30, tzinfo=timezone(timedelta(hours=1)))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("7d", FIXED - timedelta(days=7)),
        ("2w", FIXED - timedelta(weeks=2)),
        ("36h", FIXED - timedelta(hours=36)),
        ("today", datetime(2026, 3, 10, tzinfo=FIXED.tzinfo)),
        ("Yesterday", datetime(2026, 3, 9, tzinfo=FIXED.tzinfo)),
        ("2026-01-01", datetime(2026, 1, 1)),
        ("2026-01-01T10:00:00Z", datetime(2026, 1, 1, 10, tzinfo=timezone.utc)),
        ("2026-01-01 10:00:00+02:00", datetime(2026, 1, 1, 8, tzinfo=timezone.utc)),
    ],
)
def test_since_forms(text, expected):
    assert parse_since(text, FIXED) == expected


@pytest.mark.parametrize("text", ["7", "d7", "last week", "7 days ago", "2026-13-01", ""])
def test_since_that_is_no_date_is_refused(text):
    with pytest.raises(InputError, match="not a date"):
        parse_since(text, FIXED)


def test_since_relative_on_the_command_line_with_a_fixed_clock(tmp_path, fake_extractor, monkeypatch):
    monkeypatch.setattr(since, "now", lambda: FIXED)
    lib = tmp_path / "lib"
    # taken 3 days before the fixed clock, but copied (file time) long ago: --since 7d keeps it
    recent = exif_photo(
        lib / "recent.jpg", "2026:03:07 12:00:00", offset="+01:00", seed=1, colour=(200, 9, 9)
    )
    # taken a year before, its file touched yesterday (an edit): --since 7d leaves it out
    old = exif_photo(lib / "old.jpg", "2025:03:07 12:00:00", offset="+01:00", seed=2, colour=(20, 200, 20))
    others = [make_photo(lib / f"o{i}.jpg", (40, 60, 200), seed=10 + i) for i in range(4)]
    long_ago = utc(2020, 1, 1, 0, 0, 0)
    for path in [recent, *others]:
        os.utime(path, (long_ago, long_ago))
    yesterday = FIXED.timestamp() - DAY
    os.utime(old, (yesterday, yesterday))
    result = run("scan", lib, "--k", "5", "--since", "7d", "-q", "--format", "paths")
    assert result.exit_code == 0, result.stderr
    assert [Path(p) for p in result.stdout.split()] == [recent]
    bad = run("scan", lib, "--since", "a week", "-q")
    assert bad.exit_code == 2 and "not a date" in bad.stderr


def test_since_as_text_in_the_api(tmp_path, fake_extractor, monkeypatch):
    monkeypatch.setattr(since, "now", lambda: FIXED)
    assert params.ScanParameters(paths=(tmp_path,), since="2w").since == FIXED - timedelta(weeks=2)


# ---------------------------------------------------------------------------------------- outputs


@pytest.fixture
def dated_library(tmp_path):
    lib = tmp_path / "lib"
    exif_photo(
        lib / "red.jpg", "2025:03:02 22:31:07", subsec="400", offset="+01:00", seed=1, colour=(220, 9, 9)
    )
    exif_photo(lib / "green.jpg", "2025:03:03 09:00:00", seed=2, colour=(20, 220, 20))
    exif_photo(lib / "reset.jpg", "2000:01:01 00:00:05", seed=3, colour=(20, 20, 220))
    return lib


def test_json_jsonl_and_csv_say_when_and_from_where(dated_library, fake_extractor):
    expected = {
        "red.jpg": ("2025-03-02T22:31:07.400+01:00", "exif"),
        "green.jpg": ("2025-03-03T09:00:00", "exif-local"),
        "reset.jpg": (None, "invalid"),
    }
    doc = json.loads(run("scan", dated_library, "--format", "json", "--no-cache", "--dedup", "0").stdout)
    got = {Path(p["path"]).name: (p["taken"], p["taken_source"]) for p in doc["picks"]}
    assert got == expected
    lines = run("scan", dated_library, "--format", "jsonl", "--no-cache", "--dedup", "0").stdout.splitlines()
    picks = [json.loads(line) for line in lines if json.loads(line)["type"] == "pick"]
    assert {Path(p["path"]).name: (p["taken"], p["taken_source"]) for p in picks} == expected
    rows = list(
        csv.DictReader(
            io.StringIO(run("scan", dated_library, "--format", "csv", "--no-cache", "--dedup", "0").stdout)
        )
    )
    assert {Path(r["path"]).name: (r["taken"] or None, r["taken_source"]) for r in rows} == expected


def test_members_carry_their_dates(tmp_path, fake_extractor):
    lib = tmp_path / "lib"
    for i in range(2):  # one burst: two near-identical frames, a second apart
        exif_photo(
            lib / f"burst{i}.jpg", f"2024:08:08 20:00:0{i}", offset="+02:00", seed=7, colour=(220, 9, 9)
        )
    for i in range(6):
        make_photo(lib / f"o{i}.jpg", (40, 60, 200), seed=20 + i)
    doc = json.loads(run("scan", lib, "--format", "json", "--no-cache", "--k", "1").stdout)
    pick = doc["picks"][0]
    assert pick["member_count"] == 1
    both = {"2024-08-08T20:00:00+02:00", "2024-08-08T20:00:01+02:00"}
    assert {pick["taken"], *pick["members_taken"]} == both
    assert pick["members_taken_source"] == ["exif"]


def test_report_card_names_the_date_and_its_source(dated_library, fake_extractor, tmp_path):
    report = tmp_path / "r.html"
    result = run("scan", dated_library, "--no-cache", "--dedup", "0", "--report", report, "-q")
    assert result.exit_code == 0, result.stderr
    html = report.read_text()
    assert "2025-03-02 22:31:07.400+01:00 (EXIF, with its time zone)" in html
    assert "2025-03-03 09:00:00 (EXIF, the camera&#x27;s local time)" in html
    assert "unknown (the camera&#x27;s clock was not set" in html


def test_the_decode_reads_the_date_with_the_pixels(tmp_path):
    from novelfind.extract.stage import decode_file

    path = exif_photo(tmp_path / "a.jpg", "2025:03:02 22:31:07", offset="+01:00", seed=1)
    decoded = decode_file(str(path), frozenset())
    assert decoded.pixels is not None and decoded.taken == dating.embedded_date(path)
    assert decoded.taken.source == "exif"
    assert decode_file(str(tmp_path / "missing.jpg"), frozenset()).taken is None  # a failure has no date
