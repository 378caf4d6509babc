"""The labelled sets of the quality benchmark (scripts/quality): reproducible, independent per seed, and
without any cue besides content (every picture, ordinary or novel, leaves through the same last step)."""

from __future__ import annotations

import hashlib
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from quality import pin as repin  # noqa: E402
from quality import pins, sets, sources  # noqa: E402

SMALL = [*sets.SPLITS["dev"], *sets.SPLITS["test"]]
LIBRARY = [*sets.SPLITS["dev-library"], *sets.SPLITS["test-library"]]


@pytest.fixture(scope="module")
def quality_data(tmp_path_factory) -> Path:
    """One data folder for this module: the source packages (~420 MB, Stellarium's alone 246 MB) are
    downloaded and unpacked once, not once per test (each test otherwise gets a fresh cache folder)."""
    return tmp_path_factory.mktemp("novelfind-data")


@pytest.fixture(autouse=True)
def _shared_data(isolated_user_dirs, quality_data, monkeypatch):
    monkeypatch.setenv("NOVELFIND_DATA", str(quality_data))


def _sample(s: sets.LabelledSet, per_label: int = 5) -> list[int]:
    lab = s.labels
    return [*np.flatnonzero(lab)[:per_label], *np.flatnonzero(~lab)[:per_label]]


def _luma_tables() -> dict[tuple[int, ...], int]:
    """Luma quantisation table -> JPEG quality, for every quality ``finish`` may use."""
    out = {}
    for q in range(1, 101):
        buf = io.BytesIO()
        Image.new("RGB", (16, 16), (90, 120, 150)).save(buf, "JPEG", quality=q)
        with Image.open(buf) as im:
            out.setdefault(tuple(im.quantization[0]), q)
    return out


def test_split_is_fixed_disjoint_and_covers_every_kind():
    dev = set().union(*(v for k, v in sets.SPLITS.items() if k.startswith("dev")))
    test = set().union(*(v for k, v in sets.SPLITS.items() if k.startswith("test")))
    assert all(k.startswith(("dev", "test")) for k in sets.SPLITS)
    assert not dev & test
    assert dev | test == set(sets.SETS)
    assert len(sets.SPLITS["test"]) >= 7 and len(sets.SPLITS["test-library"]) >= 2
    for kind, (d, t) in sets.PAIRS.items():
        assert d in dev and t in test, kind


@pytest.mark.parametrize("name", SMALL)
def test_same_seed_same_pictures(name):
    a, b = sets.build(name, 3), sets.build(name, 3)
    assert np.array_equal(a.labels, b.labels) and a.kinds == b.kinds
    for i in _sample(a, 2):
        assert a.jpeg(i) == b.jpeg(i)


@pytest.mark.parametrize("name", SMALL)
def test_seeds_are_independent_draws(name):
    a, b = sets.build(name, 0), sets.build(name, 1)
    assert a.k >= 10 and len(a) >= 150
    assert not np.array_equal(a.labels, b.labels)  # other positions
    novel_a = sorted(k for k, lab in zip(a.kinds, a.labels, strict=False) if lab)
    novel_b = sorted(k for k, lab in zip(b.kinds, b.labels, strict=False) if lab)
    if not name.startswith("digits"):  # digits: the novelties are classes, the samples differ below
        assert novel_a != novel_b  # other source pictures
    ha = {hashlib.sha1(a.jpeg(i)).hexdigest() for i in _sample(a, 4)}
    hb = {hashlib.sha1(b.jpeg(i)).hexdigest() for i in _sample(b, 4)}
    assert not ha & hb


def test_no_cue_besides_content():
    """Same size, mode, chroma subsampling and JPEG quality distribution for novel and ordinary pictures."""
    tables = _luma_tables()
    quality = {True: [], False: []}
    for name in SMALL:
        s = sets.build(name, 0)
        for i in _sample(s, 6):
            data = s.jpeg(i)
            with Image.open(io.BytesIO(data)) as im:
                assert im.format == "JPEG" and im.mode == "RGB" and im.size == (sets.SIDE, sets.SIDE)
                assert im.layer == [(1, 2, 2, 0), (2, 1, 1, 1), (3, 1, 1, 1)]  # 4:2:0, like every other
                q = tables[tuple(im.quantization[0])]
            assert sets.JPEG_QUALITY[0] <= q < sets.JPEG_QUALITY[1]
            quality[bool(s.labels[i])].append(q)
    from scipy.stats import mannwhitneyu

    assert len(quality[True]) == len(quality[False]) == 6 * len(SMALL)
    assert mannwhitneyu(quality[True], quality[False]).pvalue > 1e-3


def test_finish_is_label_blind():
    """The last step's draws (mirror, exposure, noise, quality) depend on the seed only, not on the label."""
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    im = Image.new("RGB", (300, 300), (120, 130, 140))
    assert sets.finish(rng_a, im) == sets.finish(rng_b, im)


@pytest.mark.parametrize("name", LIBRARY)
def test_library_sets_have_library_size(name):
    s = sets.build(name, 0)
    assert len(s) >= (12_000 if name in sets.SPLITS["dev-library"] else 30_000)
    assert 40 <= s.k <= 100
    g = s.groups[~s.labels]
    assert (g >= 0).mean() > 0.2  # bursts of near-identical frames, as in a real library
    assert (s.groups[s.labels] == -1).all()
    with Image.open(io.BytesIO(s.jpeg(int(np.flatnonzero(s.labels)[0])))) as im:
        assert im.size == (sets.SIDE, sets.SIDE)


# --------------------------------------------------------------------------- pinned sources (no network)


def _fake_table(payload: bytes) -> dict:
    sha = hashlib.sha256(payload).hexdigest()
    return {
        "pypi": {"demo": {"version": "1.2.3", "file": "demo-1.2.3-py3-none-any.whl", "sha256": sha}},
        "debian": {"demo-data": {"version": "1.0-1", "file": "demo-data_1.0-1_all.deb", "sha256": sha}},
    }


def _fake_download(monkeypatch, payload: bytes | None, stderr: str = "") -> list[str]:
    """Downloads write ``payload`` under the pinned file name (or fail with ``stderr``); returns the log."""
    log = []

    def command(p: pins.Pin) -> list[str]:
        log.append(p.spec)
        if payload is None:
            return [sys.executable, "-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)"]
        return [sys.executable, "-c", f"open({p.file!r}, 'wb').write({payload!r})"]

    monkeypatch.setattr(pins, "download_command", command)
    return log


@pytest.mark.parametrize("kind,name", [("pypi", "demo"), ("debian", "demo-data")])
def test_fetch_asks_for_the_pinned_version_and_keeps_a_good_download(monkeypatch, tmp_path, kind, name):
    monkeypatch.setattr(pins, "table", lambda: _fake_table(b"the real package"))
    log = _fake_download(monkeypatch, b"the real package")
    path = pins.fetch(kind, name, tmp_path / "cache")
    assert path == tmp_path / "cache" / pins.pin(kind, name).file
    assert path.read_bytes() == b"the real package"
    assert log == [f"{name}==1.2.3" if kind == "pypi" else f"{name}=1.0-1"]
    assert pins.fetch(kind, name, tmp_path / "cache") == path and len(log) == 1  # cached, not fetched again
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [path.name]


@pytest.mark.parametrize("kind,name", [("pypi", "demo"), ("debian", "demo-data")])
def test_tampered_download_is_refused_and_not_kept(monkeypatch, tmp_path, kind, name):
    monkeypatch.setattr(pins, "table", lambda: _fake_table(b"the real package"))
    _fake_download(monkeypatch, b"the real package, tampered")
    version = pins.pin(kind, name).version
    with pytest.raises(
        pins.ChecksumError, match=rf"^\S+ \(sha256 \w+\.\.\.\) is not {kind} package {name} {version} "
    ):
        pins.fetch(kind, name, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # neither the file nor the download folder stays


def test_tampered_cached_file_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(pins, "table", lambda: _fake_table(b"the real package"))
    log = _fake_download(monkeypatch, b"the real package")
    (tmp_path / "demo-1.2.3-py3-none-any.whl").write_bytes(b"something else")
    with pytest.raises(pins.ChecksumError) as e:
        pins.fetch("pypi", "demo", tmp_path)
    assert "demo 1.2.3" in str(e.value) and "delete it and run again" in str(e.value)
    assert "\n" not in str(e.value) and log == []


def test_version_gone_names_package_version_and_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(pins, "table", lambda: _fake_table(b"x"))
    _fake_download(monkeypatch, None, "E: Version '1.0-1' for 'demo-data' was not found\n")
    with pytest.raises(pins.PinError) as e:
        pins.fetch("debian", "demo-data", tmp_path)
    msg = str(e.value)
    assert msg.startswith(
        "could not download demo-data=1.0-1 pinned in scripts/quality/sources.lock (E: Version"
    )
    assert "https://snapshot.debian.org/binary/demo-data/" in msg and "python scripts/quality/pin.py" in msg
    assert "\n" not in msg and list(tmp_path.iterdir()) == []
    _fake_download(monkeypatch, None, "ERROR: No matching distribution found for demo==1.2.3\n")
    with pytest.raises(pins.PinError, match=r"^could not download demo==1\.2\.3 pinned in .*pin\.py"):
        pins.fetch("pypi", "demo", tmp_path)


def test_changed_bundled_picture_is_refused(monkeypatch):
    entry = {"version": "0.0.1", "module": "skimage", "files": {"data/astronaut.png": "0" * 64}}
    monkeypatch.setattr(pins, "table", lambda: {"bundled": {"scikit-image": entry}})
    with pytest.raises(pins.ChecksumError, match=r"ships a different data/astronaut\.png than the pinned "):
        pins.bundled("scikit-image", "data/astronaut.png")
    with pytest.raises(pins.PinError, match="has no pin"):
        pins.bundled("scikit-image", "data/camera.png")


def test_lock_pins_every_source_the_sets_use():
    lock = pins.table()
    want = repin.used()
    assert want["pypi"] and want["debian"] and want["bundled"]
    for kind in ("pypi", "debian"):
        assert sorted(lock[kind]) == sorted(want[kind]), kind
        for name, entry in lock[kind].items():
            assert entry["version"] and name.replace("-", "_") in entry["file"].replace("-", "_"), name
            assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), name
    assert sorted(lock["bundled"]) == sorted(want["bundled"])
    for dist, files in want["bundled"].items():
        assert sorted(lock["bundled"][dist]["files"]) == sorted(files), dist


def test_code_fetches_only_listed_sources():
    """Every source the set builders name in their code is one that ``pin.used()`` lists (and so is pinned),
    and only ``pins`` (fetch) and ``pin`` (re-pin) download anything."""
    want = repin.used()
    scripts = Path(__file__).resolve().parents[2] / "scripts"
    builders = [scripts / "photosets.py", *sorted((scripts / "quality").glob("*.py"))]
    builders = [p for p in builders if p.name not in ("pins.py", "pin.py")]
    text = "\n".join(p.read_text() for p in builders)
    debs = re.findall(r"deb_tree\(\"([^\"]+)\"\)", text)
    wheels = re.findall(r"wheel(?:_path)?\(\"([^\"]+)\"[,)]", text)
    assert len(set(debs)) == 3 and len(set(wheels)) == 2
    assert set(debs) <= set(want["debian"])
    assert {sources.WHEELS[w] for w in wheels} <= set(want["pypi"])
    assert not re.search(r"\"download\"|apt-get\", |pip download", text.replace("``pip download", ""))


def test_lock_rewrite_reads_back_the_same():
    assert pins.tomllib.loads(repin.render(pins.table())) == pins.table()


def test_pool_is_rebuilt_when_the_pins_change(monkeypatch, tmp_path):
    monkeypatch.setenv("NOVELFIND_DATA", str(tmp_path))
    monkeypatch.setattr(sources, "_LOADED", {})
    builds = []

    def items(name):
        builds.append(name)
        buf = io.BytesIO()
        Image.new("RGB", (40, 30), (10 * len(builds), 0, 0)).save(buf, "PNG")
        yield "demo/one", buf.getvalue()

    monkeypatch.setattr(sources, "_raw_items", items)
    monkeypatch.setattr(pins, "digest", lambda: "aaaa")
    first = sources.pool("scenes")
    sources._LOADED.clear()
    assert sources.pool("scenes") == first and builds == ["scenes"]  # same pins: the pool on disk is kept
    sources._LOADED.clear()
    monkeypatch.setattr(pins, "digest", lambda: "bbbb")
    assert [p.name for p in sources.pool("scenes")] == ["demo/one"] and builds == ["scenes", "scenes"]
