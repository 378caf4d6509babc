"""The first hour of a new user: what the README promises, checked from an empty home folder."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from common import make_photo

from novelfind.cli.group import cli

ROOT = Path(__file__).resolve().parents[2]


def run(*args, env: dict | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def _files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


# -- 1. nothing written outside what the README lists, no telemetry -------------------------------------


@pytest.mark.slow
def test_a_real_scan_in_an_empty_home_writes_only_the_cache_and_the_model(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    photos = tmp_path / "photos"
    for i in range(4):
        make_photo(photos / f"IMG_{i}.jpg", (40 + 50 * i, 90, 160), seed=i)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("NOVELFIND_", "XDG_", "ORT_")) and name != "TORCH_HOME"
    }
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "novelfind", "scan", str(photos), "--k", "2", "--backend", "onnx"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    written = _files_under(home)
    assert written, "the scan wrote no cache"
    allowed = (".cache/novelfind/features.sqlite", ".cache/novelfind/models/", ".cache/novelfind/locks/")
    assert {f for f in written if not f.startswith(allowed)} == set()
    assert not (home / ".cache" / "Microsoft").exists()


def test_onnxruntime_telemetry_is_off_before_the_first_session(tmp_path):
    """Importing onnxruntime through novelfind writes nothing to the home folder, sends nothing."""
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "import onnxruntime, os\n"
        "from novelfind.model import features\n"
        "ort = features.onnxruntime()\n"
        "path = os.path.join(os.path.dirname(ort.__file__), 'datasets', 'mul_1.onnx')\n"
        "ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ORT_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    # novelfind imported first, as the command does: the variable is set before onnxruntime loads
    code = "import novelfind.model.features\n" + code
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _files_under(home) == set()


# -- 3. damaged cache -----------------------------------------------------------------------------------


@pytest.fixture
def damaged_cache(tmp_path) -> Path:
    path = tmp_path / "features.sqlite"
    path.write_bytes(b"this is not an SQLite file at all" * 200)
    return path


def test_cache_info_on_a_damaged_cache_changes_nothing_and_says_how_to_rebuild(damaged_cache, tmp_path):
    before = damaged_cache.read_bytes()
    result = run("cache", "info", "--cache", damaged_cache)
    assert result.exit_code == 1
    assert result.stdout == f"path\t{damaged_cache}\ndamaged\tyes\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: the feature cache {damaged_cache} is damaged (")
    assert "novelfind cache clear" in lines[0]
    assert damaged_cache.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.sqlite"]


@pytest.fixture
def damaged_novelfind_cache(tmp_path) -> Path:
    """A novelfind cache (its header and mark intact) whose pages are scribbled over."""
    import numpy as np

    from novelfind.cache import FeatureCache
    from novelfind.media.walk import ImageFile

    path = tmp_path / "features.sqlite"
    with FeatureCache(path, "m1") as cache:
        files = [ImageFile(Path(f"/lib/{i}.jpg"), i, i) for i in range(600)]
        cache.put_many([(f, f"d{i}", np.full(256, i, np.float32)) for i, f in enumerate(files)])
        cache._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    for page in range(3, len(data) // 4096, 4):  # the b-tree headers of many pages
        data[page * 4096 : page * 4096 + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("command", ["prune", "clear"])
def test_cache_prune_and_clear_on_a_damaged_cache_warn_in_one_line(
    damaged_novelfind_cache, tmp_path, command
):
    damaged_cache = damaged_novelfind_cache
    result = run("cache", command, "--cache", damaged_cache)
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: the feature cache {damaged_cache} was damaged")
    assert "CacheWarning" not in result.stderr and "novelfind/cache" not in result.stderr
    with sqlite3.connect(damaged_cache) as conn:  # a sound, empty cache in its place
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("features.sqlite.corrupt-")]
    assert len(moved) == (1 if command == "prune" else 0)  # clear forgets the damaged file too


# -- 4. values from the environment and config files name their source -------------------------------


def test_a_bad_value_from_the_environment_names_the_variable(library, fake_extractor):
    result = run("scan", library["root"], env={"NOVELFIND_K": "abc"})
    assert result.exit_code == 2
    assert result.stderr == (
        "error: Invalid value for NOVELFIND_K (environment variable): 'abc' is not a valid integer.\n"
    )


def test_a_bad_value_on_the_command_line_still_names_the_option(library, fake_extractor):
    result = run("scan", library["root"], "--k", "abc")
    assert result.stderr == "error: Invalid value for '--k': 'abc' is not a valid integer.\n"


def test_a_library_error_about_an_option_names_the_variable_it_came_from(library, tmp_path):
    fake = tmp_path / "fake.pth"
    fake.write_bytes(b"not weights")
    result = run("scan", library["root"], "--no-cache", env={"NOVELFIND_WEIGHTS": str(fake)})
    assert result.exit_code == 1
    assert "(from NOVELFIND_WEIGHTS)" in result.stderr and "(from --weights)" not in result.stderr


def test_a_library_error_about_an_option_names_the_config_file_and_key(library, tmp_path):
    fake = tmp_path / "fake.pth"
    fake.write_bytes(b"not weights")
    config = tmp_path / "novelfind.toml"
    config.write_text(f'weights = "{fake}"\n')
    result = run("scan", library["root"], "--no-cache", "--config", config)
    assert result.exit_code == 1
    assert f"(from config file {config}, key 'weights')" in result.stderr


def test_a_bad_value_from_a_config_file_callback_names_the_file_and_key(library, fake_extractor, tmp_path):
    config = tmp_path / "novelfind.toml"
    config.write_text('contact-sheet = "sheet.gif"\n')
    result = run("scan", library["root"], "--config", config)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: Invalid value for key 'contact-sheet' in config file {config}: ")


# -- 5. --copy-to over the library -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["root", "above"])
def test_copy_to_holding_a_scanned_folder_is_refused(library, fake_extractor, tmp_path, where):
    root = library["root"]
    target = root if where == "root" else root.parent
    result = run("scan", root, "--copy-to", target)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: cannot place the picks in {target}: it holds the scanned folder {root}, and the picks "
        "folder is left out of the walk, so nothing would be ranked; choose a folder outside it\n"
    )
    assert fake_extractor.images == 0


def test_copy_to_inside_a_scanned_folder_is_allowed(library, fake_extractor):
    result = run("scan", library["root"], "--k", "2", "--copy-to", library["root"] / "novel")
    assert result.exit_code == 0, result.stderr
    assert len(list((library["root"] / "novel").glob("00*"))) == 2


# -- 6. options that do nothing, files that are not photos ----------------------------------------------


def test_ray_address_without_the_ray_engine_is_a_usage_error(library, fake_extractor):
    result = run("scan", library["root"], "--ray-address", "head:6379")
    assert result.exit_code == 2
    assert result.stderr == "error: --ray-address takes effect only with --engine ray\n"
    assert fake_extractor.images == 0


def test_ignoring_a_file_that_is_not_an_image_reports_it(library, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n")
    listfile = tmp_path / "ignored.json"
    result = run("ignore", notes, library["odd"][0], "--ignore-file", listfile)
    assert result.exit_code == 3
    assert result.stdout == "added\t1\n"
    assert result.stderr == f"warning: not added: {notes} is not a photo novelfind reads\n"
    assert [
        e.path for e in __import__("novelfind.media.ignore").media.ignore.IgnoreList(listfile).entries()
    ] == [library["odd"][0]]


# -- 8. small things ------------------------------------------------------------------------------------


def test_no_arguments_prints_help_without_an_error_prefix():
    result = subprocess.run(
        [sys.executable, "-m", "novelfind"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Usage: novelfind [OPTIONS] COMMAND [ARGS]...\n\n  Find the most novel")
    assert "error:" not in result.stderr
    assert result.stdout == ""


def test_one_photo_is_singular(tmp_path, fake_extractor):
    make_photo(tmp_path / "lib" / "a.jpg", (10, 200, 30), seed=1)
    result = run("scan", tmp_path / "lib", "--k", "1", "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert "1 photo (1 file) found" in result.stderr


def test_one_raw_file_left_out_is_singular(tmp_path, fake_extractor, monkeypatch):
    from novelfind.media import raw

    monkeypatch.setattr(raw, "available", lambda: False)
    make_photo(tmp_path / "lib" / "a.jpg", (10, 200, 30), seed=1)
    make_photo(tmp_path / "lib" / "b.jpg", (200, 20, 30), seed=2)
    (tmp_path / "lib" / "c.CR2").write_bytes(b"II*\x00" + bytes(2000))
    result = run("scan", tmp_path / "lib", "--k", "1", "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert "warning: 1 RAW file without a JPEG twin left out" in result.stderr


def test_re_ignoring_a_folder_counts_photos_not_files(tmp_path):
    folder = tmp_path / "shots"
    for i in range(3):
        make_photo(folder / f"IMG_{i}.jpg", (40 * i, 90, 100), seed=i)
    (folder / "IMG_0.CR2").write_bytes(b"II*\x00" + bytes(2000))  # the RAW twin of IMG_0.jpg
    listfile = tmp_path / "ignored.json"
    first = run("ignore", folder, "--ignore-file", listfile)
    assert first.stdout == "added\t3\n", first.stderr
    again = run("ignore", folder, "--ignore-file", listfile)
    assert again.stdout == "added\t0\n"
    assert again.stderr == "note: 3 photos were already on the ignore list\n"


def test_a_text_file_named_like_a_raw_file_is_not_a_raw_file():
    from novelfind.errors import DecodeError
    from novelfind.media import raw

    if not raw.available():
        pytest.skip("rawpy is not installed")
    with pytest.raises(DecodeError) as info:
        raw.decode_raw(b"not a raw file\n", name="FAKE.CR2")
    assert str(info.value) == "unsupported or not a RAW file"


@pytest.mark.parametrize("since", ["2025-01-01T10:00:00Z", "2025-01-01T12:00:00+02:00"])
def test_since_takes_utc_and_offsets(library, fake_extractor, since):
    old = 1735725600 - 3600  # 2025-01-01 09:00 UTC
    new = 1735725600 + 3600  # 11:00 UTC
    for path in library["ordinary"] + library["odd"]:
        os.utime(path, (old, old))
    os.utime(library["odd"][0], (new, new))
    result = run("scan", library["root"], "--since", since, "--format", "paths", "--no-cache")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [str(library["odd"][0])]


# -- 7. what the README says about --k ------------------------------------------------------------------


def test_k_nn_lists_are_nested_and_the_ads_lists_need_not_be():
    """README, Ranking: `--k` changes the list of ADS, not only its length; the k-NN methods' lists
    (the default among them) are nested."""
    import numpy as np

    import novelfind

    nested_ads = []
    for seed in range(5):
        x = np.random.default_rng(seed).normal(size=(14, 50)).astype(np.float32)
        for method in ("cosine-knn", "multiscale-knn", "knn"):
            lists = {k: list(novelfind.rank(x, k, method=method).indices) for k in (2, 3, 5)}
            assert lists[5][:3] == lists[3] and lists[3][:2] == lists[2]
        default = list(novelfind.rank(x, 5).indices)  # the default is one of them
        assert default == list(novelfind.rank(x, 5, method="cosine-knn").indices)
        ads = {k: list(novelfind.rank(x, k, method="ads").indices) for k in (2, 3, 5)}
        nested_ads.append(ads[5][:3] == ads[3] and ads[3][:2] == ads[2])
    assert not all(nested_ads)
