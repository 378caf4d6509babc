"""The HTML report, the library map and the contact sheet (novelfind.outputs.report, .contact_sheet and
.thumbnails), rendered in Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from common import missing_prerequisite
from PIL import Image, ImageDraw

from novelfind.errors import OutputError
from novelfind.outputs import report as nfhtml
from novelfind.outputs import thumbnails
from novelfind.outputs.contact_sheet import write_contact_sheet
from novelfind.outputs.report import write_html_report
from novelfind.picks import Pick
from novelfind.ranking.pca import map_2d

# --- fixtures ----------------------------------------------------------------------------------

EVIL_NAME = '<img src=x onerror="alert(1)">&amp;.png'


def _photo(path: Path, colour: tuple[int, int, int], size=(320, 240), taken: str | None = None) -> Path:
    img = Image.new("RGB", size, colour)
    ImageDraw.Draw(img).ellipse((size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2), fill=(250, 220, 40))
    if taken is None:
        img.save(path)
    else:
        exif = Image.Exif()
        exif[0x8769] = {0x9003: taken}  # Exif IFD: DateTimeOriginal
        img.save(path, exif=exif)
    return path


@pytest.fixture
def library(tmp_path: Path) -> list[Path]:
    lib = tmp_path / "lib"
    lib.mkdir()
    paths = [_photo(lib / f"IMG_{i:03d}.jpg", (30 + 8 * i, 110, 190)) for i in range(12)]
    paths.append(_photo(lib / "dated.jpg", (200, 40, 40), size=(240, 320), taken="2021:06:01 12:30:05"))
    paths.append(_photo(lib / EVIL_NAME, (40, 160, 60)))
    return paths


def _picks(paths: list[Path], rows: list[int], neighbours: list[int | None]) -> list[Pick]:
    picks = []
    for rank, (row, nb) in enumerate(zip(rows, neighbours, strict=True), start=1):
        st = paths[row].stat()
        picks.append(
            Pick(
                rank=rank,
                score=1.0 / rank,
                path=paths[row],
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                neighbour=None if nb is None else paths[nb],
                distance=None if nb is None else 3.0 / rank,
            )
        )
    return picks


RUN = {
    "version": "0.1.0",
    "paths": ["/photos"],
    "k": 3,
    "method": "ads",
    "feature": "logits",
    "images_found": 15,
    "from_cache": 10,
    "extracted": 4,
    "failed": 1,
    "seconds": 2.5,
}


@pytest.fixture
def report_file(tmp_path: Path, library: list[Path]) -> Path:
    rows = [13, 12, 5]
    features = np.random.default_rng(0).standard_normal((len(library), 64)).astype(np.float32)
    out = tmp_path / "report.html"
    write_html_report(
        out,
        _picks(library, rows, [0, 1, 4]),
        points2d=map_2d(features),
        pick_indices=rows,
        paths=library,
        run=RUN,
        failures=[(library[0].parent / "broken<1>.jpg", "cannot identify image file")],
    )
    return out


# --- PCA ---------------------------------------------------------------------------------------


def _reference_pca(x: np.ndarray) -> np.ndarray:
    centred = (x - x.mean(axis=0)).astype(np.float64)
    vals, vecs = np.linalg.eigh(centred @ centred.T)  # (N, N): left singular vectors
    top = vecs[:, ::-1][:, :2]
    return top * np.sqrt(np.maximum(vals[::-1][:2], 0))  # = centred @ V[:, :2]


@pytest.mark.parametrize("dim", [40, 2100])  # covariance path, randomized path
def test_map_2d_matches_svd_up_to_sign(dim):
    rng = np.random.default_rng(1)
    # Clear structure: two strong directions plus noise.
    x = rng.standard_normal((120, dim)) * 0.1
    x[:, 0] += rng.standard_normal(120) * 5
    x[:, 1] += rng.standard_normal(120) * 3
    got = map_2d(x.astype(np.float32))
    want = _reference_pca(x)
    assert got.shape == (120, 2) and got.dtype == np.float32
    for c in range(2):
        corr = np.corrcoef(got[:, c], want[:, c])[0, 1]
        assert abs(corr) > 0.999


def test_map_2d_is_deterministic_and_chunking_does_not_matter():
    x = np.random.default_rng(2).standard_normal((500, 30)).astype(np.float32)
    a = map_2d(x)
    np.testing.assert_allclose(a, map_2d(x.copy()), rtol=1e-5)
    np.testing.assert_allclose(a, map_2d(x, chunk=7), rtol=1e-4, atol=1e-4)


def test_map_2d_small_and_bad_inputs():
    assert map_2d(np.ones((1, 5), np.float32)).tolist() == [[0.0, 0.0]]
    assert map_2d(np.zeros((0, 5), np.float32)).shape == (0, 2)
    assert map_2d(np.ones((4, 1), np.float32)).shape == (4, 2)  # one feature: second axis zero
    with pytest.raises(ValueError, match=r"2-D \(N, M\), got shape \(5,\)"):
        map_2d(np.ones(5))
    with pytest.raises(ValueError, match="NaN or inf"):
        map_2d(np.array([[1.0, np.nan], [2.0, 3.0]]))


# --- HTML content --------------------------------------------------------------------------------


def test_report_contents(report_file, library):
    page = report_file.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "3 most novel photos of 15" in page
    # Three picks with thumbnails, and three neighbour thumbnails: all embedded.
    assert len(re.findall(r'<img src="data:image/jpeg;base64,', page)) == 6
    for rank in (1, 2, 3):
        assert f'id="pick-{rank}"' in page
    assert "240 × 320" in page  # dimensions of dated.jpg
    assert "2021-06-01 12:30:05" in page  # EXIF date taken
    assert "distance 3.0000" in page
    assert "cannot identify image file" in page
    for key in ("from_cache", "extracted", "seconds"):
        assert f"<td>{key}</td>" in page


def test_report_is_self_contained(report_file):
    page = report_file.read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and not re.search(r"src=\"(?!data:)", page)
    assert "default-src 'none'" in page  # the page itself forbids any network access


def test_untrusted_paths_are_escaped(report_file):
    page = report_file.read_text(encoding="utf-8")
    assert EVIL_NAME not in page
    assert "broken<1>" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;amp;.png" in page
    assert "broken&lt;1&gt;.jpg" in page


def test_map_highlights_picks_and_subsamples_the_rest(tmp_path, library):
    n = 20_000
    points = np.random.default_rng(3).standard_normal((n, 2)).astype(np.float32)
    rows = [10, 20, 30]
    picks = _picks(library, [0, 1, 2], [3, 4, 5])
    out = tmp_path / "big.html"
    write_html_report(out, picks, points2d=points, pick_indices=rows, run={})
    page = out.read_text(encoding="utf-8")
    assert page.count('class="pt"') == nfhtml.MAX_MAP_POINTS
    assert page.count('class="pk"') == 3
    assert '<a href="#pick-1">' in page
    assert f"of {n - 3} other photos shown" in page


def test_map_inputs_are_checked(tmp_path, library):
    picks = _picks(library, [0, 1], [2, 3])
    with pytest.raises(ValueError, match="2 pick_indices for 2 picks|out of range"):
        write_html_report(tmp_path / "r.html", picks, points2d=np.zeros((2, 2)), pick_indices=[0, 5])
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        write_html_report(tmp_path / "r.html", picks, points2d=np.zeros((4, 3)), pick_indices=[0, 1])
    with pytest.raises(ValueError, match="pick_indices is required"):
        write_html_report(tmp_path / "r.html", picks, points2d=np.zeros((4, 2)))


def test_unreadable_pick_gets_a_placeholder(tmp_path, library):
    picks = _picks(library, [0, 1], [None, 2])
    library[0].write_bytes(b"not an image any more")
    out = tmp_path / "r.html"
    write_html_report(out, picks, run={})
    page = out.read_text(encoding="utf-8")
    assert "no preview" in page
    assert "the only photo in the library" in page
    assert len(re.findall(r"<img ", page)) == 2  # pick 2 and its neighbour


_REPORT_OF = """
import sys
from pathlib import Path
from novelfind.outputs.report import write_html_report
from novelfind.picks import Pick
stats = [Path(p).stat() for p in sys.argv[2:]]  # as ranked
picks = [
    Pick(rank=i + 1, score=1.0, path=Path(p), size=st.st_size, mtime_ns=st.st_mtime_ns)
    for i, (p, st) in enumerate(zip(sys.argv[2:], stats))
]
write_html_report(sys.argv[1], picks, decode_timeout=1)
"""


def test_a_pick_s_header_is_read_in_a_decode_process_under_the_time_limit(tmp_path, library):
    """The size and date a card shows come from the file's header (LibRaw's for a RAW), read in a decode
    process as the thumbnails are: a FIFO swapped in for a RAW blocks LibRaw's open, and is stopped there."""
    pytest.importorskip("rawpy")
    fifo = tmp_path / "IMG_0001.dng"
    os.mkfifo(fifo)
    out = tmp_path / "r.html"
    args = [sys.executable, "-c", _REPORT_OF, str(out), str(fifo), str(library[0])]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    try:
        subprocess.run(args, check=True, timeout=120, env=env, capture_output=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the FIFO was opened in the report's process, with no clock")
    page = out.read_text(encoding="utf-8")
    assert "IMG_0001.dng" in page and "320 × 240" in page  # the FIFO's card has no size; the photo's has


def test_report_unwritable_is_output_error(tmp_path, library):
    with pytest.raises(OutputError, match="no such folder"):
        write_html_report(tmp_path / "missing" / "r.html", _picks(library, [0], [1]), run={})


# --- contact sheet -----------------------------------------------------------------------------


def test_contact_sheet_grid_and_rank_labels(tmp_path, library):
    picks = _picks(library, [0, 1, 2, 3, 4], [5] * 5)
    out = tmp_path / "sheet.png"
    write_contact_sheet(out, picks, cell=128)
    with Image.open(out) as sheet:
        assert sheet.format == "PNG"
        gap = 128 // 32
        assert sheet.size == (3 * 128 + 4 * gap, 2 * 128 + 4 * gap - gap)
        sheet = sheet.convert("RGB")
        # Each filled cell starts with the red rank box; the sixth cell stays empty background.
        for k in range(5):
            x0, y0 = gap + (k % 3) * (128 + gap), gap + (k // 3) * (128 + gap)
            assert sheet.getpixel((x0 + 1, y0 + 1)) == (217, 48, 37)
        assert sheet.getpixel((gap + 2 * (128 + gap) + 64, gap + 128 + gap + 64)) == (32, 33, 36)


def test_contact_sheet_jpeg_columns_and_bad_suffix(tmp_path, library):
    picks = _picks(library, [0, 1, 2], [3] * 3)
    write_contact_sheet(tmp_path / "s.jpg", picks, columns=1, cell=64)
    with Image.open(tmp_path / "s.jpg") as sheet:
        assert sheet.format == "JPEG" and sheet.height > 2.5 * sheet.width
    with pytest.raises(OutputError, match=r"use a .jpg, .png or .webp name"):
        write_contact_sheet(tmp_path / "s.gif", picks)


# --- rendered in headless Chromium -------------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    message = "headless Chromium is needed for the rendering tests (Debian: apt-get install chromium)"
    missing_prerequisite(message)


def _run_chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
        page.absolute().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_chromium_loads_every_image(tmp_path, report_file):
    dom = _run_chromium(tmp_path, report_file, "--dump-dom", "--virtual-time-budget=5000").stdout
    match = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert match, "the report's load script did not run"
    loaded, total = map(int, match.groups())
    assert total == 6 and loaded == total


def test_chromium_notices_a_broken_image(tmp_path, report_file):
    page = report_file.read_text(encoding="utf-8")
    broken = page.replace('src="data:image/jpeg;base64,', 'src="data:image/jpeg;base64,AAAA', 1)
    report_file.write_text(broken, encoding="utf-8")
    dom = _run_chromium(tmp_path, report_file, "--dump-dom", "--virtual-time-budget=5000").stdout
    assert 'data-images-loaded="5/6"' in dom


def test_chromium_screenshot(tmp_path, report_file):
    shot = tmp_path / "shot.png"
    _run_chromium(tmp_path, report_file, f"--screenshot={shot}", "--window-size=1200,2000")
    with Image.open(shot) as img:
        assert img.size == (1200, 2000)
        rgb = img.convert("RGB")
    colours = rgb.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 100  # text, thumbnails, map: not a blank page
    # The picks' red (#d93025) appears: rank numbers and map highlights were drawn.
    pixels = np.asarray(rgb).reshape(-1, 3).astype(int)
    red = (abs(pixels[:, 0] - 217) < 12) & (abs(pixels[:, 1] - 48) < 12) & (abs(pixels[:, 2] - 37) < 12)
    assert red.sum() > 200


# --- what a pick looks like, its moment, the run table, the thumbnails ---------------------------


def test_a_pick_shows_its_labels_with_the_note_that_they_are_imagenet_labels(tmp_path, library):
    import dataclasses

    from novelfind.picks import Label

    picks = _picks(library, [0, 1], [2, 3])
    picks[0] = dataclasses.replace(picks[0], labels=(Label("telescope", 0.41), Label("planetarium", 0.12)))
    out = tmp_path / "r.html"
    write_html_report(out, picks, run={})
    page = out.read_text(encoding="utf-8")
    first, second = page.split('id="pick-1"')[1].split('id="pick-2"')
    assert "<dt>looks like</dt><dd>telescope 41%, planetarium 12%</dd>" in first
    assert "looks like" not in second  # no labels: no row
    assert "ImageNet labels" in page and "not the truth" in page
    write_html_report(out, _picks(library, [0], [1]), run={})  # no labels at all: no note
    assert "ImageNet" not in out.read_text(encoding="utf-8")


def test_a_moments_neighbour_is_named_as_outside_it(tmp_path, library):
    import dataclasses

    from novelfind.picks import Member

    picks = _picks(library, [0, 5], [4, 6])
    st = library[1].stat()
    member = Member(library[1], st.st_size, st.st_mtime_ns, 0.01)
    picks[0] = dataclasses.replace(picks[0], members=(member,))
    picks[1] = dataclasses.replace(picks[1], members=(member,), neighbour=None, distance=None)
    out = tmp_path / "r.html"
    write_html_report(out, picks, run={})
    first, second = out.read_text(encoding="utf-8").split('id="pick-1"')[1].split('id="pick-2"')
    assert "nearest photo outside this moment" in first and "nearest photo in the library" not in first
    assert "every photo in the library is in this moment" in second


def test_a_moment_shows_its_time_span(tmp_path, library):
    """A dated moment of several photos says when it was shot, first to last capture time (the last
    without its date when it is the same day); a photo alone or an undated moment says nothing."""
    import calendar
    import dataclasses

    from novelfind.picks import Member

    def at(text: str) -> float:
        return float(
            calendar.timegm(tuple(map(int, text.replace("-", " ").replace(":", " ").split())) + (0,) * 3)
        )

    members = (Member(library[1], 10, 0, 0.3), Member(library[2], 10, 0, 0.4))
    picks = _picks(library, [0, 5, 6, 7], [4, 4, 4, 4])
    picks[0] = dataclasses.replace(
        picks[0], members=members, span=(at("2024-06-04 20:05:00"), at("2024-06-04 20:53:00"))
    )
    picks[1] = dataclasses.replace(
        picks[1], members=members, span=(at("2024-06-04 23:50:00"), at("2024-06-05 00:20:00"))
    )
    picks[2] = dataclasses.replace(picks[2], span=(at("2024-06-04 12:00:00"),) * 2)
    picks[3] = dataclasses.replace(picks[3], members=members)
    out = tmp_path / "r.html"
    write_html_report(out, picks, run={})
    cards = out.read_text(encoding="utf-8").split('id="pick-')[1:]
    assert "<dt>moment</dt><dd>3 photos, 2024-06-04 20:05:00 to 20:53:00</dd>" in cards[0]
    assert "<dt>moment</dt><dd>3 photos, 2024-06-04 23:50:00 to 2024-06-05 00:20:00</dd>" in cards[1]
    assert "<dt>moment</dt>" not in cards[2] and "<dt>moment</dt>" not in cards[3]


def test_the_run_table_lists_the_solver_settings_only_for_methods_that_run_it(tmp_path, library):
    from novelfind.params import ScanParameters
    from novelfind.ranking.adsconfig import ADS_LIMITS
    from novelfind.ranking.methods import METHODS

    out = tmp_path / "r.html"
    for name, method in METHODS.items():
        run = ScanParameters(paths=str(tmp_path), method=name).record()
        write_html_report(out, _picks(library, [0], [1]), run=run)
        table = out.read_text(encoding="utf-8").split("<h2>Run</h2>")[1]
        shown = [key for key in ADS_LIMITS if f"<td>{key}</td>" in table]
        recorded = [key for key in ADS_LIMITS if key in run]
        assert len(recorded) >= 5  # epochs, partners, lr, momentum, seed, ...
        assert shown == (recorded if method.solver else []), name
        assert "<td>method</td>" in table and "<td>k</td>" in table


def test_the_methods_that_say_they_run_the_solver_are_those_that_do(monkeypatch):
    from novelfind.ranking import driver, methods

    x = np.random.default_rng(0).random((60, 8)).astype(np.float32)
    for name, method in methods.METHODS.items():
        calls = []

        def counted(*a, calls=calls, real=methods._ads_weights, **kw):
            calls.append(1)
            return real(*a, **kw)

        monkeypatch.setattr(methods, "_ads_weights", counted)
        driver.rank(x, 3, method=name)
        monkeypatch.undo()
        assert bool(calls) == method.solver, name


def test_each_photo_is_decoded_once_for_all_its_sizes_with_progress(tmp_path, library, monkeypatch):
    tasks, progress = [], []

    class Recording(thumbnails.ThumbnailDecoder):
        def thumbnails(self, batch):
            tasks.extend(batch)
            return super().thumbnails(batch)

    monkeypatch.setattr(thumbnails, "ThumbnailDecoder", Recording)
    import dataclasses

    from novelfind.picks import Member

    picks = _picks(library, [0, 1], [1, 0])  # each pick is the other's neighbour
    st = library[2].stat()
    picks[0] = dataclasses.replace(picks[0], members=(Member(library[2], st.st_size, st.st_mtime_ns, 0.01),))
    out = tmp_path / "r.html"
    write_html_report(out, picks, run={}, on_progress=lambda done, total: progress.append((done, total)))
    by_path = {Path(path): sorted(sizes) for path, sizes, _, _, _ in tasks}
    assert len(tasks) == len(by_path) == 3  # one decode per file
    assert by_path[library[0]] == by_path[library[1]] == [nfhtml.NEIGHBOUR_THUMB_SIZE, nfhtml.THUMB_SIZE]
    assert by_path[library[2]] == [nfhtml.MEMBER_THUMB_SIZE]
    assert progress == [(1, 3), (2, 3), (3, 3)]
    page = out.read_text(encoding="utf-8")
    assert len(re.findall(r'<img src="data:image/jpeg;base64,', page)) == 5  # 2 picks, 2 neighbours, 1 member
    sizes = []
    for uri in re.findall(r'src="data:image/jpeg;base64,([^"]+)"', page):
        import base64
        import io

        with Image.open(io.BytesIO(base64.b64decode(uri))) as img:
            sizes.append(max(img.size))
    # the library's photos are 320 px wide: each thumbnail's longest side is its size
    assert sorted(sizes) == sorted(
        [nfhtml.THUMB_SIZE] * 2 + [nfhtml.NEIGHBOUR_THUMB_SIZE] * 2 + [nfhtml.MEMBER_THUMB_SIZE]
    )


_MEASURE = """<script>window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("section.pick").forEach(function (card) {
    var rank = card.querySelector(".rank").getBoundingClientRect();
    var thumb = card.querySelector(".thumb").getBoundingClientRect();
    var lefts = [];
    card.querySelectorAll(".thumb > *").forEach(function (e) { lefts.push(e.getBoundingClientRect().left); });
    out.push([rank.right, thumb.left, Math.min.apply(null, lefts)].join(","));
  });
  document.body.dataset.boxes = out.join(";");
});</script>"""


@pytest.mark.parametrize("width", [1200, 700])
def test_a_clips_thumbnail_leaves_its_rank_visible(tmp_path, width):
    """Rendered in Chromium, at a desktop and a narrow width: nothing in a clip's thumbnail column (its
    poster and its "▶ clip" mark) reaches left of the column, over the rank number."""
    from clips import flat, write_clip

    from novelfind.media.video import ClipInfo

    frames = [flat((200, 40, 40), size=(320, 180), seed=i) for i in range(20)]
    clip = write_clip(tmp_path / "moment.mp4", frames)
    st = clip.stat()
    pick = Pick(1, 1.0, clip, st.st_size, st.st_mtime_ns, clip=ClipInfo(2.0, (0.0, 1.0), 1, "test"))
    out = tmp_path / "r.html"
    write_html_report(out, [pick], run={})
    page = out.read_text(encoding="utf-8")
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)  # let the probe run
    out.write_text(page.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    size = f"--window-size={width},900"
    dom = _run_chromium(tmp_path, out, "--dump-dom", "--virtual-time-budget=5000", size).stdout
    boxes = re.search(r'data-boxes="([^"]+)"', dom)
    assert boxes, "the probe did not run"
    for card in boxes.group(1).split(";"):
        rank_right, thumb_left, content_left = map(float, card.split(","))
        assert rank_right <= thumb_left + 0.5 and content_left >= thumb_left - 0.5, card


def test_a_second_report_takes_its_thumbnails_from_the_cache(tmp_path, library, monkeypatch):
    """The thumbnails of one report are kept for the next: the same picks decode nothing again, a photo
    that changed is decoded again, and the page is the same."""
    import os

    decoded = []

    class Recording(thumbnails.ThumbnailDecoder):
        def thumbnails(self, batch):
            decoded.extend(Path(path).name for path, *_ in batch)
            return super().thumbnails(batch)

    monkeypatch.setattr(thumbnails, "ThumbnailDecoder", Recording)
    cache = tmp_path / "thumbnails.sqlite"
    picks = _picks(library, [0, 1], [2, 3])
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    write_html_report(first, picks, run={}, thumbnail_cache=cache)
    assert sorted(decoded) == sorted(p.name for p in library[:4])
    assert os.stat(cache).st_mode & 0o777 == 0o600  # the user's photos: for the user alone
    decoded.clear()
    progress = []
    write_html_report(second, picks, run={}, thumbnail_cache=cache, on_progress=lambda *a: progress.append(a))
    assert decoded == [] and progress == [(1, 1)]
    assert second.read_text(encoding="utf-8") == first.read_text(encoding="utf-8")
    _photo(library[2], (250, 250, 250))  # the neighbour of pick 1 changed: made again, the rest kept
    write_html_report(second, picks, run={}, thumbnail_cache=cache)
    assert decoded == [library[2].name]


def test_a_thumbnail_cache_that_cannot_be_used_is_passed_over(tmp_path, library):
    picks = _picks(library, [0], [1])
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    link = tmp_path / "link.sqlite"
    link.symlink_to(tmp_path / "elsewhere.sqlite")
    import warnings

    from novelfind.cache import CacheWarning

    said = {damaged: "is damaged", link: "is a symbolic link", tmp_path / "missing" / "t.sqlite": None}
    for cache, why in said.items():
        out = tmp_path / "r.html"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write_html_report(out, picks, run={}, thumbnail_cache=cache)
        assert len(re.findall(r'<img src="data:image/jpeg;base64,', out.read_text(encoding="utf-8"))) == 2
        warned = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
        assert warned == ([] if why is None else [warned[0]])  # one line naming it, or none at all
        assert why is None or (why in warned[0] and str(cache) in warned[0])
    assert damaged.read_bytes() == b"not a database" * 100
    assert not (tmp_path / "elsewhere.sqlite").exists()  # never created through a link
    assert not (tmp_path / "missing").exists()


def test_the_thumbnail_cache_keeps_to_its_size(tmp_path, library):
    cache = thumbnails.ThumbnailCache(tmp_path / "t.sqlite", max_bytes=3000)
    jpeg = b"\xff\xd8" + b"x" * 998  # 1000 bytes that start as a JPEG does
    seen = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in library}
    cache.put({(library[i], 96, None): jpeg for i in range(2)}, {}, seen)
    cache.put({(library[i], 96, None): jpeg for i in range(2, 5)}, {}, seen)
    found, _ = cache.get([(p, 96, None) for p in library[:5]])
    assert sorted(p.name for p, _, _ in found) == sorted(p.name for p in library[2:5])  # the newest 3 KB
    cache.close()


def test_a_scan_keeps_the_reports_thumbnails_beside_its_feature_cache(tmp_path, library, fake_extractor):
    import novelfind
    from novelfind.base import dirs

    kept = tmp_path / "caches"
    kept.mkdir()
    novelfind.scan(library[0].parent, 3, cache=kept / "c.sqlite", report=tmp_path / "r.html")
    with thumbnails.ThumbnailCache(kept / thumbnails.THUMBNAIL_CACHE_NAME) as cache:
        found, _ = cache.get([(p, nfhtml.THUMB_SIZE, None) for p in library])
    assert len(found) >= 3  # the picks' thumbnails at least
    novelfind.scan(library[0].parent, 3, cache=False, report=tmp_path / "r2.html")
    assert not (dirs.feature_cache_path().parent / thumbnails.THUMBNAIL_CACHE_NAME).exists()


def test_files_not_as_ranked_are_not_shown_and_are_named(tmp_path, library):
    """Each file the report shows is opened as it was ranked: a pick rewritten since, and a neighbour
    renamed over by a link (its size and time from ``listed``), get the placeholder and are named once
    each through ``on_skipped``; the rest is shown."""
    import os

    picks = _picks(library, [0, 1], [2, 3])
    listed = {library[i]: (library[i].stat().st_size, library[i].stat().st_mtime_ns) for i in (2, 3)}
    Image.new("RGB", (50, 40), (1, 2, 3)).save(library[1])  # the second pick, rewritten
    bait = tmp_path / "bait"
    bait.symlink_to(library[0])  # a link renamed over the first pick's neighbour
    os.rename(bait, library[2])
    skipped: list[tuple[Path, str]] = []
    out = tmp_path / "r.html"
    write_html_report(
        out, picks, run={}, listed=listed, on_skipped=lambda path, reason: skipped.append((path, reason))
    )
    reasons = dict(skipped)
    assert len(skipped) == 2 and set(reasons) == {library[1], library[2]}
    assert "changed since it was listed" in reasons[library[1]]
    assert "symbolic link" in reasons[library[2]]
    assert all(reason.endswith("; not shown in the report") for reason in reasons.values())
    page = out.read_text(encoding="utf-8")
    assert len(re.findall(r'<img src="data:image/jpeg;base64,', page)) == 2  # the first pick, a neighbour
    assert page.count("cannot read image") == 2
