"""RAW + JPEG and HEIC + JPEG twins grouped into one photo: which file is read, listed, and kept along."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from novelfind.media.pairs import Photo, group_photos


@dataclass(frozen=True)
class Rec:
    """A walker record as far as pairing cares."""

    path: Path
    size: int = 1


ROOT = Path("/photos")


def recs(*names: str) -> list[Rec]:
    return [Rec(ROOT / name) for name in names]


def names(photos: list[Photo]) -> list[tuple[str, tuple[str, ...]]]:
    """Each photo as (listed file, its other files), paths relative to ROOT."""

    def rel(r: Rec) -> str:
        return r.path.relative_to(ROOT).as_posix()

    return [(rel(p.file), tuple(rel(a) for a in p.also)) for p in photos]


def test_raw_and_jpeg_are_one_photo_read_and_listed_by_the_jpeg():
    photos = group_photos(recs("IMG_0001.CR2", "IMG_0001.JPG"))
    assert names(photos) == [("IMG_0001.JPG", ("IMG_0001.CR2",))]
    assert photos[0].files == (photos[0].file, *photos[0].also)


def test_heic_and_jpeg_are_one_photo_read_by_the_jpeg():
    assert names(group_photos(recs("IMG_7.HEIC", "IMG_7.JPG"))) == [("IMG_7.JPG", ("IMG_7.HEIC",))]


def test_names_match_without_regard_to_case():
    photos = group_photos(recs("DSC_0042.nef", "dsc_0042.JPG", "Dsc_0043.Jpeg", "DSC_0043.ARW"))
    assert names(photos) == [
        ("dsc_0042.JPG", ("DSC_0042.nef",)),
        ("Dsc_0043.Jpeg", ("DSC_0043.ARW",)),
    ]


def test_every_raw_format_pairs_with_its_jpeg():
    exts = ".dng .cr2 .cr3 .nef .nrw .arw .srf .sr2 .orf .rw2 .raf .pef .srw .x3f .3fr .iiq .erf .kdc .mrw"
    files = []
    for i, ext in enumerate(exts.split()):
        files += [f"shot{i:02d}{ext.upper()}", f"shot{i:02d}.jpg"]
    photos = group_photos(recs(*files))
    assert len(photos) == 19
    assert all(p.file.path.suffix == ".jpg" and len(p.also) == 1 for p in photos)


def test_files_without_twin_stay_single():
    photos = group_photos(recs("a.CR2", "b.JPG", "c.HEIC", "d.png"))
    assert names(photos) == [("a.CR2", ()), ("b.JPG", ()), ("c.HEIC", ()), ("d.png", ())]


def test_three_files_of_one_shot():
    photos = group_photos(recs("IMG_1.CR2", "IMG_1.HEIC", "IMG_1.JPG"))
    assert names(photos) == [("IMG_1.JPG", ("IMG_1.HEIC", "IMG_1.CR2"))]


def test_raw_and_converted_dng_without_jpeg_are_read_through_the_first_raw():
    photos = group_photos(recs("IMG_1.CR2", "IMG_1.dng"))
    assert names(photos) == [("IMG_1.CR2", ("IMG_1.dng",))]


def test_heic_is_read_before_a_raw_when_there_is_no_jpeg():
    photos = group_photos(recs("IMG_1.DNG", "IMG_1.HEIC"))
    assert names(photos) == [("IMG_1.HEIC", ("IMG_1.DNG",))]


def test_different_folders_never_pair():
    photos = group_photos(recs("2023/IMG_1.CR2", "2024/IMG_1.JPG", "2024/sub/IMG_1.CR2"))
    assert names(photos) == [("2023/IMG_1.CR2", ()), ("2024/IMG_1.JPG", ()), ("2024/sub/IMG_1.CR2", ())]


def test_folder_names_are_compared_exactly():
    photos = group_photos(recs("Trip/IMG_1.CR2", "trip/IMG_1.JPG"))  # two folders on a case-sensitive disk
    assert len(photos) == 2


def test_two_files_of_one_format_make_the_name_ambiguous():
    assert len(group_photos(recs("a.jpg", "a.jpeg", "a.CR2"))) == 3
    assert len(group_photos(recs("b.JPG", "b.jpg", "b.NEF"))) == 3
    assert len(group_photos(recs("c.heic", "c.HEIF", "c.jpg"))) == 3


def test_exports_and_edits_are_photos_of_their_own():
    photos = group_photos(recs("a.CR2", "a.tif", "b.jpg", "b.png", "c.webp", "c.heic"))
    assert len(photos) == 6


def test_only_the_extension_differs():
    photos = group_photos(recs("a.b.CR2", "a.b.jpg", "a.CR2", "a.c.jpg", "a_edit.jpg"))
    assert names(photos) == [("a.b.jpg", ("a.b.CR2",)), ("a.CR2", ()), ("a.c.jpg", ()), ("a_edit.jpg", ())]


def test_walk_order_of_the_listed_files_is_kept():
    files = recs("a.CR2", "a.JPG", "b.JPG", "c.CR2", "sub/x.jpg", "z.DNG", "z.jpeg")
    photos = group_photos(files)
    assert names(photos) == [
        ("a.JPG", ("a.CR2",)),
        ("b.JPG", ()),
        ("c.CR2", ()),
        ("sub/x.jpg", ()),
        ("z.jpeg", ("z.DNG",)),
    ]


def test_library_with_twins_lists_what_the_library_without_them_lists():
    with_twins = recs("a.CR2", "a.JPG", "b.JPG", "b.NEF", "c.HEIC", "c.JPG", "d.JPG")
    without = [r for r in with_twins if r.path.suffix == ".JPG"]
    assert [p.file for p in group_photos(with_twins)] == without


def test_empty_input():
    assert group_photos([]) == []


def test_records_are_passed_through_unchanged():
    a, b = Rec(ROOT / "x.JPG", size=10), Rec(ROOT / "x.CR2", size=25_000_000)
    (photo,) = group_photos(iter([b, a]))  # any iterable
    assert photo.file is a and photo.also == (b,)


_EXTS = [".jpg", ".JPG", ".jpeg", ".heic", ".HEIF", ".CR2", ".cr2", ".nef", ".DNG", ".png", ".tif"]
_COST = {".jpg": 0, ".jpeg": 0, ".heic": 1, ".heif": 1}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "sub", "Sub"]),
            st.sampled_from(["a", "A", "b", "c.d"]),
            st.sampled_from(_EXTS),
        ),
        max_size=14,
        unique=True,
    )
)
def test_grouping_invariants(entries):
    files = [Rec(ROOT / folder / f"{stem}{ext}") for folder, stem, ext in entries]
    photos = group_photos(files)
    index = {id(f): i for i, f in enumerate(files)}

    # every file belongs to exactly one photo
    seen = [id(f) for p in photos for f in p.files]
    assert sorted(seen) == sorted(id(f) for f in files)
    # photos come in the walk order of the file each is read through
    read_order = [index[id(p.file)] for p in photos]
    assert read_order == sorted(read_order)
    for p in photos:
        if not p.also:
            continue
        # one folder, one name, distinct formats, the cheapest read
        assert len({f.path.parent for f in p.files}) == 1
        assert len({os.path.splitext(f.path.name)[0].casefold() for f in p.files}) == 1
        fmts = [_COST.get(f.path.suffix.lower(), f.path.suffix.lower()) for f in p.files]
        assert len(set(map(str, fmts))) == len(fmts)
        costs = [_COST.get(f.path.suffix.lower(), 2) for f in p.files]
        assert costs[0] == min(costs)
        assert all(f.path.suffix.lower() not in (".png", ".tif") for f in p.files)

    # and every name whose shot-format files have distinct formats is one photo
    shots: dict[tuple[Path, str], list[Rec]] = {}
    for f in files:
        stem, ext = os.path.splitext(f.path.name)
        if ext.lower() not in (".png", ".tif"):
            shots.setdefault((f.path.parent, stem.casefold()), []).append(f)
    for members in shots.values():
        fmts = {str(_COST.get(f.path.suffix.lower(), f.path.suffix.lower())) for f in members}
        owners = {id(p) for p in photos for f in p.files if f in members}
        if len(members) > 1 and len(fmts) == len(members):
            assert len(owners) == 1
        else:
            assert len(owners) == len(members)


def test_a_scans_compact_photo_list_groups_as_group_photos_does(tmp_path):
    from novelfind.media.pairs import PhotoList
    from novelfind.media.walk import FileList, ImageFile

    names = [
        "a.CR2",
        "a.JPG",
        "a.d/x.jpg",
        "b.jpg",
        "sub/b.NEF",
        "sub/b.jpg",
        "c.heic",
        "c.jpg",
        "c.png",
        "d.jpg",
        "d.jpeg",
        "e.jpg",
        "sub/a.jpg",
    ]  # a folder between twins; two JPEGs of one name
    files = [ImageFile(tmp_path / name, i + 1, 1000 + i) for i, name in enumerate(names)]
    keys = np.array([hash((f.path.parent, os.path.splitext(f.path.name)[0].casefold())) for f in files])
    for hashes in (keys, np.zeros(len(files), np.int64)):  # real name hashes, and all of them colliding
        photos = PhotoList.grouped(FileList(files), hashes)
        want = group_photos(files)
        assert list(photos) == want and len(photos) == len(want) < len(files)
        assert photos.file_count() == len(files)
        assert [g for g in photos.groups] == [p.files for p in want]
        read = FileList([p.file for i, p in enumerate(want) if i % 3])  # the others failed to read
        assert list(photos.subset(read)) == [p for i, p in enumerate(want) if i % 3]
