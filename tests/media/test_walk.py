"""Walking folders: which files are found, in what order, and what is skipped or reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import unprivileged

import novelfind.media.walk as scan
from novelfind.errors import ExitCode, InputError
from novelfind.media.decode import IMAGE_EXTENSIONS
from novelfind.media.walk import ImageFile, walk

REPO = Path(scan.__file__).resolve().parents[2]


def touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def rels(files, root: Path) -> list[str]:
    return [f.path.relative_to(root).as_posix() for f in files]


def test_extensions_are_case_insensitive_and_other_files_ignored(tmp_path):
    for name in ["a.jpg", "b.JPEG", "c.Png", "d.webp", "e.GIF", "f.bmp", "g.tif", "h.TIFF", "i.CR2", "j.nef"]:
        touch(tmp_path / name)
    for name in ["k.MOV", "l.mp4"]:
        touch(tmp_path / name)
    for name in ["notes.txt", "movie.mp4.part", "i.CR2.xmp", "l.mp4.xmp", "jpg", "archive.jpg.zip", "noext"]:
        touch(tmp_path / name)
    assert rels(walk(tmp_path), tmp_path) == [
        "a.jpg",
        "b.JPEG",
        "c.Png",
        "d.webp",
        "e.GIF",
        "f.bmp",
        "g.tif",
        "h.TIFF",
        "i.CR2",  # RAW files are walked, read or not (run.py decides)
        "j.nef",
        "k.MOV",  # clips too (read when PyAV is installed: run.py decides)
        "l.mp4",
    ]


def test_heif_only_when_pillow_heif_is_installed(tmp_path):
    touch(tmp_path / "a.HEIC")
    touch(tmp_path / "b.heif")
    try:
        import pillow_heif  # noqa: F401

        have_heif = True
    except ImportError:
        have_heif = False
    assert (".heic" in IMAGE_EXTENSIONS) == have_heif
    assert (".heif" in IMAGE_EXTENSIONS) == have_heif
    assert rels(walk(tmp_path), tmp_path) == (["a.HEIC", "b.heif"] if have_heif else [])


@pytest.mark.parametrize("suffix", [".avif", ".hif"])
def test_walk_offers_exactly_what_the_decoder_reads(tmp_path, suffix):
    """An extension the decoder reads is walked; one it cannot read is not offered at all."""
    from PIL import Image, features

    from novelfind.media.decode import read_for_model

    if suffix == ".avif":
        can_read = bool(features.check("avif"))
        fmt = "AVIF"
    else:
        try:
            import pillow_heif

            pillow_heif.register_heif_opener()
            can_read = True
        except ImportError:
            can_read = False
        fmt = "HEIF"
    path = tmp_path / f"photo{suffix.upper()}"
    if can_read:
        Image.new("RGB", (300, 260), (200, 40, 90)).save(path, format=fmt)
    else:
        path.write_bytes(b"")
    found = [f.path for f in walk(tmp_path)]
    assert (suffix in IMAGE_EXTENSIONS) == can_read
    assert found == ([path] if can_read else [])
    if can_read:
        digest, pixels = read_for_model(path)
        assert pixels.shape == (224, 224, 3)
        assert abs(int(pixels[..., 0].mean()) - 200) < 12  # the red of the photo, not a placeholder


def test_recursive_sorted_by_name_with_folders_in_place(tmp_path):
    for rel in ["b.jpg", "a/z.jpg", "a/b/y.jpg", "a.jpg", "c/x.png", "a/a.jpg", "B.jpg"]:
        touch(tmp_path / rel)
    expected = ["B.jpg", "a/a.jpg", "a/b/y.jpg", "a/z.jpg", "a.jpg", "b.jpg", "c/x.png"]
    assert rels(walk(tmp_path), tmp_path) == expected
    assert rels(walk(tmp_path), tmp_path) == expected  # and again: deterministic


def test_records_carry_absolute_path_size_and_mtime(tmp_path, monkeypatch):
    f = touch(tmp_path / "photos" / "a.jpg", b"12345")
    os.utime(f, ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    monkeypatch.chdir(tmp_path)
    (found,) = walk("photos")
    assert found == ImageFile(tmp_path / "photos" / "a.jpg", 5, 1_600_000_000_123_456_789)
    assert found.path.is_absolute()


def test_root_through_a_symlink_keeps_the_link_in_paths(tmp_path):
    touch(tmp_path / "real" / "a.jpg")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (found,) = walk(tmp_path / "link")
    assert found.path == tmp_path / "link" / "a.jpg"


def test_hidden_files_and_folders_skipped_but_a_hidden_root_is_walked(tmp_path):
    touch(tmp_path / ".hidden.jpg")
    touch(tmp_path / ".thumbnails" / "t.jpg")
    touch(tmp_path / "ok" / ".x.png")
    touch(tmp_path / "ok" / "y.png")
    touch(tmp_path / ".library" / "z.jpg")
    assert rels(walk(tmp_path), tmp_path) == ["ok/y.png"]
    assert rels(walk(tmp_path / ".library"), tmp_path) == [".library/z.jpg"]


ALL = ["a.jpg", "b.png", "raw/c.jpg", "raw/e.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["*.png"], ["a.jpg", "raw/c.jpg", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]),
        (["raw/*"], ["a.jpg", "b.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]),
        (["raw"], ["a.jpg", "b.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]),
        (["**/thumbs/**"], ["a.jpg", "b.png", "raw/c.jpg", "raw/e.png", "x/y/d.jpg"]),
        (["thumbs/"], ["a.jpg", "b.png", "raw/c.jpg", "raw/e.png", "x/y/d.jpg"]),
        (["x/*/d.jpg", "a.*"], ["b.png", "raw/c.jpg", "raw/e.png", "thumbs/u.jpg", "x/thumbs/t.jpg"]),
        (["c.jpg"], ["a.jpg", "b.png", "raw/e.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]),
        (
            ["A.JPG"],
            ["a.jpg", "b.png", "raw/c.jpg", "raw/e.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"],
        ),
        ([], ["a.jpg", "b.png", "raw/c.jpg", "raw/e.png", "thumbs/u.jpg", "x/thumbs/t.jpg", "x/y/d.jpg"]),
    ],
)
def test_exclude_globs_match_name_or_root_relative_path(tmp_path, patterns, expected):
    for rel in ALL:
        touch(tmp_path / rel)
    assert sorted(rels(walk(tmp_path, exclude=patterns), tmp_path)) == expected


def test_exclude_by_absolute_path_and_excluded_folder_not_entered(tmp_path, monkeypatch):
    touch(tmp_path / "keep" / "a.jpg")
    touch(tmp_path / "skip" / "deep" / "b.jpg")
    listed = []
    real_scandir = os.scandir

    def spy(path):
        listed.append(Path(path))
        return real_scandir(path)

    monkeypatch.setattr(scan.os, "scandir", spy)
    found = rels(walk(tmp_path, exclude=[f"{tmp_path}/skip"]), tmp_path)
    assert found == ["keep/a.jpg"]
    assert tmp_path / "skip" not in listed


def test_several_roots_in_order_and_overlaps_yielded_once(tmp_path):
    touch(tmp_path / "one" / "b.jpg")
    touch(tmp_path / "one" / "sub" / "c.jpg")
    touch(tmp_path / "two" / "a.jpg")
    roots = [tmp_path / "two", tmp_path / "one", tmp_path / "one" / "sub", tmp_path / "two"]
    assert rels(walk(roots), tmp_path) == ["two/a.jpg", "one/b.jpg", "one/sub/c.jpg"]


def test_an_image_file_is_a_root_too(tmp_path):
    f = touch(tmp_path / "single.JPG")
    touch(tmp_path / "dir" / "a.png")
    assert rels(walk([f, tmp_path / "dir", f]), tmp_path) == ["single.JPG", "dir/a.png"]


def test_missing_root_fails_before_anything_is_walked(tmp_path, monkeypatch):
    touch(tmp_path / "ok" / "a.jpg")
    calls = []
    monkeypatch.setattr(scan.os, "scandir", lambda p: calls.append(p))
    with pytest.raises(InputError) as info:
        walk([tmp_path / "ok", tmp_path / "missing"])  # raised by the call, not by iteration
    assert str(info.value) == f"no such folder: {tmp_path / 'missing'}"
    assert info.value.exit_code == ExitCode.USAGE
    assert calls == []


def test_non_image_file_root_is_refused(tmp_path):
    notes = touch(tmp_path / "notes.txt")
    with pytest.raises(InputError, match=r"^not a folder or image: .*notes\.txt$"):
        walk(notes)
    with pytest.raises(InputError, match="^no such folder: "):
        walk(tmp_path / "notes.txt" / "below")


def test_symlinks_not_followed_by_default(tmp_path):
    outside = tmp_path / "outside"
    touch(outside / "o.jpg")
    lib = tmp_path / "lib"
    touch(lib / "a.jpg")
    (lib / "link.jpg").symlink_to(outside / "o.jpg")
    (lib / "linkdir").symlink_to(outside)
    assert rels(walk(lib), lib) == ["a.jpg"]


def test_followed_symlinks_end_loops_and_yield_each_file_once(tmp_path):
    lib = tmp_path / "lib"
    touch(lib / "a.jpg")
    touch(lib / "sub" / "b.jpg")
    touch(tmp_path / "outside" / "o.jpg")
    (lib / "sub" / "loop").symlink_to(lib)  # a loop back to the root
    (lib / "sub" / "self").symlink_to(".")  # a loop onto itself
    (lib / "z_again.jpg").symlink_to(lib / "a.jpg")  # the same file twice
    (lib / "out").symlink_to(tmp_path / "outside")
    errors = []
    found = rels(walk(lib, follow_symlinks=True, on_error=lambda p, r: errors.append((p, r))), lib)
    assert found == ["a.jpg", "out/o.jpg", "sub/b.jpg"]
    assert errors == []


def test_broken_link_reported_when_following(tmp_path):
    touch(tmp_path / "a.jpg")
    (tmp_path / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    errors = []
    found = rels(walk(tmp_path, follow_symlinks=True, on_error=lambda p, r: errors.append((p, r))), tmp_path)
    assert found == ["a.jpg"]
    assert errors == [(tmp_path / "gone.jpg", "broken symbolic link")]
    assert rels(walk(tmp_path), tmp_path) == ["a.jpg"]  # not following: not even looked at


def test_hard_links_yielded_once(tmp_path):
    a = touch(tmp_path / "a.jpg")
    os.link(a, tmp_path / "b.jpg")
    assert rels(walk(tmp_path), tmp_path) == ["a.jpg"]


def test_a_file_named_as_a_root_and_found_in_a_folder_root_is_yielded_once(tmp_path):
    a = touch(tmp_path / "lib" / "a.jpg")
    b = touch(tmp_path / "lib" / "b.jpg")
    assert [f.path for f in walk([tmp_path / "lib", a])] == [a, b]
    assert [f.path for f in walk([a, tmp_path / "lib"])] == [a, b]


def test_only_files_with_a_second_name_are_remembered(tmp_path, monkeypatch):
    """A library of millions of single-link files keeps no per-file set entry (about 150 bytes each)."""
    for i in range(50):
        touch(tmp_path / f"d{i % 5}" / f"{i:03d}.jpg")
    os.link(tmp_path / "d0" / "000.jpg", tmp_path / "d4" / "zz-link.jpg")
    sizes = []
    real_set = set

    class Recording(real_set):
        def add(self, item):
            super().add(item)
            sizes.append(len(self))

    monkeypatch.setattr(scan, "set", Recording, raising=False)
    found = list(walk(tmp_path))
    assert len(found) == 50  # the hard link once
    assert max(sizes) <= 5 + 1 + 1  # the folders, the root, the one file with two names


# --------------------------------------------------------------------------- compact records


def test_file_lists_keep_every_record_exactly(tmp_path):
    odd = os.fsdecode(b"caf\xc3\xa9 \xff.jpg")  # UTF-8 and an undecodable byte
    files = [
        ImageFile(tmp_path / f"f{i}" / (odd if i % 3 == 0 else f"{i}.jpg"), 1000 + i, 10**18 + i)
        for i in range(100)
    ]
    compact = scan.FileList(files)
    assert len(compact) == 100 and list(compact) == files and compact == files
    assert compact[-1] == files[-1] and compact[5:9] == files[5:9] and compact[::7] == files[::7]
    assert compact.take([9, 0, 9]) == [files[9], files[0], files[9]]
    assert list(compact.paths) == [f.path for f in files]
    assert [r[0] for r in compact.records()] == [os.fsencode(f.path) for f in files]
    assert compact.sizes.tolist() == [f.size for f in files]
    assert compact.mtimes_ns.tolist() == [f.mtime_ns for f in files]
    with pytest.raises(IndexError):
        compact[100]


def test_file_lists_take_a_fraction_of_the_memory_of_a_list_of_records(tmp_path):
    import tracemalloc

    paths = [f"/archive/2019/{i // 1000:04d}/IMG_{i:08d}.JPG" for i in range(20_000)]  # 35-byte paths
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        as_list = [ImageFile(Path(p), 2_000_000 + i, 10**18 + i) for i, p in enumerate(paths)]
        for f in as_list:
            os.fspath(f.path)  # a Path keeps its string once asked for it (as a scan does)
        list_bytes = tracemalloc.get_traced_memory()[0] - before
        before = tracemalloc.get_traced_memory()[0]
        compact = scan.FileList(as_list)
        compact_bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(compact) == len(paths)
    per_file = compact_bytes / len(paths)
    assert per_file < (35 + 24) * 1.25  # the path and three 8-byte columns, and the buffers' growth room
    assert compact_bytes * 5 < list_bytes


def test_file_deleted_between_listing_and_stat_is_skipped(tmp_path, monkeypatch):
    touch(tmp_path / "a.jpg")
    touch(tmp_path / "b.jpg")
    real_scandir = os.scandir

    class ListThenDelete:
        def __init__(self, path):
            self.it = real_scandir(path)

        def __enter__(self):
            entries = list(self.it)
            (tmp_path / "a.jpg").unlink(missing_ok=True)
            return iter(entries)

        def __exit__(self, *exc):
            self.it.close()

    monkeypatch.setattr(scan.os, "scandir", ListThenDelete)
    errors = []
    assert rels(walk(tmp_path, on_error=lambda p, r: errors.append(p)), tmp_path) == ["b.jpg"]
    assert errors == []


def test_walk_streams_one_folder_at_a_time(tmp_path, monkeypatch):
    for i in range(5):
        touch(tmp_path / f"d{i}" / "a.jpg")
    listed = []
    real_scandir = os.scandir

    def spy(path):
        listed.append(Path(path).name)
        return real_scandir(path)

    monkeypatch.setattr(scan.os, "scandir", spy)
    it = walk(tmp_path)
    first = next(it)
    assert first.path == tmp_path / "d0" / "a.jpg"
    assert listed == [tmp_path.name, "d0"]
    assert len(list(it)) == 4


def test_deep_tree_has_no_recursion_limit(tmp_path):
    deep = tmp_path.joinpath(*["d"] * 150)
    touch(deep / "bottom.jpg")
    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(frames + 50)  # a walk that recursed per folder would need 150 more
    try:
        found = list(walk(tmp_path))
    finally:
        sys.setrecursionlimit(old)
    assert [f.path for f in found] == [deep / "bottom.jpg"]


def test_unicode_and_spaces_in_names(tmp_path):
    touch(tmp_path / "Fotos 2024" / "été à Paris.JPG")
    touch(tmp_path / "日本" / "写真 1.png")
    assert rels(walk(tmp_path), tmp_path) == ["Fotos 2024/été à Paris.JPG", "日本/写真 1.png"]


def test_undecodable_file_names_are_found(tmp_path):
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9.jpg"
    with open(raw, "wb") as f:
        f.write(b"x")
    (found,) = walk(tmp_path)
    assert os.fsencode(found.path) == raw


_UNREADABLE_SCRIPT = """
import json, sys
from novelfind.media.walk import walk
errors = []
found = [str(f.path) for f in walk(sys.argv[1], on_error=lambda p, r: errors.append([str(p), r]))]
print(json.dumps({"found": found, "errors": errors}))
"""


def test_unreadable_folder_is_reported_and_the_walk_goes_on(tmp_path):
    touch(tmp_path / "a" / "x.jpg")
    touch(tmp_path / "b" / "locked.jpg")
    touch(tmp_path / "c" / "y.jpg")
    os.chmod(tmp_path / "b", 0o000)
    try:
        proc = subprocess.run(
            unprivileged([sys.executable, "-c", _UNREADABLE_SCRIPT, str(tmp_path)]),
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            timeout=60,
        )
    finally:
        os.chmod(tmp_path / "b", 0o755)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["found"] == [str(tmp_path / "a" / "x.jpg"), str(tmp_path / "c" / "y.jpg")]
    assert result["errors"] == [[str(tmp_path / "b"), "Permission denied"]]


def test_special_files_with_image_names_are_skipped(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")  # opening it would hang the decoder
    touch(tmp_path / "album.jpg" / "inside.png")  # a folder with an image-like name is a folder
    assert rels(walk(tmp_path), tmp_path) == ["album.jpg/inside.png"]
