"""The photo workflow end to end: RAW files, RAW + JPEG pairs, XMP sidecars and the ignore list, through
``novelfind.scan()`` and the command line (with the fake extractor)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo, missing_prerequisite, unprivileged
from PIL import Image
from sidecars import read_sidecar

import novelfind
from novelfind.base import dirs, extras
from novelfind.cli.group import cli
from novelfind.media.ignore import IgnoreList
from novelfind.media.sidecars import sidecar_for
from novelfind.outputs import xmp

try:
    import rawpy  # noqa: F401
    import tifffile  # noqa: F401
except ImportError:  # pragma: no cover - the test extras install them
    _RAW_MISSING: str | None = "RAW tests need rawpy and tifffile (pip install '.[test]')"
else:
    _RAW_MISSING = None


def needs_raw() -> None:
    if _RAW_MISSING:
        missing_prerequisite(_RAW_MISSING)


def needs_xmp() -> None:
    if not xmp.available():
        missing_prerequisite("XMP tests need python-exiv2 (pip install '.[test]')")


def run(*args, env: dict | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def write_dng(path: Path, colour: tuple[int, int, int], seed: int, *, size=(320, 240)) -> Path:
    """A real DNG (Bayer data, no preview) of a noisy picture of one colour."""
    from rawfiles import write_dng as dng

    rng = np.random.default_rng(seed)
    w, h = size
    rgb = np.clip(np.asarray(colour, np.float32) + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    return dng(path, rgb)


def relative(picks, root: Path) -> list[tuple[str, float, str | None]]:
    return [
        (str(p.path.relative_to(root)), p.score, p.neighbour and str(p.neighbour.relative_to(root)))
        for p in picks
    ]


# ------------------------------------------------------------------------------------------ pairs


def add_raw_twins(library: dict, every: int = 3) -> list[Path]:
    """A RAW twin (IMG_0003.CR2 next to IMG_0003.jpg) for every ``every``-th ordinary photo and each odd
    JPEG; upper-case extensions, as cameras write them."""
    twins = []
    for path in [*library["ordinary"][::every], *[p for p in library["odd"] if p.suffix == ".jpg"]]:
        twin = path.with_name(path.stem + ".CR2")
        twin.write_bytes(b"II*\x00 raw data of " + path.name.encode())  # never read: the JPEG is
        twins.append(twin)
    return twins


def test_a_library_with_pairs_ranks_exactly_as_without_its_raw_twins(library, fake_extractor):
    root = library["root"]
    without = novelfind.scan(root, k=8, cache=False)
    read_without = fake_extractor.images
    twins = add_raw_twins(library)
    fake_extractor.images = 0
    paired = novelfind.scan(root, k=8, cache=False)
    assert relative(paired.picks, root) == relative(without.picks, root)
    np.testing.assert_array_equal(paired.features, without.features)
    assert fake_extractor.images == read_without == 33  # each photo read once, through its JPEG
    assert paired.counts.photos == 33 and paired.counts.found == 33 + len(twins)
    twin_of = {t.with_suffix(".jpg"): t for t in twins}
    for pick in paired.picks:
        assert pick.path.suffix == ".jpg" or pick.path.suffix == ".png"
        assert pick.also == ((twin_of[pick.path],) if pick.path in twin_of else ())
    assert sum(1 for p in paired.picks if p.also) >= 2  # the odd JPEGs have twins


def test_pairs_in_the_records_summary_and_copies(library, fake_extractor, tmp_path):
    twins = add_raw_twins(library)
    dest = tmp_path / "novel"
    report = tmp_path / "r.html"
    result = run(
        "scan",
        library["root"],
        "--k",
        "3",
        "--format",
        "json",
        "--copy-to",
        dest,
        "--no-cache",
        "--report",
        report,
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["version"] == 2
    assert (doc["run"]["images_found"], doc["run"]["photos_found"]) == (33 + len(twins), 33)
    by_path = {Path(p["path"]): p["also"] for p in doc["picks"]}
    red = library["root"] / "trip1" / "odd_red.jpg"
    assert by_path[red] == [str(red.with_suffix(".CR2"))]
    assert by_path[library["root"] / "odd_green.png"] == []
    assert f"33 photos ({33 + len(twins)} files) found" in result.stderr
    assert "<dt>also</dt><dd>odd_red.CR2</dd>" in report.read_text()
    placed = sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))
    rank = {Path(p["path"]).name: p["rank"] for p in doc["picks"]}
    assert f"{rank['odd_red.jpg']:03d}_odd_red.CR2" in placed
    assert len(placed) == 3 + sum(1 for also in by_path.values() if also)
    csv_out = run("scan", library["root"], "--k", "3", "--format", "csv", "--no-cache", "-q").stdout
    assert csv_out.splitlines()[0].endswith(
        ",also,member_count,taken,taken_source,labels,span_first,span_last"
    )


# ------------------------------------------------------------------------------------------ RAW


def test_raw_files_are_read_ranked_and_shown(library, fake_extractor, tmp_path):
    needs_raw()
    odd_raw = write_dng(library["root"] / "trip0" / "DSC_0001.DNG", (250, 200, 0), seed=5)
    result = novelfind.scan(
        library["root"],
        k=4,
        cache=tmp_path / "c.sqlite",
        report=tmp_path / "r.html",
        contact_sheet=tmp_path / "sheet.png",
    )
    assert odd_raw in {p.path for p in result.picks}
    assert result.counts.photos == 34 and not result.failures
    page = (tmp_path / "r.html").read_text()
    card = page[page.index(f'id="pick-{[p.path for p in result.picks].index(odd_raw) + 1}"') :]
    card = card[: card.index("</section>")]
    assert "320 × 240" in card and "data:image/jpeg;base64," in card
    thumb = re.search(r'src="data:image/jpeg;base64,([^"]+)"', card).group(1)
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(thumb))).convert("RGB"), np.float32)
    r, g, b = pixels.mean(axis=(0, 1))
    assert r > 200 and r > g > b + 50  # the orange picture, demosaiced (LibRaw's tone curve, not the JPEG's)
    with Image.open(tmp_path / "sheet.png") as sheet:
        assert sheet.size[0] > 256
    # the cache holds RAW files like any other: a second scan reads none
    fake_extractor.images = 0
    again = novelfind.scan(library["root"], k=4, cache=tmp_path / "c.sqlite")
    assert (again.counts.from_cache, fake_extractor.images) == (34, 0)


def test_a_damaged_raw_is_one_warning_like_any_bad_file(library, fake_extractor, tmp_path, capfd):
    needs_raw()
    good = write_dng(tmp_path / "x.dng", (10, 200, 10), seed=1)
    bad = library["root"] / "broken.NEF"
    bad.write_bytes(good.read_bytes()[:2000])
    result = run("scan", library["root"], "--k", "2", "--no-cache")  # 34 files: decode workers
    assert result.exit_code == 3, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: cannot read {bad}: truncated or unreadable RAW data"]
    # LibRaw's own line about the file ("Unexpected end of file") went nowhere: workers drop their stderr
    assert "Unexpected end of file" not in capfd.readouterr().err


def test_without_rawpy_a_raw_twin_stays_with_its_photo_and_a_lone_raw_is_left_out(
    library, fake_extractor, tmp_path, monkeypatch
):
    monkeypatch.setitem(extras._loaded, "rawpy", ImportError("No module named 'rawpy'"))
    twins = add_raw_twins(library)
    lone = library["root"] / "DSC_0001.NEF"
    lone.write_bytes(b"raw data nobody can read here")
    warnings: list[str] = []
    result = novelfind.scan(library["root"], k=3, cache=False, on_warning=warnings.append)
    assert warnings == [
        "1 RAW file without a JPEG twin left out: RAW support is not installed (pip install 'novelfind[raw]')"
    ]
    assert result.counts.photos == 33 and result.counts.found == 33 + len(twins)
    assert not result.failures
    assert any(p.also for p in result.picks)
    only_raw = tmp_path / "raw-only"
    only_raw.mkdir()
    shutil.copy(lone, only_raw)
    refused = run("scan", only_raw)
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"error: no images found in {only_raw} (1 RAW file without a JPEG twin left out: RAW support is not "
        "installed (pip install 'novelfind[raw]'))\n"
    )


# ------------------------------------------------------------------------------------------ ignore list


def test_ignored_photos_are_never_picked_but_still_ranked_with_the_rest(library, fake_extractor, tmp_path):
    root = library["root"]
    red = root / "trip1" / "odd_red.jpg"
    everything = novelfind.scan(root, k=5, dedup=0, cache=tmp_path / "c.sqlite")
    assert red in {p.path for p in everything.picks}
    change = novelfind.IgnoreList().add([red])
    assert [e.path for e in change.changed] == [red]
    result = novelfind.scan(root, k=5, dedup=0, cache=tmp_path / "c.sqlite")
    assert red not in {p.path for p in result.picks}
    assert (result.counts.ignored, result.counts.candidates) == (1, 32)
    assert len(result.files) == 33 and result.record()["ignored"] == 1
    # every photo is scored as before, the ignored one included (it still makes its neighbours look
    # ordinary); the picks are the best of the others, with those scores
    scores = novelfind.rank(result.features, 5, dedup=0).all_scores
    order = np.lexsort((np.arange(len(scores)), -scores))
    expected = [(result.files[i].path, float(scores[i])) for i in order if result.files[i].path != red][:5]
    assert [(p.path, p.score) for p in result.picks] == expected
    assert [(p.path, p.score) for p in result.picks[:4]] == [
        (p.path, p.score) for p in everything.picks if p.path != red
    ][:4]
    shown = novelfind.scan(root, k=5, dedup=0, cache=tmp_path / "c.sqlite", include_ignored=True)
    assert [(p.path, p.score) for p in shown.picks] == [(p.path, p.score) for p in everything.picks]


def test_a_moved_ignored_photo_stays_ignored_without_the_cache(library, fake_extractor, tmp_path):
    root = library["root"]
    red = root / "trip1" / "odd_red.jpg"
    novelfind.IgnoreList().add([red])
    moved = root / "elsewhere" / "renamed.jpg"
    moved.parent.mkdir()
    red.rename(moved)
    result = novelfind.scan(root, k=3, cache=False)
    assert moved not in {p.path for p in result.picks} and result.counts.ignored == 1
    assert [e.path for e in novelfind.IgnoreList().entries()] == [moved]  # where it was seen last


def test_ignoring_the_raw_of_a_pair_ignores_the_photo(library, fake_extractor):
    root = library["root"]
    twins = add_raw_twins(library)
    red_raw = next(t for t in twins if t.stem == "odd_red")
    novelfind.IgnoreList().add([red_raw])
    result = novelfind.scan(root, k=3, cache=False)
    assert red_raw.with_suffix(".jpg") not in {p.path for p in result.picks}
    assert result.counts.ignored == 1


def test_ignore_picks_shows_new_photos_next_time_and_survives_cache_clear(library, fake_extractor, tmp_path):
    root = library["root"]
    first = run("scan", root, "--k", "2", "--ignore-picks", "--format", "paths")
    assert first.exit_code == 0, first.stderr
    assert "2 picks added to the ignore list" in first.stderr
    first_picks = set(first.stdout.splitlines())
    assert run("cache", "clear").exit_code == 0
    second = run("scan", root, "--k", "2", "--format", "paths")
    assert second.exit_code == 0, second.stderr
    assert not first_picks & set(second.stdout.splitlines())
    assert "2 ignored" in second.stderr
    listed = run("ignore", "--list")
    assert listed.exit_code == 0
    assert sorted(line.split("\t")[1] for line in listed.stdout.splitlines()) == sorted(first_picks)
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", line.split("\t")[0])
        for line in listed.stdout.splitlines()
    )
    again = run("scan", root, "--k", "2", "--format", "paths", "--include-ignored")
    assert set(again.stdout.splitlines()) == first_picks


def test_ignore_command(library, fake_extractor, tmp_path):
    root = library["root"]
    red, green, stripes = library["odd"]
    listfile = tmp_path / "mine.json"
    added = run("ignore", red, green, "--ignore-file", listfile)
    assert (added.exit_code, added.stdout, added.stderr) == (0, "added\t2\n", "")
    again = run("ignore", red, tmp_path / "gone.jpg", "--ignore-file", listfile)
    assert again.exit_code == 3
    assert again.stdout == "added\t0\n"
    assert again.stderr == (
        "note: 1 photo was already on the ignore list\n"
        f"warning: cannot read {tmp_path / 'gone.jpg'}: no such file or folder\n"
    )
    folder = run("ignore", root / "trip2", "--ignore-file", listfile)
    assert folder.stdout == f"added\t{1 + sum(1 for p in library['ordinary'] if p.parent.name == 'trip2')}\n"
    assert folder.exit_code == 0
    assert stripes in {e.path for e in IgnoreList(listfile).entries()}
    in_trip2 = 1 + sum(1 for p in library["ordinary"] if p.parent.name == "trip2")  # and odd_stripes.jpg
    removed = run("ignore", "--remove", red, root / "trip2", "--ignore-file", listfile)
    assert (removed.exit_code, removed.stdout, removed.stderr) == (0, f"removed\t{1 + in_trip2}\n", "")
    assert {e.path for e in IgnoreList(listfile).entries()} == {green}
    missing = run("ignore", "--remove", red, "--ignore-file", listfile)
    assert (missing.stdout, missing.stderr) == ("removed\t0\n", f"note: not on the ignore list: {red}\n")
    scanned = run("scan", root, "--k", "3", "--ignore-file", listfile, "--format", "paths", "--no-cache")
    assert str(green) not in scanned.stdout.splitlines()
    cleared = run("ignore", "--clear", "--ignore-file", listfile)
    assert (cleared.exit_code, cleared.stdout) == (0, "cleared\t1\n")
    assert run("ignore", "--list", "--ignore-file", listfile).stdout == ""
    assert not dirs.ignore_list_path().exists()  # the default list was never touched


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give PATHS to ignore (or to --remove), or use --list or --clear"),
        (["--list", "x.jpg"], "--list takes no PATHS"),
        (["--clear", "--list"], "--list and --clear cannot be used together"),
        (["--remove"], "give PATHS to ignore (or to --remove), or use --list or --clear"),
    ],
)
def test_ignore_usage_errors(args, message):
    result = run("ignore", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {message}\n")


def test_a_damaged_ignore_list_stops_a_scan_before_it_reads_a_photo(library, fake_extractor, tmp_path):
    listfile = tmp_path / "ignored.json"
    listfile.write_text("{not json")
    result = run("scan", library["root"], "--ignore-file", listfile)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: the ignore list {listfile} is damaged (")
    assert fake_extractor.images == 0
    assert run("scan", library["root"], "--ignore-file", listfile, "--include-ignored", "-q").exit_code == 0


def test_the_ignore_command_uses_the_configured_list(library, fake_extractor, tmp_path, isolated_user_dirs):
    listfile = tmp_path / "configured.json"
    config = isolated_user_dirs / "config" / "novelfind" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"ignore_file = {str(listfile)!r}\n")
    assert run("ignore", library["odd"][0]).exit_code == 0
    assert [e.path for e in IgnoreList(listfile).entries()] == [library["odd"][0]]
    result = run("scan", library["root"], "--k", "3", "--format", "paths", "--no-cache", "-q")
    assert str(library["odd"][0]) not in result.stdout


# ------------------------------------------------------------------------------------------ XMP


def keywords(photo: Path) -> list[str]:
    sidecar = sidecar_for(photo)
    return read_sidecar(sidecar).get(xmp.SUBJECT, []) if sidecar.exists() else []


def test_xmp_tags_the_picks_and_a_later_run_takes_back_what_it_wrote(library, fake_extractor, tmp_path):
    needs_xmp()
    root = library["root"]
    twins = add_raw_twins(library)
    red = root / "trip1" / "odd_red.jpg"
    first = run(
        "scan", root, "--k", "3", "--xmp", "--xmp-keyword", "Picks|novel", "--format", "json", "--no-cache"
    )
    assert first.exit_code == 0, first.stderr
    picks = json.loads(first.stdout)["picks"]
    for pick in picks:
        for f in [pick["path"], *pick["also"]]:
            props = read_sidecar(Path(f + ".xmp"))
            assert props[xmp.SUBJECT] == ["novel"] and props[xmp.HIERARCHICAL] == ["Picks|novel"]
            assert props[xmp.RANK] == str(pick["rank"])
    assert (red.with_suffix(".CR2").with_name("odd_red.CR2.xmp")).exists()
    tagged = sum(1 + len(p["also"]) for p in picks)
    assert f"XMP sidecars: {tagged} tagged ({tagged} created), 0 untagged (0 deleted), 0 not written" in (
        first.stderr
    )
    assert all(p.read_bytes() for p in [*library["ordinary"], *library["odd"], *twins])  # photos untouched
    # the user adds a keyword of their own to one sidecar; the next run picks other photos
    user_sidecar = Path(picks[0]["path"] + ".xmp")
    text = user_sidecar.read_text()
    assert text.index("<dc:subject>") < text.index("<rdf:li>novel</rdf:li>")  # dc:subject's comes first
    mine = "<rdf:li>novel</rdf:li><rdf:li>mine</rdf:li>"
    user_sidecar.write_text(text.replace("<rdf:li>novel</rdf:li>", mine, 1))
    for pick in picks:
        novelfind.IgnoreList().add([pick["path"]])
    second = run("scan", root, "--k", "3", "--xmp", "--xmp-keyword", "Picks|novel", "--no-cache", "-q")
    assert second.exit_code == 0, second.stderr
    assert keywords(Path(picks[0]["path"])) == ["mine"]
    for pick in picks[1:]:
        assert not Path(pick["path"] + ".xmp").exists()  # created by novelfind, nothing else in it: gone


def test_xmp_problems_are_warnings_even_with_quiet_and_exit_3(library, fake_extractor, tmp_path):
    needs_xmp()
    import subprocess
    import sys

    root = tmp_path / "ro"
    shutil.copytree(library["root"], root)
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        folder.chmod(0o555)
    script = Path(__file__).resolve().parents[1] / "support" / "fake_cli.py"
    try:
        proc = subprocess.run(
            unprivileged(
                [
                    sys.executable,
                    str(script),
                    "scan",
                    str(root),
                    "--k",
                    "2",
                    "--xmp",
                    "--no-cache",
                    "-q",
                    "--format",
                    "paths",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
        )
    finally:
        for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            folder.chmod(0o755)
    assert proc.returncode == 3, proc.stderr
    picks = proc.stdout.splitlines()
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and len(picks) == 2
    for line, pick in zip(lines, picks, strict=True):
        assert line.startswith(f"warning: XMP sidecar {pick}.xmp: cannot write: "), line
    assert not list(root.rglob("*.xmp"))


def test_xmp_without_its_library_is_a_clear_error_before_any_work(library, fake_extractor, monkeypatch):
    import novelfind.outputs.write

    monkeypatch.setattr(novelfind.outputs.write, "xmp_available", lambda: False)
    result = run("scan", library["root"], "--xmp")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "error: XMP sidecars need python-exiv2, which is not installed: pip install 'novelfind[xmp]'\n"
    )
    assert fake_extractor.images == 0
    with pytest.raises(novelfind.MissingExtraError):
        novelfind.scan(library["root"], xmp=True)


@pytest.mark.parametrize("keyword", ["", "Picks||novel", " "])
def test_bad_xmp_keyword_is_a_usage_error(library, fake_extractor, keyword):
    result = run("scan", library["root"], "--xmp", "--xmp-keyword", keyword)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: xmp_keyword: ")
    with pytest.raises(novelfind.InputError, match="xmp_keyword"):
        novelfind.ScanParameters(paths="x", xmp_keyword=keyword)


def test_xmp_keyword_without_xmp_is_a_usage_error_and_writes_nothing(library, fake_extractor):
    result = run("scan", library["root"], "--xmp-keyword", "odd")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("error: --xmp-keyword takes effect only with --xmp")
    assert fake_extractor.images == 0
    assert not list(library["root"].rglob("*.xmp"))


def test_the_weekly_cron_run(library, fake_extractor, tmp_path):
    """The README's cron line: new photos of the week, tagged for digiKam, then ignored."""
    needs_xmp()
    root = library["root"]
    old = 1_500_000_000  # 2017
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))
    new = make_photo(root / "2026" / "IMG_9000.jpg", (250, 250, 250), seed=77)
    newer = make_photo(root / "2026" / "IMG_9001.jpg", (250, 5, 5), seed=78)  # not of the same moment
    args = [
        "scan",
        root,
        "--k",
        "1",
        "--since",
        "2020-01-01",
        "--xmp",
        "--ignore-picks",
        "-q",
        "--format",
        "paths",
    ]
    week1 = run(*args)
    assert week1.exit_code == 0, week1.stderr
    assert week1.stderr == ""
    (pick1,) = week1.stdout.splitlines()
    assert Path(pick1) in (new, newer) and keywords(Path(pick1)) == ["novel"]
    (other,) = {new, newer} - {Path(pick1)}
    # the same line again in the same week, nothing new: the other photo, which the first run ranked
    # and left, is not picked now; quiet, and the tags stay
    week2 = run(*args)
    assert (week2.exit_code, week2.stdout, week2.stderr) == (0, "", "")
    assert keywords(Path(pick1)) == ["novel"] and keywords(other) == []
    # a photo new since: it is ranked and picked; the first pick keeps its tag
    newest = make_photo(root / "2026" / "IMG_9002.jpg", (5, 250, 5), seed=79)
    week3 = run(*args)
    assert (week3.exit_code, week3.stdout, week3.stderr) == (0, f"{newest}\n", "")
    assert keywords(newest) == keywords(Path(pick1)) == ["novel"] and keywords(other) == []
    # a week later, with nothing new since: the earlier weeks' picks lose their tags
    week4 = run(*[a if a != "2020-01-01" else "2100-01-01" for a in args])
    assert (week4.exit_code, week4.stdout, week4.stderr) == (0, "", "")
    assert keywords(new) == keywords(newer) == keywords(newest) == []
