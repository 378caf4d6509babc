"""One stored vector per photo: the layout-named key, the upgrade of a cache written before it, and the
features computed from the stored vectors (logits from the pooled vector)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from common import make_photo

from novelfind.cache import FeatureCache
from novelfind.cache import models as cache_models
from novelfind.extract import stage
from novelfind.extract.engines.local import extract
from novelfind.media.walk import ImageFile
from novelfind.model.weights import FormerKeys

NEW, OLD_POOLED, OLD_LOGITS = "fake:pooled-v1", "fake:pooled", "fake:logits"
SENTINEL = 999.0  # what the old classifier-output entries hold: never seen in a result


class PooledFake:
    """Stands in for the package's extractors: stores a 6-d "pooled" vector, gives a 2-d "logits" head."""

    feature = "logits"
    model_key = NEW
    stored_dim = 6
    dim = 2
    former = FormerKeys(same=(OLD_POOLED,), other=(OLD_LOGITS,))
    weight = np.arange(12, dtype=np.float32).reshape(2, 6) / 10  # (2, 6)
    bias = np.array([1.0, -1.0], np.float32)

    def __init__(self) -> None:
        self.images = 0

    def head(self, pooled: np.ndarray) -> np.ndarray:
        return np.asarray(pooled, np.float32) @ self.weight.T + self.bias  # (B, 2)

    def encode(self, batch: np.ndarray) -> np.ndarray:
        self.images += len(batch)
        x = batch.astype(np.float32) / 255.0  # (B, 224, 224, 3)
        return np.concatenate([x.mean(axis=(1, 2)), x.std(axis=(1, 2))], axis=1)  # (B, 6)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return self.head(self.encode(batch))


def library(root: Path, n: int) -> list[ImageFile]:
    out = []
    for i in range(n):
        path = make_photo(root / f"p{i}.jpg", (20 * i, 200 - 20 * i, 90), seed=i)
        st = path.stat()
        out.append(ImageFile(path, st.st_size, st.st_mtime_ns))
    return out


def digest_of(f: ImageFile) -> str:
    from novelfind.extract.stage import decode_file

    return decode_file(str(f.path), frozenset()).digest


def write_old(path: Path, key: str, rows: list[tuple[ImageFile, np.ndarray]]) -> None:
    """A cache as an earlier version wrote it: vectors under ``key``."""
    with FeatureCache(path, key) as old:
        old.put_many([(f, digest_of(f), v) for f, v in rows])


# --------------------------------------------------------------------------- FeatureCache.upgrade


def test_upgrade_renames_the_same_vectors_and_keeps_what_the_new_key_has(tmp_path):
    files = library(tmp_path / "lib", 3)
    path = tmp_path / "c.sqlite"
    write_old(path, OLD_POOLED, [(files[0], np.full(6, 1.0)), (files[1], np.full(6, 2.0))])
    write_old(path, NEW, [(files[1], np.full(6, 5.0))])
    with FeatureCache(path, NEW) as store:
        assert store.model_keys() == {OLD_POOLED: 6, NEW: 6}
        assert store.upgrade(OLD_POOLED) == 1
        got = store.get_many_by_stat(files)
        assert got[0].tolist() == [1.0] * 6 and got[1].tolist() == [5.0] * 6 and got[2] is None
        assert store.info()["models"] == {NEW: 2}  # the old key is gone, nothing left under it
        assert store.upgrade(OLD_POOLED) == 0  # done once


def test_upgrade_in_several_transactions(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_models, "UPGRADE_CHUNK", 2)
    files = library(tmp_path / "lib", 5)
    path = tmp_path / "c.sqlite"
    write_old(path, OLD_POOLED, [(f, np.full(6, float(i))) for i, f in enumerate(files)])
    with FeatureCache(path, NEW, dtype="float16") as store:
        assert store.upgrade(OLD_POOLED) == 5
        assert [v[0] for v in store.get_many_by_stat(files)] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert store.info()["models"] == {NEW: 5}


def test_vectors_of_another_length_are_never_renamed(tmp_path):
    files = library(tmp_path / "lib", 2)
    path = tmp_path / "c.sqlite"
    write_old(path, OLD_POOLED, [(files[0], np.full(4, 1.0))])  # 4-d: not what NEW holds
    write_old(path, NEW, [(files[1], np.full(6, 2.0))])
    with FeatureCache(path, NEW) as store:
        assert store.upgrade(OLD_POOLED) == 0
        assert store.get_many_by_stat(files)[0] is None
        assert store.info()["models"] == {OLD_POOLED: 1, NEW: 1}


def test_digests_under_and_drop_model(tmp_path):
    files = library(tmp_path / "lib", 3)
    path = tmp_path / "c.sqlite"
    write_old(path, OLD_LOGITS, [(files[0], np.full(2, SENTINEL)), (files[2], np.full(2, SENTINEL))])
    with FeatureCache(path, NEW) as store:
        assert set(store.digests_under(files, OLD_LOGITS)) == {digest_of(files[0]), digest_of(files[2])}
        assert len(store.digests_under(files, NEW)) == 0
        assert store.drop_model(OLD_LOGITS) == 2
        assert len(store.digests_under(files, OLD_LOGITS)) == 0
        assert store.info()["models"] == {} and store.info()["entries"] == 0


# --------------------------------------------------------------------------- a scan over an old cache


def test_a_cache_of_the_earlier_version_is_upgraded_or_extracted_again_with_one_notice(tmp_path):
    files = library(tmp_path / "lib", 6)
    path = tmp_path / "c.sqlite"
    model = PooledFake()
    pooled = model.encode(np.stack([stage.decode_file(str(f.path), frozenset()).pixels for f in files]))
    # the earlier version: photos 0, 1 scanned with --feature pooled, 2, 3 with --feature logits, 4 both
    write_old(path, OLD_POOLED, [(files[i], pooled[i]) for i in (0, 1, 4)])
    write_old(path, OLD_LOGITS, [(files[i], np.full(2, SENTINEL)) for i in (2, 3, 4)])
    with FeatureCache(path) as store:
        before = store.info()["models"]
    assert before == {OLD_POOLED: 3, OLD_LOGITS: 3}  # `cache info` shows both kinds as they are
    notes: list[str] = []
    model.images = 0
    with FeatureCache(path, NEW) as store:
        res = extract(files, model, store, workers=0, on_warning=notes.append)
        assert store.info()["models"] == {NEW: 6}  # upgraded, re-extracted; the old entries dropped
    assert (res.from_cache, res.extracted, model.images) == (3, 3, 3)
    assert notes == [
        "2 photos were extracted again: the cache held only their classifier output (an earlier "
        "version's), and novelfind now keeps the pooled vector (one per photo)"
    ]
    assert res.features.shape == (6, 2)
    np.testing.assert_allclose(res.features, model.head(pooled), rtol=1e-5)  # never the old output
    assert not (res.features == SENTINEL).any()
    # a second scan: everything from the cache, no notice
    notes.clear()
    with FeatureCache(path, NEW) as store:
        again = extract(files, model, store, workers=0, on_warning=notes.append)
    assert (again.from_cache, again.extracted, notes) == (6, 0, [])
    np.testing.assert_array_equal(again.features, res.features)


def test_features_read_back_from_the_cache_are_the_head_of_the_stored_vectors(tmp_path):
    files = library(tmp_path / "lib", 4)
    model = PooledFake()
    with FeatureCache(tmp_path / "c.sqlite", NEW) as store:
        kept = extract(files, model, store, workers=0)
        streamed = extract(files, model, store, workers=0, keep_vectors=False)
        assert streamed.features is None
        view = stage.featured(store, model)
        rows = np.concatenate(list(view.rows_by_stat(streamed.files, 3)))  # (4, 2)
        stored = np.concatenate(list(store.rows_by_stat(streamed.files, 3)))  # (4, 6): what is kept
        assert view.path == store.path and view.writes_disabled is False
    assert stored.shape == (4, 6) and rows.shape == (4, 2)
    np.testing.assert_allclose(rows, kept.features, rtol=1e-6)


def test_an_extractor_without_encode_stores_what_it_returns(tmp_path):
    files = library(tmp_path / "lib", 2)
    model = PooledFake()
    plain = type("Plain", (), {"model_key": "plain", "dim": 6, "__call__": lambda self, b: model.encode(b)})()
    with FeatureCache(tmp_path / "c.sqlite", "plain") as store:
        res = extract(files, plain, store, workers=0)
        assert stage.featured(store, plain) is store
    raw = sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT dim FROM vectors").fetchall()
    assert res.features.shape == (2, 6) and raw == [(6,), (6,)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_one_vector_per_photo_in_the_cache_dtype(tmp_path, dtype):
    files = library(tmp_path / "lib", 3)
    with FeatureCache(tmp_path / "c.sqlite", NEW, dtype=dtype) as store:
        extract(files, PooledFake(), store, workers=0)
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    rows = conn.execute("SELECT model_key, length(data) FROM vectors").fetchall()
    assert sorted(rows) == [(NEW, 6 * (2 if dtype == "float16" else 4))] * 3
    # a file made for float16 vectors has pages that hold several of them; float32 keeps SQLite's default
    assert conn.execute("PRAGMA page_size").fetchone()[0] == (16384 if dtype == "float16" else 4096)
    conn.close()
    with FeatureCache(tmp_path / "c.sqlite", NEW, dtype="float32" if dtype == "float16" else "float16"):
        pass  # opened in the other dtype: the file keeps its pages
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == (16384 if dtype == "float16" else 4096)
    conn.close()


def test_the_command_line_says_it_once_on_stderr(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import novelfind.model.features
    from novelfind.cli.group import cli

    files = library(tmp_path / "lib", 6)
    model = PooledFake()
    monkeypatch.setattr(novelfind.model.features, "build_extractor", lambda **kwargs: model)
    cache = tmp_path / "c.sqlite"
    write_old(cache, OLD_LOGITS, [(f, np.full(2, SENTINEL)) for f in files[:4]])
    result = CliRunner().invoke(
        cli, ["scan", str(tmp_path / "lib"), "--k", "2", "--dedup", "0", "--cache", str(cache)]
    )
    assert result.exit_code == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "extracted again" in line] == [
        "warning: 4 photos were extracted again: the cache held only their classifier output (an earlier "
        "version's), and novelfind now keeps the pooled vector (one per photo)"
    ]
    assert len(result.stdout.splitlines()) == 2 and "extracted again" not in result.stdout


def test_the_notice_counts_what_the_summary_counts_when_copies_share_their_bytes(tmp_path, monkeypatch):
    """Byte-identical copies are one content: the notice and the summary's "extracted" agree."""
    import shutil

    from click.testing import CliRunner

    import novelfind.model.features
    from novelfind.cli.group import cli

    lib = tmp_path / "lib"
    files = library(lib, 4)
    for f in files[:2]:  # copies in another folder, read in another batch than their originals
        (lib / "zz-copies").mkdir(exist_ok=True)
        shutil.copy2(f.path, lib / "zz-copies" / f.path.name)
    model = PooledFake()
    monkeypatch.setattr(novelfind.model.features, "build_extractor", lambda **kwargs: model)
    cache = tmp_path / "c.sqlite"
    copies = [ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(lib.glob("zz-copies/*"))]
    write_old(cache, OLD_LOGITS, [(f, np.full(2, SENTINEL)) for f in files + copies])
    result = CliRunner().invoke(
        cli, ["scan", str(lib), "--k", "2", "--cache", str(cache), "--batch-size", "2", "--workers", "0"]
    )
    assert result.exit_code == 0, result.stderr
    notice = [line for line in result.stderr.splitlines() if "extracted again" in line]
    summary = result.stderr.splitlines()[-1]
    extracted = int(summary.split(" extracted")[0].rsplit(" ", 1)[1])
    assert notice and notice[0].startswith(f"warning: {extracted} photos were extracted again")
    assert summary.startswith("6 photos (6 files) found, 2 read from cache, 4 extracted, 0 failed")


def test_cache_info_shows_what_this_version_cannot_use_and_what_it_costs(tmp_path):
    """An earlier version's classifier outputs are listed as stale with the photos to extract again
    (byte-identical copies once); its pooled vectors as renamed in place; another model's left alone."""
    import shutil

    from click.testing import CliRunner

    from novelfind.cli.group import cli
    from novelfind.model import weights

    lib = tmp_path / "lib"
    files = library(lib, 4)
    copy = lib / "copy.jpg"
    shutil.copy2(files[0].path, copy)
    files.append(ImageFile(copy, copy.stat().st_size, copy.stat().st_mtime_ns))
    current, former = weights.model_key_for(), weights.former_keys()
    (logits,), (pooled,) = former.other, former.same
    cache = tmp_path / "c.sqlite"
    write_old(cache, logits, [(f, np.full(2, SENTINEL)) for f in files])
    write_old(cache, pooled, [(files[3], np.full(6, 1.0))])  # one photo also scanned with --feature pooled
    write_old(cache, "another-model", [(files[1], np.full(3, 1.0))])
    result = CliRunner().invoke(cli, ["cache", "info", "--cache", str(cache)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"stale\t{logits}\t4\tthis version cannot use them; 3 photos to extract again" in lines
    assert f"upgrade\t{pooled}\t1\tthe next scan renames these in place; nothing is read again" in lines
    assert not [line for line in lines if "another-model" in line and not line.startswith("model\t")]
    assert result.stderr == (
        "note: 3 photos in this cache have only vectors an earlier version made, which this one cannot use: "
        "the next scan of their library extracts them again (about as long as a first scan) and drops the "
        "old entries\n"
    )
    assert current not in result.stdout


# --------------------------------------------------------------------------- capture dates


def test_a_cache_without_the_dates_table_gets_it_in_place_and_keeps_its_vectors(tmp_path):
    from novelfind.extract.header_dates import scan_dates
    from novelfind.media import dates
    from novelfind.media.walk import FileList

    files = library(tmp_path / "lib", 3)
    path = tmp_path / "c.sqlite"
    write_old(path, NEW, [(f, np.full(6, float(i))) for i, f in enumerate(files)])
    with sqlite3.connect(path) as conn:  # as a cache written before the dates table
        conn.execute("DROP TABLE dates")
    reads: list[str] = []

    def read(p: str) -> dates.Taken:
        reads.append(p)
        return dates.Taken(1.6e9 + len(reads), "exif", 3600)

    with FeatureCache(path, NEW) as store:
        assert [hit for _, hit in store.dates_by_stat(files)] == [None] * 3  # the table is back, empty
        assert [d for d, _ in store.dates_by_stat(files)] == [digest_of(f) for f in files]
        first = scan_dates(FileList(files), store, read=read)
        assert [v.tolist() for v in store.get_many_by_stat(files)] == [[float(i)] * 6 for i in range(3)]
    assert len(reads) == 3 and first.sources == ["exif"] * 3
    with FeatureCache(path, NEW) as store:  # the next scan: no header read
        again = scan_dates(FileList(files), store, read=read)
        assert store.prune() == 0
    assert len(reads) == 3
    assert again.taken.tolist() == first.taken.tolist() == [1.6e9 + 1, 1.6e9 + 2, 1.6e9 + 3]
    assert again.iso(0) == "2020-09-13T13:26:41+01:00"
    files[0].path.unlink()
    with FeatureCache(path, NEW) as store:  # a pruned file takes its date with it
        assert store.prune() == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM dates").fetchone()[0] == 2
