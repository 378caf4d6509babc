"""The dates of a scan: what is read, what is stored and when, and where the headers are read (in decode
processes, under the time limit)."""

from __future__ import annotations

import calendar
import contextlib
import os
import threading
from pathlib import Path

import pytest
from PIL import Image

from novelfind.extract import header_dates as dating
from novelfind.media.dates import Taken
from novelfind.media.walk import FileList, ImageFile

WHEN = 1.6e9  # 2020-09-13, a believable capture instant


class Store:
    """The date half of a feature cache: hits by path name, writes recorded (or refused)."""

    def __init__(self, hits=None, refuse: Exception | None = None, no_digest=()) -> None:
        self.hits = hits or {}
        self.refuse = refuse
        self.no_digest = set(no_digest)
        self.written: list[list[tuple]] = []

    def dates_by_stat(self, files):
        return [
            (None if f.path.name in self.no_digest else f"d-{f.path.name}", self.hits.get(f.path.name))
            for f in files
        ]

    def put_dates(self, rows):
        if self.refuse is not None:
            raise self.refuse
        self.written.append(list(rows))


def files_in(folder: Path, n: int) -> FileList:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"p{i}.jpg"
        p.write_bytes(b"not read: the reader is given")
        st = p.stat()
        out.append(ImageFile(p, st.st_size, st.st_mtime_ns))
    return FileList(out)


class Reader:
    def __init__(self, fail_at: int | None = None) -> None:
        self.names: list[str] = []
        self.fail_at = fail_at

    def __call__(self, path: str) -> Taken:
        if self.fail_at is not None and len(self.names) == self.fail_at:
            raise KeyboardInterrupt
        self.names.append(os.path.basename(path))
        return Taken(WHEN + len(self.names), "exif", 3600)


def test_only_files_without_a_decoded_or_cached_date_are_read_and_stored(tmp_path):
    files = files_in(tmp_path / "lib", 4)
    store = Store(hits={"p1.jpg": (WHEN - 10, None, "exif-local")})
    read = Reader()
    found = dating.scan_dates(files, store, decoded=[Taken(WHEN - 20, "raw", 0)], read=read)
    assert read.names == ["p2.jpg", "p3.jpg"]
    assert store.written == [[("d-p2.jpg", WHEN + 1, 3600, "exif"), ("d-p3.jpg", WHEN + 2, 3600, "exif")]]
    assert found.taken.tolist() == [WHEN - 20, WHEN - 10, WHEN + 1, WHEN + 2]
    assert found.sources == ["raw", "exif-local", "exif", "exif"]


def test_a_file_the_cache_has_no_digest_for_is_read_but_not_stored(tmp_path):
    files = files_in(tmp_path / "lib", 2)
    store = Store(no_digest={"p0.jpg"})
    read = Reader()
    found = dating.scan_dates(files, store, read=read)
    assert read.names == ["p0.jpg", "p1.jpg"]
    assert store.written == [[("d-p1.jpg", WHEN + 2, 3600, "exif")]]
    assert found.sources == ["exif", "exif"]


def test_dates_are_stored_in_batches_with_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(dating, "STORE_EVERY", 2)
    monkeypatch.setattr(dating, "PROGRESS_EVERY", 2)
    files = files_in(tmp_path / "lib", 5)
    store = Store()
    progress: list[tuple[int, int]] = []
    dating.scan_dates(files, store, read=Reader(), on_progress=lambda done, n: progress.append((done, n)))
    assert [len(batch) for batch in store.written] == [2, 2, 1]
    assert progress == [(2, 5), (4, 5), (5, 5)]  # every PROGRESS_EVERY, and the last


def test_a_cache_that_cannot_take_the_dates_is_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(dating, "STORE_EVERY", 1)
    files = files_in(tmp_path / "lib", 3)
    warnings: list[str] = []
    store = Store(refuse=OSError("disk full"))
    found = dating.scan_dates(files, store, read=Reader(), on_warning=warnings.append)
    assert warnings == ["disk full; capture dates are not cached"]
    assert found.taken.tolist() == [WHEN + 1, WHEN + 2, WHEN + 3]  # the scan has its dates all the same


def test_an_interrupted_scan_keeps_the_dates_read_so_far(tmp_path):
    files = files_in(tmp_path / "lib", 4)
    store = Store()
    with pytest.raises(KeyboardInterrupt):
        dating.scan_dates(files, store, read=Reader(fail_at=2))
    assert store.written == [[("d-p0.jpg", WHEN + 1, 3600, "exif"), ("d-p1.jpg", WHEN + 2, 3600, "exif")]]


def dated_jpeg(path: Path, when: str) -> Path:
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = when
    Image.new("RGB", (32, 24), (90, 120, 30)).save(path, exif=exif.tobytes())
    return path


def listed(paths: list[Path]) -> FileList:
    return FileList([ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in paths])


def test_headers_are_read_in_decode_processes_under_the_time_limit(tmp_path, monkeypatch):
    """A FIFO swapped in for a photo blocks whoever opens it: the reading is stopped with its process
    (``timeout``), the file has no date, and the other files of its batch are read again one by one."""
    monkeypatch.setattr(dating, "HEADER_CHUNK", 2)
    a = dated_jpeg(tmp_path / "a.jpg", "2021:06:01 12:00:00")
    fifo = tmp_path / "b.jpg"
    os.mkfifo(fifo)
    c = dated_jpeg(tmp_path / "c.jpg", "2022:06:01 12:00:00")
    store = Store()
    found: list = []
    reading = threading.Thread(
        target=lambda: found.append(dating.scan_dates(listed([a, fifo, c]), store, timeout=1)), daemon=True
    )
    reading.start()
    reading.join(120)
    try:
        assert not reading.is_alive(), "the FIFO was opened in this process, with no clock"
    finally:
        for _ in range(100):  # readers still blocked on it (each open blocks): let them go
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reading.join(0.1)
    first, third = (calendar.timegm((year, 6, 1, 12, 0, 0)) for year in (2021, 2022))
    assert found[0].taken[[0, 2]].tolist() == [first, third]
    assert sorted(row for batch in store.written for row in batch) == [
        ("d-a.jpg", first, None, "exif-local"),
        ("d-b.jpg", None, None, "none"),  # its own bytes said nothing (its file time may stand in)
        ("d-c.jpg", third, None, "exif-local"),
    ]
