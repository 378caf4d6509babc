"""XMP sidecars: merged without loss, read back by other tools, undone only where novelfind wrote."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from common import missing_prerequisite, unprivileged
from sidecars import read_sidecar

from novelfind.media.sidecars import sidecar_candidates, sidecar_for
from novelfind.outputs import xmp, xmp_ledger
from novelfind.outputs.xmp import SidecarError
from novelfind.outputs.xmp_ledger import SidecarPick

REPO = Path(__file__).resolve().parents[2]

try:
    import exiv2  # noqa: F401
except ImportError:  # pragma: no cover - the test extras install it
    _MISSING: str | None = "XMP tests need python-exiv2 (pip install exiv2)"
else:
    _MISSING = None


@pytest.fixture(autouse=True)
def _prerequisites():
    if _MISSING:
        missing_prerequisite(_MISSING)


# A sidecar as digiKam writes one: keywords in four places, a rating, a colour label, a caption,
# a face region (nested structures), and a field in a namespace no tool knows.
DIGIKAM_SIDECAR = """<?xml version="1.0" encoding="UTF-8"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/" x:xmptk="XMP Core 4.4.0-Exiv2">
 <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
  <rdf:Description rdf:about=""
    xmlns:xmp="http://ns.adobe.com/xap/1.0/"
    xmlns:dc="http://purl.org/dc/elements/1.1/"
    xmlns:lr="http://ns.adobe.com/lightroom/1.0/"
    xmlns:digiKam="http://www.digikam.org/ns/1.0/"
    xmlns:mwg-rs="http://www.metadataworkinggroup.com/schemas/regions/"
    xmlns:stArea="http://ns.adobe.com/xmp/sType/Area#"
    xmlns:stDim="http://ns.adobe.com/xap/1.0/sType/Dimensions#"
    xmlns:acme="http://ns.example.com/acme/1.0/"
   xmp:Rating="4"
   xmp:Label="Red"
   acme:ProjectCode="ALPHA-7">
   <dc:subject><rdf:Bag><rdf:li>family</rdf:li><rdf:li>beach</rdf:li></rdf:Bag></dc:subject>
   <dc:description>
    <rdf:Alt><rdf:li xml:lang="x-default">Sunset at the pier</rdf:li></rdf:Alt>
   </dc:description>
   <lr:hierarchicalSubject><rdf:Bag><rdf:li>Places|Beach</rdf:li></rdf:Bag></lr:hierarchicalSubject>
   <digiKam:TagsList><rdf:Seq><rdf:li>Places/Beach</rdf:li><rdf:li>family</rdf:li></rdf:Seq></digiKam:TagsList>
   <mwg-rs:Regions rdf:parseType="Resource">
    <mwg-rs:AppliedToDimensions stDim:w="4000" stDim:h="3000" stDim:unit="pixel"/>
    <mwg-rs:RegionList><rdf:Bag><rdf:li><rdf:Description mwg-rs:Name="Anna" mwg-rs:Type="Face">
     <mwg-rs:Area stArea:x="0.5" stArea:y="0.4" stArea:w="0.1" stArea:h="0.2" stArea:unit="normalized"/>
    </rdf:Description></rdf:li></rdf:Bag></mwg-rs:RegionList>
   </mwg-rs:Regions>
  </rdf:Description>
 </rdf:RDF>
</x:xmpmeta>
"""

# A sidecar as Lightroom writes one for a RAW (NAME.xmp): develop settings, a rating, keywords.
LIGHTROOM_SIDECAR = """<x:xmpmeta xmlns:x="adobe:ns:meta/"
  x:xmptk="Adobe XMP Core 7.0-c000 1.000000, 0000/00/00-00:00:00">
 <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
  <rdf:Description rdf:about=""
    xmlns:xmp="http://ns.adobe.com/xap/1.0/"
    xmlns:dc="http://purl.org/dc/elements/1.1/"
    xmlns:crs="http://ns.adobe.com/camera-raw-settings/1.0/"
    xmlns:lr="http://ns.adobe.com/lightroom/1.0/"
   xmp:Rating="3"
   crs:Version="15.0"
   crs:Exposure2012="+0.50"
   crs:WhiteBalance="As Shot">
   <crs:ToneCurvePV2012>
    <rdf:Seq><rdf:li>0, 0</rdf:li><rdf:li>255, 255</rdf:li></rdf:Seq>
   </crs:ToneCurvePV2012>
   <dc:subject><rdf:Bag><rdf:li>novel</rdf:li><rdf:li>Tokyo</rdf:li></rdf:Bag></dc:subject>
   <lr:hierarchicalSubject><rdf:Bag><rdf:li>Places|Tokyo</rdf:li></rdf:Bag></lr:hierarchicalSubject>
  </rdf:Description>
 </rdf:RDF>
</x:xmpmeta>
"""


def photo(tmp_path: Path, name: str = "IMG_0001.JPG", data: bytes = b"\xff\xd8 not really a jpeg") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def fingerprint(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_ino


def others(props: dict) -> dict:
    """The properties that are not keywords nor novelfind's."""
    return {
        k: v
        for k, v in props.items()
        if k not in (xmp.SUBJECT, xmp.HIERARCHICAL, xmp.DIGIKAM_TAGS) and not k.startswith("Xmp.novelfind.")
    }


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        missing_prerequisite(
            f"the {name} command (apt-get install {'exiv2' if name == 'exiv2' else 'libimage-exiftool-perl'})"
        )
    return found


def exiftool(path: Path) -> dict:
    out = subprocess.run(
        [tool("exiftool"), "-j", "-G1", "-a", "-struct", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)[0]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------------------------- names


def test_sidecar_names_in_lookup_order(tmp_path):
    p = tmp_path / "IMG_1.CR2"
    assert sidecar_candidates(p) == (
        tmp_path / "IMG_1.CR2.xmp",
        tmp_path / "IMG_1.CR2.XMP",
        tmp_path / "IMG_1.xmp",
        tmp_path / "IMG_1.XMP",
    )


def test_new_sidecar_is_name_ext_xmp(tmp_path):
    assert sidecar_for(photo(tmp_path, "IMG_1.CR2")) == tmp_path / "IMG_1.CR2.xmp"


def test_existing_name_xmp_is_used(tmp_path):
    p = photo(tmp_path, "IMG_1.CR2")
    (tmp_path / "IMG_1.xmp").write_text(LIGHTROOM_SIDECAR)
    assert sidecar_for(p) == tmp_path / "IMG_1.xmp"


def test_name_ext_xmp_wins_over_name_xmp(tmp_path):
    p = photo(tmp_path, "IMG_1.CR2")
    (tmp_path / "IMG_1.xmp").write_text(LIGHTROOM_SIDECAR)
    (tmp_path / "IMG_1.CR2.xmp").write_text(DIGIKAM_SIDECAR)
    assert sidecar_for(p) == tmp_path / "IMG_1.CR2.xmp"


def test_upper_case_sidecar_is_found(tmp_path):
    p = photo(tmp_path, "DSC_7.NEF")
    (tmp_path / "DSC_7.XMP").write_text(LIGHTROOM_SIDECAR)
    assert sidecar_for(p) == tmp_path / "DSC_7.XMP"
    xmp.tag(p, rank=1, score=0.5)
    assert "novel" in read_sidecar(tmp_path / "DSC_7.XMP")[xmp.SUBJECT]
    assert not (tmp_path / "DSC_7.NEF.xmp").exists()


# ---------------------------------------------------------------------------------------------- tag


def test_tag_creates_a_sidecar_and_never_touches_the_photo(tmp_path):
    p = photo(tmp_path)
    before = fingerprint(p)
    change = xmp.tag(p, rank=3, score=0.8125)
    assert change == xmp.SidecarChange(p, tmp_path / "IMG_0001.JPG.xmp", "created")
    assert fingerprint(p) == before
    assert read_sidecar(change.sidecar) == {
        xmp.SUBJECT: ["novel"],
        xmp.HIERARCHICAL: ["novel"],
        xmp.RANK: "3",
        xmp.SCORE: "0.8125",
        xmp.ADDED_SUBJECT: ["novel"],
        xmp.ADDED_HIERARCHICAL: ["novel"],
        xmp.CREATED: "True",
    }
    assert sorted(os.listdir(tmp_path)) == ["IMG_0001.JPG", "IMG_0001.JPG.xmp"]  # no temp file left


def test_other_tools_fields_all_come_back_with_ours(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    before = read_sidecar(sidecar)
    assert xmp.tag(p, rank=1, score=2.5).action == "updated"
    after = read_sidecar(sidecar)
    assert others(after) == others(before)
    assert len(others(before)) >= 15  # rating, label, caption, custom field, the face region's parts
    assert after[xmp.SUBJECT] == ["family", "beach", "novel"]
    assert after[xmp.HIERARCHICAL] == ["Places|Beach", "novel"]
    assert after[xmp.DIGIKAM_TAGS] == ["Places/Beach", "family", "novel"]  # digiKam reads this list first
    assert (after[xmp.RANK], after[xmp.SCORE]) == ("1", "2.5")
    assert xmp.CREATED not in after


def test_lightroom_develop_settings_survive(tmp_path):
    p = photo(tmp_path, "IMG_2.CR2")
    sidecar = tmp_path / "IMG_2.xmp"
    sidecar.write_text(LIGHTROOM_SIDECAR)
    before = read_sidecar(sidecar)
    xmp.tag(p, rank=2, score=1.0)
    after = read_sidecar(sidecar)
    assert others(after) == others(before)
    assert after["Xmp.crs.ToneCurvePV2012"] == ["0, 0", "255, 255"]
    assert after["Xmp.crs.Exposure2012"] == "+0.50"
    assert xmp.DIGIKAM_TAGS not in after  # not created where digiKam has not written one


def test_read_back_by_exiftool(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    xmp.tag(p, rank=7, score=0.25)
    tags = exiftool(sidecar)
    assert as_list(tags["XMP-dc:Subject"]) == ["family", "beach", "novel"]
    assert as_list(tags["XMP-lr:HierarchicalSubject"]) == ["Places|Beach", "novel"]
    assert as_list(tags["XMP-digiKam:TagsList"]) == ["Places/Beach", "family", "novel"]
    assert tags["XMP-xmp:Rating"] == 4
    assert tags["XMP-xmp:Label"] == "Red"
    assert tags["XMP-dc:Description"] == "Sunset at the pier"
    assert tags["XMP-acme:ProjectCode"] == "ALPHA-7"
    assert tags["XMP-mwg-rs:RegionInfo"]["RegionList"][0]["Name"] == "Anna"
    assert tags["XMP-novelfind:Rank"] == 7
    assert tags["XMP-novelfind:Score"] == 0.25


def test_read_back_by_exiv2_command(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    xmp.tag(p, rank=7, score=0.25)
    out = subprocess.run([tool("exiv2"), "-px", str(sidecar)], capture_output=True, text=True, check=True)
    lines = {line.split()[0]: line.split(None, 3)[3] for line in out.stdout.splitlines() if line.strip()}
    assert lines["Xmp.dc.subject"] == "family, beach, novel"
    assert lines["Xmp.lr.hierarchicalSubject"] == "Places|Beach, novel"
    assert lines["Xmp.xmp.Rating"] == "4"
    assert lines["Xmp.acme.ProjectCode"] == "ALPHA-7"
    assert lines["Xmp.novelfind.Rank"] == "7"


def test_two_runs_leave_one_keyword_and_the_second_writes_nothing(tmp_path):
    p = photo(tmp_path)
    first = xmp.tag(p, rank=1, score=0.5)
    before = fingerprint(first.sidecar)
    second = xmp.tag(p, rank=1, score=0.5)
    assert second.action == "unchanged"
    assert fingerprint(first.sidecar) == before
    props = read_sidecar(first.sidecar)
    assert props[xmp.SUBJECT] == ["novel"] and props[xmp.HIERARCHICAL] == ["novel"]


def test_new_rank_updates_without_a_second_keyword(tmp_path):
    p = photo(tmp_path)
    xmp.tag(p, rank=1, score=0.5)
    assert xmp.tag(p, rank=4, score=0.125).action == "updated"
    props = read_sidecar(sidecar_for(p))
    assert props[xmp.SUBJECT] == ["novel"]
    assert (props[xmp.RANK], props[xmp.SCORE]) == ("4", "0.125")


def test_keyword_already_set_by_the_user_is_not_recorded_as_ours(tmp_path):
    p = photo(tmp_path, "IMG_2.CR2")
    sidecar = tmp_path / "IMG_2.xmp"
    sidecar.write_text(LIGHTROOM_SIDECAR)  # the user tagged it "novel" already
    xmp.tag(p, rank=1, score=1.0)
    props = read_sidecar(sidecar)
    assert props[xmp.SUBJECT] == ["novel", "Tokyo"]  # not twice
    assert xmp.ADDED_SUBJECT not in props  # not ours to take back
    assert props[xmp.ADDED_HIERARCHICAL] == ["novel"]  # lr:hierarchicalSubject did not have it
    assert xmp.untag(p).action == "removed"
    after = read_sidecar(sidecar)
    assert after[xmp.SUBJECT] == ["novel", "Tokyo"]
    assert after[xmp.HIERARCHICAL] == ["Places|Tokyo"]


def test_hierarchical_keyword(tmp_path):
    p = photo(tmp_path)
    (tmp_path / "IMG_0001.JPG.xmp").write_text(DIGIKAM_SIDECAR)
    xmp.tag(p, rank=1, score=1.0, keyword="Picks | novel")
    props = read_sidecar(tmp_path / "IMG_0001.JPG.xmp")
    assert props[xmp.SUBJECT][-1] == "novel"
    assert props[xmp.HIERARCHICAL][-1] == "Picks|novel"
    assert props[xmp.DIGIKAM_TAGS][-1] == "Picks/novel"


def test_keyword_with_a_comma_stays_one_keyword(tmp_path):
    p = photo(tmp_path)
    xmp.tag(p, rank=1, score=1.0, keyword="odd, really")
    assert as_list(exiftool(sidecar_for(p))["XMP-dc:Subject"]) == ["odd, really"]


@pytest.mark.parametrize("bad", ["", "   ", "a||b", "|a", 3])
def test_bad_keyword_is_refused_before_writing(tmp_path, bad):
    p = photo(tmp_path)
    with pytest.raises(ValueError):
        xmp.tag(p, rank=1, score=1.0, keyword=bad)
    assert not sidecar_for(p).exists()


def test_a_sidecar_is_never_taken_for_a_photo(tmp_path):
    with pytest.raises(ValueError, match="expected a photo"):
        xmp.tag(tmp_path / "a.jpg.xmp", rank=1, score=1.0)


def test_changed_keyword_replaces_the_one_novelfind_added(tmp_path):
    p = photo(tmp_path)
    (tmp_path / "IMG_0001.JPG.xmp").write_text(DIGIKAM_SIDECAR)
    xmp.tag(p, rank=1, score=1.0)
    xmp.tag(p, rank=1, score=1.0, keyword="odd")
    props = read_sidecar(tmp_path / "IMG_0001.JPG.xmp")
    assert props[xmp.SUBJECT] == ["family", "beach", "odd"]
    assert props[xmp.ADDED_SUBJECT] == ["odd"]
    xmp.untag(p)
    assert read_sidecar(tmp_path / "IMG_0001.JPG.xmp")[xmp.SUBJECT] == ["family", "beach"]


# ---------------------------------------------------------------------------------------------- untag


def test_untag_restores_every_field(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    original = read_sidecar(sidecar)
    xmp.tag(p, rank=1, score=1.0)
    assert xmp.untag(p) == xmp.SidecarChange(p, sidecar, "removed")
    assert read_sidecar(sidecar) == original
    assert xmp.untag(p).action == "unchanged"


def test_untag_keeps_keywords_added_by_hand_in_between(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    xmp.tag(p, rank=1, score=1.0)
    # another tool edits the sidecar after novelfind did
    subprocess.run(
        [
            tool("exiftool"),
            "-q",
            "-overwrite_original",
            "-XMP-dc:Subject+=holiday",
            "-XMP-xmp:Rating=5",
            str(sidecar),
        ],
        check=True,
    )
    xmp.untag(p)
    props = read_sidecar(sidecar)
    assert props[xmp.SUBJECT] == ["family", "beach", "holiday"]
    assert props["Xmp.xmp.Rating"] == "5"
    assert not [k for k in props if k.startswith("Xmp.novelfind.")]


def test_untag_deletes_a_sidecar_novelfind_created_when_nothing_else_is_in_it(tmp_path):
    p = photo(tmp_path)
    sidecar = xmp.tag(p, rank=1, score=1.0).sidecar
    assert xmp.untag(p) == xmp.SidecarChange(p, sidecar, "deleted")
    assert sorted(os.listdir(tmp_path)) == ["IMG_0001.JPG"]


def test_untag_keeps_a_created_sidecar_the_user_wrote_into(tmp_path):
    p = photo(tmp_path)
    sidecar = xmp.tag(p, rank=1, score=1.0).sidecar
    subprocess.run(
        [tool("exiftool"), "-q", "-overwrite_original", "-XMP-xmp:Rating=2", str(sidecar)], check=True
    )
    assert xmp.untag(p).action == "removed"
    assert read_sidecar(sidecar) == {"Xmp.xmp.Rating": "2"}


def test_untag_without_sidecar(tmp_path):
    p = photo(tmp_path)
    assert xmp.untag(p).action == "unchanged"
    assert not sidecar_for(p).exists()


# ---------------------------------------------------------------------------------------------- bad sidecars


# Well-formed XML that is not valid XMP: libexiv2 only logs it and reads no property.
BAD_RDF = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/">'
    b"<dc:subject><rdf:Bag><rdf:li>kept</rdf:li></rdf:Bag><rdf:Bag/></dc:subject>"
    b"</rdf:Description></rdf:RDF></x:xmpmeta>"
)


@pytest.mark.parametrize(
    "content",
    [
        DIGIKAM_SIDECAR[: len(DIGIKAM_SIDECAR) // 2].encode(),  # cut short
        b"\x00\x01\x02 binary junk" * 40,
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 200,  # a JPEG named .xmp
        b'<?xml version="1.0"?><html><body>not xmp</body></html>',
        BAD_RDF,
    ],
    ids=["truncated", "binary", "jpeg", "other-xml", "bad-rdf"],
)
def test_unparseable_sidecar_is_left_untouched_and_reported(tmp_path, capfd, content):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_bytes(content)
    before = fingerprint(sidecar)
    for call in (lambda: xmp.tag(p, rank=1, score=1.0), lambda: xmp.untag(p)):
        with pytest.raises(SidecarError) as excinfo:
            call()
        assert excinfo.value.path == sidecar
        assert "\n" not in str(excinfo.value)
    assert fingerprint(sidecar) == before
    assert capfd.readouterr() == ("", "")  # libexiv2's complaint is not printed


def test_invalid_xmp_is_detected_even_when_the_application_silenced_libexiv2(tmp_path):
    import logging

    import exiv2

    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_bytes(BAD_RDF)
    logger = logging.getLogger("exiv2")
    old_level, old_lib = logger.level, exiv2.LogMsg.level()
    logger.setLevel(logging.CRITICAL)
    exiv2.LogMsg.setLevel(exiv2.LogMsg.Level.mute)
    try:
        with pytest.raises(SidecarError, match="Invalid child of resource property element"):
            xmp.tag(p, rank=1, score=1.0)
        assert (logger.level, exiv2.LogMsg.level()) == (logging.CRITICAL, exiv2.LogMsg.Level.mute)  # restored
    finally:
        logger.setLevel(old_level)
        exiv2.LogMsg.setLevel(old_lib)
    assert sidecar.read_bytes() == BAD_RDF


def test_explicit_sidecar_must_be_named_xmp(tmp_path):
    p = photo(tmp_path)
    with pytest.raises(ValueError, match="ends in .xmp"):
        xmp.tag(p, rank=1, score=1.0, sidecar=p)
    with pytest.raises(ValueError, match="ends in .xmp"):
        xmp.untag(p, sidecar=tmp_path / "notes.txt")


def test_empty_sidecar_is_filled(tmp_path):
    p = photo(tmp_path)
    (tmp_path / "IMG_0001.JPG.xmp").write_text("\n")
    assert xmp.tag(p, rank=1, score=1.0).action == "updated"
    assert read_sidecar(tmp_path / "IMG_0001.JPG.xmp")[xmp.SUBJECT] == ["novel"]


def test_folder_named_like_a_sidecar(tmp_path):
    p = photo(tmp_path)
    (tmp_path / "IMG_0001.JPG.xmp").mkdir()
    with pytest.raises(SidecarError, match="not a regular file"):
        xmp.tag(p, rank=1, score=1.0)


# ---------------------------------------------------------------------------------------------- files


def test_mode_of_an_existing_sidecar_is_kept(tmp_path):
    p = photo(tmp_path)
    sidecar = tmp_path / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    os.chmod(sidecar, 0o640)
    xmp.tag(p, rank=1, score=1.0)
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o640


def test_new_sidecar_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        sidecar = xmp.tag(photo(tmp_path), rank=1, score=1.0).sidecar
    finally:
        os.umask(old)
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o640


def test_new_sidecar_belongs_to_the_photos_owner_when_run_as_root(tmp_path):
    p = photo(tmp_path)
    if os.geteuid() == 0:
        os.chown(p, 4321, 4322)
        expected = (4321, 4322)
    else:
        expected = (os.geteuid(), p.stat().st_gid)
    st = xmp.tag(p, rank=1, score=1.0).sidecar.stat()
    assert (st.st_uid, st.st_gid) == expected


def test_symlinked_sidecar_is_refused_and_its_target_left_alone(tmp_path):
    p = photo(tmp_path / "photos")
    store = tmp_path / "store" / "IMG_0001.JPG.xmp"
    store.parent.mkdir()
    store.write_text(DIGIKAM_SIDECAR)
    link = tmp_path / "photos" / "IMG_0001.JPG.xmp"
    link.symlink_to(store)
    with pytest.raises(xmp.SidecarError, match="symbolic link novelfind did not create"):
        xmp.tag(p, rank=1, score=1.0)
    assert link.is_symlink() and store.read_text() == DIGIKAM_SIDECAR


_UNPRIVILEGED_SCRIPT = """
import json, sys
from pathlib import Path
from novelfind.outputs import xmp_ledger
problems = []
summary = xmp_ledger.apply_picks(
    [xmp_ledger.SidecarPick(Path(p), i + 1, 1.0) for i, p in enumerate(sys.argv[3:])],
    roots=[sys.argv[1]], ledger=sys.argv[2], on_problem=lambda p, r: problems.append([str(p), r]),
)
print(json.dumps({"changes": [[str(c.sidecar), c.action] for c in summary.changes], "problems": problems}))
"""


def run_unprivileged(root: Path, ledger: Path, *photos: Path) -> dict:
    proc = subprocess.run(
        unprivileged([sys.executable, "-c", _UNPRIVILEGED_SCRIPT, str(root), str(ledger), *map(str, photos)]),
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def test_read_only_folder_is_a_problem_not_a_crash(tmp_path):
    locked = photo(tmp_path / "locked")
    free = photo(tmp_path / "free")
    os.chmod(tmp_path / "locked", 0o555)
    try:
        result = run_unprivileged(tmp_path, tmp_path / "ledger.json", locked, free)
    finally:
        os.chmod(tmp_path / "locked", 0o755)
    assert result["problems"] == [
        [str(tmp_path / "locked" / "IMG_0001.JPG.xmp"), "cannot write: Permission denied"]
    ]
    assert result["changes"] == [[str(tmp_path / "free" / "IMG_0001.JPG.xmp"), "created"]]
    assert os.listdir(tmp_path / "locked") == ["IMG_0001.JPG"]


def test_read_only_sidecar_is_left_alone(tmp_path):
    p = photo(tmp_path / "photos")
    sidecar = tmp_path / "photos" / "IMG_0001.JPG.xmp"
    sidecar.write_text(DIGIKAM_SIDECAR)
    os.chmod(sidecar, 0o444)
    before = fingerprint(sidecar)
    result = run_unprivileged(tmp_path / "photos", tmp_path / "ledger.json", p)
    assert result["problems"] == [[str(sidecar), "cannot write: the sidecar is read-only"]]
    assert fingerprint(sidecar) == before


# ---------------------------------------------------------------------------------------------- runs


def picks(*paths: Path) -> list[SidecarPick]:
    return [SidecarPick(p, i + 1, 1.0 / (i + 1)) for i, p in enumerate(paths)]


def keywords(p: Path) -> list[str]:
    sidecar = sidecar_for(p)
    return read_sidecar(sidecar).get(xmp.SUBJECT, []) if sidecar.exists() else []


def test_later_run_untags_photos_no_longer_picked(tmp_path):
    ledger = tmp_path / "ledger.json"
    root = tmp_path / "photos"
    a, b, c = (photo(root, f"{n}.jpg") for n in "abc")
    (root / "a.jpg.xmp").write_text(DIGIKAM_SIDECAR)

    first = xmp_ledger.apply_picks(picks(a, b), roots=[root], ledger=ledger)
    assert [(ch.photo.name, ch.action) for ch in first.changes] == [
        ("a.jpg", "updated"),
        ("b.jpg", "created"),
    ]
    assert "novel" in keywords(a) and "novel" in keywords(b)

    second = xmp_ledger.apply_picks(picks(b, c), roots=[root], ledger=ledger)
    assert sorted((ch.photo.name, ch.action) for ch in second.changes) == [
        ("a.jpg", "removed"),
        ("b.jpg", "updated"),  # new rank
        ("c.jpg", "created"),
    ]
    assert keywords(a) == ["family", "beach"]
    assert keywords(b) == ["novel"] and keywords(c) == ["novel"]
    assert set(json.loads(ledger.read_text())["sidecars"]) == {str(b), str(c)}

    third = xmp_ledger.apply_picks([], roots=[root], ledger=ledger)
    assert sorted((ch.photo.name, ch.action) for ch in third.changes) == [
        ("b.jpg", "deleted"),
        ("c.jpg", "deleted"),
    ]
    assert sorted(os.listdir(root)) == ["a.jpg", "a.jpg.xmp", "b.jpg", "c.jpg"]
    assert json.loads(ledger.read_text())["sidecars"] == {}


def test_photos_outside_the_scanned_folders_keep_their_tag(tmp_path):
    ledger = tmp_path / "ledger.json"
    old = photo(tmp_path / "2023", "x.jpg")
    new = photo(tmp_path / "2024", "y.jpg")
    xmp_ledger.apply_picks(picks(old), roots=[tmp_path / "2023"], ledger=ledger)
    summary = xmp_ledger.apply_picks(picks(new), roots=[tmp_path / "2024"], ledger=ledger)
    assert [(ch.photo.name, ch.action) for ch in summary.changes] == [("y.jpg", "created")]
    assert keywords(old) == ["novel"]
    assert set(json.loads(ledger.read_text())["sidecars"]) == {str(old), str(new)}


def test_root_prefix_is_not_a_parent(tmp_path):
    ledger = tmp_path / "ledger.json"
    other = photo(tmp_path / "photos-2", "x.jpg")
    xmp_ledger.apply_picks(picks(other), roots=[tmp_path / "photos-2"], ledger=ledger)
    xmp_ledger.apply_picks([], roots=[tmp_path / "photos"], ledger=ledger)
    assert keywords(other) == ["novel"]


def test_name_xmp_of_two_unrelated_photos_is_left_alone(tmp_path):
    """a.JPG and a.PNG are two photos: a shared a.xmp could carry only one rank, so each gets its own."""
    ledger = tmp_path / "ledger.json"
    jpg, png = photo(tmp_path, "a.JPG"), photo(tmp_path, "a.PNG")
    shared = tmp_path / "a.xmp"
    shared.write_text(LIGHTROOM_SIDECAR.replace("<rdf:li>novel</rdf:li>", ""))
    before = fingerprint(shared)
    both = [SidecarPick(jpg, 1, 0.9), SidecarPick(png, 2, 0.5)]
    xmp_ledger.apply_picks(both, roots=[tmp_path], ledger=ledger)
    assert fingerprint(shared) == before
    assert read_sidecar(tmp_path / "a.JPG.xmp")[xmp.RANK] == "1"
    assert read_sidecar(tmp_path / "a.PNG.xmp")[xmp.RANK] == "2"


def test_name_xmp_is_the_raw_files_next_to_an_export(tmp_path):
    """Lightroom writes NAME.xmp for RAW files only: next to IMG_1.CR2 and an exported IMG_1.tif, it is
    the RAW's; the export gets its own."""
    raw, tif = photo(tmp_path, "IMG_1.CR2"), photo(tmp_path, "IMG_1.tif")
    (tmp_path / "IMG_1.xmp").write_text(LIGHTROOM_SIDECAR)
    assert sidecar_for(raw) == tmp_path / "IMG_1.xmp"
    assert sidecar_for(tif) == tmp_path / "IMG_1.tif.xmp"
    converted = photo(tmp_path, "IMG_1.dng")  # a second RAW of that name: nobody's for sure
    assert sidecar_for(raw) == tmp_path / "IMG_1.CR2.xmp"
    assert sidecar_for(converted) == tmp_path / "IMG_1.dng.xmp"


def test_a_pair_shares_its_name_xmp_and_each_file_otherwise_gets_its_own(tmp_path):
    """RAW + JPEG: one SidecarPick per file; an existing NAME.xmp is the photo's (one rank for both),
    without one each file gets NAME.EXT.xmp, as darktable and digiKam show the two files apart."""
    ledger = tmp_path / "ledger.json"
    lr = tmp_path / "lr"
    jpg, raw = photo(lr, "IMG_1.JPG"), photo(lr, "IMG_1.CR2")
    (lr / "IMG_1.xmp").write_text(LIGHTROOM_SIDECAR.replace("<rdf:li>novel</rdf:li>", ""))
    summary = xmp_ledger.apply_picks(SidecarPick.for_photo([jpg, raw], 3, 0.25), roots=[lr], ledger=ledger)
    assert [(c.photo.name, c.sidecar.name, c.action) for c in summary.changes] == [
        ("IMG_1.JPG", "IMG_1.xmp", "updated"),
        ("IMG_1.CR2", "IMG_1.xmp", "unchanged"),
    ]
    assert sorted(os.listdir(lr)) == ["IMG_1.CR2", "IMG_1.JPG", "IMG_1.xmp"]
    props = read_sidecar(lr / "IMG_1.xmp")
    assert props[xmp.SUBJECT] == ["Tokyo", "novel"] and props[xmp.RANK] == "3"

    plain = tmp_path / "plain"
    jpg, raw = photo(plain, "IMG_2.JPG"), photo(plain, "IMG_2.NEF")
    xmp_ledger.apply_picks(SidecarPick.for_photo([jpg, raw], 1, 0.5), roots=[plain], ledger=ledger)
    assert sorted(os.listdir(plain)) == ["IMG_2.JPG", "IMG_2.JPG.xmp", "IMG_2.NEF", "IMG_2.NEF.xmp"]
    # the next run without the pair takes both back
    xmp_ledger.apply_picks([], roots=[plain, lr], ledger=ledger)
    assert sorted(os.listdir(plain)) == ["IMG_2.JPG", "IMG_2.NEF"]
    assert read_sidecar(lr / "IMG_1.xmp")[xmp.SUBJECT] == ["Tokyo"]


def test_shared_sidecar_of_a_photo_picked_now_keeps_the_tag(tmp_path):
    """An entry of an earlier run whose sidecar a pick of this run writes: not untagged."""
    ledger = tmp_path / "ledger.json"
    jpg, raw = photo(tmp_path, "a.JPG"), photo(tmp_path, "a.CR2")
    (tmp_path / "a.xmp").write_text(LIGHTROOM_SIDECAR.replace("<rdf:li>novel</rdf:li>", ""))
    xmp_ledger.apply_picks(SidecarPick.for_photo([jpg, raw], 1, 0.5), roots=[tmp_path], ledger=ledger)
    raw.unlink()  # the RAW is deleted; the JPEG alone is picked again and writes the same a.xmp
    summary = xmp_ledger.apply_picks(picks(jpg), roots=[tmp_path], ledger=ledger)
    assert [(c.photo.name, c.action) for c in summary.changes] == [("a.JPG", "updated")]  # new score
    assert read_sidecar(tmp_path / "a.xmp")[xmp.SUBJECT] == ["Tokyo", "novel"]
    assert set(json.loads(ledger.read_text())["sidecars"]) == {str(jpg)}


def test_a_bad_sidecar_does_not_stop_the_others(tmp_path):
    ledger = tmp_path / "ledger.json"
    a, b = photo(tmp_path, "a.jpg"), photo(tmp_path, "b.jpg")
    (tmp_path / "a.jpg.xmp").write_bytes(b"\x00junk" * 10)
    seen = []
    summary = xmp_ledger.apply_picks(
        picks(a, b), roots=[tmp_path], ledger=ledger, on_problem=lambda p, r: seen.append(p)
    )
    assert seen == [tmp_path / "a.jpg.xmp"]
    assert summary.problems[0][0] == tmp_path / "a.jpg.xmp"
    assert summary.count("created") == 1
    assert keywords(b) == ["novel"]


def test_damaged_ledger_is_kept_aside_and_the_run_goes_on(tmp_path):
    ledger = tmp_path / "ledger.json"
    ledger.write_text("{not json")
    a = photo(tmp_path, "a.jpg")
    summary = xmp_ledger.apply_picks(picks(a), roots=[tmp_path], ledger=ledger)
    assert summary.problems == [
        (ledger, f"the record of tagged sidecars is damaged (kept as {ledger}.damaged); starting a new one")
    ]
    assert (tmp_path / "ledger.json.damaged").read_text() == "{not json"
    assert set(json.loads(ledger.read_text())["sidecars"]) == {str(a)}


def test_namespace_is_permanent():
    """Written into users' sidecars: it must never change (a URN of a fixed UUID, owned by no domain)."""
    assert xmp.NAMESPACE == "urn:uuid:fb8a7613-e7cd-446e-8914-62c572187b9e#"
    assert xmp.PREFIX == "novelfind"


def test_default_ledger_lives_in_the_user_data_folder(tmp_path, isolated_user_dirs):
    assert xmp_ledger.default_ledger_path() == isolated_user_dirs / "data" / "novelfind" / "sidecars.json"
    a = photo(tmp_path, "a.jpg")
    xmp_ledger.apply_picks(picks(a), roots=[tmp_path], ledger=None)
    assert xmp_ledger.default_ledger_path().is_file()


def test_bad_keyword_touches_nothing(tmp_path):
    a = photo(tmp_path, "a.jpg")
    with pytest.raises(ValueError):
        xmp_ledger.apply_picks(picks(a), roots=[tmp_path], ledger=tmp_path / "l.json", keyword="")
    assert sorted(os.listdir(tmp_path)) == ["a.jpg"]
