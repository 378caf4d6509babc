"""Media kinds (novelfind.media.kinds): one record per kind of file, and the only place a file's name
decides how it is read, digested, dated and shown."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import novelfind
from novelfind.extract import dating
from novelfind.media import dates, decode, extensions, ignore, kinds, video, walk
from novelfind.media.kinds import CLIP, KINDS, PHOTO, RAW, kind_of

PACKAGE = Path(novelfind.__file__).parent
ALL_EXTENSIONS = frozenset().union(*(kind.extensions for kind in KINDS))


def _modules(*, outside: Path | None = None) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if outside is None or outside not in p.parents)


# ------------------------------------------------------------------------------------------ the records


def test_each_kind_has_its_own_lower_case_extensions():
    assert [kind.name for kind in KINDS] == ["photo", "raw", "clip"]
    assert sum(len(kind.extensions) for kind in KINDS) == len(ALL_EXTENSIONS)  # disjoint
    assert all(ext == ext.lower() and ext.startswith(".") and len(ext) > 1 for ext in ALL_EXTENSIONS)
    assert RAW.extensions == extensions.RAW_EXTENSIONS and CLIP.extensions == extensions.VIDEO_EXTENSIONS
    assert (
        extensions.PILLOW_EXTENSIONS | extensions.HEIF_EXTENSIONS | extensions.AVIF_EXTENSIONS
        == PHOTO.extensions
    )
    assert extensions.JPEG_EXTENSIONS <= extensions.PILLOW_EXTENSIONS


# The rules before the kinds were one record: a clip by video.VIDEO_EXTENSIONS, a RAW by
# raw.RAW_EXTENSIONS (both by os.path.splitext, any case), anything else read as a picture.
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("IMG_1.CR2", "raw"),
        ("a.Nef", "raw"),
        ("b.dng", "raw"),
        ("x.3FR", "raw"),
        ("scan.IIQ", "raw"),
        ("clip.MP4", "clip"),
        ("a.mov", "clip"),
        ("b.M2TS", "clip"),
        ("c.mts", "clip"),
        ("d.WebM", "clip"),
        ("e.3gp", "clip"),
        ("archive.tar.mkv", "clip"),
        ("c.jpg", "photo"),
        ("c.JPEG", "photo"),
        ("p.png", "photo"),
        ("p.webp", "photo"),
        ("h.HEIC", "photo"),
        ("h.hif", "photo"),
        ("a.avif", "photo"),
        ("notes.txt", "photo"),
        ("raw", "photo"),
        (".mp4", "photo"),  # a hidden file without an extension
        ("IMG_0001.CR2.xmp", "photo"),
        ("folder.mov/IMG_1.jpg", "photo"),
        ("folder.jpg/clip.mov", "clip"),
        ("", "photo"),
    ],
)
def test_kind_of_by_extension_in_any_case(name, expected):
    assert kind_of(name).name == expected
    assert kind_of(Path(name) if name else name).name == expected


def test_kind_of_is_what_every_extension_says():
    for kind in KINDS:
        for ext in kind.extensions:
            assert kind_of(f"/a/b{ext}") is kind_of(f"b{ext.upper()}") is kind


def test_clip_rows_agree_with_kind_of(tmp_path):
    names = ["a.jpg", "b.MOV", "c.cr2", "d.mp4", "e", "f.m2ts.jpg", "g.Mkv"]
    files = walk.FileList()
    for name in names:
        files.append(walk.ImageFile(tmp_path / name, 1, 0))
    assert video.clip_rows(files) == [i for i, n in enumerate(names) if kind_of(n) is CLIP]


def test_the_walk_offers_what_the_kinds_offer():
    assert walk.WALKED_EXTENSIONS == kinds.offered_extensions()
    assert PHOTO.offered() == decode.IMAGE_EXTENSIONS <= PHOTO.extensions
    assert RAW.offered() == RAW.extensions  # offered without rawpy: kept with their JPEG twins
    assert CLIP.offered() == (CLIP.extensions if video.installed() else frozenset())


def test_importing_the_kinds_imports_no_decoder():
    import subprocess
    import sys

    code = (
        "import sys, novelfind.media.kinds; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PIL', 'numpy', 'rawpy', 'av', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_kind_is_followed_wherever_a_file_is_read(tmp_path, monkeypatch):
    """A file that the table says is a clip is digested as a clip (from samples of its bytes), whatever
    its name: the ignore list asks the record, not the name."""
    path = tmp_path / "a.webp"
    path.write_bytes(b"x" * 1000)
    assert ignore.digest_file(path) == decode.file_digest(path.read_bytes())
    monkeypatch.setitem(kinds._BY_EXTENSION, ".webp", CLIP)
    assert kind_of(path) is CLIP
    assert dating.embedded_date(path) == dates.NONE  # PyAV finds no clip: no date, no error
    assert ignore.digest_file(path) == video.clip_digest(path) != decode.file_digest(path.read_bytes())


# ------------------------------------------------------------------------------------------ one place


def _kind_names_in(node: ast.AST) -> list[str]:
    """What in ``node`` names a set of kinds' extensions or one of them."""
    found = []
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Constant)
            and isinstance(sub.value, str)
            and sub.value.lower() in ALL_EXTENSIONS
        ):
            found.append(repr(sub.value))
        elif isinstance(sub, ast.Name) and sub.id.endswith("_EXTENSIONS"):
            found.append(sub.id)
        elif isinstance(sub, ast.Attribute) and (
            sub.attr.endswith("_EXTENSIONS") or sub.attr == "extensions"
        ):
            found.append(sub.attr)
    return found


def _name_branches(path: Path, root: Path = PACKAGE) -> list[str]:
    """File-name branches on kinds in the module at ``path``: a comparison with a kind's extension or
    extension set (``suffix in RAW_EXTENSIONS``, ``ext == ".mp4"``), or a call of the old name tests."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = _kind_names_in(node)
            if names:
                found.append(f"{path.relative_to(root)}:{node.lineno}: compares with {', '.join(names)}")
        elif isinstance(node, (ast.Name, ast.Attribute, ast.alias)):
            name = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else node.name
            )
            if name in ("is_clip_name", "is_raw_name") or name.endswith("_any"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


def test_no_module_outside_media_branches_on_file_names():
    found = [hit for p in _modules(outside=PACKAGE / "media") for hit in _name_branches(p)]
    assert found == []


def test_the_kinds_extensions_are_written_in_one_file():
    """A new extension of a kind, or one moved to another kind (an animated WebP read as a clip), is one
    edit of extensions.py, below the records of kinds.py (which name the decoders, so the decoders read
    the lists from there, not from the records): no other module lists a kind's
    extensions (in a set, tuple or list) or compares with one. (A format's name is no list: ``pairs``
    names a twin's format ".jpg"; the contact sheet's formats are the files it writes, a mapping.)"""
    found = []
    for path in _modules():
        if path == PACKAGE / "media" / "extensions.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
                parts = node.elts  # a list of extensions: two or more of them side by side
            elif isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]  # a comparison with one
            else:
                continue
            literal = [
                n.value
                for part in parts
                for n in ast.walk(part)
                if isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and n.value.lower() in ALL_EXTENSIONS
            ]
            if len(literal) >= (1 if isinstance(node, ast.Compare) else 2):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {literal}")
    assert found == []


def test_the_branch_finder_finds_branches(tmp_path):
    """The tests above are not vacuous: they catch each way a file name decided a kind before."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "\n".join(
            [
                "from novelfind.media.video import is_clip_name",
                "a = path.suffix.lower() in RAW_EXTENSIONS",
                "b = os.path.splitext(name)[1].lower() == '.mov'",
                "c = ext in kind.extensions",
                "d = load_any(path)",
                "e = x.suffix == '.xmp'",  # not a kind: not a branch
            ]
        ),
        encoding="utf-8",
    )
    hits = _name_branches(sample, root=tmp_path)
    assert [int(h.split(":")[1]) for h in hits] == [1, 2, 3, 4, 5]
