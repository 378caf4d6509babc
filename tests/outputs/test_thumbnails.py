"""Thumbnails: one decode for every size, a clip's time as a clock, kept for the next report while the
file is unchanged."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from common import make_photo
from PIL import Image

from novelfind.cache import CacheWarning
from novelfind.media.video import ClipInfo
from novelfind.outputs import thumbnails
from novelfind.outputs.thumbnails import ThumbnailCache, clock, make_thumbnails, thumbnails_of
from novelfind.picks import Pick

JPEG = b"\xff\xd8"  # how a JPEG starts: what a kept thumbnail must start with


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0:00"), (7, "0:07"), (59.6, "1:00"), (754, "12:34"), (3599.4, "59:59"), (3723, "1:02:03")],
)
def test_clock(seconds, shown):
    assert clock(seconds) == shown


def test_every_size_from_one_decode_longest_side_as_asked(tmp_path):
    path = make_photo(tmp_path / "wide.png", (10, 120, 200), seed=1, size=(400, 200))
    made = thumbnails_of(str(path), [64, 200, 64])
    assert made.frame is None  # a photo
    assert {s: img.size for s, img in made.images.items()} == {200: (200, 100), 64: (64, 32)}
    encoded = thumbnails_of(str(path), [50], encode=True).images[50]
    with Image.open(io.BytesIO(encoded)) as img:
        assert img.format == "JPEG" and img.size == (50, 25)


def test_clip_moment_is_the_novel_frame_of_a_clip_and_none_for_a_photo():
    photo = Pick(1, 1.0, Path("/p.jpg"), 1, 0)
    assert thumbnails.clip_moment(photo) is None
    clip = ClipInfo(duration=30.0, times=(0.0, 12.5, 25.0), moment=1, rule="farthest")
    assert thumbnails.clip_moment(Pick(1, 1.0, Path("/c.mp4"), 1, 0, clip=clip)) == 12.5


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def test_a_kept_thumbnail_is_valid_while_its_file_is_unchanged(tmp_path):
    path = make_photo(tmp_path / "a.png", (200, 10, 10), seed=2)
    clip = make_photo(tmp_path / "c.png", (10, 10, 200), seed=3)
    with ThumbnailCache(tmp_path / "t.sqlite") as cache:
        cache.put(
            {(path, 96, None): JPEG + b"96", (path, 256, None): None, (clip, 96, 4.0): JPEG + b"frame"},
            {clip: (640, 360)},
            {path: _stat(path), clip: _stat(clip)},
        )
        found, frames = cache.get([(path, 96, None), (path, 256, None), (clip, 96, 4.0), (clip, 96, None)])
        assert found == {(path, 96, None): JPEG + b"96", (clip, 96, 4.0): JPEG + b"frame"}  # None: not kept
        assert frames == {clip: (640, 360)}
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file changed
        found, _ = cache.get([(path, 96, None)])
        assert found == {}
    assert oct((tmp_path / "t.sqlite").stat().st_mode & 0o777) == "0o600"


def test_a_folder_in_the_way_is_a_cache_that_keeps_nothing(tmp_path):
    (tmp_path / "t.sqlite").mkdir()
    path = make_photo(tmp_path / "a.png", (1, 2, 3), seed=4)
    with pytest.warns(CacheWarning, match=r"t\.sqlite is not a regular file \(a folder\); not used"):
        cache = ThumbnailCache(tmp_path / "t.sqlite")
    with cache:
        assert cache.conn is None
        cache.put({(path, 96, None): JPEG}, {}, {path: _stat(path)})
        assert cache.get([(path, 96, None)]) == ({}, {})


def test_make_thumbnails_decodes_each_file_once_and_takes_the_kept_ones(tmp_path, monkeypatch):
    a = make_photo(tmp_path / "a.png", (200, 200, 10), seed=5, size=(300, 150))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    wanted = [(a, 96, None), (a, 160, None), (bad, 96, None), (a, 96, None)]
    progress: list[tuple[int, int]] = []
    with ThumbnailCache(tmp_path / "t.sqlite") as cache:
        made = make_thumbnails(
            wanted, None, encode=True, on_progress=lambda d, n: progress.append((d, n)), cache=cache
        )
        assert set(made.thumbs) == {(a, 96, None), (a, 160, None), (bad, 96, None)}
        assert made.thumbs[bad, 96, None] is None
        with Image.open(io.BytesIO(made.thumbs[a, 160, None])) as img:
            assert img.size == (160, 80)
        assert progress == [(1, 2), (2, 2)]  # by file, not by size

        def no_decode(self, tasks):
            assert [t[0] for t in tasks] == [str(bad)]  # only the unreadable one is tried again
            yield 0, None

        monkeypatch.setattr(thumbnails.ThumbnailDecoder, "thumbnails", no_decode)
        again = make_thumbnails(wanted, None, encode=True, cache=cache)
        assert again.thumbs == made.thumbs


def test_a_file_not_as_ranked_gets_no_thumbnail_and_says_why(tmp_path):
    """Made from the file of the size and time it was ranked with: another one (rewritten, a link renamed
    over it) gives no picture, and the reason the library door refused it."""
    path = make_photo(tmp_path / "a.png", (200, 10, 10), seed=6)
    made = thumbnails_of(str(path), [64], expect=_stat(path))
    assert made.refused is None and made.seen == _stat(path) and 64 in made.images
    size, mtime_ns = _stat(path)
    refused = thumbnails_of(str(path), [64], expect=(size + 1, mtime_ns))
    assert refused.images == {} and "changed since it was listed" in refused.refused
    link = tmp_path / "link.png"
    link.symlink_to(path)
    linked = thumbnails_of(str(link), [64], expect=_stat(path))
    assert linked.images == {} and "symbolic link" in linked.refused


def test_make_thumbnails_names_the_files_refused(tmp_path):
    good = make_photo(tmp_path / "good.png", (10, 200, 10), seed=7)
    changed = make_photo(tmp_path / "changed.png", (10, 10, 200), seed=8)
    listed = {good: _stat(good), changed: _stat(changed)}
    make_photo(changed, (200, 200, 10), seed=9, size=(90, 60))  # rewritten since it was ranked
    made = make_thumbnails([(good, 64, None), (changed, 64, None)], None, expect=listed)
    assert made.thumbs[changed, 64, None] is None and made.thumbs[good, 64, None] is not None
    assert list(made.refused) == [changed] and "changed since it was listed" in made.refused[changed]


def test_a_kept_thumbnail_is_not_taken_for_a_link_renamed_over_its_file(tmp_path):
    """The kept thumbnail's file is looked at through the library door: a link renamed over it, to a
    file of the very size and time it had (a twin the attacker made), is not that file. Before, the
    cache looked with ``os.stat(path)``, which follows the link."""
    path = make_photo(tmp_path / "a.png", (200, 10, 10), seed=10)
    listed = _stat(path)
    twin = tmp_path / "twin.png"
    twin.write_bytes(path.read_bytes())
    os.utime(twin, ns=(listed[1], listed[1]))
    with ThumbnailCache(tmp_path / "t.sqlite") as cache:
        cache.put({(path, 96, None): b"\xff\xd8kept"}, {}, {path: listed})
        assert cache.get([(path, 96, None)], {path: listed})[0] == {(path, 96, None): b"\xff\xd8kept"}
        assert cache.get([(path, 96, None)], {path: (listed[0], listed[1] + 1)})[0] == {}  # not as ranked
        bait = tmp_path / "bait"
        bait.symlink_to(twin)
        os.rename(bait, path)
        assert _stat(twin) == listed and os.stat(path).st_size == listed[0]
        assert cache.get([(path, 96, None)], {path: listed})[0] == {}


def test_a_thumbnail_is_kept_under_the_file_it_was_made_from(tmp_path):
    """``put`` keeps each thumbnail under the size and time of the file the decode read (``seen``), not
    of whatever is at the path by the time it is kept."""
    path = make_photo(tmp_path / "a.png", (200, 10, 10), seed=11)
    read_then = _stat(path)
    make_photo(path, (10, 10, 200), seed=12, size=(90, 60))  # rewritten after the decode
    with ThumbnailCache(tmp_path / "t.sqlite") as cache:
        cache.put({(path, 96, None): b"of the first"}, {}, {path: read_then})
        assert cache.get([(path, 96, None)])[0] == {}  # the file now is not the one it was made from
