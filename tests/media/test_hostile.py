"""Valid but hostile photos (tests/support/hostile.py): each gives the right pixels, in bounded memory.

Pixels are checked, not just the shape: the colour of the first frame or page, and for every EXIF
orientation the four coloured quadrants where an upright photo has them. Memory is checked as the
growth of a fresh process's peak RSS; work as the frames a decode touches. Timings are in
scripts/bench_reliability.py.

The second half is the hostile user or neighbour (docs/security.md): links planted in a shared picks
folder or library, files that are not caches, edited cache values, names that forge lines, inputs that
cost work out of proportion to their size, and settings out of range.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import child_env, make_photo, rank_all_as_json
from hostile import BLUE, GREEN, RED, WHITE, Hostile, build_all, flat_png, forged_names, many_scans_jpeg

from novelfind.cli.group import cli
from novelfind.errors import DecodeError
from novelfind.media import decode
from novelfind.media.decode import image_info, load_image, read_for_model

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Hostile]:
    cases = build_all(tmp_path_factory.mktemp("hostile"))
    return {os.fsencode(c.path.name).decode("latin-1"): c for c in cases}


def close(pixel, colour, tolerance: int = 12) -> bool:
    return bool(np.all(np.abs(np.asarray(pixel, int) - np.asarray(colour, int)) <= tolerance))


SOLID = [
    "strip-1x100000.png",
    "strip-100000x1.png",
    "frames-10000.gif",
    "pages-1000.tif",
    "rgb16.png",
    "rgba16.png",
    "grey16.png",
    "grey16.tif",
    "cmyk.jpg",
    "cmyk.tif",
    "lab.tif",
    "big-ztxt.png",
    "big-itxt.png",
    "big-iccp.png",
    "\xe9t\xe9.jpg",  # Latin-1 bytes, not UTF-8
]


@pytest.mark.parametrize("name", SOLID)
def test_solid_colour_cases_give_their_colour(hostile, name):
    case = hostile[name]
    digest, px = read_for_model(case.path)
    assert len(digest) == 32
    assert px.shape == (224, 224, 3) and px.dtype == np.uint8
    for y, x in ((5, 5), (112, 112), (218, 218)):
        assert close(px[y, x], case.colour), (name, px[y, x].tolist(), case.colour)


ORIENTED = [f"orientation-{o}.jpg" for o in range(1, 9)]
ORIENTED += [f"orientation-{o}.{suffix}" for o in (3, 6, 8) for suffix in ("png", "webp", "tif")]


@pytest.mark.parametrize("name", ORIENTED)
def test_every_exif_orientation_comes_out_upright(hostile, name):
    case = hostile[name]
    _, px = read_for_model(case.path)
    corners = {
        "top-left": px[30, 30],
        "top-right": px[30, 194],
        "bottom-left": px[194, 30],
        "bottom-right": px[194, 194],
    }
    for (where, pixel), colour in zip(corners.items(), (RED, GREEN, BLUE, WHITE), strict=True):
        assert close(pixel, colour, 24), (name, where, pixel.tolist())
    thumb = load_image(case.path, min_side=32)  # what the HTML report shows
    assert thumb.size[0] > thumb.size[1]  # landscape, as displayed
    assert close(thumb.getpixel((2, 2)), RED, 24)
    info = image_info(case.path)
    assert (info["width"], info["height"]) == case.displayed


def test_many_frames_and_pages_decode_only_the_first(hostile, monkeypatch):
    """A 10,000-frame GIF and a 1,000-page TIFF: the decode never seeks past frame 1 (the check
    whether the file is animated), so its work does not grow with the number of frames."""
    from PIL import GifImagePlugin, TiffImagePlugin

    frames: list[int] = []
    for cls in (GifImagePlugin.GifImageFile, TiffImagePlugin.TiffImageFile):
        real_seek = cls._seek

        def seek(self, frame, *args, _real=real_seek, **kwargs):
            frames.append(frame)
            return _real(self, frame, *args, **kwargs)

        monkeypatch.setattr(cls, "_seek", seek)
    for name in ("frames-10000.gif", "pages-1000.tif"):
        frames.clear()
        _, px = read_for_model(hostile[name].path)
        assert close(px[112, 112], RED)
        assert frames and max(frames) <= 1, (name, sorted(set(frames))[-5:])


_PEAK_SCRIPT = """
import json, sys
from novelfind.media.decode import read_for_model
def peak_kb():  # this process's own high-water mark (ru_maxrss would include the parent's, inherited)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
before = peak_kb()
read_for_model(sys.argv[1])
print(json.dumps(peak_kb() - before))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "limit_mb"),
    [
        ("strip-1x100000.png", 40),  # the whole strip is 0.3 MB; a full resize would need ~20 GB
        ("strip-100000x1.png", 40),
        ("frames-10000.gif", 40),
        ("pages-1000.tif", 40),
        ("big-ztxt.png", 40),  # each inflates to 100 MB: Pillow stops at 1 MB, the retry drops it
        ("big-itxt.png", 40),
        ("big-iccp.png", 40),
    ],
)
def test_peak_memory_of_one_decode_is_bounded(hostile, name, limit_mb):
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, hostile[name].path],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    grown_kb = json.loads(out.stdout.splitlines()[-1])
    assert grown_kb < limit_mb * 1024, f"{name}: peak RSS grew by {grown_kb / 1024:.0f} MB"


@pytest.mark.slow
def test_a_scan_of_the_hostile_folder_ranks_every_photo(hostile, tmp_path):
    folder = next(iter(hostile.values())).path.parent
    env = child_env(tmp_path)
    args = rank_all_as_json(folder, "--cache", tmp_path / "c.sqlite")
    proc = subprocess.run([sys.executable, str(FAKE_CLI), *args], capture_output=True, env=env, timeout=600)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    doc = json.loads(proc.stdout.decode("utf-8", "surrogateescape"))  # file-name bytes as they are
    assert doc["failures"] == []
    assert {os.fsencode(p["path"]) for p in doc["picks"]} == {os.fsencode(c.path) for c in hostile.values()}


# -- The hostile user or neighbour ---------------------------------------------------------------------


def nf(*args, env: dict | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


@pytest.fixture
def small_library(tmp_path) -> Path:
    root = tmp_path / "lib"
    for i in range(6):
        make_photo(root / f"IMG_{i:04d}.jpg", (40 + 30 * i, 90, 200 - 25 * i), seed=i, size=(64, 48))
    return root


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_a_manifest_planted_as_a_link_is_refused_and_its_target_kept(fake_extractor, small_library, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    picks = tmp_path / "picks"
    picks.mkdir()
    (picks / ".novelfind-picks.json").symlink_to(victim)
    result = nf("scan", small_library, "--k", 2, "--copy-to", picks, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 1
    errors = [line for line in _lines(result.stderr) if line.startswith("error:")]
    assert len(errors) == 1 and ".novelfind-picks.json" in errors[0] and "symbolic link" in errors[0]
    assert victim.read_text() == "the user's own file"
    assert sorted(p.name for p in picks.iterdir()) == [".novelfind-picks.json"]  # nothing placed


def test_temporary_names_cannot_be_guessed_and_are_never_written_through(
    fake_extractor, small_library, tmp_path
):
    """Links at every name the temporary copies once had (``.novelfind-tmp-PID-I``) change nothing."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    picks = tmp_path / "picks"
    picks.mkdir()
    for i in range(50):
        (picks / f".novelfind-tmp-{os.getpid()}-{i}").symlink_to(victim)
    result = nf("scan", small_library, "--k", 3, "--copy-to", picks, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    assert victim.read_text() == "the user's own file"
    placed = sorted(p for p in picks.iterdir() if not p.name.startswith("."))
    assert len(placed) == 3
    for copy in placed:
        assert not copy.is_symlink() and copy.stat().st_nlink == 1
        assert copy.read_bytes() == (small_library / copy.name.split("_", 1)[1]).read_bytes()


@pytest.mark.parametrize("option", ["--report", "--contact-sheet"])
def test_a_report_path_that_is_a_link_is_refused(fake_extractor, small_library, tmp_path, option):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / ("out.html" if option == "--report" else "sheet.jpg")
    link.symlink_to(victim)
    result = nf("scan", small_library, "--k", 2, option, link, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 1
    assert "symbolic link novelfind did not create" in result.stderr
    assert victim.read_text() == "keep" and link.is_symlink()


def test_a_results_file_that_is_a_link_is_refused_and_its_target_left_alone(
    fake_extractor, small_library, tmp_path
):
    """``-o`` is written like every output: a link at its name is refused (one line, exit code 1), and the
    file it points to is not written."""
    real = tmp_path / "real.tsv"
    real.write_text("root's own\n")
    link = tmp_path / "novel.tsv"
    link.symlink_to(real)
    result = nf("scan", small_library, "--k", 2, "-o", link, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 1
    assert "symbolic link" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert link.is_symlink() and real.read_text() == "root's own\n"


def test_an_ignore_list_that_is_a_link_is_not_written_through(fake_extractor, small_library, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("")
    link = tmp_path / "ignored.json"
    link.symlink_to(victim)
    result = nf(
        "scan",
        small_library,
        "--k",
        1,
        "--ignore-picks",
        "--ignore-file",
        link,
        "--cache",
        tmp_path / "c.sqlite",
    )
    assert result.exit_code == 1
    assert "symbolic link novelfind did not create" in result.stderr
    assert victim.read_text() == ""


def test_a_sidecar_planted_as_a_link_is_refused_by_name(fake_extractor, small_library, tmp_path):
    pytest.importorskip("exiv2")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    sidecar = small_library / "IMG_0000.jpg.xmp"
    sidecar.symlink_to(empty)
    result = nf("scan", small_library, "--k", 6, "--xmp", "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 3  # done, one sidecar not written
    refused = [line for line in _lines(result.stderr) if "IMG_0000.jpg.xmp" in line]
    assert len(refused) == 1 and "symbolic link" in refused[0]
    assert empty.read_bytes() == b"" and sidecar.is_symlink()
    assert (small_library / "IMG_0001.jpg.xmp").is_file()  # the others are tagged


def test_retracting_a_tag_restores_an_empty_sidecar_to_the_byte(tmp_path):
    pytest.importorskip("exiv2")
    from novelfind.outputs import xmp

    photo = make_photo(tmp_path / "IMG_1.jpg", (200, 30, 30), seed=1, size=(32, 24))
    sidecar = tmp_path / "IMG_1.jpg.xmp"
    sidecar.write_bytes(b"")
    assert xmp.tag(photo, rank=1, score=0.5).action == "updated"
    assert b"novel" in sidecar.read_bytes()
    assert xmp.untag(photo).action == "removed"
    assert sidecar.read_bytes() == b""


@pytest.mark.parametrize("command", ["clear", "prune"])
@pytest.mark.parametrize(
    "content",
    [b"my thesis, chapter one\n" * 50, b"", b"SQLite format 3\x00" + bytes(84)],
    ids=["text", "empty", "foreign-header"],
)
def test_cache_commands_refuse_a_file_that_is_not_a_cache(tmp_path, command, content):
    thesis = tmp_path / "thesis.txt"
    thesis.write_bytes(content)
    result = nf("cache", command, "--cache", thesis)
    assert result.exit_code == 1
    assert _lines(result.stderr) == [_lines(result.stderr)[0]] and "is not a novelfind cache" in result.stderr
    assert thesis.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.txt"]


def test_a_cache_another_run_is_creating_is_recognised_once_it_is_written(tmp_path):
    """A scan creates the cache file empty and marks it a moment later: ``cache prune`` started in
    between waits for the mark instead of calling the file foreign (it stays refused if it stays empty)."""
    import threading

    from novelfind.cache import FeatureCache, not_ours

    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"")

    def create() -> None:
        time.sleep(0.3)
        with FeatureCache(path, "m"):
            pass

    creator = threading.Thread(target=create)
    creator.start()
    try:
        assert not_ours(path) is None
    finally:
        creator.join()


def test_another_programs_database_is_not_cleared(tmp_path):
    db = tmp_path / "notes.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    result = nf("cache", "clear", "--cache", db)
    assert result.exit_code == 1 and "not a novelfind cache" in result.stderr
    assert db.read_bytes() == before


def test_a_novelfind_cache_is_still_cleared(fake_extractor, small_library, tmp_path):
    cache = tmp_path / "c.sqlite"
    assert nf("scan", small_library, "--k", 2, "--cache", cache).exit_code == 0
    result = nf("cache", "clear", "--cache", cache)
    assert result.exit_code == 0 and result.stdout == "cleared\n"
    assert "vectors\t0" in nf("cache", "info", "--cache", cache).stdout


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 3e38])
def test_a_damaged_cached_vector_is_extracted_again_with_one_warning(
    fake_extractor, small_library, tmp_path, value
):
    cache = tmp_path / "c.sqlite"
    args = ["scan", small_library, "--k", 6, "--dedup", 0, "--format", "tsv", "--cache", cache]
    first = nf(*args)
    assert first.exit_code == 0, first.stderr
    conn = sqlite3.connect(cache)
    digest = conn.execute(
        "SELECT digest FROM files WHERE path = ?", (os.fsencode(small_library / "IMG_0003.jpg"),)
    ).fetchone()[0]
    dim = conn.execute("SELECT dim FROM vectors WHERE digest = ?", (digest,)).fetchone()[0]
    bad = np.full(dim, value, "<f4")
    conn.execute("UPDATE vectors SET data = ? WHERE digest = ?", (bad.tobytes(), digest))
    conn.commit()
    conn.close()
    calls = fake_extractor.images
    again = nf(*args)
    assert again.exit_code == 0, again.stderr
    warned = [line for line in _lines(again.stderr) if line.startswith("warning:")]
    assert len(warned) == 1 and "IMG_0003.jpg" in warned[0] and "damaged" in warned[0]
    assert fake_extractor.images - calls == 1  # that photo alone went through the model again
    assert again.stdout == first.stdout  # the same ranking as before the damage
    third = nf(*args)  # and the cache holds the good vector again
    assert third.exit_code == 0 and "warning" not in third.stderr and third.stdout == first.stdout


def test_the_models_bound_on_a_vectors_norm_is_enforced(tmp_path):
    from novelfind.cache import FeatureCache
    from novelfind.media.walk import ImageFile
    from novelfind.model.weights import STORED_NORM_MAX

    warned: list[str] = []
    files = [ImageFile(Path(f"/lib/{i}.jpg"), 10, 20) for i in range(3)]
    with FeatureCache(tmp_path / "c.sqlite", "m", max_norm=STORED_NORM_MAX, on_warning=warned.append) as c:
        c.put_many(
            [
                (files[0], "d0", np.full(1280, 6.0, np.float32)),  # the largest the model makes
                (files[1], "d1", np.full(1280, 7.0, np.float32)),  # more than ReLU6 can give
                (files[2], "d2", np.full(1280, 0.5, np.float32)),
            ]
        )
        found = c.get_many_by_stat(files)
        assert [v is not None for v in found] == [True, False, True]
        assert len(warned) == 1 and "/lib/1.jpg" in warned[0]
        assert list(c.has_many_by_stat(files, 1280)) == [True, False, True]  # deleted: found no more
        assert len(warned) == 1


def test_names_reach_stderr_as_one_line_each_without_escape_sequences(
    fake_extractor, small_library, tmp_path
):
    forged = forged_names(small_library)
    result = nf("scan", small_library, "--k", 2, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 3
    lines = result.stderr.splitlines()  # splits at U+2028, U+2029 and U+0085 too
    unreadable = [line for line in lines if line.startswith("warning: cannot read")]
    assert len(unreadable) == len(forged)
    assert all(line.startswith(("warning: cannot read", "note:")) or "found" in line for line in lines), lines
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    assert any("x\\nwarning: forged.jpg" in line for line in unreadable)


@pytest.mark.parametrize("fmt", ["tsv", "jsonl", "paths"])
def test_line_formats_keep_one_pick_per_line_with_unicode_separators(fake_extractor, tmp_path, fmt):
    root = tmp_path / "lib"
    for i, name in enumerate(["a\u2028b.jpg", "c\x85d.jpg", "e\u2029f.jpg", "plain.jpg"]):
        make_photo(root / name, (40 + 50 * i, 90, 200 - 40 * i), seed=i, size=(64, 48))
    result = nf("scan", root, "--k", 4, "--dedup", 0, "--format", fmt, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 + (fmt == "jsonl")
    if fmt == "jsonl":
        paths = {json.loads(line)["path"] for line in lines[1:]}
        assert paths == {str(p) for p in root.iterdir()}


def test_members0_is_exact_for_xargs_and_members_escapes(fake_extractor, tmp_path):
    """``members0`` is the format for ``xargs -0``: the exact bytes of every name (a backslash and a
    newline included); ``members`` escapes them, for reading line by line."""
    root = tmp_path / "lib"
    names = ["back\\slash.jpg", "new\nline.jpg", "plain.jpg"]
    for i, name in enumerate(names):
        make_photo(root / name, (40 + 80 * i, 90, 200 - 70 * i), seed=i, size=(64, 48))
    args = ("scan", root, "--k", 3, "--dedup", 0, "--cache", tmp_path / "c.sqlite")
    exact = nf(*args, "--format", "members0")
    assert exact.exit_code == 0, exact.stderr
    listed = subprocess.run(
        ["xargs", "-0", "printf", "%s\\0"], input=exact.stdout_bytes, capture_output=True, check=True
    ).stdout
    assert sorted(listed.split(b"\0")[:-1]) == sorted(os.fsencode(root / n) for n in names)
    escaped = nf(*args, "--format", "members")
    assert "back\\\\slash.jpg" in escaped.stdout and "new\\nline.jpg" in escaped.stdout
    assert len(escaped.stdout.splitlines()) == 3


def test_ignore_list_escapes_a_planted_added_field_and_path(tmp_path):
    """``ignore --list`` prints what a file says: an ESC or a newline in it is escaped, one entry a line."""
    listfile = tmp_path / "ignored.json"
    listfile.write_text(
        json.dumps(
            {
                "version": 1,
                "ignored": {
                    "d1": {
                        "path": "/p/a\x1b]0;owned\x07.jpg",
                        "added": "2024-01-01\nwarning: forged\x1b[2J",
                        "size": 1,
                    },
                },
            }
        )
    )
    result = nf("ignore", "--list", "--ignore-file", listfile)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and len(result.stdout.splitlines()) == 1
    added, path = result.stdout.rstrip("\n").split("\t")
    assert added == "2024-01-01\\nwarning: forged\\x1b[2J"
    assert path == "/p/a\\x1b]0;owned\\x07.jpg"


def test_one_line_escapes_what_a_terminal_or_splitlines_would_act_on():
    from novelfind.base.safe_text import one_line

    text = "a\nb\rc\x1b[31md\x07e\u2028f\u2029g\x85h\u202ei\udce9j Été"
    shown = one_line(text)
    assert shown.splitlines() == [shown]
    assert shown == "a\\nb\\rc\\e[31md\\x07e\\u2028f\\u2029g\\x85h\\u202ei\\xe9j Été"


def test_a_jpeg_of_thousands_of_scans_is_refused_before_decoding(tmp_path, monkeypatch):
    path = many_scans_jpeg(tmp_path)
    assert path.stat().st_size < 100_000
    from PIL import Image

    def never(*args, **kwargs):
        raise AssertionError("decoded")

    monkeypatch.setattr(Image, "open", never)  # refused from the bytes, wherever it is decoded
    with pytest.raises(DecodeError, match=r"refused: a JPEG of \d+ scans"):
        read_for_model(path)
    with pytest.raises(DecodeError, match="scans"):
        load_image(path, min_side=32)  # the report's and the contact sheet's thumbnails


def test_a_normal_progressive_jpeg_still_decodes(tmp_path):
    from PIL import Image

    path = tmp_path / "progressive.jpg"
    Image.new("RGB", (300, 200), RED).save(path, progressive=True)
    _, px = read_for_model(path)
    assert close(px[112, 112], RED)


def test_the_pixel_budget_refuses_before_decoding_everywhere(tmp_path):
    path = flat_png(tmp_path, 2000)  # 4 million pixels in a few kilobytes
    assert path.stat().st_size < 100_000
    with decode.pixel_budget_of(1_000_000):
        with pytest.raises(DecodeError, match="over the budget of 1000000"):
            read_for_model(path)
        with pytest.raises(DecodeError, match="over the budget"):
            load_image(path, min_side=32)
    _, px = read_for_model(path)  # the budget is back to the default: it decodes
    assert close(px[112, 112], GREEN)


def test_a_jpeg_is_measured_at_the_size_it_is_decoded_to(tmp_path):
    """A JPEG decodes at a reduced scale (draft): the budget counts those pixels, not the header's."""
    from PIL import Image

    path = tmp_path / "big.jpg"
    Image.new("RGB", (2048, 2048), BLUE).save(path)
    with decode.pixel_budget_of(600_000):  # 4 MP in the header, 512 x 512 decoded
        _, px = read_for_model(path)
    assert close(px[112, 112], BLUE)


@pytest.mark.parametrize("workers", [0, 1])
def test_max_decode_pixels_holds_in_the_scan_and_its_workers(
    fake_extractor, small_library, tmp_path, workers
):
    flat_png(small_library, 1500)
    result = nf(
        "scan",
        small_library,
        "--k",
        2,
        "--workers",
        workers,
        "--max-decode-pixels",
        1_000_000,
        "--cache",
        tmp_path / "c.sqlite",
    )
    assert result.exit_code == 3
    refused = [line for line in _lines(result.stderr) if line.startswith("warning: cannot read")]
    assert len(refused) == 1 and "flat-1500.png" in refused[0] and "over the budget of 1000000" in refused[0]


def test_the_default_pixel_budget_shares_memory_among_the_decoders():
    assert decode.default_pixel_budget(0) >= decode.default_pixel_budget(64)
    assert 1 <= decode.default_pixel_budget(10_000) < decode.MAX_IMAGE_PIXELS
    assert decode.default_pixel_budget(0) <= decode.MAX_IMAGE_PIXELS


@pytest.mark.parametrize("config", ["/dev/zero", "big", "fifo"])
def test_a_config_file_that_never_ends_is_refused(tmp_path, config):
    if config == "big":
        big = tmp_path / "big.toml"
        big.write_text("# padding\n" * 200_000)  # 2 MB of comments
        config = str(big)
    elif config == "fifo":  # no writer ever comes: reading would block for good
        os.mkfifo(tmp_path / "pipe.toml")
        config = str(tmp_path / "pipe.toml")
    result = nf("scan", tmp_path, "--k", 1, env={"NOVELFIND_CONFIG": config})
    assert result.exit_code == 2
    assert _lines(result.stderr) == [_lines(result.stderr)[0]] and "config file" in result.stderr


def test_an_exclude_pattern_of_100000_brackets_is_refused(fake_extractor, small_library, tmp_path):
    result = nf("scan", small_library, "--exclude", "[" * 100_000, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 2
    assert "exclude pattern of 100000 characters" in result.stderr
    assert fake_extractor.images == 0


def test_tilde_is_the_home_folder_in_path_settings(fake_extractor, small_library, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    config = home / "novelfind.toml"
    config.write_text('cache = "~/features.sqlite"\n')
    env = {"NOVELFIND_IGNORE_FILE": "~/ign.json", "NOVELFIND_CONFIG": "~/novelfind.toml"}
    result = nf("scan", small_library, "--k", 1, "--ignore-picks", env=env)
    assert result.exit_code == 0, result.stderr
    assert (home / "ign.json").is_file() and (home / "features.sqlite").is_file()
    assert not (tmp_path / "~").exists()


def test_a_date_out_of_range_is_a_usage_error_before_any_work(fake_extractor, small_library, tmp_path):
    result = nf("scan", small_library, "--since", "0001-01-01", "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        "error: since 0001-01-01 is out of range: not a time this system can compare file times with"
    ]
    assert fake_extractor.images == 0 and not (tmp_path / "c.sqlite").exists()


@pytest.mark.parametrize(("since", "picked"), [("9999-12-31", 0), ("1000-01-01", 2)])
def test_dates_beyond_what_file_times_hold_pick_none_or_all(
    fake_extractor, small_library, tmp_path, since, picked
):
    result = nf("scan", small_library, "--k", 2, "--since", since, "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == picked


def test_a_lock_file_planted_as_a_link_is_not_opened(tmp_path):
    from novelfind.base.lock import RunLock
    from novelfind.errors import NovelfindError

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    lock = tmp_path / "ignored.json.lock"
    lock.symlink_to(victim)
    with pytest.raises(NovelfindError, match="symbolic link"):
        with RunLock(lock):
            pass
    assert victim.read_text() == "keep"
